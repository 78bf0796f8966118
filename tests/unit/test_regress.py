"""Expectations and baseline comparison (testbed.regress.baselines) on constructed summaries."""
import pytest

from testbed.regress.baselines import MISSING, baseline_of, check_expectations, compare, metric

SUMMARY = {"scenario": "x", "run_id": "r1", "status": "ok",
           "collective": {"bound_ratio": 0.9, "mean_time_s": 1.0, "time_s": [1.0, 2.0], "iterations_complete": 2},
           "packets": {"lost": 0, "retransmitted": 10},
           "latency_by_dscp_us": {"26": {"p50": 100.0, "p99": 400.0}, "0": {"p50": 300.0}}}


def test_metric_paths():
    assert metric(SUMMARY, "collective.bound_ratio") == 0.9
    assert metric(SUMMARY, "collective.time_s.1") == 2.0
    assert metric(SUMMARY, "latency_by_dscp_us.26.p50") == 100.0
    assert metric(SUMMARY, "collective.nope") is MISSING and metric(SUMMARY, "collective.time_s.5") is MISSING


def test_expectations():
    res = check_expectations(SUMMARY, [
        {"metric": "collective.bound_ratio", "op": ">=", "value": 0.85},
        {"metric": "packets.lost", "op": "==", "value": 1},
        {"metric": "latency_by_dscp_us.26.p99", "op": "<", "than": "latency_by_dscp_us.0.p50"},
        {"metric": "latency_by_dscp_us.26.p50", "op": "<", "than": "latency_by_dscp_us.0.p50"},
        {"metric": "collective.iterations_complete", "op": "==", "value": 2},
        {"metric": "queue.p99", "op": "<", "value": 1},
        {"metric": "latency_by_dscp_us.26.p50", "op": "<", "than": "latency_by_dscp_us.46.p50"},
    ])
    assert [r["ok"] for r in res] == [True, False, False, True, True, False, False]
    assert res[5]["why"] == "not in the summary"
    assert res[6]["why"] == "not in the summary: latency_by_dscp_us.46.p50"
    assert res[2]["actual"] == 400.0 and res[2]["than_value"] == 300.0
    assert [r["class"] for r in res] == ["performance", "policy", "performance", "performance", "policy",
                                         "policy", "performance"]


def test_performance_expectations_are_not_judged_on_an_unfaithful_run_and_policy_ones_are():
    expects = [{"metric": "collective.bound_ratio", "op": ">=", "value": 0.95},      # fails
               {"metric": "collective.mean_time_s", "op": "<", "value": 2.0},        # passes
               {"metric": "packets.lost", "op": "==", "value": 1},                   # fails
               {"metric": "collective.iterations_complete", "op": "==", "value": 2}]  # passes
    faithful = check_expectations(SUMMARY, expects, fidelity_valid=True)
    assert [r["ok"] for r in faithful] == [False, True, False, True]
    unfaithful = check_expectations(SUMMARY, expects, fidelity_valid=False)
    assert [r["ok"] for r in unfaithful] == [None, None, False, True]
    assert unfaithful[0]["why"].endswith("(it would have failed)")
    assert unfaithful[1]["why"].endswith("(it would have passed)")


def test_baseline_comparison_uses_direction_and_tolerance():
    base = baseline_of(SUMMARY)
    assert base["metrics"] == {"collective.bound_ratio": 0.9, "collective.mean_time_s": 1.0, "packets.lost": 0,
                               "packets.retransmitted": 10, "collective.iterations_complete": 2}
    same = {r["metric"]: r["verdict"] for r in compare(SUMMARY, base)}
    assert set(same.values()) == {"ok"}
    worse = {**SUMMARY, "collective": {"bound_ratio": 0.79, "mean_time_s": 1.14, "iterations_complete": 1},
             "packets": {"lost": 6, "retransmitted": 111}}
    rows = {r["metric"]: r for r in compare(worse, base)}
    assert rows["collective.bound_ratio"]["verdict"] == "regressed"      # below 0.9 - 10%
    assert rows["collective.bound_ratio"]["limit"] == pytest.approx(0.81)
    assert rows["collective.mean_time_s"]["verdict"] == "ok"             # within +15%
    assert rows["packets.lost"]["verdict"] == "regressed"                # 0 + 5 allowed
    assert rows["packets.retransmitted"]["verdict"] == "regressed"       # max(5, 100) over 10
    assert rows["collective.iterations_complete"]["verdict"] == "regressed"  # one of two completed
    better = {**SUMMARY, "collective": {"bound_ratio": 0.99, "mean_time_s": 0.5, "iterations_complete": 2}}
    assert {r["verdict"] for r in compare(better, base)} == {"ok"}
    # status is derived from the checks, never tracked itself; a deadlock is tracked as such
    assert "status" not in base["metrics"]
    calm = {**SUMMARY, "qos": {"pfc": {"deadlocked": False, "pauses": 100}}}
    stuck = {**SUMMARY, "qos": {"pfc": {"deadlocked": True, "pauses": 100}}}
    assert {r["metric"]: r["verdict"] for r in compare(stuck, baseline_of(calm))}["qos.pfc.deadlocked"] == "regressed"
    marked = {**SUMMARY, "qos": {"ecn": {"marked": 1000}}}
    base_m = baseline_of(marked)
    assert {r["metric"]: r["verdict"] for r in compare({**SUMMARY, "qos": {"ecn": {"marked": 0}}}, base_m)}[
        "qos.ecn.marked"] == "regressed"                                  # far fewer marks: suspect too
    assert {r["metric"]: r["verdict"] for r in compare({**SUMMARY, "qos": {"ecn": {"marked": 1200}}}, base_m)}[
        "qos.ecn.marked"] == "ok"
    gone = {k: v for k, v in SUMMARY.items() if k != "packets"}
    assert {r["metric"]: r["verdict"] for r in compare(gone, base)}["packets.lost"] == "missing"


def test_per_class_latency_is_tracked_for_every_class_the_run_has():
    s = {**SUMMARY, "latency_by_class_us": {"roce": {"p50_us": 1000.0, "p99_us": 5000.0},
                                            "bulk": {"p50_us": 3000.0, "p99_us": None}}}
    base = baseline_of(s)
    assert {k: v for k, v in base["metrics"].items() if k.startswith("latency")} == {
        "latency_by_class_us.bulk.p50_us": 3000.0, "latency_by_class_us.roce.p50_us": 1000.0,
        "latency_by_class_us.roce.p99_us": 5000.0}
    slower = {**s, "latency_by_class_us": {"roce": {"p50_us": 2600.0, "p99_us": 9000.0},
                                           "bulk": {"p50_us": 9000.0}}}
    rows = {r["metric"]: r for r in compare(slower, base)}
    assert rows["latency_by_class_us.roce.p50_us"]["verdict"] == "regressed"   # over 2 x 1000 (rel 1.0)
    assert rows["latency_by_class_us.roce.p99_us"]["verdict"] == "ok"          # within 2 x 5000
    assert rows["latency_by_class_us.bulk.p50_us"]["verdict"] == "regressed"


def test_verdict_separates_policy_from_performance_on_an_emulation_that_fell_behind():
    from testbed.regress.baselines import verdict
    assert verdict([], True) == "ok" and verdict([], False) == "inconclusive"
    assert verdict(["collective.bound_ratio"], True) == "regressed"
    assert verdict(["collective.bound_ratio", "latency_by_class_us.roce.p50_us",
                    "transport.steady_state.bottleneck_queue.p99_bytes"], False) == "inconclusive"
    assert verdict(["qos.ecn.marked"], False) == "regressed"        # no marks is the policy, not the machine
    assert verdict(["problems", "collective.bound_ratio"], False) == "regressed"   # a stalled run
    assert verdict(["collective.iterations_complete"], False) == "regressed"   # a policy metric under collective.


def test_losses_the_emulator_explains_are_inconclusive_only_on_an_unfaithful_run():
    from testbed.regress.baselines import LOSS_METRICS, lost_to_the_emulator, verdict
    inside = {"packets": {"lost": 22, "lost_inside_emulator": 22}}
    explained = lost_to_the_emulator(inside)
    assert explained == list(LOSS_METRICS)
    assert verdict(["packets.lost", "packets.retransmitted"], False, explained) == "inconclusive"
    # a faithful run has no excuse, and a port buffer drop is the policy's whatever the machine did
    assert verdict(["packets.lost"], True, explained) == "regressed"
    assert verdict(["packets.lost", "packets.port_buffer_drops"], False, explained) == "regressed"
    # the emulator lost some, a queue the rest: the loss is the policy's
    assert lost_to_the_emulator({"packets": {"lost": 22, "lost_inside_emulator": 5}}) == []
    assert verdict(["packets.lost"], False, []) == "regressed"
    assert lost_to_the_emulator({"packets": {"lost": 0, "lost_inside_emulator": 0}}) == []


def test_a_scenarios_own_tolerance_replaces_the_default_and_keeps_its_direction():
    from testbed.regress.baselines import tolerance_of
    base = baseline_of(SUMMARY)
    worse = {**SUMMARY, "packets": {"lost": 6, "retransmitted": 111}}
    wider = {"packets.retransmitted": (0.0, 250.0)}
    assert tolerance_of("packets.retransmitted", wider).better == "lower"
    rows = {r["metric"]: r for r in compare(worse, base, wider)}
    assert rows["packets.retransmitted"]["verdict"] == "ok" and rows["packets.retransmitted"]["limit"] == 260
    assert rows["packets.lost"]["verdict"] == "regressed"     # the others keep their defaults
    # narrower too: 10% of 1.0 s is 1.1 s
    rows = {r["metric"]: r for r in compare({**SUMMARY, "collective": {"bound_ratio": 0.9, "mean_time_s": 1.12}},
                                            base, {"collective.mean_time_s": (0.10, 0.0)})}
    assert rows["collective.mean_time_s"]["verdict"] == "regressed"


def test_a_baseline_is_recorded_only_from_a_clean_commit(tmp_path):
    from testbed.regress.baselines import save_baseline, unrecordable
    clean = {**SUMMARY, "git_commit": "a" * 40}
    assert unrecordable(clean["git_commit"]) is None and save_baseline(clean, tmp_path).exists()
    for commit in ("a" * 40 + "-dirty", None):
        with pytest.raises(ValueError, match="uncommitted|no git commit"):
            save_baseline({**SUMMARY, "scenario": "y", "git_commit": commit}, tmp_path)
    assert not (tmp_path / "y.json").exists()


def _run(t, marks, verdict="kept_up", status="ok", run_id="r", commit=None):
    return {"scenario": "s", "run_id": run_id, "git_commit": commit, "status": status, "fidelity": {"verdict": verdict},
            "collective": {"mean_time_s": t, "iterations_complete": 1}, "qos": {"ecn": {"marked": marks}}}


def test_the_spread_judges_performance_over_faithful_runs_and_policy_over_every_clean_one():
    from testbed.regress.baselines import SPREAD_FACTOR, spread, spread_entry, tolerance_toml
    runs = [_run(1.0 + 0.01 * i, 100 + i) for i in range(20)]
    # an unfaithful run: its time says nothing, its marks count (policy is judged on every run);
    # a failed run counts for neither
    runs += [_run(9.0, 90, verdict="could_not_keep_up"), _run(9.0, 0, status="failed")]
    st = spread([spread_entry(r) for r in runs])
    assert st["collective.mean_time_s"]["runs"] == 20 and st["collective.mean_time_s"]["max"] == pytest.approx(1.19)
    assert st["collective.mean_time_s"]["abs"] == pytest.approx(SPREAD_FACTOR * 0.19, rel=1e-3)
    assert st["qos.ecn.marked"]["runs"] == 21
    assert st["qos.ecn.marked"]["min"] == 90 and st["qos.ecn.marked"]["max"] == 119
    # a metric that must equal its baseline has no tolerance
    assert "collective.iterations_complete" not in st
    # the tables parse as the scenario's own
    import tomllib
    from testbed.scenario import load_document
    doc = {"tolerance": tomllib.loads(tolerance_toml(st, ["abc"]))["tolerance"]}
    sc = load_document("s", doc, "s.toml")
    assert {t.metric: t.abs for t in sc.tolerance}["qos.ecn.marked"] == pytest.approx(SPREAD_FACTOR * 29)


def test_a_metric_that_moves_in_steps_gets_at_least_one_step_of_tolerance():
    # twenty runs agreeing to the frame on a queue's p99: the range is 0, the next run can be a
    # frame away; a metric whose range is wider than its step keeps its measured tolerance
    import tomllib

    from testbed.regress.baselines import spread, spread_entry, tolerance_toml
    from testbed.scenario import load_document
    q = "transport.steady_state.bottleneck_queue.p99_bytes"
    runs = []
    for i in range(20):
        r = _run(1.0 + 0.01 * i, 100 + i)
        r["transport"] = {"steady_state": {"bottleneck_queue": {"p99_bytes": 8308.0}}}
        runs.append(spread_entry(r))
    steps = {q: 4154.0, "qos.ecn.marked": 1.0}
    st = spread(runs, lambda path: steps.get(path, 0.0))
    assert st[q]["min"] == st[q]["max"] == 8308.0 and st[q]["abs"] == 4154.0 and st[q]["step"] == 4154.0
    assert st["qos.ecn.marked"]["abs"] == pytest.approx(1.5 * 19) and st["qos.ecn.marked"]["step"] is None
    # without a step the range is all there is
    assert spread(runs)[q]["abs"] == 0.0
    text = tolerance_toml(st, ["abc"])
    assert "8308 .. 8308, median 8308; its step, 4154" in text
    sc = load_document("s", {"tolerance": tomllib.loads(text)["tolerance"]}, "s.toml")
    assert {t.metric: t.abs for t in sc.tolerance}[q] == 4154.0


def test_a_tolerance_is_never_narrower_than_the_spread_factor_times_the_range():
    # dateline-torus's queue p99 over 20 runs: 531712 .. 548328 bytes, 1.5 x the range is six
    # frames of 4154 (24924 bytes); rounded to the nearest three figures it was 24900, and a CI run
    # six frames above the baseline failed it
    from testbed.regress.baselines import compare, round_up, spread, spread_entry
    q = "transport.steady_state.bottleneck_queue.p99_bytes"
    runs = []
    for i, p99 in enumerate([531712.0] * 10 + [535866.0] * 9 + [548328.0]):
        r = _run(1.0 + 0.01 * i, 100)
        r["transport"] = {"steady_state": {"bottleneck_queue": {"p99_bytes": p99}}}
        runs.append(r)
    tol = spread([spread_entry(r) for r in runs], lambda path: 4154.0 if path == q else 0.0)[q]["abs"]
    assert tol >= 1.5 * (548328 - 531712) and tol == 25000.0
    base = spread_entry(runs[0])
    six_up = {"transport": {"steady_state": {"bottleneck_queue": {"p99_bytes": 531712.0 + 6 * 4154}}}}
    seven_up = {"transport": {"steady_state": {"bottleneck_queue": {"p99_bytes": 531712.0 + 7 * 4154}}}}
    assert [r["verdict"] for r in compare(six_up, base, {q: (0.0, tol)}) if r["metric"] == q] == ["ok"]
    assert [r["verdict"] for r in compare(seven_up, base, {q: (0.0, tol)}) if r["metric"] == q] == ["regressed"]
    # three figures, up; a float's last-place noise is not a figure
    assert round_up(24924.0) == 25000.0 and round_up(1.5 * 0.19) == 0.285 and round_up(0.0) == 0.0
    assert round_up(0.0056895) == 0.00569 and round_up(0.00569001) == 0.0057


def test_a_spread_ledger_keeps_each_run_once_and_gives_the_spread_its_runs_gave(tmp_path):
    # two sessions' runs, their folders gone after the first: the ledger's spread is the one the
    # summaries themselves give
    from testbed.regress.baselines import read_ledger, record_spread, spread, spread_entry
    first = [spread_entry(_run(1.0 + 0.01 * i, 100 + i, run_id=f"a{i}", commit="c1")) for i in range(10)]
    second = [spread_entry(_run(1.2 + 0.01 * i, 80 + i, run_id=f"b{i}", commit="c1")) for i in range(10)]
    assert record_spread("s", first, tmp_path)[1] == 10
    path, added = record_spread("s", first[:3] + second, tmp_path)
    assert added == 10 and len(path.read_text().splitlines()) == 20
    assert spread(read_ledger("s", tmp_path)) == spread(first + second)
    assert spread(read_ledger("s", tmp_path))["collective.mean_time_s"]["max"] == pytest.approx(1.29)


def test_a_spread_ledger_refuses_a_dirty_run_and_writes_nothing(tmp_path):
    from testbed.regress.baselines import ledger_path, record_spread, spread_entry
    runs = [spread_entry(_run(1.0, 100, run_id="a", commit="c1")),
            spread_entry(_run(1.0, 100, run_id="b", commit="c1-dirty"))]
    with pytest.raises(ValueError, match="run b: .*uncommitted"):
        record_spread("s", runs, tmp_path)
    with pytest.raises(ValueError, match="run a: the run names no git commit"):
        record_spread("s", [spread_entry(_run(1.0, 100, run_id="a"))], tmp_path)
    assert not ledger_path("s", tmp_path).exists()


def test_a_run_whose_set_changed_the_policy_stays_out_of_ledgers_and_baselines_and_a_slower_one_does_not(tmp_path):
    from testbed.regress.baselines import ledger_path, record_spread, save_baseline, spread_entry
    sabotaged = {**_run(1.0, 0, run_id="ecn-off", commit="c1"), "overrides": ["run.dilation=63000", "qos.ecn=false"]}
    slower = {**_run(1.0, 100, run_id="twice-d", commit="c1"), "overrides": ["run.dilation=63000", "run.report=false"]}
    with pytest.raises(ValueError, match=r"run ecn-off: it was made with --set qos.ecn=false, which changes"):
        record_spread("s", [spread_entry(slower), spread_entry(sabotaged)], tmp_path)
    assert not ledger_path("s", tmp_path).exists()
    assert record_spread("s", [spread_entry(slower)], tmp_path)[1] == 1
    assert '"overrides": ["run.dilation=63000", "run.report=false"]' in ledger_path("s", tmp_path).read_text()
    with pytest.raises(ValueError, match="qos.ecn=false"):
        save_baseline({**SUMMARY, **sabotaged, "scenario": "y"}, tmp_path)
    assert not (tmp_path / "y.json").exists()
    assert save_baseline({**SUMMARY, **slower, "scenario": "y"}, tmp_path).exists()


def test_a_bad_spread_ledger_line_names_the_file_line_and_field(tmp_path):
    import json

    from testbed.errors import InputError
    from testbed.regress.baselines import ledger_path, read_ledger, spread_entry
    p = ledger_path("s", tmp_path)
    p.parent.mkdir()
    good = spread_entry(_run(1.0, 100, run_id="a", commit="c1"))
    p.write_text(json.dumps(good) + "\n" + json.dumps({**good, "spread_version": 0}) + "\n")
    with pytest.raises(InputError, match=r"s\.jsonl:2: spread_version"):
        read_ledger("s", tmp_path)
    p.write_text(json.dumps({**good, "scenario": "t"}) + "\n")
    with pytest.raises(InputError, match=r"s\.jsonl:1: scenario"):
        read_ledger("s", tmp_path)
    p.write_text("{\n")
    with pytest.raises(InputError, match=r"s\.jsonl:1: not JSON"):
        read_ledger("s", tmp_path)


def test_a_go_back_with_nothing_lost_is_the_emulators_on_an_unfaithful_run():
    from testbed.regress.baselines import lost_to_the_emulator, verdict
    s = {"packets": {"lost": 0, "retransmitted": 33, "resent_without_loss": True}}
    explained = lost_to_the_emulator(s)
    assert "packets.retransmitted" in explained
    assert verdict(["packets.retransmitted", "collective.mean_time_s"], False, explained) == "inconclusive"
    # a real loss the policy caused is still a regression
    assert verdict(["packets.retransmitted", "packets.lost"], False,
                   lost_to_the_emulator({"packets": {"lost": 3, "retransmitted": 40}})) == "regressed"


def test_buffer_drops_are_the_emulators_only_when_every_row_past_its_headroom_was_paused_late():
    from testbed.analysis.qos import headroom_overruns
    from testbed.regress.baselines import lost_to_the_emulator, verdict

    def row(port, held, reaction_us):
        return {"port": port, "class": 1, "max_held_bytes": held, "xoff_bytes": 200_000,
                "headroom_bytes": 100_000, "max_reaction_us": reaction_us}
    agent = {"reaction_us": {"allowance": 2000.0},
             "ingress_end": [row("s-eth1", 300_000, 9000.0),     # at its limit exactly: no overrun
                             row("s-eth2", 350_000, 4000.0),     # past it, its pause late
                             row("s-eth3", 250_000, 9000.0)]}    # late but within its headroom
    over = headroom_overruns(agent)
    assert [(o["port"], o["late"]) for o in over] == [("s-eth2", True)]
    s = {"packets": {"lost": 45, "port_buffer_drops": 45},
         "qos": {"pfc": {"headroom_overruns": over},
                 "queues": {"drops_by_port": [{"port": "s-eth9", "class": 1, "drops": 45}]}}}
    explained = lost_to_the_emulator(s)
    assert verdict(["packets.port_buffer_drops", "packets.lost"], False, explained) == "inconclusive"
    drops_none = [{"metric": "packets.port_buffer_drops", "op": "==", "value": 0}]
    (e,) = check_expectations(s, drops_none, fidelity_valid=False)   # what `testbed run` says too
    assert e["ok"] is None and "emulator" in e["why"]
    assert check_expectations(s, drops_none, fidelity_valid=True)[0]["ok"] is False
    # a row past its headroom though its pause came in time: the headroom is too small for the
    # rates, which is the policy's, so the drops are too
    agent["ingress_end"].append(row("s-eth4", 320_000, 1500.0))
    s["qos"]["pfc"]["headroom_overruns"] = headroom_overruns(agent)
    assert verdict(["packets.port_buffer_drops"], False, lost_to_the_emulator(s)) == "regressed"
    assert check_expectations(s, drops_none, fidelity_valid=False)[0]["ok"] is False
    # drops with no row past its headroom (e.g. PFC off): the policy's
    s["qos"]["pfc"]["headroom_overruns"] = []
    assert verdict(["packets.port_buffer_drops"], False, lost_to_the_emulator(s)) == "regressed"
    # and a faithful run never excuses a drop
    assert verdict(["packets.port_buffer_drops"], True, explained) == "regressed"


def test_a_row_past_its_headroom_behind_a_link_that_ran_ahead_of_its_rate_is_the_emulators():
    # port_dequeue keeps, at a row's highest count, what its link had delivered beyond its rate just
    # before: an in-time overrun no larger than that is the link's (a hardware link cannot run
    # ahead), one larger is the policy's or the switch's
    from testbed.analysis.qos import headroom_overruns
    from testbed.regress.baselines import lost_to_the_emulator, verdict

    def row(port, peak, ahead):
        return {"port": port, "class": 1, "max_held_bytes": peak - 4096, "peak_held_bytes": peak,
                "peak_ahead_bytes": ahead, "xoff_bytes": 200_000, "headroom_bytes": 100_000,
                "max_reaction_us": 1500.0}
    agent = {"reaction_us": {"allowance": 2000.0},
             "ingress_end": [row("s-eth1", 305_000, 5_000),     # 5000 over, 5000 ahead: the link's
                             row("s-eth2", 305_000, 0)]}        # at its rate: not
    over = headroom_overruns(agent)
    assert [(o["port"], o["max_held_bytes"], o["late"], o["link_ahead"], o["emulators"]) for o in over] == \
        [("s-eth1", 305_000, False, True, True), ("s-eth2", 305_000, False, False, False)]
    s = {"packets": {"lost": 3, "port_buffer_drops": 3},
         "qos": {"pfc": {"headroom_overruns": over}, "queues": {"drops_by_port": [{"port": "s-eth3", "class": 1,
                                                                                   "drops": 3}]}}}
    assert verdict(["packets.port_buffer_drops"], False, lost_to_the_emulator(s)) == "regressed"
    s["qos"]["pfc"]["headroom_overruns"] = over[:1]
    assert verdict(["packets.port_buffer_drops"], False, lost_to_the_emulator(s)) == "inconclusive"
    # a frame held in a CPU's backlog for 400 us, of a link at 80 ns a byte: 5000 bytes it
    # delivered after the pause that the upstream had sent before it
    agent["ingress_end"][1].update(peak_wire_us=400.0, byte_ps=80_000)
    assert headroom_overruns(agent)[1]["wire_bytes"] == 5000 and headroom_overruns(agent)[1]["link_ahead"]
    # a crossing the agent never answered (the row was back below XON before it looked) for longer
    # than the allowance is a late one, though every pause it sent was in time
    agent["ingress_end"][1].update(peak_wire_us=0.0, max_unanswered_us=30_000.0)
    (_, r) = headroom_overruns(agent)
    assert r["late"] and r["emulators"] and r["max_reaction_us"] == 30_000.0 and not r["link_ahead"]
    # a run recorded before the measure existed reads no link ahead
    del agent["ingress_end"][0]["peak_ahead_bytes"], agent["ingress_end"][0]["peak_held_bytes"]
    assert headroom_overruns(agent)[0]["link_ahead"] is False


def test_a_measured_spread_judges_marks_of_a_faithful_run_and_the_default_band_those_of_one_that_fell_behind():
    from testbed.regress.baselines import tolerance_of
    spread = {"qos.ecn.marked": (0.0, 39.0)}            # incast-ecn's: 1.5 x the range over its runs
    base = {"metrics": {"qos.ecn.marked": 871}}

    def judged(marked, verdict):
        s = {"qos": {"ecn": {"marked": marked}}, "fidelity": {"verdict": verdict}}
        (row,) = compare(s, base, spread)
        return row["verdict"]
    assert judged(783, "kept_up") == "regressed"                 # outside the spread, faithfully run
    assert judged(783, "could_not_keep_up") == "ok"              # a CI run's, its link at 0.913 of rate
    # a policy gone is caught however the run went
    assert judged(0, "could_not_keep_up") == "regressed" and judged(2000, "could_not_keep_up") == "regressed"
    assert tolerance_of("qos.ecn.marked", spread, faithful=False).rel == 0.5


def test_the_loss_excuse_covers_only_drops_behind_a_late_pause():
    # a late pause on s1 excuses the drops in s1's buffer, in its class; the same late row does not
    # excuse a drop in another switch or another class, nor one in a switch whose row outgrew its
    # headroom though paused in time
    from testbed.regress.baselines import lost_to_the_emulator, verdict
    late = {"port": "s1-eth2", "class": 1, "late": True, "link_ahead": False}
    in_time = {"port": "s2-eth1", "class": 1, "late": False, "link_ahead": False}

    def summary(overruns, drops):
        return {"packets": {"lost": sum(d["drops"] for d in drops), "port_buffer_drops": sum(d["drops"] for d in drops)},
                "qos": {"pfc": {"headroom_overruns": overruns}, "queues": {"drops_by_port": drops}}}

    def judged(overruns, drops):
        return verdict(["packets.port_buffer_drops", "packets.lost"], False, lost_to_the_emulator(summary(overruns, drops)))
    s1 = {"port": "s1-eth5", "class": 1, "drops": 7}
    assert judged([late], [s1]) == "inconclusive"
    assert judged([late], [s1, {"port": "s3-eth1", "class": 1, "drops": 1}]) == "regressed"     # another switch
    assert judged([late], [s1, {"port": "s1-eth5", "class": 2, "drops": 1}]) == "regressed"     # another class
    assert judged([late, in_time], [s1]) == "inconclusive"        # the in-time row dropped nothing
    assert judged([late, in_time], [s1, {"port": "s2-eth4", "class": 1, "drops": 2}]) == "regressed"
    assert judged([late, {**in_time, "port": "s1-eth3"}], [s1]) == "regressed"  # beside an in-time overrun
    # without the drops' places, nothing is excused
    assert lost_to_the_emulator({"packets": {"lost": 7, "port_buffer_drops": 7},
                                 "qos": {"pfc": {"headroom_overruns": [late]}}}) == []


def test_a_row_left_unjudged_leaves_the_scenario_without_a_verdict():
    from testbed.regress.baselines import verdict
    assert verdict([], True, (), ["jobs.train.slowdown"]) == "inconclusive"
    assert verdict(["collective.bound_ratio"], True, (), ["jobs.train.slowdown"]) == "regressed"
    assert verdict([], True, (), []) == "ok"


def test_a_job_sla_that_could_not_be_judged_makes_the_run_inconclusive():
    from testbed.analysis.summary import status_of
    s = {"jobs": {"train": {"slowdown": None, "alone_kept_up": False}}}
    (e,) = check_expectations(s, [{"metric": "jobs.train.slowdown", "op": "<=", "value": 1.5}])
    assert e["ok"] is None and "alone could not keep up" in e["why"]
    assert status_of([], None, 0, [], True, [e]) == "inconclusive"
    assert status_of([], None, 0, [], True, []) == "ok"
