"""Dilation invariance (docs/dilation.md): the same scenarios at D, 2D and 4D, where D is the one
auto picks here, must agree in hardware time within their run-to-run spread. Time-Warped Network
Emulation (NSDI'06), DieCast and VT-Mininet validate their dilation the same way."""
from __future__ import annotations

import statistics

from bench import scenarios
from testbed.run.calibrate import resolve
from testbed.scenario import load_scenario

# (scenario, overrides): the flagship, an incast with DCQCN, an incast with PFC, a pipeline
SWEEP = (("allreduce-torus", ["workload.iterations=2"]), ("dcqcn-incast", []), ("incast-pfc", []),
         ("pipeline-fattree", []))
FACTORS = (1, 2, 4)


def _get(s: dict, path: str):
    node = s
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def metrics(s: dict) -> dict:
    """What must not depend on D, each in hardware units (or none: ratios, bytes, counts per MB)."""
    mb = (s.get("goodput") or {}).get("payload_bytes_delivered", 0) / 1e6
    qos = s.get("qos") or {}
    return {
        "iteration_s": _get(s, "dilation.metrics.iteration_s.hardware_s"),
        "bound_ratio": _get(s, "collective.bound_ratio"),
        "fct_p50_us": _get(s, "dilation.metrics.fct_p50.hardware_us"),
        "fct_p99_us": _get(s, "dilation.metrics.fct_p99.hardware_us"),
        "queue_p99_bytes": _get(s, "transport.steady_state.bottleneck_queue.p99_bytes"),
        "ecn_marks_per_mb": (qos.get("ecn") or {}).get("marked", 0) / mb if mb else None,
        "pauses_per_mb": (qos.get("pfc") or {}).get("pauses", 0) / mb if mb else None,
        "jain_index": _get(s, "transport.steady_state.jain_index"),
    }


def sweep(runs: int, log) -> dict:
    out = {}
    for name, sets in SWEEP:
        auto = resolve(load_scenario(name, sets), log=log).dilation.factor
        rows = []
        for k in FACTORS:
            # D's own spread needs its runs; the other factors are held to it
            for i in range(runs if k == 1 else max(1, runs // 2)):
                run_dir, s = scenarios.run_named(name, sets + [f"run.dilation={auto * k:g}", "run.report=false"],
                                                 log)
                m = metrics(s)
                rows.append({"factor": auto * k, "multiple": k, "run": str(run_dir), "status": s["status"],
                             "valid": s["fidelity"]["valid"], **m})
                log(f"{name} at {k}D = {auto * k:g}, run {i + 1}: {s['status']}, "
                    + ", ".join(f"{a} {b:.4g}" for a, b in m.items() if b is not None))
        out[name] = {"auto_factor": auto, "sets": sets, "rows": rows, "table": table(rows)}
    return out


def table(rows: list[dict]) -> dict:
    """Per metric and multiple of D: [min, median, max] over the valid runs, and whether every
    multiple's range overlaps D's range widened by its own spread."""
    out = {}
    keys = [k for k in rows[0] if k not in ("factor", "multiple", "run", "status", "valid")] if rows else []
    for key in keys:
        per = {}
        for k in FACTORS:
            v = [r[key] for r in rows if r["multiple"] == k and r["valid"] and r[key] is not None]
            per[k] = [min(v), statistics.median(v), max(v)] if v else None
        base = per.get(1)
        agree = None
        if base and all(per.get(k) for k in FACTORS):
            spread = max(base[2] - base[0], 1e-12 + 0.0)
            agree = all(per[k][0] <= base[2] + spread and per[k][2] >= base[0] - spread for k in FACTORS[1:])
        out[key] = {"by_multiple": per, "agree": agree}
    return out
