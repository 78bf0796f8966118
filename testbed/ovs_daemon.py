"""The run's own Open vSwitch: an ovsdb-server and an ovs-vswitchd that the run starts, owns and
stops, in a directory of its own, so that the run never touches the system's Open vSwitch (its
bridges, its database, its daemon's settings).

Why a private daemon: the system's daemon is not the run's. A run that shares it shares its
bridges' names, its database and its settings with whatever else the machine runs, and it can only
be tuned by restarting it. This one starts as Open vSwitch's own ovs-ctl starts the system's (nice
-10, --mlockall) and goes away with the run: its bridges need no deleting (1.7 s of the flagship's
teardown).

The userspace datapath is Open vSwitch's dpif-netdev. The daemon registers it under OVS's "dummy"
class name (`--enable-dummy`, bridges with datapath_type=dummy): the same forwarding code, but a
bridge's local port is an in-process port instead of a tap, so this datapath does not claim the
"ovs-netdev" tap that a netdev datapath of the system's daemon may already hold. Ports are the
run's real veths, opened as "system" netdevs (AF_PACKET), exactly as with datapath_type=netdev.

Where the kernel has Open vSwitch's module, the run uses the system's daemon and its kernel
datapath instead (a second daemon cannot share the kernel's one "ovs-system" datapath).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from testbed.errors import RunFailed
from testbed.procs import ManagedProcess, wait_until

SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
SYSTEM_RUNDIR = Path("/var/run/openvswitch")
# Open vSwitch's own start script (ovs-ctl) runs both daemons at nice -10 and ovs-vswitchd with
# --mlockall: the forwarding thread then wins the CPU over the data plane (nice +5), which keeps a
# lead of frames queued and can wait, while a late forward is fabric latency.
OVS_NICE = -10


class OvsDaemon:
    """Context manager. `private=True`: start our own ovsdb-server and ovs-vswitchd in `run_dir`
    (short: it holds Unix sockets) with logs in `log_dir`; `private=False`: the system's daemon.
    `record` (RunRecord) learns every process and the directory before they exist."""

    def __init__(self, run_dir: Path, log_dir: Path, record, private: bool = True):
        self.private = private
        self.dir = Path(run_dir) if private else SYSTEM_RUNDIR
        self.log_dir, self.record = Path(log_dir), record
        self.db = f"unix:{self.dir / 'db.sock'}"
        self.ctl = str(self.dir / "ovs-vswitchd.ctl")
        self._procs: list[ManagedProcess] = []

    # -- what callers use --------------------------------------------------------------------
    @property
    def datapath_type(self) -> str:
        return "dummy" if self.private else "system"

    @property
    def mechanism(self) -> str:
        if not self.private:
            return "ovs-kernel (the system's ovs-vswitchd)"
        return "ovs-userspace (dpif-netdev; the run's own ovsdb-server and ovs-vswitchd)"

    def vsctl(self, *args: str, timeout_s: int = 30) -> list[str]:
        return ["ovs-vsctl", f"--db={self.db}", f"--timeout={timeout_s}", *args]

    def appctl(self, *args: str) -> list[str]:
        target = ["-t", self.ctl] if self.private else []
        return ["ovs-appctl", *target, *args]

    def ofctl_target(self, bridge: str) -> str:
        """What ovs-ofctl connects to for a bridge: its management socket in our directory."""
        return f"unix:{self.dir / (bridge + '.mgmt')}" if self.private else bridge

    def vswitchd_pid(self) -> int | None:
        if self.private:
            return self._procs[-1].pid if self._procs else None
        try:
            return int((SYSTEM_RUNDIR / "ovs-vswitchd.pid").read_text())
        except (OSError, ValueError):
            return None

    def bridges(self) -> set[str]:
        out = subprocess.run(self.vsctl("list-br", timeout_s=10), capture_output=True, text=True)
        if out.returncode != 0:
            raise RunFailed(f"Open vSwitch is not answering (ovs-vsctl list-br: {out.stderr.strip()})")
        return set(out.stdout.split())

    # -- life ----------------------------------------------------------------------------------
    def __enter__(self) -> "OvsDaemon":
        if not self.private:
            return self
        for tool in ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl"):
            if not shutil.which(tool):
                raise RunFailed(f"{tool} is not installed (run `make setup`)")
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self) -> None:
        self.record.add_dirs([str(self.dir)])
        if self.dir.exists():
            raise RunFailed(f"{self.dir} already exists; it is not this run's to reuse")
        self.dir.mkdir(parents=True)
        subprocess.run(["ovsdb-tool", "create", str(self.dir / "conf.db"), str(SCHEMA)], check=True,
                       capture_output=True)
        db = ManagedProcess("ovsdb-server", [
            "ovsdb-server", str(self.dir / "conf.db"), f"--remote=punix:{self.dir / 'db.sock'}",
            f"--unixctl={self.dir / 'ovsdb-server.ctl'}", "-vconsole:off",
            f"--log-file={self.log_dir / 'ovsdb-server.log'}"], self.log_dir / "ovsdb-server.out", nice=OVS_NICE)
        db.on_start = self.record.add_process
        self._procs.append(db.start())
        wait_until(lambda: (self.dir / "db.sock").exists(), 10, "ovsdb-server's socket", alive=db.alive)
        subprocess.run(self.vsctl("--no-wait", "init", timeout_s=10), check=True, capture_output=True)
        env = dict(os.environ, OVS_RUNDIR=str(self.dir))  # bridges' management sockets go here too
        vsd = ManagedProcess("ovs-vswitchd", [
            "ovs-vswitchd", self.db, "--enable-dummy", "--mlockall", f"--unixctl={self.ctl}", "-vconsole:off",
            f"--log-file={self.log_dir / 'ovs-vswitchd.log'}"], self.log_dir / "ovs-vswitchd.out", env=env,
                             nice=OVS_NICE)
        vsd.on_start = self.record.add_process
        self._procs.append(vsd.start())
        ready = lambda: os.path.exists(self.ctl) and subprocess.run(
            self.appctl("version"), capture_output=True).returncode == 0
        wait_until(ready, 15, "ovs-vswitchd to answer on its control socket", poll_s=0.02, alive=vsd.alive)

    def __exit__(self, *exc) -> bool:
        if not self.private:
            return False
        # the daemon first: it lets go of the ports; then its database
        for proc in reversed(self._procs):
            proc.stop()
        self._procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
        return False
