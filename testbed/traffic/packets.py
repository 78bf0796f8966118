"""Packet formats: RoCEv2 data packets with the testbed's payload header, built with Scapy.

Templates are built once with Scapy; the engine's hot loop only patches the PSN, the
payload header and the ICRC in a bytearray and sends bytes.

Wire layout of a data packet (offsets in bytes):
  0  Ether | 14 IP (DSCP, ECT(0)) | 34 UDP (dport 4791, checksum 0) | 42 BTH (RC SEND FIRST,
     MIDDLE and LAST along a message, SEND ONLY for a one-packet message; AckReq on the last)
  54 PayloadStamp (magic, flow, msg, seq, tx_ns) | 78 padding | -4 ICRC
and of an ACK/NAK: the same up to the BTH (RC ACKNOWLEDGE), then 54 AETH | 58 ICRC; and of a
CNP: the same up to the BTH (opcode 0x81, BECN set), then 16 reserved bytes | 70 ICRC.
"""
from __future__ import annotations

import struct

# ISA-L's CRC32 (the same polynomial as zlib's): 0.30 us for a 4 KB frame against 2.2 us (measured)
from isal.isal_zlib import crc32

from scapy.contrib.roce import AETH, BTH, CNP_OPCODE, cnp, opcode
from scapy.fields import IntField, LongField, XIntField
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers

ROCE_UDP_PORT = 4791
RC_SEND_FIRST = opcode("RC", "SEND_FIRST")[0]
RC_SEND_MIDDLE = opcode("RC", "SEND_MIDDLE")[0]
RC_SEND_LAST = opcode("RC", "SEND_LAST")[0]
RC_SEND_ONLY = opcode("RC", "SEND_ONLY")[0]
SEND_OPCODES = frozenset((RC_SEND_FIRST, RC_SEND_MIDDLE, RC_SEND_LAST, RC_SEND_ONLY))
ACKREQ = 1 << 31  # BTH AckReq: set on a message's last packet, as RC senders do
RC_ACKNOWLEDGE = opcode("RC", "ACKNOWLEDGE")[0]
CNP = CNP_OPCODE
ECT0 = 0b10
PAYLOAD_MAGIC = 0x54425031  # "TBP1"
QPN_BASE = 0x100
UDP_SPORT_BASE = 49152

from testbed.wire import (BTH_LEN, BTH_OFF, ETH_LEN, HEADER_BYTES, ICRC_LEN, IP_LEN, IP_OFF,  # noqa: E402,F401
                          PAYLOAD_OFF, PSN_OFF, UDP_LEN)


class PayloadStamp(Packet):
    """First bytes of every data packet's RDMA payload: who sent what, and when."""
    name = "PayloadStamp"
    fields_desc = [
        XIntField("magic", PAYLOAD_MAGIC),
        IntField("flow", 0),
        IntField("msg", 0),
        IntField("seq", 0),
        LongField("tx_ns", 0),
    ]


PAYLOAD_HEADER_LEN = len(PayloadStamp())
# Hot-path views of the same fields.
PAYLOAD_STRUCT = struct.Struct("!IIIIQ")
PAYLOAD_VARIABLE = struct.Struct("!IIQ")  # msg, seq, tx_ns
PSN_STRUCT = struct.Struct("!I")          # ackreq(1) resv(7) psn(24)
ICRC_STRUCT = struct.Struct("<I")
AETH_STRUCT = struct.Struct("!I")         # syndrome(8) msn(24)
QPN_STRUCT = struct.Struct("!I")          # resv(8) dqpn(24), at BTH_OFF + 4
assert PAYLOAD_STRUCT.size == PAYLOAD_HEADER_LEN


class _RoceTemplate:
    """A prebuilt RoCEv2 packet whose PSN and later bytes change per packet. The ICRC covers a
    pseudo-header with variant fields masked to ones (IBA annex A17): 8 bytes of LRH, IP with
    tos/ttl/checksum masked, UDP with checksum masked, BTH with its FECN/BECN/reserved byte
    masked; everything before the PSN is fixed, so its CRC is computed once."""

    __slots__ = ("buf", "crc_base", "length", "bytes")

    def __init__(self, pkt):
        self.buf = bytearray(bytes(pkt))
        self.length = len(self.buf)
        ip = bytearray(self.buf[IP_OFF:IP_OFF + IP_LEN])
        ip[1], ip[8], ip[10], ip[11] = 0xFF, 0xFF, 0xFF, 0xFF
        udp = bytearray(self.buf[IP_OFF + IP_LEN:BTH_OFF])
        udp[6], udp[7] = 0xFF, 0xFF
        bth_head = bytearray(self.buf[BTH_OFF:PSN_OFF])
        bth_head[4] = 0xFF
        self.crc_base = crc32(bytes(b"\xff" * 8) + ip + udp + bth_head)

    def _seal(self) -> bytearray:
        buf = self.buf
        ICRC_STRUCT.pack_into(buf, self.length - ICRC_LEN,
                              crc32(memoryview(buf)[PSN_OFF:self.length - ICRC_LEN], self.crc_base))
        return buf


def _headers(src_mac, dst_mac, src_ip, dst_ip, tos, flow):
    return (Ether(src=src_mac, dst=dst_mac)
            / IP(src=src_ip, dst=dst_ip, tos=tos, ttl=64, id=0, flags="DF")
            / UDP(sport=UDP_SPORT_BASE + flow % 16384, dport=ROCE_UDP_PORT, chksum=0))


def send_opcode(seq: int, npkts: int) -> int:
    """The RC SEND opcode of packet ``seq`` of an ``npkts``-packet message."""
    if npkts == 1:
        return RC_SEND_ONLY
    return RC_SEND_FIRST if seq == 0 else RC_SEND_LAST if seq == npkts - 1 else RC_SEND_MIDDLE


class DataTemplate(_RoceTemplate):
    """A data packet (an RC SEND opcode) of one flow and one payload length: ECT(0), as RoCEv2
    NICs send, unless ect is False (Not-ECT)."""

    __slots__ = ("psn_flags",)

    def __init__(self, *, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, dscp: int,
                 flow: int, payload_bytes: int, ect: bool = True, opcode: int = RC_SEND_ONLY):
        if payload_bytes < PAYLOAD_HEADER_LEN:
            raise ValueError(f"payload must hold the {PAYLOAD_HEADER_LEN}-byte header")
        if opcode not in SEND_OPCODES:
            raise ValueError(f"not an RC SEND opcode: {opcode}")
        super().__init__(_headers(src_mac, dst_mac, src_ip, dst_ip, (dscp << 2) | (ECT0 if ect else 0), flow)
                         / BTH(opcode=opcode, dqpn=QPN_BASE + flow, psn=0)
                         / PayloadStamp(flow=flow)
                         / Raw(bytes(payload_bytes - PAYLOAD_HEADER_LEN)))
        self.psn_flags = ACKREQ if opcode in (RC_SEND_LAST, RC_SEND_ONLY) else 0

    def fill(self, psn: int, msg: int, seq: int, tx_ns: int) -> bytearray:
        PSN_STRUCT.pack_into(self.buf, PSN_OFF, (psn & 0xFFFFFF) | self.psn_flags)
        PAYLOAD_VARIABLE.pack_into(self.buf, PAYLOAD_OFF + 8, msg, seq, tx_ns)
        return self._seal()


class AckTemplate(_RoceTemplate):
    """An RC ACKNOWLEDGE (BTH + AETH) from a flow's receiver back to its sender: the AETH
    syndrome says ACK or NAK, the PSN what it refers to. Not ECN-capable, like RoCE NICs' ACKs."""

    __slots__ = ()

    def __init__(self, *, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, dscp: int, flow: int):
        super().__init__(_headers(src_mac, dst_mac, src_ip, dst_ip, dscp << 2, flow)
                         / BTH(opcode=RC_ACKNOWLEDGE, dqpn=QPN_BASE + flow, psn=0)
                         / AETH(syndrome=0, msn=0))

    def fill(self, psn: int, syndrome: int, msn: int) -> bytearray:
        PSN_STRUCT.pack_into(self.buf, PSN_OFF, psn & 0xFFFFFF)
        AETH_STRUCT.pack_into(self.buf, PAYLOAD_OFF, (syndrome << 24) | (msn & 0xFFFFFF))
        return self._seal()


class CnpTemplate(_RoceTemplate):
    """A congestion notification (RoCEv2 CNP: BTH opcode 0x81 with BECN) from a flow's receiver to its
    sender's queue pair. Every CNP of a flow is the same packet, sealed once."""

    __slots__ = ()

    def __init__(self, *, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, dscp: int, flow: int):
        super().__init__(_headers(src_mac, dst_mac, src_ip, dst_ip, dscp << 2, flow) / cnp(QPN_BASE + flow))
        self.bytes = bytes(self._seal())


# Classic BPF for the receive sockets: IPv4, UDP, not a fragment, destination port 4791
# (what `tcpdump -d 'ip and udp dst port 4791'` compiles to), so that ARP, IPv6 and ICMP
# never reach Python.
_BPF_LDH_ABS, _BPF_LDB_ABS, _BPF_JEQ_K, _BPF_JSET_K = 0x28, 0x30, 0x15, 0x45
_BPF_LDXB_MSH, _BPF_LDH_IND, _BPF_LDB_IND, _BPF_RET_K = 0xB1, 0x48, 0x50, 0x06
ROCE_SOCKET_FILTER = (
    (_BPF_LDH_ABS, 0, 0, 12), (_BPF_JEQ_K, 0, 8, 0x0800),
    (_BPF_LDB_ABS, 0, 0, 23), (_BPF_JEQ_K, 0, 6, 17),
    (_BPF_LDH_ABS, 0, 0, 20), (_BPF_JSET_K, 4, 0, 0x1FFF),
    (_BPF_LDXB_MSH, 0, 0, 14), (_BPF_LDH_IND, 0, 0, 16), (_BPF_JEQ_K, 0, 1, ROCE_UDP_PORT),
    (_BPF_RET_K, 0, 0, 0x40000), (_BPF_RET_K, 0, 0, 0),
)

# The same frames, only when a message's last frame (SEND_LAST or SEND_ONLY: the BTH opcode, 8
# bytes after the IP header's end), and only its first 64 bytes: the data plane's doorbell, which
# wakes it as soon as a message that others wait for may have completed.
MESSAGE_END_FILTER = (
    (_BPF_LDH_ABS, 0, 0, 12), (_BPF_JEQ_K, 0, 11, 0x0800),
    (_BPF_LDB_ABS, 0, 0, 23), (_BPF_JEQ_K, 0, 9, 17),
    (_BPF_LDH_ABS, 0, 0, 20), (_BPF_JSET_K, 7, 0, 0x1FFF),
    (_BPF_LDXB_MSH, 0, 0, 14), (_BPF_LDH_IND, 0, 0, 16), (_BPF_JEQ_K, 0, 4, ROCE_UDP_PORT),
    (_BPF_LDB_IND, 0, 0, 22), (_BPF_JEQ_K, 1, 0, RC_SEND_LAST), (_BPF_JEQ_K, 0, 1, RC_SEND_ONLY),
    (_BPF_RET_K, 0, 0, 64), (_BPF_RET_K, 0, 0, 0),
)


def dissect(frame: bytes) -> Ether:
    """Scapy's view of a captured data packet (for analysis and tests, not the hot path)."""
    return Ether(frame)


for _op in SEND_OPCODES:
    bind_layers(BTH, PayloadStamp, opcode=_op)
