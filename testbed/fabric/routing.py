"""Route computation, pure: a fabric in, a next-hop table out.

A route table maps switch name -> destination host name -> tuple of output ports: one port
for a single path, several for ECMP (the switch hashes each flow onto one of them). The
controller turns it into flow entries and select groups; tests check it for reachability,
loops, minimality and dimension order.

Torus virtual channels (dateline): lossless traffic on a ring deadlocks when the buffers of
the ring's links wait on each other in a cycle. With the dateline scheme a packet travels on
virtual channel 0 and moves to channel 1 when it crosses the dateline link of a dimension (the
wraparound link between coordinates n-1 and 0); it returns to channel 0 when it turns into the
next dimension. Minimal routes cross a dateline at most once per dimension, so no cycle of
channel dependencies remains.
"""
from __future__ import annotations

import networkx as nx

from topologies.model import Fabric, Link

RouteTable = dict[str, dict[str, tuple[int, ...]]]

ALGORITHMS = ("dimension_order", "shortest_path", "ecmp", "dmodk")


def compute_routes(fabric: Fabric, algorithm: str, down_links: frozenset[Link] = frozenset()) -> RouteTable:
    """Routes over the links that are up. Dimension-order routing ignores ``down_links`` only
    when none of its paths use them; otherwise it falls back to shortest paths for the
    destinations whose dimension-order path is broken."""
    if algorithm == "dimension_order":
        table = dimension_order_routes(fabric)
        if down_links:
            fallback = minimal_routes(fabric, down_links, all_paths=False)
            _repair(fabric, table, fallback, down_links)
        return table
    if algorithm == "shortest_path":
        return minimal_routes(fabric, down_links, all_paths=False)
    if algorithm == "ecmp":
        return minimal_routes(fabric, down_links, all_paths=True)
    if algorithm == "dmodk":
        return dmodk_routes(fabric, down_links)
    raise ValueError(f"unknown routing algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")


def _host_ports(fabric: Fabric, table: RouteTable) -> None:
    for h in fabric.hosts:
        table[h.switch][h.name] = (h.switch_port,)


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
            table[s.name][h.name] = (ports[(s.name, d, direction)],)
    return table


def minimal_routes(fabric: Fabric, down_links: frozenset[Link] = frozenset(), all_paths: bool = True) -> RouteTable:
    """Minimal-hop routes over the links that are up: every next hop on a minimal path (ECMP),
    or only the lowest-numbered port (a deterministic single path)."""
    g = fabric.switch_graph()
    for link in down_links:
        if g.has_edge(link.a, link.b, key=(link.a, link.a_port)):
            g.remove_edge(link.a, link.b, key=(link.a, link.a_port))
    table: RouteTable = {s.name: {} for s in fabric.switches}
    _host_ports(fabric, table)
    for h in fabric.hosts:
        dist = nx.single_source_shortest_path_length(g, h.switch)
        for s in fabric.switches:
            if s.name == h.switch or s.name not in dist:
                continue  # unreachable destinations get no route: their packets are dropped
            candidates = sorted(port for port, (peer, _, link) in fabric.ports[s.name].items()
                                if link not in down_links and peer in dist and dist[peer] == dist[s.name] - 1)
            table[s.name][h.name] = tuple(candidates) if all_paths else (candidates[0],)
    return table


def dmodk_routes(fabric: Fabric, down_links: frozenset[Link] = frozenset()) -> RouteTable:
    """Destination-mod-k: a single minimal path per destination, spread by the destination's
    index d. A switch at level l (0 for switches with hosts, then one more per hop away from them)
    with m minimal next hops takes the (d // m**l) mod m-th. On a fat-tree this is the classic
    static routing (Zahavi's D-mod-k, Al-Fares' two-level tables): consecutive destinations leave
    an edge switch on different uplinks and a shift permutation crosses the core without two
    flows sharing a link."""
    table = minimal_routes(fabric, down_links, all_paths=True)
    g = fabric.switch_graph()
    edges = {h.switch for h in fabric.hosts}
    level = {s: min((d for e, d in nx.single_source_shortest_path_length(g, s).items() if e in edges),
                    default=0) for s in g.nodes}
    index = {h.name: i for i, h in enumerate(fabric.hosts)}
    for switch, routes in table.items():
        for dst, ports in routes.items():
            m = len(ports)
            if m > 1:
                routes[dst] = (ports[(index[dst] // m ** level[switch]) % m],)
    return table


def _repair(fabric: Fabric, table: RouteTable, fallback: RouteTable, down_links: frozenset[Link]) -> None:
    """Replace, per destination, every entry when some switch's (single) path to it crosses a
    down link; destinations whose paths all avoid the failure keep their routes."""
    for h in fabric.hosts:
        broken: dict[str, bool] = {}

        def crosses(switch: str) -> bool:
            if switch not in broken:
                broken[switch] = True  # provisional: a loop counts as broken
                (port,) = table[switch][h.name]
                peer, _, link = fabric.ports[switch][port]
                broken[switch] = link in down_links or (peer != h.name and crosses(peer))
            return broken[switch]

        if any(crosses(s.name) for s in fabric.switches):
            for sw in fabric.switches:
                if h.name in fallback[sw.name]:
                    table[sw.name][h.name] = fallback[sw.name][h.name]
                else:
                    table[sw.name].pop(h.name, None)


def trace_paths(fabric: Fabric, table: RouteTable, src_switch: str, dst_host: str) -> list[list[str]]:
    """Every switch path a packet from src_switch to dst_host can take (ECMP branches); raises
    ValueError on a loop or a missing route."""
    out: list[list[str]] = []

    def walk(node: str, path: list[str]) -> None:
        ports = table[node].get(dst_host)
        if not ports:
            raise ValueError(f"{node} has no route to {dst_host}")
        for port in ports:
            peer, _, _ = fabric.ports[node][port]
            if peer == dst_host:
                out.append(path)
            elif peer in path:
                raise ValueError(f"routing loop toward {dst_host}: {path + [peer]}")
            elif peer in fabric.host_by_name:
                raise ValueError(f"{node} sends {dst_host}'s traffic to host {peer}")
            else:
                walk(peer, path + [peer])

    walk(src_switch, [src_switch])
    return out


def trace_path(fabric: Fabric, table: RouteTable, src_host: str, dst_host: str) -> list[str]:
    """The one switch path from src_host to dst_host (the first one under ECMP)."""
    return trace_paths(fabric, table, fabric.host_by_name[src_host].switch, dst_host)[0]


# ---- torus virtual channels -------------------------------------------------------------

def is_dateline(fabric: Fabric, link: Link) -> bool:
    """The wraparound link of its dimension: between coordinates n-1 and 0."""
    if link.dim is None:
        return False
    n = fabric.dims[link.dim]
    return n > 1 and fabric.switch_by_name[link.a].coord[link.dim] == n - 1


def port_dim(fabric: Fabric, switch: str, port: int) -> int | None:
    """The torus dimension a switch port runs along; None for host ports."""
    return fabric.ports[switch][port][2].dim


def next_vc(fabric: Fabric, switch: str, in_port: int | None, out_port: int, vc: int, dateline: bool) -> int:
    """The virtual channel a packet uses on ``out_port`` of ``switch``, having arrived on
    ``in_port`` (None: from a host) on channel ``vc``."""
    if not dateline:
        return 0
    out_link = fabric.ports[switch][out_port][2]
    if out_link.dim is None:
        return 0  # delivered to a host: back to the class's own channel
    same_dim = in_port is not None and port_dim(fabric, switch, in_port) == out_link.dim
    carried = vc if same_dim else 0
    return 1 if is_dateline(fabric, out_link) else carried


def channel_dependencies(fabric: Fabric, table: RouteTable, dateline: bool):
    """The channel dependency graph (Dally and Seitz) of a route table: nodes are
    (switch, out port, vc) channels, an edge means a packet holding the first waits for the second."""
    cdg = nx.DiGraph()
    for h in fabric.hosts:
        for src in fabric.hosts:
            if src.name == h.name:
                continue
            _walk_channels(fabric, table, src.switch, None, 0, h.name, None, cdg, dateline)
    return cdg


def _walk_channels(fabric, table, switch, in_port, vc, dst, prev_channel, cdg, dateline) -> None:
    for port in table[switch][dst]:
        nvc = next_vc(fabric, switch, in_port, port, vc, dateline)
        channel = (switch, port, nvc)
        if prev_channel is not None:
            cdg.add_edge(prev_channel, channel)
        else:
            cdg.add_node(channel)
        peer, peer_port, _ = fabric.ports[switch][port]
        if peer != dst:
            _walk_channels(fabric, table, peer, peer_port, nvc, dst, channel, cdg, dateline)

