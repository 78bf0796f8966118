"""Training traces users already have, turned into message DAGs with compute (pure).

- Chakra execution traces (MLCommons): one ``<name>.<rank>.et`` per rank, length-prefixed protobuf
  messages (a GlobalMetadata, then Nodes). Read with a small protobuf wire-format reader of our
  own (the schema is not on PyPI): Node 1 id, 2 name, 3 type, 4 ctrl_deps, 5 data_deps,
  7 duration_micros, 10 attr (AttributeProto: 1 name, then one value field).
- SimAI / ASTRA-sim 1.0 text workloads: a header of parallelism and group sizes, a layer count,
  then one line per layer with forward, input-gradient and weight-gradient compute times and
  communication.

Both scale bytes and times by the scenario's factors. A malformed file raises TraceError naming
the file and the position (byte offset or line and field).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from testbed.collectives import (Message, all_to_all, halving_doubling_allreduce, iteration_end, ring_allgather,
                                 ring_allreduce, ring_reducescatter)
from testbed.errors import InputError


class TraceError(InputError):
    """A trace file that cannot be read: names the file and where in it."""

    def __init__(self, path: Path | str, position: str, message: str):
        super().__init__(str(path), position, message)


# -- protobuf wire format ------------------------------------------------------------------------

def _varint(buf: bytes, i: int, path, base: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= len(buf):
            raise TraceError(path, f"byte {base + i}", "truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, i
        if shift > 63:
            raise TraceError(path, f"byte {base + i}", "varint longer than 64 bits")


def _fields(buf: bytes, path, base: int) -> list[tuple[int, int, object, int]]:
    """(field number, wire type, value, offset) of every field of one message."""
    out, i = [], 0
    while i < len(buf):
        at = i
        key, i = _varint(buf, i, path, base)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i, path, base)
        elif wt == 2:
            n, i = _varint(buf, i, path, base)
            if i + n > len(buf):
                raise TraceError(path, f"byte {base + at}", f"field {num} runs {i + n - len(buf)} bytes past its message")
            v, i = buf[i:i + n], i + n
        elif wt in (1, 5):
            n = 8 if wt == 1 else 4
            if i + n > len(buf):
                raise TraceError(path, f"byte {base + at}", f"field {num} is truncated")
            v, i = int.from_bytes(buf[i:i + n], "little"), i + n
        else:
            raise TraceError(path, f"byte {base + at}", f"field {num} has wire type {wt}, not a valid protobuf")
        out.append((num, wt, v, base + at))
    return out


def _packed(v, wt: int, path, base: int) -> list[int]:
    if wt == 0:
        return [v]
    vals, i = [], 0
    while i < len(v):
        x, i = _varint(v, i, path, base)
        vals.append(x)
    return vals


# -- Chakra --------------------------------------------------------------------------------------

COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 4, 5, 6, 7
CHAKRA_COLLECTIVES = {0: "allreduce", 2: "allgather", 6: "alltoall", 7: "reducescatter"}


@dataclass
class ChakraNode:
    id: int
    name: str
    type: int
    deps: tuple[int, ...]
    duration_us: int
    attrs: dict = field(default_factory=dict)
    offset: int = 0


def _attr(buf: bytes, path, base: int) -> tuple[str, object]:
    name, value = "", None
    for num, wt, v, _ in _fields(buf, path, base):
        if num == 1:
            name = v.decode(errors="replace")
        elif wt == 0:
            value = v - (1 << 64) if v >> 63 else v  # int64 as two's complement
        elif wt == 2:
            value = v.decode(errors="replace")
        else:
            value = v
    return name, value


def read_chakra(path: Path) -> list[ChakraNode]:
    data = Path(path).read_bytes()
    nodes, i, first = [], 0, True
    while i < len(data):
        n, j = _varint(data, i, path, 0)
        if j + n > len(data):
            raise TraceError(path, f"byte {i}", f"a {n}-byte message runs past the end of the file (truncated?)")
        msg, base = data[j:j + n], j
        i = j + n
        fs = _fields(msg, path, base)
        if first:  # GlobalMetadata
            first = False
            continue
        node = ChakraNode(0, "", 0, (), 0, {}, base)
        deps: list[int] = []
        for num, wt, v, at in fs:
            if num == 1:
                node.id = v
            elif num == 2:
                node.name = v.decode(errors="replace")
            elif num == 3:
                node.type = v
            elif num in (4, 5):
                deps += _packed(v, wt, path, at)
            elif num == 7:
                node.duration_us = v
            elif num == 10:
                k, val = _attr(v, path, at)
                node.attrs[k] = val
        node.deps = tuple(deps)
        nodes.append(node)
    return nodes


def chakra_files(directory: Path) -> list[Path]:
    """The per-rank files of a trace folder, in rank order (``<name>.<rank>.et``)."""
    files = {}
    for p in Path(directory).glob("*.et"):
        m = re.match(r"^(.*)\.(\d+)\.et$", p.name)
        if m:
            files[int(m.group(2))] = p
    if not files:
        raise TraceError(directory, "files", "no <name>.<rank>.et files")
    ranks = sorted(files)
    if ranks != list(range(len(ranks))):
        raise TraceError(directory, "files", f"ranks must be 0..N-1, found {ranks}")
    return [files[r] for r in ranks]


COLLECTIVE_BUILDERS = {
    "ring": {"allreduce": ring_allreduce, "allgather": ring_allgather, "reducescatter": ring_reducescatter,
             "alltoall": all_to_all},
    "halving_doubling": {"allreduce": halving_doubling_allreduce, "allgather": ring_allgather,
                         "reducescatter": ring_reducescatter, "alltoall": all_to_all},
}


def _collective(msgs: list[Message], kind: str, algorithm: str, ranks: list[str], nbytes: int,
                starts: dict[str, tuple[int, ...]], iteration: int, step0: int,
                group: str) -> dict[str, tuple[int, ...]]:
    """Append one collective over ``ranks`` (every message shifted to follow ``msgs``, each rank's
    first sends after ``starts[rank]``); returns, per rank, the arrivals it has to wait for."""
    sched = COLLECTIVE_BUILDERS[algorithm][kind](ranks, max(nbytes, len(ranks)), 1)
    off = len(msgs)
    for m in sched:
        # every send of a rank also waits for the rank's own start: its data is ready then
        deps = tuple(sorted({d + off for d in m.deps} | set(starts[m.src])))
        msgs.append(Message(m.id + off, iteration, step0 + m.step, m.src, m.dst, m.bytes, deps, m.chunk,
                            "collective", m.op, m.segments, 0, group))
    done = {r: tuple(m.id + off for m in sched if m.dst == r) for r in ranks}
    return {r: done[r] or starts[r] for r in ranks}


def chakra_messages(directory: Path, ranks: list[str], bytes_scale: float, time_scale: float,
                    algorithm: str, iterations: int) -> list[Message]:
    """Every rank's nodes as messages: COMP nodes as compute on the rank's host; a COMM_SEND and
    the COMM_RECV it matches (the k-th send from a to b with a tag meets the k-th receive at b
    from a with that tag) as one transfer; the k-th COMM_COLL node of every rank as one
    collective over all ranks, built with ``algorithm``."""
    files = chakra_files(directory)
    if len(files) != len(ranks):
        raise TraceError(directory, "files", f"{len(files)} ranks in the trace, {len(ranks)} hosts to place them on")
    per_rank = [read_chakra(p) for p in files]
    msgs: list[Message] = []
    barrier: tuple[int, ...] = ()
    for it in range(iterations):
        first = len(msgs)
        _chakra_iteration(per_rank, files, ranks, bytes_scale, time_scale, algorithm, it, barrier, msgs)
        barrier = iteration_end(msgs, first)
    return msgs


def _chakra_iteration(per_rank, files, ranks, bytes_scale, time_scale, algorithm, it, barrier, msgs) -> None:
    n = len(ranks)
    done: list[dict[int, tuple[int, ...]]] = [{} for _ in range(n)]   # node id -> arrivals that complete it
    for r, nodes in enumerate(per_rank):
        ids = set()
        for node in nodes:
            if node.id in ids:
                raise TraceError(files[r], f"byte {node.offset}", f"node id {node.id} appears twice")
            ids.add(node.id)
        for node in nodes:
            for d in node.deps:
                if d not in ids:
                    raise TraceError(files[r], f"byte {node.offset}", f"node {node.id} depends on unknown node {d}")
    sends: dict[tuple[int, int, int], list[int]] = {}   # (src, dst, tag) -> message ids, in issue order
    recv_seen: dict[tuple[int, int, int], int] = {}
    coll_index: dict[tuple[int, int], int] = {}          # (rank, node id) -> which collective of the rank
    colls: dict[int, dict[int, ChakraNode]] = {}          # k-th collective -> rank -> its node
    pending = [list(nodes) for nodes in per_rank]
    step = [0] * n

    def start_of(r, node):
        deps = set() if node.deps else set(barrier)
        for d in node.deps:
            deps |= set(done[r][d])
        return tuple(sorted(deps))

    progress = True
    while progress and any(pending):
        progress = False
        for r in range(n):
            keep = []
            for node in pending[r]:
                if node.id in done[r]:  # a collective built from another rank's visit completed it
                    step[r] += 1
                    progress = True
                    continue
                if not all(d in done[r] for d in node.deps):
                    keep.append(node)
                    continue
                host = ranks[r]
                if node.type == COMM_SEND_NODE:
                    dst, tag = _int_attr(node, "comm_dst", files[r]), node.attrs.get("comm_tag", 0)
                    if not 0 <= dst < n or dst == r:
                        raise TraceError(files[r], f"byte {node.offset}", f"node {node.id}: comm_dst {dst} is not "
                                         f"another rank of 0..{n - 1}")
                    size = _int_attr(node, "comm_size", files[r])
                    mid = len(msgs)
                    msgs.append(Message(mid, it, step[r], host, ranks[dst], max(1, round(size * bytes_scale)),
                                        start_of(r, node), node.id, "collective", "p2p"))
                    sends.setdefault((r, dst, tag), []).append(mid)
                    done[r][node.id] = (mid,)
                elif node.type == COMM_RECV_NODE:
                    src, tag = _int_attr(node, "comm_src", files[r]), node.attrs.get("comm_tag", 0)
                    k = recv_seen.get((src, r, tag), 0)
                    matched = sends.get((src, r, tag), [])
                    if k >= len(matched):
                        keep.append(node)  # its send is not built yet
                        continue
                    recv_seen[(src, r, tag)] = k + 1
                    done[r][node.id] = tuple(sorted({matched[k], *start_of(r, node)}))
                elif node.type == COMM_COLL_NODE:
                    # the k-th collective of every rank is one collective over all ranks
                    k = coll_index.setdefault((r, node.id), sum(1 for (q, _) in coll_index if q == r))
                    group = colls.setdefault(k, {})
                    group[r] = node
                    if len(group) < n or not all(all(d in done[q] for d in g.deps) for q, g in group.items()):
                        keep.append(node)
                        continue
                    _build_collective(group, files, ranks, bytes_scale, algorithm, it, step, done, start_of, msgs)
                else:  # COMP_NODE, and any other node: time on the rank, no traffic
                    mid = len(msgs)
                    msgs.append(Message(mid, it, step[r], host, host, 0, start_of(r, node), node.id, "compute",
                                        "compute", duration_ns=round(node.duration_us * 1000 * time_scale)))
                    done[r][node.id] = (mid,)
                step[r] += 1
                progress = True
            pending[r] = keep
    if any(pending):
        r = next(q for q in range(n) if pending[q])
        node = pending[r][0]
        raise TraceError(files[r], f"byte {node.offset}", f"node {node.id} ({node.name}) can never run: a dependency "
                         f"cycle, a receive without a matching send, or a collective not every rank reaches")


def _build_collective(group, files, ranks, bytes_scale, algorithm, it, step, done, start_of, msgs) -> None:
    kinds = {q: _int_attr(node, "comm_type", files[q]) for q, node in group.items()}
    sizes = {q: _int_attr(node, "comm_size", files[q]) for q, node in group.items()}
    q0 = min(group)
    if len(set(kinds.values())) != 1 or len(set(sizes.values())) != 1:
        raise TraceError(files[q0], f"byte {group[q0].offset}", f"collective node {group[q0].id}: ranks disagree on "
                         f"its type or size ({sorted(set(kinds.values()))}, {sorted(set(sizes.values()))})")
    kind = CHAKRA_COLLECTIVES.get(kinds[q0])
    if kind is None:
        raise TraceError(files[q0], f"byte {group[q0].offset}", f"collective node {group[q0].id}: comm_type "
                         f"{kinds[q0]} is not one of {CHAKRA_COLLECTIVES}")
    starts = {ranks[q]: start_of(q, node) for q, node in group.items()}
    finished = _collective(msgs, kind, algorithm, list(ranks), max(1, round(sizes[q0] * bytes_scale)), starts, it,
                           max(step), f"{kind} (rank {q0} node {group[q0].id})")
    for q, node in group.items():
        done[q][node.id] = finished[ranks[q]]


def _int_attr(node: ChakraNode, name: str, path) -> int:
    v = node.attrs.get(name)
    if not isinstance(v, int):
        raise TraceError(path, f"byte {node.offset}", f"node {node.id} ({node.name}) has no integer attribute {name}")
    return v


# -- SimAI / ASTRA-sim 1.0 text ------------------------------------------------------------------

SIMAI_COMMS = ("NONE", "ALLREDUCE", "ALLGATHER", "REDUCESCATTER", "ALLTOALL")


@dataclass(frozen=True)
class SimaiLayer:
    name: str
    fwd_ns: int
    fwd_comm: str
    fwd_bytes: int
    ig_ns: int
    ig_comm: str
    ig_bytes: int
    wg_ns: int
    wg_comm: str
    wg_bytes: int
    update_ns: int


@dataclass(frozen=True)
class SimaiWorkload:
    parallelism: str
    params: dict
    layers: tuple[SimaiLayer, ...]


def read_simai(path: Path) -> SimaiWorkload:
    lines = Path(path).read_text().splitlines()
    if len(lines) < 2:
        raise TraceError(path, "line 1", "expected a header line and a layer count")
    head = lines[0].split()
    if not head:
        raise TraceError(path, "line 1", "empty header")
    params = {}
    rest = head[1:]
    if len(rest) % 2:
        raise TraceError(path, "line 1", f"expected 'key: value' pairs after {head[0]}")
    for k, v in zip(rest[::2], rest[1::2]):
        if not k.endswith(":"):
            raise TraceError(path, "line 1", f"expected 'key:' before {v!r}, got {k!r}")
        try:
            params[k[:-1]] = int(v)
        except ValueError:
            raise TraceError(path, f"line 1, {k[:-1]}", f"not an integer: {v!r}") from None
    for key in ("all_gpus", "model_parallel_NPU_group"):
        if key not in params:
            raise TraceError(path, "line 1", f"the header has no {key}")
    try:
        count = int(lines[1].split()[0])
    except (ValueError, IndexError):
        raise TraceError(path, "line 2", f"expected the number of layers, got {lines[1]!r}") from None
    body = [(no, ln) for no, ln in enumerate(lines[2:], start=3) if ln.strip()]
    if len(body) != count:
        raise TraceError(path, f"line {len(lines)}", f"line 2 announces {count} layers, the file has {len(body)} "
                         f"(truncated?)")
    names = ("name", "dependency", "fwd_compute", "fwd_comm_type", "fwd_comm_bytes", "ig_compute", "ig_comm_type",
             "ig_comm_bytes", "wg_compute", "wg_comm_type", "wg_comm_bytes", "update_time")
    layers = []
    for no, ln in body:
        f = ln.split()
        if len(f) < len(names):
            raise TraceError(path, f"line {no}", f"{len(f)} fields, expected {len(names)} ({', '.join(names)})")
        vals = {}
        for i, nm in enumerate(names[1:], start=1):
            if nm.endswith("comm_type"):
                base = re.sub(r"_(DP_EP|EP)$", "", f[i])
                if base not in SIMAI_COMMS:
                    raise TraceError(path, f"line {no}, {nm}", f"unknown communication {f[i]!r}; expected one of "
                                     f"{', '.join(SIMAI_COMMS)} (optionally _EP or _DP_EP)")
                vals[nm] = f[i]
            else:
                try:
                    vals[nm] = int(f[i])
                except ValueError:
                    raise TraceError(path, f"line {no}, {nm}", f"not an integer: {f[i]!r}") from None
        layers.append(SimaiLayer(f[0], vals["fwd_compute"], vals["fwd_comm_type"], vals["fwd_comm_bytes"],
                                 vals["ig_compute"], vals["ig_comm_type"], vals["ig_comm_bytes"], vals["wg_compute"],
                                 vals["wg_comm_type"], vals["wg_comm_bytes"], vals["update_time"]))
    return SimaiWorkload(head[0], params, tuple(layers))


def simai_groups(w: SimaiWorkload, ranks: list[str], path) -> dict[str, list[list[str]]]:
    """Rank groups: tp (model parallel, consecutive ranks), dp (same position in each TP x PP
    block), ep (dp subgroups of size ep)."""
    n, tp = w.params["all_gpus"], w.params["model_parallel_NPU_group"]
    pp = max(1, w.params.get("pp", 1))
    ep = max(1, w.params.get("ep", 1))
    if n != len(ranks):
        raise TraceError(path, "line 1, all_gpus", f"{n} GPUs in the trace, {len(ranks)} hosts to place them on")
    if tp < 1 or n % (tp * pp):
        raise TraceError(path, "line 1, model_parallel_NPU_group", f"all_gpus {n} is not a multiple of tp x pp = "
                         f"{tp} x {pp}")
    dp = n // (tp * pp)
    if dp % ep:
        raise TraceError(path, "line 1, ep", f"dp = {dp} is not a multiple of ep = {ep}")
    tp_groups = [ranks[i:i + tp] for i in range(0, n, tp)]
    dp_groups = [[ranks[b * tp * pp + i] for b in range(dp)] for i in range(tp * pp)]
    ep_groups = [g[j:j + ep] for g in dp_groups for j in range(0, dp, ep)]
    return {"tp": tp_groups, "dp": dp_groups, "ep": ep_groups}


def simai_messages(path: Path, ranks: list[str], bytes_scale: float, time_scale: float, algorithm: str,
                   iterations: int) -> list[Message]:
    """One training step per iteration, per rank in program order: every layer's forward compute
    and communication, then in reverse every layer's input-gradient compute and communication and
    weight-gradient compute and communication, then its update. Forward and input-gradient
    communication runs in the rank's TP group, weight-gradient communication in its DP group
    (DATA parallelism: everything in DP; MODEL: everything in TP); an _EP suffix means the EP
    group, _DP_EP the DP group. Times are nanoseconds."""
    w = read_simai(path)
    groups = simai_groups(w, ranks, path)
    par = w.parallelism.upper()
    msgs: list[Message] = []
    last = {r: () for r in ranks}
    step = 0

    def group_kind(phase: str, comm: str) -> str:
        if comm.endswith("_DP_EP"):
            return "dp"
        if comm.endswith("_EP"):
            return "ep"
        if par.startswith("DATA"):
            return "dp"
        if par.startswith("MODEL"):
            return "tp"
        return "dp" if phase == "wg" else "tp"

    def compute(ns: int, it: int) -> None:
        nonlocal step
        for r in ranks:
            mid = len(msgs)
            msgs.append(Message(mid, it, step, r, r, 0, last[r], -1, "compute", "compute",
                                duration_ns=round(ns * time_scale)))
            last[r] = (mid,)
        step += 1

    def communicate(phase: str, comm: str, nbytes: int, it: int, layer_name: str) -> None:
        nonlocal step
        base = re.sub(r"_(DP_EP|EP)$", "", comm)
        if base == "NONE" or nbytes <= 0:
            return
        kind = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "REDUCESCATTER": "reducescatter",
                "ALLTOALL": "alltoall"}[base]
        size = max(1, round(nbytes * bytes_scale))
        gk = group_kind(phase, comm)
        for gi, g in enumerate(groups[gk]):
            if len(g) < 2:
                continue
            done = _collective(msgs, kind, algorithm, g, size, {r: last[r] for r in g}, it, step,
                               f"{layer_name} {phase} {kind} {gk}{gi}")
            last.update(done)
        step += 1

    barrier: tuple[int, ...] = ()
    for it in range(iterations):
        first = len(msgs)
        last = {r: barrier for r in ranks}
        for i, layer in enumerate(w.layers):
            compute(layer.fwd_ns, it)
            communicate("fwd", layer.fwd_comm, layer.fwd_bytes, it, f"layer{i}")
        for i, layer in reversed(list(enumerate(w.layers))):
            compute(layer.ig_ns, it)
            communicate("ig", layer.ig_comm, layer.ig_bytes, it, f"layer{i}")
            compute(layer.wg_ns, it)
            communicate("wg", layer.wg_comm, layer.wg_bytes, it, f"layer{i}")
            compute(layer.update_ns, it)
        barrier = iteration_end(msgs, first)
    return msgs

