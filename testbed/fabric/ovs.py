"""What Open vSwitch and the setup commands hold right now: the bridges that exist, and the setup
commands still running that name ours. The fabric asks before it builds and after it tears down, and
a run's cleanup of a dead run asks the same (testbed.run.state)."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from testbed.errors import RunFailed


def existing_bridges() -> set[str]:
    out = subprocess.run(["ovs-vsctl", "--timeout=10", "list-br"], capture_output=True, text=True)
    if out.returncode != 0:
        raise RunFailed(f"Open vSwitch is not answering (ovs-vsctl list-br: {out.stderr.strip()}); "
                        f"`make setup` starts it")
    return set(out.stdout.split())


SETUP_COMMANDS = (b"ovs-vsctl", b"ip", b"tc", b"ethtool")


def wait_for_inflight_commands(names: set[str], timeout_s: float = 30.0) -> None:
    """Let setup commands (ovs-vsctl, ip, tc, ethtool) that name our bridges or interfaces finish
    before we look for leftovers: an interrupted or killed Mininet leaves its last command
    running, and it may create a bridge or a veth pair after we deleted what we saw."""
    deadline = time.monotonic() + timeout_s
    while _inflight_commands(names) and time.monotonic() < deadline:
        time.sleep(0.05)


def _inflight_commands(names: set[str]) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = d.joinpath("cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) in SETUP_COMMANDS and \
                any(a.decode(errors="replace") in names for a in argv):
            pids.append(int(d.name))
    return pids
