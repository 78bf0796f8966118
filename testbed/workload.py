"""From a scenario's [workload] to the engine's plan: ranks placed on hosts, flows, messages."""
from __future__ import annotations

import dataclasses

from testbed.collectives import Message, ring_allreduce, shift_permutation
from testbed.scenario import Scenario
from topologies.model import Fabric
from topologies.torus import snake_order


def ring_ranks(fabric: Fabric) -> list[str]:
    """Ring order that follows the fabric: on a torus, neighbours one switch hop apart."""
    if fabric.kind == "torus":
        return snake_order(fabric)
    return [h.name for h in fabric.hosts]  # fabric order: neighbours share a leaf/edge switch


def build_messages(sc: Scenario, fabric: Fabric) -> tuple[list[str], list[Message]]:
    w = sc.workload
    if w.type == "ring_allreduce":
        ranks = ring_ranks(fabric)
        return ranks, ring_allreduce(ranks, w.bytes_per_rank, w.iterations)
    if w.type == "shift":
        ranks = [h.name for h in fabric.hosts]
        return ranks, shift_permutation(ranks, w.bytes_per_rank, w.shift, w.iterations)
    raise ValueError(f"unknown workload type {w.type}")


def flows_of(messages: list[Message]) -> list[tuple[str, str]]:
    """One flow (queue pair) per ordered host pair that exchanges messages, in first-use order."""
    seen: dict[tuple[str, str], None] = {}
    for m in messages:
        seen.setdefault((m.src, m.dst), None)
    return list(seen)


def engine_plan(sc: Scenario, fabric: Fabric, messages: list[Message], host_pids: dict[str, int],
                out_dir: str) -> dict:
    flows = flows_of(messages)
    flow_id = {f: i for i, f in enumerate(flows)}
    used = {h for f in flows for h in f}
    return {
        "out_dir": out_dir,
        "payload_bytes": sc.workload.payload_bytes,
        "dscp": sc.workload.dscp,
        "time_limit_s": sc.run.time_limit_s,
        "transport": dataclasses.asdict(sc.transport),
        "stall_timeout_s": sc.run.stall_timeout_s,
        "hosts": [{"name": h.name, "pid": host_pids[h.name], "ifname": h.intf, "mac": h.mac, "ip": h.ip,
                   "bw_bps": sc.fabric.bw_mbps * 1e6} for h in fabric.hosts if h.name in used],
        "flows": [{"id": i, "src": s, "dst": d} for (s, d), i in flow_id.items()],
        "messages": [[m.id, flow_id[(m.src, m.dst)], m.bytes, list(m.deps)] for m in messages],
    }
