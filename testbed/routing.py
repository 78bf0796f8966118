"""Route computation, pure: a fabric in, a next-hop table out.

A route table maps switch name -> destination host name -> output port. The controller
turns it into flow entries; tests check it for reachability, loops and dimension order.
"""
from __future__ import annotations

import networkx as nx

from topologies.model import Fabric

RouteTable = dict[str, dict[str, int]]

ALGORITHMS = ("dimension_order", "shortest_path")


def compute_routes(fabric: Fabric, algorithm: str) -> RouteTable:
    if algorithm == "dimension_order":
        return dimension_order_routes(fabric)
    if algorithm == "shortest_path":
        return shortest_path_routes(fabric)
    raise ValueError(f"unknown routing algorithm {algorithm!r}; expected one of {ALGORITHMS}")


def _host_ports(fabric: Fabric, table: RouteTable) -> None:
    for h in fabric.hosts:
        table[h.switch][h.name] = h.switch_port


def _dim_ports(fabric: Fabric) -> dict[tuple[str, int, int], int]:
    """(switch, dim, +1/-1) -> port, from the torus links' orientation."""
    out = {}
    for link in fabric.links:
        if link.dim is not None:
            out[(link.a, link.dim, +1)] = link.a_port
            out[(link.b, link.dim, -1)] = link.b_port
    return out


def torus_direction(src: int, dst: int, size: int) -> int:
    """+1 or -1: the shorter way around a ring of ``size``; ties go +1."""
    forward = (dst - src) % size
    return +1 if forward <= size - forward else -1


def dimension_order_routes(fabric: Fabric) -> RouteTable:
    """Correct dimension 0 first, then 1, then 2, each the shorter way around its ring."""
    if fabric.kind != "torus":
        raise ValueError(f"dimension-order routing needs a torus, not a {fabric.kind}")
    ports = _dim_ports(fabric)
    table: RouteTable = {s.name: {} for s in fabric.switches}
    _host_ports(fabric, table)
    for s in fabric.switches:
        for h in fabric.hosts:
            dst = fabric.switch_by_name[h.switch].coord
            if dst == s.coord:
                continue
            d = next(i for i, (a, b) in enumerate(zip(s.coord, dst)) if a != b)
            direction = torus_direction(s.coord[d], dst[d], fabric.dims[d])
            table[s.name][h.name] = ports[(s.name, d, direction)]
    return table


def shortest_path_routes(fabric: Fabric) -> RouteTable:
    """One minimal-hop path per destination; ties go to the lowest output port, so the
    table is deterministic."""
    g = fabric.switch_graph()
    table: RouteTable = {s.name: {} for s in fabric.switches}
    _host_ports(fabric, table)
    for h in fabric.hosts:
        dist = nx.single_source_shortest_path_length(g, h.switch)
        for s in fabric.switches:
            if s.name == h.switch:
                continue
            if s.name not in dist:
                raise ValueError(f"{s.name} cannot reach {h.name}: the fabric is partitioned")
            candidates = [port for port, (peer, _, _) in fabric.ports[s.name].items()
                          if peer in dist and dist[peer] == dist[s.name] - 1]
            table[s.name][h.name] = min(candidates)
    return table


def trace_path(fabric: Fabric, table: RouteTable, src_host: str, dst_host: str) -> list[str]:
    """The switches a packet from src_host to dst_host crosses; raises on a loop or a hole."""
    node = fabric.host_by_name[src_host].switch
    path = [node]
    while True:
        port = table[node].get(dst_host)
        if port is None:
            raise ValueError(f"{node} has no route to {dst_host}")
        peer, _, _ = fabric.ports[node][port]
        if peer == dst_host:
            return path
        if peer in path:
            raise ValueError(f"routing loop {src_host}->{dst_host}: {path + [peer]}")
        if peer in fabric.host_by_name:
            raise ValueError(f"{node} sends {dst_host}'s traffic to host {peer}")
        path.append(peer)
        node = peer
