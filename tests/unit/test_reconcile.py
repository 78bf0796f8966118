"""The switch agent's write-off of frames a switch dropped unseen (IngressLeaks), against the data
path's live rows, which change while the check reads them. Two ports of one switch, one class:
row 0 is port sw-eth1's ingress and egress, row 1 port sw-eth2's."""
from __future__ import annotations

import numpy as np

from testbed.fabric.agent_plan import QueueSpec
from testbed.fabric.bpfmaps import INGRESS
from testbed.fabric.reconcile import IngressLeaks, held_bytes

ACK = 62


def fabric():
    queues = tuple(QueueSpec(index=i, node="sw", port=i + 1, ifname=f"sw-eth{i + 1}", cls=0, class_name="control")
                   for i in range(2))
    log: list[dict] = []
    leaks = IngressLeaks(np.arange(2), queues, {"sw": [0, 1]}, log.append)
    return leaks, np.zeros(2, dtype=INGRESS), np.zeros(2, dtype=np.uint64), log


def arrive(ing, row, n=ACK):
    ing["in_bytes"][row] += n
    ing["in_pkts"][row] += 1


def leave(ing, row, n=ACK):
    ing["out_bytes"][row] += n
    ing["out_pkts"][row] += 1


def test_a_frame_the_switch_dropped_unseen_is_written_off_once_after_a_quiet_interval():
    leaks, ing, depth, log = fabric()
    arrive(ing, 0)
    leaks.check(ing, depth, dict)     # first look: nothing to compare with
    leaks.check(ing, depth, dict)     # quiet since: the frame is nowhere
    assert list(ing["lost_bytes"]) == [ACK, 0] and held_bytes(ing)[0] == 0
    assert log == [{"event": "ingress_resync", "port": "sw-eth1", "class": 0, "lost_bytes": ACK}]
    leaks.check(ing, depth, dict)
    assert leaks.resyncs == 1


def test_frames_waiting_in_the_input_socket_or_an_egress_queue_are_not_written_off():
    leaks, ing, depth, log = fabric()
    arrive(ing, 0)
    arrive(ing, 1)
    depth[0] = ACK                    # row 1's frame waits in sw-eth1's egress queue
    for _ in range(3):
        leaks.check(ing, depth, lambda: {"sw-eth1": 768})   # row 0's in OVS's socket (truesize)
    assert not log and list(ing["lost_bytes"]) == [0, 0]


def test_a_frame_arriving_while_the_check_reads_is_not_written_off():
    # The data path adds a frame's bytes before its count: a row copied between the two looks
    # quiet and holding the frame, and the socket read after it may still precede the frame
    leaks, ing, depth, log = fabric()
    leaks.check(ing, depth, dict)
    ing["in_bytes"][0] += ACK

    def socket_read():
        ing["in_pkts"][0] += 1        # the count lands as the check reads the socket
        return {}
    leaks.check(ing, depth, socket_read)
    assert not log and ing["lost_bytes"][0] == 0


def test_a_held_frame_leaving_the_switch_while_the_check_reads_is_not_written_off():
    # At the copy the frame sat in an egress queue; by the time the depths are read it has left
    leaks, ing, depth, log = fabric()
    arrive(ing, 0)
    depth[1] = ACK
    leaks.check(ing, depth, dict)

    def socket_read():
        depth[1] -= ACK
        leave(ing, 0)
        return {}
    leaks.check(ing, depth, socket_read)
    assert not log and ing["lost_bytes"][0] == 0
    assert held_bytes(ing)[0] == 0    # in == out + lost at the end, as the run's own check asks
