"""Pipeline-parallel training steps as message DAGs with compute, pure.

A 1F1B schedule (Megatron-LM's non-interleaved schedule): stage s of p runs min(p - s - 1, m)
warm-up forwards, then alternates one forward and one backward, then cools down with the
remaining backwards. Each forward of micro-batch i ends with its activations sent to stage s+1,
each backward with the gradient of those activations sent back to stage s-1. With dp > 1 there
are dp replicas of the pipeline, and each stage's replicas AllReduce that stage's weight
gradients (a ring) once their last backward is done. Compute steps are Messages with op
"compute" and a duration, on their stage's host; a stage runs its steps in program order.
"""
from __future__ import annotations

from dataclasses import dataclass

from testbed.traffic.collectives import Message, ScheduleBuilder, chunk_sizes, iteration_end, ring_phase


@dataclass(frozen=True)
class PipelineJob:
    pp: int                      # stages
    dp: int                      # replicas
    microbatches: int            # m, per replica and step
    activation_bytes: int        # sent per micro-batch and stage boundary, each way
    grad_bytes_per_stage: int    # AllReduced across the replicas of a stage
    fwd_ns: int                  # compute per micro-batch and stage
    bwd_ns: int


def model_bytes(micro_batch: int, seq_len: int, hidden: int, bytes_per_element: int, tp: int,
                layers_per_stage: int) -> tuple[int, int]:
    """(activation bytes per micro-batch and boundary, gradient bytes per stage) of a transformer:
    activations b x s x h elements, divided by TP under sequence parallelism (REFERENCE.md);
    12 h^2 weights per layer (attention 4 h^2, MLP 8 h^2; biases and embeddings left out), each
    TP rank holding 1/TP of them."""
    act = micro_batch * seq_len * hidden * bytes_per_element // tp
    grads = 12 * hidden * hidden * layers_per_stage * bytes_per_element // tp
    return act, grads


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


def pipeline_step(job: PipelineJob, replicas: list[list[str]], iterations: int = 1) -> list[Message]:
    """Training steps of ``job``; replicas[d][s] is the host of stage s of replica d. Iteration
    i+1 starts when all of step i (the DP AllReduces included) is done, as an optimizer step
    does."""
    if job.pp < 2 or len(replicas) != job.dp or any(len(r) != job.pp for r in replicas):
        raise ValueError("replicas must be dp lists of pp >= 2 hosts")
    hosts = [h for r in replicas for h in r]
    if len(set(hosts)) != len(hosts):
        raise ValueError("every stage of every replica needs its own host")
    msgs: list[Message] = []
    barrier: tuple[int, ...] = ()
    for it in range(iterations):
        first = len(msgs)
        b = ScheduleBuilder([job.activation_bytes], it, msgs)
        last_done: dict[str, int] = {}
        for rep in replicas:
            _replica(b, job, rep, barrier, last_done)
        if job.dp > 1:
            chunks = [(c,) for c in range(job.dp)]
            step0 = max(m.step for m in msgs[first:]) + 1
            for s in range(job.pp):
                grads = ScheduleBuilder(chunk_sizes(job.grad_bytes_per_stage, job.dp), it, msgs,
                                        f"dp_allreduce stage {s}")
                ring = [rep[s] for rep in replicas]
                # in order: every step also waits for the member's own last backward (its gradients)
                done = ring_phase(grads, ring, chunks, "reduce", 0, {h: (last_done[h],) for h in ring}, step0,
                                   in_order=True)
                ring_phase(grads, ring, chunks, "copy", 1, {h: done[h] + (last_done[h],) for h in ring},
                            step0 + job.dp - 1, in_order=True)
        barrier = iteration_end(msgs, first)
    return msgs


def _replica(b: ScheduleBuilder, job: PipelineJob, stages: list[str], barrier: tuple[int, ...],
             last_done: dict[str, int]) -> None:
    """One replica's 1F1B: compute steps in each stage's program order, activations forward and
    gradients backward. Built in dependency order across stages (a step only depends on steps
    already built), by simulating the stages' programs together."""
    p, m = job.pp, job.microbatches
    programs = [one_f_one_b(p, m, s) for s in range(p)]
    pc = [0] * p                      # next step of each stage's program
    prev: list[tuple[int, ...]] = [barrier] * p
    sent: dict[tuple[str, int, int], int] = {}   # ("A"|"G", stage it left, micro-batch) -> message id
    msgs = b.msgs
    while any(pc[s] < len(programs[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            if pc[s] == len(programs[s]):
                continue
            kind, i = programs[s][pc[s]]
            if kind == "F":
                need = ("A", s - 1, i) if s > 0 else None
            else:
                need = ("G", s + 1, i) if s < p - 1 else None
            if need is not None and need not in sent:
                continue  # its input is built by another stage first
            deps = prev[s] + ((sent[need],) if need else ())
            host = stages[s]
            cid = len(msgs)
            msgs.append(Message(cid, b.iteration, pc[s], host, host, 0, deps, i, "compute", "compute",
                                duration_ns=job.fwd_ns if kind == "F" else job.bwd_ns))
            prev[s] = (cid,)
            last_done[host] = cid
            if kind == "F" and s < p - 1:
                sent[("A", s, i)] = _p2p(b, pc[s], host, stages[s + 1], job.activation_bytes, cid, i)
            elif kind == "B" and s > 0:
                sent[("G", s, i)] = _p2p(b, pc[s], host, stages[s - 1], job.activation_bytes, cid, i)
            pc[s] += 1
            progressed = True
        if not progressed:
            raise RuntimeError("1F1B programs deadlocked")  # cannot happen for a valid schedule


def _p2p(b: ScheduleBuilder, step: int, src: str, dst: str, nbytes: int, after: int, micro: int) -> int:
    mid = len(b.msgs)
    b.msgs.append(Message(mid, b.iteration, step, src, dst, nbytes, (after,), micro, "collective", "p2p"))
    return mid
