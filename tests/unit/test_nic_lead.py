"""The lead of frames the data plane keeps in each host NIC class (workload.nic_lead_ns): wall
clock as configured, at least LEAD_MIN_FRAMES frames whatever the dilation, and within the class
buffer."""
import dataclasses

from testbed.fabric import qos
from testbed.scenario import load_scenario
from testbed.scenario.dilation import dilate
from testbed.traffic.workload import LEAD_MIN_FRAMES, nic_lead_ns


def frame_ns(sc):
    return qos.frame_bytes(sc) * 8e9 / (sc.fabric.bw_mbps * 1e6)


def test_the_configured_lead_stands_where_it_holds_enough_frames():
    sc = dilate(load_scenario("pipeline-fattree"), 25000, "set")  # 8.3 ms frames
    assert sc.transport.nic_lead_us * 1e3 > LEAD_MIN_FRAMES * frame_ns(sc)
    assert nic_lead_ns(sc) == int(sc.transport.nic_lead_us * 1e3)


def test_at_a_large_dilation_the_lead_is_the_frame_floor_not_less():
    # at 4 x the pipeline's auto D a frame takes 42 ms on the wire, longer than the 40 ms lead
    sc = dilate(load_scenario("pipeline-fattree"), 126000, "set")
    assert frame_ns(sc) > sc.transport.nic_lead_us * 1e3
    assert nic_lead_ns(sc) == int(LEAD_MIN_FRAMES * frame_ns(sc))


def test_the_class_buffer_caps_the_frame_floor():
    sc = dilate(load_scenario("pipeline-fattree"), 126000, "set")
    frame = qos.frame_bytes(sc)
    small = dataclasses.replace(sc, classes=tuple(dataclasses.replace(c, buffer_bytes=3 * frame) for c in sc.classes))
    # a buffer of three frames leaves room for one frame of lead beside the two the NIC's queue keeps
    assert nic_lead_ns(small) == int(frame * 8e9 / (sc.fabric.bw_mbps * 1e6))
