"""PFC's decisions, pure: which lossless rows assert XOFF, which upstream leaves are paused and
for which rows, what the watchdog ignores. The switch agent feeds it what each row holds (an
egress queue's depth, or under the ingress rule what an (ingress port, class) holds in its
switch) and carries out the pauses and resumes it returns (testbed/fabric/agent.py).

A row at or above its XOFF asserts a pause on each of its feeders (the leaves its pause map
names); below its XON it releases them. A leaf is paused while any row asserts on it, so it is
paused by the first row and resumed by the last. A row the watchdog ignores asks for nothing until
it falls below its XON again.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Pause:
    leaf: int
    row: int        # the row that asked
    cross_ns: int   # when that row crossed XOFF (stamped in the data path; 0: unknown)


@dataclass(frozen=True)
class Resume:
    leaf: int
    row: int        # the last row that held it
    reason: str     # xon, policy, watchdog, agent_stop


@dataclass(frozen=True)
class Restored:
    row: int        # the watchdog stops ignoring it: it fell below XON


class PfcState:
    def __init__(self, rows: int):
        self.xoff = np.zeros(rows, dtype=np.uint64)
        self.xon = np.zeros(rows, dtype=np.uint64)
        self.lossless = np.zeros(rows, dtype=bool)
        self.asserted = np.zeros(rows, dtype=bool)   # this row holds its feeders paused
        self.ignored = np.zeros(rows, dtype=bool)    # the watchdog ignores this row
        self.feeders: dict[int, list[int]] = {}      # row -> leaves it pauses
        self.causes: dict[int, set[int]] = {}        # paused leaf -> rows asserting on it

    # -- policy ------------------------------------------------------------------------------

    def set_thresholds(self, xoff: np.ndarray, xon: np.ndarray) -> list[Resume]:
        """New XOFF/XON per row (0: not lossless); a row no longer lossless releases its feeders."""
        self.xoff[:], self.xon[:] = xoff, xon
        self.lossless = self.xoff > 0
        out: list[Resume] = []
        for row in np.flatnonzero(self.asserted & ~self.lossless):
            out += self._release(int(row), "policy")
        return out

    # -- looking -----------------------------------------------------------------------------

    def look(self, held: np.ndarray, cross_ns: np.ndarray) -> list[Pause | Resume | Restored]:
        """One look at what every row holds now."""
        out: list[Pause | Resume | Restored] = []
        over = (held >= self.xoff) & self.lossless & ~self.asserted & ~self.ignored
        if over.any():
            for row in np.flatnonzero(over):
                out += self._assert(int(row), int(cross_ns[row]))
        if self.asserted.any():
            for row in np.flatnonzero(self.asserted & (held < self.xon)):
                out += self._release(int(row), "xon")
        if self.ignored.any():
            for row in np.flatnonzero(self.ignored & (held < self.xon)):
                self.ignored[row] = False
                out.append(Restored(int(row)))
        return out

    def rearm(self, held: np.ndarray, cross_ns: np.ndarray, read_ns: int) -> np.ndarray:
        """The rows whose XOFF-crossing stamp to clear: lossless, asserting nothing, below XON when
        held was read (at read_ns), and stamped before then. The data path stamps only a cleared
        row, so a pause's reaction counts from the row's first crossing since it was last below
        XON, not from its latest; a stamp newer than the reading is a crossing since, and stays."""
        return self.lossless & ~self.asserted & (held < self.xon) & (cross_ns != 0) & (cross_ns < read_ns)

    def watchdog(self, leaf: int) -> list[Resume]:
        """The watchdog fired on a leaf paused too long: every row pausing it is ignored until it
        drains below XON, and releases all it holds."""
        out: list[Resume] = []
        for row in sorted(self.causes.get(leaf, ())):
            self.ignored[row] = True
            out += self._release(row, "watchdog")
        return out

    def release_all(self, reason: str) -> list[Resume]:
        """Everything paused, resumed (the agent stopping: the fabric drains cleanly)."""
        out: list[Resume] = []
        for row in sorted({r for rows in self.causes.values() for r in rows}):
            out += self._release(row, reason)
        return out

    # -- internals ---------------------------------------------------------------------------

    def _assert(self, row: int, cross_ns: int) -> list[Pause]:
        self.asserted[row] = True
        out = []
        for leaf in self.feeders.get(row, ()):
            causes = self.causes.setdefault(leaf, set())
            causes.add(row)
            if len(causes) == 1:
                out.append(Pause(leaf, row, cross_ns))
        return out

    def _release(self, row: int, reason: str) -> list[Resume]:
        self.asserted[row] = False
        out = []
        for leaf in self.feeders.get(row, ()):
            causes = self.causes.get(leaf)
            if not causes or row not in causes:
                continue
            causes.discard(row)
            if not causes:
                del self.causes[leaf]
                out.append(Resume(leaf, row, reason))
        return out


def waiting_queues(causes: dict[int, set[int]], leaf_queue: dict[int, int], depth: np.ndarray, rule: str,
                   egress_rows_of) -> dict[int, set[int]]:
    """The wait-for graph of a PFC deadlock, over switch egress queues: a paused, non-empty queue
    waits on the rows that paused it; under the ingress rule, on the paused, non-empty egress
    queues of the switch whose ingress row paused it (where what that ingress holds can be stuck).
    causes: paused leaf -> the rows asking; leaf_queue: a switch leaf's own egress queue row (a host
    NIC has none: it waits, but nothing waits on it); egress_rows_of(row): the egress queue rows of
    the switch that row belongs to."""
    stuck = {r for leaf in causes if (r := leaf_queue.get(leaf)) is not None and depth[r] > 0}
    waits: dict[int, set[int]] = {}
    for leaf, rows in causes.items():
        r = leaf_queue.get(leaf)
        if r is None or r not in stuck:
            continue
        waits[r] = ({e for row in rows for e in egress_rows_of(row) if e in stuck} if rule == "ingress"
                    else set(rows))
    return waits

