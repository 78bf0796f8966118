"""The one owner of link-level kernel state: MTU, offloads and queueing disciplines.

Every link end (switch port or host NIC) gets the same egress discipline:

    root htb 1:  default 1:1
      class 1:1  rate = the link's rate (its own, or bw_mbps), burst = cburst = htb_burst_bytes
        qdisc 10: bfifo limit queue_limit_bytes      <- the port's buffer, in bytes

Nobody else creates, changes or deletes qdiscs. Host NICs live in their host's namespace;
a netlink socket opened there is kept for the run.
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.rtnl.tcmsg import plugins as _tc_plugins
from pyroute2.netlink.rtnl.tcmsg import sched_pfifo

from testbed.netns import netns_of

# bfifo takes the same option struct as pfifo (struct tc_fifo_qopt { u32 limit; }), in bytes;
# pyroute2 0.9 only registers the pfifo name.
_tc_plugins.setdefault("bfifo", sched_pfifo)

ROOT_HANDLE = 0x10000
CLASS_HANDLE = 0x10001
LEAF_HANDLE = 0x100000
OFFLOADS = ("tx", "rx", "tso", "gso", "gro")


@dataclass(frozen=True)
class PortConfig:
    bw_mbps: float
    mtu_bytes: int
    queue_limit_bytes: int
    htb_burst_bytes: int
    offloads_off: bool


@dataclass
class Port:
    node: str
    ifname: str
    ipr: IPRoute
    index: int
    bw_mbps: float


class PortManager:
    """Configures every port of a started Mininet net and reads their queue counters."""

    def __init__(self, config: PortConfig):
        self.config = config
        self.ports: list[Port] = []
        self._root_ipr: IPRoute | None = None
        self._ns_iprs: list[IPRoute] = []
        self._by_ifname: dict[str, Port] = {}

    def attach(self, net, fabric) -> None:
        """Open netlink sockets for every interface of the fabric (hosts' inside their namespace)."""
        self._root_ipr = IPRoute()
        host_ipr: dict[str, IPRoute] = {}
        for h in fabric.hosts:
            with netns_of(net.get(h.name).pid):
                host_ipr[h.name] = IPRoute()
            self._ns_iprs.append(host_ipr[h.name])
        for link in fabric.links:
            for node, port in ((link.a, link.a_port), (link.b, link.b_port)):
                ifname = fabric.intf_name(node, port)
                ipr = host_ipr.get(node, self._root_ipr)
                found = ipr.link_lookup(ifname=ifname)
                if not found:
                    raise RuntimeError(f"interface {ifname} of {node} does not exist")
                self.ports.append(Port(node, ifname, ipr, found[0], link.bw_mbps or self.config.bw_mbps))
        self._by_ifname = {p.ifname: p for p in self.ports}

    def configure(self, net) -> None:
        c = self.config
        for p in self.ports:
            p.ipr.link("set", index=p.index, mtu=c.mtu_bytes)
        if c.offloads_off:
            self._offloads_off(net)
        for p in self.ports:
            rate = f"{p.bw_mbps * 1e6:.0f}bit"
            p.ipr.tc("add", "htb", p.index, ROOT_HANDLE, default=CLASS_HANDLE & 0xFFFF)
            p.ipr.tc("add-class", "htb", p.index, CLASS_HANDLE, parent=ROOT_HANDLE, rate=rate,
                     burst=c.htb_burst_bytes, cburst=c.htb_burst_bytes, mtu=c.mtu_bytes + 14)
            p.ipr.tc("add", "bfifo", p.index, LEAF_HANDLE, parent=CLASS_HANDLE, limit=c.queue_limit_bytes)

    def _offloads_off(self, net) -> None:
        """ethtool has no netlink equivalent in pyroute2 for feature flags: run it, all at once."""
        procs = []
        for p in self.ports:
            argv = ["ethtool", "-K", p.ifname]
            for feature in OFFLOADS:
                argv += [feature, "off"]
            node = net.get(p.node)
            if getattr(node, "inNamespace", False):
                argv = ["mnexec", "-a", str(node.pid)] + argv
            procs.append((p.ifname, subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                                     stderr=subprocess.PIPE, text=True)))
        for ifname, proc in procs:
            _, err = proc.communicate(timeout=30)
            if proc.returncode != 0:
                raise RuntimeError(f"ethtool on {ifname} failed: {err.strip()}")

    def set_link_state(self, ifname: str, up: bool) -> None:
        """Administratively bring one end of a link down or up (its peer loses carrier)."""
        p = self._by_ifname[ifname]
        p.ipr.link("set", index=p.index, state="up" if up else "down")

    def queue_stats(self) -> list[dict]:
        """Leaf bfifo counters of every port: bytes/packets sent, drops, overlimits, backlog."""
        # One dump per namespace (a per-interface query dumps the whole namespace anyway).
        leaves: dict[tuple[int, int], object] = {}
        for ipr in {id(p.ipr): p.ipr for p in self.ports}.values():
            for q in ipr.get_qdiscs():
                if q["handle"] == LEAF_HANDLE:
                    leaves[(id(ipr), q["index"])] = q
        out = []
        for p in self.ports:
            q = leaves.get((id(p.ipr), p.index))
            if q is not None:
                basic = q.get_nested("TCA_STATS2", "TCA_STATS_BASIC") or {}
                queue = q.get_nested("TCA_STATS2", "TCA_STATS_QUEUE") or {}
                out.append({"node": p.node, "port": p.ifname,
                            "sent_bytes": basic.get("bytes", 0), "sent_packets": basic.get("packets", 0),
                            "drops": queue.get("drops", 0), "overlimits": queue.get("overlimits", 0),
                            "backlog_bytes": queue.get("backlog", 0), "qlen": queue.get("qlen", 0)})
        return out

    def close(self) -> None:
        for ipr in self._ns_iprs + ([self._root_ipr] if self._root_ipr else []):
            ipr.close()
        self._ns_iprs, self._root_ipr, self.ports = [], None, []
