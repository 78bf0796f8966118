"""The engine's plan: what the runner hands the traffic engine (raw/plan.json), as typed, versioned
records. The runner writes it with to_json, the engine reads it back with from_json (a plan of
another version is refused), and the analysis reads the same JSON: the hosts that send, their
queue pairs (flows) and every message with its dependencies, by name, never by position.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from testbed.jsonrecord import ClassKeyed

PLAN_VERSION = 3   # 2: a compute step's host (one stream each); 3: its tag

# The compute steps a worker's synchronisation share weighs (testbed.analysis.training): not a
# parameter server's aggregation ("aggregate"), not an optimizer's update ("update")
COMPUTE_TAG = "compute"


@dataclass(frozen=True)
class HostSpec:
    name: str
    pid: int             # a process in the host's network namespace (its sockets are opened there)
    ifname: str
    mac: str
    ip: str
    bw_bps: float        # the host link's rate


@dataclass(frozen=True)
class FlowSpec(ClassKeyed):
    """One queue pair: src's sender to dst's receiver, in one traffic class."""
    id: int
    src: str
    dst: str
    tag: str             # collective, compute, bulk, victim...
    channel: int         # which of the host pair's queue pairs of this kind
    dscp: int
    ect: bool
    cls: int             # the traffic class its DSCP maps to ("class" in JSON)
    delay_ns: int = 0    # its path's propagation and switch latency, dilated: the receiving NIC acts on
                         # each frame (data at dst, ACK/NAK/CNP back at src) that long after it arrived
    comm: str = ""       # the communicator whose messages it carries ("": the job's world)


@dataclass(frozen=True)
class MessageSpec:
    """A message (or, with flow -1, a compute step), released once every message in deps completed."""
    id: int
    flow: int            # its queue pair; -1: a compute step of duration_ns
    bytes: int
    deps: tuple[int, ...]
    duration_ns: int = 0
    host: str = ""       # a compute step's host: its steps run one at a time, in release order (one
                         # stream per GPU, as SimAI and a CUDA stream run them)
    tag: str = ""        # the workload's (collective, compute, aggregate, update, bulk...)

    @classmethod
    def from_json(cls, d: dict) -> "MessageSpec":
        return cls(**{**d, "deps": tuple(d["deps"])})


def weighs_in_sync_share(m: MessageSpec) -> bool:
    """A compute step the synchronisation share weighs: tagged COMPUTE_TAG."""
    return m.flow < 0 and m.tag == COMPUTE_TAG


def compute_streams(msgs: tuple[MessageSpec, ...]) -> list[str]:
    """The data plane's compute streams, in its order: one per host that computes (its steps run one
    at a time), by host name."""
    return sorted({m.host for m in msgs if m.flow < 0 and m.host})


@dataclass(frozen=True)
class EnginePlan:
    out_dir: str
    payload_bytes: int
    time_limit_s: float
    stall_timeout_s: float
    nic_lead_ns: int
    transport: dict      # testbed.scenario.TransportSpec, as its fields
    dcqcn: dict          # testbed.scenario.DcqcnSpec, as its fields
    hosts: tuple[HostSpec, ...]
    flows: tuple[FlowSpec, ...]
    messages: tuple[MessageSpec, ...]
    plan_version: int = PLAN_VERSION

    def to_json(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["hosts"] = [dataclasses.asdict(h) for h in self.hosts]
        d["flows"] = [f.to_json() for f in self.flows]
        d["messages"] = [{**dataclasses.asdict(m), "deps": list(m.deps)} for m in self.messages]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "EnginePlan":
        if d.get("plan_version") != PLAN_VERSION:
            raise ValueError(f"engine plan version {d.get('plan_version')!r}; this engine reads {PLAN_VERSION}")
        return cls(**{**d, "hosts": tuple(HostSpec(**h) for h in d["hosts"]),
                      "flows": tuple(FlowSpec.from_json(f) for f in d["flows"]),
                      "messages": tuple(MessageSpec.from_json(m) for m in d["messages"])})
