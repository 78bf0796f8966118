"""Port QoS as data: classes, their HTB parameters, per-queue marking and pause profiles, and the
pause map (whom a PFC XOFF pauses). Pure functions, no kernel state.

A queue is (node, port, class): one HTB leaf per class on every port of every node. Switch
ports mark ECN and trigger pauses; host NICs only classify and can be paused, like a RoCE NIC.

PFC has two rules (qos.pfc_accounting):
- ingress, as 802.1Qbb switches do it: a switch counts the bytes it holds per (ingress port,
  class), from the moment a frame enters until it leaves, and an XOFF there pauses that ingress
  port's peer in that class. Whom to pause does not depend on the routes, so it follows reroutes.
- egress, the older rule kept to compare: an egress queue's depth pauses every upstream that a
  route can feed into it (the pause map from the routes at start), whether or not it sent the
  bytes.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from testbed.fabric.routing import RouteTable, next_vc
from testbed.wire import HEADER_BYTES
from topologies.model import Fabric

if TYPE_CHECKING:   # the policy is made from a loaded scenario, whose loader checks it against this module
    from testbed.scenario.schema import ClassSpec, Scenario

# HTB needs a guaranteed rate per class; every class borrows all it sends beyond it from the
# port's class 1:1, so the port's one bucket bounds what all its classes send together. Not quite
# all: a class's own tokens grow while it borrows, and once they reach zero it sends one frame on
# its own rate, which its parent cannot hold back, and the port pays the frame back as a hole.
# HTB caps a class's token debt at a minute (its mbuffer), so the least often this can happen is
# once a minute a class: the guarantee is one frame a minute. With the 8 kbit/s it was, each class
# of every port sent a frame past the port's rate every 4.15 s (4154-byte frames), at any D:
# measured on two-jobs-fattree's a1_0-eth2 at D = 80000 (2026-12-06), one early frame every
# 4150-4160 ms, and when two classes' fell together near a window's end, the window drained 1.085
# of the port's rate and the run had no verdict (3 of 18 first runs of e2f286c).
HTB_DEBT_CAP_S = 60.0


@dataclass(frozen=True)
class HtbClass:
    minor: int
    prio: int
    rate_bps: float
    ceil_bps: float
    quantum_bytes: int


@dataclass(frozen=True)
class QueueProfile:
    limit_bytes: int
    ecn_on: bool
    kmin_bytes: int
    kmax_bytes: int
    pmax: float
    pfc_on: bool
    xoff_bytes: int
    xon_bytes: int
    # the depth the marking histogram's 32 buckets span; 0: twice Kmax (the whole buffer without ECN).
    # Under ECN tuning it is fixed by the tuning's bounds, so that a queue's buckets keep one width
    # however its Kmax moves, and reach past the queue budget the tuning reads from them.
    hist_span_bytes: int = 0

    @property
    def hist_bucket_bytes(self) -> int:
        """The width of the marking histogram's depth buckets (32 of them)."""
        span = self.hist_span_bytes or (2 * self.kmax_bytes if self.ecn_on else self.limit_bytes)
        return max(1, span // 32)

    def bpf_row(self) -> tuple:
        """The BPF map's struct profile, in testbed.fabric.bpfmaps.PROFILE's field order: the one place
        the profile is positional (what the data path's XOFF is: 0 unless this queue pauses)."""
        return (self.limit_bytes, self.kmin_bytes, self.kmax_bytes, round(self.pmax * 65536),
                int(self.ecn_on), self.xoff_bytes if self.pfc_on else 0, self.hist_bucket_bytes, 0)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "QueueProfile":
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d
                      or f.default is dataclasses.MISSING})


def class_of_dscp(sc: Scenario) -> list[int]:
    """Class index of each DSCP 0..63, then of non-IP frames (index 64: the first class, as a
    switch keeps its control traffic in the top priority). Under fifo every frame shares the
    default class."""
    classes = sc.classes
    default = next(i for i, c in enumerate(classes) if c.default)
    if sc.qos.scheduling == "fifo":
        return [default] * 65
    out = [default] * 64
    for i, c in enumerate(classes):
        for d in c.dscp:
            out[d] = i
    return out + [0]


@dataclass(frozen=True)
class PortLayout:
    """What every port's queueing tree looks like (testbed.fabric.ports builds it)."""
    scheduling: str
    weights: tuple[int, ...]
    buffers_bytes: tuple[int, ...]
    default_class: int
    frame_bytes: int
    pausable: bool = True  # TBF leaves (PFC can pause them); else byte FIFOs, which cost less

    def htb_classes(self, link_bps: float) -> list[HtbClass]:
        """Every class borrows its share from the port's class 1:1. Weighted classes share one
        priority and split what they borrow by deficit round robin, quantum = weight frames (ETS):
        with its weight's share as a rate of its own, a class that had idled sent its saved-up
        bucket on that rate while the others sent theirs, and HTB's parent cannot stop a child
        sending on its own rate: a port of two-jobs-fattree (8:1, 60 KiB buckets at 5 Mb/s)
        drained at 1.10 of its rate for whole 133 ms windows, then 0.75 paying it back."""
        guarantee = self.frame_bytes * 8 / HTB_DEBT_CAP_S
        # strict (and fifo, where only the default class carries traffic): a priority of its own each
        return [HtbClass(0x10 + i, 0 if self.scheduling == "weighted" else i, guarantee, link_bps,
                         quantum_bytes(self.scheduling, w, self.frame_bytes))
                for i, w in enumerate(self.weights)]


def quantum_bytes(scheduling: str, weight: int, frame_bytes: int) -> int:
    """An HTB class's DRR quantum: weight frames under weighted scheduling (ETS), else one frame
    (classes of different priorities never share a round). The ports at bring-up and the switch
    agent at a run-time weight change both take it from here."""
    return weight * frame_bytes if scheduling == "weighted" else frame_bytes


def port_layout(sc: Scenario) -> PortLayout:
    return PortLayout(scheduling=sc.qos.scheduling, weights=tuple(c.weight for c in sc.classes),
                      buffers_bytes=tuple(c.buffer_bytes or sc.fabric.queue_limit_bytes for c in sc.classes),
                      default_class=next(i for i, c in enumerate(sc.classes) if c.default),
                      frame_bytes=frame_bytes(sc), pausable=sc.qos.pfc)


def frame_bytes(sc: Scenario) -> int:
    return sc.workload.payload_bytes + HEADER_BYTES


# A switch port serialises at line rate: after an idle spell it sends no more back to back than a
# NIC does. The 60 KiB bucket the ports had let a backlog that followed an idle spell out at up to
# 15 frames above the rate: incast-pfc's bottleneck port failed one window of 93 as too fast in 3
# of 5 runs, and drove the incast 0.7% faster than line rate allows (bound / measured 0.988 against
# 0.982); with two frames, 3 of 3 kept up, no window fast or slow (2026-12-03, D = 63000).
SWITCH_BURST_FRAMES = 2


def switch_burst_bytes(sc: Scenario) -> int:
    """The HTB bucket of every switch port: fabric.htb_burst_bytes, or SWITCH_BURST_FRAMES frames."""
    return sc.fabric.htb_burst_bytes or SWITCH_BURST_FRAMES * frame_bytes(sc)


def queue_profile(sc: Scenario, c: ClassSpec, upstream_bps: list[float], reaction_s: float) -> QueueProfile:
    """One switch queue's profile. Unless the class sets them, PFC thresholds leave headroom for
    what the upstream senders (each at its own link rate) still deliver after the queue asks:
    - above XOFF: what each sends over the time the headroom covers (headroom_time_s), plus two
      frames a TBF pause lets through;
    - above XON: after a resume every upstream may first send one frame ahead of its rate (the
      switch agent resumes a leaf with a one-frame HTB bucket, so the bucket it saved up while
      paused does not leave at once) plus the same, so XON sits that far below the buffer's top.
    A buffer too small for that leaves XON at two frames (losses become possible: the summary
    shows any drop)."""
    buffer = c.buffer_bytes or sc.fabric.queue_limit_bytes
    frame = frame_bytes(sc)
    pfc = sc.qos.pfc and c.pfc
    in_flight = sum(int(bps / 8 * reaction_s) + 2 * frame for bps in upstream_bps)
    burst = frame * len(upstream_bps)
    headroom = c.headroom_bytes or in_flight
    xoff = c.xoff_bytes or max(2 * frame, buffer - headroom)
    xon = c.xon_bytes or max(2 * frame, min(xoff - 2 * frame, buffer - headroom - burst))
    ecn_on = sc.qos.ecn and c.ecn
    tuned = ecn_on and sc.controller.ecn_tuning == "adaptive"
    return QueueProfile(limit_bytes=buffer, ecn_on=ecn_on, kmin_bytes=c.ecn_kmin_bytes,
                        kmax_bytes=max(c.ecn_kmax_bytes, c.ecn_kmin_bytes), pmax=c.ecn_pmax, pfc_on=pfc,
                        xoff_bytes=xoff, xon_bytes=xon,
                        hist_span_bytes=ecn_tuning_span_bytes(sc) if tuned else 0)


# the depth a tuned queue's histogram spans, in queue budgets: the budget's bucket is the 8th of 32,
# fine enough to place a 99th percentile around it (a span from the highest Kmax the tuning may set,
# 2 MB by default, made the buckets 125 KB wide against a 200 KB budget: dcqcn-incast, 2026-12-06)
TUNING_SPAN_BUDGETS = 4


def ecn_tuning_span_bytes(sc: Scenario) -> int:
    """The depth a tuned queue's marking histogram spans: TUNING_SPAN_BUDGETS queue budgets (a
    deeper queue counts in the last bucket, which the tuning reads as over budget either way)."""
    return TUNING_SPAN_BUDGETS * sc.controller.ecn_tuning_queue_p99_bytes


def switch_port_slots(fabric: Fabric) -> dict[tuple[str, int], int]:
    """Each switch port's slot in the port program's maps (its queues are slot x MAX_CLASSES +
    class): switch link ends in the fabric's link order. The ports (testbed.fabric.ports) and the
    controller's ingress tags (controllers.rules) both number them here."""
    slots: dict[tuple[str, int], int] = {}
    for link in fabric.links:
        for node, port in ((link.a, link.a_port), (link.b, link.b_port)):
            if node in fabric.switch_by_name:
                slots[(node, port)] = len(slots)
    return slots


@dataclass(frozen=True)
class IngressProfile:
    """PFC thresholds of one (switch ingress port, class): bytes it holds in the switch."""
    xoff_bytes: int
    xon_bytes: int
    headroom_bytes: int

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "IngressProfile":
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)})


def queue_weight(key: str, cls: int, weights: tuple[int, ...], port_weights: dict[str, int]) -> int:
    """A queue's weight: its switch port's own where an app set one, else its class's. The policy
    and the switch agent's reweighting both read it here."""
    return port_weights.get(key, weights[cls])


@dataclass(frozen=True)
class PortPolicy:
    """Everything the switch agent runs the ports by, from the controller: the DSCP map, every
    switch queue's profile, the PFC rule, the lossless (ingress port, class) thresholds under the
    ingress rule, the pause map (lossless queue -> the upstream leaves it pauses) and the reaction
    the headroom is sized for. Queues are named by queue_key ("<interface>:<class index>")."""
    dscp_class: tuple[int, ...]
    pfc_accounting: str
    queues: dict[str, QueueProfile]
    ingress: dict[str, IngressProfile]
    pause_map: dict[str, tuple[str, ...]]
    reaction_allowance_us: float
    # the classes' weights on every port and host NIC (their HTB quanta: quantum_bytes), and a
    # switch port's own where an app set one ("<interface>:<class>" -> weight)
    scheduling: str = "strict"
    weights: tuple[int, ...] = ()
    port_weights: dict[str, int] = dataclasses.field(default_factory=dict)

    def weight_of(self, key: str, cls: int) -> int:
        return queue_weight(key, cls, self.weights, self.port_weights)

    def to_json(self) -> dict:
        return {"dscp_class": list(self.dscp_class), "pfc_accounting": self.pfc_accounting,
                "queues": {k: q.to_json() for k, q in self.queues.items()},
                "ingress": {k: i.to_json() for k, i in self.ingress.items()},
                "pause_map": {k: list(v) for k, v in self.pause_map.items()},
                "reaction_allowance_us": self.reaction_allowance_us,
                "scheduling": self.scheduling, "weights": list(self.weights), "port_weights": dict(self.port_weights)}

    @classmethod
    def from_json(cls, d: dict) -> "PortPolicy":
        return cls(dscp_class=tuple(d["dscp_class"]), pfc_accounting=d["pfc_accounting"],
                   queues={k: QueueProfile.from_json(q) for k, q in d["queues"].items()},
                   ingress={k: IngressProfile.from_json(i) for k, i in d["ingress"].items()},
                   pause_map={k: tuple(v) for k, v in d["pause_map"].items()},
                   reaction_allowance_us=d["reaction_allowance_us"], scheduling=d["scheduling"],
                   weights=tuple(d["weights"]), port_weights=dict(d["port_weights"]))


def ingress_headroom_bytes(sc: Scenario, c: ClassSpec, upstream_bps: float, reaction_s: float) -> int:
    """What a paused upstream may still deliver above XOFF: its rate over the time the headroom
    covers (headroom_time_s), the frame or two its paused TBF still lets through, and the one on the
    wire."""
    return c.headroom_bytes or int(upstream_bps / 8 * reaction_s) + 3 * frame_bytes(sc)


def ingress_profile(sc: Scenario, c: ClassSpec, port_bps: list[float], this_bps: float,
                    reaction_s: float) -> IngressProfile:
    """PFC thresholds of one ingress port of a switch whose ports run at ``port_bps``. Unless the
    class sets them, XOFF is low enough that the class's buffer on any egress port holds what all
    the other ports may deliver at once, each up to XOFF plus its headroom (so derived thresholds
    are lossless while the agent pauses within headroom_time_s); XON sits one headroom below
    XOFF (at least two frames), so a resume does not at once ask for the next pause."""
    buffer = c.buffer_bytes or sc.fabric.queue_limit_bytes
    frame = frame_bytes(sc)
    feeders = max(1, len(port_bps) - 1)
    headrooms = sorted(ingress_headroom_bytes(sc, c, bps, reaction_s) for bps in port_bps)
    worst = sum(headrooms[-feeders:])
    xoff = c.xoff_bytes or max(2 * frame, (buffer - worst) // feeders)
    mine = ingress_headroom_bytes(sc, c, this_bps, reaction_s)
    xon = c.xon_bytes or min(xoff - frame, max(frame, xoff - max(2 * frame, mine)))
    return IngressProfile(xoff_bytes=xoff, xon_bytes=xon, headroom_bytes=mine)


def emulator_reaction_s(sc: Scenario) -> float:
    """What the switch agent takes to act, wall clock: the poll interval, a wake-up, a netlink
    message. Measured from a row's first XOFF crossing on incast-pfc: p50 0.4 ms, p99 0.9-3.8 ms,
    and the longest over 4 quiet runs 1.1-4.8 ms, as the machine now and then keeps the agent from
    running for 3-5 ms even at a real-time priority."""
    return 1.0 / sc.qos.agent_poll_hz + 0.0015


def switch_headroom_time_s(sc: Scenario) -> float:
    """How long a switch's PFC headroom covers its upstream sending at its rate, as the scenario
    gives it: the link's round trip (the PAUSE travels up while what was sent travels down) and the
    response (qos.pfc_response_ns): 2 x fabric.link_delay_ns + qos.pfc_response_ns (x D in an
    emulated scenario)."""
    return (2 * sc.fabric.link_delay_ns + sc.qos.pfc_response_ns) / 1e9


def headroom_time_s(sc: Scenario) -> float:
    """How long after a lossless queue passes XOFF its upstream may go on sending at its rate: what
    derived PFC headroom covers, and so the switch agent's allowance to pause. sc is the emulated
    scenario, where switch_headroom_time_s is x D, so the headroom in bytes is the hardware's at any
    D, and the agent has D times the hardware's time to act: its own cost shrinks by D next to the
    fabric's. Never less than emulator_reaction_s: at a small D (version 1 files run at D = 1) the
    agent could not act within the hardware's time, and derived thresholds would not be lossless
    here. A run whose pause came later than this and whose row outgrew its headroom says it did not
    keep up (testbed.analysis.qos.headroom_overruns)."""
    return max(switch_headroom_time_s(sc), emulator_reaction_s(sc))


def queue_key(ifname: str, cls: int) -> str:
    return f"{ifname}:{cls}"


def policy(sc: Scenario, fabric: Fabric, table: RouteTable) -> PortPolicy:
    """The port policy a controller sends the switch agent: the DSCP map, every switch queue's
    profile (buffer, ECN, and XOFF/XON under the egress rule), the PFC rule, and per lossless
    queue the upstream queues to pause. Under the ingress rule the lossless queues are (ingress
    port, class) with their thresholds in "ingress", each pausing its port's peer. Queues are
    named "<interface>:<class index>"."""
    rate_bps = {}
    for link in fabric.links:
        bps = link.bw_mbps * 1e6
        rate_bps[(link.a, link.a_port if link.a in fabric.switch_by_name else 0)] = bps
        rate_bps[(link.b, link.b_port if link.b in fabric.switch_by_name else 0)] = bps
    reaction_s = headroom_time_s(sc)
    rule = sc.qos.pfc_accounting
    feeds = pause_map(fabric, table, sc) if rule == "egress" else {}
    queues, pauses, ingress = {}, {}, {}
    for sw, ports in fabric.ports.items():
        port_bps = [rate_bps[(sw, p)] for p in ports]
        for port, (peer, peer_port, _) in ports.items():
            for c, spec in enumerate(sc.classes):
                ups = sorted(feeds.get((sw, port, c), ()))
                prof = queue_profile(sc, spec, [rate_bps[(u[0], u[1])] for u in ups], reaction_s)
                key = queue_key(fabric.intf_name(sw, port), c)
                if rule == "ingress":
                    prof = dataclasses.replace(prof, pfc_on=False, xon_bytes=0)
                    if sc.qos.pfc and spec.pfc:
                        ingress[key] = ingress_profile(sc, spec, port_bps, rate_bps[(sw, port)], reaction_s)
                        up = peer_port if peer in fabric.switch_by_name else 0
                        pauses[key] = (queue_key(fabric.intf_name(peer, up), c),)
                queues[key] = prof
                if ups and prof.pfc_on:
                    pauses[key] = tuple(queue_key(fabric.intf_name(u[0], u[1]), u[2]) for u in ups)
    return PortPolicy(dscp_class=tuple(class_of_dscp(sc)), pfc_accounting=rule, queues=queues, ingress=ingress,
                      pause_map=pauses, reaction_allowance_us=reaction_s * 1e6, scheduling=sc.qos.scheduling,
                      weights=tuple(c.weight for c in sc.classes))


# A port's own settings, over its class's ([[classes]] field -> what it sets in the queue's profile)
PORT_QUEUE_FIELDS = {"ecn": "ecn_on", "ecn_kmin_bytes": "kmin_bytes", "ecn_kmax_bytes": "kmax_bytes",
                     "ecn_pmax": "pmax", "buffer_bytes": "limit_bytes"}
PORT_PFC_FIELDS = ("xoff_bytes", "xon_bytes", "headroom_bytes")


def with_port_settings(pol: PortPolicy, settings: dict[str, dict]) -> PortPolicy:
    """pol with queues' own settings in place of their class's: queue key -> {field: value}, the
    fields those of [[classes]] a single port can have (PORT_QUEUE_FIELDS; the PFC thresholds of a
    lossless queue: under the ingress rule its (ingress port, class) XOFF, XON and headroom, under
    the egress rule its XOFF and XON), its buffer and its weight. Whether a class is lossless at all
    (the pause map) is the class's. Raises ValueError naming the queue and field it cannot set."""
    queues, ingress, weights = dict(pol.queues), dict(pol.ingress), dict(pol.port_weights)
    for key, fields in settings.items():
        if key not in queues:
            raise ValueError(f"no switch queue {key}")
        q = dataclasses.replace(queues[key], **{PORT_QUEUE_FIELDS[f]: v for f, v in fields.items()
                                                if f in PORT_QUEUE_FIELDS})
        pfc = {f: v for f, v in fields.items() if f in PORT_PFC_FIELDS}
        unknown = set(fields) - set(PORT_QUEUE_FIELDS) - set(PORT_PFC_FIELDS) - {"weight"}
        if unknown:
            raise ValueError(f"{key}: {', '.join(sorted(unknown))} cannot be set per port (only "
                             f"{', '.join([*PORT_QUEUE_FIELDS, *PORT_PFC_FIELDS, 'weight'])}; the rest for a "
                             f"whole class)")
        if "weight" in fields:
            weights[key] = fields["weight"]
        if pfc and pol.pfc_accounting == "ingress":
            if key not in ingress:
                raise ValueError(f"{key}: not a lossless (ingress port, class): its class pauses nothing here")
            ingress[key] = dataclasses.replace(ingress[key], **pfc)
            i = ingress[key]
            if not 0 < i.xon_bytes <= i.xoff_bytes:
                raise ValueError(f"{key}: XON {i.xon_bytes} B must be above 0 and at most XOFF {i.xoff_bytes} B")
        elif pfc:
            if "headroom_bytes" in pfc:
                raise ValueError(f"{key}: under the egress rule a queue's headroom is its buffer above XOFF; set "
                                 "xoff_bytes")
            if not q.pfc_on:
                raise ValueError(f"{key}: not a lossless queue: its class pauses nothing here")
            q = dataclasses.replace(q, **pfc)
            if not 0 < q.xon_bytes <= q.xoff_bytes <= q.limit_bytes:
                raise ValueError(f"{key}: needs 0 < XON ({q.xon_bytes} B) <= XOFF ({q.xoff_bytes} B) <= its buffer "
                                 f"({q.limit_bytes} B)")
        queues[key] = q
    # every queue, since a class-wide change (a smaller buffer under a class's own XOFF) reaches all
    for key, q in queues.items():
        if q.pfc_on and not q.xoff_bytes <= q.limit_bytes:
            raise ValueError(f"{key}: XOFF ({q.xoff_bytes} B) above its buffer ({q.limit_bytes} B): a lossless "
                             f"queue pauses before it is full (set xoff_bytes too)")
        if q.kmin_bytes > q.kmax_bytes:
            raise ValueError(f"{key}: ECN Kmin {q.kmin_bytes} B above Kmax {q.kmax_bytes} B")
    return dataclasses.replace(pol, queues=queues, ingress=ingress, port_weights=weights)


# ---- the pause map -----------------------------------------------------------------------

Queue = tuple[str, int, int]  # (node, port, class index)


def pause_map(fabric: Fabric, table: RouteTable, sc: Scenario) -> dict[Queue, set[Queue]]:
    """For every switch queue, the upstream queues (neighbour switch ports or host NICs) whose
    traffic enters it under the route table: the senders a PFC XOFF on it must pause. A packet's
    class can change on the way (dateline virtual channels rewrite the workload's DSCP), so the
    upstream is paused in the class the packet had when it left it."""
    cls = class_of_dscp(sc)
    dateline = sc.controller.dateline
    vc_dscp = (sc.workload.dscp, sc.controller.vc1_dscp)
    feeds: dict[Queue, set[Queue]] = {}
    classes = range(len(sc.classes))

    def class_pairs(vc_in: int, vc_out: int):
        """(class upstream, class here) for every class, given the workload's channels."""
        if not dateline:
            return [(c, c) for c in classes]
        moved = {cls[vc_dscp[0]], cls[vc_dscp[1]]}
        pairs = [(c, c) for c in classes if c not in moved]
        pairs.append((cls[vc_dscp[vc_in]], cls[vc_dscp[vc_out]]))
        return pairs

    for dst in fabric.hosts:
        seen: set[tuple[str, int | None, int]] = set()

        def walk(switch: str, in_port: int | None, vc: int, upstream: tuple[str, int]) -> None:
            if (switch, in_port, vc) in seen:
                return
            seen.add((switch, in_port, vc))
            for port in table[switch][dst.name]:
                nvc = next_vc(fabric, switch, in_port, port, vc, dateline)
                for c_up, c_here in class_pairs(vc, nvc):
                    feeds.setdefault((switch, port, c_here), set()).add((upstream[0], upstream[1], c_up))
                peer, peer_port, _ = fabric.ports[switch][port]
                if peer != dst.name:
                    walk(peer, peer_port, nvc, (switch, port))

        for src in fabric.hosts:
            if src.name != dst.name:
                walk(src.switch, src.switch_port, 0, (src.name, 0))
    return feeds


def find_cycle(waits: dict[Queue, set[Queue]]) -> list[Queue] | None:
    """A cycle in a wait-for graph (queue -> queues it waits on), or None."""
    color: dict[Queue, int] = {}
    stack: list[Queue] = []

    def visit(q: Queue) -> list[Queue] | None:
        color[q] = 1
        stack.append(q)
        for nxt in waits.get(q, ()):
            if color.get(nxt) == 1:
                return stack[stack.index(nxt):]
            if nxt not in color:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        color[q] = 2
        return None

    for q in list(waits):
        if q not in color:
            found = visit(q)
            if found:
                return found
    return None
