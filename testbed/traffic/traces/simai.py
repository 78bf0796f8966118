"""SimAI / ASTRA-sim 1.0 text workloads: a header of parallelism and group sizes, a layer count,
then one line per layer with forward, input-gradient and weight-gradient compute times and
communication, as a message DAG with compute."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from testbed.traffic.collectives import Message, iteration_end
from testbed.traffic.traces.common import TraceError, append_collective


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
            done = append_collective(msgs, kind, algorithm, g, size, {r: last[r] for r in g}, it, step,
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
