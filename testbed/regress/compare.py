"""Two policies, or two runs, side by side: "policy A or policy B on this workload?". Each key metric
of each group (its median, least and largest value over the group's runs, in hardware time), and
whether the two differ beyond their run-to-run spread:

- with 4 or more runs a side, by a two-sided Mann-Whitney U test at p < ALPHA (no assumption on the
  metric's distribution, which on this machine is skewed by the runs it fell behind in; with 5 runs
  a side, p < 0.01 needs the groups apart, every run of one beyond every run of the other);
- with fewer, by the scenario's own measured spread ([[tolerance]] tables, testbed spread) where it
  has one: the medians further apart than it;
- else not judged, and said so.

A performance metric is compared over each group's faithful runs only, a policy metric over all of
them, as the regression suite judges them (testbed.regress.baselines.spread)."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from testbed.analysis.document import _num
from testbed.metrics import metric_class, tolerance_of
from testbed.regress.baselines import MISSING, baseline_of, metric

ALPHA = 0.01
MIN_TEST_RUNS = 4
COMPARE_VERSION = 1

# beyond what baselines track, in hardware time: (path, which way is better); all performance
EXTRA = (
    ("dilation.metrics.fct_p50.hardware_us", "lower"),
    ("dilation.metrics.fct_p99.hardware_us", "lower"),
    ("dilation.metrics.busbw.hardware_gbps", "higher"),
    ("dilation.metrics.bottleneck_queueing_delay_p99.hardware_us", "lower"),
    ("dilation.metrics.paused_total.hardware_us", "lower"),
    ("fct_slowdown.all.p50", "lower"),
    ("fct_slowdown.all.p99", "lower"),
)
_EXTRA_BETTER = dict(EXTRA)


@dataclass(frozen=True)
class Row:
    metric: str
    kind: str            # performance or policy
    better: str          # higher, lower, near, equal
    a: list[float]
    b: list[float]
    p_value: float | None
    verdict: str         # "B lower", "B higher", "same", "within spread", "not judged: ..."
    why: str

    def to_dict(self) -> dict:
        def stats(v):
            return ({"runs": len(v), "median": statistics.median(v), "min": min(v), "max": max(v)} if v
                    else {"runs": 0})
        return {"metric": self.metric, "class": self.kind, "better": self.better, "a": stats(self.a),
                "b": stats(self.b), "p_value": self.p_value, "verdict": self.verdict, "why": self.why}


def values_of(s: dict) -> dict[str, float]:
    """A run's key metrics: what a baseline keeps (in hardware time), and the EXTRA ones."""
    out = {p: v for p, v in baseline_of(s)["metrics"].items() if not isinstance(v, str)}
    for path, _ in EXTRA:
        v = metric(s, path)
        if v is not MISSING and v is not None:
            out[path] = v
    return {p: float(v) for p, v in out.items() if isinstance(v, (int, float))}


def kind_of(path: str) -> str:
    return "performance" if path in _EXTRA_BETTER else metric_class(path)


def better_of(path: str) -> str:
    if path in _EXTRA_BETTER:
        return _EXTRA_BETTER[path]
    tol = tolerance_of(path)
    return tol.better if tol else "near"


# groups this small are tested over every way of splitting their runs (exact, ties or not)
EXACT_SPLITS = 15_000  # 8 runs a side: 12870 splits, 0.1 s; 10 a side would take 4 s a metric


def mann_whitney_p(a: list[float], b: list[float]) -> float:
    """Two-sided p of the Mann-Whitney U test: exact, over every split of the pooled runs, where
    there are at most EXACT_SPLITS (scipy's own exact method assumes no ties, and counts and
    rounded times tie often: with a tie it falls back to the normal approximation, which gives
    5 runs against 5 that are wholly apart p = 0.012 instead of 2/252); the normal approximation
    beyond."""
    from scipy.stats import PermutationMethod, mannwhitneyu
    if math.comb(len(a) + len(b), len(a)) <= EXACT_SPLITS:
        method = PermutationMethod(n_resamples=math.inf)
    else:
        method = "asymptotic"
    return float(mannwhitneyu(a, b, alternative="two-sided", method=method).pvalue)


def compare_groups(a: list[dict], b: list[dict], spreads: dict[str, float] | None = None) -> list[Row]:
    """One Row per key metric either group has. spreads: metric -> the scenario's measured
    tolerance (abs), for groups too small to test."""
    spreads = spreads or {}
    va = [(values_of(s), s["fidelity"]["verdict"] == "kept_up") for s in a]
    vb = [(values_of(s), s["fidelity"]["verdict"] == "kept_up") for s in b]
    paths = sorted({p for v, _ in va + vb for p in v})
    rows = []
    for path in paths:
        kind = kind_of(path)

        def take(group):
            return [v[path] for v, faithful in group if path in v and (faithful or kind == "policy")]
        xa, xb = take(va), take(vb)
        better = better_of(path)
        if not xa or not xb:
            rows.append(Row(path, kind, better, xa, xb, None, "not judged",
                            "no faithful run on one side" if kind == "performance" else "missing on one side"))
            continue
        ma, mb = statistics.median(xa), statistics.median(xb)
        direction = "B higher" if mb > ma else "B lower"
        if len(set(xa) | set(xb)) == 1:
            rows.append(Row(path, kind, better, xa, xb, None, "same", "all runs equal"))
        elif min(len(xa), len(xb)) >= MIN_TEST_RUNS:
            p = mann_whitney_p(xa, xb)
            if p < ALPHA:
                rows.append(Row(path, kind, better, xa, xb, p, direction,
                                f"Mann-Whitney p = {p:.3g} < {ALPHA:g}"))
            else:
                rows.append(Row(path, kind, better, xa, xb, p, "within spread",
                                f"Mann-Whitney p = {p:.3g} >= {ALPHA:g}"))
        elif path in spreads:
            if abs(mb - ma) > spreads[path]:
                rows.append(Row(path, kind, better, xa, xb, None, direction,
                                f"medians {abs(mb - ma):.4g} apart, beyond the scenario's measured spread "
                                f"{spreads[path]:.4g}"))
            else:
                rows.append(Row(path, kind, better, xa, xb, None, "within spread",
                                f"medians {abs(mb - ma):.4g} apart, within the scenario's measured spread "
                                f"{spreads[path]:.4g}"))
        else:
            rows.append(Row(path, kind, better, xa, xb, None, "not judged",
                            f"{min(len(xa), len(xb))} run(s) on a side and no measured spread: run "
                            f"{MIN_TEST_RUNS} or more of each"))
    return rows


def which_better(row: Row) -> str | None:
    """'A' or 'B' where the difference is beyond the spread and the metric has a better direction."""
    if row.verdict not in ("B higher", "B lower") or row.better not in ("higher", "lower"):
        return None
    return "B" if (row.verdict == "B higher") == (row.better == "higher") else "A"


def fmt(v: float) -> str:
    return _num(float(v), "{:.4g}")   # the run document's numbers, to four digits


def label(path: str) -> str:
    """A metric's name in the table: the hardware-time ones of summary.dilation by their own name
    and unit (the JSON keeps every path whole)."""
    if path.startswith("dilation.metrics."):
        name, unit = path.removeprefix("dilation.metrics.").rsplit(".hardware_", 1)
        return f"{name} ({ {'us': 'us', 'gbps': 'Gb/s', 's': 's'}.get(unit, unit)})"
    return path


def _cell(v: list[float]) -> str:
    if not v:
        return "-"
    med = statistics.median(v)
    return fmt(med) if min(v) == max(v) else f"{fmt(med)} [{fmt(min(v))} .. {fmt(max(v))}]"


def document(rows: list[Row], a: dict, b: dict) -> list[tuple]:
    """The comparison as document blocks (testbed.analysis.document: console, HTML). a and b:
    {"label", "runs", "faithful"} of each group."""
    better = {"A": [r.metric for r in rows if which_better(r) == "A"],
              "B": [r.metric for r in rows if which_better(r) == "B"]}
    apart = [r.metric for r in rows if r.verdict in ("B higher", "B lower") and which_better(r) is None]
    unjudged = [r.metric for r in rows if r.verdict == "not judged"]
    out = [("h", 1, f"Compare: A = {a['label']}, B = {b['label']}"),
           ("p", f"A: {a['runs']} run(s), {a['faithful']} faithful; B: {b['runs']} run(s), {b['faithful']} "
                 f"faithful. Each cell: median [least .. largest] over the runs (a performance metric over the "
                 f"faithful ones only), times in hardware time. Beyond the spread: a two-sided Mann-Whitney U "
                 f"test at p < {ALPHA:g} with {MIN_TEST_RUNS}+ runs a side, else the scenario's measured "
                 f"spread ([[tolerance]])."),
           ("table", ("metric", "class", "A", "B", "B vs A", "test", "verdict"),
            [(label(r.metric), "perf" if r.kind == "performance" else r.kind, _cell(r.a), _cell(r.b),
              (f"{(statistics.median(r.b) / statistics.median(r.a) - 1):+.1%}"
               if r.a and r.b and statistics.median(r.a) else "-"),
              f"p = {r.p_value:.2g}" if r.p_value is not None else r.why,
              f"{r.verdict}: {which_better(r)} better" if which_better(r) else r.verdict)
             for r in rows])]
    words = []
    for side in ("A", "B"):
        if better[side]:
            words.append(f"{side} is better beyond the spread on {', '.join(map(label, better[side]))}")
    if apart:
        words.append(f"they differ, with no better direction, on {', '.join(map(label, apart))}")
    if not better["A"] and not better["B"] and not apart:
        words.append("no metric differs beyond the run-to-run spread")
    if unjudged:
        words.append(f"not judged: {', '.join(map(label, unjudged))}")
    out.append(("p", "; ".join(words) + "."))
    return out
