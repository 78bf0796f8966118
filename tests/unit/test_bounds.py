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


def optimum_makespan(msgs, bw_bps):
    """The exact optimum, by search: the least makespan of any schedule in which a host runs one
    compute step at a time (its one stream) and a NIC sends one transfer and receives one at a time,
    each at the link rate, every step after its dependencies. Some optimal schedule is the
    semi-active one of its steps taken in order of their start times, so trying every order that
    respects the dependencies finds it."""
    by_id = {m.id: m for m in msgs}
    deps = {m.id: [d for d in m.deps if d in by_id] for m in msgs}

    def res(m):
        return [("cpu", m.src)] if m.op == "compute" else [("tx", m.src), ("rx", m.dst)]
    best = [float("inf")]

    def go(done, free, left, span):
        if span >= best[0]:
            return
        if not left:
            best[0] = span
            return
        for i in sorted(left):
            if all(d in done for d in deps[i]):
                m = by_id[i]
                start = max([max((done[d] for d in deps[i]), default=0.0)] + [free.get(r, 0.0) for r in res(m)])
                end = start + duration_s(m, bw_bps)
                go({**done, i: end}, {**free, **{r: end for r in res(m)}}, left - {i}, max(span, end))
    go({}, {}, frozenset(by_id), 0.0)
    return best[0]


def random_dag(seed, n):
    import random
    rnd = random.Random(seed)
    hosts = ["a", "b", "c"]
    msgs = []
    for i in range(n):
        deps = tuple(sorted(rnd.sample(range(i), k=min(i, rnd.choice([0, 1, 1, 2]))))) if i else ()
        if rnd.random() < 0.4:
            msgs.append(compute(i, rnd.choice(hosts), rnd.choice([1, 5, 20, 40]), deps))
        else:
            src, dst = rnd.sample(hosts, 2)
            msgs.append(send(i, src, dst, rnd.choice([100_000, MB // 2, MB]), deps))
    return msgs


@pytest.mark.parametrize("seed", range(40))
def test_the_bound_never_exceeds_the_exact_optimum_of_a_small_dag(seed):
    msgs = random_dag(seed, 7)
    assert dag_bound(msgs, B).bound_s <= optimum_makespan(msgs, B) * (1 + 1e-12)


def in_order(msgs, order, bw_bps):
    """The semi-active schedule of the steps taken in this order: each as early as its dependencies
    and its resources (freed by the steps before it in the order) allow."""
    by_id, done, free = {m.id: m for m in msgs}, {}, {}
    for i in order:
        m = by_id[i]
        res = [("cpu", m.src)] if m.op == "compute" else [("tx", m.src), ("rx", m.dst)]
        start = max([max((done[d] for d in m.deps if d in by_id), default=0.0)] + [free.get(r, 0.0) for r in res])
        done[i] = start + duration_s(m, bw_bps)
        free.update({r: done[i] for r in res})
    return max(done.values())


def test_the_search_finds_what_a_greedy_order_misses():
    # the search is what the bound is held to, so it must be exact: b's long independent step first
    # (id order) leaves the chain 0 -> 2 -> 3 waiting; the optimum runs the chain's step first
    msgs = [send(0, "a", "b", MB // 8), compute(1, "b", 40), compute(2, "b", 40, [0]), send(3, "b", "c", MB // 2, [2])]
    assert in_order(msgs, [0, 1, 2, 3], B) == pytest.approx(0.120)
    assert optimum_makespan(msgs, B) == pytest.approx(0.090) == in_order(msgs, [0, 2, 1, 3], B)
    assert dag_bound(msgs, B).bound_s == pytest.approx(0.090)       # the critical path: tight


def test_a_servers_aggregations_are_one_stream_and_bind():
    # asynchronous parameter server, three workers and one server: each push sets off a 50 ms
    # aggregation on the server, which runs them one at a time (the data plane does too:
    # tests/unit/test_compute_streams.py), so the server's compute binds
    msgs = []
    for w in range(3):
        msgs += [compute(4 * w, f"w{w}", 5), send(4 * w + 1, f"w{w}", "ps", MB // 10, [4 * w]),
                 compute(4 * w + 2, "ps", 50, [4 * w + 1]), send(4 * w + 3, "ps", f"w{w}", MB // 10, [4 * w + 2])]
    b = dag_bound(msgs, B)
    assert b.binding == "busiest_compute" and b.bound_s == pytest.approx(0.150)
    assert b.bound_s <= optimum_makespan(msgs, B)
