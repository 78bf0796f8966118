"""Every limit of every committed baseline lies inside what its scenario can physically produce,
and the sabotaged policies stay caught at it (testbed/regress/limits.py)."""
import copy
import dataclasses

import pytest

from testbed.regress import baselines as regress
from testbed.regress import limits
from testbed.regress.baselines import BASELINE_DIR, check_expectations, compare, load_baseline
from testbed.scenario import SCENARIO_DIR, load_scenario

BASELINES = sorted(p.stem for p in BASELINE_DIR.glob("*.json"))

# What each sabotaged policy does to a tracked metric: physics where it is certain (no marking
# policy marks nothing, no PFC pauses nothing, a route without its dateline deadlocks the ring),
# and measured runs' outcomes where physics gives no number.
SABOTAGE = {
    "incast-ecn": [("qos.ecn=false", "qos.ecn.marked", 0)],
    # and a PFC policy pausing 100 times as often for the traffic it carries (issue 26: a bare
    # pauses > 0 passed it): outside the measured band of pauses per MB
    "incast-pfc": [("qos.pfc=false", "qos.pfc.pauses", 0), ("pauses 100x", "qos.pfc.pauses_per_mb", 2042.0)],
    "incast-fattree-pfc": [("qos.pfc=false", "qos.pfc.pauses", 0), ("pauses 100x", "qos.pfc.pauses_per_mb", 2180.0)],
    # no congestion control: no receiver sends a CNP, no sender cuts its rate
    "dcqcn-incast": [("transport.cc=none", "transport.cnps_sent", 0), ("transport.cc=none", "transport.rate_cuts", 0)],
    # priority-mix's bound ratio, 2 runs each on 0c6fc86 (D = 31500, faithful): FIFO scheduling
    # 0.5989-0.5991, the priorities swapped 0.313-0.375, against 0.942-0.961 over its 36 ledger runs
    "priority-mix": [("qos.scheduling=fifo", "collective.bound_ratio", 0.599),
                     ("workload.dscp=0 workload.bulk_dscp=26", "collective.bound_ratio", 0.375)],
    # routes left on the failed link: Open vSwitch drops what they send into the down port, 2195-2216
    # frames in the sabotage's runs (docs/regression.md), where failover lost 0-18 in 22 runs
    "linkfail-torus3d": [("controller.reroute=false", "packets.lost", 2195)],
    # without the watchdog the cyclic pauses hold the ring for good: a deadlock, and no watchdog fires
    "pfc-watchdog-torus": [("qos.pfc_watchdog_ms=0", "qos.pfc.deadlocked", True),
                           ("qos.pfc_watchdog_ms=0", "qos.pfc.watchdog_fired", 0)],
    # one path a destination: no select group, so no equal-cost uplink set is loaded
    "ps-fattree": [("controller.routing=shortest_path", "links.ecmp.loaded_groups", 0)],
    "dateline-torus": [("controller.dateline=false", "qos.pfc.deadlocked", True),
                       ("controller.dateline=false", "collective.iterations_complete", 0)],
    "allreduce-fattree": [("controller.routing=shortest_path", "links.ecmp.loaded_groups", 0)],
    "allreduce-leafspine": [("controller.routing=shortest_path", "links.ecmp.loaded_groups", 0)],
    "pipeline-fattree": [("controller.routing=shortest_path", "links.ecmp.loaded_groups", 0)],
    "megatron-fattree": [("controller.routing=shortest_path", "links.ecmp.loaded_groups", 0)],
    # and without isolation every cross-tenant probe arrives (16 a run)
    "two-jobs-fattree": [("controller.routing=shortest_path", "links.ecmp.loaded_groups", 0),
                         ("controller.tenant_isolation=false", "isolation.cross_tenant_delivered", 16)],
    # a training scenario's band: its links at half their rate (a shaper or a port policy gone
    # wrong) cannot run an iteration faster than its bound at that rate (testbed check --set
    # fabric.bw_gbps=50: 1333.3 us for the flagship's ring), far outside the measured spread
    # (714.0-716.3 us over 25 runs)
    "allreduce-torus": [("fabric.bw_gbps=50", "collective.mean_time_s", 0.0013332912)],
    "allreduce-torus3d": [("fabric.bw_gbps=50", "collective.mean_time_s", 0.0013332912)],
    # DDP's and the hybrid's iterations hide part of their communication behind compute; their
    # bounds at half rate still hold every exposed byte (1514.4 and 1475.5 us)
    "ddp-torus": [("fabric.bw_gbps=50", "collective.mean_time_s", 0.00151440512)],
    "hybrid-torus": [("fabric.bw_gbps=50", "collective.mean_time_s", 0.00147551904)],
    # the flagship's ring through bit errors: at half rate no iteration beats 1333 us (its band,
    # 0.723-1.061 ms over 20 runs, is wide for the retransmission timeout a damaged resend waits);
    # without go-back-N nothing is resent while the ports damage frames
    "bit-errors-torus": [("fabric.bw_gbps=50", "collective.mean_time_s", 0.0013332912),
                         ("transport.reliability=none", "packets.retransmitted", 0, {"packets.lost": 16})],
    # without go-back-N nothing is resent, while the port drops and frames are lost (its
    # expectations say it must drop; its losses are not tracked, their spread admits any count)
    "lossy-fabric": [("transport.reliability=none", "packets.retransmitted", 0, {"packets.lost": 1})],
    # the tuning off makes no move; pinned to its start, it ends where it began
    "ecn-tuning-incast": [("controller.ecn_tuning=off", "qos.ecn_tuning.changes", 0),
                          ("controller.ecn_tuning_kmin_bytes=[800000, 800000]",
                           "qos.ecn_tuning.classes.roce.end.kmin_bytes", 800000)],
}


def overrides(sc):
    return {t.metric: (t.rel, t.abs) for t in sc.tolerance}


def test_there_are_baselines_to_check():
    assert BASELINES, f"no committed baseline in {BASELINE_DIR}"


@pytest.mark.parametrize("name", BASELINES)
def test_every_limit_of_a_committed_baseline_is_physically_reachable(name):
    sc = load_scenario(name)
    assert limits.unreachable(load_baseline(name), sc) == []


@pytest.mark.parametrize("name", BASELINES)
def test_every_tracked_metric_of_a_baseline_has_a_physical_bound(name):
    assert limits.unbounded(load_baseline(name), load_scenario(name)) == []


@pytest.mark.parametrize("name", BASELINES)
def test_no_tolerance_of_a_committed_baseline_is_finer_than_its_metrics_step(name):
    assert limits.finer_than_step(load_baseline(name), load_scenario(name)) == []


def test_a_queue_percentile_moves_in_whole_frames_of_its_scenario():
    sc = load_scenario("hybrid-torus")
    q = "transport.steady_state.bottleneck_queue.p99_bytes"
    assert limits.resolution(q, sc) == sc.workload.payload_bytes + 58 == 4154
    assert limits.resolution("collective.mean_time_s", sc) == 0.0
    # a tolerance of none on it is refused; one frame is not
    base = {"metrics": {q: 8308.0}}
    zero = dataclasses.replace(sc, tolerance=[t if t.metric != q else dataclasses.replace(t, abs=0.0)
                                              for t in sc.tolerance])
    assert limits.finer_than_step(base, zero) == [f"{q}: tolerance 0 is finer than its step 4154"]
    frame = dataclasses.replace(sc, tolerance=[t if t.metric != q else dataclasses.replace(t, abs=4154.0)
                                               for t in sc.tolerance])
    assert limits.finer_than_step(base, frame) == []


@pytest.mark.parametrize("name", BASELINES)
def test_committed_baselines_are_of_clean_commits(name):
    assert regress.unrecordable(load_baseline(name)["git_commit"]) is None


@pytest.mark.parametrize("name", BASELINES)
def test_the_sabotaged_policies_stay_caught_at_the_limits(name):
    sc, base = load_scenario(name), load_baseline(name)
    cases = SABOTAGE.get(name)
    assert cases, f"{name} has a baseline but no sabotage to check it against"
    for setting, path, value, *also in cases:
        caught_by = []
        if path in base["metrics"]:
            metrics = copy.deepcopy(base["metrics"]) | {path: value}
            rows = compare(limits._as_summary(metrics), base, overrides(sc))
            caught_by += [r["metric"] for r in rows if r["verdict"] == "regressed"]
        # the run's other metrics as the baseline has them, so that an expectation comparing two
        # metrics (resent >= lost) is judged on both, not failed for a missing one
        summary = limits._as_summary(copy.deepcopy(base["metrics"]) | {path: value} | (also[0] if also else {}))
        caught_by += [e["metric"] for e in check_expectations(summary, [e.__dict__ for e in sc.expect])
                      if e["metric"] == path and e["ok"] is False]
        assert path in caught_by, f"{name} with {setting}: {path} = {value} passes its limits"


def test_a_limit_above_the_buffer_is_found():
    # incast-ecn's bottleneck queue with the old default tolerance (twice the baseline): above the
    # 504 whole frames its 2 MiB class buffer holds, it could never fail
    sc = load_scenario("incast-ecn")
    base = {"metrics": {"transport.steady_state.bottleneck_queue.p99_bytes": 1.58e6}}
    found = limits.unreachable(base, dataclasses.replace(sc, tolerance=()))
    assert len(found) == 1 and "2.094e+06" in found[0], found
    # lossy-fabric's full queue: 15 frames of 4154 bytes fill its 64 KiB buffer, a 16th never fits,
    # so a p99 at 15 frames cannot grow and its baseline does not track it
    lossy = load_scenario("lossy-fabric")
    q = "transport.steady_state.bottleneck_queue.p99_bytes"
    assert limits.physical_range(q, lossy).hi == 15 * 4154
    assert limits.unreachable({"metrics": {q: 62310.0}}, lossy) != []
    assert q not in load_baseline("lossy-fabric")["metrics"]


def test_the_bottleneck_queue_is_bounded_by_the_class_it_queues_in():
    # priority-mix's deepest queue is the bulk class's (4 MiB), behind the RoCE class (256 KiB):
    # every run in its ledger measured it over 2 MB, so a bound of the collective's class buffer
    # would call a run it measures impossible and leave the metric untracked
    sc = load_scenario("priority-mix")
    q = "transport.steady_state.bottleneck_queue.p99_bytes"
    hi = limits.physical_range(q, sc).hi
    assert hi == 4 * 2 ** 20 // 4154 * 4154
    measured = [e["metrics"][q] for e in regress.read_ledger("priority-mix")]
    assert min(measured) > 256 * 1024 and max(measured) <= hi
    assert q in load_baseline("priority-mix")["metrics"]
    assert limits.unreachable(load_baseline("priority-mix"), sc) == []


def test_a_near_limit_that_admits_none_is_found():
    # pauses allowed to move 90% down: a run without PFC (no pause at all) would pass
    sc = load_scenario("incast-pfc")
    base = {"metrics": {"qos.pfc.pauses": 10}}
    found = limits.unreachable(base, dataclasses.replace(sc, tolerance=()))
    assert len(found) == 1 and "qos.pfc.pauses" in found[0], found


def test_latency_past_the_buffers_of_a_lossy_class_is_unreachable():
    sc = load_scenario("incast-ecn")
    # one switch hop, a 2 MiB class buffer at 100 Gb/s: 168 us of hardware time at most
    assert limits.max_latency_s(sc, 1) == pytest.approx(2 * 2 ** 20 * 8 / 100e9)
    base = {"metrics": {"latency_by_class_us.roce.p99_us": 126.0}}
    found = limits.unreachable(base, dataclasses.replace(sc, tolerance=()))
    assert len(found) == 1 and "latency_by_class_us.roce.p99_us" in found[0], found


def test_every_committed_spread_ledger_reads_and_holds_runs_of_clean_commits_of_its_scenario():
    # a ledger a hand edit broke, or one holding a dirty tree's run, fails here, not in a spread
    ledgers = sorted(BASELINE_DIR.glob("spread/*.jsonl"))
    for path in ledgers:
        entries = regress.read_ledger(path.stem)
        assert entries, f"{path}: empty"
        assert len({e["run_id"] for e in entries}) == len(entries), f"{path}: a run twice"
        assert not [e["run_id"] for e in entries if regress.unrecordable(e.get("git_commit"))], path


LEDGERS = sorted(p.stem for p in BASELINE_DIR.glob("spread/*.jsonl"))


@pytest.mark.parametrize("name", LEDGERS)
def test_a_scenario_with_a_spread_ledger_holds_the_tolerances_its_ledger_gives(name):
    # the tables are `testbed spread`'s output over the committed ledger: a hand edit, or a ledger
    # grown without its tables written again, fails here
    sc = load_scenario(name)
    stats = regress.spread(regress.read_ledger(name), lambda path: limits.resolution(path, sc))
    assert {p: st["abs"] for p, st in stats.items()} == {p: a for p, (_, a) in limits.overrides(sc).items()}


def _recorded_ranges(name):
    """(metric, abs, least, largest) of each [[tolerance]] table whose comment records the range
    it was measured over ("# lo .. hi, median m"), the range as printed, to six figures."""
    import re
    text = (SCENARIO_DIR / f"{name}.toml").read_text()
    pat = re.compile(r'metric = "([^"]+)"\nabs = (\S+)  # (\S+) \.\. (\S+), median ')
    return [(m[1], float(m[2]), m[3], m[4]) for m in pat.finditer(text)]


@pytest.mark.parametrize("name", sorted(p.stem for p in SCENARIO_DIR.glob("*.toml")))
def test_no_tolerance_is_narrower_than_the_spread_factor_times_the_range_it_records(name):
    # dateline-torus's queue p99 over 531712 .. 548328 bytes: 1.5 x the range is six frames
    # (24924 bytes), rounded to the nearest 24900; a CI run six frames above its baseline failed it.
    # The printed range is exact to half its sixth figure, so the least range it can stand for is
    # the one checked
    from decimal import Decimal

    def half_ulp(s):
        q = Decimal(s)
        # (.6g prints 0.9999995 as "1")
        return float(Decimal(5).scaleb(q.adjusted() - 6)) if q else 0.0

    short = []
    for path, tol, lo, hi in _recorded_ranges(name):
        least = max(0.0, (float(hi) - half_ulp(hi)) - (float(lo) + half_ulp(lo)))
        if tol < regress.round_up(regress.SPREAD_FACTOR * least):
            short.append(f"{path}: {tol} < {regress.SPREAD_FACTOR:g} x ({hi} - {lo})")
    assert not short, short
