"""Data-parallel training with gradient buckets, as PyTorch DDP and Horovod run it, as a message DAG,
pure.

Each rank's backward pass is cut into ``buckets`` (bucket 0 holds the last layers: its gradients are
ready first). With overlap, a bucket's ring AllReduce starts on each rank as soon as that rank's
part of the backward that produces it is done, while the rest of the backward computes; the next
step's forward runs its layers in order, each slice waiting only for the bucket that holds its
parameters. Without overlap every bucket waits for the whole backward, and the next forward for
every bucket, as an AllReduce after backward followed by the optimizer step does.
"""
from __future__ import annotations

from testbed.traffic.collectives import Message, ScheduleBuilder, chunk_sizes, ring_phase


def ddp_step(ranks: list[str], grad_bytes: int, buckets: int, fwd_ns: int, bwd_ns: int, overlap: bool,
             iterations: int) -> list[Message]:
    """``iterations`` training steps of ``ranks``, each holding grad_bytes of gradients split into
    ``buckets`` equal buckets; fwd_ns and bwd_ns are a rank's whole forward and backward compute."""
    n = len(ranks)
    if n < 2 or len(set(ranks)) != n:
        raise ValueError("data parallelism needs at least 2 distinct ranks")
    if buckets < 1:
        raise ValueError("at least one bucket")
    msgs: list[Message] = []
    fwd, bwd = chunk_sizes(fwd_ns, buckets), chunk_sizes(bwd_ns, buckets)
    sizes = chunk_sizes(grad_bytes, buckets)
    reduced: dict[str, list[tuple[int, ...]]] = {r: [()] * buckets for r in ranks}   # last iteration's buckets

    def compute(it, step, host, deps, duration_ns, chunk) -> int:
        msgs.append(Message(len(msgs), it, step, host, host, 0, tuple(deps), chunk, "compute", "compute",
                            duration_ns=duration_ns))
        return msgs[-1].id

    for it in range(iterations):
        last_bwd: dict[str, list[int]] = {}
        for r in ranks:
            prev: tuple[int, ...] = ()
            for j in range(buckets):
                # forward slice j runs the first layers first: it needs bucket buckets-1-j's parameters
                need = reduced[r][buckets - 1 - j] if overlap else tuple(d for b in reduced[r] for d in b)
                prev = (compute(it, j, r, prev + need, fwd[j], j),)
            done = []
            for k in range(buckets):
                prev = (compute(it, buckets + k, r, prev, bwd[k], k),)
                done.append(prev[0])
            last_bwd[r] = done
        step0 = 2 * buckets
        for k in range(buckets):
            b = ScheduleBuilder(chunk_sizes(sizes[k], n), it, msgs, f"bucket {k}")
            ready = {r: (last_bwd[r][k] if overlap else last_bwd[r][-1],) for r in ranks}
            chunks = [(c,) for c in range(n)]
            rs = ring_phase(b, ranks, chunks, "reduce", 0, ready, step0, in_order=True)
            ag = ring_phase(b, ranks, chunks, "copy", 1, {r: rs[r] + ready[r] for r in ranks}, step0 + n - 1,
                            in_order=True)
            for r in ranks:
                reduced[r][k] = ag[r]
    return msgs
