import itertools

import networkx as nx
import pytest

from testbed.fabric.routing import channel_dependencies, compute_routes, trace_paths
from topologies.fattree import fattree
from topologies.leafspine import leafspine
from topologies.torus import torus


@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_fattree_counts(k):
    f = fattree(k)
    assert len(f.switches) == 5 * k * k // 4
    assert len(f.hosts) == k ** 3 // 4
    assert len({s.dpid for s in f.switches}) == len(f.switches)
    assert len({h.ip for h in f.hosts}) == len(f.hosts) and len({h.mac for h in f.hosts}) == len(f.hosts)
    for s in f.switches:
        assert len(f.ports[s.name]) == k  # every switch uses all k ports
    assert all(len(n) <= 15 for _, n in f.interfaces())


@pytest.mark.parametrize("k", [4, 6])
def test_fattree_full_bisection(k):
    """Any half of the hosts can reach the other half at full rate: the min cut between the
    two halves of the pods is (number of hosts / 2) links."""
    f = fattree(k)
    g = nx.Graph()
    for link in f.links:
        g.add_edge(link.a, link.b, capacity=1)
    left = [h.name for h in f.hosts if h.coord[0] < k // 2]
    right = [h.name for h in f.hosts if h.coord[0] >= k // 2]
    for h in left:
        g.add_edge("SRC", h, capacity=10**6)
    for h in right:
        g.add_edge(h, "DST", capacity=10**6)
    assert nx.maximum_flow_value(g, "SRC", "DST") == len(f.hosts) // 2


def test_leafspine_shape_and_oversubscription():
    f = leafspine(4, 2, 8, uplink_bw_mbps=25)
    assert len(f.switches) == 6 and len(f.hosts) == 32
    ups = [l for l in f.links if l.a.startswith("leaf") and l.b.startswith("spine")]
    assert len(ups) == 8 and all(l.bw_mbps == 25 for l in ups)
    host_links = [l for l in f.links if l.a.startswith("h")]
    assert all(l.bw_mbps is None for l in host_links)  # the fabric rate


@pytest.mark.parametrize("fabric", [fattree(4), fattree(6), leafspine(4, 3, 2)], ids=["ft4", "ft6", "ls"])
def test_ecmp_routes_are_all_minimal_paths_and_loop_free(fabric):
    table = compute_routes(fabric, "ecmp")
    g = fabric.switch_graph()
    for a, b in itertools.permutations(fabric.hosts, 2):
        paths = trace_paths(fabric, table, a.switch, b.name)
        n_min = len(list(nx.all_shortest_paths(nx.Graph(g), a.switch, b.switch)))
        assert len(paths) == n_min
        assert all(len(p) == nx.shortest_path_length(g, a.switch, b.switch) + 1 for p in paths)


def test_fattree_ecmp_fans_out_to_every_core_between_pods():
    f = fattree(4)
    table = compute_routes(f, "ecmp")
    paths = trace_paths(f, table, "e0_0", "h1_0_0")
    assert {p[2] for p in paths} == {"c0_0", "c0_1", "c1_0", "c1_1"}
    assert table["e0_0"]["h1_0_0"] == (3, 4) and table["a0_0"]["h1_0_0"] == (3, 4)


@pytest.mark.parametrize("dims", [(4, 4), (2, 2, 4), (3, 3), (4, 2, 3)])
def test_dateline_breaks_every_channel_dependency_cycle(dims):
    f = torus(dims)
    for algorithm in ("dimension_order", "shortest_path"):
        table = compute_routes(f, algorithm)
        assert nx.is_directed_acyclic_graph(channel_dependencies(f, table, dateline=True)), algorithm


@pytest.mark.parametrize("dims", [(4, 4), (5, 5), (2, 2, 4)])
def test_without_dateline_the_rings_deadlock(dims):
    """Rings of 4 or more switches carry 2-hop minimal routes whose dependencies close a cycle
    (a 3-ring's minimal routes are single hops: no cycle there)."""
    f = torus(dims)
    table = compute_routes(f, "dimension_order")
    assert not nx.is_directed_acyclic_graph(channel_dependencies(f, table, dateline=False))


def test_rerouting_avoids_a_down_link_and_changes_only_what_it_must():
    f = fattree(4)
    before = compute_routes(f, "ecmp")
    down = f.link_by_name("a0_0-c0_0")
    after = compute_routes(f, "ecmp", frozenset({down}))
    for a, b in itertools.permutations(f.hosts, 2):
        for p in trace_paths(f, after, a.switch, b.name):
            assert not ({"a0_0", "c0_0"} <= set(p) and abs(p.index("a0_0") - p.index("c0_0")) == 1)
    changed = {(s, h) for s in before for h in before[s] if before[s][h] != after[s].get(h)}
    assert changed and all(s in ("a0_0", "c0_0", "e1_0", "e2_0", "e3_0", "a1_0", "a2_0", "a3_0", "e0_0", "e0_1")
                           for s, _ in changed)


def test_dimension_order_falls_back_only_for_broken_destinations():
    f = torus((4, 4))
    before = compute_routes(f, "dimension_order")
    down = f.link_by_name("s0_0-s1_0")
    after = compute_routes(f, "dimension_order", frozenset({down}))
    for a, b in itertools.permutations([h.name for h in f.hosts], 2):
        trace_paths(f, after, f.host_by_name[a].switch, b)  # every pair still reachable, no loops
    assert after["s3_3"]["h3_2"] == before["s3_3"]["h3_2"]


@pytest.mark.parametrize("k", [4, 6, 8])
def test_dmodk_gives_one_minimal_path_and_a_shift_across_the_core_shares_no_link(k):
    f = fattree(k)
    table = compute_routes(f, "dmodk")
    g = f.switch_graph()
    hosts = f.hosts
    for a, b in itertools.permutations(hosts[:: max(1, len(hosts) // 12)], 2):
        (path,) = trace_paths(f, table, a.switch, b.name)
        assert len(path) == nx.shortest_path_length(g, a.switch, b.switch) + 1
    n = len(hosts)
    used = {}
    for i, a in enumerate(hosts):
        b = hosts[(i + n // 2) % n]
        (path,) = trace_paths(f, table, a.switch, b.name)
        for hop in zip(path, path[1:]):
            assert hop not in used, f"{a.name}->{b.name} and {used[hop]} share {hop}"
            used[hop] = f"{a.name}->{b.name}"
    # ECMP's hashing cannot promise that: D-mod-k is what makes the capacity benchmark carry every flow at line rate
    assert len(used) == n * 4   # every flow crosses edge->agg->core->agg->edge, each on its own links
