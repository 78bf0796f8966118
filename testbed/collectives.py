"""Collective schedules as message DAGs, pure.

A schedule is a list of Messages; a message may start once every message in its ``deps``
has fully arrived at its destination. The traffic engine executes any such DAG.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Message:
    id: int
    iteration: int
    step: int
    src: str
    dst: str
    bytes: int
    deps: tuple[int, ...]
    chunk: int = -1
    tag: str = "collective"  # or "bulk", "victim": background traffic, not part of the collective


def chunk_sizes(total_bytes: int, n: int) -> list[int]:
    base, extra = divmod(total_bytes, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def ring_allreduce(ranks: list[str], bytes_per_rank: int, iterations: int = 1) -> list[Message]:
    """Reduce-scatter then all-gather around the ring ranks[0] -> ranks[1] -> ... -> ranks[0].

    At step k (0 <= k < 2(N-1)) rank r sends chunk (r - k) mod N to rank r+1; it can do so
    only once the chunk it received at step k-1 (from rank r-1) has fully arrived, which it
    reduces (reduce-scatter) or forwards (all-gather). Iteration i+1 starts when every message
    of iteration i has arrived (a barrier, as a training step's next AllReduce).
    """
    n = len(ranks)
    if n < 2:
        raise ValueError("a ring needs at least 2 ranks")
    if len(set(ranks)) != n:
        raise ValueError("ranks must be distinct")
    sizes = chunk_sizes(bytes_per_rank, n)
    steps = 2 * (n - 1)
    msgs: list[Message] = []
    prev_last: tuple[int, ...] = ()
    for it in range(iterations):
        first = len(msgs)

        def mid(k: int, r: int) -> int:
            return first + k * n + r

        for k in range(steps):
            for r in range(n):
                deps = (mid(k - 1, (r - 1) % n),) if k else prev_last
                chunk = (r - k) % n
                msgs.append(Message(mid(k, r), it, k, ranks[r], ranks[(r + 1) % n], sizes[chunk], deps, chunk))
        prev_last = tuple(mid(steps - 1, r) for r in range(n))
    return msgs


def shift_permutation(ranks: list[str], bytes_per_rank: int, shift: int, iterations: int = 1) -> list[Message]:
    """Every rank r sends ``bytes_per_rank`` to rank r + shift at once (a permutation, the
    classic stress of a fabric's bisection and of ECMP); iterations are separated by a barrier."""
    n = len(ranks)
    if n < 2 or shift % n == 0:
        raise ValueError(f"a shift of {shift} over {n} ranks sends nothing anywhere")
    msgs: list[Message] = []
    prev: tuple[int, ...] = ()
    for it in range(iterations):
        first = len(msgs)
        for r in range(n):
            msgs.append(Message(first + r, it, 0, ranks[r], ranks[(r + shift) % n], bytes_per_rank, prev))
        prev = tuple(range(first, first + n))
    return msgs


def incast(receiver: str, senders: list[str], bytes_per_sender: int, iterations: int = 1) -> list[Message]:
    """Every sender sends ``bytes_per_sender`` to one receiver at once (N:1, the partition-
    aggregate pattern that fills a switch's buffer); iterations are separated by a barrier."""
    if not senders or receiver in senders:
        raise ValueError("an incast needs senders other than its receiver")
    msgs: list[Message] = []
    prev: tuple[int, ...] = ()
    for it in range(iterations):
        first = len(msgs)
        for i, s in enumerate(senders):
            msgs.append(Message(first + i, it, 0, s, receiver, bytes_per_sender, prev))
        prev = tuple(range(first, first + len(senders)))
    return msgs


def background(first_id: int, pairs: list[tuple[str, str]], nbytes: int, tag: str) -> list[Message]:
    """One message per (src, dst) pair, all free to start at once, outside any collective."""
    return [Message(first_id + i, -1, 0, s, d, nbytes, (), -1, tag) for i, (s, d) in enumerate(pairs)]


def ring_allreduce_bound_s(n: int, bytes_per_rank: int, bw_bps: float) -> float:
    """Bandwidth term of the ring AllReduce cost model: 2(N-1)/N x S/B."""
    return 2 * (n - 1) / n * bytes_per_rank * 8 / bw_bps


def bound_s(workload: str, n: int, bytes_per_rank: int, bw_bps: float) -> float:
    """Analytical time of one iteration at link rate B with no contention."""
    if workload == "ring_allreduce":
        return ring_allreduce_bound_s(n, bytes_per_rank, bw_bps)
    if workload == "shift":
        return bytes_per_rank * 8 / bw_bps
    if workload == "incast":  # n senders share the receiver's link
        return n * bytes_per_rank * 8 / bw_bps
    raise ValueError(f"no cost model for {workload}")


def bound_formula(workload: str) -> str:
    return {"ring_allreduce": "2(N-1)/N x S/B", "shift": "S/B", "incast": "N x S/B"}[workload]
