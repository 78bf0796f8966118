"""The parallel layout of a pipeline job with tensor and expert parallelism across hosts: its
per-layer collectives against their own bounds, and where each iteration's time went.

- layer_collectives: every TP all-reduce, all-gather, reduce-scatter and EP all-to-all of a step is
  an instance (Message.instance); an instance's time runs from its first message's release (the
  first member ready) to its last message's arrival, so a member that comes late to it counts. Its
  bound is the ring's or the all-to-all's bandwidth term for one member's bytes at the link rate.
- iteration_split: each computing host's iteration, cut by what it was doing, in priority order:
  computing, then in a TP collective, an EP all-to-all, a pipeline transfer (sent or received), the
  DP AllReduce; what is left is idle (the pipeline's bubble, or waiting for a peer). The shares are
  the mean over hosts and sum to 1.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from testbed.analysis.training import compute_start_ns

SPLIT_ORDER = ("compute", "tp", "ep", "pp", "dp")


def layer_collectives(msgs: pd.DataFrame, tp: int, ep: int, tp_bytes: int, a2a_bytes: int, bw_bps: float) -> dict:
    """Per kind (tp_allreduce, tp_allgather, tp_reducescatter, ep_alltoall): instances per iteration,
    each member's bytes, the bound, and the instances' measured times."""
    if "instance" not in msgs:
        return {}
    layer = msgs[(msgs["instance"] >= 0) & msgs["complete"]]
    out = {}
    for kind, g in layer.groupby("group", sort=True):
        n, buf = (ep, a2a_bytes) if kind == "ep_alltoall" else (tp, tp_bytes)
        frac = {"tp_allreduce": 2 * (n - 1) / n}.get(kind, (n - 1) / n)
        spans = g.groupby("instance").agg(start=("release_ns", "min"), end=("complete_ns", "max"))
        t = ((spans["end"] - spans["start"]).astype("float64") / 1e9).to_numpy()
        bound = frac * buf * 8 / bw_bps
        per_it = g.groupby("iteration")["instance"].nunique()
        out[kind] = {"members": n, "instances_per_iteration": int(per_it.max()),
                     "bytes_per_member": int(round(frac * buf)), "bound_s": bound,
                     "time_s_p50": float(np.median(t)), "time_s_p99": float(np.percentile(t, 99)),
                     "time_s_mean": float(t.mean()), "bound_ratio": bound / float(t.mean()) if t.mean() > 0 else None}
    return out


def category(msgs: pd.DataFrame) -> pd.Series:
    group = msgs["group"].fillna("") if "group" in msgs else pd.Series("", index=msgs.index)
    cat = pd.Series("", index=msgs.index, dtype=object)
    cat[msgs["op"] == "compute"] = "compute"
    cat[group.str.startswith("tp_")] = "tp"
    cat[group == "ep_alltoall"] = "ep"
    cat[msgs["op"] == "p2p"] = "pp"
    cat[group.str.startswith("dp_allreduce")] = "dp"
    return cat


def _union_s(iv: np.ndarray) -> float:
    """Total length of the union of [start, end) intervals, ns in, s out."""
    if not len(iv):
        return 0.0
    iv = iv[np.argsort(iv[:, 0])]
    total, lo, hi = 0, iv[0, 0], iv[0, 1]
    for a, b in iv[1:]:
        if a > hi:
            total += hi - lo
            lo, hi = a, b
        else:
            hi = max(hi, b)
    return (total + hi - lo) / 1e9


def iteration_split(msgs: pd.DataFrame, iters: pd.DataFrame) -> dict:
    """Shares of each complete iteration: compute, tp, ep, pp, dp and idle, the mean over the
    hosts that compute."""
    cat = category(msgs)
    by_it = []
    for _, it in iters.iterrows():
        if not it["complete"] or not it["time_s"] > 0:
            by_it.append(None)
            continue
        lo, hi = int(it["start_ns"]), int(it["end_ns"])
        sel = (msgs["iteration"] == it["iteration"]) & (cat != "") & msgs["complete"]
        m, c = msgs[sel], cat[sel]
        hosts = m.loc[c == "compute", "src"].unique()
        shares = {k: [] for k in (*SPLIT_ORDER, "idle")}
        for h in hosts:
            mine = (m["src"] == h) | (m["dst"] == h)
            covered = np.empty((0, 2), dtype=np.int64)
            before = 0.0
            for k in SPLIT_ORDER:
                rows = m[mine & (c == k)]
                begin = compute_start_ns(rows) if k == "compute" else rows["release_ns"]
                iv = np.stack([begin.astype("int64").clip(lo, hi).to_numpy(),
                               rows["complete_ns"].astype("int64").clip(lo, hi).to_numpy()], axis=1) \
                    if len(rows) else np.empty((0, 2), dtype=np.int64)
                covered = np.concatenate([covered, iv])
                now = _union_s(covered)
                shares[k].append((now - before) / it["time_s"])
                before = now
            shares["idle"].append(max(0.0, 1 - before / it["time_s"]))
        by_it.append({k: float(np.mean(v)) for k, v in shares.items()})
    done = [x for x in by_it if x is not None]
    mean = {k: float(np.mean([x[k] for x in done])) for k in (*SPLIT_ORDER, "idle")} if done else None
    return {"share": mean, "by_iteration": by_it, "order": [*SPLIT_ORDER, "idle"],
            "definition": "each computing host's iteration cut by what it was doing, in this order of "
                          "priority (time in two at once counts for the first), the mean over hosts"}
