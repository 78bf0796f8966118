"""The switch agent's raw qdisc dump against pyroute2's full decoding of the same dump (a
read-only netlink dump of this namespace: no root needed)."""
from __future__ import annotations

import socket
import struct

from pyroute2 import IPRoute

from testbed.fabric.agent_io import Netlink, _nested_u32


def decoded_qlens() -> dict[tuple[int, int], int]:
    with IPRoute() as ipr:
        out = {}
        for m in ipr.get_qdiscs():
            q = m.get_nested("TCA_STATS2", "TCA_STATS_QUEUE")
            if q is not None:
                out[(m["index"], m["handle"])] = q["qlen"]
        return out


def test_the_raw_qdisc_dump_reads_every_queue_length_pyroute2_decodes():
    # the same namespace's qdiscs may change while it is read (a run's fabric with traffic in its
    # queues): compared on the qdiscs pyroute2 read the same before and after
    nl = Netlink()
    try:
        for _ in range(5):
            before = decoded_qlens()
            raw = nl.qdisc_qlens(0)
            again = nl.qdisc_qlens(0)   # the socket is left ready for the next request
            after = decoded_qlens()
            if after.keys() == before.keys():
                break
    finally:
        nl.close()
    # every namespace has lo: its noqueue qdisc is dumped too
    assert before and socket.if_nametoindex("lo") in {ix for ix, _ in before}
    assert raw.keys() == before.keys() == again.keys()
    still = {k: v for k, v in before.items() if after[k] == v}
    assert socket.if_nametoindex("lo") in {ix for ix, _ in still}
    assert {k: raw[k] for k in still} == still


def test_a_nested_attribute_is_found_by_its_path_and_a_missing_one_is_none():
    def nla(typ, payload):
        n = 4 + len(payload)
        return struct.pack("HH", n, typ) + payload + b"\0" * ((-n) % 4)
    inner = nla(1, b"\xff" * 6) + nla(3, struct.pack("IIIII", 7, 4096, 0, 0, 0))
    buf = nla(1, b"tbf\0") + nla(7 | 0x8000, inner)   # TCA_STATS2, flagged nested
    assert _nested_u32(buf, 0, len(buf), (7, 3)) == 7
    assert _nested_u32(buf, 0, len(buf), (7, 2)) is None
    assert _nested_u32(buf, 0, len(buf), (8, 3)) is None
