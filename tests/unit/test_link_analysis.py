"""Link utilisation and the drain-rate fidelity verdict on constructed telemetry, with answers
worked out by hand."""
import numpy as np
import pandas as pd
import pytest

from testbed import link_analysis as la

RATE = 100e6          # 12 500 bytes per 1 ms
FRAME = 4154
MS = 1_000_000


def series(drained_per_ms, depth=50_000, port="s0-eth1", t0=0):
    """A port sampled every 1 ms: drained_per_ms[i] bytes leave in interval i."""
    n = len(drained_per_ms) + 1
    t = t0 + np.arange(n, dtype=np.int64) * MS
    depth = np.full(n, float(depth)) if np.isscalar(depth) else np.asarray(depth, dtype=float)
    return la.PortSeries(port, t, depth, np.concatenate([[0.0], np.cumsum(drained_per_ms, dtype=float)]))


def test_a_perfect_link_is_valid():
    s = series([12_500] * 100)
    c = la.drain_check(s, RATE, FRAME, 0.10)
    assert c["backlogged_intervals"] == 100 and c["share"] == 1.0 and c["drain_ratio"] == pytest.approx(1.0)
    f = la.link_fidelity([s], {s.port: RATE}, FRAME, 0.10, 0.99)
    assert f["valid"] and f["busy_links"] == 1 and f["worst_share"] == 1.0 and f["failing_links"] == []


def test_whole_frames_on_a_perfect_link_pass_by_the_one_frame_allowance():
    # a perfect 100 Mb/s link sending 9000-byte frames, its counter read every 1 ms: 1 or 2 frames
    # per interval (28% and 44% off the 12 500 bytes), never more than a frame off
    jumbo = 9000
    cum = np.floor(np.arange(201) * 12_500 / jumbo) * jumbo
    per = np.diff(cum)
    assert set(per) == {9000.0, 18000.0}
    assert la.drain_check(series(per), RATE, jumbo, 0.10)["share"] == 1.0
    # judged without the allowance (a 1-byte frame) every interval fails
    assert la.drain_check(series(per), RATE, 1, 0.10)["share"] == 0.0


def frame_series(deliveries_ns, frame, sample_ns, n_samples):
    """The counter a sampler reading every sample_ns sees for frames delivered at deliveries_ns."""
    t = np.arange(n_samples, dtype=np.int64) * sample_ns
    drained = np.searchsorted(np.sort(deliveries_ns), t, side="right") * float(frame)
    return la.PortSeries("s0-eth1", t, np.full(n_samples, 50_000.0), drained)


def test_a_frame_late_by_a_quarter_of_its_time_passes_the_counters_quantum_plus_the_tolerance():
    # 4154-byte frames back to back at 100 Mb/s (332.32 us each), read every 999.8 us: 3 or 4 frames
    # per interval. One frame 90 us late leaves an interval with 2, 4 179 bytes short of the
    # 12 487 due: more than one frame, but within one frame plus 10%. Mininet-HiFi's criterion (each
    # frame within one frame time of its ideal departure) passes this link too.
    period = FRAME * 8 / RATE * 1e9
    t = np.arange(1, 1500) * period
    t[2] += 90_000
    s = frame_series(t, FRAME, 999_800, 400)
    per = np.diff(s.drained_bytes)
    assert 2 * FRAME in per
    c = la.drain_check(s, RATE, FRAME, 0.10)
    assert c["share"] == 1.0 and c["drain_ratio_ok"]
    assert la.link_fidelity([s], {s.port: RATE}, FRAME, 0.10, 0.99)["valid"]


def test_a_link_steadily_slower_than_its_rate_fails_on_its_long_run_drain():
    # 80% of the rate: each 1 ms interval is within one frame plus 10%, the drain over them all is not
    s = series([10_000] * 200)
    c = la.drain_check(s, RATE, FRAME, 0.10)
    assert c["share"] == 1.0 and c["drain_ratio"] == pytest.approx(0.8) and not c["drain_ratio_ok"]
    f = la.link_fidelity([s], {s.port: RATE}, FRAME, 0.10, 0.99)
    assert not f["valid"] and f["failing_links"] == ["s0-eth1"]
    # 95% of the rate is within the tolerance
    assert la.link_fidelity([series([11_875] * 200)], {s.port: RATE}, FRAME, 0.10, 0.99)["valid"]


def test_a_link_slow_in_one_interval_of_ten_fails_the_99_percent_threshold():
    per = ([12_500] * 9 + [4_000]) * 10
    s = series(per)
    c = la.drain_check(s, RATE, FRAME, 0.10)
    assert (c["within_tolerance"], c["slow_intervals"], c["fast_intervals"]) == (90, 10, 0)
    assert c["share"] == pytest.approx(0.9)
    assert c["drain_ratio"] == pytest.approx((9 * 12_500 + 4_000) / (10 * 12_500))
    good = series([12_500] * 100, port="s1-eth1")
    f = la.link_fidelity([s, good], {s.port: RATE, good.port: RATE}, FRAME, 0.10, 0.99)
    assert not f["valid"] and f["failing_links"] == ["s0-eth1"] and f["worst_share"] == pytest.approx(0.9)
    assert f["overall_share"] == pytest.approx(190 / 200)
    assert f["links"][0]["port"] == "s0-eth1"   # worst first
    # a lower threshold accepts it
    assert la.link_fidelity([s], {s.port: RATE}, FRAME, 0.10, 0.85)["valid"]


def test_a_burst_above_the_rate_counts_as_fast():
    per = [12_500] * 49 + [30_000]
    c = la.drain_check(series(per), RATE, FRAME, 0.10)
    assert c["fast_intervals"] == 1 and c["slow_intervals"] == 0


def test_only_backlogged_intervals_are_judged():
    # idle (empty queue) intervals drain nothing and say nothing about the link; a queue holding
    # no more than the frame on the wire is not backlogged either
    depth = [0.0] * 11 + [50_000.0] * 10 + [FRAME] * 10
    per = [0] * 10 + [0] + [12_500] * 9 + [3_000] + [1_000] * 9
    c = la.drain_check(series(per, depth=depth), RATE, FRAME, 0.10)
    assert c["backlogged_intervals"] == 9 and c["share"] == 1.0


def test_paused_intervals_are_not_judged():
    per = [12_500] * 20 + [0] * 10 + [12_500] * 20
    s = series(per)
    assert la.drain_check(s, RATE, FRAME, 0.10)["slow_intervals"] == 10
    events = pd.DataFrame([{"event": "pause", "t_ns": 20 * MS + 100, "port": "s0-eth1", "class": 1},
                           {"event": "resume", "t_ns": 29 * MS + 900_000, "port": "s0-eth1", "class": 1},
                           {"event": "policy_applied", "t_ns": 0}])
    windows = la.pause_windows(events, end_ns=50 * MS)
    assert windows == {"s0-eth1": [(20 * MS + 100, 29 * MS + 900_000)]}
    c = la.drain_check(s, RATE, FRAME, 0.10, windows["s0-eth1"])
    assert c["backlogged_intervals"] == 40 and c["slow_intervals"] == 0
    # a pause never resumed lasts to the end
    assert la.pause_windows(events.iloc[:1], end_ns=50 * MS) == {"s0-eth1": [(20 * MS + 100, 50 * MS)]}


def test_a_longer_interval_averages_out_jitter():
    # the 2-core machine's timer jitter: a late interval, then the catch-up
    per = [12_500, 12_500, 12_500, 4_200, 20_800] * 100
    s = series(per)
    # each late interval and its catch-up are 8 300 bytes off, more than a frame plus 10%
    assert la.link_fidelity([s], {s.port: RATE}, FRAME, 0.10, 0.99)["worst_share"] == pytest.approx(0.6)
    f5 = la.link_fidelity([s], {s.port: RATE}, FRAME, 0.10, 0.99, interval_ms=5.0)
    assert f5["interval_ms"] == pytest.approx(5.0) and f5["worst_share"] == 1.0 and f5["valid"]


def test_links_with_too_few_backlogged_intervals_are_not_judged():
    s = series([1_000] * 10)
    f = la.link_fidelity([s], {s.port: RATE}, FRAME, 0.10, 0.99)
    assert f["busy_links"] == 0 and f["valid"] and f["worst_share"] is None


def test_port_series_carries_sparse_rows_forward_and_adds_classes():
    tel = pd.DataFrame([
        {"t_ns": 0, "queue": 0, "port": "p", "depth_bytes": 100, "deq_bytes": 0},
        {"t_ns": 0, "queue": 1, "port": "p", "depth_bytes": 10, "deq_bytes": 5},
        {"t_ns": 1, "queue": 0, "port": "p", "depth_bytes": 200, "deq_bytes": 50},
        {"t_ns": 2, "queue": 1, "port": "p", "depth_bytes": 0, "deq_bytes": 15},
        {"t_ns": 2, "queue": 2, "port": "q", "depth_bytes": 7, "deq_bytes": 70},
    ])
    p, q = la.port_series(tel)
    assert p.port == "p" and list(p.t_ns) == [0, 1, 2]
    assert list(p.depth_bytes) == [110, 210, 200] and list(p.drained_bytes) == [5, 55, 65]
    assert list(q.depth_bytes) == [0, 0, 7] and list(q.drained_bytes) == [0, 0, 70]


def test_utilisation_per_bin_and_link_table():
    s = series([12_500] * 10 + [6_250] * 10, t0=1000 * MS)
    util = la.utilisation([s], {s.port: RATE}, 1000 * MS, 1020 * MS, bin_ms=5)
    assert list(util["t_ms"]) == [0, 5, 10, 15]
    assert list(util["utilisation"]) == pytest.approx([1.0, 1.0, 0.5, 0.5])
    links = la.link_table([s], {s.port: RATE}, {s.port: "s1"}, 1000 * MS, 1020 * MS)
    row = links.iloc[0]
    assert row["to"] == "s1" and row["bytes"] == 187_500 and row["utilisation"] == pytest.approx(0.75)


def test_port_rates_take_a_links_own_rate_over_the_fabric_default():
    fabric = {"links": [{"a": "h0", "a_port": 0, "b": "s0", "b_port": 1, "bw_mbps": None},
                        {"a": "s0", "a_port": 2, "b": "s1", "b_port": 1, "bw_mbps": 400.0}]}
    rates, peers = la.port_rates(fabric, 100)
    assert rates == {"h0-eth0": 100e6, "s0-eth1": 100e6, "s0-eth2": 400e6, "s1-eth1": 400e6}
    assert peers["s0-eth2"] == "s1" and peers["s0-eth1"] == "h0"
