"""Traffic agent speed, without Open vSwitch in the way: two namespaces joined by one veth pair.

- the real engine (python -m testbed.traffic.engine, the compiled data plane) carrying one queue pair
  across the pair, the sending veth shaped by HTB at rising rates as a host NIC is; the lossless
  rate is the highest at which every packet arrived, the receive socket dropped nothing and the
  NIC's lead never ran dry in more than 1% of the time. Its packets per second per core (data
  and ACKs, each sent and received, over its whole CPU) against Scapy's own sendp() of prebuilt
  packets on the same veth in the same run is the figure of merit.
"""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from pyroute2 import IPRoute

from testbed.fabric.netns import netns_of
from testbed.run.procs import ManagedProcess, wait_until
from testbed.runfolder import RunFolder
from testbed.scenario import DcqcnSpec, TransportSpec
from testbed.traffic.packets import DataTemplate, HEADER_BYTES
from testbed.traffic.plan import EnginePlan, FlowSpec, HostSpec, MessageSpec

PAYLOAD = 4096
ETH_P_IP = 0x0800
MACS = ("02:00:5e:00:00:01", "02:00:5e:00:00:02")
IPS = ("10.99.0.1", "10.99.0.2")


class VethPair:
    """Two network namespaces, each held by a `sleep` process this object starts and stops by PID,
    joined by one veth pair. The veths die with the namespaces."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        tag = f"{os.getpid() % 100000}"
        self.ifnames = (f"tbbA{tag}", f"tbbB{tag}")
        self.holders: list[ManagedProcess] = []
        self._stack = ExitStack()

    @property
    def pids(self) -> tuple[int, int]:
        return self.holders[0].pid, self.holders[1].pid

    def __enter__(self):
        try:
            own = os.readlink("/proc/self/ns/net")
            for i in range(2):
                p = ManagedProcess(f"namespace {i}", ["unshare", "--net", "--", "sleep", "infinity"],
                                   self.workdir / f"ns{i}.log")
                self._stack.enter_context(p)
                self.holders.append(p)
                wait_until(lambda: os.readlink(f"/proc/{p.pid}/ns/net") != own, 5,
                           f"namespace {i} to exist", alive=p.alive)
            with IPRoute() as ipr:
                ipr.link("add", ifname=self.ifnames[0], kind="veth", peer=self.ifnames[1])
                try:
                    for name, pid in zip(self.ifnames, self.pids):
                        ipr.link("set", index=ipr.link_lookup(ifname=name)[0], net_ns_pid=pid)
                except Exception:
                    left = ipr.link_lookup(ifname=self.ifnames[0])
                    if left:
                        ipr.link("del", index=left[0])
                    raise
            for name, pid, mac, ip in zip(self.ifnames, self.pids, MACS, IPS):
                with netns_of(pid), IPRoute() as ipr:
                    idx = ipr.link_lookup(ifname=name)[0]
                    ipr.link("set", index=idx, address=mac, mtu=9000)
                    ipr.addr("add", index=idx, address=ip, prefixlen=24)
                    ipr.link("set", index=idx, state="up")
                    ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
            return self
        except BaseException:
            self._stack.close()
            raise

    def shape(self, rate_bps: float, burst_bytes: int) -> None:
        """The sending end's egress as a host NIC's: HTB at rate_bps (replacing any earlier one)."""
        with netns_of(self.pids[0]), IPRoute() as ipr:
            idx = ipr.link_lookup(ifname=self.ifnames[0])[0]
            try:
                ipr.tc("del", index=idx, root=True)
            except Exception:  # nothing there yet  # noqa: BLE001
                pass
            ipr.tc("add", "htb", idx, 0x10000, default=0x10)
            ipr.tc("add-class", "htb", idx, 0x10010, parent=0x10000, rate=f"{rate_bps:.0f}bit",
                   burst=burst_bytes, cburst=burst_bytes, mtu=9014)

    def __exit__(self, *exc):
        self._stack.close()


def template() -> DataTemplate:
    return DataTemplate(src_mac=MACS[0], dst_mac=MACS[1], src_ip=IPS[0], dst_ip=IPS[1], dscp=26, flow=0,
                        payload_bytes=PAYLOAD)


def scapy_sendp_pps_per_core(pair: VethPair, packets: int) -> float:
    """Scapy's sendp() given a list of prebuilt packets (its fastest documented use: one socket
    for the whole list)."""
    from scapy.all import Ether, conf, sendp  # noqa: F401 (conf: scapy's own socket choice)
    pkt = Ether(bytes(template().fill(0, 0, 0, 0)))
    batch = [pkt] * packets
    with netns_of(pair.pids[0]):
        c0 = time.process_time_ns()
        sendp(batch, iface=pair.ifnames[0], verbose=False)
        cpu = time.process_time_ns() - c0
    return packets / (cpu / 1e9)


def engine_run(pair: VethPair, workdir: Path, rate_bps: float, seconds: float) -> dict:
    """The real engine carrying one queue pair from namespace 0 to 1 at rate_bps for about
    `seconds`; its own counters."""
    out = workdir / f"engine-{rate_bps / 1e6:.0f}"
    rf = RunFolder(out)
    rf.raw.mkdir(parents=True, exist_ok=True)
    frame = PAYLOAD + HEADER_BYTES
    nbytes = int(rate_bps / 8 * seconds * PAYLOAD / frame) // PAYLOAD * PAYLOAD
    pair.shape(rate_bps, 2 * frame)
    transport = TransportSpec()
    plan = EnginePlan(
        out_dir=str(out), payload_bytes=PAYLOAD, time_limit_s=seconds * 10 + 10, stall_timeout_s=3.0,
        nic_lead_ns=int(transport.nic_lead_us * 1e3), transport=dataclasses.asdict(transport),
        dcqcn=dataclasses.asdict(DcqcnSpec()),
        hosts=tuple(HostSpec(name=f"h{i}", pid=pid, ifname=name, mac=mac, ip=ip, bw_bps=rate_bps)
                    for i, (pid, name, mac, ip) in enumerate(zip(pair.pids, pair.ifnames, MACS, IPS))),
        flows=(FlowSpec(id=0, src="h0", dst="h1", tag="collective", channel=0, dscp=26, ect=True, cls=0),),
        messages=(MessageSpec(id=0, flow=0, bytes=nbytes, deps=()),))
    rf.engine_plan.write_text(json.dumps(plan.to_json()))
    eng = ManagedProcess("engine", [sys.executable, "-m", "testbed.traffic.engine", str(rf.engine_plan)],
                         out / "engine.log", cwd=str(Path(__file__).resolve().parent.parent))
    with eng:
        wait_until(lambda: eng.proc.poll() is not None, seconds * 10 + 30, "the engine to finish", poll_s=0.05)
    stats = json.loads(rf.engine_stats.read_text())
    msgs = json.loads(rf.message_times.read_text())
    dur = (stats["end_ns"] - stats["start_ns"]) / 1e9
    tx, rx = stats["hosts"][0], stats["hosts"][1]
    data_pkts = msgs["packets"][0]
    return {"rate_mbps": rate_bps / 1e6, "reason": stats["reason"], "duration_s": dur,
            "data_packets": data_pkts, "sent_packets": msgs["sent_packets"][0],
            "received_packets": msgs["recv_packets"][0],
            "socket_drops": sum(h["socket_drops"] for h in stats["hosts"]),
            "lead_dry_fraction": tx["lead_dry_ns"] / 1e9 / max(dur, 1e-9),
            # every packet the one loop handled: data and ACKs, each sent once and received once
            "pps": sum(h["tx_packets"] + h["rx_packets"] for h in stats["hosts"]) / max(dur, 1e-9),
            "delivered_mbps": msgs["recv_bytes"][0] * 8 / max(dur, 1e-9) / 1e6,
            "engine_cores": stats["cpu_s"] / max(dur, 1e-9),
            "cpu_us_per_data_packet": stats["cpu_s"] / max(1, msgs["sent_packets"][0]) * 1e6}


def lossless(r: dict) -> bool:
    return (r["reason"] == "complete" and r["sent_packets"] == r["data_packets"] and r["socket_drops"] == 0
            and r["lead_dry_fraction"] <= 0.01)


class Spinner:
    """A background load the bench starts and stops by PID: a process that keeps `share` of one
    core busy (spinning that share of every 10 ms), as a user's VM always has something running."""

    def __init__(self, share: float):
        self.share = share
        self.proc: ManagedProcess | None = None

    def __enter__(self):
        busy_ns, period_ns = int(self.share * 10_000_000), 10_000_000
        code = ("import time\n"
                f"b, p = {busy_ns}, {period_ns}\n"
                "while True:\n"
                "    t = time.monotonic_ns()\n"
                "    while time.monotonic_ns() - t < b: pass\n"
                "    time.sleep((p - b) / 1e9)\n")
        work = Path(os.environ.get("TMPDIR", "/tmp"))
        self.proc = ManagedProcess("background load", [sys.executable, "-c", code], work / f"spinner-{os.getpid()}.log")
        self.proc.start()
        return self

    def __exit__(self, *exc):
        if self.proc:
            self.proc.stop()
        return False
