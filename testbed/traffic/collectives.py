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
    # What a collective's message carries: which of the buffer's N segments, and whether the
    # receiver reduces them into its own ("reduce"), takes them as they are ("copy"), or the
    # message is its own data for that receiver ("a2a"). Empty for plain transfers.
    op: str = ""
    segments: tuple[int, ...] = ()
    # A compute step (op "compute", src == dst, no bytes): done duration_ns after it may start.
    duration_ns: int = 0
    # Which collective instance (or pipeline phase) of a training step it belongs to, when a
    # step has several: results time each one.
    group: str = ""
    # Which occurrence of that group a message belongs to, when a step runs it many times (a
    # per-layer TP or EP collective); -1: the group occurs once per iteration.
    instance: int = -1
    # Which of the scenario's [[jobs]] it belongs to ("" without jobs).
    job: str = ""
    # The communicator (NCCL process group) it runs on: "tp", "dp", "ep", "pp", a trace's process
    # group; "" the job's world. NCCL connects each communicator on its own, so messages of two
    # communicators between the same hosts take different queue pairs.
    comm: str = ""


def chunk_sizes(total_bytes: int, n: int) -> list[int]:
    base, extra = divmod(total_bytes, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


class ScheduleBuilder:
    """Appends messages with consecutive ids, and keeps what each rank has received in this
    iteration (``inbox``): a rank that runs its steps in order may use any of it."""

    def __init__(self, seg_bytes: list[int], iteration: int, msgs: list[Message], group: str = "",
                 instance: int = -1, comm: str = ""):
        self.seg_bytes, self.iteration, self.msgs, self.group = seg_bytes, iteration, msgs, group
        self.instance, self.comm = instance, comm
        self.inbox: dict[str, list[int]] = {}

    def send(self, step: int, src: str, dst: str, segments: tuple[int, ...], op: str, deps: tuple[int, ...],
             chunk: int = -1) -> int:
        mid = len(self.msgs)
        self.msgs.append(Message(mid, self.iteration, step, src, dst, sum(self.seg_bytes[s] for s in segments),
                                 tuple(deps), chunk, "collective", op, tuple(segments), 0, self.group,
                                 self.instance, comm=self.comm))
        self.inbox.setdefault(dst, []).append(mid)
        return mid

    def after_all(self, rank: str, start: tuple[int, ...]) -> tuple[int, ...]:
        """Deps of a step whose data may come from any earlier step of the rank's program."""
        return tuple(sorted(set(start) | set(self.inbox.get(rank, ()))))


def ring_phase(b: ScheduleBuilder, ring: list[str], chunks: list[tuple[int, ...]], op: str, offset: int,
                start: dict[str, tuple[int, ...]], step0: int, in_order: bool = False) -> dict[str, tuple[int, ...]]:
    """n-1 steps around ``ring``: at step k member r sends chunk (r + offset - k) mod n to r+1,
    after the chunk it received at step k-1 (at step 0, after ``start[r]``). Reduce-scatter is
    offset 0 with op reduce (member r ends with chunk r+1 complete); all-gather after it is
    offset 1 with op copy; a plain all-gather is offset 0. Within a flat ring the chunk passed on
    is all a step needs; ``in_order`` (a ring inside a hierarchical algorithm, whose chunks also
    hold what earlier phases delivered) makes each step wait for ``start`` and everything the
    member has received. Returns each member's last arrival."""
    n = len(ring)
    last = dict(start)
    for k in range(n - 1):
        # every member's deps before any send of this step joins an inbox
        deps = {m: b.after_all(m, start[m] + last[m]) if in_order else last[m] for m in ring}
        sent = {}
        for r in range(n):
            c = (r + offset - k) % n
            sent[ring[(r + 1) % n]] = (b.send(step0 + k, ring[r], ring[(r + 1) % n], chunks[c], op, deps[ring[r]],
                                              chunk=c),)
        last = {m: sent[m] for m in ring}
    return last


def iteration_end(msgs: list[Message], first: int) -> tuple[int, ...]:
    """Messages from id ``first`` on that nothing later in the list depends on: the end of an
    iteration, which the next one waits for (a barrier, as a training step's next collective)."""
    needed = {d for m in msgs[first:] for d in m.deps}
    return tuple(m.id for m in msgs[first:] if m.id not in needed)


def _iterate(ranks: list[str], iterations: int, n_segments: int, bytes_per_rank: int, body) -> list[Message]:
    if len(ranks) < 2:
        raise ValueError("a collective needs at least 2 ranks")
    if len(set(ranks)) != len(ranks):
        raise ValueError("ranks must be distinct")
    seg_bytes = chunk_sizes(bytes_per_rank, n_segments)
    msgs: list[Message] = []
    barrier: tuple[int, ...] = ()
    for it in range(iterations):
        first = len(msgs)
        body(ScheduleBuilder(seg_bytes, it, msgs), {r: barrier for r in ranks})
        barrier = iteration_end(msgs, first)
    return msgs


def ring_allreduce(ranks: list[str], bytes_per_rank: int, iterations: int = 1) -> list[Message]:
    """Reduce-scatter then all-gather around the ring ranks[0] -> ranks[1] -> ... -> ranks[0].

    At step k (0 <= k < 2(N-1)) rank r sends chunk (r - k) mod N to rank r+1; it can do so
    only once the chunk it received at step k-1 (from rank r-1) has fully arrived, which it
    reduces (reduce-scatter) or forwards (all-gather). Iteration i+1 starts when every message
    of iteration i has arrived (a barrier, as a training step's next AllReduce).
    """
    n = len(ranks)
    chunks = [(c,) for c in range(n)]

    def body(b, start):
        done = ring_phase(b, ranks, chunks, "reduce", 0, start, 0)
        ring_phase(b, ranks, chunks, "copy", 1, done, n - 1)
    return _iterate(ranks, iterations, n, bytes_per_rank, body)


def ring_reducescatter(ranks: list[str], bytes_per_rank: int, iterations: int = 1) -> list[Message]:
    """The first half of the ring AllReduce: N-1 steps, each rank ends with 1/N of the buffer
    reduced over all ranks (rank r with chunk r+1)."""
    n = len(ranks)
    chunks = [(c,) for c in range(n)]
    return _iterate(ranks, iterations, n, bytes_per_rank,
                    lambda b, start: ring_phase(b, ranks, chunks, "reduce", 0, start, 0))


def ring_allgather(ranks: list[str], bytes_per_rank: int, iterations: int = 1) -> list[Message]:
    """N-1 steps around the ring; rank r starts with chunk r of the ``bytes_per_rank`` output
    buffer and every rank ends with all of it."""
    n = len(ranks)
    chunks = [(c,) for c in range(n)]
    return _iterate(ranks, iterations, n, bytes_per_rank,
                    lambda b, start: ring_phase(b, ranks, chunks, "copy", 0, start, 0))


def halving_doubling_allreduce(ranks: list[str], bytes_per_rank: int, iterations: int = 1) -> list[Message]:
    """Rabenseifner's AllReduce for N a power of two: reduce-scatter by recursive halving (at
    distance N/2, N/4, ..., 1 each rank sends its partner the half of its range the partner
    keeps, then reduces the half it keeps), then all-gather by recursive doubling (at distance
    1, 2, ..., N/2 each rank sends its partner everything it holds). 2 log2 N steps; every rank
    sends 2(N-1)/N x S."""
    n = len(ranks)
    if n & (n - 1):
        raise ValueError(f"halving-doubling needs a power-of-two number of ranks, got {n}")
    m = n.bit_length() - 1

    def body(b, start):
        idx = {r: i for i, r in enumerate(ranks)}
        rng = {r: (0, n) for r in ranks}
        last = dict(start)
        for k in range(m):  # recursive halving
            d = n >> (k + 1)
            sent, keep = {}, {}
            deps = {r: b.after_all(r, last[r]) for r in ranks}
            for r in ranks:
                lo, hi = rng[r]
                mid = (lo + hi) // 2
                give, keep[r] = ((lo, mid), (mid, hi)) if idx[r] & d else ((mid, hi), (lo, mid))
                p = ranks[idx[r] ^ d]
                sent[p] = (b.send(k, r, p, tuple(range(*give)), "reduce", deps[r]),)
            rng, last = keep, sent
        for k in range(m):  # recursive doubling
            d = 1 << k
            sent, grown = {}, {}
            deps = {r: b.after_all(r, last[r]) for r in ranks}
            for r in ranks:
                p = ranks[idx[r] ^ d]
                sent[p] = (b.send(m + k, r, p, tuple(range(*rng[r])), "copy", deps[r]),)
                (a, z), (c, e) = rng[r], rng[p]
                grown[r] = (min(a, c), max(z, e))
            rng, last = grown, sent
    return _iterate(ranks, iterations, n, bytes_per_rank, body)


def torus2d_allreduce(grid: list[list[str]], bytes_per_rank: int, iterations: int = 1) -> list[Message]:
    """Hierarchical AllReduce on an X x Y grid of ranks (grid[y][x]; rows along X): ring
    reduce-scatter along each row, ring AllReduce along each column on the 1/X of the buffer a
    rank then holds, ring all-gather along each row. The buffer has X*Y segments; a row phase
    moves chunks of Y segments, a column phase single segments. Each rank's column phase starts
    when its own row phase has delivered to it; it sends 2(XY-1)/(XY) x S, as a flat ring does,
    in 2(X-1) + 2(Y-1) steps instead of 2(XY-1)."""
    ys, xs = len(grid), len(grid[0])
    if any(len(row) != xs for row in grid) or xs < 2 or ys < 2:
        raise ValueError("a 2D AllReduce needs a rectangular grid of at least 2 x 2 ranks")
    ranks = [r for row in grid for r in row]
    row_chunks = [tuple(range(c * ys, (c + 1) * ys)) for c in range(xs)]

    def body(b, start):
        held = {}
        done = {}
        for row in grid:  # reduce-scatter along X: member i ends with chunk i+1 of the row
            done.update(ring_phase(b, row, row_chunks, "reduce", 0, {r: start[r] for r in row}, 0))
            for i, r in enumerate(row):
                held[r] = row_chunks[(i + 1) % xs]
        for x in range(xs):  # AllReduce along Y on the chunk this column holds, one segment per member
            col = [grid[y][x] for y in range(ys)]
            seg_chunks = [(s,) for s in held[col[0]]]
            mid = ring_phase(b, col, seg_chunks, "reduce", 0, {r: done[r] for r in col}, xs - 1, in_order=True)
            done.update(ring_phase(b, col, seg_chunks, "copy", 1, mid, xs - 1 + ys - 1, in_order=True))
        for row in grid:  # all-gather along X
            ring_phase(b, row, row_chunks, "copy", 1, {r: done[r] for r in row}, xs - 1 + 2 * (ys - 1), in_order=True)
    return _iterate(ranks, iterations, xs * ys, bytes_per_rank, body)


def all_to_all(ranks: list[str], bytes_per_rank: int, iterations: int = 1) -> list[Message]:
    """Every rank sends a different 1/N of its ``bytes_per_rank`` buffer to every other rank, all
    at once (as NCCL's all-to-all posts every peer's send together)."""
    n = len(ranks)

    def body(b, start):
        for r, src in enumerate(ranks):
            for j in range(1, n):
                dst = ranks[(r + j) % n]
                b.send(0, src, dst, ((r + j) % n,), "a2a", start[src])
    return _iterate(ranks, iterations, n, bytes_per_rank, body)


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


def data_flow(msgs: list[Message], initial: dict[str, dict[int, frozenset]]) -> dict[str, dict[int, frozenset]]:
    """What every rank holds at the end of a collective schedule, per segment: the set of ranks
    whose contribution it has summed. A message carries what its sender is guaranteed to hold
    when it may start: its initial data plus what arrived from messages it (transitively)
    depends on. A reduce that would add a contribution twice raises ValueError (a chunk must be
    reduced exactly once), as does a dependency on a later message (the DAG must be acyclic)."""
    ancestors: dict[int, set[int]] = {}
    carried: dict[int, dict[int, frozenset]] = {}
    into: dict[str, list[int]] = {r: [] for r in initial}
    by_id = {m.id: m for m in msgs}

    def apply(state: dict, m: Message, content: dict) -> None:
        for seg in m.segments:
            if m.op == "reduce":
                have = state.get(seg, frozenset())
                if have & content[seg]:
                    raise ValueError(f"message {m.id} ({m.src}->{m.dst}) adds contributions "
                                     f"{sorted(have & content[seg])} to segment {seg} a second time")
                state[seg] = have | content[seg]
            elif m.op == "copy":
                state[seg] = content[seg]
    for m in msgs:
        if any(d >= m.id or d not in by_id for d in m.deps):
            raise ValueError(f"message {m.id} depends on a later or unknown message: {m.deps}")
        anc: set[int] = set()
        for d in m.deps:
            anc.add(d)
            anc |= ancestors[d]
        ancestors[m.id] = anc
        know = dict(initial[m.src])
        for x in into[m.src]:
            if x in anc:
                apply(know, by_id[x], carried[x])
        carried[m.id] = {seg: know.get(seg, frozenset()) for seg in m.segments}
        into[m.dst].append(m.id)
    final = {}
    for r, ids in into.items():
        state = dict(initial[r])
        for x in ids:
            apply(state, by_id[x], carried[x])
        final[r] = state
    return final


def ring_allreduce_bound_s(n: int, bytes_per_rank: int, bw_bps: float) -> float:
    """Bandwidth term of the ring AllReduce cost model: 2(N-1)/N x S/B."""
    return 2 * (n - 1) / n * bytes_per_rank * 8 / bw_bps


# Bytes each rank sends per iteration, as a fraction of S (the cost models' bandwidth terms,
# REFERENCE.md and nccl-tests' bus bandwidth factors).
SEND_FRACTION = {
    "ring_allreduce": lambda n: 2 * (n - 1) / n,
    "halving_doubling": lambda n: 2 * (n - 1) / n,
    "torus2d_allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
}
FORMULA = {"ring_allreduce": "2(N-1)/N x S/B", "halving_doubling": "2(N-1)/N x S/B",
           "torus2d_allreduce": "2(N-1)/N x S/B", "allgather": "(N-1)/N x S/B", "reducescatter": "(N-1)/N x S/B",
           "alltoall": "(N-1)/N x S/B", "shift": "S/B", "incast": "N x S/B"}


def bound_s(workload: str, n: int, bytes_per_rank: int, bw_bps: float) -> float:
    """Analytical time of one iteration at link rate B with no contention (bandwidth term only)."""
    if workload in SEND_FRACTION:
        return SEND_FRACTION[workload](n) * bytes_per_rank * 8 / bw_bps
    if workload == "shift":
        return bytes_per_rank * 8 / bw_bps
    if workload == "incast":  # n senders share the receiver's link
        return n * bytes_per_rank * 8 / bw_bps
    raise ValueError(f"no cost model for {workload}")


def bound_formula(workload: str) -> str:
    return FORMULA[workload]


def busbw_factor(workload: str, n: int) -> float:
    """nccl-tests' bus bandwidth = algorithm bandwidth x this."""
    return SEND_FRACTION[workload](n) if workload in SEND_FRACTION else 1.0
