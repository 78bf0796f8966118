from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP

from testbed.packets import (ECT0, HEADER_BYTES, ROCE_UDP_PORT, DataTemplate, PayloadStamp, dissect)


def template(**kw):
    args = dict(src_mac="02:00:00:00:00:00", dst_mac="02:00:00:00:01:00", src_ip="10.0.0.1",
                dst_ip="10.0.1.1", dscp=26, flow=3, payload_bytes=4096)
    args.update(kw)
    return DataTemplate(**args)


def test_patched_packet_is_valid_rocev2_with_correct_icrc():
    t = template()
    frame = bytes(t.fill(psn=0x123456, msg=7, seq=9, tx_ns=1234567890123))
    assert len(frame) == 4096 + HEADER_BYTES
    p = dissect(frame)
    assert p[UDP].dport == ROCE_UDP_PORT and p[IP].tos == (26 << 2) | ECT0
    assert p[BTH].psn == 0x123456 and p[BTH].dqpn == 0x100 + 3
    assert (p[PayloadStamp].msg, p[PayloadStamp].seq, p[PayloadStamp].tx_ns) == (7, 9, 1234567890123)
    # Scapy recomputes the ICRC from scratch when the field is left empty.
    fresh = p.copy()
    fresh[BTH].icrc = None
    assert dissect(bytes(fresh))[BTH].icrc == p[BTH].icrc


def test_short_payload_template():
    t = template(payload_bytes=100)
    p = dissect(bytes(t.fill(1, 2, 3, 4)))
    assert p[IP].len == 20 + 8 + 12 + 100 + 4
    fresh = p.copy()
    fresh[BTH].icrc = None
    assert dissect(bytes(fresh))[BTH].icrc == p[BTH].icrc


def test_cnp_is_a_rocev2_cnp_with_becn_for_the_senders_queue_pair():
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from testbed.packets import CNP, QPN_BASE, ROCE_UDP_PORT, CnpTemplate
    c = CnpTemplate(src_mac="02:00:00:00:00:02", dst_mac="02:00:00:00:00:01", src_ip="10.0.0.2",
                    dst_ip="10.0.0.1", dscp=48, flow=5)
    p = dissect(c.bytes)
    assert p[UDP].dport == ROCE_UDP_PORT and p[IP].tos == 48 << 2
    assert p[BTH].opcode == CNP == 0x81 and p[BTH].becn == 1 and p[BTH].dqpn == QPN_BASE + 5
    # the ICRC is the one Scapy computes for the same packet
    assert bytes(p) == c.bytes
