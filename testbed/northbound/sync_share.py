"""The live synchronisation share of a workload that computes: how much of the time its workers
spent not computing (waiting on communication), from the data plane's heartbeats.

A heartbeat carries, per compute stream (one per host that computes), the time its steps tagged
"compute" have run up to that beat, the running step's part included (nicdp.c sync_busy). Between
two beats, a worker's share is 1 - its compute time / the time between them; the run's is the mean
over the workers, as summary.training's sync_share takes it per iteration
(testbed.analysis.training). What can be known during the run is time windows, not iterations: this
gives the share since the traffic started and over the last second of wall clock (WINDOW_S: from
the newest beat the API saw at least that long before the last; shorter before it has seen one,
longer when it was asked less often), with the window's length in wall-clock seconds and hardware
time."""
from __future__ import annotations

from collections import deque

from testbed.records import ComputeBusy

WINDOW_S = 1.0
DEFINITION = ("mean over the hosts that compute of 1 - their compute time (steps tagged compute) / the time: "
              "since the traffic started, and over the last second of wall clock; summary.training takes it "
              "per iteration")


class LiveSyncShare:
    """Feeds on the heartbeat's compute times as the API reads them; says the shares."""

    def __init__(self, streams: list[str], weighed: list[bool], dilation: float):
        self.hosts = [h for h, w in zip(streams, weighed) if w]
        self.index = [i for i, w in enumerate(weighed) if w]
        self.dilation = dilation
        self.beats: deque[ComputeBusy] = deque()

    def update(self, busy: ComputeBusy | None) -> dict | None:
        """The shares at the newest beat seen so far (busy: the last read, None when there was none);
        None for a workload whose hosts do not compute, or before the first beat."""
        if not self.hosts:
            return None
        if busy is not None and (not self.beats or busy.beat_ns > self.beats[-1].beat_ns):
            self.beats.append(busy)
        if not self.beats:
            return None
        last = self.beats[-1]
        # keep the newest beat at least a window old, and every one after it
        while len(self.beats) > 2 and self.beats[1].beat_ns <= last.beat_ns - WINDOW_S * 1e9:
            self.beats.popleft()
        first = self.beats[0] if len(self.beats) > 1 else None
        since = self._shares(last, None)
        window = self._shares(last, first) if first else None
        return {"hosts_computing": len(self.hosts), "definition": DEFINITION,
                "sync_share_since_start": _mean(since),
                "sync_share_last_window": _mean(window) if window else None,
                "window_s": (last.beat_ns - first.beat_ns) / 1e9 if first else None,
                "window_us_hw": (last.beat_ns - first.beat_ns) / self.dilation / 1e3 if first else None,
                "by_host": [{"host": h, "sync_share_since_start": s,
                             "sync_share_last_window": window[k] if window else None}
                            for k, (h, s) in enumerate(zip(self.hosts, since))]}

    def _shares(self, last: ComputeBusy, first: ComputeBusy | None) -> list[float | None]:
        t0 = first.beat_ns if first else last.started_ns
        span = last.beat_ns - t0
        if span <= 0:
            return [None] * len(self.index)
        return [1 - (last.busy_ns[i] - (first.busy_ns[i] if first else 0)) / span for i in self.index]


def _mean(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None
