"""The compiled data plane's compute steps (no root: a plan of compute steps opens no socket): a
host runs its steps one at a time, in the order they were released, as one stream of a GPU runs its
kernels (SimAI and ASTRA-sim run a rank's compute the same way); different hosts' steps overlap.
The DAG bound's busiest-host compute term (testbed.analysis.bounds) rests on this."""
import dataclasses
import time

import pytest

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


def test_the_heartbeat_carries_each_streams_compute_time_up_to_the_beat(tmp_path):
    # the live synchronisation share's input (nicdp.c sync_busy, read by the northbound API): at
    # every beat, each stream's time in steps tagged "compute" so far, the running one's part
    # included; an optimizer's update and a server's aggregation are not weighed
    import threading
    from testbed.northbound.sync_share import LiveSyncShare
    from testbed.records import read_compute_busy
    steps = [("a", 300 * MS, (), "compute"), ("a", 300 * MS, (), "compute"), ("a", 200 * MS, (), "update"),
             ("b", 500 * MS, (), "aggregate"), ("c", 100 * MS, (), "compute")]
    (tmp_path / "raw").mkdir()
    sc = load_scenario("allreduce-torus")
    msgs = tuple(MessageSpec(i, -1, 0, deps, dur, host, tag) for i, (host, dur, deps, tag) in enumerate(steps))
    engine = Engine(EnginePlan(out_dir=str(tmp_path), payload_bytes=4096, time_limit_s=20, stall_timeout_s=10,
                               nic_lead_ns=MS, transport=dataclasses.asdict(sc.transport),
                               dcqcn=dataclasses.asdict(sc.dcqcn), hosts=(), flows=(), messages=msgs))
    seen, done = {}, threading.Event()

    def watch():   # as the API reads it: whenever it likes, while the data plane runs
        while not done.is_set():
            b = read_compute_busy(engine.folder.heartbeat, 0, 3)
            if b is not None:
                seen[b.beat_ns] = b
            time.sleep(0.005)

    reader = threading.Thread(target=watch)
    reader.start()
    try:
        res = engine.run()
    finally:
        done.set()
        reader.join()
    final = read_compute_busy(engine.folder.heartbeat, 0, 3)
    seen[final.beat_ns] = final
    assert res["reason"] == "complete"
    a = engine.arrays
    began, ended = a["first_tx_ns"], a["complete_ns"]
    weighed = {"a": [0, 1], "b": [], "c": [4]}   # streams in host order

    def expected(t):
        return tuple(sum(max(0, min(t, int(ended[m])) - int(began[m])) for m in weighed[h]) for h in "abc")

    beats = sorted(seen.values(), key=lambda b: b.beat_ns)
    assert len(beats) >= 4, "the data plane beats every 200 ms: a run of 800 ms has four or more"
    assert any(0 < b.busy_ns[0] < 600 * MS for b in beats), "no beat fell inside a's compute"
    for b in beats:
        assert b.started_ns == res["start_ns"] and b.busy_ns == expected(b.beat_ns)
    assert final.busy_ns == (600 * MS, 0, 100 * MS)

    # the API's shares from them: a and c weighed, b (it only aggregates) not a worker
    live = LiveSyncShare(["a", "b", "c"], [True, False, True], dilation=1.0)
    for b in beats:
        doc = live.update(b)
    span = final.beat_ns - final.started_ns
    assert doc["hosts_computing"] == 2 and [h["host"] for h in doc["by_host"]] == ["a", "c"]
    assert doc["sync_share_since_start"] == pytest.approx(1 - (700 * MS) / (2 * span))
