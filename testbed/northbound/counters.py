"""Every switch port's counters during a run, read where the switches keep them: the port
program's maps (testbed/fabric/bpf/port_qos.bpf.c), mapped read-only into the API's process the
way the switch agent maps them (no syscall a read), and the agent's pause counts from its latest
telemetry summary (testbed.fabric.agent_link.TelemetrySummary).

Counters are cumulative; rates are over the last second of wall clock (the samples the API took in
it: one at most every SAMPLE_MIN_S, only while someone asks). A rate of bytes is given in hardware
time too (x the run's dilation factor): a link carrying 6.4 Mb/s emulated at D = 12500 carries 80
Gb/s of the fabric it stands for, and its utilisation is the same 80% in both."""
from __future__ import annotations

import collections
import time
from dataclasses import dataclass

import numpy as np

from testbed.fabric.agent_plan import AgentPlan
from testbed.fabric.qos import switch_port_slots
from topologies.model import Fabric

RATE_WINDOW_S = 1.0
SAMPLE_MIN_S = 0.05
FIELDS = ("depth_bytes", "deq_bytes", "deq_pkts", "drop_pkts", "ect_pkts", "mark_pkts")


def link_label(a: str, b: str) -> str:
    """A link as operators read it, by its ends: this end first."""
    return f"{a}\u2192{b}"


@dataclass(frozen=True)
class Row:
    """One switch egress queue: (port, class) and where its counters sit in the maps."""
    switch: str
    port: str           # interface name
    ofport: int
    peer: str           # the node at the link's other end
    peer_port: str      # its interface
    cls: int
    class_name: str
    queue: int          # row in the queues map
    slot: int           # the port's slot (the corrupt map's row)
    bw_mbps: float      # the link's emulated rate


def port_rows(plan: AgentPlan, fabric: Fabric) -> list[Row]:
    """The switch queues of the agent's plan, each with its link's far end and rate."""
    slots = switch_port_slots(fabric)
    rows = []
    for q in plan.queues:
        peer, peer_port, link = fabric.ports[q.node][q.port]
        peer_if = f"{peer}-eth{peer_port}" if peer in fabric.switch_by_name else fabric.host_by_name[peer].intf
        rows.append(Row(switch=q.node, port=q.ifname, ofport=q.port, peer=peer, peer_port=peer_if, cls=q.cls,
                        class_name=q.class_name, queue=q.index, slot=slots[(q.node, q.port)],
                        bw_mbps=float(link.bw_mbps or 0.0)))
    return rows


class PortCounters:
    """Samples of every row's counters, and the per-port records made from them."""

    def __init__(self, rows: list[Row], queues: np.ndarray, corrupt: np.ndarray, dilation: float):
        self.rows = rows
        self.index = np.array([r.queue for r in rows], dtype=np.int64)
        self.slots = np.array([r.slot for r in rows], dtype=np.int64)
        self.queues, self.corrupt = queues, corrupt
        self.dilation = dilation
        self.samples: collections.deque = collections.deque()

    def sample(self) -> dict:
        """The counters now, kept for the rates (a sample younger than SAMPLE_MIN_S is reused)."""
        now = time.monotonic_ns()
        if self.samples and now - self.samples[-1]["t_ns"] < SAMPLE_MIN_S * 1e9:
            return self.samples[-1]
        q = self.queues[self.index]
        s = {"t_ns": now, **{f: q[f].astype(np.int64) for f in FIELDS},
             "crc": self.corrupt["frames"][self.slots].astype(np.int64)}
        self.samples.append(s)
        while len(self.samples) > 2 and now - self.samples[1]["t_ns"] >= RATE_WINDOW_S * 1e9:
            self.samples.popleft()
        return s

    def records(self, telemetry: dict | None) -> list[dict]:
        """One record a switch port: its link, counters and rates, and one per class under it.
        telemetry: the agent's latest summary (pauses), or None before the first."""
        cur = self.sample()
        old = self.samples[0]
        dt_s = (cur["t_ns"] - old["t_ns"]) / 1e9
        # within the window: the deepest each queue was in any sample
        peak = np.max(np.stack([s["depth_bytes"] for s in self.samples]), axis=0)
        received, ended_ns = {}, {}
        for port, cls, n, ns in (telemetry or {}).get("pause_counts", ()):
            received[(port, cls)], ended_ns[(port, cls)] = n, ns
        paused_now = {(p[0], p[1]): p[2] for p in (telemetry or {}).get("paused", ())}
        ports: dict[str, dict] = {}
        for i, r in enumerate(self.rows):
            rate_bps = (cur["deq_bytes"][i] - old["deq_bytes"][i]) * 8 / dt_s if dt_s > 0 else None
            key, peer_key = (r.port, r.cls), (r.peer_port, r.cls)
            paused_ns = ended_ns.get(key, 0) + paused_now.get(key, 0)
            cls = {"class": r.cls, "class_name": r.class_name,
                   "tx_bytes": int(cur["deq_bytes"][i]), "tx_frames": int(cur["deq_pkts"][i]),
                   "tx_gbps_hw": None if rate_bps is None else rate_bps * self.dilation / 1e9,
                   "utilisation_pct": None if rate_bps is None or not r.bw_mbps else 100 * rate_bps / (r.bw_mbps * 1e6),
                   "queue_bytes": int(cur["depth_bytes"][i]), "queue_peak_bytes": int(peak[i]),
                   "ecn_capable_frames": int(cur["ect_pkts"][i]), "ecn_marked": int(cur["mark_pkts"][i]),
                   "dropped": int(cur["drop_pkts"][i]),
                   # a PAUSE crosses the link: this port receives those its peer sends, and sends
                   # those that pause its peer's transmitter in the class
                   "pauses_received": received.get(key, 0), "pauses_sent": received.get(peer_key, 0),
                   "paused": key in paused_now, "paused_us_hw": paused_ns / self.dilation / 1e3}
            p = ports.get(r.port)
            if p is None:
                p = ports[r.port] = {"switch": r.switch, "port": r.port, "ofport": r.ofport,
                                     "link": link_label(r.switch, r.peer), "peer": r.peer, "peer_port": r.peer_port,
                                     "link_gbps_hw": r.bw_mbps * self.dilation / 1e3,
                                     "crc_errors": int(cur["crc"][i]), "classes": []}
            p["classes"].append(cls)
        for p in ports.values():
            cs = p["classes"]
            for k in ("tx_bytes", "tx_frames", "queue_bytes", "ecn_marked", "dropped", "pauses_received",
                      "pauses_sent"):
                p[k] = sum(c[k] for c in cs)
            known = [c["utilisation_pct"] for c in cs if c["utilisation_pct"] is not None]
            p["utilisation_pct"] = sum(known) if known else None
            p["tx_gbps_hw"] = sum(c["tx_gbps_hw"] for c in cs if c["tx_gbps_hw"] is not None) if known else None
            p["paused"] = any(c["paused"] for c in cs)
        return list(ports.values())

    def window_s(self) -> float:
        return (self.samples[-1]["t_ns"] - self.samples[0]["t_ns"]) / 1e9 if self.samples else 0.0
