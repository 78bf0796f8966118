"""The switch agent's kernel I/O: an rtnetlink socket per namespace sending prebuilt tc changes
(a pause or resume is one message, checked by its ack), a packet socket per paused port for the XON
frame, and Open vSwitch's input backlog from /proc/net/packet."""
from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST
from pyroute2.netlink.rtnl import RTM_NEWQDISC, RTM_NEWTCLASS
from pyroute2.netlink.rtnl.tcmsg import sched_htb, sched_tbf, tcmsg

from testbed.fabric.agent_plan import MAX_INPUT_BUSY_FRACTION, LeafSpec
from testbed.fabric.netns import netns_of

NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_GETQDISC = 38
NLM_F_DUMP = 0x300
TCA_STATS2, TCA_STATS_QUEUE = 7, 3
NLA_TYPE_MASK = 0x3FFF
# About 16 frames of 4 KB (in truesize): ~5 ms of a 100 Mb/s link waiting unseen in a switch's input.
INPUT_BUSY_BYTES = 96 * 1024


def socket_in(ns_pid: int, family: int) -> socket.socket:
    """A raw socket of ``family`` opened in a host's namespace (0: this one)."""
    if not ns_pid:
        return socket.socket(family, socket.SOCK_RAW, 0)
    with netns_of(ns_pid):
        return socket.socket(family, socket.SOCK_RAW, 0)


class Netlink:
    """One rtnetlink socket per namespace; sends prebuilt messages and checks the ack."""

    def __init__(self):
        self._socks: dict[int, socket.socket] = {}
        self._buf = bytearray(8192)

    def sock(self, ns_pid: int) -> socket.socket:
        s = self._socks.get(ns_pid)
        if s is None:
            s = socket_in(ns_pid, socket.AF_NETLINK)
            s.bind((0, 0))
            self._socks[ns_pid] = s
        return s

    def request(self, ns_pid: int, msg: bytes) -> None:
        s = self.sock(ns_pid)
        s.send(msg)
        n = s.recv_into(self._buf)
        _len, typ, _flags, _seq, _pid, err = struct.unpack_from("IHHIIi", self._buf)
        if typ != NLMSG_ERROR or err != 0:
            raise OSError(-err, f"netlink: {os.strerror(-err) if err else typ}")

    def qdisc_qlens(self, ns_pid: int) -> dict[tuple[int, int], int]:
        """Every qdisc's queue length in a namespace, by (ifindex, handle): one raw RTM_GETQDISC
        dump, read for TCA_STATS2/TCA_STATS_QUEUE's qlen alone. pyroute2 decodes every attribute
        of every qdisc, and per interface asked: at D = 80000 the stale-depth check that asked it
        per suspect queue took the agent 0.6 of a core and blinded it for up to 300 ms (measured)."""
        s = self.sock(ns_pid)
        # the tcmsg: family, padding, ifindex 0 (every device), handle, parent, info
        s.send(struct.pack("IHHII", 36, RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, 0, 0) +
               struct.pack("BBHiIII", 0, 0, 0, 0, 0, 0, 0))
        out: dict[tuple[int, int], int] = {}
        while True:
            data = s.recv(1 << 17)
            off = 0
            while off + 16 <= len(data):
                length, typ = struct.unpack_from("IH", data, off)
                if length < 16:
                    break
                if typ == NLMSG_DONE:
                    return out
                if typ == NLMSG_ERROR:
                    err = struct.unpack_from("i", data, off + 16)[0]
                    raise OSError(-err, f"netlink qdisc dump: {os.strerror(-err)}")
                if typ == RTM_NEWQDISC:
                    ifindex, handle = struct.unpack_from("iI", data, off + 20)
                    qlen = _nested_u32(data, off + 36, off + length, (TCA_STATS2, TCA_STATS_QUEUE))
                    if qlen is not None:
                        out[(ifindex, handle)] = qlen
                off += (length + 3) & ~3

    def close(self) -> None:
        for s in self._socks.values():
            s.close()


def _nested_u32(data: bytes, start: int, end: int, path: tuple[int, ...]) -> int | None:
    """The first u32 of the attribute at ``path`` (types, outermost first) among the netlink
    attributes in data[start:end]; None if it is not there."""
    a = start
    while a + 4 <= end:
        alen, atype = struct.unpack_from("HH", data, a)
        if alen < 4:
            return None
        if atype & NLA_TYPE_MASK == path[0]:
            if len(path) == 1:
                return struct.unpack_from("I", data, a + 4)[0] if alen >= 8 else None
            return _nested_u32(data, a + 4, a + alen, path[1:])
        a += (alen + 3) & ~3
    return None


def pfc_frame(cls: int, pause_quanta: int) -> bytes:
    """An 802.1Qbb frame for one priority: pause_quanta 0 is XON."""
    from scapy.all import Ether, raw
    from scapy.contrib.mac_control import MACControlClassBasedFlowControl
    fields = {f"c{cls}_enabled": 1, f"c{cls}_pause_time": pause_quanta}
    return raw(Ether(dst="01:80:c2:00:00:01", src="02:00:00:00:00:00") / MACControlClassBasedFlowControl(**fields))


class PortSockets:
    """An AF_PACKET socket per paused port (opened in its namespace), to hand it the XON frame."""

    def __init__(self):
        self._socks: dict[tuple[int, str], socket.socket] = {}

    def open(self, ns_pid: int, ifname: str) -> socket.socket:
        s = self._socks.get((ns_pid, ifname))
        if s is None:
            s = socket_in(ns_pid, socket.AF_PACKET)
            s.bind((ifname, 0))
            self._socks[(ns_pid, ifname)] = s
        return s

    def send(self, ns_pid: int, ifname: str, frame: bytes) -> None:
        self.open(ns_pid, ifname).send(frame)

    def close(self) -> None:
        for s in self._socks.values():
            s.close()


def _tc_message(leaf: LeafSpec, msg_type: int, handle: int, parent: int, kind: str, options: dict) -> bytes:
    """A prebuilt tc change request (no NLM_F_CREATE: the qdisc or class must exist)."""
    msg = tcmsg()
    msg["index"] = leaf.ifindex
    msg["handle"] = handle
    msg["parent"] = parent
    msg["attrs"] = [["TCA_KIND", kind], ["TCA_OPTIONS", options]]
    msg["header"]["type"] = msg_type
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK
    msg.encode()
    return bytes(msg.data)


def htb_class_message(leaf: LeafSpec, params: dict) -> bytes:
    """A change of the leaf's HTB class (its bucket, around a resume)."""
    return _tc_message(leaf, RTM_NEWTCLASS, leaf.htb_classid, leaf.htb_parent, "htb",
                       sched_htb.get_class_parameters(dict(params)))


def tbf_message(leaf: LeafSpec, params: dict) -> bytes:
    """A change of the leaf's TBF (its rate: pause or resume)."""
    return _tc_message(leaf, RTM_NEWQDISC, leaf.handle, leaf.parent, "tbf",
                       sched_tbf.get_parameters(dict(params)))


class InputBacklog:
    """How much waits in Open vSwitch's receive socket of each switch port (userspace datapath):
    frames there have left the upstream queue but not reached any egress queue, a first-come
    first-served buffer that neither priorities nor pauses see. Read from /proc/net/packet
    (Rmem: the socket's receive memory, skb truesize), all sockets in one read."""

    def __init__(self, ifindex_port: dict[int, str]):
        self.ports = ifindex_port
        self.max_bytes: dict[str, int] = {}
        self.samples = 0
        self.busy_samples = 0  # samples in which some port held more than BUSY_BYTES

    def read_bytes(self) -> dict[str, int]:
        """What waits in each port's receive sockets now (ports with nothing are left out)."""
        return self._read() or {}

    def _read(self) -> dict[str, int] | None:
        try:
            lines = Path("/proc/net/packet").read_text().splitlines()[1:]
        except OSError:
            return None
        out: dict[str, int] = {}
        for line in lines:
            f = line.split()
            port = self.ports.get(int(f[4]))
            rmem = int(f[6])
            if port is not None and rmem:
                out[port] = out.get(port, 0) + rmem
        return out

    def sample(self) -> None:
        now = self._read()
        if now is None:
            return
        for port, rmem in now.items():
            if rmem > self.max_bytes.get(port, 0):
                self.max_bytes[port] = rmem
        self.samples += 1
        self.busy_samples += any(rmem > INPUT_BUSY_BYTES for rmem in now.values())

    def past_any_verdict(self, samples_left: int) -> bool:
        """Whether Open vSwitch was behind in more than MAX_INPUT_BUSY_FRACTION of the samples the
        run could take in all, had it samples_left more: its verdict can then only be
        could_not_keep_up, however the rest of the run goes."""
        return self.busy_samples > MAX_INPUT_BUSY_FRACTION * (self.samples + samples_left)

    def result(self) -> dict:
        worst = sorted(self.max_bytes.items(), key=lambda kv: kv[1], reverse=True)[:5]
        return {"samples": self.samples, "busy_samples": self.busy_samples, "busy_threshold_bytes": INPUT_BUSY_BYTES,
                "max_bytes": max(self.max_bytes.values(), default=0),
                "worst_ports": [{"port": p, "max_bytes": b} for p, b in worst]}
