"""The analysis's tables from synthetic raw files, answers worked out by hand: packets joined to
their arrivals (a retransmission, a duplicate arrival, a loss), messages, latency per flow and
class, completion times against the ideal, and the report's rendering."""
import json

import numpy as np
import pandas as pd
import pytest

from testbed import records
from testbed.analysis import tables as analysis
from testbed.analysis.document import blocks, to_html, to_markdown
from testbed.analysis.flows import class_latency, class_of_dscp, fct_table, latency_table, slowdown_summary
from testbed.runfolder import RunFolder

T0 = 1_000_000_000


@pytest.fixture
def raw(tmp_path):
    """Two messages of one flow each: msg 0 (h0->h1, 2 packets, the second lost once and resent),
    msg 1 (h1->h0, 1 packet, arrived twice). Each frame: handed to the NIC (tx_ns), left it
    (depart_ns), arrived (rx_ns)."""
    raw = tmp_path / "raw"
    raw.mkdir()
    tx = records.RecordWriter(raw / "tx.bin", records.TX)
    tx.add(0, 0, 0, T0 + 0, T0 + 50, 1000, 0, 1)
    tx.add(0, 1, 1, T0 + 100, T0 + 150, 1000, 0, 1)
    tx.add(0, 1, 1, T0 + 5000, T0 + 5100, 1000, 1, 1)        # the retransmission
    tx.add(1, 0, 0, T0 + 200, T0 + 300, 600, 0, 2)
    tx.close()
    rx = records.RecordWriter(raw / "rx.bin", records.RX)
    rx.add(0, 0, T0 + 0, T0 + 400, 1000, 0, 1, 26, 100)
    rx.add(0, 1, T0 + 5000, T0 + 5300, 1000, 3, 1, 26, 100)   # only the resend arrived, CE-marked
    rx.add(1, 0, T0 + 200, T0 + 900, 600, 0, 1, 0, 60)
    rx.add(1, 0, T0 + 200, T0 + 950, 600, 0, 0, 0, 60)       # the same transmission seen twice
    rx.close()
    (raw / "schedule.json").write_text(json.dumps([
        {"id": 0, "iteration": 0, "step": 0, "src": "h0", "dst": "h1", "bytes": 1800, "chunk": 0,
         "tag": "collective", "op": "", "duration_ns": 0, "group": ""},
        {"id": 1, "iteration": 0, "step": 0, "src": "h1", "dst": "h0", "bytes": 500, "chunk": 0,
         "tag": "bulk", "op": "", "duration_ns": 0, "group": ""}]))
    (raw / "messages.json").write_text(json.dumps({
        "id": [0, 1], "flow": [0, 1], "bytes": [1800, 500], "packets": [2, 1], "sent_packets": [3, 1],
        "recv_packets": [2, 1], "recv_bytes": [1800, 500], "release_ns": [T0, T0 + 200],
        "first_tx_ns": [T0, T0 + 200], "last_tx_ns": [T0 + 5000, T0 + 200],
        "complete_ns": [T0 + 5300, T0 + 900], "acked_ns": [T0 + 6000, T0 + 1500]}))
    return raw


FLOWS = pd.DataFrame([{"flow": 0, "src": "h0", "dst": "h1", "tag": "collective", "dscp": 26, "udp_sport": 49152},
                      {"flow": 1, "src": "h1", "dst": "h0", "tag": "bulk", "dscp": 0, "udp_sport": 49153}])
CLASSES = class_of_dscp([{"name": "control", "dscp": [46, 48]}, {"name": "roce", "dscp": [26, 27]},
                         {"name": "bulk", "dscp": [], "default": True}])


def test_packets_and_messages_from_raw_files(raw):
    msgs = analysis.message_table(RunFolder.of_raw(raw))
    assert list(msgs["complete"]) == [True, True]
    assert list(msgs["duration_ns"]) == [5300, 700] and list(msgs["wc_ns"]) == [6000, 1300]
    pkts = analysis.packet_table(RunFolder.of_raw(raw), msgs)
    analysis.add_wire_times(msgs, pkts)
    # FCT from the wire: first departure to the last packet's arrival; the NIC wait before, apart
    assert list(msgs["fct_ns"]) == [5250, 600] and list(msgs["nic_wait_ns"]) == [50, 100]
    assert len(pkts) == 4
    assert list(pkts["retransmit"]) == [False, False, True, False]
    # one-way latency from the departure, not the handoff; the first try of msg 0's packet 1 was lost
    assert list(pkts["latency_ns"].astype("float64").fillna(-1)) == [350, -1, 200, 600]
    assert list(pkts["nic_queue_ns"].astype("float64")) == [50, 50, 100, 100]
    assert list(pkts["flow"]) == [0, 0, 0, 1]
    assert int((pkts["ecn"] == 3).sum()) == 1


def test_latency_per_flow_and_per_class(raw):
    msgs = analysis.message_table(RunFolder.of_raw(raw))
    pkts = analysis.packet_table(RunFolder.of_raw(raw), msgs)
    lat = latency_table(pkts, FLOWS, CLASSES)
    f0 = lat[(lat["flow"] == 0)].iloc[0]
    assert (f0["packets"], f0["class"], f0["src"]) == (2, "roce", "h0")
    assert f0["p50_us"] == pytest.approx(0.275) and f0["max_us"] == pytest.approx(0.35)
    per_class = lat[lat["flow"] == -1].set_index("class")
    assert per_class.loc["bulk", "packets"] == 1 and per_class.loc["bulk", "p99_us"] == pytest.approx(0.6)
    by_class = class_latency(pkts, CLASSES)
    assert set(by_class) == {"bulk", "roce"} and by_class["roce"]["min_us"] == pytest.approx(0.2)


def test_message_completion_against_the_ideal(raw):
    msgs = analysis.message_table(RunFolder.of_raw(raw))
    pkts = analysis.packet_table(RunFolder.of_raw(raw), msgs)
    analysis.add_wire_times(msgs, pkts)
    bw = 8e9   # a byte per ns
    fct = fct_table(msgs, pkts, FLOWS, bw).set_index("msg")
    # msg 0: its first frame of 1000 B at line rate (1000 ns; the last frame's own time is in the
    # one-way latency) plus flow 0's least one-way latency (200 ns): ideal 1200 ns, FCT 5250 ns
    assert fct.loc[0, "ideal_fct_ns"] == pytest.approx(1200)
    assert fct.loc[0, "slowdown"] == pytest.approx(5250 / 1200)
    assert (fct.loc[0, "sport"], fct.loc[0, "dport"], fct.loc[0, "size_bytes"]) == (49152, 4791, 1800)
    assert fct.loc[0, "nic_wait_ns"] == 50 and fct.loc[0, "start_ns"] == T0 + 50
    # msg 1, one frame: its one-way latency (600 ns) is the whole of it
    assert fct.loc[1, "ideal_fct_ns"] == pytest.approx(600) and fct.loc[1, "slowdown"] == pytest.approx(1.0)
    sd = slowdown_summary(fct.reset_index())
    assert sd["by_tag"]["collective"]["messages"] == 1 and sd["all"]["max"] == pytest.approx(5250 / 1200)


def test_class_of_dscp_gives_unnamed_dscps_to_the_default_class():
    assert CLASSES[26] == "roce" and CLASSES[48] == "control" and CLASSES[0] == "bulk" and CLASSES[63] == "bulk"
    assert class_of_dscp([{"name": "a", "dscp": [10]}]) == {10: "a"}


def test_heatmap_bins_stay_under_the_column_limit():
    assert analysis.heatmap_bin_ms(0.15) == 1
    assert analysis.heatmap_bin_ms(2.07) == 20
    assert analysis.heatmap_bin_ms(30) == 200


def test_report_says_invalid_fidelity_first_and_renders_both_formats(tmp_path):
    s = {"scenario": "x", "status": "ok", "run_id": "r", "git_commit": None, "mechanisms": {"datapath": "netdev"},
         "problems": [], "expectations": [{"metric": "packets.lost", "op": "==", "expected": 0, "actual": 0,
                                           "ok": True}],
         "fidelity": {"verdict": "could_not_keep_up", "valid": False, "notes": ["1 of 2 busy links drained ..."],
                      "machine_cpu_idle_fraction": 0.1,
                      "links": {"busy_links": 2, "worst_share": 0.9, "overall_share": 0.95, "min_share": 0.99,
                                "interval_ms": 1.0, "tolerance": 0.03, "frame_bytes": 4154,
                                "window_frames": 20, "min_window_ms": 1.0, "window_ms": [6.6],
                                "links": [{"port": "s0-eth1", "rate_mbps": 100.0, "backlogged_intervals": 200,
                                           "windows": 30, "window_ms": 6.6,
                                           "share": 0.9, "slow_windows": 1, "fast_windows": 0,
                                           "drain_ratio": 0.99}]}},
         "collective": {"algorithm": "ring_allreduce", "ranks": 4, "bytes_per_rank": 1, "link_bw_mbps": 100,
                        "iterations_complete": 1, "iterations": 1, "time_s": [0.5], "bound_s": 0.4,
                        "bound_formula": "2(N-1)/N S/B", "bound_ratio": 0.8, "bound_ratio_min": 0.8,
                        "busbw_mbps": 80.0},
         "packets": {"sent": 10, "received": 10, "lost": 0, "retransmitted": 0, "naks": 0, "timeouts": 0,
                     "port_buffer_drops": 0, "ecn_ce_marked": 0}}
    bl = blocks(s, [])
    md = to_markdown(bl)
    assert md.index("INVALID") < md.index("Workload")
    assert "| s0-eth1 | 100 | 30 (6.6) | 90.0% | 1 | 0 | 0.9900 |" in md
    page = to_html(bl, tmp_path)
    assert page.startswith("<!DOCTYPE html>") and 'class="bad"' in page and "<table>" in page


def test_ovs_internal_drops_count_what_its_ports_took_in_and_never_sent_on():
    from testbed.analysis.losses import ovs_internal_drops
    from testbed.analysis.tables import link_deltas
    c = lambda rx, tx, txd=0: {"rx_packets": rx, "tx_packets": tx, "rx_dropped": 0, "tx_dropped": txd}
    start = {"s0-eth1": c(10, 5), "s0-eth2": c(3, 3), "h0-eth0": c(5, 10)}
    # during the traffic s0 took in 100 + 50 frames and sent 60 + 70 on: 20 did not leave
    end = {"s0-eth1": c(110, 65), "s0-eth2": c(53, 73, 2), "h0-eth0": c(65, 110)}
    moved = link_deltas(start, end)
    assert moved["s0-eth1"] == c(100, 60) and moved["s0-eth2"] == c(50, 70, 2)
    # the host's own interface is not Open vSwitch's
    assert ovs_internal_drops(moved, {"s0"}, accounted=0) == 20
    # 15 of them were dropped or still held by the switch's queues: 5 vanished inside OVS
    assert ovs_internal_drops(moved, {"s0"}, accounted=15) == 5
    assert ovs_internal_drops(moved, {"s0"}, accounted=30) == 0
    # a port that appeared after the first reading counts from zero
    assert link_deltas({}, {"s1-eth1": c(4, 4)}) == {"s1-eth1": c(4, 4)}


def test_hardware_columns_beside_emulated_times():
    df = pd.DataFrame({"release_ns": pd.array([T0 + 2_000_000, None], dtype="Int64"), "fct_ns": [4_000_000, 1_000],
                       "time_s": [0.5, 1.0]})
    out = analysis.hardware_columns(df, T0, 1000.0, at=("release_ns", "absent_ns"), spans=("fct_ns", "time_s"))
    # 2 ms emulated after the start at D = 1000: 2 us of hardware time; 4 ms: 4 us; 0.5 s: 500 us
    assert out["release_hw_us"].iloc[0] == pytest.approx(2.0) and np.isnan(out["release_hw_us"].iloc[1])
    assert out["fct_hw_us"].tolist() == pytest.approx([4.0, 0.001])
    assert out["time_hw_us"].tolist() == pytest.approx([500.0, 1000.0])
    assert "absent_hw_us" not in out and "release_hw_us" not in df


def test_hardware_columns_of_an_unfinished_iteration():
    # iteration_table's rows: an iteration that never completed has pd.NA for its end and time
    iters = analysis.iteration_table(pd.DataFrame({
        "iteration": [0, 0, 1], "complete": [True, True, False], "release_ns": [T0, T0 + 10, T0 + 5_000_000],
        "complete_ns": [T0 + 1_000_000, T0 + 2_000_000, pd.NA]}), 0.001)
    out = analysis.hardware_columns(iters, T0, 1000.0, ("start_ns", "end_ns"), ("time_s", "bound_s"))
    assert out["end_hw_us"].iloc[0] == pytest.approx(2.0) and np.isnan(out["end_hw_us"].iloc[1])
    assert out["start_hw_us"].tolist() == pytest.approx([0.0, 5.0])
    assert out["time_hw_us"].iloc[0] == pytest.approx(2.0) and np.isnan(out["time_hw_us"].iloc[1])
