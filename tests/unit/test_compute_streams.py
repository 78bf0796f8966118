"""The compiled data plane's compute steps (no root: a plan of compute steps opens no socket): a
host runs its steps one at a time, in the order they were released, as one stream of a GPU runs its
kernels (SimAI and ASTRA-sim run a rank's compute the same way); different hosts' steps overlap.
The DAG bound's busiest-host compute term (testbed.analysis.bounds) rests on this."""
import dataclasses

from testbed.analysis.bounds import dag_bound
from testbed.scenario import load_scenario
from testbed.traffic.collectives import Message
from testbed.traffic.engine import Engine
from testbed.traffic.plan import EnginePlan, MessageSpec

MS = 1_000_000


def run(tmp_path, steps):
    """steps: (host, duration_ns, deps); the data plane's release, start and completion of each, in
    ns from the first release."""
    (tmp_path / "raw").mkdir()
    sc = load_scenario("allreduce-torus")
    msgs = tuple(MessageSpec(i, -1, 0, tuple(deps), dur, host) for i, (host, dur, deps) in enumerate(steps))
    engine = Engine(EnginePlan(out_dir=str(tmp_path), payload_bytes=4096, time_limit_s=20, stall_timeout_s=10,
                               nic_lead_ns=MS, transport=dataclasses.asdict(sc.transport),
                               dcqcn=dataclasses.asdict(sc.dcqcn), hosts=(), flows=(), messages=msgs))
    res = engine.run()
    assert res["reason"] == "complete" and res["messages_completed"] == len(steps)
    t = engine.message_table()
    t0 = min(t["release_ns"])
    return {k: [x - t0 for x in t[k]] for k in ("release_ns", "first_tx_ns", "complete_ns")}


def test_a_hosts_compute_steps_run_one_at_a_time_in_release_order(tmp_path):
    steps = [("a", 20 * MS, ()), ("a", 20 * MS, ()), ("b", 20 * MS, ()), ("a", 10 * MS, (0,))]
    t = run(tmp_path, steps)
    # a's two independent steps: the second waits for the first; b's runs beside them
    assert t["first_tx_ns"][:3] == [0, 20 * MS, 0] and t["complete_ns"][:3] == [20 * MS, 40 * MS, 20 * MS]
    # released when step 0 ended, it starts when a's stream is free: after step 1
    assert t["release_ns"][3] == 20 * MS and t["first_tx_ns"][3] == 40 * MS and t["complete_ns"][3] == 50 * MS
    # and the bound, whose compute term is a's 50 ms, holds against it exactly
    dag = dag_bound([Message(i, 0, 0, h, h, 0, deps, op="compute", tag="compute", duration_ns=d)
                     for i, (h, d, deps) in enumerate(steps)], 1e9)
    assert dag.busiest_compute_s == 0.050 and max(t["complete_ns"]) / 1e9 == dag.bound_s


def test_a_parameter_servers_aggregations_queue_on_its_one_stream(tmp_path):
    # asynchronous parameter server: three workers' pushes (here compute steps of the workers) each
    # set off an aggregation on the one server; they cannot run at once on its GPU
    steps = [("w0", 5 * MS, ()), ("w1", 5 * MS, ()), ("w2", 5 * MS, ()),
             ("ps", 30 * MS, (0,)), ("ps", 30 * MS, (1,)), ("ps", 30 * MS, (2,))]
    t = run(tmp_path, steps)
    starts = sorted(t["first_tx_ns"][3:])
    assert starts == [5 * MS, 35 * MS, 65 * MS] and max(t["complete_ns"]) == 95 * MS
