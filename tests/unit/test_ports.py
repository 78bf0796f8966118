"""The port counter table (ports.parquet) from constructed telemetry, end counters and pauses,
answers worked out by hand; and its place in the report."""
import numpy as np
import pandas as pd
import pytest

from testbed.analysis.document import _ports, to_markdown
from testbed.analysis.links import PortSeries, link_table
from testbed.analysis.ports import port_counters

D = 1000.0
T0, T1 = 0, 100_000_000   # a 100 ms traffic phase (emulated)
FABRIC = {"links": [{"a": "s0", "a_port": 1, "b": "s1", "b_port": 1},
                    {"a": "h0", "a_port": 0, "b": "s0", "b_port": 2}]}
RATES = {"s0-eth1": 10e6, "s1-eth1": 10e6, "s0-eth2": 10e6, "h0-eth0": 10e6}


def _series(port, drained_total, depths):
    t = np.linspace(T0, T1, len(depths)).astype(np.int64)
    return PortSeries(port, t, np.array(depths, dtype=float), np.linspace(0, drained_total, len(depths)))


@pytest.fixture
def table():
    series = [_series("s0-eth1", 62_500, [0] * 90 + [4000] * 10),       # 5 Mb/s over 100 ms: 50%
              _series("s1-eth1", 125_000, [1000] * 100),                # 100%
              _series("s0-eth2", 0, [0] * 100)]
    qend = [{"port": "s1-eth1", "class": 3, "ect_pkts": 9, "mark_pkts": 5, "drop_pkts": 2},
            {"port": "s1-eth1", "class": 0, "ect_pkts": 0, "mark_pkts": 0, "drop_pkts": 1}]
    ms = 1_000_000
    events = pd.DataFrame([
        {"t_ns": 10 * ms, "event": "pause", "port": "s0-eth1", "class": 3},
        {"t_ns": 15 * ms, "event": "pause", "port": "s0-eth1", "class": 4},
        {"t_ns": 20 * ms, "event": "resume", "port": "s0-eth1", "class": 3},
        {"t_ns": 25 * ms, "event": "resume", "port": "s0-eth1", "class": 4},
        {"t_ns": 30 * ms, "event": "pause", "port": "s0-eth1", "class": 3},   # never resumed: to 100 ms
        {"t_ns": 40 * ms, "event": "pause", "port": "h0-eth0", "class": 3},
        {"t_ns": 41 * ms, "event": "resume", "port": "h0-eth0", "class": 3}])
    peers = {"s0-eth1": "s1", "s1-eth1": "s0", "s0-eth2": "h0"}
    links = link_table(series, RATES, peers, T0, T1)
    return port_counters(links, series, FABRIC, qend, events, T0, T1, D).set_index("port")


def test_worst_port_first_drops_then_paused_time(table):
    assert list(table.index) == ["s1-eth1", "s0-eth1", "s0-eth2"]


def test_links_are_named_by_their_ends(table):
    assert table.loc["s0-eth1", "link"] == "s0->s1" and table.loc["s0-eth2", "link"] == "s0->h0"


def test_rates_and_utilisation(table):
    assert table.loc["s0-eth1", "hardware_gbps"] == pytest.approx(10.0)
    assert table.loc["s0-eth1", "emulated_mbps"] == pytest.approx(10.0)
    assert table.loc["s0-eth1", "utilisation_pct"] == pytest.approx(50.0)
    assert table.loc["s1-eth1", "utilisation_pct"] == pytest.approx(100.0)


def test_queue_peak_and_p99(table):
    assert table.loc["s0-eth1", "queue_peak_bytes"] == 4000
    assert table.loc["s0-eth1", "queue_p99_bytes"] == pytest.approx(4000)
    assert table.loc["s1-eth1", "queue_p99_bytes"] == 1000


def test_marks_and_drops_over_the_ports_classes(table):
    assert tuple(table.loc["s1-eth1", ["ect_packets", "ecn_marked", "drops"]]) == (9, 5, 3)
    assert tuple(table.loc["s0-eth1", ["ect_packets", "ecn_marked", "drops"]]) == (0, 0, 0)


def test_pauses_received_and_paused_time_over_classes(table):
    # [10, 25) over two classes, then [30, 100): 85 ms emulated, 85 us in hardware time at D = 1000
    assert table.loc["s0-eth1", "pauses_received"] == 3
    assert table.loc["s0-eth1", "paused_us"] == pytest.approx(85.0)


def test_pauses_sent_are_the_far_ends_received(table):
    assert table.loc["s1-eth1", "pauses_sent"] == 3     # s1 paused s0's port toward it
    assert table.loc["s0-eth2", "pauses_sent"] == 1     # s0 paused host h0's NIC
    assert table.loc["s0-eth1", "pauses_sent"] == 0


def test_the_report_shows_the_worst_ports(table):
    rows = table.reset_index().to_dict("records")
    md = to_markdown(_ports(rows, 40))
    assert "Port counters, worst first (3 of 40 switch ports" in md
    assert md.index("| s1-eth1 |") < md.index("| s0-eth1 |") < md.index("| s0-eth2 |")
    assert "| s0-eth1 | s0->s1 | 10 | 50.0% | 4000 / 4000 | 0 / 0 | 0 | 0 | 3 / 0 | 85.00 |" in md


def test_heatmap_rows_are_named_by_their_links_ends():
    from testbed.analysis.plotdata import link_labels
    fabric = {"links": FABRIC["links"] + [{"a": "s0", "a_port": 3, "b": "s1", "b_port": 2}]}
    assert link_labels(fabric, ["s0-eth2", "s1-eth1", "s0-eth1", "s0-eth3", "x-eth9"]) == [
        "s0→h0", "s1→s0", "s0→s1 (s0-eth1)", "s0→s1 (s0-eth3)", "x-eth9"]


def test_crc_errors_are_the_frames_a_ports_bit_errors_hit_and_rank_after_drops(table):
    from testbed.analysis.links import link_table
    series = [_series("s0-eth1", 62_500, [0] * 100), _series("s0-eth2", 0, [0] * 100)]
    links = link_table(series, RATES, {"s0-eth1": "s1", "s0-eth2": "h0"}, T0, T1)
    t = port_counters(links, series, FABRIC, [], pd.DataFrame(), T0, T1, D, {"s0-eth2": 7}).set_index("port")
    assert list(t.index) == ["s0-eth2", "s0-eth1"]
    assert t.loc["s0-eth2", "crc_errors"] == 7 and t.loc["s0-eth1", "crc_errors"] == 0
    assert (table["crc_errors"] == 0).all()   # no corrupt fault, none
