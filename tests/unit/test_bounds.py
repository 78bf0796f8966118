"""The DAG lower bound: its three terms on hand-built DAGs, and no feasible schedule of a shipped
pipeline or hybrid job (or of variations of them) ever beating it."""
from collections import defaultdict
from dataclasses import replace
from graphlib import TopologicalSorter

import pytest

from testbed.analysis.bounds import dag_bound, duration_s
from testbed.scenario import load_scenario
from testbed.traffic.collectives import Message
from testbed.traffic.pipeline import PipelineJob, pipeline_step, placement
from testbed.traffic.workload import pipeline_job

B = 100e6
MB = 1_000_000


def compute(i, host, ms, deps=()):
    return Message(i, 0, 0, host, host, 0, tuple(deps), op="compute", tag="compute", duration_ns=int(ms * 1e6))


def send(i, src, dst, nbytes, deps=()):
    return Message(i, 0, 0, src, dst, nbytes, tuple(deps))


def feasible_makespan(msgs, bw_bps):
    """A contention-free list schedule that real NICs could run: each step starts once its
    dependencies are done and its resources are free (a host's compute; a transfer's sending and
    receiving NICs, each serialising at the link rate), in a topological order."""
    by_id = {m.id: m for m in msgs}
    done = {}
    free = defaultdict(float)
    for i in TopologicalSorter({m.id: [d for d in m.deps if d in by_id] for m in msgs}).static_order():
        m = by_id[i]
        ready = max((done[d] for d in m.deps if d in by_id), default=0.0)
        res = [("cpu", m.src)] if m.op == "compute" else [("tx", m.src), ("rx", m.dst)]
        start = max([ready] + [free[r] for r in res])
        done[i] = start + duration_s(m, bw_bps)
        for r in res:
            free[r] = done[i]
    return max(done.values())


def test_critical_path_with_compute_and_transfers():
    msgs = [compute(0, "a", 10), send(1, "a", "b", MB, [0]), compute(2, "b", 5, [1])]
    b = dag_bound(msgs, B)
    assert b.critical_path_s == pytest.approx(0.010 + 0.080 + 0.005)
    assert b.bound_s == b.critical_path_s and b.binding == "critical_path"
    assert feasible_makespan(msgs, B) == pytest.approx(b.bound_s)   # a chain: the bound is reached


def test_the_busiest_nic_binds_when_transfers_are_independent():
    fan_out = [send(i, "a", f"r{i}", MB) for i in range(3)]
    assert dag_bound(fan_out, B).busiest_tx_s == pytest.approx(0.240)
    assert dag_bound(fan_out, B).binding == "busiest_tx"
    fan_in = [send(i, f"s{i}", "a", MB) for i in range(3)]
    assert dag_bound(fan_in, B).binding == "busiest_rx" and dag_bound(fan_in, B).bound_s == pytest.approx(0.240)
    # the critical path alone would say 80 ms
    assert dag_bound(fan_in, B).critical_path_s == pytest.approx(0.080)


def test_a_hosts_compute_binds_when_its_steps_are_independent():
    msgs = [compute(i, "a", 10) for i in range(4)] + [send(4, "b", "c", 100_000)]
    b = dag_bound(msgs, B)
    assert b.binding == "busiest_compute" and b.bound_s == pytest.approx(0.040)


def test_dependencies_outside_the_set_count_as_done():
    msgs = [send(5, "a", "b", MB, [1, 2]), compute(6, "b", 1, [5])]
    assert dag_bound(msgs, B).bound_s == pytest.approx(0.081)


def test_bad_rate_is_refused():
    with pytest.raises(ValueError):
        dag_bound([send(0, "a", "b", 1)], 0)


def _jobs():
    """The shipped pipeline and hybrid jobs, and variations of them: more replicas, heavier
    activations, compute that dominates or vanishes."""
    out = []
    for name in ("pipeline-fattree", "hybrid-torus", "megatron-fattree"):
        j = pipeline_job(load_scenario(name))
        out.append((name, j))
        out.append((f"{name} 2 MB activations", replace(j, activation_bytes=2 * MB)))
        out.append((f"{name} no compute", replace(j, fwd_ns=0, bwd_ns=0)))
        out.append((f"{name} compute x20", replace(j, fwd_ns=20 * j.fwd_ns, bwd_ns=20 * j.bwd_ns)))
    j = pipeline_job(load_scenario("megatron-fattree"))
    out.append(("megatron-fattree TP without sequence parallelism, no MoE",
                replace(j, sequence_parallel=False, ep=1, moe_every=0, a2a_bytes=0)))
    out.append(("pp4 dp4 m8", PipelineJob(4, 4, 8, 250_000, 4 * MB, 5_000_000, 10_000_000)))
    out.append(("pp4 dp1 m8 2 MB", PipelineJob(4, 1, 8, 2 * MB, 4 * MB, 5_000_000, 10_000_000)))
    return out


@pytest.mark.parametrize("name,job", _jobs(), ids=[n for n, _ in _jobs()])
def test_no_feasible_schedule_beats_the_bound(name, job):
    grid = placement([f"h{i}" for i in range(job.tp * job.dp * job.pp)], job.tp, job.dp, job.pp)
    msgs = [m for m in pipeline_step(job, grid) if m.iteration == 0]
    bound = dag_bound(msgs, B).bound_s
    assert bound > 0
    assert feasible_makespan(msgs, B) >= bound * (1 - 1e-12), name
