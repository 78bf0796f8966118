"""Receive packet steering (RPS) on the link ends a run made, so that a flow's frames keep their
order through the emulator.

A veth hands what it transmits to the receiving side through the backlog of the CPU doing the
transmit (netif_rx). A port's qdisc runs on whichever CPU wakes it: a shaper's timer on one, a
sender's own transmit or the switch agent's XON frame on the other; two frames of one flow can
then wait in two CPUs' backlogs and be delivered in reverse order, and go-back-N resends frames
nothing lost (measured on incast-pfc: 8 of 20 runs, bench/README.md). With RPS every frame joins
the backlog of the CPU its flow hash picks, so a flow keeps its order. (The veth's GRO mode, one
NAPI ring per receive queue, would keep order too, but GRO reuses skb->cb, where the port program
carries a frame's queue to the far end of the link.)

    python -m testbed.fabric.steering MASK PID IFNAME [PID IFNAME ...]     (PID 0: this namespace)

sysfs shows the network namespace it was mounted in, so this helper (its own process, single
threaded) takes a private mount namespace, and per namespace mounts sysfs on a scratch
directory, writes each interface's rps_cpus and unmounts it. It prints one JSON line: how many
queues it set, or why it could not.
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from pyroute2.netns import setns

from testbed.paths import PROJECT_ROOT

CLONE_NEWNS = 0x00020000
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
TIMEOUT_S = 60.0


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def cpu_mask() -> str:
    """Every CPU this process may run on, as rps_cpus takes it (hex)."""
    return format(sum(1 << c for c in os.sched_getaffinity(0)), "x")


def steer(mask: str, targets: list[tuple[int, str]]) -> dict:
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making / private")
    by_ns: dict[int, list[str]] = {}
    for pid, ifname in targets:
        by_ns.setdefault(pid, []).append(ifname)
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    scratch = tempfile.mkdtemp(prefix="testbed-sysfs-")
    queues = 0
    try:
        for pid, names in by_ns.items():
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY) if pid else os.dup(own)
            try:
                setns(fd)
            finally:
                os.close(fd)
            _check(libc.mount(b"sysfs", scratch.encode(), b"sysfs", 0, None), "mounting sysfs")
            try:
                for name in names:
                    rx = sorted((Path(scratch) / "class" / "net" / name / "queues").glob("rx-*"))
                    if not rx:
                        raise FileNotFoundError(f"{name} has no receive queues in sysfs")
                    for q in rx:
                        cpus = q / "rps_cpus"
                        if not cpus.exists():
                            return {"set": 0, "why": "no rps_cpus in sysfs: the kernel has no RPS"}
                        cpus.write_text(mask)
                        queues += 1
            finally:
                _check(libc.umount2(scratch.encode(), 0), "unmounting sysfs")
    finally:
        setns(own)
        os.close(own)
        os.rmdir(scratch)
    return {"set": queues, "why": None}


def run_helper(targets: list[tuple[int, str]]) -> dict:
    """Set RPS on ``targets`` ((namespace pid or 0, interface)) from a helper process."""
    argv = [sys.executable, "-m", "testbed.fabric.steering", cpu_mask()]
    for pid, ifname in targets:
        argv += [str(pid), ifname]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S,
                         cwd=str(PROJECT_ROOT))
    if out.returncode != 0:
        # a machine that cannot (no mount namespaces, no RPS) runs without it, and says so
        lines = out.stderr.strip().splitlines()
        return {"set": 0, "why": f"the helper failed: {lines[-1] if lines else out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    mask, rest = argv[0], argv[1:]
    targets = [(int(rest[i]), rest[i + 1]) for i in range(0, len(rest), 2)]
    print(json.dumps(steer(mask, targets)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
