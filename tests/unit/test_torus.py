import itertools

import networkx as nx
import pytest

from topologies.torus import minus_port, plus_port, snake_order, torus


@pytest.mark.parametrize("dims", [(4, 4), (2, 2, 4), (3, 5), (2, 2)])
def test_every_switch_has_two_links_per_dimension(dims):
    f = torus(dims)
    for s in f.switches:
        fabric_ports = [p for p, (peer, _, _) in f.ports[s.name].items() if peer in f.switch_by_name]
        assert len(fabric_ports) == 2 * sum(1 for d in dims if d > 1)


def test_counts_and_identifiers_are_unique():
    f = torus((4, 4), hosts_per_switch=2)
    assert len(f.switches) == 16 and len(f.hosts) == 32
    assert len(f.links) == 32 + 2 * 16  # host links + one + link per switch and dimension
    for attr in ("name", "mac", "ip"):
        values = [getattr(h, attr) for h in f.hosts]
        assert len(set(values)) == len(values)
    assert len({s.dpid for s in f.switches}) == 16
    assert all(len(ifname) <= 15 for _, ifname in f.interfaces())


def test_wraparound_links_connect_coordinate_neighbours():
    f = torus((4, 4))
    for link in f.links:
        if link.dim is None:
            continue
        a, b = f.switch_by_name[link.a].coord, f.switch_by_name[link.b].coord
        d = link.dim
        assert b[d] == (a[d] + 1) % 4 and all(a[i] == b[i] for i in range(2) if i != d)
        assert link.a_port == plus_port(1, d) and link.b_port == minus_port(1, d)


def test_graph_is_the_torus():
    g = nx.Graph(torus((4, 4)).switch_graph())
    assert nx.is_isomorphic(g, nx.grid_2d_graph(4, 4, periodic=True))


@pytest.mark.parametrize("dims", [(4, 4), (2, 2, 4), (2, 4), (4, 2, 2)])
def test_snake_ring_neighbours_are_one_hop_apart(dims):
    f = torus(dims)
    order = snake_order(f)
    assert sorted(order) == sorted(h.name for h in f.hosts)
    g = f.switch_graph()
    for a, b in zip(order, order[1:] + order[:1]):
        sa, sb = f.host_by_name[a].switch, f.host_by_name[b].switch
        assert g.has_edge(sa, sb), (a, b)


def test_json_round_trip():
    f = torus((2, 2, 4), hosts_per_switch=2)
    from topologies.model import Fabric
    assert Fabric.from_json(f.to_json()) == f


@pytest.mark.parametrize("bad", [(4,), (4, 4, 4, 4), (0, 4), (17, 2)])
def test_bad_dimensions_are_refused(bad):
    with pytest.raises(ValueError):
        torus(bad)
