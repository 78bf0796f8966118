"""The host side of the fidelity verdict, from hand-built records: a sending host fails when its
link idled with frames waiting (the lead ran dry, or a rate-limited QP fell behind) in more than
1% of its busy 1 ms intervals."""
import numpy as np
import pandas as pd

from testbed import records
from testbed.host_analysis import host_fidelity, nic_queues

T0 = 10_000_000_000
MS = 1_000_000
FRAME_NS = 332_000   # a 4154-byte frame at 100 Mb/s
PLAN = {"hosts": [{"name": "h0", "bw_bps": 100e6}, {"name": "h1", "bw_bps": 100e6}],
        "flows": [{"id": 0, "src": "h0", "dst": "h1"}, {"id": 1, "src": "h1", "dst": "h0"}]}


def packets(flow, duration_ms, lead_ns=5 * MS, frame_ns=33_232):
    """A host sending back to back at line rate for duration_ms, each frame handed over lead_ns early
    (a 4154-byte frame is 332.32 us on the wire at 100 Mb/s)."""
    dep = T0 + (np.arange(0, duration_ms * MS // 332_320 + 1) * 332_320)
    return pd.DataFrame({"flow": flow, "tx_ns": dep - lead_ns, "depart_ns": dep, "bytes": 4154, "cls": 1})


def write_gaps(raw, rows):
    arr = np.zeros(len(rows), records.NIC_GAP)
    for i, (host, start, end, kind) in enumerate(rows):
        arr[i] = (start, end, host, -1, 1, kind, b"")
    (raw / "nic_gaps.bin").write_bytes(arr.tobytes())


def test_a_host_that_never_idled_passes(tmp_path):
    write_gaps(tmp_path, [])
    v = host_fidelity(tmp_path, pd.concat([packets(0, 1000), packets(1, 1000)]), PLAN, T0)
    assert v["valid"] and v["sending_hosts"] == 2 and v["worst"]["idle_share"] == 0
    assert v["hosts"][0]["busy_intervals"] == 1000


def test_stalls_ten_times_a_second_fail_the_host_that_had_them(tmp_path):
    # 1000 busy intervals; the lead ran dry for 2 ms ten times in the second, each from mid-interval: 30
    # intervals (3%) saw the link idle with work waiting
    write_gaps(tmp_path, [(0, T0 + k * 100 * MS + MS // 2, T0 + k * 100 * MS + 5 * MS // 2, records.GAP_LEAD_DRY)
                          for k in range(10)])
    v = host_fidelity(tmp_path, pd.concat([packets(0, 1000), packets(1, 1000)]), PLAN, T0)
    assert not v["valid"] and v["failing_hosts"] == ["h0"]
    assert v["worst"]["host"] == "h0" and v["worst"]["lead_dry_intervals"] == 30
    assert abs(v["worst"]["lead_dry_ms"] - 20) < 1e-6


def test_short_slack_and_rare_stalls_stay_within_the_limit(tmp_path):
    # 10 us of timer slack in every interval, and one 5 ms stall in a second (5 of 1000 intervals)
    rows = [(0, T0 + k * MS + 100_000, T0 + k * MS + 110_000, records.GAP_LEAD_DRY) for k in range(1000)]
    rows.append((1, T0 + 500 * MS, T0 + 505 * MS, records.GAP_LEAD_DRY))
    write_gaps(tmp_path, rows)
    v = host_fidelity(tmp_path, pd.concat([packets(0, 1000), packets(1, 1000)]), PLAN, T0)
    assert v["valid"], v
    assert v["hosts"][1]["lead_dry_intervals"] == 5


def test_a_rate_limited_qp_behind_its_rate_counts_too(tmp_path):
    write_gaps(tmp_path, [(1, T0 + k * 20 * MS, T0 + k * 20 * MS + MS, records.GAP_QP_BEHIND) for k in range(50)])
    v = host_fidelity(tmp_path, pd.concat([packets(0, 1000), packets(1, 1000)]), PLAN, T0)
    assert v["failing_hosts"] == ["h1"] and v["worst"]["qp_behind_intervals"] >= 50


def test_nic_queue_wait_and_depth_from_the_records():
    q = nic_queues(packets(0, 100), PLAN)
    assert q["wait_us_p50"] == 5000
    row = q["by_host_class"][0]
    # 5 ms of lead at 332 us a frame: about 15 frames ahead of each arriving one
    assert (row["host"], row["class"]) == ("h0", 1) and 14 * 4154 <= row["depth_bytes_p50"] <= 16 * 4154


def test_nic_queue_depth_series_on_the_telemetry_grid():
    from testbed.host_analysis import nic_queue_series
    p = packets(0, 100)
    q = nic_queue_series(p, PLAN, T0, T0 + 100 * MS)
    assert set(q["host"]) == {"h0"} and len(q) == 100
    # once the lead is in, about 15 frames are always waiting; all have left by the end
    mid = q[(q["t_ns"] >= T0 + 10 * MS) & (q["t_ns"] < T0 + 90 * MS)]["depth_bytes"]
    assert mid.between(14 * 4154, 16 * 4154).all()
    assert nic_queue_series(p, PLAN, T0 + 200 * MS, T0 + 201 * MS)["depth_bytes"].iloc[0] == 0


def test_frames_handed_over_but_leaving_late_fail_the_host(tmp_path):
    # the NIC had frames waiting (5 ms of lead), yet twice a second the next one left 3 ms after
    # the link was free: the intervals the stall covers sent too little, and the records alone
    # show it
    write_gaps(tmp_path, [])
    p = packets(0, 1000)
    for at in (200, 700):
        later = p["depart_ns"] > T0 + at * MS
        p.loc[later, "depart_ns"] += 3 * MS
    v = host_fidelity(tmp_path, pd.concat([p, packets(1, 1000)]), PLAN, T0)
    h0 = v["hosts"][0]
    assert 6 <= h0["late_departure_intervals"] <= 8
    assert h0["lead_dry_intervals"] == 0
    # 6 of about 1006: under 1%, valid; a third such stall makes it fail
    assert v["valid"]
    p.loc[p["depart_ns"] > T0 + 900 * MS, "depart_ns"] += 3 * MS
    p.loc[p["depart_ns"] > T0 + 400 * MS, "depart_ns"] += 3 * MS
    v = host_fidelity(tmp_path, pd.concat([p, packets(1, 1000)]), PLAN, T0)
    assert not v["valid"] and v["failing_hosts"] == ["h0"]


def test_a_frame_handed_over_after_the_link_went_idle_is_not_late(tmp_path):
    # a dependency wait: nothing to send for 10 ms, then a frame handed over and sent at once
    write_gaps(tmp_path, [])
    a = packets(0, 100)
    b = packets(0, 100).assign(depart_ns=lambda d: d["depart_ns"] + 110 * MS)
    b["tx_ns"] = np.maximum(b["depart_ns"] - 5 * MS, T0 + 110 * MS)   # the lead refills from then
    v = host_fidelity(tmp_path, pd.concat([a, b, packets(1, 210)]), PLAN, T0)
    assert v["hosts"][0]["late_departure_intervals"] == 0 and v["valid"]


def test_a_shaper_that_is_late_but_catches_up_within_the_interval_passes(tmp_path):
    # every frame's departure jitters by up to half a frame time: the link still sends its rate
    write_gaps(tmp_path, [])
    p = packets(0, 1000)
    rng = np.random.default_rng(1)
    p["depart_ns"] = p["depart_ns"] + rng.integers(0, 160_000, len(p))
    v = host_fidelity(tmp_path, pd.concat([p, packets(1, 1000)]), PLAN, T0)
    assert v["hosts"][0]["late_departure_intervals"] == 0 and v["valid"]


def test_a_nic_shaper_steadily_15_percent_slow_fails_over_the_long_run(tmp_path):
    # 2.55 frames a millisecond against 3: within one frame in every interval, 0.85 over all
    write_gaps(tmp_path, [])
    p = packets(0, 1000)
    p["depart_ns"] = T0 + ((p["depart_ns"] - T0) / 0.85).astype("int64")
    v = host_fidelity(tmp_path, pd.concat([p, packets(1, 1000)]), PLAN, T0)
    h0 = v["hosts"][0]
    assert h0["late_departure_intervals"] == 0 and abs(h0["drain_ratio"] - 0.85) < 0.01
    assert not v["valid"] and v["failing_hosts"] == ["h0"]
    assert abs(v["hosts"][1]["drain_ratio"] - 1) < 0.01


def test_a_nic_paused_by_pfc_holds_its_frames_and_is_not_judged_then(tmp_path):
    # 300 ms paused (nothing leaves, frames wait), the rest at line rate
    write_gaps(tmp_path, [])
    p = packets(0, 1000)
    p.loc[p["depart_ns"] > T0 + 300 * MS, "depart_ns"] += 300 * MS
    plan = {**PLAN, "hosts": [{**PLAN["hosts"][0], "ifname": "h0-eth0"}, PLAN["hosts"][1]]}
    v = host_fidelity(tmp_path, pd.concat([p, packets(1, 1000)]), plan, T0)
    assert not v["valid"]                                    # unexplained, the stall fails the host
    v = host_fidelity(tmp_path, pd.concat([p, packets(1, 1000)]), plan, T0,
                      {"h0-eth0": [(T0 + 300 * MS, T0 + 600 * MS)]})
    assert v["valid"] and v["hosts"][0]["paused_intervals"] >= 300, v["hosts"][0]
