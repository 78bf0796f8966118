"""The switch agent's link to the controller: a policy larger than one read (a k=8 fat-tree's is
over 160 KB) arrives whole, however the stream splits it."""
import json
import os
import socket
import threading
import time

import pytest

from testbed.fabric.agent_link import LINK_VERSION, ControllerLink, PolicyMessage, TrafficStarted, decode, encode
from testbed.fabric.qos import PortPolicy, QueueProfile


def test_a_policy_split_over_many_reads_arrives_whole():
    name = f"fabric-testbed-test/{os.getpid()}/{time.monotonic_ns()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(1)
    profile = QueueProfile(262144, False, 0, 0, 0.0, False, 0, 0)
    policy = PolicyMessage(PortPolicy(dscp_class=tuple(range(65)), pfc_accounting="egress", ingress={}, pause_map={},
                                      queues={f"s{i}-eth{j}:{c}": profile for i in range(80) for j in range(8)
                                              for c in range(5)}, reaction_allowance_us=2000.0))
    line = encode(policy)
    assert len(line) > 160_000

    def serve():
        conn, _ = server.accept()
        for i in range(0, len(line), 7000):   # small pieces, with pauses between them
            conn.sendall(line[i:i + 7000])
            time.sleep(0.002)
        time.sleep(0.5)
        conn.close()

    t = threading.Thread(target=serve)
    t.start()
    link = ControllerLink(name)
    got = link.receive(timeout_s=10.0)
    t.join()
    link.close()
    server.close()
    assert got == [policy]


def test_polling_without_a_timeout_never_waits():
    name = f"fabric-testbed-test/{os.getpid()}/{time.monotonic_ns()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(1)
    link = ControllerLink(name)
    conn, _ = server.accept()
    conn.sendall(encode(TrafficStarted(t_ns=1)))
    assert link.receive(timeout_s=5.0) == [TrafficStarted(t_ns=1)]   # leaves a timeout on the socket
    t = time.monotonic()
    assert link.receive(timeout_s=None) == []
    assert time.monotonic() - t < 0.5
    for s in (conn, server):
        s.close()
    link.close()


def test_every_message_survives_the_wire_and_another_version_is_refused():
    from testbed.fabric.agent_link import (Applied, DeadlockFound, IngressProfile, PolicyUpdate, TelemetrySummary,
                                           WatchdogFired)
    msgs = [PolicyUpdate(queues={"s0-eth1:1": QueueProfile(1000, True, 10, 20, 0.5, True, 600, 300)},
                         pause_map={"s0-eth1:1": ("h0-eth0:1",)}, ingress={"s0-eth1:1": IngressProfile(600, 300, 200)}),
            PolicyUpdate(queues={}),
            PolicyUpdate(queues={}, weights=(1, 8, 1), port_weights={"s0-eth1:1": 2}),
            PolicyUpdate(queues={}, weights=(1, 4, 1), port_weights={}),
            Applied(kind="update", queues=1, ecn_queues=1, pfc_accounting="ingress", pfc_queues=4, reweighted=12),
            TelemetrySummary(t_ns=5, deepest=[["s0-eth1", 1, 900]], marked=1, dropped=0, paused_ports=1, pauses=3,
                             paused=[["h0-eth0", 1, 25000, ["s0-eth1:1"]]]),
            WatchdogFired(node="s0", port="s0-eth1", cls=1, paused_ns=9, causes=["s1-eth2"]),
            DeadlockFound(t_ns=7, stuck_ms=20.0, cycle=[{"port": "s0-eth1", "class": 1, "depth_bytes": 5}]),
            TrafficStarted(t_ns=8)]
    for m in msgs:
        assert decode(json.loads(encode(m))) == m
    assert json.loads(encode(msgs[6]))["class"] == 1   # on the wire and in the event log, as "class"
    other = json.loads(encode(msgs[-1])) | {"link_version": LINK_VERSION + 1}
    with pytest.raises(ValueError, match="version"):
        decode(other)
    with pytest.raises(ValueError, match="type"):
        decode({"type": "hello", "link_version": LINK_VERSION})
