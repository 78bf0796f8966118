from collections import Counter

import networkx as nx
import pytest

from testbed.traffic.collectives import chunk_sizes, ring_allreduce, ring_allreduce_bound_s


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


# -- every algorithm -------------------------------------------------------------------------

from testbed.traffic.collectives import (SEND_FRACTION, all_to_all, data_flow, halving_doubling_allreduce,  # noqa: E402
                                         ring_allgather, ring_reducescatter, torus2d_allreduce)


def grid_of(ranks, xs):
    return [ranks[y * xs:(y + 1) * xs] for y in range(len(ranks) // xs)]


ALGORITHMS = {
    "ring_allreduce": lambda ranks, s, it=1: ring_allreduce(ranks, s, it),
    "halving_doubling": lambda ranks, s, it=1: halving_doubling_allreduce(ranks, s, it),
    "torus2d_allreduce": lambda ranks, s, it=1: torus2d_allreduce(grid_of(ranks, 4 if len(ranks) >= 8 else 2), s, it),
    "allgather": lambda ranks, s, it=1: ring_allgather(ranks, s, it),
    "reducescatter": lambda ranks, s, it=1: ring_reducescatter(ranks, s, it),
    "alltoall": lambda ranks, s, it=1: all_to_all(ranks, s, it),
}
SIZES = [4, 8, 16]


@pytest.mark.parametrize("algo", ALGORITHMS)
@pytest.mark.parametrize("n", SIZES)
def test_bytes_per_rank_equal_the_cost_model(algo, n):
    ranks = [f"r{i}" for i in range(n)]
    size = 4096 * n
    msgs = ALGORITHMS[algo](ranks, size)
    sent, recv = Counter(), Counter()
    for m in msgs:
        sent[m.src] += m.bytes
        recv[m.dst] += m.bytes
    want = SEND_FRACTION[algo](n) * size
    assert all(sent[r] == pytest.approx(want) and recv[r] == pytest.approx(want) for r in ranks), (sent, want)


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_dependency_graphs_are_acyclic_and_iterations_separated(algo):
    ranks = [f"r{i}" for i in range(8)]
    msgs = ALGORITHMS[algo](ranks, 8000, 3)
    g = nx.DiGraph()
    g.add_nodes_from(m.id for m in msgs)
    g.add_edges_from((d, m.id) for m in msgs for d in m.deps)
    assert nx.is_directed_acyclic_graph(g)
    by_iteration = {i: {m.id for m in msgs if m.iteration == i} for i in range(3)}
    for m in msgs:
        if m.iteration:  # nothing of iteration i+1 starts before all of iteration i has arrived
            assert by_iteration[m.iteration - 1] <= nx.ancestors(g, m.id)


@pytest.mark.parametrize("algo", ["ring_allreduce", "halving_doubling", "torus2d_allreduce"])
@pytest.mark.parametrize("n", SIZES)
def test_allreduce_sums_every_contribution_into_every_rank_exactly_once(algo, n):
    ranks = [f"r{i}" for i in range(n)]
    everyone = frozenset(ranks)
    final = data_flow(ALGORITHMS[algo](ranks, 1000 * n), {r: {s: frozenset([r]) for s in range(n)} for r in ranks})
    assert all(final[r][s] == everyone for r in ranks for s in range(n))


@pytest.mark.parametrize("n", SIZES)
def test_reducescatter_leaves_each_segment_complete_at_exactly_one_rank(n):
    ranks = [f"r{i}" for i in range(n)]
    final = data_flow(ring_reducescatter(ranks, 1000 * n), {r: {s: frozenset([r]) for s in range(n)} for r in ranks})
    complete = [(r, s) for r in ranks for s in range(n) if final[r][s] == frozenset(ranks)]
    assert sorted(s for _, s in complete) == list(range(n)) and len({r for r, _ in complete}) == n


@pytest.mark.parametrize("n", SIZES)
def test_allgather_gives_every_rank_every_segment(n):
    ranks = [f"r{i}" for i in range(n)]
    final = data_flow(ring_allgather(ranks, 1000 * n), {r: {i: frozenset([r])} for i, r in enumerate(ranks)})
    assert all(final[r][i] == frozenset([ranks[i]]) for r in ranks for i in range(n))


def test_alltoall_sends_one_distinct_piece_to_every_peer():
    ranks = [f"r{i}" for i in range(6)]
    msgs = all_to_all(ranks, 6000)
    assert Counter((m.src, m.dst) for m in msgs) == Counter({(a, b): 1 for a in ranks for b in ranks if a != b})
    assert all(m.bytes == 1000 for m in msgs)


def test_a_double_reduction_is_caught():
    ranks = ["a", "b"]
    msgs = ring_reducescatter(ranks, 200)
    dup = msgs + [type(msgs[0])(len(msgs), 0, 9, "a", "b", 100, (msgs[-1].id,), -1, "collective", "reduce",
                                msgs[0].segments)]
    with pytest.raises(ValueError, match="second time"):
        data_flow(dup, {r: {s: frozenset([r]) for s in range(2)} for r in ranks})


def test_step_counts():
    ranks = [f"r{i}" for i in range(16)]
    assert max(m.step for m in halving_doubling_allreduce(ranks, 16000)) + 1 == 2 * 4
    assert max(m.step for m in torus2d_allreduce(grid_of(ranks, 4), 16000)) + 1 == 2 * 3 + 2 * 3
    with pytest.raises(ValueError, match="power-of-two"):
        halving_doubling_allreduce(ranks[:6], 6000)


@pytest.mark.parametrize("algo", ["ring_allreduce", "halving_doubling", "torus2d_allreduce", "allgather"])
def test_no_step_waits_for_a_message_of_its_own_step(algo):
    """Within a step every rank sends at once: a dependency on a same-step message would
    serialize the step around the ring (seen: torus2d's column phase 4x slower)."""
    msgs = ALGORITHMS[algo]([f"r{i}" for i in range(16)], 16000)
    by_id = {m.id: m for m in msgs}
    assert all(by_id[d].step < m.step for m in msgs for d in m.deps if by_id[d].iteration == m.iteration)
