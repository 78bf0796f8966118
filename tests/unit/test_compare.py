"""testbed compare: which metrics of two groups of runs differ beyond their run-to-run spread
(issue 27, item 4), on summaries made to differ by known amounts."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.regress.compare import compare_groups, mann_whitney_p, which_better

ROOT = Path(__file__).resolve().parents[2]


def run(bound, marked=100, lost=0, kept_up=True, factor=1000.0, mean_time_s=None, i=0):
    return {"scenario": "incast-ecn", "run_id": f"incast-ecn-{i}", "git_commit": "x", "status": "ok",
            "fidelity": {"verdict": "kept_up" if kept_up else "could_not_keep_up"},
            "dilation": {"factor": factor},
            "collective": {"bound_ratio": bound, "iterations_complete": 3,
                           "mean_time_s": mean_time_s if mean_time_s is not None else factor * 1e-3 / bound},
            "packets": {"lost": lost}, "qos": {"ecn": {"marked": marked}}}


def rows_by_metric(rows):
    return {r.metric: r for r in rows}


def test_five_runs_a_side_apart_are_called_different_and_the_better_side_named():
    a = [run(0.95 + 0.005 * i, marked=100 + i, i=i) for i in range(5)]
    b = [run(0.80 + 0.005 * i, marked=101 + i, i=i) for i in range(5)]
    r = rows_by_metric(compare_groups(a, b))
    bound = r["collective.bound_ratio"]
    assert bound.verdict == "B lower" and which_better(bound) == "A"
    assert bound.p_value == pytest.approx(2 / 252)     # exact: 2 of the C(10,5) orderings as extreme
    # hardware time: mean_time_s divided by D, so equal hardware times at different D are equal
    assert r["collective.mean_time_s"].verdict == "B higher" and which_better(r["collective.mean_time_s"]) == "A"
    # interleaved counts do not differ; identical ones are the same
    assert r["qos.ecn.marked"].verdict == "within spread"
    assert r["packets.lost"].verdict == "same" and r["collective.iterations_complete"].verdict == "same"


def test_a_dilated_run_compares_in_hardware_time():
    a = [run(0.9, factor=1000.0, mean_time_s=1.0 + 0.01 * i, i=i) for i in range(5)]
    b = [run(0.9, factor=2000.0, mean_time_s=2.0 + 0.02 * ((i + 2) % 5), i=i) for i in range(5)]
    r = rows_by_metric(compare_groups(a, b))["collective.mean_time_s"]
    assert sorted(r.a) == pytest.approx(sorted(r.b)) and r.verdict == "within spread"


def test_an_unfaithful_run_counts_for_policy_metrics_only():
    a = [run(0.9, marked=100, i=i) for i in range(4)] + [run(0.1, marked=100, kept_up=False, i=9)]
    b = [run(0.9, marked=100, i=i) for i in range(5)]
    r = rows_by_metric(compare_groups(a, b))
    assert len(r["collective.bound_ratio"].a) == 4 and len(r["qos.ecn.marked"].a) == 5


def test_few_runs_are_judged_by_the_scenarios_measured_spread_or_not_at_all():
    a, b = [run(0.95)], [run(0.90)]
    r = rows_by_metric(compare_groups(a, b, spreads={"collective.bound_ratio": 0.02}))
    assert r["collective.bound_ratio"].verdict == "B lower" and "measured spread" in r["collective.bound_ratio"].why
    r = rows_by_metric(compare_groups(a, b, spreads={"collective.bound_ratio": 0.1}))
    assert r["collective.bound_ratio"].verdict == "within spread"
    r = rows_by_metric(compare_groups(a, b))
    assert r["collective.bound_ratio"].verdict == "not judged"


def test_mann_whitney_is_two_sided_and_exact_for_small_groups_ties_or_not():
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    # ties (counts, rounded times) leave two groups apart as far apart: still exact, not asymptotic
    assert mann_whitney_p([1, 1, 2, 2, 3], [6, 6, 7, 8, 8]) == pytest.approx(2 / 252)
    assert mann_whitney_p([1, 3, 5, 7, 9], [2, 4, 6, 8, 10]) > 0.5


def test_the_cli_compares_two_folders_of_runs(tmp_path):
    for side, bounds in (("a", [0.95, 0.96, 0.94, 0.95, 0.97]), ("b", [0.80, 0.82, 0.81, 0.79, 0.80])):
        for i, x in enumerate(bounds):
            d = tmp_path / side / f"run{i}"
            d.mkdir(parents=True)
            (d / "manifest.json").write_text("{}")
            (d / "summary.json").write_text(json.dumps(run(x, i=i)))
    html = tmp_path / "cmp.html"
    out = subprocess.run([sys.executable, "-m", "testbed", "compare", str(tmp_path / "a"), str(tmp_path / "b"),
                          "--json", "--html", str(html)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    d = json.loads(out.stdout)
    assert d["a"]["runs"] == d["b"]["runs"] == 5
    (bound,) = [r for r in d["rows"] if r["metric"] == "collective.bound_ratio"]
    assert bound["verdict"] == "B lower" and bound["a"]["median"] == 0.95 and bound["b"]["min"] == 0.79
    assert "A is better beyond the spread on collective.bound_ratio" in html.read_text()
    out = subprocess.run([sys.executable, "-m", "testbed", "compare", str(tmp_path / "a"), str(tmp_path / "b"),
                          "-n", "3"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "compared as they are" in out.stdout
