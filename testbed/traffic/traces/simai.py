"""SimAI / ASTRA-sim 1.0 text workloads (as aliyun/SimAI's astra-sim-alibabacloud reads them, and
AICB writes them): a header of parallelism and group sizes, a layer count, then one line per layer
with forward, input-gradient and weight-gradient compute times and communication, as a message
DAG with compute.

Units: compute times are SimAI Ticks, cycles of its 1 ns clock (astra-sim Common.hh: CLOCK_PERIOD
1, results divide by FREQ = 1000 to print us), so nanoseconds; communication sizes are bytes.

What SimAI does with a pass, kept here (Workload.cc, iterate_hybrid_parallel_Transformer and its
siblings), per rank in program order:
- forward, layer by layer: the layer waits for its own weight-gradient communication of the
  previous pass, computes, and runs its forward communication (blocking);
- backward, last layer first: input-gradient compute and communication (blocking; MODEL issues it
  non-blocking and waits for it after the weight-gradient compute; DATA has none), then the
  weight-gradient compute and its communication, issued non-blocking: only the next pass's
  forward of that layer waits for it;
- a communication counts as done update_time after its last arrival (Layer::call's
  *_Comm_Finished_After_Delay), an "update" step here.
Groups are SimAI's (MockNcclGroup): TP consecutive ranks; DP ranks i, i + n/dp, ...; EP ep
consecutive TP groups, rank k of each; DP_EP every ep-th TP group from i, dp/ep of them. A plain
collective runs in TP (forward, input gradient) or DP (weight gradient); _EP and _DP_EP name their
group; DATA runs everything in DP, MODEL in TP.
SimAI itself adds pipeline parallelism only as a formula (2 vpp ga pp_comm / bandwidth, and a
bubble); here pp > 1 makes it traffic: rank r's stage is (r / tp) mod pp, a pass's layers are ga
micro-batches (AICB unrolls them, in order), and after its forward of a micro-batch a stage sends
vpp activation transfers of pp_comm bytes to the same TP rank of the next stage, whose forward of
that micro-batch waits for them; the backward sends as many gradients back. That is SimAI's
2 vpp ga pp_comm bytes per rank and pass, on the wire.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from testbed.traffic.collectives import Message, chunk_sizes
from testbed.traffic.traces.common import TraceError, append_collective


SIMAI_COMMS = ("NONE", "ALLREDUCE", "ALLGATHER", "REDUCESCATTER", "ALLTOALL")
# SimAI's policies whose passes this importer replays; the others (decode_parallelsim) are refused
POLICIES = ("DATA", "MODEL", "HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD")
OTHER_POLICIES = ("MICRO", "HYBRID_DLRM", "HYBRID_DLRM_ENHANCED", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA",
                  "HYBRID_CUSTOMIZED", "DISTRIBUTED_INFERENCE")
HEADER_KEYS = ("model_parallel_NPU_group", "ep", "expert_parallel_npu_group", "pp", "vpp", "ga", "all_gpus",
               "checkpoints", "checkpoint_initiates", "pp_comm")
LAYER_FIELDS = ("name", "dependency", "fwd_compute", "fwd_comm_type", "fwd_comm_bytes", "ig_compute", "ig_comm_type",
                "ig_comm_bytes", "wg_compute", "wg_comm_type", "wg_comm_bytes", "update_time")


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
    line: int = 0


@dataclass(frozen=True)
class SimaiWorkload:
    parallelism: str
    params: dict
    layers: tuple[SimaiLayer, ...]

    def size(self, key: str, default: int = 1) -> int:
        return self.params.get(key, default)


def _header(path, line: str) -> tuple[str, dict]:
    head = line.split()
    if not head:
        raise TraceError(path, "line 1", "empty header")
    policy = head[0]
    if policy in OTHER_POLICIES:
        raise TraceError(path, "line 1, parallelism", f"{policy} is a SimAI policy this importer does not replay "
                         f"(it replays {', '.join(POLICIES)})")
    if policy not in POLICIES:
        raise TraceError(path, "line 1, parallelism", f"unknown parallelism {policy!r}; expected one of "
                         f"{', '.join(POLICIES)}")
    rest = head[1:]
    if len(rest) % 2:
        raise TraceError(path, "line 1", f"expected 'key: value' pairs after {policy}")
    params = {}
    for k, v in zip(rest[::2], rest[1::2]):
        # SimAI also takes pp_comm without its colon, as AICB has written it
        if not k.endswith(":") and k != "pp_comm":
            raise TraceError(path, "line 1", f"expected 'key:' before {v!r}, got {k!r}")
        key = k.removesuffix(":")
        if key not in HEADER_KEYS:
            raise TraceError(path, f"line 1, {key}", f"unknown header field; SimAI reads {', '.join(HEADER_KEYS)}")
        try:   # AICB writes pp_comm as a float when it divides by tp ("pp_comm: 2097152.0")
            num = float(v)
        except ValueError:
            raise TraceError(path, f"line 1, {key}", f"not a number: {v!r}") from None
        if num != int(num) or num < 0:
            raise TraceError(path, f"line 1, {key}", f"not a whole non-negative number: {v!r}")
        params[key] = int(num)
    if "expert_parallel_npu_group" in params:   # AICB's name for ep in some of its writers
        params.setdefault("ep", params.pop("expert_parallel_npu_group"))
    for key in ("checkpoints", "checkpoint_initiates"):
        if params.get(key):
            # activation recomputation (Forward_In_BackPass) replays chosen layers' forwards
            raise TraceError(path, f"line 1, {key}", "layers to recompute in the backward are not supported")
    if "all_gpus" not in params:
        raise TraceError(path, "line 1", "the header has no all_gpus (SimAI takes it from its system "
                         "configuration; write all_gpus: N)")
    if policy.startswith("HYBRID") and "model_parallel_NPU_group" not in params:
        raise TraceError(path, "line 1", "the header has no model_parallel_NPU_group")
    for key in ("model_parallel_NPU_group", "ep", "pp", "vpp", "ga", "all_gpus"):
        if params.get(key, 1) < 1:
            raise TraceError(path, f"line 1, {key}", "must be at least 1")
    if params.get("pp", 1) > 1 and not params.get("pp_comm"):
        raise TraceError(path, "line 1, pp_comm", "pp > 1 needs the bytes a stage sends per transfer")
    return policy, params


def read_simai(path: Path) -> SimaiWorkload:
    lines = Path(path).read_text().splitlines()
    if len(lines) < 2:
        raise TraceError(path, "line 1", "expected a header line and a layer count")
    policy, params = _header(path, lines[0])
    try:
        count = int(lines[1].split()[0])
    except (ValueError, IndexError):
        raise TraceError(path, "line 2", f"expected the number of layers, got {lines[1]!r}") from None
    body = [(no, ln) for no, ln in enumerate(lines[2:], start=3) if ln.strip()]
    if len(body) != count:
        raise TraceError(path, f"line {len(lines)}", f"line 2 announces {count} layers, the file has {len(body)} "
                         f"(truncated?)")
    layers = []
    for no, ln in body:
        f = ln.split()
        if len(f) != len(LAYER_FIELDS):
            raise TraceError(path, f"line {no}", f"{len(f)} fields, expected {len(LAYER_FIELDS)} "
                             f"({', '.join(LAYER_FIELDS)})")
        vals = {}
        for i, nm in enumerate(LAYER_FIELDS[1:], start=1):
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
                if nm != "dependency" and vals[nm] < 0:
                    raise TraceError(path, f"line {no}, {nm}", f"negative: {f[i]!r}")
        layers.append(SimaiLayer(f[0], vals["fwd_compute"], vals["fwd_comm_type"], vals["fwd_comm_bytes"],
                                 vals["ig_compute"], vals["ig_comm_type"], vals["ig_comm_bytes"], vals["wg_compute"],
                                 vals["wg_comm_type"], vals["wg_comm_bytes"], vals["update_time"], no))
    return SimaiWorkload(policy, params, tuple(layers))


def simai_groups(w: SimaiWorkload, ranks: list[str], path) -> dict[str, list[list[str]]]:
    """Each rank group kind as SimAI's MockNcclGroup builds it, over ``ranks`` in trace order."""
    n, tp, pp, ep = w.size("all_gpus"), w.size("model_parallel_NPU_group"), w.size("pp"), w.size("ep")
    if n != len(ranks):
        raise TraceError(path, "line 1, all_gpus", f"{n} GPUs in the trace, {len(ranks)} hosts to place them on")
    if n % (tp * pp):
        raise TraceError(path, "line 1, model_parallel_NPU_group", f"all_gpus {n} is not a multiple of tp x pp = "
                         f"{tp} x {pp}")
    dp = n // (tp * pp)
    if dp % ep:
        raise TraceError(path, "line 1, ep", f"dp = {dp} is not a multiple of ep = {ep} (SimAI: ep x dp_ep = dp)")
    tp_groups = n // tp
    dp_stride = n // dp
    dp_ep = dp // ep
    # MockNcclGroup builds its EP and DP_EP groups out of its TP groups, and builds TP groups only
    # when tp > 1: with tp = 1 there are none of either (a collective over them cannot run)
    built = tp > 1
    return {
        "tp": [list(range(i * tp, (i + 1) * tp)) for i in range(tp_groups)],
        "dp": [[i + j * dp_stride for j in range(dp)] for i in range(dp_stride)],
        "ep": [[(i * ep + l) * tp + k for l in range(ep)] for i in range(tp_groups // ep) for k in range(tp)]
        if built else [],
        "dp_ep": [[(i + m * ep) * tp + k for m in range(dp_ep)] for i in range(tp_groups // dp_ep) for k in range(tp)]
        if built else [],
        "all": [list(range(n))],
    }


def _partition(groups: list[list[int]], kind: str, n: int, path) -> list[list[int]]:
    """The groups a kind's collectives run over: SimAI keeps one group a rank (the last it built
    holding it), so overlapping groups, as its DP_EP construction makes when pp > 1, cannot run."""
    owner = {}
    for gi, g in enumerate(groups):
        for r in g:
            owner[r] = gi
    used = sorted(set(owner.values()))
    if any(owner[r] != gi for gi in used for r in groups[gi]):
        raise TraceError(path, "line 1, ep", f"SimAI's {kind.upper()} groups for this header overlap (a rank in "
                         f"two), so their collectives cannot run")
    used = [groups[gi] for gi in used]
    return used


def _kind_of(policy: str, phase: str, comm: str) -> str:
    if comm.endswith("_DP_EP"):
        return "dp_ep"
    if comm.endswith("_EP"):
        return "ep"
    if policy == "DATA":
        return "dp"
    if policy == "MODEL":
        return "tp"
    return "dp" if phase == "wg" else "tp"


def simai_messages(path: Path, ranks: list[str], bytes_scale: float, time_scale: float, algorithm: str,
                   iterations: int) -> list[Message]:
    """``iterations`` passes of the workload over ``ranks`` (module docstring)."""
    return _Replay(read_simai(path), ranks, path, bytes_scale, time_scale, algorithm).run(iterations)


class _Replay:
    def __init__(self, w: SimaiWorkload, ranks: list[str], path, bytes_scale: float, time_scale: float,
                 algorithm: str):
        self.w, self.ranks, self.path = w, ranks, path
        self.bytes_scale, self.time_scale, self.algorithm = bytes_scale, time_scale, algorithm
        self.groups = simai_groups(w, ranks, path)
        self.n, self.tp, self.pp = len(ranks), w.size("model_parallel_NPU_group"), w.size("pp")
        self.msgs: list[Message] = []
        self.last: list[tuple[int, ...]] = [() for _ in ranks]
        # what the next pass's forward of each layer waits for on each rank: its weight-gradient comm
        self.wg_ready: list[list[tuple[int, ...]]] = [[() for _ in ranks] for _ in w.layers]
        self.step = 0
        self.active: list[int] = list(range(len(ranks)))
        n_layers = len(w.layers)
        sizes = chunk_sizes(n_layers, min(w.size("ga"), n_layers)) if n_layers else []
        self.first_of, self.last_of = {}, {}      # layer -> the micro-batch it starts / ends
        at = 0
        for g, k in enumerate(sizes):
            self.first_of[at], self.last_of[at + k - 1] = g, g
            at += k

    def stage(self, r: int) -> int:
        return (r // self.tp) % self.pp

    def _add(self, it, src, dst, nbytes, deps, op, tag="collective", duration_ns=0, comm="") -> int:
        mid = len(self.msgs)
        self.msgs.append(Message(mid, it, self.step, self.ranks[src], self.ranks[dst], nbytes, tuple(sorted(set(deps))),
                                 -1, tag, op, duration_ns=duration_ns, comm=comm))
        return mid

    def compute(self, ns: int, it: int, extra: list | None = None) -> None:
        for r in self.active:
            deps = self.last[r] + (extra[r] if extra else ())
            self.last[r] = (self._add(it, r, r, 0, deps, "compute", "compute", round(ns * self.time_scale)),)
        self.step += 1

    def communicate(self, phase: str, layer: SimaiLayer, it: int, i: int) -> list[tuple[int, ...]] | None:
        """Run the layer's ``phase`` communication after each rank's program so far; returns per
        rank what finishes it (its arrivals, then update_time), or None if there is none."""
        comm, nbytes = {"fwd": (layer.fwd_comm, layer.fwd_bytes), "ig": (layer.ig_comm, layer.ig_bytes),
                        "wg": (layer.wg_comm, layer.wg_bytes)}[phase]
        base = re.sub(r"_(DP_EP|EP)$", "", comm)
        if base == "NONE" or nbytes <= 0:
            return None
        kind = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "REDUCESCATTER": "reducescatter",
                "ALLTOALL": "alltoall"}[base]
        size = max(1, round(nbytes * self.bytes_scale))
        gk = _kind_of(self.w.parallelism, phase, comm)
        field = f"line {layer.line}, {phase}_comm_type"
        finished = list(self.last)
        if gk in ("ep", "dp_ep") and not self.groups[gk]:
            raise TraceError(self.path, field, f"a {comm} collective, but SimAI builds no {gk.upper()} group when "
                             f"model_parallel_NPU_group is 1 (MockNcclGroup makes them from its TP groups)")
        for gi, g in enumerate(_partition(self.groups[gk], gk, self.n, self.path) if gk in ("ep", "dp_ep")
                               else self.groups[gk]):
            if len(g) < 2 or g[0] not in self.active:
                continue
            if any(r not in self.active for r in g):
                # a group across pipeline stages (SimAI's EP groups are consecutive TP groups): each
                # stage would wait for the other's activations and gradients
                raise TraceError(self.path, "line 1, ep" if "ep" in gk else "line 1, pp",
                                 f"with pp = {self.pp}, SimAI's {gk.upper()} group {g} (line {layer.line}'s "
                                 f"{phase} communication) spans pipeline stages")
            hosts = [self.ranks[r] for r in g]
            try:
                done = append_collective(self.msgs, kind, self.algorithm, hosts, size,
                                         {self.ranks[r]: self.last[r] for r in g}, it, self.step,
                                         f"layer{i} {phase} {kind} {gk}{gi}", comm=gk)
            except ValueError as e:   # e.g. halving-doubling over a group that is no power of two
                raise TraceError(self.path, field, str(e)) from None
            for r in g:
                finished[r] = done[self.ranks[r]]
        self.step += 1
        if layer.update_ns:
            for r in self.active:
                finished[r] = (self._add(it, r, r, 0, finished[r], "compute", "update",
                                         round(layer.update_ns * self.time_scale)),)
        return finished

    def pipeline(self, it: int, g: int, forward: bool, inbox: dict) -> None:
        """A stage's vpp transfers of micro-batch g to the next stage (forward) or the previous
        (backward), after its program so far; the receiver's next step of g waits for them."""
        w = self.w
        size = max(1, round(w.size("pp_comm", 0) * self.bytes_scale))
        for r in self.active:
            s = self.stage(r)
            if (forward and s == self.pp - 1) or (not forward and s == 0):
                continue
            peer = r + self.tp if forward else r - self.tp
            ids = tuple(self._add(it, r, peer, size, self.last[r], "p2p", comm="pp") for _ in range(w.size("vpp")))
            inbox[(g, peer)] = ids
        self.step += 1

    def run(self, iterations: int) -> list[Message]:
        """Every pass, one stage at a time (the forward from the first stage, the backward from the
        last), so that what a stage receives from its neighbour is built before it waits for it."""
        stages = [[r for r in range(self.n) if self.stage(r) == s] for s in range(self.pp)]
        for it in range(iterations):
            acts: dict = {}
            grads: dict = {}
            for ranks in stages:
                self.active = ranks
                self.forward(it, acts)
            for ranks in reversed(stages):
                self.active = ranks
                self.backward(it, grads)
        return self.msgs

    def _receive(self, inbox: dict, g: int) -> None:
        for r in self.active:
            self.last[r] = self.last[r] + inbox.get((g, r), ())

    def forward(self, it: int, acts: dict) -> None:
        for i, layer in enumerate(self.w.layers):
            if self.pp > 1 and i in self.first_of:
                self._receive(acts, self.first_of[i])
            self.compute(layer.fwd_ns, it, self.wg_ready[i])
            if self.w.parallelism != "DATA":
                done = self.communicate("fwd", layer, it, i)
                if done:
                    self.last = done   # blocking
            if self.pp > 1 and i in self.last_of:
                self.pipeline(it, self.last_of[i], True, acts)

    def backward(self, it: int, grads: dict) -> None:
        policy = self.w.parallelism
        if policy == "DATA":
            self.backward_data(it)
            return
        for i in reversed(range(len(self.w.layers))):
            layer = self.w.layers[i]
            if self.pp > 1 and i in self.last_of:
                self._receive(grads, self.last_of[i])
            self.compute(layer.ig_ns, it)
            ig_done = None
            if policy in ("HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD"):
                done = self.communicate("ig", layer, it, i)
                if done:
                    self.last = done   # blocking
            elif policy == "MODEL" and i > 0:
                ig_done = self.communicate("ig", layer, it, i)   # waited for after the wg compute
            self.compute(layer.wg_ns, it)
            if policy != "MODEL":
                done = self.communicate("wg", layer, it, i)   # non-blocking
                for r in self.active:
                    self.wg_ready[i][r] = done[r] if done else ()
            if ig_done:
                for r in self.active:
                    self.last[r] = self.last[r] + ig_done[r]
            if self.pp > 1 and i in self.first_of:
                self.pipeline(it, self.first_of[i], False, grads)

    def backward_data(self, it: int) -> None:
        """DATA, as Workload::iterate_data_parallel runs it: from the last layer down, each layer's
        weight-gradient compute, its communication issued (non-blocking), then its input-gradient
        compute, but for layer 0, which has none (the pass ends at its weight gradient)."""
        for i in reversed(range(len(self.w.layers))):
            layer = self.w.layers[i]
            self.compute(layer.wg_ns, it)
            done = self.communicate("wg", layer, it, i)   # non-blocking
            for r in self.active:
                self.wg_ready[i][r] = done[r] if done else ()
            if i > 0:
                self.compute(layer.ig_ns, it)
