"""Keeping the data path's counts true where the kernel loses frames behind its back: the switch
agent's two reconciliations, each run every report interval (100 ms).

- StaleDepths: a queue whose frames vanished without reaching the far end (a link taken down
  resets its qdisc) would keep a depth forever; the kernel's own backlog of the leaf decides.
- IngressLeaks: a frame the switch dropped without an egress seeing it (Open vSwitch has no route
  for it while a route is replaced, or its port is down) would stay counted at its ingress, and
  that (port, class) would pause its peer for good; what no place could still hold is written off.
Each logs what it corrected through the agent's event log.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from testbed.fabric.agent_plan import LeafSpec, QueueSpec


def held_bytes(ing: np.ndarray) -> np.ndarray:
    """Bytes each (ingress port, class) holds in its switch (ingress rule)."""
    return (ing["in_bytes"].astype(np.int64) - ing["out_bytes"].astype(np.int64)
            - ing["lost_bytes"].astype(np.int64))


class StaleDepths:
    def __init__(self, n: int, plan_row: np.ndarray, queue_leaf: dict[int, int], leaves: tuple[LeafSpec, ...],
                 log: Callable[[dict], None], qlens: Callable[[int], dict[tuple[int, int], int]]):
        """qlens(ns_pid): every qdisc's queue length in that namespace, by (ifindex, handle)."""
        self.plan_row, self.queue_leaf, self.leaves, self.log = plan_row, queue_leaf, leaves, log
        self.qlens = qlens
        self._enq = self._deq = np.zeros(n, dtype=np.uint64)

    def check(self, q: np.ndarray, paused_leaves) -> None:
        """Suspects: unchanged counters since the last check, a depth, and not paused. At a large D
        a slow class's queue is one at most checks, so the kernel is asked once per namespace with
        suspects, not once per suspect."""
        enq, deq = q["enq_pkts"].copy(), q["deq_pkts"].copy()
        suspect = (enq == self._enq) & (deq == self._deq) & (q["depth_bytes"] > 0)
        self._enq, self._deq = enq, deq
        rows = [int(r) for r in np.flatnonzero(suspect)
                if self.plan_row[r] >= 0 and self.queue_leaf[int(r)] not in paused_leaves]
        kernel: dict[int, dict[tuple[int, int], int]] = {}
        for r in rows:
            leaf = self.leaves[self.queue_leaf[r]]
            if leaf.ns_pid not in kernel:
                kernel[leaf.ns_pid] = self.qlens(leaf.ns_pid)
            if kernel[leaf.ns_pid].get((leaf.ifindex, leaf.handle), 1) == 0:
                stale = int(q["depth_bytes"][r])
                q["depth_bytes"][r] = 0
                self.log({"event": "depth_resync", "port": leaf.ifname, "class": leaf.cls,
                          "stale_bytes": stale})


class IngressLeaks:
    def __init__(self, plan_row: np.ndarray, queues: tuple[QueueSpec, ...], switch_rows: dict[str, list[int]],
                 log: Callable[[dict], None]):
        self.plan_row, self.queues, self.switch_rows, self.log = plan_row, queues, switch_rows, log
        self._last = None      # the rows' frame counts at the last check
        self.resyncs = 0

    def check(self, ing: np.ndarray, depth: np.ndarray, input_bytes: Callable[[], dict[str, int]]) -> None:
        """A row can only hold what waits in its port's input socket (input_bytes(): read now, by
        port) plus what the switch's egress queues hold: of a row that saw no frame in or out since
        the last check, anything above that is written off as lost.

        ing and depth are the data path's live rows, which it changes while this reads them. So
        what a row holds comes from one copy of its counters, and the places that could hold it are
        read after that copy; a row whose counters moved meanwhile (a frame came in, or one of the
        frames it held left the switch between the copy and the reading of where it could be) is
        left to the next check. Read live, a frame that arrived as the check ran was counted as
        held while the socket's bytes came from before it: CI wrote off frames that later left."""
        snap = ing.copy()
        now = (snap["in_pkts"], snap["out_pkts"])
        last, self._last = self._last, now
        if last is None:
            return
        held = held_bytes(snap)
        suspect = (now[0] == last[0]) & (now[1] == last[1]) & (held > 0) & (self.plan_row >= 0)
        if not suspect.any():
            return
        inputs = input_bytes()
        depths = depth.copy()
        after = ing.copy()
        for f in ("in_pkts", "in_bytes", "out_pkts", "out_bytes"):
            suspect &= after[f] == snap[f]
        for r in np.flatnonzero(suspect):
            r = int(r)
            q = self.queues[self.plan_row[r]]
            could = inputs.get(q.ifname, 0) + int(sum(int(depths[e]) for e in self.switch_rows[q.node]))
            lost = int(held[r]) - could
            if lost <= 0:
                continue
            ing["lost_bytes"][r] += lost
            self.resyncs += 1
            self.log({"event": "ingress_resync", "port": q.ifname, "class": q.cls, "lost_bytes": lost})
