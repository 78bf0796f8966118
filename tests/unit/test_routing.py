import itertools

import pytest

from testbed.fabric.routing import compute_routes, torus_direction, trace_path
from topologies.torus import torus


def all_pairs(f):
    return itertools.permutations([h.name for h in f.hosts], 2)


def hops(f, a, b):
    ca, cb = f.host_by_name[a].coord, f.host_by_name[b].coord
    return sum(min((x - y) % n, (y - x) % n) for x, y, n in zip(ca, cb, f.dims))


@pytest.mark.parametrize("dims", [(4, 4), (2, 2, 4), (3, 5)])
@pytest.mark.parametrize("algorithm", ["dimension_order", "shortest_path"])
def test_every_pair_reachable_loop_free_and_minimal(dims, algorithm):
    f = torus(dims)
    table = compute_routes(f, algorithm)
    for a, b in all_pairs(f):
        path = trace_path(f, table, a, b)  # raises on loops and holes
        assert len(path) - 1 == hops(f, a, b)


@pytest.mark.parametrize("dims", [(4, 4), (2, 2, 4), (5, 3, 2)])
def test_dimension_order_corrects_dimensions_in_order(dims):
    f = torus(dims)
    table = compute_routes(f, "dimension_order")
    for a, b in all_pairs(f):
        coords = [f.switch_by_name[s].coord for s in trace_path(f, table, a, b)]
        changed = [next(i for i in range(len(dims)) if u[i] != v[i]) for u, v in zip(coords, coords[1:])]
        assert changed == sorted(changed)


def test_direction_takes_the_shorter_way_and_ties_go_plus():
    assert torus_direction(0, 1, 4) == +1
    assert torus_direction(0, 3, 4) == -1
    assert torus_direction(0, 2, 4) == +1
    assert torus_direction(3, 0, 4) == +1


def test_unknown_algorithm_is_refused():
    with pytest.raises(ValueError):
        compute_routes(torus((2, 2)), "ecmp-magic")
