"""Processes the testbed starts: tracked by PID, stopped by PID, never by name.

Children get PR_SET_PDEATHSIG so they die with the runner even if it is SIGKILLed, and run
in their own session so a terminal's Ctrl-C reaches only the runner, which stops them in order.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path

from testbed.errors import RunFailed, raise_pending

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def take_priority(rt_priority: int, fallback_nice: int) -> str:
    """This process at SCHED_FIFO rt_priority, or where it lacks the right (a container without
    CAP_SYS_NICE) at nice fallback_nice; returns which, as the run records it."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(rt_priority))
        return f"SCHED_FIFO {rt_priority}"
    except (PermissionError, OSError):
        os.setpriority(os.PRIO_PROCESS, 0, fallback_nice)
        return f"nice {fallback_nice}"


class ManagedProcess:
    """A child process with its output in a log file; a context manager that always stops it."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict | None = None,
                 cwd: str | None = None, pass_fds: tuple[int, ...] = (), stop_timeout_s: float = 5.0):
        self.name, self.argv, self.log_path, self.env, self.cwd = name, argv, log_path, env, cwd
        self.pass_fds = pass_fds
        self.stop_timeout_s = stop_timeout_s   # SIGTERM, then this long before SIGKILL
        self.proc: subprocess.Popen | None = None
        self.on_start = None  # callback(pid), set by whoever records what the run created

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start(self) -> "ManagedProcess":
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env, cwd=self.cwd,
                                         start_new_session=True, preexec_fn=_die_with_parent,
                                         pass_fds=self.pass_fds)
        finally:
            log.close()
        if self.on_start:
            self.on_start(self.proc.pid)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""

    def stop(self, timeout_s: float | None = None) -> int | None:
        timeout_s = self.stop_timeout_s if timeout_s is None else timeout_s
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout_s)
        return self.proc.returncode

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


class WaitFailed(RunFailed):
    """A readiness condition did not come true in time."""


def wait_until(predicate, timeout_s: float, what: str, poll_s: float = 0.01, alive=None):
    """Return as soon as predicate() is true; raise TimeoutError naming ``what`` otherwise.
    ``alive`` (optional) is checked too, so a dead child fails the wait at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        raise_pending()
        value = predicate()
        if value:
            return value
        if alive is not None and not alive():
            raise WaitFailed(f"gave up waiting for {what}: the process it depends on exited")
        if time.monotonic() > deadline:
            raise WaitFailed(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)


def tcp_listening(host: str, port: int) -> bool:
    """Whether a socket listens on host:port (IPv4), read from /proc without connecting to it."""
    want = f"{''.join(f'{int(o):02X}' for o in reversed(host.split('.')))}:{port:04X}"
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    return any(line.split()[1] == want and line.split()[3] == "0A" for line in lines)


def process_cpu_ticks(pid: int) -> int | None:
    """utime + stime of a process, in clock ticks."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
