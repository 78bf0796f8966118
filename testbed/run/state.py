"""One run at a time, and a record of everything a run creates, so that what a killed run
left behind can be removed later — and nothing else.

- /run/fabric-testbed/lock: flock held for the whole run; holds the running run's id and PID.
- /run/fabric-testbed/runs/<run id>.json: the runner PID, and every bridge, interface and
  process (with its command line) the run created, written before and as they are created.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from testbed.errors import Busy, signals_held
from testbed.fabric.ovs import existing_bridges, wait_for_inflight_commands

STATE_DIR = Path(os.environ.get("TESTBED_STATE_DIR", "/run/fabric-testbed"))


def _cmdline(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class RunLock:
    def __init__(self, run_id: str, what: str):
        self.run_id, self.what = run_id, what
        self._fd: int | None = None

    def __enter__(self):
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        path = STATE_DIR / "lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise Busy(f"another testbed run is in progress ({holder}); only one emulation can run at a time")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"run {self.run_id}, {self.what}, pid {os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc):
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        return False


class RunRecord:
    """What this run created, persisted on every change."""

    def __init__(self, run_id: str):
        self.path = STATE_DIR / "runs" / f"{run_id}.json"
        self.data = {"run_id": run_id, "runner_pid": os.getpid(), "runner_cmdline": _cmdline(os.getpid()),
                     "started": time.time(), "bridges": [], "interfaces": [], "processes": []}
        self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        tmp.replace(self.path)

    def add_bridges(self, names) -> None:
        self.data["bridges"].extend(names)
        self._save()

    def add_interfaces(self, names) -> None:
        self.data["interfaces"].extend(names)
        self._save()

    def add_process(self, pid: int) -> None:
        self.data["processes"].append({"pid": pid, "cmdline": _cmdline(pid)})
        self._save()

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def close(self) -> list[str]:
        """At the run's end: remove whatever of it is still there (a teardown cut short), then the
        record. Returns what was removed; if removing fails, the record stays for `testbed clean`."""
        with signals_held():
            removed = remove_recorded(self.data)
            self.remove()
        return removed


def remove_recorded(data: dict) -> list[str]:
    """Remove what a run's record names that is still there: its processes (by PID and command
    line), bridges and interfaces, and nothing else. Returns what was removed."""
    removed: list[str] = []
    wait_for_inflight_commands(set(data.get("bridges", [])) | set(data.get("interfaces", [])))
    for proc in data.get("processes", []):
        p = proc["pid"]
        if p != os.getpid() and _alive(p) and _cmdline(p) == proc["cmdline"]:
            os.kill(p, signal.SIGKILL)
            removed.append(f"process {p}")
    present = existing_bridges()
    for br in data.get("bridges", []):
        if br in present:
            subprocess.run(["ovs-vsctl", "--timeout=10", "--if-exists", "del-br", br], check=True)
            removed.append(f"bridge {br}")
    mine = set(data.get("interfaces", []))
    if mine:
        with IPRoute() as ipr:
            # one dump, not a lookup per name: a k=8 fat-tree records hundreds
            for link in ipr.get_links():
                if link.get_attr("IFLA_IFNAME") in mine:
                    try:
                        ipr.link("del", index=link["index"])
                    except NetlinkError as e:
                        if e.code != errno.ENODEV:  # its peer's deletion took it just now
                            raise
                    removed.append(f"interface {link.get_attr('IFLA_IFNAME')}")
    return removed


def clean_stale(log=print) -> list[str]:
    """Remove what runs whose runner is dead left behind. Returns what was removed."""
    removed: list[str] = []
    runs = STATE_DIR / "runs"
    if not runs.is_dir():
        return removed
    for path in sorted(runs.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        pid = data.get("runner_pid")
        if pid and _alive(pid) and _cmdline(pid) == data.get("runner_cmdline"):
            continue  # still running
        these = remove_recorded(data)
        removed += these
        path.unlink(missing_ok=True)
        log(f"cleaned up after dead run {data.get('run_id')}: {len(these)} objects removed")
    return removed
