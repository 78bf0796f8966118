"""Pure parts of the transport analysis: Jain's index, the steady-state window, queue depth on a
regular grid from change-only telemetry."""
import numpy as np
import pandas as pd
import pytest

from testbed.analysis.transport import bottleneck, jain, queue_depths, steady_window


def test_jain_index():
    assert jain([5, 5, 5, 5]) == pytest.approx(1.0)
    assert jain([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain([2, 1]) == pytest.approx(9 / 10)
    assert jain([]) is None and jain([0, 0]) is None


def pkts(rows):
    return pd.DataFrame(rows, columns=["flow", "rx_ns", "accepted"]).astype({"accepted": "boolean"})


def test_steady_window_is_where_every_flow_delivers_less_the_start():
    p = pkts([(0, 0, True), (0, 1000, True), (1, 200, True), (1, 800, True), (1, 900, False)])
    start, end = steady_window(p, [0, 1])
    assert (start, end) == (200 + int(600 * 0.3), 800)
    assert steady_window(p, [0, 1, 2]) is None                       # flow 2 never delivered
    assert steady_window(pkts([(0, 0, True), (0, 10, True), (1, 20, True)]), [0, 1]) is None  # never overlapping


def test_queue_depth_holds_its_last_change_between_rows():
    ms = 1_000_000
    tel = pd.DataFrame({"t_ns": [0, 3 * ms, 5 * ms, 2 * ms], "port": ["a", "a", "a", "b"],
                        "class": [1, 1, 1, 1], "depth_bytes": [10, 30, 0, 7], "class_name": "roce"})
    d = queue_depths(tel, 0, 6 * ms)
    assert list(d[("a", 1)]) == [10, 10, 10, 30, 30, 0]
    assert list(d[("b", 1)]) == [0, 0, 7, 7, 7, 7]
    b = bottleneck(tel, (0, 6 * ms), {1: "roce"})
    assert (b["port"], b["class_name"], b["max_bytes"], b["run_max_bytes"]) == ("a", "roce", 30, 30)
    assert b["p50_bytes"] == pytest.approx(np.percentile([10, 10, 10, 30, 30, 0], 50))


def test_time_dilation_states_both_clocks_and_warns_when_they_disagree_by_over_2x():
    from testbed.analysis.transport import time_dilation
    # 40 Gb/s reference on a 100 Mb/s link: 400x, an 8 us RTT becomes 3.2 ms
    agree = time_dilation({"time_scale": 400.0}, 8.0, 1000.0)
    assert agree["dilated_reference_rtt_us"] == 3200.0 and agree["fabric_base_rtt_us"] == 2000.0
    assert agree["rtt_ratio"] == pytest.approx(0.625) and agree["warning"] is None
    fast_fabric = time_dilation({"time_scale": 400.0}, 8.0, 700.0)      # 1.4 ms: 0.44x
    assert "0.44x" in fast_fabric["warning"] and "sooner" in fast_fabric["warning"]
    slow_fabric = time_dilation({"time_scale": 40.0}, 8.0, 400.0)       # 320 us dilated, 800 us real
    assert "2.5x" in slow_fabric["warning"] and "later" in slow_fabric["warning"]
    # no DCQCN: nothing is dilated, and the fabric's RTT is still stated
    none = time_dilation(None, 8.0, 500.0)
    assert none["dcqcn_time_scale"] is None and none["fabric_base_rtt_us"] == 1000.0 and none["warning"] is None
