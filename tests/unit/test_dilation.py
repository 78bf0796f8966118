"""Time dilation, pure: a version 2 scenario is its hardware fabric; dilate() turns rates down and
times up by D and leaves bytes alone; auto's D from a calibration; the bounds pay path latency."""
import dataclasses

import pytest

from testbed.analysis.bounds import dag_bound, planned_bound
from testbed.errors import InputError
from testbed.run.calibrate import MARGIN, auto_factor, r10_ceil
from testbed.scenario import build_fabric, load_document, load_scenario
from testbed.scenario.dilation import dilate
from testbed.traffic.workload import build_messages, message_latency_s, path_links

V2 = {"scenario_version": 2, "fabric": {"topology": "torus", "dims": [4, 4], "bw_gbps": 100, "link_delay_ns": 500,
                                        "switch_latency_ns": 300},
      "workload": {"type": "ddp", "fwd_compute_ms": 2.0, "bwd_compute_ms": 4.0},
      "transport": {"rto_ms": 1.0, "cc": "dcqcn"}, "qos": {"ecn": True, "pfc_watchdog_ms": 0.5},
      "faults": [{"at_s": 0.001, "action": "link_down", "link": "s0_0-s1_0"}],
      "policy_changes": [{"at_s": 0.002, "class_name": "roce", "field": "ecn", "value": False}],
      "run": {"dilation": "auto", "stall_timeout_s": 3}}


def hardware(**run):
    doc = {**V2, "run": {**V2["run"], **run}}
    return load_document("x", doc, "scenarios/x.toml")


def test_a_version_2_file_is_its_hardware_fabric_at_d_1():
    sc = hardware()
    assert sc.version == 2 and sc.dilation.factor == 1 and sc.dilation.chosen_by == "unresolved"
    assert sc.fabric.bw_mbps == 100e3 and sc.dilation.hw_bw_gbps == 100
    # DCQCN's values are given for the hardware link unless [dcqcn] names another rate
    assert sc.dcqcn.ref_gbps == 100


def test_dilate_scales_every_rate_and_time_and_no_byte():
    hw = hardware()
    sc = dilate(hw, 1000, "set")
    assert sc.fabric.bw_mbps == pytest.approx(100) and sc.fabric.link_delay_ns == pytest.approx(500e3)
    assert sc.fabric.switch_latency_ns == pytest.approx(300e3)
    assert sc.workload.fwd_compute_ms == pytest.approx(2000) and sc.workload.bwd_compute_ms == pytest.approx(4000)
    assert sc.transport.rto_ms == pytest.approx(1000) and sc.qos.pfc_watchdog_ms == pytest.approx(500)
    assert sc.faults[0].at_s == pytest.approx(1.0) and sc.policy_changes[0].at_s == pytest.approx(2.0)
    # a go-back-N timeout is never a stall: the wall-clock stall guard is at least twice the RTO
    assert sc.run.stall_timeout_s >= 2 * sc.transport.rto_ms / 1e3
    # the testbed's own deadlock detector is wall clock (the agent waits out twice the watchdog:
    # test_plans)
    assert sc.qos.deadlock_detect_ms == hw.qos.deadlock_detect_ms == 300
    # bytes are the hardware's
    for a, b in ((hw.fabric, sc.fabric), (hw.workload, sc.workload)):
        for f in dataclasses.fields(a):
            if f.name.endswith("_bytes"):
                assert getattr(a, f.name) == getattr(b, f.name), f.name
    assert [c.ecn_kmin_bytes for c in sc.classes] == [c.ecn_kmin_bytes for c in hw.classes]
    assert sc.dilation.factor == 1000 and sc.dilation.chosen_by == "set" and sc.run.dilation == 1000
    # DCQCN runs D times slower: time_scale 0 is ref_gbps / the emulated link rate
    from testbed.traffic.transport import dcqcn_params
    p = dcqcn_params(dataclasses.asdict(sc.dcqcn), sc.fabric.bw_mbps * 1e6)
    assert p["time_scale"] == pytest.approx(1000)
    assert p["alpha_interval_ns"] == pytest.approx(50e3 * 1000)
    with pytest.raises(ValueError):
        dilate(sc, 2, "set")   # dilated already
    with pytest.raises(ValueError):
        dilate(hw, 0.5, "set")


def test_trace_compute_dilates_through_time_scale_and_pipeline_compute_once():
    sim = load_document("x", {**V2, "workload": {"type": "simai", "trace": "traces/simai/microAllReduce.txt",
                                                 "time_scale": 0.5}}, "scenarios/x.toml")
    assert dilate(sim, 10, "set").workload.time_scale == pytest.approx(5.0)
    pipe = load_document("x", {**V2, "fabric": {**V2["fabric"], "dims": [4, 4]},
                               "workload": {"type": "pipeline", "time_scale": 0.5, "fwd_compute_ms": 1}},
                         "scenarios/x.toml")
    w = dilate(pipe, 10, "set").workload
    assert w.fwd_compute_ms * w.time_scale == pytest.approx(10 * 1 * 0.5)   # D once, not D^2


@pytest.mark.parametrize("doc,field", [
    ({"scenario_version": 2, "fabric": {"bw_mbps": 100}}, "fabric.bw_mbps"),
    ({"scenario_version": 1, "fabric": {"bw_gbps": 100}}, "fabric.bw_gbps"),
    ({"scenario_version": 1, "run": {"dilation": 10}}, "run.dilation"),
    ({"scenario_version": 2, "run": {"dilation": 0.5}}, "run.dilation"),
    ({"scenario_version": 2, "run": {"dilation": "fast"}}, "run.dilation"),
    ({"scenario_version": 3}, "scenario_version"),
])
def test_each_version_refuses_the_other_ones_fields(doc, field):
    with pytest.raises(InputError) as e:
        load_document("x", doc, "scenarios/x.toml")
    assert e.value.field == field


def test_a_version_1_file_runs_at_d_1():
    sc = load_document("x", {"scenario_version": 1, "fabric": {"bw_mbps": 10}}, "scenarios/x.toml")
    assert sc.run.dilation == 1 and sc.dilation.chosen_by == "version1" and sc.fabric.bw_mbps == 10


def test_r10_rounds_up_to_a_preferred_number():
    assert [r10_ceil(x) for x in (1, 1.1, 2, 7000, 7500, 8000.1, 99)] == [1, 1.25, 2, 8000, 8000, 10000, 100]


def test_auto_takes_the_calibrated_rate_with_its_margin_demand_and_spare_cpu():
    hw = dataclasses.replace(load_scenario("allreduce-torus"))
    links = path_links(build_fabric(hw.fabric))
    ring_hops = 16 * links("h0_0", "h0_1")
    cal = {"faithful_mbps": 20.0, "frame_hops": ring_hops, "spare_cores": 2.0, "file": "f", "measured_utc": "t",
           "tried": []}
    d, how = auto_factor(hw, cal, spare_now=2.0)
    assert how["unrounded"] == pytest.approx(100e3 / (20 / MARGIN) * how["demand_ratio"])
    assert d == r10_ceil(how["unrounded"]) and how["cpu_factor"] == 1
    # a quarter of a core busy elsewhere: a larger D, never a smaller one
    d_busy, how_busy = auto_factor(hw, cal, spare_now=1.75)
    assert how_busy["cpu_factor"] == pytest.approx(2 / 1.75) and d_busy >= d


@pytest.fixture
def calibrated(monkeypatch):
    """A cached calibration of 20 Mb/s and as much CPU spare now as then: auto's D without a run."""
    from testbed.run import calibrate as cal_mod
    cal = {"faithful_mbps": 20.0, "frame_hops": 1, "spare_cores": 2.0, "file": "f", "measured_utc": "t", "tried": []}
    monkeypatch.setattr(cal_mod, "cached", lambda sc: cal)
    monkeypatch.setattr(cal_mod, "spare_cores", lambda: 2.0)
    return cal


def test_a_run_again_after_one_that_fell_behind_runs_at_twice_autos_dilation_and_a_set_one_stays(calibrated):
    from testbed.run.calibrate import SLOWER_MAX, resolve, slower_after
    hw = load_scenario("allreduce-torus")
    quiet = lambda *_: None  # noqa: E731
    first = resolve(hw, log=quiet)
    again = resolve(hw, log=quiet, slower=slower_after(1))
    assert first.dilation.chosen_by == again.dilation.chosen_by == "auto"
    assert again.dilation.factor == 2 * first.dilation.factor and again.dilation.calibration["slower"] == 2
    assert again.fabric.bw_mbps == first.fabric.bw_mbps / 2
    assert again.run.time_limit_s == 2 * first.run.time_limit_s   # the wall-clock guard with it
    assert [slower_after(n) for n in (1, 2, 3)] == [2, 4, SLOWER_MAX] and SLOWER_MAX == 4
    # a D the scenario sets is the user's: as set
    fixed = dataclasses.replace(hw, run=dataclasses.replace(hw.run, dilation=5000.0))
    assert resolve(fixed, log=quiet, slower=2.0).dilation.factor == 5000


def test_regress_runs_at_its_baselines_dilation_where_autos_is_smaller_and_at_autos_where_larger(calibrated):
    from testbed.run.calibrate import resolve
    hw = load_scenario("incast-pfc")
    quiet = lambda *_: None  # noqa: E731
    auto = resolve(hw, log=quiet)
    # the baseline's D, twice auto's: like for like, the wall-clock guard with it, and said so
    up = resolve(hw, log=quiet, at_least=2 * auto.dilation.factor)
    assert up.dilation.factor == 2 * auto.dilation.factor and up.dilation.chosen_by == "auto"
    assert up.dilation.calibration["auto"] == auto.dilation.factor
    assert up.dilation.calibration["at_least"] == 2 * auto.dilation.factor
    assert up.run.time_limit_s == pytest.approx(2 * auto.run.time_limit_s)
    # ... and a run again after it goes slower from there
    again = resolve(hw, log=quiet, at_least=2 * auto.dilation.factor, slower=2.0)
    assert again.dilation.factor == 4 * auto.dilation.factor
    # a baseline measured faster than this machine keeps up with: auto's
    down = resolve(hw, log=quiet, at_least=auto.dilation.factor / 2)
    assert down.dilation.factor == auto.dilation.factor and "at_least" not in down.dilation.calibration
    # a D the scenario sets is the user's
    fixed = dataclasses.replace(hw, run=dataclasses.replace(hw.run, dilation=5000.0))
    assert resolve(fixed, log=quiet, at_least=1e6).dilation.factor == 5000


@pytest.mark.parametrize("name", ["incast-pfc", "allreduce-torus"])
def test_regress_asks_for_its_baselines_dilation_and_without_a_baseline_for_autos(monkeypatch, name):
    from testbed import cli
    from testbed.regress.baselines import load_baseline

    class Asked(Exception):
        pass

    def run_faithfully(n, sets, at_least=1.0):
        raise Asked(at_least)
    monkeypatch.setattr(cli, "_run_faithfully", run_faithfully)
    with pytest.raises(Asked) as asked:
        cli._judge(name, [], load_scenario(name))
    base = load_baseline(name)
    assert asked.value.args[0] == (base["dilation_factor"] if base else 1.0)


def test_the_ring_bound_pays_its_path_latency_on_every_step():
    sc = dilate(load_scenario("allreduce-torus"), 8000, "set")
    fabric = build_fabric(sc.fabric)
    _, msgs = build_messages(dataclasses.replace(sc, workload=dataclasses.replace(sc.workload, iterations=1)), fabric)
    lat = message_latency_s(sc.fabric, fabric)
    bw = sc.fabric.bw_mbps * 1e6
    plain, _, _ = planned_bound("ring_allreduce", 16, 4 << 20, bw, msgs)
    with_latency, formula, terms = planned_bound("ring_allreduce", 16, 4 << 20, bw, msgs, lat)
    # ring neighbours on the snake: host, switch, switch, host = 3 links and 2 switches
    a = (3 * 500 + 2 * 500) * 8000 / 1e9
    assert with_latency == pytest.approx(plain + 2 * 15 * a, rel=1e-6)
    assert terms["binding"] == "critical_path" and "latency" in formula
    assert dag_bound(msgs, bw).critical_path_s == pytest.approx(plain, rel=1e-6)


def test_calibration_runs_a_rung_again_only_when_steal_spoiled_it(tmp_path, monkeypatch):
    from testbed.run import calibrate as cal
    monkeypatch.setattr(cal, "CALIBRATION_DIR", tmp_path)
    hw = hardware(dilation="auto")

    def judge_of(outcomes):
        """run_and_judge answering each calibration run in turn: (kept up?, steal share)"""
        seen = []

        def judge(sc, _results):
            kept, steal = outcomes[len(seen)]
            seen.append(sc.fabric.bw_mbps)
            return {"run_id": f"r{len(seen)}", "status": "ok" if kept else "inconclusive",
                    "fidelity": {"verdict": "kept_up" if kept else "could_not_keep_up", "notes": [] if kept else ["x"],
                                 "machine_busy_fraction": 0.5, "machine_steal_fraction": steal}}
        return judge, seen

    # (each from the ladder's top, as `testbed calibrate` measures: an auto run's starts lower after
    # an earlier calibration, test_a_calibration_starts_at_the_highest_rate_...)
    # a rung failed under 30% steal is run again, and taken when its second run keeps up
    judge, seen = judge_of([(False, 0.30), (True, 0.01)])
    out = cal.calibrate(hw, judge, log=lambda *_: None, from_top=True)
    assert out["faithful_mbps"] == 40 and seen == [40, 40] and len(out["tried"]) == 2
    # on a quiet machine a failed rung is not run again: the ladder steps down
    judge, seen = judge_of([(False, 0.01), (True, 0.0)])
    out = cal.calibrate(hw, judge, log=lambda *_: None, from_top=True)
    assert out["faithful_mbps"] == 20 and seen == [40, 20]
    # a rung that failed twice under steal is left too
    judge, seen = judge_of([(False, 0.2), (False, 0.2), (True, 0.2)])
    assert cal.calibrate(hw, judge, log=lambda *_: None, from_top=True)["faithful_mbps"] == 20 and seen == [40, 40, 20]


def test_a_calibration_starts_at_the_highest_rate_an_earlier_one_carried_this_fabric_at(tmp_path, monkeypatch):
    from testbed.run import calibrate as cal
    monkeypatch.setattr(cal, "CALIBRATION_DIR", tmp_path)
    hw = hardware(dilation="auto")
    seen = []

    def judge(sc, _results):
        seen.append(sc.fabric.bw_mbps)
        kept = sc.fabric.bw_mbps <= 10
        return {"run_id": f"r{len(seen)}", "status": "ok" if kept else "inconclusive",
                "fidelity": {"verdict": "kept_up" if kept else "could_not_keep_up", "notes": [] if kept else ["x"],
                             "machine_busy_fraction": 0.5, "machine_steal_fraction": 0.0}}

    quiet = lambda *_: None  # noqa: E731
    # nothing earlier: from the top
    first = cal.calibrate(hw, judge, quiet)
    assert seen == [40, 20, 10] and first["started_mbps"] == 40 and first["started_from"] is None
    # the same fabric after a change to the code (another cache key): from the rate it carried
    monkeypatch.setattr(cal, "code_version", lambda: "changed")
    assert cal.cached(hw) is None
    seen.clear()
    again = cal.calibrate(hw, judge, quiet)
    assert seen == [10] and again["faithful_mbps"] == 10 and again["started_mbps"] == 10
    assert again["started_from"]["file"] == first["file"] and again["file"] != first["file"]
    # ... and down the ladder from there when the change cost it that rate
    monkeypatch.setattr(cal, "code_version", lambda: "slower")
    seen.clear()
    slower = cal.calibrate(hw, lambda sc, r: judge(dataclasses.replace(
        sc, fabric=dataclasses.replace(sc.fabric, bw_mbps=sc.fabric.bw_mbps * 2)), r), quiet)
    assert seen == [20, 10] and slower["faithful_mbps"] == 5
    # the highest of the earlier ones, not the newest; and `testbed calibrate` (from_top) from the top
    monkeypatch.setattr(cal, "code_version", lambda: "third")
    assert cal.first_rung(hw, from_top=False)[0] == 10
    assert cal.first_rung(hw, from_top=True) == (40, None)
    # another fabric (here PFC on) has no earlier calibration: from the top
    pfc = dataclasses.replace(hw, qos=dataclasses.replace(hw.qos, pfc=not hw.qos.pfc))
    assert cal.first_rung(pfc, from_top=False) == (40, None)


def test_every_rung_gives_each_host_enough_windows_for_the_verdicts_share():
    # the verdict wants 99% of a host's windows within: a rung of fewer than 100 fails on one late
    # window, so each rung sends for CAL_WINDOWS windows (at least CAL_TRAFFIC_S)
    from testbed.analysis.links import window_ns
    from testbed.run import calibrate as cal
    from testbed.traffic.packets import HEADER_BYTES
    hw = hardware(dilation="auto")
    payload = hw.workload.payload_bytes
    for rate in cal.LADDER_MBPS:
        sc = cal.calibration_scenario(hw, rate)
        assert sc.fabric.bw_mbps == pytest.approx(rate)
        sent_s = sc.workload.bytes_per_rank * 8 / (rate * 1e6)
        windows = sent_s * 1e9 / window_ns(rate * 1e6, payload + HEADER_BYTES)
        assert sent_s >= cal.CAL_TRAFFIC_S * 0.99 and windows >= cal.CAL_WINDOWS * 0.95, (rate, sent_s, windows)
        assert sc.run.time_limit_s >= 3 * sent_s * 0.99   # the wall-clock guard leaves it room
        # ... and stops a rung that fell far behind, rather than the scenario's own limit
        assert sc.run.time_limit_s == pytest.approx(cal.RUNG_LIMIT_FACTOR * sent_s + cal.RUNG_LIMIT_START_S, rel=0.02)
    top = cal.calibration_scenario(hw, cal.LADDER_MBPS[0])
    assert top.run.time_limit_s < hw.run.time_limit_s / 10, top.run.time_limit_s


def test_a_run_without_a_verdict_is_run_again_once_then_only_while_stolen_from():
    from testbed.run.calibrate import MAX_RUNS, run_again

    def summary(kept, steal):
        return {"fidelity": {"verdict": "kept_up" if kept else "could_not_keep_up", "machine_steal_fraction": steal}}
    assert not run_again(1, summary(True, 0.5))            # a verdict: done, whatever the steal
    assert run_again(1, summary(False, 0.0))               # once more, whatever the reason
    assert not run_again(2, summary(False, 0.01))          # a quiet machine's second no is final
    assert run_again(2, summary(False, 0.2)) and run_again(MAX_RUNS - 1, summary(False, 0.2))
    assert not run_again(MAX_RUNS, summary(False, 0.2))    # and never past MAX_RUNS
    assert run_again(2, {"fidelity": {"verdict": "could_not_keep_up"}}) is False   # steal unknown: not stolen
    # a run that kept up but left an expectation unjudged (a job's run alone fell behind) is no verdict
    unjudged = {**summary(True, 0.0), "expectations": [{"metric": "jobs.train.slowdown", "ok": None}]}
    assert run_again(1, unjudged) and not run_again(2, unjudged)
    assert not run_again(1, {**summary(True, 0.0), "expectations": [{"metric": "packets.lost", "ok": False}]})


def test_the_calibration_key_ignores_comments_and_docstrings_not_code(tmp_path):
    from testbed.run.calibrate import _code_text
    py, c = tmp_path / "m.py", tmp_path / "e.c"

    def key(path, text):
        path.write_text(text)
        return _code_text(path)

    base = key(py, 'def f(x):\n    """Twice x."""\n    return 2 * x  # doubled\n')
    assert key(py, 'def f(x):\n    """Twice x, reworded\n    over two lines."""\n    return 2 * x\n') == base
    assert key(py, 'def f(x):\n    return 2 * x\n') == base
    assert key(py, 'def f(x):\n    """Twice x."""\n    return 3 * x\n') != base
    cbase = key(c, "/* the rate */\nint r = 1; // per frame\n")
    assert key(c, "/* the rate,\n * reworded */\nint r = 1;\n") == cbase
    assert key(c, "/* the rate */\nint r = 2; // per frame\n") != cbase


def test_the_emulator_latency_leaves_out_each_frames_time_on_the_receiving_link():
    import pandas as pd
    from testbed.analysis.hardware import emulator_latency
    # 8 Mb/s: a 1000-byte frame takes 1 ms on the link; path latency 10 ms, two switches
    wire, delay = 1_000_000, 10_000_000
    plan = {"flows": [{"id": 0, "src": "a", "dst": "b", "delay_ns": delay}]}

    def run(transits):
        # four frames out at once (a shaper's burst): each waits on the receiving link behind the
        # ones before it, as nicdp.c's wire_in has them
        rx, link, free = [], [], 0
        for t in transits:
            reached = t + delay
            free = max(reached, free) + wire
            rx.append(free)
            link.append(free - reached)
        pkts = pd.DataFrame({"flow": 0, "depart_ns": 0, "rx_ns": rx, "link_ns": link, "bytes": 1000})
        return emulator_latency(pkts, plan, lambda s, d: 3, factor=100.0, hw_per_hop_ns=1000.0)

    # the emulator took 900 us on the first frame and 200 us on the others: the least is 200 us
    # (100 us a switch), though every later frame came in behind another, one to three frame times
    # after it reached the link
    e = run([900_000, 200_000, 200_000, 200_000])
    assert e["per_hop_us_emulated"] == pytest.approx(100.0)
    assert e["per_hop_ns_hardware"] == pytest.approx(1000.0) and e["share"] == pytest.approx(1.0) and not e["ok"]
    assert run([900_000, 800_000, 700_000, 600_000])["per_hop_us_emulated"] == pytest.approx(300.0)


def test_the_emulator_latency_counts_only_frames_that_met_no_switch_queue():
    import numpy as np
    import pandas as pd
    from testbed.analysis.hardware import emulator_latency, queue_free
    # a sample every 1 ms; a switch queue from 10 ms to 20 ms
    t = np.arange(0, 40_000_000, 1_000_000)
    queued = (t >= 10_000_000) & (t < 20_000_000)
    dep = np.array([0, 9_500_000, 12_000_000, 25_000_000])
    rx = dep + 3_000_000
    # the 2nd frame's flight reaches into the queue, the 3rd lies in it; the 1st and 4th met none
    assert queue_free(dep, rx, t, queued).tolist() == [True, False, False, True]
    plan = {"flows": [{"id": 0, "src": "a", "dst": "b", "delay_ns": 0}]}
    # the frames that waited in the queue took 1 ms; the queue-free ones 3 ms: the emulator's
    pkts = pd.DataFrame({"flow": 0, "depart_ns": dep, "rx_ns": [3_000_000, 10_500_000, 13_000_000, 28_000_000],
                         "link_ns": 0, "bytes": 1000})
    e = emulator_latency(pkts, plan, lambda s, d: 2, factor=1000.0, hw_per_hop_ns=1000.0, queues=(t, queued))
    assert e["per_hop_us_emulated"] == pytest.approx(3000.0) and e["queue_free_frames"] == 2 and e["frames"] == 4
    # a run whose every frame met a queue cannot tell: not judged, and it says how many frames it had
    e = emulator_latency(pkts, plan, lambda s, d: 2, factor=1000.0, hw_per_hop_ns=1000.0, queues=(t, np.ones(len(t), bool)))
    assert not e["judged"] and e["ok"] and e["queue_free_frames"] == 0 and e["frames"] == 4


def latency_rung(notes, share, verdict="could_not_keep_up"):
    """A calibration rung's summary as the judge reads it: its verdict, notes and emulator latency."""
    return {"run_id": "r", "status": "ok" if verdict == "kept_up" else "inconclusive",
            "fidelity": {"verdict": verdict, "notes": notes, "machine_steal_fraction": 0.0},
            "dilation": {"emulator_latency": {"judged": True, "ok": share <= 0.10, "share": share, "max_share": 0.10}}}


def test_a_rung_failed_only_by_the_emulators_latency_carries_where_the_runs_d_brings_it_within(tmp_path, monkeypatch):
    from testbed.run import calibrate as cal
    assert cal.carried(latency_rung([], 0.05, "kept_up"))
    assert cal.carried(latency_rung(["latency"], 0.16))               # 6.4% at the run's D
    assert cal.carried(latency_rung(["latency"], 0.10 * cal.MARGIN))  # at the limit there
    assert not cal.carried(latency_rung(["latency"], 0.26))           # 10.4% at the run's D
    assert not cal.carried(latency_rung(["latency", "links"], 0.16))  # another rule failed it too
    assert not cal.carried(latency_rung(["links"], 0.05))             # the latency was not what failed it
    assert not cal.carried({"fidelity": {"verdict": "not_judged", "notes": ["x"]}, "dilation": {}})
    # the ladder takes such a rung, and says which it was
    monkeypatch.setattr(cal, "CALIBRATION_DIR", tmp_path)
    answers = [latency_rung(["latency"], 0.30), latency_rung(["latency"], 0.16)]
    out = cal.calibrate(hardware(dilation="auto"), lambda sc, _d: answers.pop(0), log=lambda *_: None, from_top=True)
    assert out["faithful_mbps"] == 20 and [t["carried"] for t in out["tried"]] == [False, True]
    assert out["tried"][1]["verdict"] == "could_not_keep_up"
