"""The switch agent's queue telemetry: at each sample, the counters of every queue row that changed
since the last, one TELEMETRY record each (testbed.records), buffered and appended to
raw/telemetry.bin in batches (a write per sample would cost the agent's look)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from testbed.records import TELEMETRY


class TelemetryWriter:
    def __init__(self, path: Path, plan_row: np.ndarray):
        """plan_row: each BPF queue row's index in the agent plan (the record's `queue`)."""
        self.file = open(path, "wb")
        self.plan_row = plan_row
        n = len(plan_row)
        self._last_enq = np.zeros(n, dtype=np.uint64)
        self._last_deq = np.zeros(n, dtype=np.uint64)
        self._last_drop = np.zeros(n, dtype=np.uint64)
        self.samples: list[np.ndarray] = []

    def sample(self, now: int, q: np.ndarray) -> None:
        enq, deq, drop = q["enq_pkts"], q["deq_bytes"], q["drop_pkts"]
        changed = (enq != self._last_enq) | (deq != self._last_deq) | (drop != self._last_drop)
        if not changed.any():
            return
        rows = np.flatnonzero(changed)
        sel = q[rows]  # one copy of the changed rows, so every field below is from the same instant
        rec = np.empty(len(rows), dtype=TELEMETRY)
        rec["t_ns"] = now
        rec["queue"] = self.plan_row[rows]
        rec["depth_bytes"] = np.minimum(sel["depth_bytes"], 0xFFFFFFFF)
        for f in ("enq_pkts", "enq_bytes", "deq_bytes", "drop_pkts", "ect_pkts", "mark_pkts"):
            rec[f] = sel[f]
        self.samples.append(rec)
        self._last_enq[rows] = sel["enq_pkts"]
        self._last_deq[rows] = sel["deq_bytes"]
        self._last_drop[rows] = sel["drop_pkts"]

    def flush(self) -> None:
        if self.samples:
            self.file.write(np.concatenate(self.samples).tobytes())
            self.samples = []

    def close(self) -> None:
        self.flush()
        self.file.close()
