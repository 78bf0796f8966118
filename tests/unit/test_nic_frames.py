"""The data plane builds its RoCEv2 frames in C from each flow's Scapy-built headers: they must be
the frames testbed.traffic.packets (Scapy) describes, byte for byte, ICRC included."""
import pytest

from testbed.traffic import nic
from testbed.traffic.packets import (PAYLOAD_HEADER_LEN, RC_SEND_FIRST, RC_SEND_LAST, RC_SEND_MIDDLE, RC_SEND_ONLY,
                                     DataTemplate, dissect)

ENDS = dict(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:01:00", src_ip="10.0.0.1", dst_ip="10.0.1.1")


@pytest.mark.parametrize("opcode", [RC_SEND_FIRST, RC_SEND_MIDDLE, RC_SEND_LAST, RC_SEND_ONLY])
@pytest.mark.parametrize("payload", [PAYLOAD_HEADER_LEN, 100, 1000, 4096])
def test_c_frames_match_scapy_templates(opcode, payload):
    flow, msg, seq, psn, t = 7, 123456, 42, (1 << 24) + 99, 1_796_000_000_123_456_789
    ref = DataTemplate(**ENDS, dscp=26, flow=flow, payload_bytes=payload, opcode=opcode)
    want = bytes(ref.fill(psn, msg, seq, t))
    prefix = bytes(DataTemplate(**ENDS, dscp=26, flow=flow, payload_bytes=PAYLOAD_HEADER_LEN,
                                opcode=RC_SEND_ONLY).buf[:nic.PREFIX_LEN])
    got = nic.data_frame(prefix, opcode, psn, opcode in (RC_SEND_LAST, RC_SEND_ONLY), flow, msg, seq, t, payload)
    assert got == want
    assert nic.lib().roce_icrc(got, len(got)) == int.from_bytes(got[-4:], "little")


def test_a_corrupted_frame_fails_the_icrc():
    prefix = bytes(DataTemplate(**ENDS, dscp=26, flow=1, payload_bytes=PAYLOAD_HEADER_LEN).buf[:nic.PREFIX_LEN])
    frame = bytearray(nic.data_frame(prefix, RC_SEND_ONLY, 5, True, 1, 2, 0, 10, 4096))
    frame[2000] ^= 1
    assert nic.lib().roce_icrc(bytes(frame), len(frame)) != int.from_bytes(frame[-4:], "little")
    assert dissect(bytes(frame)).haslayer("BTH")
