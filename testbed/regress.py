"""Verdicts on a run's summary: the scenario's own expectations, and the comparison against a
stored baseline with per-metric tolerances. Pure functions of summary dicts."""
from __future__ import annotations

import json
import operator
import os
from dataclasses import dataclass
from pathlib import Path

BASELINE_VERSION = 1
BASELINE_DIR = Path(os.environ.get("TESTBED_BASELINE_DIR", Path(__file__).resolve().parent.parent / "baselines"))

_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
        "!=": operator.ne}
MISSING = object()


def metric(summary: dict, path: str):
    """summary["a"]["b"]... for the dotted path "a.b..."; list items by index; MISSING if absent."""
    node = summary
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return MISSING
    return node


def check_expectations(summary: dict, expects: list[dict]) -> list[dict]:
    out = []
    for e in expects:
        actual = metric(summary, e["metric"])
        want = metric(summary, e["than"]) if e.get("than") else e["value"]
        if actual is MISSING or actual is None:
            ok, why = False, "not in the summary"
        elif want is MISSING or want is None:
            # nothing to compare with (e.g. no bulk traffic in this run): the expectation does not apply
            ok, why = True, f"not applicable: no {e['than']} in this run"
        else:
            try:
                ok, why = bool(_OPS[e["op"]](actual, want)), ""
            except TypeError:
                ok, why = False, "not comparable"
        out.append({"metric": e["metric"], "op": e["op"], "expected": e.get("than") or e["value"],
                    "actual": None if actual is MISSING else actual,
                    "than_value": None if not e.get("than") or want is MISSING else want, "ok": ok, "why": why})
    return out


@dataclass(frozen=True)
class Tolerance:
    better: str        # "higher", "lower", "near" (a change either way is suspect) or "equal"
    rel: float = 0.0   # allowed relative worsening
    abs: float = 0.0   # and absolute


# What a baseline keeps and how far each may move the wrong way before it is a regression.
TRACKED = {
    "collective.bound_ratio": Tolerance("higher", rel=0.10),
    "collective.mean_time_s": Tolerance("lower", rel=0.15),
    # latencies and queues vary most from run to run on a busy 2-core machine (measured: the
    # priority-mix p50 1.1 ms in one run, 2.0 ms in the next)
    "latency_us.p50": Tolerance("lower", rel=1.0, abs=500),
    "latency_us.p99": Tolerance("lower", rel=1.0, abs=1000),
    "packets.lost": Tolerance("lower", rel=0.5, abs=5),
    "packets.retransmitted": Tolerance("lower", rel=0.5, abs=20),
    "packets.timeouts": Tolerance("lower", rel=0.5, abs=2),
    "qos.queues.buffer_drops": Tolerance("lower", rel=0.5, abs=5),
    # marks and pauses follow the congestion: far fewer is as suspect as far more (a policy gone)
    "qos.ecn.marked": Tolerance("near", rel=0.5, abs=50),
    "qos.pfc.pauses": Tolerance("near", rel=0.9, abs=20),
    "transport.steady_state.jain_index": Tolerance("higher", abs=0.05),
    "transport.steady_state.bottleneck_queue.p99_bytes": Tolerance("lower", rel=1.0, abs=50000),
    "status": Tolerance("equal"),
}


def baseline_of(summary: dict) -> dict:
    return {"baseline_version": BASELINE_VERSION, "scenario": summary["scenario"], "run_id": summary["run_id"],
            "git_commit": summary.get("git_commit"),
            "metrics": {p: v for p in TRACKED if (v := metric(summary, p)) is not MISSING and v is not None}}


def compare(summary: dict, baseline: dict) -> list[dict]:
    """One row per tracked metric of the baseline: baseline, now, allowed bound, verdict."""
    rows = []
    for path, base in baseline["metrics"].items():
        tol = TRACKED.get(path)
        now = metric(summary, path)
        if tol is None:
            continue
        if now is MISSING or now is None:
            rows.append({"metric": path, "baseline": base, "now": None, "limit": None, "verdict": "missing"})
            continue
        if tol.better == "equal":
            ok, limit = now == base, base
        elif tol.better == "near":
            margin = max(abs(base) * tol.rel, tol.abs)
            limit = [base - margin, base + margin]
            ok = limit[0] <= now <= limit[1]
        elif tol.better == "higher":
            limit = base - max(abs(base) * tol.rel, tol.abs)
            ok = now >= limit
        else:
            limit = base + max(abs(base) * tol.rel, tol.abs)
            ok = now <= limit
        rows.append({"metric": path, "baseline": base, "now": now, "limit": limit,
                     "verdict": "ok" if ok else "regressed"})
    return rows


def suite() -> list[str]:
    """The regression suite: every scenario with expectations or a stored baseline."""
    from testbed.scenario import list_scenarios, load_scenario
    return [n for n in list_scenarios() if load_scenario(n).expect or load_baseline(n) is not None]


def load_baseline(name: str, directory: Path = BASELINE_DIR) -> dict | None:
    p = directory / f"{name}.json"
    return json.loads(p.read_text()) if p.exists() else None


def save_baseline(summary: dict, directory: Path = BASELINE_DIR) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    p = directory / f"{summary['scenario']}.json"
    p.write_text(json.dumps(baseline_of(summary), indent=1, sort_keys=True) + "\n")
    return p
