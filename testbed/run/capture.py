"""Per-host packet capture: one tcpdump in each traffic host's namespace, writing pcap files
that Wireshark and tshark decode as RoCEv2 (InfiniBand BTH over UDP 4791)."""
from __future__ import annotations

import re
from pathlib import Path

from testbed.errors import RunFailed
from testbed.run.procs import ManagedProcess, WaitFailed, wait_until

CAPTURE_BUFFER_KIB = 16384
SETTLE_TIMEOUT_S = 5.0
_COUNTS = {"captured": re.compile(r"(\d+) packets? captured"),
           "received_by_filter": re.compile(r"(\d+) packets? received by filter"),
           "dropped_by_kernel": re.compile(r"(\d+) packets? dropped by kernel")}


class HostCaptures:
    """A context manager: every capture is listening when it enters; on exit each tcpdump is
    stopped by PID and its counters (including what the kernel dropped) are kept in ``stats``."""

    def __init__(self, hosts: dict[str, tuple[int, str]], out_dir: Path, snaplen_bytes: int, record):
        self.hosts, self.out_dir, self.snaplen, self.record = hosts, out_dir, snaplen_bytes, record
        self.procs: dict[str, ManagedProcess] = {}
        self.stats: dict[str, dict] = {}

    def __enter__(self) -> "HostCaptures":
        self.out_dir.mkdir(parents=True, exist_ok=True)
        try:
            for name, (pid, ifname) in self.hosts.items():
                # -Z root: tcpdump otherwise drops to its own user before opening the output file.
                # -U: each packet reaches the file as it is captured, so a killed run keeps its pcap.
                # --immediate-mode: packets reach tcpdump one by one, not in blocks that a stop
                # would leave unread (measured: 107 of 557 packets written without it).
                argv = ["nsenter", "-t", str(pid), "-n", "tcpdump", "-i", ifname, "-s", str(self.snaplen),
                        "--immediate-mode", "-B", str(CAPTURE_BUFFER_KIB), "-U", "-Z", "root", "-n",
                        "-w", str(self.out_dir / f"{name}.pcap")]
                p = ManagedProcess(f"capture {name}", argv, self.out_dir / f"{name}.log")
                p.on_start = self.record.add_process
                self.procs[name] = p.start()
            for name, p in self.procs.items():
                wait_until(lambda p=p: "listening on" in p.log_tail() or not p.alive(), 10,
                           f"tcpdump on {name} to listen")
                if not p.alive():
                    raise RunFailed(f"capture on {name} failed: {p.log_tail()}")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _written(self) -> int:
        return sum(f.stat().st_size for f in self.out_dir.glob("*.pcap"))

    def __exit__(self, *exc) -> bool:
        # Let each tcpdump finish writing what it has taken in: stop once the files stop growing.
        last = [-1]

        def settled():
            now = self._written()
            done, last[0] = now == last[0], now
            return done
        try:
            wait_until(settled, SETTLE_TIMEOUT_S, "the captures to finish writing", poll_s=0.1)
        except WaitFailed:  # a capture still writing then is stopped anyway; its counters tell
            pass
        for name, p in self.procs.items():
            p.stop()
            text = p.log_tail(50)
            self.stats[name] = {k: int(m.group(1)) if (m := rx.search(text)) else None for k, rx in _COUNTS.items()}
            self.stats[name]["pcap"] = str(self.out_dir / f"{name}.pcap")
        return False
