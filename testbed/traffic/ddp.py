"""Data-parallel training with gradient buckets, as PyTorch DDP and Horovod run it, as a message DAG,
pure.

Each rank's backward pass fills gradient buckets in the order it produces them (bucket 0 holds the
last layers: its gradients are ready first). Their sizes are PyTorch DDP's: the first bucket holds
1 MiB (torch.nn.parallel.distributed's _DEFAULT_FIRST_BUCKET_BYTES), every later one bucket_cap_mb
(25 MiB by default), the last what is left (bucket_sizes). A bucket's slice of the backward and of
the next forward is its share of the bytes. With overlap, a bucket's ring AllReduce starts on each
rank as soon as that rank's part of the backward that produces it is done, while the rest of the
backward computes; the next step's forward runs its layers in order, each slice waiting only for
the bucket that holds its parameters. Without overlap every bucket waits for the whole backward,
and the next forward for every bucket, as an AllReduce after backward followed by the optimizer
step does. Either way a rank runs its buckets' AllReduces one after another, as NCCL runs the
collectives of one communicator in its stream's order: a bucket's ring starts on a rank once the
bucket before it is reduced there.
"""
from __future__ import annotations

from testbed.traffic.collectives import Message, ScheduleBuilder, chunk_sizes, ring_phase

# PyTorch DDP's defaults (torch/nn/parallel/distributed.py)
FIRST_BUCKET_BYTES = 1 << 20
BUCKET_CAP_BYTES = 25 << 20


def bucket_sizes(grad_bytes: int, first_bytes: int = FIRST_BUCKET_BYTES, cap_bytes: int = BUCKET_CAP_BYTES) -> list[int]:
    """The bytes of each bucket, in the order the backward fills them: DDP's first bucket, then
    buckets of cap_bytes, the last what is left. DDP never splits a parameter, so its buckets
    close just past their cap; gradients here are a byte stream, so they close at it."""
    if grad_bytes < 1 or first_bytes < 1 or cap_bytes < 1:
        raise ValueError("gradients, the first bucket and the cap need at least a byte each")
    sizes = [min(grad_bytes, first_bytes)]
    rest = grad_bytes - sizes[0]
    while rest > 0:
        sizes.append(min(cap_bytes, rest))
        rest -= sizes[-1]
    return sizes


def shares(total_ns: int, sizes: list[int]) -> list[int]:
    """total_ns cut in proportion to sizes (the remainder in the last)."""
    whole = sum(sizes)
    out = [total_ns * b // whole for b in sizes[:-1]]
    return out + [total_ns - sum(out)]


def ddp_step(ranks: list[str], sizes: list[int], fwd_ns: int, bwd_ns: int, overlap: bool,
             iterations: int) -> list[Message]:
    """``iterations`` training steps of ``ranks``, each holding gradients in buckets of ``sizes``
    bytes (bucket_sizes); fwd_ns and bwd_ns are a rank's whole forward and backward compute."""
    n = len(ranks)
    if n < 2 or len(set(ranks)) != n:
        raise ValueError("data parallelism needs at least 2 distinct ranks")
    if not sizes or min(sizes) < 1:
        raise ValueError("at least one bucket, of a byte or more")
    buckets = len(sizes)
    msgs: list[Message] = []
    fwd, bwd = shares(fwd_ns, sizes), shares(bwd_ns, sizes)
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
            # its slice of the backward (or all of it), and the bucket before it reduced on this
            # rank: one communicator's collectives run one after another
            ready = {r: (last_bwd[r][k] if overlap else last_bwd[r][-1],) + (reduced[r][k - 1] if k else ())
                     for r in ranks}
            chunks = [(c,) for c in range(n)]
            rs = ring_phase(b, ranks, chunks, "reduce", 0, ready, step0, in_order=True)
            ag = ring_phase(b, ranks, chunks, "copy", 1, {r: rs[r] + ready[r] for r in ranks}, step0 + n - 1,
                            in_order=True)
            for r in ranks:
                reduced[r][k] = ag[r]
    return msgs
