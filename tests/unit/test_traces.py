"""Trace importers on the real files in traces/ (copied from ../shared/traces) and on broken ones."""
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest

from testbed.errors import InputError
from testbed.traffic.collectives import data_flow
from testbed.traffic.traces import (COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, COMP_NODE, TraceError, chakra_messages,
                                    read_chakra, read_simai, simai_messages)

TRACES = Path(__file__).resolve().parents[2] / "traces"
RING8 = TRACES / "chakra" / "custom_ring_allreduce_8npus_1MB"
MIB = 1 << 20


def ranks(n):
    return [f"h{i}" for i in range(n)]


def sent_per_rank(msgs, iteration=0):
    c = Counter()
    for m in msgs:
        if m.op != "compute" and m.iteration == iteration:
            c[m.src] += m.bytes
    return c


def test_chakra_nodes_read_by_hand():
    (node,) = read_chakra(TRACES / "chakra" / "all_reduce_4npus_1MB" / "all_reduce.1.et")
    assert node.type == COMM_COLL_NODE and node.attrs == {"is_cpu_op": 0, "comm_type": 0, "comm_size": MIB}
    nodes = read_chakra(RING8 / "custom_allreduce.0.et")
    assert Counter(n.type for n in nodes) == {COMM_SEND_NODE: 14, COMM_RECV_NODE: 14, COMP_NODE: 7}
    assert {n.attrs["comm_size"] for n in nodes if n.type != COMP_NODE} == {128 << 10}
    assert {n.attrs["comm_dst"] for n in nodes if n.type == COMM_SEND_NODE} == {1}   # rank 0 sends to 1
    assert {n.attrs["comm_src"] for n in nodes if n.type == COMM_RECV_NODE} == {7}   # and hears from 7
    assert {n.duration_us for n in nodes if n.type == COMP_NODE} == {7}
    assert nodes[1].deps == (0,) and nodes[0].deps == ()


@pytest.mark.parametrize("folder,n,per_rank", [
    ("all_reduce_4npus_1MB", 4, 2 * 3 / 4 * MIB), ("all_reduce_16npus_1MB", 16, 2 * 15 / 16 * MIB),
    ("all_to_all_4npus_1MB", 4, 3 / 4 * MIB), ("custom_ring_allreduce_8npus_1MB", 8, 14 * (128 << 10)),
])
def test_chakra_traces_become_the_traffic_they_describe(folder, n, per_rank):
    msgs = chakra_messages(TRACES / "chakra" / folder, ranks(n), 1.0, 1.0, "ring", 2)
    assert set(sent_per_rank(msgs).values()) == {per_rank}
    g = nx.DiGraph([(d, m.id) for m in msgs for d in m.deps])
    assert nx.is_directed_acyclic_graph(g)
    first = {m.id for m in msgs if m.iteration == 0}
    assert all(first <= nx.ancestors(g, m.id) for m in msgs if m.iteration == 1 and m.deps)


def test_chakra_ring_pairs_sends_with_receives_and_keeps_each_ranks_order():
    msgs = chakra_messages(RING8, ranks(8), 1.0, 2.0, "ring", 1)
    p2p = [m for m in msgs if m.op == "p2p"]
    assert Counter((m.src, m.dst) for m in p2p) == {(f"h{r}", f"h{(r + 1) % 8}"): 14 for r in range(8)}
    compute = [m for m in msgs if m.op == "compute"]
    assert len(compute) == 56 and {m.duration_ns for m in compute} == {14_000}  # 7 us x time_scale 2
    # a reduction waits for the receive before it: the transfer from the previous rank
    by_id = {m.id: m for m in msgs}
    for c in compute:
        assert any(by_id[d].op == "p2p" and by_id[d].dst == c.src for d in c.deps)


def test_chakra_allreduce_sums_every_contribution_once():
    msgs = chakra_messages(TRACES / "chakra" / "all_reduce_16npus_1MB", ranks(16), 1.0, 1.0, "halving_doubling", 1)
    final = data_flow(msgs, {r: {s: frozenset([r]) for s in range(16)} for r in ranks(16)})
    assert all(v == frozenset(ranks(16)) for r in ranks(16) for v in final[r].values())


def test_simai_micro_allreduce_by_hand():
    w = read_simai(TRACES / "simai" / "microAllReduce.txt")
    assert w.parallelism == "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
    assert w.params["all_gpus"] == 8 and w.params["model_parallel_NPU_group"] == 8
    assert [(x.name, x.fwd_ns, x.fwd_comm, x.fwd_bytes) for x in w.layers] == [
        ("embedding_layer", 556000, "ALLREDUCE", 16 * MIB), ("embedding_layer", 556000, "ALLREDUCE", 64 * MIB)]
    msgs = simai_messages(TRACES / "simai" / "microAllReduce.txt", ranks(8), 1 / 64, 1.0, "ring", 2)
    # per step: two forward AllReduces (TP group = all 8) of 256 KiB and 1 MiB after 1/64
    assert set(sent_per_rank(msgs).values()) == {2 * 7 / 8 * (256 << 10) + 2 * 7 / 8 * MIB}
    compute = [m for m in msgs if m.op == "compute" and m.iteration == 0]
    assert len(compute) == 8 * (2 + 2 * 3)  # per rank: 2 forwards, then ig, wg, update per layer
    assert sorted({m.duration_ns for m in compute}) == [1, 556000]


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data) if isinstance(data, bytes) else p.write_text(data)
    return p


@pytest.mark.parametrize("text,where", [
    ("", "line 1"),
    ("HYBRID all_gpus: 8\n1\nl -1 1 ALLREDUCE 10 1 NONE 0 1 NONE 0 1\n", "line 1"),    # no model_parallel_NPU_group
    ("X all_gpus: 8 model_parallel_NPU_group: 8\n2\nl -1 1 ALLREDUCE 10 1 NONE 0 1 NONE 0 1\n", "line 3"),  # truncated
    ("X all_gpus: 8 model_parallel_NPU_group: 8\n1\nl -1 1 ALLREDUCE 10 1 NONE 0 1\n", "line 3"),
    ("X all_gpus: 8 model_parallel_NPU_group: 8\n1\nl -1 1 BROADCAST 10 1 NONE 0 1 NONE 0 1\n", "line 3, fwd_comm_type"),
    ("X all_gpus: 8 model_parallel_NPU_group: 8\n1\nl -1 x ALLREDUCE 10 1 NONE 0 1 NONE 0 1\n", "line 3, fwd_compute"),
])
def test_malformed_simai_names_file_and_position(tmp_path, text, where):
    p = write(tmp_path, "w.txt", text)
    with pytest.raises(TraceError) as e:
        simai_messages(p, ranks(8), 1.0, 1.0, "ring", 1)
    assert isinstance(e.value, InputError) and e.value.where == str(p) and e.value.field == where


def test_truncated_chakra_names_file_and_byte(tmp_path):
    good = (RING8 / "custom_allreduce.0.et").read_bytes()
    p = write(tmp_path, "t.0.et", good[:-10])
    with pytest.raises(TraceError) as e:
        read_chakra(p)
    assert e.value.where == str(p) and e.value.field.startswith("byte ")
    with pytest.raises(TraceError, match="truncated varint"):
        read_chakra(write(tmp_path, "v.0.et", b"\xff"))


def test_chakra_receive_without_send_is_an_error(tmp_path):
    (tmp_path / "x").mkdir()
    for r in range(2):
        # rank r only receives from the other: a node that can never run
        (tmp_path / "x" / f"t.{r}.et").write_bytes((RING8 / "custom_allreduce.0.et").read_bytes())
    with pytest.raises(TraceError, match="can never run|comm_dst"):
        chakra_messages(tmp_path / "x", ranks(2), 1.0, 1.0, "ring", 1)


def test_a_bad_trace_is_bad_input_before_anything_starts(tmp_path):
    import subprocess
    import sys
    bad = write(tmp_path, "bad.txt", "X all_gpus: 8 model_parallel_NPU_group: 8\n3\nl -1 1 ALLREDUCE 10 1 NONE 0 1 NONE 0 1\n")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "testbed", "run", "simai-microallreduce", "--set",
                          f"workload.trace={bad}"], cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert str(bad) in out.stdout and "line 3" in out.stdout and "truncated" in out.stdout
    out = subprocess.run([sys.executable, "-m", "testbed", "run", "chakra-ring8", "--set",
                          f"workload.trace={tmp_path / 'nowhere'}"], cwd=root, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "workload.trace" in out.stdout
