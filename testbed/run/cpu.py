"""CPU accounting over an interval: the machine's busy share and named processes' shares."""
from __future__ import annotations

import time
from pathlib import Path

from testbed.run.procs import CLOCK_TICKS, process_cpu_ticks


def stat_totals() -> tuple[int, int, int]:
    """/proc/stat's all-CPU ticks: total, idle (with iowait), steal."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    # steal: time the hypervisor ran something else on this VM's CPUs, which no process here can
    # prevent or see except as lateness
    return sum(fields[:8]), idle, fields[7]


class CpuMeter:
    """Start with begin(), read shares with end(): fractions of one core per process and of
    the whole machine (all cores)."""

    def __init__(self, processes: dict[str, int]):
        self.processes = {k: v for k, v in processes.items() if v}

    def begin(self) -> None:
        self.t0 = time.monotonic()
        self.total0, self.idle0, self.steal0 = stat_totals()
        self.proc0 = {k: process_cpu_ticks(pid) for k, pid in self.processes.items()}

    def end(self) -> dict:
        wall = time.monotonic() - self.t0
        total1, idle1, steal1 = stat_totals()
        busy = 1.0 - (idle1 - self.idle0) / max(1, total1 - self.total0)
        out = {"wall_s": wall, "machine_busy_fraction": busy,
               "steal_fraction": (steal1 - self.steal0) / max(1, total1 - self.total0), "processes_cores": {}}
        for k, pid in self.processes.items():
            t1 = process_cpu_ticks(pid)
            if t1 is not None and self.proc0.get(k) is not None and wall > 0:
                out["processes_cores"][k] = (t1 - self.proc0[k]) / CLOCK_TICKS / wall
        return out
