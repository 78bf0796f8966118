"""trace.json from a synthetic run folder, answers worked out by hand (times in hardware
microseconds since the traffic's start at D = 1000), and the format check, one broken rule a case."""
import json

import pandas as pd
import pytest

from testbed.analysis.trace import build_trace, write_trace
from testbed.analysis.trace_format import format_problems
from testbed.runfolder import RunFolder

T0 = 50_000_000_000
D = 1000.0
US = int(D * 1000)   # one hardware microsecond, in emulated nanoseconds


@pytest.fixture
def folder(tmp_path):
    """h0 sends two messages to h1 on queue pair 0 (the second released before the first is in, and
    never completing); h1 runs two compute steps; s0's port eth1 pauses class 3 twice, the second
    never resumed; queue pair 0's DCQCN cuts its rate once."""
    rf = RunFolder(tmp_path)
    rf.raw.mkdir()
    rf.engine_stats.write_text(json.dumps({"start_ns": T0, "end_ns": T0 + 100 * US}))
    rf.engine_plan.write_text(json.dumps({"flows": [
        {"id": 0, "src": "h0", "dst": "h1", "tag": "collective", "class": 3}]}))
    na = pd.NA
    pd.DataFrame([
        {"msg": 0, "iteration": 0, "step": 0, "src": "h0", "dst": "h1", "bytes": 4096, "op": "reduce", "flow": 0,
         "release_ns": T0, "first_tx_ns": T0 + 1 * US, "complete_ns": T0 + 20 * US, "nic_wait_ns": 2 * US,
         "fct_ns": 18 * US},
        {"msg": 1, "iteration": 0, "step": 1, "src": "h0", "dst": "h1", "bytes": 4096, "op": "reduce", "flow": 0,
         "release_ns": T0 + 10 * US, "first_tx_ns": T0 + 21 * US, "complete_ns": na, "nic_wait_ns": 11 * US,
         "fct_ns": na},
        {"msg": 2, "iteration": 0, "step": 0, "src": "h1", "dst": "h1", "bytes": 0, "op": "compute", "flow": -1,
         "release_ns": T0, "first_tx_ns": T0 + 5 * US, "complete_ns": T0 + 15 * US, "nic_wait_ns": na, "fct_ns": na},
        {"msg": 3, "iteration": 0, "step": 1, "src": "h1", "dst": "h1", "bytes": 0, "op": "compute", "flow": -1,
         "release_ns": T0 + 6 * US, "first_tx_ns": T0 + 15 * US, "complete_ns": T0 + 30 * US, "nic_wait_ns": na,
         "fct_ns": na},
    ]).astype({c: "Int64" for c in ("release_ns", "first_tx_ns", "complete_ns", "nic_wait_ns", "fct_ns")}) \
        .to_parquet(rf.table("messages"))
    pd.DataFrame([{"t_ns": T0 + 12 * US, "flow": 0, "value": 0, "rate_bps": 40e6, "target_bps": 80e6, "alpha": 0.5,
                   "event": "rate_cut"},
                  {"t_ns": T0 + 11 * US, "flow": 0, "value": 1, "rate_bps": 0.0, "target_bps": 0.0, "alpha": 0.0,
                   "event": "cnp_received"}]).to_parquet(rf.table("qp_events"))
    rf.pfc_events.write_text("\n".join(json.dumps(e) for e in [
        {"t_ns": T0 + 40 * US, "event": "pause", "node": "s0", "port": "s0-eth1", "class": 3, "cause": "s0-eth2",
         "cause_class": 3},
        {"t_ns": T0 + 45 * US, "event": "resume", "node": "s0", "port": "s0-eth1", "class": 3, "cause": "s0-eth2",
         "reason": "xon"},
        {"t_ns": T0 + 90 * US, "event": "pause", "node": "s0", "port": "s0-eth1", "class": 3, "cause": "s0-eth2",
         "cause_class": 3}]) + "\n")
    pd.DataFrame([{"iteration": 0, "start_ns": T0, "end_ns": T0 + 30 * US, "bound_ratio": 0.5}]).to_parquet(
        rf.table("iterations"))
    rf.faults.write_text(json.dumps({"t_ns": T0 + 50 * US, "action": "link_down", "link": "s0-s1"}) + "\n")
    rf.controller_events.write_text(json.dumps({"t_ns": T0 + 60 * US, "event": "qos_policy_changed",
                                                "class_name": "roce", "field": "kmin_bytes", "value": 4096}) + "\n")
    return rf


def _events(trace, ph, **match):
    return [e for e in trace["traceEvents"] if e["ph"] == ph and all(e.get(k) == v for k, v in match.items())]


def test_the_trace_is_in_the_format(folder):
    assert format_problems(build_trace(folder, D)) == []


def test_a_message_spans_release_to_last_frame_in_hardware_microseconds(folder):
    t = build_trace(folder, D)
    begin, = _events(t, "b", id=0, cat="message,collective")
    end, = _events(t, "e", id=0, cat="message,collective")
    assert (begin["ts"], end["ts"]) == (0.0, 20.0)
    assert begin["args"]["fct_us"] == 18.0 and begin["args"]["nic_wait_us"] == 2.0
    assert begin["name"] == end["name"] == "qp 0 to h1 (collective, class 3)"


def test_an_unfinished_message_runs_to_the_traffic_end_and_says_so(folder):
    t = build_trace(folder, D)
    begin, = _events(t, "b", id=1)
    end, = _events(t, "e", id=1)
    assert begin["ts"] == 10.0 and begin["args"]["incomplete"] is True
    assert end["ts"] == 100.0


def test_compute_steps_are_one_stream_per_host(folder):
    t = build_trace(folder, D)
    steps = sorted((e["ts"], e["dur"]) for e in _events(t, "X", cat="compute"))
    assert steps == [(5.0, 10.0), (15.0, 15.0)]
    assert len({(e["pid"], e["tid"]) for e in _events(t, "X", cat="compute")}) == 1


def test_a_pause_runs_to_its_resume_and_one_never_resumed_to_the_traffic_end(folder):
    t = build_trace(folder, D)
    pauses = sorted((e["ts"], e["dur"], e["args"]["end"]) for e in _events(t, "X", cat="pfc"))
    assert pauses == [(40.0, 5.0, "xon"), (90.0, 10.0, "never resumed")]
    assert all(e["args"]["cause"] == "s0-eth2" for e in _events(t, "X", cat="pfc"))


def test_dcqcn_rate_is_a_counter_in_hardware_gbps(folder):
    t = build_trace(folder, D)
    c, = _events(t, "C")
    assert (c["ts"], c["args"]["rate"], c["args"]["target"]) == (12.0, 40.0, 80.0)
    cnp, = _events(t, "i", name="cnp_received")
    assert cnp["ts"] == 11.0


def test_faults_and_policy_changes_are_global_instants(folder):
    t = build_trace(folder, D)
    assert [e["ts"] for e in _events(t, "i", s="g")] == [50.0, 60.0]


def test_every_track_is_named(folder):
    t = build_trace(folder, D)
    named = {(e["pid"], e["tid"]) for e in _events(t, "M", name="thread_name")}
    used = {(e["pid"], e["tid"]) for e in t["traceEvents"] if e["ph"] in "Xi" and e.get("s") != "g"}
    assert used <= named
    assert {e["args"]["name"] for e in _events(t, "M", name="process_name")} == {
        "host h0", "host h1", "switch s0", "workload"}


def test_written_next_to_the_report(folder):
    path = write_trace(folder.root, D)
    assert format_problems(json.loads(path.read_text())) == []


# -- the format check: each rule broken once, each caught

def _ok():
    return {"traceEvents": [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "t"}},
        {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0.0, "dur": 10.0},
        {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 2.0, "dur": 3.0},
        {"ph": "b", "name": "m", "cat": "c", "id": 7, "pid": 1, "tid": 1, "ts": 1.0},
        {"ph": "e", "name": "m", "cat": "c", "id": 7, "pid": 1, "tid": 1, "ts": 4.0},
        {"ph": "C", "name": "r", "pid": 1, "ts": 1.0, "args": {"rate": 1.5}},
        {"ph": "i", "name": "f", "s": "g", "pid": 1, "tid": 1, "ts": 3.0}]}


def test_the_check_passes_a_well_formed_trace():
    assert format_problems(_ok()) == []


@pytest.mark.parametrize("break_it, says", [
    (lambda t: t["traceEvents"].append({"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 5.0, "dur": 10.0}),
     "without nesting"),
    (lambda t: t["traceEvents"].pop(4), "never ended"),
    (lambda t: t["traceEvents"][4].update(ts=0.5), "end before its begin"),
    (lambda t: t["traceEvents"][4].update(id=8), "no begin"),
    (lambda t: t["traceEvents"][3].pop("cat"), "needs cat and id"),
    (lambda t: t["traceEvents"][5].update(args={"rate": "fast"}), "counter's args"),
    (lambda t: t["traceEvents"][1].pop("dur"), "needs dur"),
    (lambda t: t["traceEvents"][1].update(ts="0"), "ts is not a number"),
    (lambda t: t["traceEvents"][6].update(s="x"), "scope"),
    (lambda t: t["traceEvents"][0].update(name="thread_title"), "metadata"),
    (lambda t: t["traceEvents"][2].update(tid="1"), "integers"),
    (lambda t: t["traceEvents"][2].update(ph="Q"), "unknown phase"),
    (lambda t: t.update(displayTimeUnit="s"), "displayTimeUnit"),
])
def test_the_check_catches(break_it, says):
    t = _ok()
    break_it(t)
    problems = format_problems(t)
    assert any(says in p for p in problems), problems


def test_pause_spans_one_per_assertion_to_its_resume():
    from testbed.analysis.links import pause_spans
    ev = pd.DataFrame([
        {"t_ns": 10, "event": "pause", "node": "s0", "port": "s0-eth1", "class": 3, "cause": "s0-eth2", "cause_class": 3},
        {"t_ns": 12, "event": "pause", "node": "s0", "port": "s0-eth1", "class": 3, "cause": "s0-eth3", "cause_class": 3},
        {"t_ns": 15, "event": "resume", "node": "s0", "port": "s0-eth1", "class": 3, "reason": "xon"},
        {"t_ns": 16, "event": "resume", "node": "s0", "port": "s0-eth1", "class": 3, "reason": "xon"},
        {"t_ns": 20, "event": "pause", "node": "s0", "port": "s0-eth1", "class": 4, "cause": "s0-eth2", "cause_class": 4}])
    spans = pause_spans(ev, 100)
    assert spans[["class", "start_ns", "end_ns", "cause", "ended_by"]].values.tolist() == [
        [3, 10, 15, "s0-eth2", "xon"], [4, 20, 100, "s0-eth2", "never resumed"]]
    assert pause_spans(pd.DataFrame(), 100).empty


def test_the_report_draws_pauses_and_dcqcn_rates(folder):
    from testbed.analysis.report import plot_dcqcn, plot_pauses
    folder.fabric.write_text(json.dumps({"links": [{"a": "s0", "a_port": 1, "b": "s1", "b_port": 1}]}))
    folder.plots.mkdir()
    end = T0 + 100 * US
    assert plot_pauses(folder, folder.plot("pauses"), T0, end, D) and folder.plot("pauses").stat().st_size > 0
    assert plot_dcqcn(folder, folder.plot("dcqcn"), T0, end, D) and folder.plot("dcqcn").stat().st_size > 0
    folder.pfc_events.write_text("")
    assert not plot_pauses(folder, folder.plot("none"), T0, end, D)
