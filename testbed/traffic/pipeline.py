"""Pipeline-parallel training steps as message DAGs with compute, with tensor and expert
parallelism across hosts, pure.

A 1F1B schedule (Megatron-LM's non-interleaved schedule): stage s of p runs min(p - s - 1, m)
warm-up forwards, then alternates one forward and one backward, then cools down with the
remaining backwards. Each forward of micro-batch i ends with its activations sent to stage s+1,
each backward with the gradient of those activations sent back to stage s-1. With dp > 1 there
are dp replicas of the pipeline, and each stage's replicas AllReduce that stage's weight
gradients (a ring) once their last backward is done. Compute steps are Messages with op
"compute" and a duration, on their stage's host; a stage runs its steps in program order.

Tensor parallelism across hosts (tp > 1): each stage of each replica runs on a TP group of tp
hosts. Every layer has two blocks, attention and MLP (a third and two thirds of the layer's
compute, as their 4 h^2 and 8 h^2 weights), and each block's output is AllReduced over the TP
group before the next block may start, forward and backward (Megatron's column/row-parallel
pair). With sequence parallelism the AllReduce becomes an all-gather before the block and a
reduce-scatter after it. TP host t of a stage sends its share of the activations to TP host t of
the next stage.

Expert parallelism (ep > 1, with MoE layers every moe_every layers): a MoE layer's MLP block is
its experts, spread over an EP group of ep hosts of the same stage and TP index in consecutive
replicas (Megatron carves EP out of DP). The block dispatches its tokens with an all-to-all over
the EP group, computes, and combines them back with another, forward and backward. An EP group
couples its replicas' pipelines: every member waits for the others' tokens. A MoE layer holds no
dense MLP: its experts' gradients are reduced apart from the dense ones, over the
expert-data-parallel group (Megatron's parallel_state: the dp / ep replicas whose position in
their EP group is the same, so they hold the same experts), on a communicator of their own.
"""
from __future__ import annotations

from dataclasses import dataclass

from testbed.traffic.collectives import Message, ScheduleBuilder, chunk_sizes, iteration_end, ring_phase

# Megatron's rank orders, innermost first: rank = t + tp x (d + dp x s) for its default, with the
# pipeline stages outermost; or the stages of a replica on consecutive ranks
RANK_ORDERS = ("tp-dp-pp", "tp-pp-dp")


@dataclass(frozen=True)
class PipelineJob:
    pp: int                      # stages
    dp: int                      # replicas
    microbatches: int            # m, per replica and step
    activation_bytes: int        # sent per micro-batch and stage boundary, each way, per TP host
    grad_bytes_per_stage: int    # AllReduced across the replicas of a stage, per TP host
    fwd_ns: int                  # compute per micro-batch and stage
    bwd_ns: int
    tp: int = 1                  # hosts in a stage's TP group
    layers_per_stage: int = 1
    sequence_parallel: bool = False
    tp_bytes: int = 0            # a TP collective's buffer: a block's output activations
    ep: int = 1                  # hosts in an EP group (consecutive replicas)
    moe_every: int = 0           # every moe_every-th layer is MoE (0: none)
    a2a_bytes: int = 0           # an EP all-to-all's send buffer per host
    num_experts: int = 0         # experts of a MoE layer, num_experts / ep on each EP host (0: no MoE)
    mlp_grad_bytes: int = 0      # a dense MLP's share of grad_bytes_per_stage per TP host (a MoE layer has none)
    expert_grad_bytes: int = 0   # a MoE layer's gradients per TP host: its num_experts / ep experts' MLPs

    def moe_layer(self, stage: int, layer: int) -> bool:
        """Megatron's moe_layer_freq: layers 0, k, 2k, ... of the model are MoE."""
        return self.moe_every > 0 and (stage * self.layers_per_stage + layer) % self.moe_every == 0

    def stage_grad_bytes(self, stage: int) -> tuple[int, int]:
        """(dense, expert) gradient bytes of one TP host of ``stage``: Megatron's DDP reduces the
        dense ones over every replica, the experts' over the expert-data-parallel group."""
        moe = sum(self.moe_layer(stage, layer) for layer in range(self.layers_per_stage))
        return max(0, self.grad_bytes_per_stage - moe * self.mlp_grad_bytes), moe * self.expert_grad_bytes

    def expert_dp_groups(self) -> list[list[int]]:
        """The replicas of each expert-data-parallel group: EP groups are consecutive replicas, so
        the replicas at the same place in theirs (d mod ep) hold the same experts."""
        return [list(range(j, self.dp, self.ep)) for j in range(self.ep)]


def mlp_bytes(hidden: int, bytes_per_element: int, tp: int) -> int:
    """One TP host's share of an MLP's weights, 8 h^2 (h to 4h and back), as of an expert's."""
    return 8 * hidden * hidden * bytes_per_element // tp


def model_bytes(micro_batch: int, seq_len: int, hidden: int, bytes_per_element: int, tp: int,
                layers_per_stage: int) -> tuple[int, int]:
    """(activation bytes per micro-batch and boundary, gradient bytes per stage) of one TP host of
    a transformer: activations b x s x h elements, divided by TP under sequence parallelism
    (REFERENCE.md); 12 h^2 weights per layer (attention 4 h^2, MLP 8 h^2; biases and embeddings
    left out), each TP host holding 1/TP of them."""
    act = micro_batch * seq_len * hidden * bytes_per_element // tp
    grads = 12 * hidden * hidden * layers_per_stage * bytes_per_element // tp
    return act, grads


def placement(ranks: list[str], tp: int, dp: int, pp: int, order: str = "tp-dp-pp") -> list[list[list[str]]]:
    """grid[d][s]: the TP group (tp hosts) of stage s of replica d, from ranks in placement order,
    nested as Megatron nests its groups: TP innermost, so a TP group takes consecutive ranks (a
    leaf's or a torus row's hosts when it fits), then DP, then PP (order tp-dp-pp), or PP then DP
    (tp-pp-dp)."""
    if order not in RANK_ORDERS:
        raise ValueError(f"unknown rank order {order!r}")
    if len(ranks) < tp * dp * pp:
        raise ValueError(f"tp x dp x pp = {tp * dp * pp} ranks, {len(ranks)} hosts")

    def rank(t, d, s):
        return t + tp * (d + dp * s) if order == "tp-dp-pp" else t + tp * (s + pp * d)
    return [[[ranks[rank(t, d, s)] for t in range(tp)] for s in range(pp)] for d in range(dp)]


def one_f_one_b(pp: int, m: int, stage: int) -> list[tuple[str, int]]:
    """Stage ``stage``'s program: ("F", i) and ("B", i) in 1F1B order."""
    warm = min(pp - stage - 1, m)
    ops = [("F", i) for i in range(warm)]
    f, b = warm, 0
    while b < m:
        if f < m:
            ops.append(("F", f))
            f += 1
        ops.append(("B", b))
        b += 1
    return ops


def pipeline_step(job: PipelineJob, grid: list[list[list[str]]] | list[list[str]], iterations: int = 1) -> list[Message]:
    """Training steps of ``job``; grid[d][s] is the TP group (a list of tp hosts) of stage s of
    replica d, or with tp = 1 its host. Iteration i+1 starts when all of step i (the DP
    AllReduces included) is done, as an optimizer step does."""
    grid = [[[g] if isinstance(g, str) else list(g) for g in rep] for rep in grid]
    if job.pp < 2 or len(grid) != job.dp or any(len(r) != job.pp for r in grid):
        raise ValueError("grid must be dp lists of pp >= 2 stages")
    if any(len(g) != job.tp for r in grid for g in r):
        raise ValueError(f"every stage needs a TP group of {job.tp} hosts")
    if job.ep < 1 or job.dp % job.ep:
        raise ValueError(f"ep = {job.ep} must divide dp = {job.dp}")
    hosts = [h for r in grid for g in r for h in g]
    if len(set(hosts)) != len(hosts):
        raise ValueError("every TP rank of every stage of every replica needs its own host")
    msgs: list[Message] = []
    barrier: tuple[int, ...] = ()
    for it in range(iterations):
        first = len(msgs)
        b = _Step(job, grid, it, msgs, barrier)
        b.run_1f1b()
        if job.dp > 1:
            b.dp_allreduces()
        barrier = iteration_end(msgs, first)
    return msgs


class _Step:
    """One training step's messages, built in dependency order: all replicas' stage programs are
    simulated together (an EP all-to-all needs every member's tokens), one (stage, op) at a time
    once its input from the neighbouring stage is built."""

    def __init__(self, job: PipelineJob, grid: list[list[list[str]]], it: int, msgs: list[Message],
                 barrier: tuple[int, ...]):
        self.job, self.grid, self.it, self.msgs = job, grid, it, msgs
        hosts = [h for r in grid for g in r for h in g]
        self.prev: dict[str, tuple[int, ...]] = {h: barrier for h in hosts}   # what a host's next step waits for
        self.pending: dict[str, int | None] = {h: None for h in hosts}       # compute not yet emitted, ns
        self.last_compute: dict[str, int] = {}
        self.step = 0
        self.instance = 1 + max((m.instance for m in msgs), default=-1)   # unique over iterations

    # -- per host ---------------------------------------------------------------------------------
    def compute(self, host: str, ns: int) -> None:
        """Queued, so that compute with no communication between merges into one step."""
        self.pending[host] = (self.pending[host] or 0) + ns

    def flush(self, host: str, micro: int) -> None:
        if self.pending[host] is None:
            return
        cid = len(self.msgs)
        self.msgs.append(Message(cid, self.it, self.step, host, host, 0, self.prev[host], micro, "compute", "compute",
                                 duration_ns=self.pending[host]))
        self.prev[host], self.pending[host], self.last_compute[host] = (cid,), None, cid

    # -- collectives over groups of hosts ---------------------------------------------------------
    def _ring(self, groups: list[list[str]], kind: str, micro: int) -> None:
        """A ring all-reduce, all-gather or reduce-scatter of job.tp_bytes over each group."""
        for g in groups:
            for h in g:
                self.flush(h, micro)
            n = len(g)
            b = ScheduleBuilder(chunk_sizes(self.job.tp_bytes, n), self.it, self.msgs, f"tp_{kind}", self.instance,
                               comm="tp")
            self.instance += 1
            chunks = [(c,) for c in range(n)]
            start = {h: self.prev[h] for h in g}
            if kind == "allgather":
                ring_phase(b, g, chunks, "copy", 0, start, self.step)
            else:
                done = ring_phase(b, g, chunks, "reduce", 0, start, self.step)
                if kind == "allreduce":
                    ring_phase(b, g, chunks, "copy", 1, done, self.step + n - 1)
            for h in g:   # the next block needs all of it: what the member held, and all the collective brought it
                self.prev[h] = b.after_all(h, start[h])
        self.step += 1

    def _all_to_all(self, groups: list[list[str]], micro: int) -> None:
        """Every member sends 1/ep of its job.a2a_bytes to every other member, all at once."""
        for g in groups:
            for h in g:
                self.flush(h, micro)
            n = len(g)
            b = ScheduleBuilder(chunk_sizes(self.job.a2a_bytes, n), self.it, self.msgs, "ep_alltoall", self.instance,
                               comm="ep")
            self.instance += 1
            got: dict[str, list[int]] = {h: [] for h in g}
            for r, src in enumerate(g):
                for j in range(1, n):
                    dst = g[(r + j) % n]
                    got[dst].append(b.send(self.step, src, dst, ((r + j) % n,), "a2a", self.prev[src]))
            for h in g:   # the experts' compute needs the member's own tokens and everyone else's
                self.prev[h] = tuple(sorted(set(self.prev[h]) | set(got[h])))
        self.step += 1

    # -- one (stage, op) of every replica ---------------------------------------------------------
    def stage_op(self, s: int, kind: str, micro: int, inputs: dict[str, int]) -> dict[str, int]:
        """Stage s's forward or backward of micro-batch ``micro`` on every replica; inputs: each
        host's arriving activations (or gradients). Returns what each host sends on: message ids."""
        job = self.job
        groups = [rep[s] for rep in self.grid]                   # each replica's TP group
        ep_groups = [[self.grid[d][s][t] for d in range(e, e + job.ep)]
                     for e in range(0, job.dp, job.ep) for t in range(job.tp)]
        for h, mid in inputs.items():
            self.prev[h] = self.prev[h] + (mid,)
        thirds = chunk_sizes(job.fwd_ns if kind == "F" else job.bwd_ns, 3 * job.layers_per_stage)
        layers = range(job.layers_per_stage) if kind == "F" else reversed(range(job.layers_per_stage))
        for layer in layers:
            blocks = [("attn", thirds[3 * layer]), ("mlp", thirds[3 * layer + 1] + thirds[3 * layer + 2])]
            for block, ns in (blocks if kind == "F" else blocks[::-1]):
                if block == "mlp" and job.moe_layer(s, layer) and job.ep > 1:
                    # dispatch to the experts, compute, combine (the backward runs the same pattern)
                    self._all_to_all(ep_groups, micro)
                    for g in groups:
                        for h in g:
                            self.compute(h, ns)
                    self._all_to_all(ep_groups, micro)
                    continue
                if job.tp > 1 and job.sequence_parallel:
                    self._ring(groups, "allgather", micro)
                for g in groups:
                    for h in g:
                        self.compute(h, ns)
                if job.tp > 1:
                    self._ring(groups, "reducescatter" if job.sequence_parallel else "allreduce", micro)
        out = {}
        for g in groups:
            for h in g:
                self.flush(h, micro)
                out[h] = self.prev[h]
        self.step += 1
        return out

    def run_1f1b(self) -> None:
        job = self.job
        p, m = job.pp, job.microbatches
        programs = [one_f_one_b(p, m, s) for s in range(p)]
        pc = [0] * p
        sent: dict[tuple[str, int, int], dict[str, int]] = {}   # ("A"|"G", stage it left, micro) -> host -> message
        while any(pc[s] < len(programs[s]) for s in range(p)):
            progressed = False
            for s in range(p):
                if pc[s] == len(programs[s]):
                    continue
                kind, i = programs[s][pc[s]]
                need = (("A", s - 1, i) if s > 0 else None) if kind == "F" else (("G", s + 1, i) if s < p - 1 else None)
                if need is not None and need not in sent:
                    continue  # its input is built by another stage first
                ends = self.stage_op(s, kind, i, sent.get(need, {}) if need else {})
                to = s + 1 if kind == "F" else s - 1
                if 0 <= to < p:
                    into: dict[str, int] = {}
                    for rep in self.grid:
                        for t, h in enumerate(rep[s]):
                            mid = len(self.msgs)
                            self.msgs.append(Message(mid, self.it, self.step, h, rep[to][t], job.activation_bytes,
                                                     ends[h], i, "collective", "p2p", comm="pp"))
                            into[rep[to][t]] = mid
                    sent[("A" if kind == "F" else "G", s, i)] = into
                pc[s] += 1
                progressed = True
            if not progressed:
                raise RuntimeError("1F1B programs deadlocked")  # cannot happen for a valid schedule

    def dp_allreduces(self) -> None:
        """Each stage's (and TP index's) replicas AllReduce its dense gradients once their last
        backward is done, and each expert-data-parallel group its experts' gradients, each a ring
        on its own communicator, every step also waiting for the member's own gradients."""
        job = self.job
        step0 = max(m.step for m in self.msgs if m.iteration == self.it) + 1
        for s in range(job.pp):
            dense, expert = job.stage_grad_bytes(s)
            for t in range(job.tp):
                name = f"dp_allreduce stage {s}" + (f" tp {t}" if job.tp > 1 else "")
                self._grad_ring([rep[s][t] for rep in self.grid], dense, name, "dp", step0)
                for g, replicas in enumerate(job.expert_dp_groups()):
                    if len(replicas) > 1 and expert:
                        self._grad_ring([self.grid[d][s][t] for d in replicas], expert,
                                        f"{name} experts {g}", "edp", step0)

    def _grad_ring(self, ring: list[str], nbytes: int, name: str, comm: str, step0: int) -> None:
        if nbytes <= 0:
            return
        n = len(ring)
        grads = ScheduleBuilder(chunk_sizes(nbytes, n), self.it, self.msgs, name, comm=comm)
        chunks = [(c,) for c in range(n)]
        own = {h: (self.last_compute[h],) for h in ring}
        done = ring_phase(grads, ring, chunks, "reduce", 0, own, step0, in_order=True)
        ring_phase(grads, ring, chunks, "copy", 1, {h: done[h] + own[h] for h in ring}, step0 + n - 1, in_order=True)
