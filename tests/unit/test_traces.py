"""Trace importers on the real files in traces/ (copied from ../shared/traces) and on broken ones."""
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest

from testbed.errors import InputError
from testbed.traffic.collectives import data_flow
from testbed.traffic.workload import message_flows
from testbed.traffic.traces import (COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, COMP_NODE, TraceError, chakra_messages,
                                    SimaiWorkload, read_chakra, read_simai, simai_groups,
                                    simai_messages)

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
    # per rank: 2 forwards and each forward AllReduce's update_time after it, then ig and wg per layer;
    # SimAI's Ticks are 1 ns cycles, so 556000 is 556 us
    assert len(compute) == 8 * (2 + 2 + 2 * 2)
    assert Counter(m.tag for m in compute) == Counter({"compute": 8 * 6, "update": 8 * 2})
    assert sorted({m.duration_ns for m in compute}) == [1, 556000]


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data) if isinstance(data, bytes) else p.write_text(data)
    return p


@pytest.mark.parametrize("text,where", [
    ("", "line 1"),
    ("HYBRID_TRANSFORMER all_gpus: 8\n1\nl -1 1 ALLREDUCE 10 1 NONE 0 1 NONE 0 1\n", "line 1"),    # no model_parallel_NPU_group
    ("HYBRID_TRANSFORMER all_gpus: 8 model_parallel_NPU_group: 8\n2\nl -1 1 ALLREDUCE 10 1 NONE 0 1 NONE 0 1\n", "line 3"),  # truncated
    ("HYBRID_TRANSFORMER all_gpus: 8 model_parallel_NPU_group: 8\n1\nl -1 1 ALLREDUCE 10 1 NONE 0 1\n", "line 3"),
    ("HYBRID_TRANSFORMER all_gpus: 8 model_parallel_NPU_group: 8\n1\nl -1 1 ALLREDUCE 10 1 NONE 0 1 NONE 0 1 7\n", "line 3"),                                  # a 13th field
    ("HYBRID_TRANSFORMER all_gpus: 8 model_parallel_NPU_group: 8\n1\nl -1 1 BROADCAST 10 1 NONE 0 1 NONE 0 1\n", "line 3, fwd_comm_type"),
    ("HYBRID_TRANSFORMER all_gpus: 8 model_parallel_NPU_group: 8\n1\nl -1 1 ALLREDUCEALLTOALL 10 1 NONE 0 1 NONE 0 1\n", "line 3, fwd_comm_type"),
    ("HYBRID_TRANSFORMER all_gpus: 8 model_parallel_NPU_group: 8\n1\nl -1 x ALLREDUCE 10 1 NONE 0 1 NONE 0 1\n", "line 3, fwd_compute"),
    ("HYBRID_TRANSFORMER all_gpus: 8 model_parallel_NPU_group: 8\n1\nl -1 -5 ALLREDUCE 10 1 NONE 0 1 NONE 0 1\n", "line 3, fwd_compute"),
    ("HYBRID_TRANSFORMER all_gpus: 8 model_parallel_NPU_group: 8 tp_overlap: 1\n1\nl -1 1 ALLREDUCE 10 1 NONE 0 1 NONE 0 1\n", "line 1, tp_overlap"),            # a field SimAI does not read
    ("HYBRID_TRANSFORMER all_gpus: 8 model_parallel_NPU_group: 8 pp: 2\n1\nl -1 1 ALLREDUCE 10 1 NONE 0 1 NONE 0 1\n", "line 1, pp_comm"),                         # stages without their transfer size
    ("HYBRID_TRANSFORMER all_gpus: 8 model_parallel_NPU_group: 8 pp: 2 pp_comm: 1.5\n1\nl -1 1 ALLREDUCE 10 1 NONE 0 1 NONE 0 1\n", "line 1, pp_comm"),
    ("HYBRID_TRANSFORMER all_gpus: 8 model_parallel_NPU_group: 8 checkpoints: 1 0\n1\nl -1 1 ALLREDUCE 10 1 NONE 0 1 NONE 0 1\n", "line 1"),
    ("MICRO\n1\nl -1 1 ALLREDUCE 10 1 NONE 0 1 NONE 0 1\n", "line 1, parallelism"),                         # SimAI's, not replayed
    ("X all_gpus: 8\n1\nl -1 1 ALLREDUCE 10 1 NONE 0 1 NONE 0 1\n", "line 1, parallelism"),
    # SimAI's EP groups are consecutive TP groups: across stages once pp > 1
    ("HYBRID_TRANSFORMER model_parallel_NPU_group: 2 ep: 2 pp: 2 all_gpus: 8 pp_comm 64\n1\n"
     "l -1 1 ALLTOALL_EP 10 1 NONE 0 1 NONE 0 1\n", "line 1, ep"),
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
    bad = write(tmp_path, "bad.txt", "HYBRID_TRANSFORMER all_gpus: 8 model_parallel_NPU_group: 8\n3\n"
                                     "l -1 1 ALLREDUCE 10 1 NONE 0 1 NONE 0 1\n")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "testbed", "run", "simai-microallreduce", "--set",
                          f"workload.trace={bad}"], cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert str(bad) in out.stdout and "line 3" in out.stdout and "truncated" in out.stdout
    out = subprocess.run([sys.executable, "-m", "testbed", "run", "chakra-ring8", "--set",
                          f"workload.trace={tmp_path / 'nowhere'}"], cwd=root, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "workload.trace" in out.stdout


def simai_file(tmp_path, header, *layers):
    return write(tmp_path, "w.txt", header + f"\n{len(layers)}\n" + "".join(x + "\n" for x in layers))


def test_simai_groups_are_simais_own():
    # MockNcclGroup with 8 GPUs, tp 2, ep 2: dp 4, dp_ep 2 (worked by hand from its loops)
    w = SimaiWorkload("HYBRID_TRANSFORMER", {"all_gpus": 8, "model_parallel_NPU_group": 2, "ep": 2}, ())
    g = simai_groups(w, ranks(8), "w.txt")
    assert g["tp"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert g["dp"] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert g["ep"] == [[0, 2], [1, 3], [4, 6], [5, 7]]          # ep consecutive TP groups, rank k of each
    assert g["dp_ep"] == [[0, 4], [1, 5], [2, 6], [3, 7]]       # every ep-th TP group: not the whole DP group


def test_simai_ep_and_dp_ep_collectives_run_over_their_own_groups(tmp_path):
    p = simai_file(tmp_path, "HYBRID_TRANSFORMER model_parallel_NPU_group: 2 ep: 2 pp: 1 vpp: 1 ga: 1 all_gpus: 8",
                   "moe -1 10 ALLTOALL_EP 800 10 NONE 0 10 ALLREDUCE_DP_EP 800 1")
    msgs = simai_messages(p, ranks(8), 1.0, 1.0, "ring", 1)
    pairs = {m.group: set() for m in msgs if m.group}
    for m in msgs:
        if m.group:
            pairs[m.group] |= {m.src, m.dst}
    name = {i: f"h{i}" for i in range(8)}
    assert sorted(map(sorted, (v for k, v in pairs.items() if " fwd " in k))) == \
        sorted(sorted(name[r] for r in g) for g in [[0, 2], [1, 3], [4, 6], [5, 7]])
    assert sorted(map(sorted, (v for k, v in pairs.items() if " wg " in k))) == \
        sorted(sorted(name[r] for r in g) for g in [[0, 4], [1, 5], [2, 6], [3, 7]])
    assert {m.comm for m in msgs if " fwd " in m.group} == {"ep"} and {m.comm for m in msgs if " wg " in m.group} == {"dp_ep"}


def test_simai_groups_take_queue_pairs_of_their_own(tmp_path):
    # h0 and h2 are in one EP group and one DP group (tp 2, ep 2): an all-to-all and a DP
    # AllReduce between the same hosts, on two communicators, so on two queue pairs
    p = simai_file(tmp_path, "HYBRID_TRANSFORMER model_parallel_NPU_group: 2 ep: 2 pp: 1 vpp: 1 ga: 1 all_gpus: 8",
                   "moe -1 10 ALLTOALL_EP 800 10 NONE 0 10 ALLREDUCE 800 1")
    msgs = simai_messages(p, ranks(8), 1.0, 1.0, "ring", 1)
    flows, of_msg = message_flows(msgs)
    between = {flows[f] for m, f in zip(msgs, of_msg) if (m.src, m.dst) == ("h0", "h2")}
    assert {f[3] for f in between} == {"ep", "dp"} and len(between) == 2


def test_simai_weight_gradients_are_non_blocking_and_only_the_next_forward_waits(tmp_path):
    # DATA: two layers, each weight gradient AllReduced over all 4 ranks
    p = simai_file(tmp_path, "DATA all_gpus: 4", "l0 -1 100 NONE 0 100 NONE 0 100 ALLREDUCE 4000 5",
                   "l1 -1 100 NONE 0 100 NONE 0 100 ALLREDUCE 4000 5")
    msgs = simai_messages(p, ranks(4), 1.0, 1.0, "ring", 2)
    g = nx.DiGraph((d, m.id) for m in msgs for d in m.deps)
    g.add_nodes_from(m.id for m in msgs)
    it0 = [m for m in msgs if m.iteration == 0]
    wg1 = [m.id for m in it0 if m.group.startswith("layer1 wg")]
    # the backward of layer 0 (its ig and wg compute on rank h0) does not wait for layer 1's AllReduce
    bwd0 = [m for m in it0 if m.tag == "compute" and m.src == "h0"][-2:]
    assert wg1 and not any(w in nx.ancestors(g, b.id) for b in bwd0 for w in wg1)
    # the next pass's forward of layer 1 waits for it and its update_time; of layer 0 for layer 0's
    fwd = [m for m in msgs if m.iteration == 1 and m.tag == "compute" and m.src == "h0"][:2]
    upd = {k: [m.id for m in it0 if m.tag == "update" and m.src == "h0" and m.id > min(
        x.id for x in it0 if x.group.startswith(f"layer{k} wg"))][0] for k in (0, 1)}
    assert upd[1] in nx.ancestors(g, fwd[1].id) and upd[0] in nx.ancestors(g, fwd[0].id)
    assert all(w in nx.ancestors(g, upd[1]) for w in wg1 if msgs[w].dst == "h0")


def test_simai_data_backward_runs_in_workload_cc_order(tmp_path):
    # Workload::iterate_data_parallel: from the last layer down, weight-gradient compute, its
    # AllReduce issued, then the input-gradient compute, and none for layer 0 (the pass ends at its
    # weight gradient). Every compute time distinct, to read the order off rank h0's steps.
    p = simai_file(tmp_path, "DATA all_gpus: 4", "l0 -1 10 NONE 0 20 NONE 0 30 ALLREDUCE 4000 0",
                   "l1 -1 11 NONE 0 21 NONE 0 31 ALLREDUCE 4000 0")
    msgs = simai_messages(p, ranks(4), 1.0, 1.0, "ring", 1)
    steps = [m for m in msgs if m.tag == "compute" and m.src == "h0"]
    unit = steps[0].duration_ns // 10
    assert [m.duration_ns // unit for m in steps] == [10, 11, 31, 21, 30]
    # layer 1's AllReduce is issued before its input gradient computes, and does not hold it up
    wg1 = min(m.id for m in msgs if m.group.startswith("layer1 wg"))
    ig1 = steps[3]
    assert steps[2].id < wg1 < ig1.id and wg1 not in ig1.deps


def test_simai_builds_no_ep_group_without_tensor_parallelism(tmp_path):
    # MockNcclGroup makes EP and DP_EP groups from its TP groups, which it builds only for tp > 1
    w = SimaiWorkload("HYBRID_TRANSFORMER", {"all_gpus": 8, "model_parallel_NPU_group": 1, "ep": 2}, ())
    g = simai_groups(w, ranks(8), "w.txt")
    assert g["ep"] == [] and g["dp_ep"] == [] and g["dp"] == [list(range(8))]
    p = simai_file(tmp_path, "HYBRID_TRANSFORMER model_parallel_NPU_group: 1 ep: 2 pp: 1 vpp: 1 ga: 1 all_gpus: 8",
                   "moe -1 10 ALLTOALL_EP 800 10 NONE 0 10 NONE 0 1")
    with pytest.raises(TraceError) as e:
        simai_messages(p, ranks(8), 1.0, 1.0, "ring", 1)
    assert "line 3, fwd_comm_type" in str(e.value) and "no EP group" in str(e.value)


def test_simai_pipeline_stages_exchange_vpp_transfers_per_micro_batch(tmp_path):
    # 4 GPUs, tp 1, pp 2 (stage of rank r: r mod 2), 2 micro-batches (ga) of one layer each, vpp 3
    # (pp_comm as AICB writes it when it divides by tp: a float, once without its colon)
    p = simai_file(tmp_path, "HYBRID_TRANSFORMER model_parallel_NPU_group: 1 ep: 1 pp: 2 vpp: 3 ga: 2 all_gpus: 4 "
                   "pp_comm 1000.0", "a -1 100 NONE 0 100 NONE 0 100 ALLREDUCE 400 1",
                   "b -1 100 NONE 0 100 NONE 0 100 ALLREDUCE 400 1")
    msgs = simai_messages(p, ranks(4), 1.0, 1.0, "ring", 1)
    p2p = [m for m in msgs if m.op == "p2p"]
    fwd = [m for m in p2p if m.src in ("h0", "h2")]
    bwd = [m for m in p2p if m.src in ("h1", "h3")]
    assert Counter((m.src, m.dst) for m in fwd) == Counter({("h0", "h1"): 6, ("h2", "h3"): 6})
    assert Counter((m.src, m.dst) for m in bwd) == Counter({("h1", "h0"): 6, ("h3", "h2"): 6})
    assert all(m.bytes == 1000 for m in p2p)
    # the DP group of each stage: ranks 0 and 2, and 1 and 3 (SimAI's stride n / dp = tp x pp)
    ar = [m for m in msgs if m.op in ("reduce", "copy")]
    assert {frozenset((m.src, m.dst)) for m in ar} == {frozenset(("h0", "h2")), frozenset(("h1", "h3"))}
    # stage 1's forward of micro-batch 0 waits for stage 0's three activations of it
    g = nx.DiGraph((d, m.id) for m in msgs for d in m.deps)
    first = next(m for m in msgs if m.src == "h1" and m.tag == "compute")
    into_h1 = sorted(m.id for m in fwd if m.dst == "h1")
    assert set(into_h1[:3]) <= nx.ancestors(g, first.id) and not set(into_h1[3:]) & nx.ancestors(g, first.id)


def _varint(v):
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _field(num, wt, payload):
    key = _varint(num << 3 | wt)
    return key + (_varint(payload) if wt == 0 else _varint(len(payload)) + payload)


def _node(nid, ntype, deps=(), **attrs):
    """A Chakra Node in protobuf wire format (et_def.proto: 1 id, 2 name, 3 type, 5 data_deps,
    10 attr: AttributeProto 1 name, 8 int64_val, 19 string_val)."""
    body = _field(1, 0, nid) + _field(2, 2, f"n{nid}".encode()) + _field(3, 0, ntype)
    if deps:
        body += _field(5, 2, b"".join(_varint(d) for d in deps))
    for k, v in attrs.items():
        val = _field(19, 2, v.encode()) if isinstance(v, str) else _field(8, 0, v)
        body += _field(10, 2, _field(1, 2, k.encode()) + val)
    return body


def _et(*nodes):
    return b"".join(_varint(len(m)) + m for m in (b"", *nodes))   # an empty GlobalMetadata first


def test_chakra_collectives_run_over_their_process_groups(tmp_path):
    # 4 ranks: an AllReduce over each TP pair {0,1}, {2,3}, then one over each DP pair {0,2}, {1,3}
    d = tmp_path / "pg"
    d.mkdir()
    for r in range(4):
        (d / f"t.{r}.et").write_bytes(_et(
            _node(0, COMM_COLL_NODE, comm_type=0, comm_size=4000, pg_name=f"tp{r // 2}"),
            _node(1, COMM_COLL_NODE, (0,), comm_type=0, comm_size=2000, pg_name=f"dp{r % 2}")))
    (d / "comm_group.json").write_text('{"tp0": [0, 1], "tp1": [2, 3], "dp0": [0, 2], "dp1": [1, 3]}')
    msgs = chakra_messages(d, ranks(4), 1.0, 1.0, "ring", 1)
    pairs = Counter(frozenset((m.src, m.dst)) for m in msgs)
    assert pairs == Counter({frozenset(("h0", "h1")): 4, frozenset(("h2", "h3")): 4,
                             frozenset(("h0", "h2")): 4, frozenset(("h1", "h3")): 4})
    assert set(sent_per_rank(msgs).values()) == {4000 + 2000}   # 2 (n-1)/n of each, n = 2
    g = nx.DiGraph((x, m.id) for m in msgs for x in m.deps)
    assert {m.comm for m in msgs if "pg dp0" in m.group} == {"dp0"}   # a process group is a communicator
    dp = [m for m in msgs if "pg dp0" in m.group]
    tp = [m.id for m in msgs if "pg tp0" in m.group and m.dst == "h0"]
    assert all(t in nx.ancestors(g, m.id) for m in dp if m.src == "h0" for t in tp)
    # a group the configuration does not name, or a rank outside its group, is bad input naming the node
    (d / "comm_group.json").write_text('{"tp0": [0, 1], "tp1": [2, 3], "dp0": [0, 2]}')
    with pytest.raises(TraceError) as e:
        chakra_messages(d, ranks(4), 1.0, 1.0, "ring", 1)
    assert e.value.field.endswith(", pg_name") and "'dp1'" in str(e.value)
    (d / "comm_group.json").write_text('{"tp0": [0, 1], "tp1": [2, 3], "dp0": [0, 2], "dp1": [1, 2]}')
    with pytest.raises(TraceError, match="rank 3 is not a member"):
        chakra_messages(d, ranks(4), 1.0, 1.0, "ring", 1)
    (d / "comm_group.json").write_text('{"tp0": [0, 7]}')
    with pytest.raises(TraceError) as e:
        chakra_messages(d, ranks(4), 1.0, 1.0, "ring", 1)
    assert e.value.where == str(d / "comm_group.json") and e.value.field == "tp0"
