"""The switch agent's link to the controller: a policy larger than one read (a k=8 fat-tree's is
over 160 KB) arrives whole, however the stream splits it."""
import json
import os
import socket
import threading
import time

from testbed.fabric.agent import ControllerLink
from testbed.fabric.qos import QueueProfile


def test_a_policy_split_over_many_reads_arrives_whole():
    name = f"fabric-testbed-test/{os.getpid()}/{time.monotonic_ns()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(1)
    policy = {"type": "policy", "queues": {f"s{i}-eth{j}:{c}": QueueProfile(262144, False, 0, 0, 0.0, False, 0, 0).to_json()
                                           for i in range(80) for j in range(8) for c in range(5)}}
    line = (json.dumps(policy) + "\n").encode()
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
    conn.sendall(b'{"type": "policy"}\n')
    assert link.receive(timeout_s=5.0) == [{"type": "policy"}]   # leaves a timeout on the socket
    t = time.monotonic()
    assert link.receive(timeout_s=None) == []
    assert time.monotonic() - t < 0.5
    for s in (conn, server):
        s.close()
    link.close()
