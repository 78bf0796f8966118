"""Tensor and expert parallelism across hosts in the pipeline job (testbed.traffic.pipeline), its
placement as Megatron nests its groups, and the analysis of its layers' collectives and of where
an iteration's time went (testbed.analysis.parallelism)."""
from collections import Counter, defaultdict
from dataclasses import replace

import networkx as nx
import pandas as pd
import pytest

from testbed.analysis.bounds import dag_bound
from testbed.analysis.parallelism import iteration_split, layer_collectives
from testbed.errors import InputError
from testbed.scenario import load_document
from testbed.traffic.collectives import data_flow
from testbed.traffic.pipeline import PipelineJob, one_f_one_b, pipeline_step, placement
from testbed.traffic.workload import message_flows


def job(tp=2, pp=2, dp=2, m=3, layers=2, sp=False, ep=1, moe_every=0):
    return PipelineJob(pp=pp, dp=dp, microbatches=m, activation_bytes=1000, grad_bytes_per_stage=4000,
                       fwd_ns=300, bwd_ns=600, tp=tp, layers_per_stage=layers, sequence_parallel=sp,
                       tp_bytes=6000, ep=ep, moe_every=moe_every, a2a_bytes=3000 if ep > 1 else 0)


def grid_of(j):
    return placement([f"r{i}" for i in range(j.tp * j.dp * j.pp)], j.tp, j.dp, j.pp)


def test_placement_nests_tp_innermost_then_dp_then_pp_as_megatron_does():
    ranks = [f"r{i}" for i in range(8)]
    g = placement(ranks, 2, 2, 2)
    # rank = t + tp (d + dp s): a TP group on consecutive ranks, a stage's replicas next
    assert g[0][0] == ["r0", "r1"] and g[1][0] == ["r2", "r3"] and g[0][1] == ["r4", "r5"] and g[1][1] == ["r6", "r7"]
    g = placement(ranks, 2, 2, 2, "tp-pp-dp")
    assert g[0][0] == ["r0", "r1"] and g[0][1] == ["r2", "r3"] and g[1][0] == ["r4", "r5"]
    with pytest.raises(ValueError):
        placement(ranks, 2, 2, 4)


def instances(msgs, kind):
    by = defaultdict(list)
    for m in msgs:
        if m.group == kind:
            by[m.instance].append(m)
    return by


@pytest.mark.parametrize("sp", [False, True])
def test_every_layer_block_reduces_its_output_over_the_tp_group_forward_and_backward(sp):
    j = job(sp=sp)
    grid = grid_of(j)
    msgs = pipeline_step(j, grid, iterations=2)
    assert all(d < m.id for m in msgs for d in m.deps)
    g = nx.DiGraph((d, m.id) for m in msgs for d in m.deps)
    it0 = [m for m in msgs if m.iteration == 0]
    # two blocks a layer, each op (forward and backward of every micro-batch), every TP group
    per_group_and_op = 2 * j.layers_per_stage
    ops = 2 * j.microbatches * j.pp * j.dp
    kinds = ("tp_allgather", "tp_reducescatter") if sp else ("tp_allreduce",)
    for kind in kinds:
        inst = instances(it0, kind)
        assert len(inst) == per_group_and_op * ops
        for ms in inst.values():
            members = {m.src for m in ms}
            assert len(members) == j.tp and members in [set(s) for r in grid for s in r]
            for h in members:   # each member's bytes: the ring's share of the block's output
                frac = 2 * (j.tp - 1) / j.tp if kind == "tp_allreduce" else (j.tp - 1) / j.tp
                assert sum(m.bytes for m in ms if m.src == h) == frac * j.tp_bytes
            if kind != "tp_allgather":   # every member ends with every member's partial sum, once
                init = {h: {c: frozenset([h]) for c in range(j.tp)} for h in members}
                ids = {m.id for m in ms}   # the instance alone: what it waits for outside it is done
                final = data_flow([replace(m, deps=tuple(d for d in m.deps if d in ids))
                                   for m in sorted(ms, key=lambda m: m.id)], init)
                held = [c for h in members for c, v in final[h].items() if v == frozenset(members)]
                assert len(held) == (j.tp * j.tp if kind == "tp_allreduce" else j.tp)
    # a layer's compute is sliced at every collective, and adds up to the stage's forward and backward
    compute = [m for m in it0 if m.op == "compute"]
    assert sum(m.duration_ns for m in compute) == j.microbatches * j.pp * j.dp * j.tp * (j.fwd_ns + j.bwd_ns)
    # the next slice waits for the collective before it on every member of the group
    for ms in instances(it0, kinds[-1]).values():
        last = max(ms, key=lambda m: m.id)
        after = [m for m in compute if m.src == last.dst and m.id > last.id]
        if after:
            nxt = min(after, key=lambda m: m.id)
            assert all(m.id in nx.ancestors(g, nxt.id) for m in ms if m.dst == last.dst)


def test_tp_hosts_exchange_activations_with_their_counterparts_and_keep_the_1f1b_order():
    j = job(tp=2, pp=3, dp=1, m=4, layers=1)
    grid = grid_of(j)
    msgs = pipeline_step(j, grid)
    p2p = [m for m in msgs if m.op == "p2p"]
    assert len(p2p) == 2 * j.microbatches * (j.pp - 1) * j.tp
    pos = {h: (s, t) for s, st in enumerate(grid[0]) for t, h in enumerate(st)}
    assert all(pos[m.src][1] == pos[m.dst][1] and abs(pos[m.src][0] - pos[m.dst][0]) == 1 for m in p2p)
    for s, st in enumerate(grid[0]):
        for h in st:   # the micro-batches' compute runs in 1F1B order (two slices an op, for TP's AllReduces)
            order = [m.chunk for m in msgs if m.op == "compute" and m.src == h]
            want = [i for _, i in one_f_one_b(j.pp, j.microbatches, s) for _ in range(2)]
            assert order == want


def test_moe_layers_dispatch_and_combine_over_the_ep_group_of_consecutive_replicas():
    j = job(tp=1, pp=2, dp=4, m=2, layers=2, ep=2, moe_every=2)
    grid = grid_of(j)
    msgs = pipeline_step(j, grid)
    inst = instances(msgs, "ep_alltoall")
    moe_layers = sum(j.moe_layer(s, layer) for s in range(j.pp) for layer in range(j.layers_per_stage))
    assert moe_layers == 2   # layers 0 and 2 of 4
    # dispatch and combine, forward and backward, each micro-batch, each EP group of its stage
    assert len(inst) == 4 * j.microbatches * (j.dp // j.ep) * moe_layers // j.pp * j.pp
    for ms in inst.values():
        members = sorted({m.src for m in ms})
        stage = next(s for s in range(j.pp) if members[0] in [grid[d][s][0] for d in range(j.dp)])
        assert members in [sorted(grid[e][stage][0] for e in (0, 1)), sorted(grid[e][stage][0] for e in (2, 3))]
        assert Counter(m.src for m in ms) == Counter({h: j.ep - 1 for h in members})
        assert all(m.bytes == j.a2a_bytes // j.ep for m in ms)
    g = nx.DiGraph((d, m.id) for m in msgs for d in m.deps)
    # the expert compute after a dispatch waits for every member's tokens
    for ms in inst.values():
        for h in {m.dst for m in ms}:
            nxt = min((m for m in msgs if m.op == "compute" and m.src == h and m.id > max(x.id for x in ms)),
                      key=lambda m: m.id, default=None)
            if nxt is not None:
                assert all(m.id in nx.ancestors(g, nxt.id) for m in ms if m.dst == h)


def megatron_expert_dp_groups(tp, dp, ep, pp):
    """Megatron-core parallel_state's groups from its RankGenerator orders: dense ranks are
    t + tp (d + dp s) (order tp-cp-dp-pp), expert ranks t + tp (e + ep (x + dp/ep s)) (order
    tp-ep-dp-pp, expert TP = TP); an expert-data-parallel group is the ranks that differ only in x."""
    edp = dp // ep
    return sorted(sorted(t + tp * (e + ep * (x + edp * s)) for x in range(edp))
                  for t in range(tp) for e in range(ep) for s in range(pp))


@pytest.mark.parametrize("tp, dp, ep", [(1, 4, 2), (2, 4, 2), (1, 6, 3), (1, 4, 1)])
def test_expert_gradients_are_reduced_over_megatrons_expert_data_parallel_groups(tp, dp, ep):
    pp, layers = 2, 2
    j = replace(job(tp=tp, pp=pp, dp=dp, m=1, layers=layers, sp=tp > 1, ep=ep, moe_every=2),
                mlp_grad_bytes=1000, expert_grad_bytes=1500)
    ranks = [f"r{i}" for i in range(tp * dp * pp)]
    msgs = pipeline_step(j, placement(ranks, tp, dp, pp))
    experts = [m for m in msgs if m.comm == "edp"]
    groups = sorted(sorted(int(h[1:]) for h in {m.src for m in experts if m.group == g})
                    for g in {m.group for m in experts})
    assert groups == megatron_expert_dp_groups(tp, dp, ep, pp)
    # one MoE layer a stage (layers 0 and 2 of 4): its MLP's gradients leave the dense ring for the experts' ring
    dense = [m for m in msgs if m.comm == "dp"]
    per_member = {g: sum(m.bytes for m in ms if m.op == "reduce") / len({m.src for m in ms})
                  for g, ms in pd.DataFrame({"g": [m.group for m in dense + experts], "m": dense + experts})
                  .groupby("g")["m"]}
    edp = dp // ep
    for g, b in per_member.items():
        n, total = (edp, 1500) if "experts" in g else (dp, 4000 - 1000)
        assert b == pytest.approx((n - 1) * total / n, abs=1)   # a ring's reduce-scatter: (n-1)/n of the buffer


def test_without_expert_data_parallelism_no_expert_gradient_crosses_the_fabric():
    j = replace(job(tp=1, pp=2, dp=2, m=1, layers=2, ep=2, moe_every=2), mlp_grad_bytes=1000, expert_grad_bytes=1500)
    msgs = pipeline_step(j, grid_of(j))
    assert not [m for m in msgs if m.comm == "edp"]
    assert {m.bytes for m in msgs if m.comm == "dp"} == {(4000 - 1000) // 2}


def test_each_communicator_has_its_own_queue_pairs_as_nccl_connects_them():
    # dp = ep = 2: a stage's two replicas are both an EP group and a DP ring, so the same host
    # pair carries all-to-alls and the gradient AllReduce: NCCL runs them on two communicators
    j = job(tp=2, pp=2, dp=2, m=2, layers=2, sp=True, ep=2, moe_every=1)
    msgs = pipeline_step(j, grid_of(j))
    flows, of_msg = message_flows(msgs)
    comms_of_pair = defaultdict(set)
    for m, f in zip(msgs, of_msg):
        if f >= 0:
            assert flows[f][:4] == (m.src, m.dst, m.tag, m.comm)   # a QP carries one communicator's messages
            comms_of_pair[(m.src, m.dst)].add(m.comm)
    assert {"ep", "dp"} in comms_of_pair.values()
    assert len(flows) == sum(len(c) for c in comms_of_pair.values())
    # channels split a communicator's messages, never merge two communicators
    flows2, _ = message_flows(msgs, channels=2)
    assert {f[:4] for f in flows2} == {f[:4] for f in flows}


def test_the_dag_bound_holds_every_tp_collective_on_the_critical_path():
    # one stage pair, one micro-batch: the critical path runs every block's compute and AllReduce in order
    j = job(tp=2, pp=2, dp=1, m=1, layers=1)
    msgs = pipeline_step(j, grid_of(j))
    bw = 8e9   # 1 byte a ns
    ar_s = 2 * (j.tp - 1) / j.tp * j.tp_bytes / 1e9
    want = (j.fwd_ns + j.bwd_ns) * j.pp / 1e9 + 2 * j.pp * 2 * ar_s + 2 * j.activation_bytes / 1e9
    assert dag_bound(msgs, bw).critical_path_s == pytest.approx(want)


def test_layer_collectives_and_the_iteration_split_from_a_table():
    ms = 1_000_000
    rows = [  # host a: compute 0-40, in a TP AllReduce 40-60 (instance 0), idle 60-70, DP 70-100
        dict(iteration=0, src="a", dst="a", op="compute", group="", instance=-1, release_ns=0, complete_ns=40 * ms),
        dict(iteration=0, src="a", dst="b", op="reduce", group="tp_allreduce", instance=0, release_ns=40 * ms,
             complete_ns=50 * ms),
        dict(iteration=0, src="b", dst="a", op="copy", group="tp_allreduce", instance=0, release_ns=45 * ms,
             complete_ns=60 * ms),
        dict(iteration=0, src="a", dst="b", op="reduce", group="dp_allreduce stage 0", instance=-1,
             release_ns=70 * ms, complete_ns=100 * ms),
        dict(iteration=0, src="b", dst="b", op="compute", group="", instance=-1, release_ns=0, complete_ns=100 * ms),
    ]
    msgs = pd.DataFrame(rows).assign(complete=True)
    lc = layer_collectives(msgs, tp=2, ep=1, tp_bytes=1_000_000, a2a_bytes=0, bw_bps=1e9)
    assert lc["tp_allreduce"]["time_s_mean"] == pytest.approx(0.02)
    assert lc["tp_allreduce"]["bound_s"] == pytest.approx(0.008) and lc["tp_allreduce"]["bytes_per_member"] == 10 ** 6
    iters = pd.DataFrame([dict(iteration=0, complete=True, start_ns=0, end_ns=100 * ms, time_s=0.1)])
    split = iteration_split(msgs, iters)["share"]
    # a: 0.4 compute, 0.2 tp, 0.3 dp, 0.1 idle; b: computes throughout (its messages hide under it)
    assert split["compute"] == pytest.approx(0.7) and split["tp"] == pytest.approx(0.1)
    assert split["dp"] == pytest.approx(0.15) and split["idle"] == pytest.approx(0.05)
    assert sum(split.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("workload, field", [
    ({"tp": 2, "pp": 4, "dp": 4}, "workload.pp"),                        # 32 ranks on 16 hosts
    ({"tp": 1, "pp": 4, "dp": 3, "ep": 2, "moe_every": 1}, "workload.ep"),   # ep does not divide dp
    ({"tp": 1, "pp": 2, "dp": 2, "ep": 2}, "workload.ep"),               # experts without MoE layers
    ({"tp": 2, "pp": 2, "dp": 2, "ep": 2, "moe_every": 1}, "workload.tp_sequence_parallel"),
    ({"rank_order": "pp-dp-tp"}, "workload.rank_order"),
    ({"tp": 1, "pp": 2, "dp": 4, "ep": 2, "moe_every": 1, "num_experts": 3}, "workload.num_experts"),
    ({"tp": 1, "pp": 2, "dp": 4, "num_experts": 4}, "workload.num_experts"),   # experts without MoE layers
])
def test_a_parallel_layout_that_does_not_fit_is_bad_input_naming_the_field(workload, field):
    doc = {"fabric": {"topology": "fattree", "k": 4}, "controller": {"routing": "ecmp"},
           "workload": {"type": "pipeline"} | workload}
    with pytest.raises(InputError) as e:
        load_document("tp", doc, "tp.toml")
    assert e.value.field == field
