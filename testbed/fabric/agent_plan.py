"""The switch agent's plan: what the runner hands it (raw/agent_plan.json), as typed, versioned
records. Every switch queue it watches (QueueSpec, identified by a QueueId) and every (port, class)
leaf it may pause (LeafSpec), with the prebuilt tc parameters of each pause and resume; the policy
itself comes from the controller (testbed.fabric.agent_link)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from testbed.fabric.qos import queue_key
from testbed.jsonrecord import ClassKeyed

AGENT_PLAN_VERSION = 2   # 2: give_up_after_s
# The fidelity verdict's rule (testbed.analysis.fidelity): Open vSwitch may lag for an instant; a
# switch port with over INPUT_BUSY_BYTES waiting in its input socket (testbed.fabric.agent_io) in
# more than this share of the agent's samples means the fabric ran above its capacity.
MAX_INPUT_BUSY_FRACTION = 0.05
# and the machine: busier than this over the traffic (all cores, steal counted busy), it could not keep up
MAX_MACHINE_BUSY_FRACTION = 0.97


@dataclass(frozen=True)
class QueueId:
    """A queue of one port: its interface and class. Its key ("<interface>:<class>") names it in the
    controller's policy and in every record; its row (a BPF map index) is the data path's."""
    ifname: str
    cls: int

    @property
    def key(self) -> str:
        return queue_key(self.ifname, self.cls)

    @classmethod
    def parse(cls, key: str) -> "QueueId":
        ifname, _, c = key.rpartition(":")
        return cls(ifname, int(c))


class _OnPort(ClassKeyed):
    """A queue or leaf of one port: named by its QueueId; "class" in JSON."""

    @property
    def id(self) -> QueueId:
        return QueueId(self.ifname, self.cls)


@dataclass(frozen=True)
class QueueSpec(_OnPort):
    """A switch egress queue (and, under PFC's ingress rule, the (ingress port, class) of the same
    row): where it is and its BPF row."""
    index: int           # its row in the port program's maps
    node: str
    port: int
    ifname: str
    cls: int
    class_name: str


@dataclass(frozen=True)
class LeafSpec(_OnPort):
    """One (port, class) leaf of a port's queue tree (testbed.fabric.ports): what pausing and
    resuming it takes."""
    node: str
    port: int
    ifname: str
    cls: int
    ns_pid: int          # its namespace (0: the root one)
    ifindex: int
    handle: int          # the TBF leaf's handle and parent
    parent: int
    switch: bool
    queue: int           # its own egress queue's row; -1 for a host NIC
    pausable: bool
    running: dict        # the TBF's parameters at its rate, and paused
    paused: dict
    htb_classid: int     # its HTB class, with its own bucket, and the one-frame bucket of a resume
    htb_parent: int
    htb_running: dict
    htb_resume: dict
    bw_bps: float


@dataclass(frozen=True)
class AgentPlan:
    out_dir: str
    controller_socket: str   # the QoS app's abstract Unix socket
    map_fds: dict            # BPF map name -> the fd the agent inherits
    first_minor: int
    frame_bytes: int
    poll_hz: float
    telemetry_hz: float
    deadlock_detect_ms: float
    watchdog_ms: float
    queues: tuple[QueueSpec, ...]
    leaves: tuple[LeafSpec, ...]
    # A calibration rung's: the longest the agent may still run once the traffic has started (the
    # engine's time limit, and the runner's stop after it). Past MAX_INPUT_BUSY_FRACTION of the
    # samples that could take, the rung's verdict is settled and the agent says so (raw/behind.json),
    # for the runner to stop it. 0: never (any other run goes on to its verdict).
    give_up_after_s: float = 0.0
    # ECN tuning on: every telemetry summary carries the marking queues' deltas (Agent.ecn_report)
    ecn_reports: bool = False
    plan_version: int = AGENT_PLAN_VERSION

    @property
    def deadlock_after_ms(self) -> float:
        """How long a cycle of paused, non-empty queues goes without progress before it is a deadlock:
        deadlock_detect_ms, but never before twice the PFC watchdog (at any D), since a cycle the
        watchdog breaks is no deadlock yet."""
        return max(self.deadlock_detect_ms, 2 * self.watchdog_ms)

    def to_json(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["queues"] = [q.to_json() for q in self.queues]
        d["leaves"] = [leaf.to_json() for leaf in self.leaves]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "AgentPlan":
        if d.get("plan_version") != AGENT_PLAN_VERSION:
            raise ValueError(f"agent plan version {d.get('plan_version')!r}; this agent reads {AGENT_PLAN_VERSION}")
        return cls(**{**d, "queues": tuple(QueueSpec.from_json(q) for q in d["queues"]),
                      "leaves": tuple(LeafSpec.from_json(leaf) for leaf in d["leaves"])})
