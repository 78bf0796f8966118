from collections import Counter

import networkx as nx
import pytest

from testbed.collectives import chunk_sizes, ring_allreduce, ring_allreduce_bound_s


@pytest.mark.parametrize("n,size", [(2, 1000), (4, 4096), (16, 4 << 20), (5, 1001)])
def test_each_rank_sends_and_receives_2_n_minus_1_over_n_of_the_data(n, size):
    ranks = [f"r{i}" for i in range(n)]
    msgs = ring_allreduce(ranks, size)
    sent, recv = Counter(), Counter()
    for m in msgs:
        sent[m.src] += m.bytes
        recv[m.dst] += m.bytes
    expected = 2 * (n - 1) / n * size
    for r in ranks:
        # chunk sizes differ by at most one byte when N does not divide S
        assert abs(sent[r] - expected) <= 2 * (n - 1)
        assert abs(recv[r] - expected) <= 2 * (n - 1)
    if size % n == 0:
        assert all(sent[r] == expected == recv[r] for r in ranks)


def test_sends_follow_the_ring_and_depend_on_the_previous_arrival():
    ranks = ["a", "b", "c", "d"]
    msgs = ring_allreduce(ranks, 4000, iterations=2)
    by_id = {m.id: m for m in msgs}
    for m in msgs:
        assert ranks.index(m.dst) == (ranks.index(m.src) + 1) % 4
        if m.step > 0:
            (dep,) = m.deps
            d = by_id[dep]
            assert d.dst == m.src and d.step == m.step - 1 and d.iteration == m.iteration
            assert d.chunk == m.chunk  # the chunk received is the one passed on
    g = nx.DiGraph([(d, m.id) for m in msgs for d in m.deps])
    assert nx.is_directed_acyclic_graph(g)


def test_every_chunk_is_reduced_once_by_every_other_rank():
    n = 6
    msgs = ring_allreduce([str(i) for i in range(n)], 6000)
    rs = [m for m in msgs if m.step < n - 1]  # reduce-scatter phase
    per_chunk = Counter(m.chunk for m in rs)
    assert set(per_chunk.values()) == {n - 1}
    ag = [m for m in msgs if m.step >= n - 1]
    assert Counter(m.chunk for m in ag) == per_chunk


def test_iterations_are_separated_by_a_barrier():
    msgs = ring_allreduce(["a", "b", "c"], 300, iterations=2)
    last_of_first = {m.id for m in msgs if m.iteration == 0 and m.step == 3}
    for m in msgs:
        if m.iteration == 1 and m.step == 0:
            assert set(m.deps) == last_of_first


def test_bound_formula():
    assert ring_allreduce_bound_s(16, 4 << 20, 100e6) == pytest.approx(2 * 15 / 16 * (4 << 20) * 8 / 100e6)
    assert sum(chunk_sizes(1001, 4)) == 1001
