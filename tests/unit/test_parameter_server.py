"""The parameter-server workload's plan (testbed.traffic.parameter_server), and the synchronisation
share every computing workload reports (testbed.analysis.training), on hand-worked cases."""
import pandas as pd
import pytest

from testbed.analysis.bounds import planned_bound
from testbed.analysis.training import training_section
from testbed.errors import InputError
from testbed.scenario import load_document
from testbed.traffic.parameter_server import parameter_server

KB = 1024


def by(msgs, **kw):
    return [m for m in msgs if all(getattr(m, k) == v for k, v in kw.items())]


def test_bsp_pushes_every_shard_aggregates_once_all_are_in_and_pulls_each_back():
    workers, servers = ["w0", "w1", "w2"], ["s0", "s1"]
    msgs = parameter_server(workers, servers, 100 * KB, 2, compute_ns=5_000_000, aggregate_ns=1_000_000)
    it0 = [m for m in msgs if m.iteration == 0]
    pushes, pulls = by(it0, op="push"), by(it0, op="pull")
    assert len(pushes) == len(pulls) == 6 and {(m.src, m.dst) for m in pushes} == {(w, s) for w in workers for s in servers}
    assert sum(m.bytes for m in pushes if m.src == "w0") == 100 * KB == sum(m.bytes for m in pulls if m.dst == "w0")
    aggs = by(it0, tag="aggregate")
    assert len(aggs) == 2 and all(len(a.deps) == 3 for a in aggs)   # a shard waits for every worker
    assert all(m.deps == (next(a.id for a in aggs if a.src == m.src),) for m in pulls)
    # the next iteration's compute on a worker waits for every shard it pulls, and only for those
    nxt = by([m for m in msgs if m.iteration == 1], tag="compute")
    assert {c.src: set(c.deps) for c in nxt} == {w: {m.id for m in pulls if m.dst == w} for w in workers}


def test_async_answers_each_push_alone_and_a_colocated_shard_stays_on_its_host():
    msgs = parameter_server(["w0", "w1"], ["s0"], 10 * KB, 1, 1000, 100, sync="async")
    aggs = by(msgs, tag="aggregate")
    assert len(aggs) == 2 and all(len(a.deps) == 1 for a in aggs)
    colo = parameter_server(["w0", "w1"], ["w0"], 10 * KB, 1, 1000, 100)
    assert not [m for m in colo if m.op != "compute" and m.src == m.dst]   # no transfer to itself
    (agg,) = by(colo, tag="aggregate")
    (c0,) = by(colo, tag="compute", src="w0")
    assert c0.id in agg.deps and len(by(colo, op="push")) == len(by(colo, op="pull")) == 1


def test_the_bound_is_the_servers_incast_when_it_outweighs_the_critical_path():
    msgs = parameter_server([f"w{i}" for i in range(12)], ["s0", "s1", "s2", "s3"], 1 << 20, 1, 40_000_000, 2_000_000)
    bound, _formula, terms = planned_bound("parameter_server", 16, 1 << 20, 100e6, msgs)
    assert terms["binding"] == "busiest_tx" and bound == pytest.approx(12 * (1 << 18) * 8 / 100e6)


def test_the_sync_share_is_the_workers_wait_per_iteration():
    # two hosts compute 30 and 60 ms of a 100 ms iteration: they wait 0.7 and 0.4 of it, 0.55 on average;
    # a server's aggregation is not a worker's compute
    ms = 1_000_000
    msgs = pd.DataFrame([
        {"tag": "compute", "src": "w0", "iteration": 0, "release_ns": 0, "complete_ns": 30 * ms, "complete": True},
        {"tag": "compute", "src": "w1", "iteration": 0, "release_ns": 0, "complete_ns": 60 * ms, "complete": True},
        {"tag": "aggregate", "src": "s0", "iteration": 0, "release_ns": 60 * ms, "complete_ns": 61 * ms,
         "complete": True},
        {"tag": "collective", "src": "w0", "iteration": 0, "release_ns": 30 * ms, "complete_ns": 100 * ms,
         "complete": True}])
    iters = pd.DataFrame([{"iteration": 0, "complete": True, "time_s": 0.1},
                          {"iteration": 1, "complete": False, "time_s": float("nan")}])
    t = training_section(msgs, iters)
    assert t["sync_share_by_iteration"] == [pytest.approx(0.55), None] and t["sync_share"] == pytest.approx(0.55)
    assert t["hosts_computing"] == 2
    assert training_section(msgs[msgs["tag"] != "compute"], iters) is None   # nothing computes: no section


@pytest.mark.parametrize("workload, field", [
    ({"ps_servers": 16}, "workload.ps_servers"),
    ({"ps_workers": 15, "ps_servers": 2}, "workload.ps_workers"),
    ({"ps_placement": "colocated", "ps_workers": 2, "ps_servers": 3}, "workload.ps_servers"),
    ({"ps_sync": "ssp"}, "workload.ps_sync"),
])
def test_a_parameter_server_that_does_not_fit_is_bad_input_naming_the_field(workload, field):
    doc = {"fabric": {"topology": "fattree", "k": 4}, "controller": {"routing": "ecmp"},
           "workload": {"type": "parameter_server"} | workload}
    with pytest.raises(InputError) as e:
        load_document("ps", doc, "ps.toml")
    assert e.value.field == field


def test_ddp_overlaps_each_buckets_allreduce_with_the_backward_that_follows_it():
    from testbed.traffic.ddp import ddp_step
    ranks = ["a", "b", "c"]
    on = ddp_step(ranks, [6144, 6144], fwd_ns=2000, bwd_ns=4000, overlap=True, iterations=2)
    off = ddp_step(ranks, [6144, 6144], fwd_ns=2000, bwd_ns=4000, overlap=False, iterations=2)
    for msgs in (on, off):
        comp = [m for m in msgs if m.op == "compute" and m.iteration == 0 and m.src == "a"]
        assert [m.duration_ns for m in comp] == [1000, 1000, 2000, 2000]   # forward, then backward, in slices
        sent = [m for m in msgs if m.op != "compute" and m.iteration == 0 and m.src == "a"]
        # a ring AllReduce: a rank sends 2(N-1)/N of each bucket
        assert sum(m.bytes for m in sent) == 2 * (2 * 2 * 6144 // 3)   # 2 buckets of 6144 bytes, N = 3
    by_id = {m.id: m for m in on}
    bwd0 = next(m for m in on if m.iteration == 0 and m.src == "a" and m.step == 2)
    first = [m for m in on if m.iteration == 0 and m.group == "bucket 0" and m.src == "a"][0]
    assert bwd0.id in first.deps   # bucket 0 leaves once its slice of the backward is done
    first_off = [m for m in off if m.iteration == 0 and m.group == "bucket 0" and m.src == "a"][0]
    last_bwd = next(m for m in off if m.iteration == 0 and m.src == "a" and m.step == 3)
    assert last_bwd.id in first_off.deps   # without overlap, after the whole backward
    # the next forward's first slice needs only the bucket holding the first layers (the last one)
    f0 = next(m for m in on if m.iteration == 1 and m.src == "a" and m.step == 0)
    assert {by_id[d].group for d in f0.deps} == {"bucket 1"}
    f0_off = next(m for m in off if m.iteration == 1 and m.src == "a" and m.step == 0)
    assert {m.group for m in off if m.id in f0_off.deps} == {"bucket 0", "bucket 1"}


def test_ddp_buckets_are_sized_as_pytorch_assigns_them():
    # torch/nn/parallel/distributed.py: the first bucket holds _DEFAULT_FIRST_BUCKET_BYTES (1 MiB),
    # each later one bucket_cap_mb (25 MiB by default); the backward fills them in order
    from testbed.traffic.ddp import BUCKET_CAP_BYTES, FIRST_BUCKET_BYTES, bucket_sizes, shares
    MiB = 1 << 20
    assert (FIRST_BUCKET_BYTES, BUCKET_CAP_BYTES) == (MiB, 25 * MiB)
    assert bucket_sizes(60 * MiB) == [MiB, 25 * MiB, 25 * MiB, 9 * MiB]
    assert bucket_sizes(MiB // 2) == [MiB // 2]
    assert bucket_sizes(4 * MiB, cap_bytes=MiB) == [MiB] * 4
    # each bucket's slice of the compute is its share of the bytes
    assert shares(600, [MiB, 2 * MiB]) == [200, 400]


def test_a_ranks_bucket_allreduces_run_one_after_another_as_nccl_runs_a_communicators_collectives():
    from testbed.traffic.ddp import ddp_step
    ranks = ["a", "b", "c"]
    for overlap in (True, False):
        msgs = ddp_step(ranks, [6144, 12288], fwd_ns=2000, bwd_ns=4000, overlap=overlap, iterations=1)
        by_id = {m.id: m for m in msgs}
        for r in ranks:
            first1 = [m for m in msgs if m.group == "bucket 1" and m.src == r][0]
            last0 = max(m.id for m in msgs if m.group == "bucket 0" and m.dst == r)
            # bucket 1 leaves rank r only once bucket 0 is reduced there (its last message to r)
            assert last0 in first1.deps, (r, [by_id[d].group for d in first1.deps])
