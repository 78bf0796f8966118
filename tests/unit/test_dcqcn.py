"""DCQCN's reaction point, the data plane's own (nicdp.c through testbed.traffic.nic.Dcqcn), against the
algorithm as HPCC's rdma-hw.cc runs it (shared/REFERENCE.md), and the parameter scaling to an
emulated link."""
import dataclasses

import pytest

from testbed.scenario import DcqcnSpec
from testbed.traffic.nic import Dcqcn
from testbed.traffic.transport import RATE_ADDITIVE, RATE_CUT, RATE_FAST_RECOVERY, RATE_HYPER, dcqcn_params

LINE = 100e6


def params(**over):
    spec = {**dataclasses.asdict(DcqcnSpec()), "ref_gbps": 0.1, "min_rate_mbps": 1, **over}  # no dilation
    return dcqcn_params(spec, LINE)


def load_dcqcn(table: dict, bw_gbps: float = 100):
    from testbed.scenario import load_document
    doc = {"scenario_version": 2, "fabric": {"topology": "leafspine", "bw_gbps": bw_gbps},
           "controller": {"routing": "shortest_path"},
           "workload": {"type": "incast", "ect": True}, "transport": {"cc": "dcqcn"},
           "qos": {"ecn": True}, "classes": [{"name": "roce", "dscp": [26], "ecn": True, "default": True}],
           "dcqcn": table}
    return load_document("x", doc, "scenarios/x.toml").dcqcn


def test_the_defaults_are_hpcc_dcqcn_paper_at_the_fabric_rate():
    # HPCC's simulation/run.py, cc = dcqcn_paper, for a link of bw Gb/s: ALPHA_RESUME_INTERVAL 50,
    # RATE_DECREASE_INTERVAL 50, RP_TIMER 55 (us), EWMA_GAIN 0.00390625, FAST_RECOVERY_TIMES 1,
    # RATE_AI 5 bw / 25 Mb/s, RATE_HAI 50 bw / 25 Mb/s, MIN_RATE 1000 Mb/s, CLAMP_TARGET_RATE 0, and
    # its Mellanox-model reaction point counts no bytes
    from testbed.scenario import dcqcn_overrides
    for bw in (100, 400):
        d = load_dcqcn({}, bw)
        assert (d.ref_gbps, d.alpha_interval_us, d.rate_decrease_interval_us,
                d.rate_increase_timer_us) == (bw, 50, 50, 55)
        assert (d.g, d.fast_recovery_rounds, d.byte_counter_bytes, d.clamp_target_rate) == (1 / 256, 1, 0, False)
        assert (d.rai_mbps, d.rhai_mbps, d.min_rate_mbps) == (5 * bw / 25, 50 * bw / 25, 1000)
        assert dcqcn_overrides(dataclasses.asdict(d)) == []
    # a table naming another rate takes the reference's steps for that rate; a value it sets stays,
    # and the summary names it
    d = load_dcqcn({"ref_gbps": 25, "rhai_mbps": 7, "fast_recovery_rounds": 5})
    assert (d.rai_mbps, d.rhai_mbps) == (5, 7)
    assert dcqcn_overrides(dataclasses.asdict(d)) == ["fast_recovery_rounds", "rhai_mbps"]


def test_parameters_scale_with_the_emulated_link():
    p = dcqcn_params({**dataclasses.asdict(DcqcnSpec()), "ref_gbps": 40}, 100e6)
    assert p["time_scale"] == 400
    assert p["cnp_interval_ns"] == 50_000 * 400 and p["rate_increase_timer_ns"] == 55_000 * 400
    assert p["rai_bps"] == pytest.approx(20e6 / 400) and p["rhai_bps"] == pytest.approx(200e6 / 400)
    p = dcqcn_params({**dataclasses.asdict(DcqcnSpec()), "ref_gbps": 40, "byte_counter_bytes": 10 << 20}, 100e6)
    assert p["byte_counter_bytes"] == 10 << 20  # bytes are not dilated
    p = dcqcn_params({**dataclasses.asdict(DcqcnSpec()), "time_scale": 7.0}, 100e6)
    assert p["time_scale"] == 7.0


def test_first_cnp_halves_the_rate_and_fast_recovery_returns_halfway_each_period():
    p = params(byte_counter_bytes=0, fast_recovery_rounds=5)
    d = Dcqcn(p)
    d.cnp(1000)
    assert d.rate == pytest.approx(LINE / 2) and d.target == LINE and d.alpha == 1.0
    assert [k for _, k, *_ in d.log] == [RATE_CUT]
    t = 1000
    # Reference: stages 0..F-1 are fast recovery, so F increase events move halfway to the target
    for i in range(1, p["fast_recovery_rounds"] + 1):
        t += p["rate_increase_timer_ns"]
        d.advance(t)
        assert d.log[-1][1] == RATE_FAST_RECOVERY
        assert d.rate == pytest.approx(LINE - LINE / 2 ** (i + 1))  # halfway to the target each time
        assert d.target == LINE


def test_increase_goes_fast_then_additive_then_hyper_and_rests_at_line_rate():
    p = params(byte_counter_bytes=0, rai_mbps=1, rhai_mbps=5, fast_recovery_rounds=5)
    d = Dcqcn(p)
    d.cnp(0)
    d.cnp(p["rate_decrease_interval_ns"])  # second cut, after no increase: the target stays
    assert d.target == LINE and d.rate == pytest.approx(LINE / 2 * (1 - d.alpha / 2))
    d.log.clear()
    t = p["rate_decrease_interval_ns"]
    kinds = []
    while d.running:
        t += p["rate_increase_timer_ns"]
        d.advance(t)
        kinds += [k for _, k, *_ in d.log]
        d.log.clear()
    f = p["fast_recovery_rounds"]
    # HPCC's RateIncEventMlx compares the stage before it moves: F rounds of fast recovery, the
    # (F+1)-th event is additive, every later one hyper
    assert kinds[:f] == [RATE_FAST_RECOVERY] * f
    assert kinds[f] == RATE_ADDITIVE
    assert kinds[f + 1:] and set(kinds[f + 1:]) == {RATE_HYPER}
    assert d.rate == d.target == LINE


def test_alpha_rises_with_cnps_and_decays_without():
    p = params(g=1 / 16)
    d = Dcqcn(p)
    d.cnp(0)
    a = p["alpha_interval_ns"]
    d.advance(a)            # no CNP in the first interval: alpha decays
    assert d.alpha == pytest.approx(1 - 1 / 16)
    d.cnp(a + 1)
    d.advance(2 * a)        # a CNP in it: alpha moves toward 1
    assert d.alpha == pytest.approx((1 - 1 / 16) ** 2 + 1 / 16)


def test_a_cnp_after_recovery_decays_alpha_once_per_tick_due_and_no_more():
    # back at line rate the reaction point rests; a CNP then catches up the alpha ticks it missed:
    # one per tick due by then, none when the next tick was not due yet (HPCC runs the alpha timer
    # throughout, so a tick not yet due has not decayed alpha)
    p = params(g=1 / 16, byte_counter_bytes=0)
    a = p["alpha_interval_ns"]

    def rested():
        d = Dcqcn(p)
        d.cnp(0)
        t = 0
        while d.running:
            t += p["rate_increase_timer_ns"]
            d.advance(t)
        return d, t
    d, t = rested()
    alpha, due = d.alpha, d.next_alpha_ns
    assert due > t          # the tick after the last one run, not due when it came to rest
    d.cnp(due - 1)          # before it: no decay
    assert d.alpha == pytest.approx(alpha) and d.next_alpha_ns == due
    d, _ = rested()
    d.cnp(due + 2 * a)      # three ticks due (at due, due + a, due + 2a): three decays
    assert d.alpha == pytest.approx(alpha * (1 - 1 / 16) ** 3) and d.next_alpha_ns == due + 3 * a


def test_cuts_are_spaced_by_the_decrease_interval_and_never_below_min_rate():
    p = params(min_rate_mbps=10, rate_decrease_interval_us=4)
    d = Dcqcn(p)
    iv = p["rate_decrease_interval_ns"]
    for i in range(50):
        d.cnp(i * iv // 4)  # four CNPs per interval
    d.advance(50 * iv // 4)
    assert d.cuts <= 50 // 4 + 1
    assert d.rate == pytest.approx(10e6)
    assert d.cnps == 50


def test_byte_counter_drives_increase_events():
    p = params(byte_counter_bytes=1000, rate_increase_timer_us=1e6)
    d = Dcqcn(p)
    d.cnp(0)
    r0 = d.rate
    for _ in range(3):
        d.sent(1000, 1)
    assert d.byte_stage == 3 and d.rate > r0
