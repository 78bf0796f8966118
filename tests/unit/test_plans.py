"""The plans the runner hands the engine and the switch agent across the process boundary: typed
records that survive their JSON, keep the keys the analysis reads, name a message's fields (no
positional rows), and refuse another version."""
import dataclasses
import json

import pytest

from testbed.fabric.agent_plan import AGENT_PLAN_VERSION, AgentPlan, LeafSpec, QueueId, QueueSpec
from testbed.traffic.plan import PLAN_VERSION, EnginePlan, FlowSpec, HostSpec, MessageSpec


def engine_plan():
    return EnginePlan(out_dir="/tmp/x", payload_bytes=4096, time_limit_s=10.0, stall_timeout_s=3.0, nic_lead_ns=5000,
                      transport={"cc": "none"}, dcqcn={"ref_gbps": 10},
                      hosts=(HostSpec("h0", 11, "h0-eth0", "02:00:00:00:00:01", "10.0.0.1", 1e8),),
                      flows=(FlowSpec(0, "h0", "h1", "collective", 0, 26, True, 1),),
                      messages=(MessageSpec(0, 0, 8192, ()), MessageSpec(1, -1, 0, (0,), duration_ns=500, host="h1", tag="compute")))


def agent_plan():
    leaf = LeafSpec(node="s0", port=1, ifname="s0-eth1", cls=1, ns_pid=0, ifindex=7, handle=0x20000, parent=0x10011,
                    switch=True, queue=9, pausable=True, running={"rate": 1}, paused={"rate": 0}, htb_classid=0x10011,
                    htb_parent=0x10001, htb_running={"burst": 60000}, htb_resume={"burst": 4154}, bw_bps=1e8)
    return AgentPlan(out_dir="/tmp/x", controller_socket="sock", map_fds={"queues": 5}, first_minor=0x11,
                     frame_bytes=4154, poll_hz=2000, telemetry_hz=1000, deadlock_detect_ms=50, watchdog_ms=0,
                     queues=(QueueSpec(9, "s0", 1, "s0-eth1", 1, "roce"),), leaves=(leaf,))


@pytest.mark.parametrize("make, version", [(engine_plan, PLAN_VERSION), (agent_plan, AGENT_PLAN_VERSION)])
def test_a_plan_survives_its_json_and_another_version_is_refused(make, version):
    plan = make()
    doc = json.loads(json.dumps(plan.to_json()))
    assert doc["plan_version"] == version
    assert type(plan).from_json(doc) == plan
    with pytest.raises(ValueError, match="version"):
        type(plan).from_json(doc | {"plan_version": version + 1})


def test_a_cycle_the_watchdog_breaks_is_not_a_deadlock_first():
    # at any D: a 100 us watchdog dilated 5000x is 500 ms, past the 50 ms detector
    plan = agent_plan()
    assert plan.deadlock_after_ms == 50
    assert dataclasses.replace(plan, watchdog_ms=500.0).deadlock_after_ms == 1000.0
    assert dataclasses.replace(plan, watchdog_ms=10.0).deadlock_after_ms == 50


def test_the_json_keeps_what_the_analysis_reads():
    doc = engine_plan().to_json()
    assert doc["flows"][0]["class"] == 1 and doc["hosts"][0]["bw_bps"] == 1e8
    assert doc["messages"][1] == {"id": 1, "flow": -1, "bytes": 0, "deps": [0], "duration_ns": 500, "host": "h1",
                                   "tag": "compute"}
    doc = agent_plan().to_json()
    assert doc["queues"][0] == {"index": 9, "node": "s0", "port": 1, "ifname": "s0-eth1", "class": 1,
                                "class_name": "roce"}
    assert doc["leaves"][0]["class"] == 1 and doc["leaves"][0]["switch"] is True


def test_a_queue_is_named_by_its_id_everywhere():
    q = agent_plan().queues[0]
    assert q.id == QueueId("s0-eth1", 1) == QueueId.parse("s0-eth1:1") == agent_plan().leaves[0].id
    assert q.id.key == "s0-eth1:1"
