"""Chakra execution traces (MLCommons): one ``<name>.<rank>.et`` per rank, length-prefixed
protobuf messages (a GlobalMetadata, then Nodes: 1 id, 2 name, 3 type, 4 ctrl_deps, 5 data_deps,
7 duration_micros, 10 attr (AttributeProto: 1 name, then one value field)), as a message DAG with
compute."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from testbed.traffic.collectives import Message, iteration_end
from testbed.traffic.traces.common import TraceError, append_collective
from testbed.traffic.traces.protobuf import _fields, _packed, _varint


COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 4, 5, 6, 7
# et_def.proto's NodeType, INVALID_NODE (0) left out: METADATA, MEM_LOAD, MEM_STORE (time on the rank,
# as compute), COMP, COMM_SEND, COMM_RECV, COMM_COLL
NODE_TYPES = {1: "METADATA_NODE", 2: "MEM_LOAD_NODE", 3: "MEM_STORE_NODE", 4: "COMP_NODE", 5: "COMM_SEND_NODE",
              6: "COMM_RECV_NODE", 7: "COMM_COLL_NODE"}
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
        if node.type not in NODE_TYPES:
            raise TraceError(path, f"byte {base}, type", f"node {node.id}: node type {node.type} is not one of "
                             f"Chakra's {NODE_TYPES}")
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


COMM_GROUPS_FILE = "comm_group.json"


def read_comm_groups(path: Path, n: int) -> dict[str, list[int]]:
    """ASTRA-sim's communicator-group configuration (its --comm-group-configuration): a JSON object
    from each process group's name (a COMM_COLL node's pg_name) to its ranks."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise TraceError(path, "file", f"not a JSON communicator-group configuration: {e}") from None
    if not isinstance(doc, dict):
        raise TraceError(path, "file", "expected an object of process group name -> list of ranks")
    for name, members in doc.items():
        if not isinstance(members, list) or not members or not all(isinstance(r, int) for r in members):
            raise TraceError(path, name, "expected a non-empty list of ranks")
        if len(set(members)) != len(members) or not all(0 <= r < n for r in members):
            raise TraceError(path, name, f"ranks must be distinct and within 0..{n - 1}, got {members}")
    return doc


def chakra_messages(directory: Path, ranks: list[str], bytes_scale: float, time_scale: float,
                    algorithm: str, iterations: int, groups_path: Path | None = None) -> list[Message]:
    """Every rank's nodes as messages: COMP nodes as compute on the rank's host; a COMM_SEND and
    the COMM_RECV it matches (the k-th send from a to b with a tag meets the k-th receive at b
    from a with that tag) as one transfer; a COMM_COLL node as one collective over its process
    group (its pg_name's ranks in ``groups_path``, by default the trace folder's comm_group.json;
    all ranks without a pg_name), the k-th collective of a group on each of its members being one
    collective, built with ``algorithm``."""
    files = chakra_files(directory)
    if len(files) != len(ranks):
        raise TraceError(directory, "files", f"{len(files)} ranks in the trace, {len(ranks)} hosts to place them on")
    per_rank = [read_chakra(p) for p in files]
    if groups_path is None and (Path(directory) / COMM_GROUPS_FILE).exists():
        groups_path = Path(directory) / COMM_GROUPS_FILE
    groups = _Groups(read_comm_groups(groups_path, len(ranks)) if groups_path else {}, groups_path, len(ranks), files)
    msgs: list[Message] = []
    barrier: tuple[int, ...] = ()
    for it in range(iterations):
        first = len(msgs)
        _chakra_iteration(per_rank, files, ranks, bytes_scale, time_scale, algorithm, it, barrier, msgs, groups)
        barrier = iteration_end(msgs, first)
    return msgs


@dataclass
class _Groups:
    by_name: dict[str, list[int]]
    path: Path | None
    n: int
    files: list

    def members(self, r: int, node: ChakraNode) -> tuple[str, list[int]]:
        """The process group a rank's COMM_COLL node runs over: (its name, its ranks)."""
        pg = node.attrs.get("pg_name")
        if pg is None:
            return "", list(range(self.n))
        if not isinstance(pg, str):
            raise TraceError(self.files[r], f"byte {node.offset}, pg_name", f"node {node.id}: not a string")
        if pg not in self.by_name:
            where = self.path or f"{COMM_GROUPS_FILE} beside the trace"
            raise TraceError(self.files[r], f"byte {node.offset}, pg_name", f"node {node.id}: process group {pg!r} "
                             f"is not in {where}")
        if r not in self.by_name[pg]:
            raise TraceError(self.files[r], f"byte {node.offset}, pg_name", f"node {node.id}: rank {r} is not a member "
                             f"of process group {pg!r} {self.by_name[pg]}")
        return pg, self.by_name[pg]


def _chakra_iteration(per_rank, files, ranks, bytes_scale, time_scale, algorithm, it, barrier, msgs, groups) -> None:
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
    coll_index: dict[tuple[int, int], tuple[str, int]] = {}   # (rank, node id) -> (group, which of its collectives)
    colls: dict[tuple[str, int], dict[int, ChakraNode]] = {}   # (group, k-th collective) -> rank -> its node
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
                                        start_of(r, node), node.id, "collective", "p2p", comm="p2p"))
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
                    # the k-th collective of a process group on each of its members is one collective
                    pg, members = groups.members(r, node)
                    if (r, node.id) not in coll_index:
                        coll_index[(r, node.id)] = (pg, sum(1 for (q, _), (g, _) in coll_index.items()
                                                            if q == r and g == pg))
                    group = colls.setdefault(coll_index[(r, node.id)], {})
                    group[r] = node
                    if len(group) < len(members) or \
                            not all(all(d in done[q] for d in g.deps) for q, g in group.items()):
                        keep.append(node)
                        continue
                    _buildappend_collective(group, [ranks[q] for q in members], files, ranks, bytes_scale, algorithm,
                                            it, step, done, start_of, msgs, pg)
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


def _buildappend_collective(group, hosts, files, ranks, bytes_scale, algorithm, it, step, done, start_of, msgs,
                            pg) -> None:
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
    if len(hosts) < 2:   # a group of one: nothing on the wire
        for q, node in group.items():
            done[q][node.id] = starts[ranks[q]]
        return
    try:
        finished = append_collective(msgs, kind, algorithm, hosts, max(1, round(sizes[q0] * bytes_scale)), starts, it,
                                     max(step), f"{kind} (rank {q0} node {group[q0].id})" + (f" pg {pg}" if pg else ""),
                                     comm=pg)
    except ValueError as e:   # halving-doubling over a group that is no power of two
        raise TraceError(files[q0], f"byte {group[q0].offset}", f"collective node {group[q0].id}: {e}") from None
    for q, node in group.items():
        done[q][node.id] = finished[ranks[q]]


def _int_attr(node: ChakraNode, name: str, path) -> int:
    v = node.attrs.get(name)
    if not isinstance(v, int):
        raise TraceError(path, f"byte {node.offset}", f"node {node.id} ({node.name}) has no integer attribute {name}")
    return v
