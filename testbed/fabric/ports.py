"""The one owner of link-level kernel state: MTU, offloads, queueing disciplines and the
port BPF programs.

Every link end (switch port or host NIC) gets the same egress tree, one leaf per priority class:

    root htb 1:  default 1:<default class>             <- cls_bpf filter classifies by DSCP
      class 1:1   rate = the link's rate, burst = cburst = htb_burst_bytes
        class 1:1c  prio / rate / ceil from the scheduling (strict, weighted or fifo)
          qdisc 2c: tbf  <- the class's buffer; its rate is what a PFC pause changes
                         (a bfifo when the scenario has no PFC: cheaper, nothing to pause)

On switch ports the filter is port_enqueue (tail drop at the class buffer, ECN marking, queue
accounting); on host NICs host_enqueue (classification only). Every link end also runs a program
at clsact ingress that closes the accounting of the queue at the other end: port_dequeue on
switch ports, host_dequeue on host NICs, which also ends RoCE frames there (the NIC consumes them;
the host's IP stack never sees them).
Nobody else creates or deletes qdiscs; the switch agent only changes a leaf's TBF rate
(pause/resume) and, around a resume, its HTB class's bucket. Host NICs live in their host's namespace; a netlink socket opened there is
kept for the run.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.ethtool.ioctl import IoctlEthtool
from pyroute2.netlink.rtnl.tcmsg import plugins as _tc_plugins
from pyroute2.netlink.rtnl.tcmsg import sched_pfifo

from testbed.fabric.agent_plan import LeafSpec
from testbed.fabric.bpfmaps import MAX_CLASSES, MappedArrays, PortQosObject
from testbed.fabric.netns import netns_of
from testbed.fabric.qos import PortLayout, switch_port_slots
from testbed.fabric.steering import run_helper
from testbed.scenario.schema import MAX_BUFFER_BYTES

# bfifo takes the same option struct as pfifo (struct tc_fifo_qopt { u32 limit; }), in bytes;
# pyroute2 0.9 only registers the pfifo name.
_tc_plugins.setdefault("bfifo", sched_pfifo)

ROOT_HANDLE = 0x10000
CLASS_HANDLE = 0x10001
CLSACT_INGRESS = 0xFFFFFFF2
def offload_feature(name: str) -> bool:
    """The features behind ethtool's tx, rx, tso, gso and gro switches (checksum offloads and the
    segmentation offloads that need them, generic segmentation and receive offload)."""
    return (name.startswith(("tx-checksum-", "tx-tcp", "tx-udp-segmentation")) and
            (name.startswith("tx-checksum-") or name.endswith("segmentation"))) or \
        name in ("rx-checksum", "tx-generic-segmentation", "rx-gro")
# The TBF leaf never shapes by itself: HTB sets the pace, the TBF is there to be paused.
TBF_RATE_FACTOR = 2.0
TBF_MAX_RATE_BPS = 32e9
PAUSED_RATE_BPS = 8000


def leaf_minor(cls: int) -> int:
    return 0x10 + cls


def leaf_handle(cls: int) -> int:
    return (0x20 + cls) << 16


@dataclass(frozen=True)
class PortConfig:
    """What every port shares; each port's rate is its link's (build_fabric makes it concrete)."""
    mtu_bytes: int
    queue_limit_bytes: int
    htb_burst_bytes: int      # switch ports
    nic_burst_bytes: int      # host NICs: a NIC releases at most this back to back after idling
    offloads_off: bool
    layout: PortLayout


# What a link's veth ends count: frames moved, and frames the kernel refused to move
LINK_COUNTERS = ("rx_packets", "tx_packets", "rx_dropped", "tx_dropped")


@dataclass
class Port:
    node: str
    port: int          # the switch port number; 0 for a host NIC
    ifname: str
    ipr: IPRoute
    index: int
    bw_mbps: float
    is_switch: bool
    ns_pid: int = 0    # the host's namespace (0: the root namespace)
    slot: int = -1     # switch ports: index into the BPF queue array, in units of MAX_CLASSES


class PortManager:
    """Configures every port of a started Mininet net and reads their queue counters."""

    def __init__(self, config: PortConfig):
        self.config = config
        self.ports: list[Port] = []
        self.bpf: PortQosObject | None = None
        self._corrupt: MappedArrays | None = None   # the corrupt fault's map: this owner writes its rates
        self._root_ipr: IPRoute | None = None
        self._ns_iprs: list[IPRoute] = []
        self._by_ifname: dict[str, Port] = {}
        self.steering = "not set"

    def attach(self, net, fabric) -> None:
        """Open netlink sockets for every interface of the fabric (hosts' inside their namespace)."""
        self._root_ipr = IPRoute()
        host_ipr: dict[str, IPRoute] = {}
        host_pid: dict[str, int] = {}
        for h in fabric.hosts:
            host_pid[h.name] = net.get(h.name).pid
            with netns_of(host_pid[h.name]):
                host_ipr[h.name] = IPRoute()
            self._ns_iprs.append(host_ipr[h.name])
        slots = switch_port_slots(fabric)
        for link in fabric.links:
            for node, port in ((link.a, link.a_port), (link.b, link.b_port)):
                ifname = fabric.intf_name(node, port)
                is_switch = node not in host_ipr
                ipr = self._root_ipr if is_switch else host_ipr[node]
                found = ipr.link_lookup(ifname=ifname)
                if not found:
                    raise RuntimeError(f"interface {ifname} of {node} does not exist")
                p = Port(node, port if is_switch else 0, ifname, ipr, found[0],
                         link.bw_mbps, is_switch, host_pid.get(node, 0))
                if is_switch:
                    p.slot = slots[(node, port)]
                self.ports.append(p)
        self._by_ifname = {p.ifname: p for p in self.ports}
        self.bpf = PortQosObject()
        self._corrupt = MappedArrays({"corrupt": self.bpf.map_fd["corrupt"]}, names=("corrupt",))
        for h in fabric.hosts:
            self.bpf.set_host_mac(h.ip, h.mac)

    def configure(self) -> None:
        c = self.config
        for p in self.ports:
            p.ipr.link("set", index=p.index, mtu=c.mtu_bytes)
        if c.offloads_off:
            self._offloads_off()
        layout = c.layout
        for p in self.ports:
            link_bps = p.bw_mbps * 1e6
            burst = c.htb_burst_bytes if p.is_switch else c.nic_burst_bytes
            p.ipr.tc("add", "htb", p.index, ROOT_HANDLE, default=leaf_minor(layout.default_class))
            p.ipr.tc("add-class", "htb", p.index, CLASS_HANDLE, parent=ROOT_HANDLE, rate=f"{link_bps:.0f}bit",
                     burst=burst, cburst=burst, mtu=c.mtu_bytes + 14)
            for cls, hc in enumerate(layout.htb_classes(link_bps)):
                p.ipr.tc("add-class", "htb", p.index, ROOT_HANDLE | hc.minor, parent=CLASS_HANDLE,
                         **self.htb_class(p, cls))
                if layout.pausable:
                    p.ipr.tc("add", "tbf", p.index, leaf_handle(cls), parent=ROOT_HANDLE | hc.minor,
                             **self.tbf_running(p, cls))
                else:
                    p.ipr.tc("add", "bfifo", p.index, leaf_handle(cls), parent=ROOT_HANDLE | hc.minor,
                             limit=self.tbf_running(p, cls)["limit"])
            prog = "port_enqueue" if p.is_switch else "host_enqueue"
            # classid 1:0 gives the program's 16-bit class minor its major (testbed/bpf)
            p.ipr.tc("add-filter", "bpf", p.index, ":1", fd=self.bpf.prog_fd[prog], name=prog,
                     parent=ROOT_HANDLE, classid=ROOT_HANDLE, direct_action=True)
            p.ipr.tc("add", "clsact", p.index)
            ingress = "port_dequeue" if p.is_switch else "host_dequeue"
            p.ipr.tc("add-filter", "bpf", p.index, ":1", fd=self.bpf.prog_fd[ingress],
                     name=ingress, parent=CLSACT_INGRESS, direct_action=True)
            if p.is_switch:
                self.bpf.set_port_slot(p.index, p.slot)
        self.steering = self._steer()

    def _steer(self) -> str:
        """Per-flow receive steering on every link end (testbed.fabric.steering): what was used."""
        done = run_helper([(p.ns_pid, p.ifname) for p in self.ports])
        if not done["set"]:
            return f"none ({done['why']}): a flow's frames can be reordered between CPUs' backlogs"
        return (f"rps on {done['set']} veth receive queues (every CPU, by flow hash): a flow's frames keep "
                f"their order")

    def tbf_running(self, p: Port, cls: int) -> dict:
        """The TBF leaf's parameters when not paused. On switch ports port_enqueue enforces the
        class buffer exactly, whatever the controller sets it to at run time, so the leaf holds
        the most any buffer may be, plus a margin, and never drops; a host NIC's, its class buffer."""
        c, layout = self.config, self.config.layout
        limit = MAX_BUFFER_BYTES + 4 * (c.mtu_bytes + 14) if p.is_switch else layout.buffers_bytes[cls]
        return {"rate": f"{min(p.bw_mbps * 1e6 * TBF_RATE_FACTOR, TBF_MAX_RATE_BPS):.0f}bit",
                "burst": max(c.htb_burst_bytes, c.mtu_bytes + 14), "limit": limit}

    def tbf_paused(self, p: Port, cls: int) -> dict:
        """Paused: a rate of ~nothing. TBF drops a frame larger than its burst, and its bucket is
        full after a change, so the frame or two the burst holds may still leave, as frames in
        flight do on a real PFC link. 8 kbit/s, not less: at 1 kbit/s the kernel's rate tables
        round the burst below a 4 KB frame and the paused leaf drops (measured)."""
        running = self.tbf_running(p, cls)
        return {"rate": f"{PAUSED_RATE_BPS}bit", "burst": self.config.mtu_bytes + 14, "limit": running["limit"]}

    def htb_class(self, p: Port, cls: int, burst: int | None = None) -> dict:
        """The HTB class of a leaf (its rate, ceil, priority and buckets), as configure() sets it;
        burst: another bucket for its ceil (cburst).

        The bucket of the leaf's own rate holds one frame. HTB serves a class from its own bucket
        ahead of every class that borrows, and its parent cannot hold it back: with the port's
        60 KiB there, each class began the run able to send 60 KiB past the port's rate, which the
        port then paid back as a hole (dateline-torus: 11 ms without a frame on s0_0-eth2, 50 ms
        into every run, its queues full). All but that frame is borrowed from class 1:1, whose
        bucket is the port's burst."""
        c = self.config
        hc = c.layout.htb_classes(p.bw_mbps * 1e6)[cls]
        b = burst or (c.htb_burst_bytes if p.is_switch else c.nic_burst_bytes)
        return {"rate": f"{hc.rate_bps:.0f}bit", "ceil": f"{hc.ceil_bps:.0f}bit", "prio": hc.prio,
                "quantum": hc.quantum_bytes, "burst": min(b, c.layout.frame_bytes), "cburst": b,
                "mtu": c.mtu_bytes + 14}

    def leaves(self) -> tuple[LeafSpec, ...]:
        """Every (port, class) leaf, as the switch agent needs it to pause and resume it. A paused
        class's HTB bucket fills while it waits (HTB sees an idle class), so a resume would let
        the whole bucket out at once, ahead of the link's rate: the agent resumes a leaf with a
        one-frame bucket ("htb_resume"), and gives it its own back ("htb_running") once the
        first frames have left, by when the saved-up credit is gone."""
        out = []
        frame = self.config.layout.frame_bytes
        for p in self.ports:
            for cls in range(len(self.config.layout.buffers_bytes)):
                out.append(LeafSpec(node=p.node, port=p.port, ifname=p.ifname, cls=cls, ns_pid=p.ns_pid,
                                    ifindex=p.index, handle=leaf_handle(cls), parent=ROOT_HANDLE | leaf_minor(cls),
                                    switch=p.is_switch, queue=p.slot * MAX_CLASSES + cls if p.is_switch else -1,
                                    pausable=self.config.layout.pausable,
                                    running=self.tbf_running(p, cls), paused=self.tbf_paused(p, cls),
                                    htb_classid=ROOT_HANDLE | leaf_minor(cls), htb_parent=CLASS_HANDLE,
                                    htb_running=self.htb_class(p, cls), htb_resume=self.htb_class(p, cls, burst=frame),
                                    bw_bps=p.bw_mbps * 1e6))
        return tuple(out)

    def _offloads_off(self) -> None:
        """What `ethtool -K IF tx off rx off tso off gso off gro off` turns off, by the ethtool ioctl
        (pyroute2), from one socket per namespace: 0.05 ms per interface against 1.4 ms for an
        ethtool process (measured), which a k=8 fat-tree's 768 link ends feel."""
        by_ns: dict[int, list[Port]] = {}
        for p in self.ports:
            by_ns.setdefault(p.ns_pid, []).append(p)
        for pid, ports in by_ns.items():
            if pid:
                with netns_of(pid):
                    tool = IoctlEthtool()
            else:
                tool = IoctlEthtool()
            try:
                for p in ports:
                    tool.change_ifname(p.ifname)
                    features = tool.get_features()
                    for name in features.keys():
                        if offload_feature(name) and features.is_available(name):
                            features.set_value(name, False)
                    tool.set_features(features)
            except OSError as e:
                raise RuntimeError(f"turning offloads off on {p.ifname} failed: {e}") from e
            finally:
                tool.close()

    def set_link_state(self, ifname: str, up: bool) -> None:
        """Administratively bring one end of a link down or up (its peer loses carrier)."""
        p = self._by_ifname[ifname]
        p.ipr.link("set", index=p.index, state="up" if up else "down")

    def set_corruption(self, ifname: str, frame_error_rate: float) -> None:
        """Bit errors on the RoCE data frames a switch port sends, this share of them hit
        (port_qos.bpf.c, corrupt_maybe); 0 ends them."""
        p = self._by_ifname[ifname]
        if not p.is_switch:
            raise ValueError(f"{ifname} is a host NIC's: bit errors are put on the frames switch ports send")
        self._corrupt.corrupt[p.slot]["threshold"] = min(round(frame_error_rate * 2**32), 2**32 - 1)

    def corrupted_frames(self) -> dict[str, int]:
        """The frames each switch port's bit errors hit so far, ports they never hit left out."""
        hit = self._corrupt.corrupt["frames"]
        return {p.ifname: int(hit[p.slot]) for p in self.ports if p.is_switch and hit[p.slot]}

    def queue_stats(self) -> list[dict]:
        """Leaf counters of every port and class: bytes/packets sent, drops, overlimits, backlog."""
        # One dump per namespace (a per-interface query dumps the whole namespace anyway).
        leaves: dict[tuple[int, int, int], object] = {}
        handles = {leaf_handle(c): c for c in range(len(self.config.layout.buffers_bytes))}
        for ipr in {id(p.ipr): p.ipr for p in self.ports}.values():
            for q in ipr.get_qdiscs():
                if q["handle"] in handles:
                    leaves[(id(ipr), q["index"], handles[q["handle"]])] = q
        out = []
        for p in self.ports:
            for cls in handles.values():
                q = leaves.get((id(p.ipr), p.index, cls))
                if q is None:
                    continue
                basic = q.get_nested("TCA_STATS2", "TCA_STATS_BASIC") or {}
                queue = q.get_nested("TCA_STATS2", "TCA_STATS_QUEUE") or {}
                out.append({"node": p.node, "port": p.ifname, "class": cls,
                            "sent_bytes": basic.get("bytes", 0), "sent_packets": basic.get("packets", 0),
                            "drops": queue.get("drops", 0), "overlimits": queue.get("overlimits", 0),
                            "backlog_bytes": queue.get("backlog", 0), "qlen": queue.get("qlen", 0)})
        return out

    def link_counters(self) -> dict[str, dict[str, int]]:
        """Every port's kernel interface counters, read now (one link dump per namespace).
        Open vSwitch's Interface statistics column is refreshed only every few seconds, so it
        cannot say what a port moved during a traffic phase."""
        stats: dict[tuple[int, int], dict] = {}
        for ipr in {id(p.ipr): p.ipr for p in self.ports}.values():
            for link in ipr.get_links():
                s64 = link.get_attr("IFLA_STATS64") or {}
                stats[(id(ipr), link["index"])] = {k: int(s64.get(k, 0)) for k in LINK_COUNTERS}
        return {p.ifname: stats[(id(p.ipr), p.index)] for p in self.ports if (id(p.ipr), p.index) in stats}

    def close(self) -> None:
        if self._corrupt is not None:
            self._corrupt.close()
            self._corrupt = None
        if self.bpf is not None:
            self.bpf.close()
            self.bpf = None
        for ipr in self._ns_iprs + ([self._root_ipr] if self._root_ipr else []):
            ipr.close()
        self._ns_iprs, self._root_ipr, self.ports = [], None, []
