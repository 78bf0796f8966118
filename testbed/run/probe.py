"""What this machine offers, probed at start and recorded in every result."""
from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from testbed.paths import PROJECT_ROOT



def kernel_ovs_datapath() -> bool:
    """The openvswitch kernel module is loaded or built in."""
    return Path("/sys/module/openvswitch").exists()


def choose_datapath() -> str:
    """Mininet's OVSSwitch datapath argument: 'kernel' where the module exists, else userspace."""
    return "kernel" if kernel_ovs_datapath() else "user"


def _version(argv: list[str]) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def _pkg(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    out = _version(["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"])
    if out:
        dirty = subprocess.run(["git", "-C", str(PROJECT_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return out + ("-dirty" if dirty else "")
    return None


def versions() -> dict:
    import mininet.net
    return {
        "kernel": platform.release(),
        "python": platform.python_version(),
        "openvswitch": _version(["ovs-vsctl", "--version"]),
        "mininet": mininet.net.VERSION,
        "os_ken": _pkg("os-ken"),
        "scapy": _pkg("scapy"),
        "pyroute2": _pkg("pyroute2"),
        "pandas": _pkg("pandas"),
        "testbed": _pkg("fabric-testbed"),
    }


def machine() -> dict:
    return {"cpus": os.cpu_count(), "hostname": platform.node(),
            "mem_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")}


SOCKET_BUFFER_MINIMUMS = {"wmem_default": 128 << 20, "rmem_default": 4 << 20}


def socket_buffers_too_small() -> list[str]:
    """The default socket buffers ovs-vswitchd's packet sockets get, where below what it needs
    (tools/setup-host.sh explains the numbers)."""
    bad = []
    for name, want in SOCKET_BUFFER_MINIMUMS.items():
        try:
            have = int(Path(f"/proc/sys/net/core/{name}").read_text())
        except OSError:
            have = 0
        if have < want:
            bad.append(f"net.core.{name} is {have}, needs {want}")
    tb = ovs_send_buffer_bytes()
    if tb is not None and tb < SOCKET_BUFFER_MINIMUMS["wmem_default"]:
        bad.append(f"ovs-vswitchd's send socket has {tb} bytes (it started before the sysctl was raised)")
    return bad


def ovs_send_buffer_bytes() -> int | None:
    """The send buffer of ovs-vswitchd's one packet socket that is bound to no interface (its
    sends), as sock_diag reports it (`ss`); None if not found."""
    out = subprocess.run(["ss", "-0", "-m", "-p", "-n", "-H"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "ovs-vswitchd" in line and "[0]:*" in line and "skmem:(" in line:
            for m in line.split("skmem:(", 1)[1].split(")", 1)[0].split(","):
                if m.startswith("tb") and m[2:].isdigit():
                    return int(m[2:])
    return None


OVS_DROP_COUNTERS = ("drop_action_of_pipeline", "datapath_drop_upcall_error",
                     "datapath_drop_userspace_action_error", "netdev_send_prepare_drops")


def ovs_drop_counters() -> dict[str, int]:
    """Open vSwitch's drop counters (machine-wide: they include other bridges' drops)."""
    out = {}
    for name in OVS_DROP_COUNTERS:
        r = subprocess.run(["ovs-appctl", "coverage/read-counter", name], capture_output=True, text=True)
        out[name] = int(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip().isdigit() else 0
    return out


def ovs_vswitchd_pid() -> int | None:
    for path in ("/var/run/openvswitch/ovs-vswitchd.pid", "/run/openvswitch/ovs-vswitchd.pid"):
        try:
            return int(Path(path).read_text().strip())
        except (OSError, ValueError):
            continue
    return None
