"""The training view of a run whose workload computes: how much of each iteration its workers spent
waiting on communication rather than computing.

sync_share of an iteration = the mean, over the hosts that compute in it (steps tagged "compute":
a pipeline's stages, a parameter server's workers, a trace's ranks; not a server's aggregation), of
1 - (that host's compute time) / (the iteration's time, first release to last completion). A host
that computes throughout has 0; one that computes a tenth of the iteration waits 0.9 of it. The
compute times are the steps' own (start to completion in the data plane's clock: a host runs its
steps one at a time, so a step released while another ran starts when that one ends, first_tx_ns).
"""
from __future__ import annotations

import pandas as pd

from testbed.traffic.plan import COMPUTE_TAG

DEFINITION = ("per iteration, the mean over the hosts that compute of 1 - compute time / iteration time "
              "(first release to last completion)")


def compute_start_ns(steps: pd.DataFrame) -> pd.Series:
    """When each compute step began on its host's stream (first_tx_ns; a run recorded before the
    streams ran every step at its release)."""
    return steps["first_tx_ns"].fillna(steps["release_ns"]) if "first_tx_ns" in steps else steps["release_ns"]


def training_section(msgs: pd.DataFrame, iters: pd.DataFrame) -> dict | None:
    """summary.training: the synchronisation share per complete iteration and its mean; None for a
    workload without compute."""
    if "tag" not in msgs:
        return None
    compute = msgs[(msgs["tag"] == COMPUTE_TAG) & msgs["complete"]]
    if compute.empty:
        return None
    by_it, exposed = [], []
    for _, it in iters.iterrows():
        steps = compute[compute["iteration"] == it["iteration"]]
        if not it["complete"] or not it["time_s"] > 0 or steps.empty:
            by_it.append(None)
            exposed.append(None)
            continue
        start = compute_start_ns(steps)
        busy_s = ((steps["complete_ns"] - start).astype("float64") / 1e9).groupby(steps["src"]).sum()
        by_it.append(float((1 - busy_s / it["time_s"]).clip(lower=0).mean()))
        exposed.append(float((it["time_s"] - busy_s).clip(lower=0).mean()))
    done = [x for x in by_it if x is not None]
    shown = [x for x in exposed if x is not None]
    return {"sync_share": sum(done) / len(done) if done else None, "sync_share_by_iteration": by_it,
            # the same wait in seconds: what communication added to a worker's iteration, not hidden
            # behind its compute
            "exposed_comm_s": sum(shown) / len(shown) if shown else None, "exposed_comm_s_by_iteration": exposed,
            "hosts_computing": int(compute["src"].nunique()), "definition": DEFINITION}
