"""What the trace readers share: their error, and one collective appended to a message DAG."""
from __future__ import annotations

from pathlib import Path

from testbed.errors import InputError
from testbed.traffic.collectives import (Message, all_to_all, halving_doubling_allreduce, ring_allgather, ring_allreduce,
                                         ring_reducescatter)


class TraceError(InputError):
    """A trace file that cannot be read: names the file and where in it."""

    def __init__(self, path: Path | str, position: str, message: str):
        super().__init__(str(path), position, message)


COLLECTIVE_BUILDERS = {
    "ring": {"allreduce": ring_allreduce, "allgather": ring_allgather, "reducescatter": ring_reducescatter,
             "alltoall": all_to_all},
    "halving_doubling": {"allreduce": halving_doubling_allreduce, "allgather": ring_allgather,
                         "reducescatter": ring_reducescatter, "alltoall": all_to_all},
}


def append_collective(msgs: list[Message], kind: str, algorithm: str, ranks: list[str], nbytes: int,
                starts: dict[str, tuple[int, ...]], iteration: int, step0: int,
                group: str, comm: str = "") -> dict[str, tuple[int, ...]]:
    """Append one collective over ``ranks`` (every message shifted to follow ``msgs``, each rank's
    first sends after ``starts[rank]``); returns, per rank, the arrivals it has to wait for."""
    sched = COLLECTIVE_BUILDERS[algorithm][kind](ranks, max(nbytes, len(ranks)), 1)
    off = len(msgs)
    for m in sched:
        # every send of a rank also waits for the rank's own start: its data is ready then
        deps = tuple(sorted({d + off for d in m.deps} | set(starts[m.src])))
        msgs.append(Message(m.id + off, iteration, step0 + m.step, m.src, m.dst, m.bytes, deps, m.chunk,
                            "collective", m.op, m.segments, 0, group, comm=comm))
    done = {r: tuple(m.id + off for m in sched if m.dst == r) for r in ranks}
    return {r: done[r] or starts[r] for r in ranks}
