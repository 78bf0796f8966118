"""A lower bound on the time of any message DAG with compute steps, pure.

No schedule of the DAG on a fabric of links at rate B can finish sooner than the largest of:
- its critical path, each transfer at its bytes over B and each compute step at its duration;
- the busiest NIC's bytes sent over B, and the busiest NIC's bytes received over B (a NIC
  serialises what it sends and what it receives);
- the busiest host's compute (a host runs its compute steps one at a time, one GPU stream, and so
  does the data plane: nicdp.c's compute streams).
With a fabric that has propagation and switch latency, every transfer also takes its path's
latency (REFERENCE.md's alpha-beta cost: the ring's 2(N-1) steps each pay it once).
Payload bytes only: the headers a run adds make it slower, never faster. The shapers' bursts
(the host NIC's two frames after an idle spell) do not make a transfer shorter than its frame
times: the receiving NIC's delay line has each frame arrive a frame time at line rate after its
queue pair's frame before it, as the hardware's wire does (testbed/traffic/nic/nicdp.c, wire_in).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from graphlib import TopologicalSorter

from testbed.traffic.collectives import Message, bound_formula, bound_s

FORMULA = "max(critical path at B, busiest NIC's bytes sent or received / B, busiest host's compute)"


@dataclass(frozen=True)
class DagBound:
    critical_path_s: float
    busiest_tx_s: float
    busiest_rx_s: float
    busiest_compute_s: float

    @property
    def bound_s(self) -> float:
        return max(self.critical_path_s, self.busiest_tx_s, self.busiest_rx_s, self.busiest_compute_s)

    @property
    def binding(self) -> str:
        """Which term the bound is."""
        terms = {"critical_path": self.critical_path_s, "busiest_tx": self.busiest_tx_s,
                 "busiest_rx": self.busiest_rx_s, "busiest_compute": self.busiest_compute_s}
        return max(terms, key=terms.get)


def duration_s(m: Message, bw_bps: float, latency_s=None) -> float:
    """A step alone: a compute step's duration, a transfer's bytes at the link rate (plus its
    path's latency, latency_s(message) in seconds, when given)."""
    if m.op == "compute":
        return m.duration_ns / 1e9
    return m.bytes * 8 / bw_bps + (latency_s(m) if latency_s else 0.0)


def dag_bound(msgs: list[Message], bw_bps: float, latency_s=None) -> DagBound:
    """The bound of msgs; dependencies on messages outside msgs (an earlier iteration) are
    taken as done at time 0."""
    if bw_bps <= 0:
        raise ValueError("the link rate must be positive")
    by_id = {m.id: m for m in msgs}
    order = TopologicalSorter({m.id: [d for d in m.deps if d in by_id] for m in msgs}).static_order()
    done: dict[int, float] = {}
    for i in order:
        m = by_id[i]
        done[i] = max((done[d] for d in m.deps if d in by_id), default=0.0) + duration_s(m, bw_bps, latency_s)
    tx: dict[str, float] = defaultdict(float)
    rx: dict[str, float] = defaultdict(float)
    compute: dict[str, float] = defaultdict(float)
    for m in msgs:
        if m.op == "compute":
            compute[m.src] += m.duration_ns / 1e9
        else:
            tx[m.src] += m.bytes * 8 / bw_bps
            rx[m.dst] += m.bytes * 8 / bw_bps
    return DagBound(max(done.values(), default=0.0), max(tx.values(), default=0.0),
                    max(rx.values(), default=0.0), max(compute.values(), default=0.0))


TRACE_FORMULA = "max_r sent_r/B (busiest NIC, compute not counted)"
# Workloads planned as a DAG with compute steps, bounded by dag_bound: for a parameter server its
# busiest NIC is a worker's push and pull (bytes_per_rank each way) or a server's incast of every
# worker's shard, whichever is larger, and its critical path runs compute, push, aggregate, pull.
DAG_WORKLOADS = ("pipeline", "ddp", "parameter_server")


def planned_bound(workload: str, ranks: int, bytes_per_rank: int, bw_bps: float,
                  first_iteration: list[Message], latency_s=None) -> tuple[float, str, dict | None]:
    """A workload's lower bound per iteration at plan time, its formula, and for a DAG its terms:
    the DAG bound for a pipeline; for a trace, which has no closed form, its busiest NIC's bytes at
    line rate; the collective's analytical cost otherwise. first_iteration: iteration 0's messages.
    latency_s(message): its path's latency in seconds, on a fabric that has one; then no bound is
    below the DAG's critical path with every transfer paying it."""
    if workload in DAG_WORKLOADS:
        dag = dag_bound(first_iteration, bw_bps, latency_s)
        return dag.bound_s, FORMULA, asdict(dag) | {"binding": dag.binding}
    if workload in ("chakra", "simai"):
        sent: dict[str, int] = defaultdict(int)
        for m in first_iteration:
            if m.op != "compute":
                sent[m.src] += m.bytes
        bound, formula = (max(sent.values()) * 8 / bw_bps if sent else 0.0), TRACE_FORMULA
    else:
        bound, formula = bound_s(workload, ranks, bytes_per_rank, bw_bps), bound_formula(workload)
    if latency_s and first_iteration:
        path = dag_bound(first_iteration, bw_bps, latency_s).critical_path_s
        if path > bound:
            return path, f"critical path with each step's path latency (>= {formula})", {
                "critical_path_s": path, "bandwidth_s": bound, "binding": "critical_path"}
    return bound, formula, None
