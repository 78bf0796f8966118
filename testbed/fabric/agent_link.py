"""The channel between the controller's QoS app and the switch agent: typed, versioned messages,
one JSON object per line over an abstract Unix socket. The app sends the port policy
(PolicyMessage) and its changes (PolicyUpdate); the agent answers with what it applied, telemetry
summaries, watchdog firings, a deadlock, and when the traffic started. Both ends encode and decode
here (encode/decode); a message of another link_version, or of no known type, is refused."""
from __future__ import annotations

import dataclasses
import json
import socket
import time
from dataclasses import dataclass

from testbed.fabric.qos import IngressProfile, PortPolicy, QueueProfile
from testbed.jsonrecord import ClassKeyed

LINK_VERSION = 4   # 2: the classes' weights (policy and update), the paused leaves (telemetry); 3: pause counts and Open vSwitch's input backlog; 4: the ECN tuning's per-queue deltas


@dataclass(frozen=True)
class PolicyMessage:
    """controller -> agent: the whole policy."""
    policy: PortPolicy
    TYPE = "policy"

    def body(self) -> dict:
        return self.policy.to_json()

    @classmethod
    def from_body(cls, d: dict) -> "PolicyMessage":
        return cls(PortPolicy.from_json(d))


@dataclass(frozen=True)
class PolicyUpdate:
    """controller -> agent: the queues whose profile changed; the pause map, the ingress
    thresholds and the weights (the classes' and the ports' own) whole, when they changed (None:
    unchanged)."""
    queues: dict[str, QueueProfile]
    pause_map: dict[str, tuple[str, ...]] | None = None
    ingress: dict[str, IngressProfile] | None = None
    weights: tuple[int, ...] | None = None
    port_weights: dict[str, int] | None = None   # with weights, never alone
    TYPE = "update"

    def body(self) -> dict:
        d = {"queues": {k: q.to_json() for k, q in self.queues.items()}}
        if self.pause_map is not None:
            d["pause_map"] = {k: list(v) for k, v in self.pause_map.items()}
        if self.ingress is not None:
            d["ingress"] = {k: i.to_json() for k, i in self.ingress.items()}
        if self.weights is not None:
            d["weights"] = list(self.weights)
            d["port_weights"] = dict(self.port_weights or {})
        return d

    @classmethod
    def from_body(cls, d: dict) -> "PolicyUpdate":
        return cls(queues={k: QueueProfile.from_json(q) for k, q in d["queues"].items()},
                   pause_map={k: tuple(v) for k, v in d["pause_map"].items()} if "pause_map" in d else None,
                   ingress={k: IngressProfile.from_json(i) for k, i in d["ingress"].items()}
                   if "ingress" in d else None,
                   weights=tuple(d["weights"]) if "weights" in d else None,
                   port_weights=dict(d["port_weights"]) if "weights" in d else None)


@dataclass(frozen=True)
class _Report:
    """agent -> controller messages: flat records, logged by the app as they are."""

    def body(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_body(cls, d: dict):
        return cls(**d)


@dataclass(frozen=True)
class Applied(_Report):
    kind: str                 # policy or update
    queues: int
    ecn_queues: int
    pfc_accounting: str
    pfc_queues: int
    reweighted: int = 0       # leaves (ports' and host NICs' classes) whose weight changed
    TYPE = "applied"


@dataclass(frozen=True)
class TelemetrySummary(_Report):
    t_ns: int
    deepest: list             # [port, class, depth bytes] of the deepest queues
    marked: int
    dropped: int
    paused_ports: int
    pauses: int               # so far
    # every leaf paused now: [port, class, paused for ns, the queue keys holding it paused]
    paused: list = dataclasses.field(default_factory=list)
    # every leaf paused at least once: [port, class, pauses so far, ns paused by the pauses that ended]
    pause_counts: list = dataclasses.field(default_factory=list)
    # Open vSwitch's input backlog so far: [samples, samples with a port over the busy threshold]
    ovs_input: list = dataclasses.field(default_factory=list)
    # with ECN tuning on, each queue that took ECT frames since the last report, and each marking
    # queue whose port sent bytes since it (Agent.ecn_report):
    # [port, class, bucket bytes, [[bucket, ECT arrivals], ...], marks, the port's bytes sent]
    ecn_queues: list = dataclasses.field(default_factory=list)
    TYPE = "telemetry"


@dataclass(frozen=True)
class WatchdogFired(ClassKeyed, _Report):
    node: str
    port: str
    cls: int
    paused_ns: int
    causes: list
    TYPE = "watchdog"

    def body(self) -> dict:
        return self.to_json()

    @classmethod
    def from_body(cls, d: dict) -> "WatchdogFired":
        return cls.from_json(d)


@dataclass(frozen=True)
class DeadlockFound(_Report):
    t_ns: int
    stuck_ms: float
    cycle: list               # {port, class, depth_bytes} of each queue in it
    TYPE = "deadlock"


@dataclass(frozen=True)
class TrafficStarted(_Report):
    t_ns: int
    TYPE = "traffic_started"


MESSAGES = {m.TYPE: m for m in (PolicyMessage, PolicyUpdate, Applied, TelemetrySummary, WatchdogFired,
                                DeadlockFound, TrafficStarted)}


def encode(msg) -> bytes:
    return (json.dumps({"type": msg.TYPE, "link_version": LINK_VERSION, **msg.body()}) + "\n").encode()


def decode(d: dict):
    """A received JSON object as its message."""
    d = dict(d)
    kind, version = d.pop("type", None), d.pop("link_version", None)
    if version != LINK_VERSION or kind not in MESSAGES:
        raise ValueError(f"a link message of type {kind!r}, version {version!r}: this end reads version "
                         f"{LINK_VERSION} of {', '.join(MESSAGES)}")
    return MESSAGES[kind].from_body(d)


class ControllerLink:
    """The line-delimited JSON connection to the controller's QoS app. If the controller goes
    away the agent keeps the last policy, as a switch keeps its configuration."""

    def __init__(self, name: str, timeout_s: float = 30.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.sock.connect("\0" + name)
                break
            except (ConnectionRefusedError, FileNotFoundError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.buf = b""
        self.lost = False

    def receive(self, timeout_s: float | None) -> list:
        """Complete messages waiting, or, with a timeout, every message complete within it (at
        least the first: a policy for a k=8 fat-tree is over 160 KB and arrives in many reads)."""
        if self.lost:
            return []
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            try:
                if deadline is None:
                    # blocking mode, so that MSG_DONTWAIT alone decides (a socket timeout would
                    # make Python wait for readability first)
                    self.sock.settimeout(None)
                    chunk = self.sock.recv(1 << 20, socket.MSG_DONTWAIT)
                else:
                    self.sock.settimeout(max(0.0, deadline - time.monotonic()))
                    chunk = self.sock.recv(1 << 20)
                if not chunk:
                    self.lost = True
                self.buf += chunk
            except (BlockingIOError, socket.timeout):
                pass
            except OSError:
                self.lost = True
            if deadline is None or self.lost or b"\n" in self.buf or time.monotonic() >= deadline:
                break
        out = []
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            out.append(decode(json.loads(line)))
        return out

    def send(self, msg) -> None:
        if self.lost:
            return
        try:
            self.sock.sendall(encode(msg))
        except OSError:
            self.lost = True

    def close(self) -> None:
        self.sock.close()
