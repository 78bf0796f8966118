"""What an operator reads of real runs (root), from the session's suite runs of a PFC incast, a DCQCN
incast and a pipeline: trace.json, in the trace event format and saying what its run did, in hardware
time; and ports.parquet, the port counters, agreeing with the run's own account."""
import json

import pandas as pd
import pytest

from testbed.analysis.trace_format import format_problems

pytestmark = pytest.mark.root


def _trace(run):
    return json.loads((run.run_dir / "trace.json").read_text())


@pytest.mark.parametrize("name", ["incast-pfc", "dcqcn-incast", "pipeline-fattree"])
def test_the_run_trace_is_in_the_format_with_every_message(suite_runs, name):
    run = suite_runs.get(name)
    t = _trace(run)
    assert format_problems(t) == []
    assert t["otherData"]["dilation_factor"] == run.summary["dilation"]["factor"]
    msgs = pd.read_parquet(run.run_dir / "messages.parquet")
    sent = msgs[(msgs["flow"] >= 0) & msgs["release_ns"].notna()]
    begins = [e for e in t["traceEvents"] if e["ph"] == "b" and e["cat"].startswith("message")]
    assert sorted(e["id"] for e in begins) == sorted(sent["msg"].tolist())


def test_every_pause_of_the_pfc_incast_is_a_span(suite_runs):
    run = suite_runs.get("incast-pfc")
    pauses = [e for e in _trace(run)["traceEvents"] if e["ph"] == "X" and e["cat"] == "pfc"]
    assert len(pauses) == run.summary["qos"]["pfc"]["pauses"] > 0
    assert all(e["args"]["cause"] for e in pauses)


def test_every_dcqcn_rate_change_is_a_counter_sample(suite_runs):
    run = suite_runs.get("dcqcn-incast")
    ev = pd.read_parquet(run.run_dir / "qp_events.parquet")
    changes = int(ev["event"].str.startswith("rate_").sum())
    counters = [e for e in _trace(run)["traceEvents"] if e["ph"] == "C"]
    assert len(counters) == changes >= run.summary["transport"]["rate_cuts"] > 0


def test_a_pipelines_compute_steps_are_spans_one_at_a_time(suite_runs):
    run = suite_runs.get("pipeline-fattree")
    msgs = pd.read_parquet(run.run_dir / "messages.parquet")
    steps = [e for e in _trace(run)["traceEvents"] if e["ph"] == "X" and e["cat"] == "compute"]
    assert len(steps) == int(((msgs["flow"] < 0) & msgs["complete_ns"].notna()).sum()) > 0
    # one stream per host: its steps never overlap (the format check's nesting, with no step inside another)
    for (pid, tid), g in pd.DataFrame(steps).groupby(["pid", "tid"]):
        g = g.sort_values("ts")
        assert (g["ts"].iloc[1:].to_numpy() >= (g["ts"] + g["dur"]).iloc[:-1].to_numpy() - 1e-6).all()


def test_port_counters_agree_with_the_runs_account(suite_runs):
    run = suite_runs.get("incast-pfc")
    ports = pd.read_parquet(run.run_dir / "ports.parquet")
    pfc = run.summary["qos"]["pfc"]
    # every pause was sent by a switch port (to a switch's or a host's port)
    assert ports["pauses_sent"].sum() == pfc["pauses"] > 0
    assert ports["ecn_marked"].sum() == run.summary["qos"]["ecn"]["marked"]
    assert ports["drops"].sum() == run.summary["qos"]["queues"]["buffer_drops"]
    assert len(ports) == run.summary["links"]["ports"]
    # worst first: no port below has more drops, or as many and more paused time
    keys = list(zip(ports["drops"], ports["paused_us"]))
    assert keys == sorted(keys, reverse=True)


def test_the_zoomable_page_of_a_pfc_incast_shows_every_pause_on_the_runs_time_axis(suite_runs):
    # interactive.html of a real run: its plots share one time axis as long as the traffic (hardware
    # us), and its pause bars are the run's pauses
    from bokeh.plotting import figure

    from testbed.analysis.interactive import layout
    from testbed.analysis.plotdata import PAUSE_ROWS, hw_us, pause_bars
    from testbed.runfolder import RunFolder
    run = suite_runs.get("incast-pfc")
    assert (run.run_dir / "interactive.html").stat().st_size > 1_000_000   # bokeh's JavaScript inlined
    rf = RunFolder(run.run_dir)
    eng = json.loads(rf.engine_stats.read_text())
    factor = run.summary["dilation"]["factor"]
    page = layout(rf, run.summary, eng["start_ns"], eng["end_ns"], factor)
    figs = [c for c in page.children if isinstance(c, figure)]
    assert {id(f.x_range) for f in figs} == {id(figs[0].x_range)}
    assert figs[0].x_range.end == pytest.approx(hw_us(eng["end_ns"], eng["start_ns"], factor))
    (pauses,) = [f for f in figs if f.title.text.startswith("PFC pauses")]
    (bars,) = [r.data_source for r in pauses.renderers]
    # incast-pfc pauses few port classes, so every pause is drawn
    assert pause_bars(rf, eng["start_ns"], eng["end_ns"], factor).classes <= PAUSE_ROWS
    assert len(bars.data["start_us"]) == run.summary["qos"]["pfc"]["pauses"] > 0
