"""The northbound API's own logic, without a run: per-port records from the port program's
counters and the agent's pause counts, Prometheus's exposition of them, the status table's order,
and the web endpoints that need no controller (tests/integration/test_northbound_api.py runs the
whole of it during a real run)."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from testbed.fabric import bpfmaps
from testbed.northbound.counters import PortCounters, Row, port_rows
from testbed.northbound.prometheus import RunCollector
from testbed.northbound.server import RunApi, make_app
from testbed.northbound.status import render, worst_first
from testbed.fabric.agent_plan import AgentPlan, QueueSpec
from testbed.scenario import load_scenario
from testbed.scenario.dilation import dilate
from testbed.scenario.schema import build_fabric
from prometheus_client import CollectorRegistry, generate_latest

D = 12500.0


def two_switch_rows():
    # s0 port 1 faces s1 port 1; two classes each; 8 Mb/s emulated (100 Gb/s at D = 12500)
    return [Row("s0", "s0-eth1", 1, "s1", "s1-eth1", c, ("roce", "bulk")[c], queue=c, slot=0, bw_mbps=8.0)
            for c in (0, 1)] + \
           [Row("s1", "s1-eth1", 1, "s0", "s0-eth1", c, ("roce", "bulk")[c], queue=8 + c, slot=1, bw_mbps=8.0)
            for c in (0, 1)]


def maps():
    queues = np.zeros(16, dtype=bpfmaps.QUEUE)
    corrupt = np.zeros(4, dtype=bpfmaps.CORRUPT)
    return queues, corrupt


def test_utilisation_is_the_bytes_sent_over_the_window_against_the_link_rate():
    queues, corrupt = maps()
    pc = PortCounters(two_switch_rows(), queues, corrupt, D)
    pc.sample()
    time.sleep(0.06)
    queues["deq_bytes"][0] = 30_000   # s0-eth1 roce
    queues["deq_bytes"][1] = 10_000   # s0-eth1 bulk
    queues["depth_bytes"][0] = 4154
    corrupt["frames"][1] = 7
    records = {p["port"]: p for p in pc.records(None)}
    dt = pc.window_s()
    s0 = records["s0-eth1"]
    roce = s0["classes"][0]
    assert roce["utilisation_pct"] == pytest.approx(100 * 30_000 * 8 / dt / 8e6)
    assert roce["tx_gbps_hw"] == pytest.approx(30_000 * 8 / dt * D / 1e9)
    assert s0["utilisation_pct"] == pytest.approx(100 * 40_000 * 8 / dt / 8e6)
    assert s0["tx_bytes"] == 40_000 and s0["queue_bytes"] == 4154 and roce["queue_peak_bytes"] == 4154
    assert s0["link"] == "s0\u2192s1" and s0["link_gbps_hw"] == pytest.approx(100.0)
    assert records["s1-eth1"]["crc_errors"] == 7 and s0["crc_errors"] == 0
    assert records["s1-eth1"]["utilisation_pct"] == 0


def test_a_pause_is_received_by_the_paused_port_and_sent_by_its_peer():
    queues, corrupt = maps()
    pc = PortCounters(two_switch_rows(), queues, corrupt, D)
    # s0-eth1's roce transmitter paused 3 times (2 ms of wall clock ended), and paused now for 1 ms more
    telemetry = {"pause_counts": [["s0-eth1", 0, 3, 2_000_000]], "paused": [["s0-eth1", 0, 1_000_000, []]]}
    records = {p["port"]: p for p in pc.records(telemetry)}
    roce0, roce1 = records["s0-eth1"]["classes"][0], records["s1-eth1"]["classes"][0]
    assert (roce0["pauses_received"], roce0["pauses_sent"]) == (3, 0)
    assert (roce1["pauses_received"], roce1["pauses_sent"]) == (0, 3)
    assert roce0["paused"] and not roce1["paused"] and records["s0-eth1"]["paused"]
    assert roce0["paused_us_hw"] == pytest.approx(3_000_000 / D / 1e3)
    assert records["s0-eth1"]["classes"][1]["pauses_received"] == 0


def test_the_rows_follow_the_agents_queues_and_the_fabrics_links():
    sc = dilate(load_scenario("incast-pfc"), D, "set")
    fabric = build_fabric(sc.fabric)
    node, port = next((n, p) for n, ports in fabric.ports.items() for p in ports)
    peer, peer_port, link = fabric.ports[node][port]
    plan_queues = (QueueSpec(index=5, node=node, port=port, ifname=f"{node}-eth{port}", cls=1, class_name="roce"),)
    plan = AgentPlan(**_plan_skeleton(), queues=plan_queues, leaves=())
    (row,) = port_rows(plan, fabric)
    assert row.queue == 5 and row.peer == peer and row.bw_mbps == link.bw_mbps
    assert row.peer_port == (f"{peer}-eth{peer_port}" if peer in fabric.switch_by_name else f"{peer}-eth0")


def _plan_skeleton():
    return {"out_dir": "/nonexistent", "controller_socket": "x", "map_fds": {}, "first_minor": 0, "frame_bytes": 4154,
            "poll_hz": 1000.0, "telemetry_hz": 10.0, "deadlock_detect_ms": 0.0, "watchdog_ms": 0.0}


def test_prometheus_exposition_has_a_series_per_port_and_class():
    queues, corrupt = maps()
    queues["deq_bytes"][8] = 123
    queues["mark_pkts"][0] = 4
    pc = PortCounters(two_switch_rows(), queues, corrupt, D)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(RunCollector({"run": "r", "scenario": "x", "dilation_factor": D}, pc.records(None),
                              {"messages_done": 3, "messages": 10, "payload_bytes_done": 30, "payload_bytes": 100}))
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}
    tx = {(s.labels["port"], s.labels["class"]): s.value for s in fams["testbed_port_transmit_bytes"].samples
          if s.name.endswith("_total")}
    assert tx == {("s0-eth1", "roce"): 0, ("s0-eth1", "bulk"): 0, ("s1-eth1", "roce"): 123, ("s1-eth1", "bulk"): 0}
    marks = [s for s in fams["testbed_port_ecn_marked_frames"].samples if s.name.endswith("_total")]
    assert {(s.labels["switch"], s.labels["class"], s.value) for s in marks if s.value} == {("s0", "roce", 4)}
    assert fams["testbed_port_link_bits_per_second"].samples[0].value == pytest.approx(8e6)
    assert fams["testbed_dilation_factor"].samples[0].value == D
    assert fams["testbed_job_messages_done"].samples[0].value == 3


def test_the_status_table_lists_the_worst_port_first():
    ports = [{"port": "a", "dropped": 0, "paused": False, "utilisation_pct": 90.0, "queue_bytes": 0},
             {"port": "b", "dropped": 0, "paused": True, "utilisation_pct": 10.0, "queue_bytes": 0},
             {"port": "c", "dropped": 2, "paused": False, "utilisation_pct": 0.0, "queue_bytes": 0},
             {"port": "d", "dropped": 0, "paused": False, "utilisation_pct": None, "queue_bytes": 9}]
    assert [p["port"] for p in worst_first(ports)] == ["c", "b", "a", "d"]


def test_the_status_table_renders_a_runs_ports():
    from rich.console import Console
    queues, corrupt = maps()
    pc = PortCounters(two_switch_rows(), queues, corrupt, D)
    doc = {"scenario": "x", "run": "r", "dilation_factor": D, "t_s": 1.0, "rate_window_s": 0.0, "ports": pc.records(None)}
    console = Console(record=True, width=160)
    console.print(render(doc, {"progress": None}, top=10))
    text = console.export_text()
    assert "s0\u2192s1" in text and "s1\u2192s0" in text and "2 switch ports" in text
    # a workload that computes: its workers' share not computing over the last window
    progress = {"messages_done": 5, "messages": 10, "done_fraction": 0.5,
                "training": {"sync_share_last_window": 0.384, "window_us_hw": 80.0}}
    console.print(render(doc, {"progress": progress}, top=10))
    assert "sync share 38% (last 80 us hw)" in console.export_text()


@pytest.fixture
def api(tmp_path):
    sc = dilate(load_scenario("incast-pfc"), D, "set")
    fabric = build_fabric(sc.fabric)
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "fabric.json").write_text(fabric.to_json())
    (tmp_path / "raw" / "scenario.json").write_text(json.dumps(sc.to_dict()))
    return RunApi(tmp_path, "the-token", counters=None, link=None)


def test_a_change_without_the_token_is_refused(api):
    client = TestClient(make_app(api))
    r = client.post("/api/v1/policy", json={"class": "roce", "field": "ecn", "value": True})
    assert r.status_code == 401 and "token" in r.json()["error"]
    r = client.post("/api/v1/policy", json={"class": "roce", "field": "ecn", "value": True},
                    headers={"Authorization": "Bearer not-the-token"})
    assert r.status_code == 401


def test_a_change_of_no_known_shape_or_port_is_refused_before_the_controller(api):
    client = TestClient(make_app(api))
    auth = {"Authorization": "Bearer the-token"}
    r = client.post("/api/v1/policy", json={"class": "roce", "field": "ecn"}, headers=auth)
    assert r.status_code == 400 and "expected an object" in r.json()["error"]
    r = client.post("/api/v1/policy", json={"class": "roce", "field": "ecn", "value": True, "port": "nope-eth9"},
                    headers=auth)
    assert r.status_code == 400 and "nope-eth9" in r.json()["error"]


def test_the_topology_and_the_live_page_are_served(api):
    client = TestClient(make_app(api))
    topo = client.get("/api/v1/topology").json()
    assert topo["dilation_factor"] == D and len(topo["switches"]) == len(api.fabric.switches) == 6
    # hosts' links 100 Gb/s, the leaves' uplinks 400 Gb/s, as the scenario describes them
    assert sorted({round(l["bw_gbps_hw"], 6) for l in topo["links"]}) == [100.0, 400.0]
    page = client.get("/")
    assert page.status_code == 200 and "/api/v1/stream" in page.text
    assert "http" not in page.text.replace("http://www.w3.org/2000/svg", "")   # nothing fetched from elsewhere
    # no controller: what needs it says so
    assert client.get("/api/v1/routes").status_code == 503


def test_the_grafana_dashboard_reads_only_series_the_api_exports():
    import re
    from pathlib import Path
    dash = json.loads((Path(__file__).resolve().parents[2] / "dashboards" / "grafana-fabric.json").read_text())
    queues, corrupt = maps()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(RunCollector({"run": "r", "scenario": "x", "dilation_factor": D},
                              PortCounters(two_switch_rows(), queues, corrupt, D).records(None),
                              {"messages_done": 1, "messages": 2, "payload_bytes_done": 1, "payload_bytes": 2},
                              [{"qp": 0, "src": "h0", "dst": "h1", "tag": "collective", "frames_sent": 9,
                                "retransmitted": 0, "cnps": 1, "dcqcn_rate_gbps_hw": 50.0}]))
    exported = {s.name for f in text_string_to_metric_families(generate_latest(reg).decode()) for s in f.samples}
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"testbed_[a-z_]+", e)}
    assert used and used <= exported, used - exported
    # every series a port has is on some panel
    assert {n for n in exported if n.startswith("testbed_port_")} - {"testbed_port_transmit_frames_total"} <= used


def test_a_link_change_needs_the_token_a_state_and_a_runner(api):
    client = TestClient(make_app(api))
    auth = {"Authorization": "Bearer the-token"}
    assert client.post("/api/v1/links/leaf0-spine0", json={"state": "down"}).status_code == 401
    r = client.post("/api/v1/links/leaf0-spine0", json={"state": "sideways"}, headers=auth)
    assert r.status_code == 400 and "sideways" in r.json()["error"]
    # this API was made without the runner's socket: it says so rather than pretend
    r = client.post("/api/v1/links/leaf0-spine0", json={"state": "down"}, headers=auth)
    assert r.status_code == 503 and "runner" in r.json()["error"]


def test_a_taken_api_port_is_refused_before_the_run_and_zero_or_a_calibration_serves_none():
    import dataclasses
    import socket
    from testbed.errors import SetupError
    from testbed.run.northbound import port_for
    sc = dilate(load_scenario("incast-pfc"), D, "set")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        taken = s.getsockname()[1]
        with pytest.raises(SetupError, match="run.api_port"):
            port_for(dataclasses.replace(sc, run=dataclasses.replace(sc.run, api_port=taken)))
    assert port_for(dataclasses.replace(sc, run=dataclasses.replace(sc.run, api_port=0))) == 0
    rung = dataclasses.replace(sc, dilation=dataclasses.replace(sc.dilation, chosen_by="calibration"))
    assert port_for(rung) == 0


def write_plan(api, messages=()):
    """An engine plan of two queue pairs, h0 -> h1 and back, and the given messages."""
    from testbed.traffic.plan import EnginePlan, FlowSpec
    plan = EnginePlan(out_dir=str(api.rf.root), payload_bytes=4096, time_limit_s=10.0, stall_timeout_s=3.0,
                      nic_lead_ns=5000, transport={"cc": "none"}, dcqcn={}, hosts=(),
                      flows=(FlowSpec(0, "h0", "h1", "collective", 0, 26, True, 1),
                             FlowSpec(1, "h1", "h0", "collective", 0, 26, True, 1)),
                      messages=tuple(messages))
    api.rf.engine_plan.write_text(json.dumps(plan.to_json()))


def write_heartbeat(path, qps, beats=7, started_ns=0, beat_ns=0, busy_ns=None, busy_beats=None):
    """The data plane's heartbeat (nicdp.c beat): its record, the queue pairs', and each compute
    stream's time ended by the beat's count (busy_beats: another count, as a torn read finds)."""
    import struct
    from testbed.records import HEARTBEAT, QP_LIVE
    rec = np.zeros(len(qps), dtype=QP_LIVE)
    for i, q in enumerate(qps):
        for k, v in q.items():
            rec[k][i] = v
    tail = b"" if busy_ns is None else struct.pack(f"<{len(busy_ns) + 1}q", *busy_ns,
                                                   beats if busy_beats is None else busy_beats)
    path.write_bytes(HEARTBEAT.pack(4, 1, 1, 4, 100, 400, beats, started_ns, beat_ns) + rec.tobytes() + tail)


def test_the_queue_pairs_are_read_from_the_data_planes_heartbeat(api):
    write_plan(api)
    assert TestClient(make_app(api)).get("/api/v1/qps").json()["qps"] == []   # no heartbeat yet
    write_heartbeat(api.rf.heartbeat, [
        {"rate_bps": 4e6, "target_bps": 6e6, "alpha": 0.25, "una": 90, "next": 100, "retransmitted": 3, "cnps": 5,
         "cuts": 2},
        {"una": 7, "next": 7}])
    qps = TestClient(make_app(api)).get("/api/v1/qps").json()["qps"]
    assert qps[0]["dcqcn_rate_gbps_hw"] == pytest.approx(4e6 * D / 1e9)   # 50 Gb/s of the hardware's 100
    assert qps[0]["dcqcn_target_gbps_hw"] == pytest.approx(6e6 * D / 1e9) and qps[0]["dcqcn_alpha"] == 0.25
    assert (qps[0]["frames_sent"], qps[0]["frames_acked"], qps[0]["in_flight"]) == (100, 90, 10)
    assert (qps[0]["retransmitted"], qps[0]["cnps"], qps[0]["rate_cuts"]) == (3, 5, 2)
    # a queue pair without congestion control has no rate limiter to report
    assert qps[1]["dcqcn_rate_gbps_hw"] is None and qps[1]["in_flight"] == 0
    fams = {f.name: f for f in text_string_to_metric_families(TestClient(make_app(api)).get("/metrics").text)}
    assert [s.value for s in fams["testbed_qp_cnps_received"].samples if s.name.endswith("_total")] == [5, 0]
    assert fams["testbed_qp_dcqcn_rate_bits_per_second"].samples[0].value == pytest.approx(4e6)


def test_the_fidelity_so_far_is_open_vswitchs_backlog_against_the_verdicts_limit(api):
    f = api.fidelity({"ovs_input": [200, 6]})
    assert f["ovs_input_busy_fraction"] == pytest.approx(0.03) and f["ovs_input_busy_limit"] == 0.05
    assert f["machine_busy_limit"] == 0.97
    assert api.fidelity(None)["ovs_input_busy_fraction"] is None   # before the agent's first summary
    r = TestClient(make_app(api)).get("/api/v1/fidelity").json()["fidelity"]
    assert "judged_after_the_traffic" in r


def test_a_northbound_message_of_another_version_is_refused_by_name():
    from testbed.northbound.link import LINK_VERSION, check_version
    assert check_version({"link_version": LINK_VERSION, "id": 1}, "x")["id"] == 1
    with pytest.raises(ValueError, match="the runner: .*link_version 0"):
        check_version({"link_version": 0}, "the runner")
    with pytest.raises(ValueError, match="link_version None"):
        check_version({"id": 1}, "the runner")


def test_the_live_sync_share_is_the_workers_share_not_computing_since_the_start_and_over_the_last_second(api):
    from testbed.traffic.plan import MessageSpec
    write_plan(api, [MessageSpec(0, -1, 0, (), 100, "h0", "compute"), MessageSpec(1, -1, 0, (), 100, "h1", "aggregate")])
    S = 10**9
    client = TestClient(make_app(api))

    def beat(k, h0_busy_s, torn=False):
        write_heartbeat(api.rf.heartbeat, [{}, {}], beats=k, started_ns=5 * S, beat_ns=5 * S + k * S // 5,
                        busy_ns=[round(h0_busy_s * S), 0], busy_beats=k + 1 if torn else None)
        return client.get("/api/v1/progress").json()["progress"]

    # h0 computes half the time for a second, then all the time; h1 only aggregates: no worker
    for k in range(1, 6):
        p = beat(k, 0.5 * k / 5)
    assert p["training"]["sync_share_since_start"] == pytest.approx(0.5)
    assert p["training"]["sync_share_last_window"] == pytest.approx(0.5)   # 0.2 s to 1 s: all the beats yet
    assert p["traffic_us_hw"] == pytest.approx(1e6 / D)
    for k in range(6, 9):
        p = beat(k, 0.5 + (k - 5) / 5)
    t = p["training"]
    # at 1.6 s: the newest beat a second old is 0.6 s's (busy 0.3 s); 0.8 s busy in the 1 s since
    assert t["window_s"] == pytest.approx(1.0) and t["window_us_hw"] == pytest.approx(1e6 / D)
    assert t["sync_share_last_window"] == pytest.approx(0.2)
    assert t["sync_share_since_start"] == pytest.approx(1 - 1.1 / 1.6)
    assert t["hosts_computing"] == 1 and [h["host"] for h in t["by_host"]] == ["h0"]
    # a torn read (the compute block of another beat than the header's) is not taken
    assert beat(9, 5.0, torn=True)["training"] == t
    fams = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    assert {s.labels["over"]: s.value for s in fams["testbed_job_sync_share"].samples} == pytest.approx(
        {"since_start": 1 - 1.1 / 1.6, "last_window": 0.2})


def test_a_workload_that_does_not_compute_has_no_sync_share(api):
    from testbed.traffic.plan import MessageSpec
    write_plan(api, [MessageSpec(0, 0, 4096, ())])
    write_heartbeat(api.rf.heartbeat, [{}, {}], started_ns=1, beat_ns=2)
    p = TestClient(make_app(api)).get("/api/v1/progress").json()["progress"]
    assert p["messages"] == 4 and p["training"] is None
