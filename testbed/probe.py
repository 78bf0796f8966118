"""What this machine offers, probed at start and recorded in every result."""
from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


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


def socket_buffers_ok() -> bool:
    """ovs-vswitchd needs large default socket send buffers (PLATFORM.md)."""
    try:
        return int(Path("/proc/sys/net/core/wmem_default").read_text()) >= 32 << 20
    except OSError:
        return False


def ovs_vswitchd_pid() -> int | None:
    for path in ("/var/run/openvswitch/ovs-vswitchd.pid", "/run/openvswitch/ovs-vswitchd.pid"):
        try:
            return int(Path(path).read_text().strip())
        except (OSError, ValueError):
            continue
    return None
