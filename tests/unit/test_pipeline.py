"""1F1B pipeline and hybrid DP x PP schedules (testbed.traffic.pipeline)."""
from collections import Counter

import networkx as nx
import pytest

from testbed.traffic.collectives import data_flow
from testbed.traffic.pipeline import PipelineJob, model_bytes, one_f_one_b, pipeline_step


def job(pp=4, dp=1, m=8):
    return PipelineJob(pp=pp, dp=dp, microbatches=m, activation_bytes=1000, grad_bytes_per_stage=4000,
                       fwd_ns=10, bwd_ns=20)


def replicas(pp, dp):
    return [[f"h{d}_{s}" for s in range(pp)] for d in range(dp)]


@pytest.mark.parametrize("pp,m", [(4, 8), (4, 2), (2, 1), (8, 8)])
def test_1f1b_order_and_warm_up_per_stage(pp, m):
    for s in range(pp):
        ops = one_f_one_b(pp, m, s)
        assert sorted(ops) == sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
        warm = next(k for k, op in enumerate(ops) if op[0] == "B")
        assert warm == min(pp - s - 1, m) + (1 if m > pp - s - 1 else 0)  # warm-up, then the first 1F1B's F
        # after the warm-up, forwards and backwards alternate until the forwards run out
        steady = ops[min(pp - s - 1, m):]
        fs = [k for k, (kind, _) in enumerate(steady) if kind == "F"]
        assert fs == list(range(0, 2 * len(fs), 2))
        # micro-batches go in order each way, and a backward never precedes its forward
        assert [i for kind, i in ops if kind == "F"] == list(range(m))
        assert [i for kind, i in ops if kind == "B"] == list(range(m))
        assert all(ops.index(("F", i)) < ops.index(("B", i)) for i in range(m))


def test_megatron_stage_program():
    assert one_f_one_b(4, 4, 0) == [("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0), ("B", 1), ("B", 2), ("B", 3)]
    assert one_f_one_b(4, 4, 3) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2), ("F", 3), ("B", 3)]
    assert one_f_one_b(4, 8, 1)[:4] == [("F", 0), ("F", 1), ("F", 2), ("B", 0)]


@pytest.mark.parametrize("pp,dp,m", [(4, 1, 8), (4, 4, 8), (3, 2, 5)])
def test_transfers_compute_and_dependencies(pp, dp, m):
    msgs = pipeline_step(job(pp, dp, m), replicas(pp, dp), iterations=2)
    g = nx.DiGraph()
    g.add_nodes_from(x.id for x in msgs)
    g.add_edges_from((d, x.id) for x in msgs for d in x.deps)
    assert nx.is_directed_acyclic_graph(g) and all(d < x.id for x in msgs for d in x.deps)
    for it in range(2):
        mine = [x for x in msgs if x.iteration == it]
        compute = [x for x in mine if x.op == "compute"]
        p2p = [x for x in mine if x.op == "p2p"]
        assert len(compute) == 2 * m * pp * dp
        assert Counter(x.duration_ns for x in compute) == Counter({10: m * pp * dp, 20: m * pp * dp})
        # activations forward and gradients back across every boundary, once per micro-batch
        assert len(p2p) == 2 * m * (pp - 1) * dp and all(x.bytes == 1000 for x in p2p)
        by_id = {x.id: x for x in msgs}
        for x in p2p:
            (c,) = x.deps
            assert by_id[c].op == "compute" and by_id[c].src == x.src and by_id[c].chunk == x.chunk
        # each stage runs its compute one step at a time, in 1F1B order
        for rep in replicas(pp, dp):
            for s, host in enumerate(rep):
                steps = sorted((x for x in compute if x.src == host), key=lambda x: x.id)
                kinds = [("F" if x.duration_ns == 10 else "B", x.chunk) for x in steps]
                assert kinds == one_f_one_b(pp, m, s)
                assert all(steps[k - 1].id in steps[k].deps for k in range(1, len(steps)))
        ar = [x for x in mine if x.op in ("reduce", "copy")]
        if dp == 1:
            assert not ar
        else:  # each stage's replicas AllReduce that stage's gradients after their last backward
            for s in range(pp):
                ring = {rep[s] for rep in replicas(pp, dp)}
                mine_ar = [x for x in ar if x.src in ring]
                assert {x.dst for x in mine_ar} == ring
                assert all(sum(y.bytes for y in mine_ar if y.src == h) == 2 * (dp - 1) / dp * 4000 for h in ring)
                last_b = {h: max(x.id for x in compute if x.src == h) for h in ring}
                for x in mine_ar:  # no send before the sender's own gradients exist
                    assert last_b[x.src] in nx.ancestors(g, x.id)


def test_dp_allreduce_reduces_every_replica_once():
    pp, dp = 3, 4
    msgs = [x for x in pipeline_step(job(pp, dp, 2), replicas(pp, dp)) if x.iteration == 0]
    hosts = [h for r in replicas(pp, dp) for h in r]
    initial = {h: {c: frozenset([h]) for c in range(dp)} for h in hosts}
    final = data_flow(msgs, initial)
    for s in range(pp):
        ring = frozenset(rep[s] for rep in replicas(pp, dp))
        assert all(final[h][c] == ring for h in ring for c in range(dp))


def test_model_bytes():
    act, grads = model_bytes(micro_batch=1, seq_len=2048, hidden=4096, bytes_per_element=2, tp=2, layers_per_stage=4)
    assert act == 2048 * 4096 * 2 // 2 and grads == 12 * 4096 * 4096 * 4 * 2 // 2
    j = PipelineJob(pp=4, dp=2, microbatches=8, activation_bytes=125_000, grad_bytes_per_stage=1_000_000,
                    fwd_ns=10_000_000, bwd_ns=20_000_000)
    with pytest.raises(ValueError):
        pipeline_step(j, [["a", "b", "c", "d"], ["a", "e", "f", "g"]])