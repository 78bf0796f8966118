"""A controller the user started (controller.remote = "IP:PORT"): the fabric's switches connect to
it, none of the testbed's routing runs, and the testbed sees for itself when the routes are in.

Ready means: a frame of every host pair the workload uses (both ways: data and its ACKs) is
forwarded by the switches' flow tables, hop by hop, to its destination's port. Open vSwitch's own
`ofproto/trace` evaluates each bridge's tables as its datapath would (groups, floods, NORMAL,
header rewrites); its datapath actions name the ports a frame leaves by (`dpif/show` maps them to
interfaces), and a packet-in to the controller forwards nothing yet. A reactive controller (an L2
learning switch) installs flows only for frames it has seen, so before looking, each pair gets a
warm-up frame each way, twice: UDP to port WARMUP_PORT (not RoCE's, so the host NIC's program lets
it through), from a packet socket in the sender's namespace, never through the hosts' IP stacks.
"""
from __future__ import annotations

import re
import socket
import subprocess
import time

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from testbed.errors import RunFailed
from testbed.fabric.netns import netns_of
from testbed.run.procs import WaitFailed, tcp_listening, wait_until
from testbed.scenario import parse_endpoint

__all__ = ["Forwarding", "host_pairs", "parse_endpoint", "remote_listening", "wait_forwarding", "warm_up"]

WARMUP_PORT = 9798
MARK = b"testbed-warmup"
TRACE_SPORT, TRACE_DPORT = 49152, 4791   # a data frame of the engine's first queue pair
REMOTE_VERSION = 1


def remote_listening(ip: str, port: int) -> bool:
    """Whether a controller listens at ip:port: a local one from /proc (no connection it would take
    for a switch); another machine's by connecting, and closing at once."""
    if tcp_listening(ip, port) or tcp_listening("0.0.0.0", port):
        return True
    if ip.startswith("127."):
        return False
    try:
        with socket.create_connection((ip, port), timeout=2.0):
            return True
    except OSError:
        return False


def host_pairs(messages) -> list[tuple[str, str]]:
    """Every (src, dst) host pair the workload sends between, and each reverse (its ACKs)."""
    pairs = {(m.src, m.dst) for m in messages if m.op != "compute" and m.src != m.dst}
    return sorted(pairs | {(d, s) for s, d in pairs})


def _appctl(*args: str) -> str:
    out = subprocess.run(["ovs-appctl", *args], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RunFailed(f"ovs-appctl {' '.join(args[:2])} failed: {out.stderr.strip()}")
    return out.stdout


def datapath_ports(text: str | None = None) -> dict[int, str]:
    """Datapath port number -> interface name, from `ovs-appctl dpif/show` ("    s0-eth1 1/3: ...")."""
    text = _appctl("dpif/show") if text is None else text
    return {int(dp): name for name, _of, dp in re.findall(r"^\s+(\S+) (\d+)/(\d+):", text, re.M)}


def split_actions(actions: str) -> list[str]:
    """Datapath actions at the top level (commas inside parentheses belong to their action)."""
    out, depth, cur = [], 0, ""
    for ch in actions:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")")
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def parse_trace(text: str) -> tuple[list[int], bool, str | None]:
    """From `ofproto/trace`'s output: the datapath ports the frame leaves by, whether it goes to the
    controller (a packet-in), and its final flow (None: unchanged)."""
    acts = re.findall(r"^Datapath actions: (.*)$", text, re.M)
    final = re.findall(r"^Final flow: (.*)$", text, re.M)
    actions = split_actions(acts[-1]) if acts else []
    outs = [int(a) for a in actions if a.isdigit()]
    to_controller = any("controller" in a for a in actions)
    flow = final[-1].strip() if final and final[-1].strip() != "unchanged" else None
    return outs, to_controller, flow


class Forwarding:
    """Whether the fabric's flow tables carry each host pair to its destination, by tracing."""

    def __init__(self, fabric, dscp: int):
        self.fabric, self.dscp = fabric, dscp
        self.dpmap: dict[int, str] = {}
        self.traces = 0
        # interface -> (switch, its port, the node at the other end, that node's port)
        self.ends = {}
        for sw, ports in fabric.ports.items():
            for port, (peer, peer_port, _link) in ports.items():
                self.ends[fabric.intf_name(sw, port)] = (sw, port, peer, peer_port)

    def _trace(self, bridge: str, flow: str) -> tuple[list[str], bool, str | None]:
        self.traces += 1
        outs, ctl, final = parse_trace(_appctl("ofproto/trace", bridge, flow))
        if any(o not in self.dpmap for o in outs):
            self.dpmap = datapath_ports()
        return [self.dpmap.get(o, "") for o in outs], ctl, final

    def reaches(self, src: str, dst: str) -> bool:
        s, d = self.fabric.host_by_name[src], self.fabric.host_by_name[dst]
        sw, port = s.switch, s.switch_port
        flow = (f"udp,in_port={port},dl_src={s.mac},dl_dst={d.mac},nw_src={s.ip},nw_dst={d.ip},"
                f"nw_tos={self.dscp << 2},udp_src={TRACE_SPORT},udp_dst={TRACE_DPORT}")
        frontier, seen = [(sw, flow)], set()
        while frontier:
            bridge, f = frontier.pop()
            if (bridge, f) in seen or len(seen) > 4 * len(self.fabric.switches):
                continue
            seen.add((bridge, f))
            names, _ctl, final = self._trace(bridge, f)
            for name in names:
                if name not in self.ends:
                    continue
                _sw, _p, peer, peer_port = self.ends[name]
                if peer == dst:
                    return True
                if peer in self.fabric.switch_by_name:
                    frontier.append((peer, re.sub(r"in_port=[^,]+", f"in_port={peer_port}", final or f)))
        return False


def _warmup_frame(fabric, src: str, dst: str, dscp: int) -> bytes:
    s, d = fabric.host_by_name[src], fabric.host_by_name[dst]
    return bytes(Ether(src=s.mac, dst=d.mac) / IP(src=s.ip, dst=d.ip, tos=dscp << 2) /
                 UDP(sport=WARMUP_PORT, dport=WARMUP_PORT) / MARK)


def warm_up(fabric, pairs, host_pids: dict[str, int], dscp: int, rounds: int = 2, gap_s: float = 0.2) -> int:
    """Each pair's frame from its sender's namespace, every pair, ``rounds`` times: a learning
    controller then knows every host's port when the second round asks for a flow."""
    socks = {}
    try:
        for src in sorted({s for s, _ in pairs}):
            with netns_of(host_pids[src]):
                sk = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                sk.bind((fabric.host_by_name[src].intf, 0))
                socks[src] = sk
        sent = 0
        for _ in range(rounds):
            for src, dst in pairs:
                socks[src].send(_warmup_frame(fabric, src, dst, dscp))
                sent += 1
            time.sleep(gap_s)
        return sent
    finally:
        for sk in socks.values():
            sk.close()


def wait_forwarding(fabric, pairs, host_pids: dict[str, int], dscp: int, timeout_s: float, log) -> dict:
    """Warm the controller up, then trace until every pair is forwarded; what it took, for the run
    folder. A pair still not forwarded at the timeout fails the run, named."""
    t0 = time.monotonic()
    sent = warm_up(fabric, pairs, host_pids, dscp)
    fwd = Forwarding(fabric, dscp)
    left = list(pairs)
    polls = 0

    def done():
        nonlocal left, polls
        polls += 1
        left = [p for p in left if not fwd.reaches(*p)]
        return not left
    try:
        wait_until(done, timeout_s, f"the flow tables to forward all {len(pairs)} host pairs", poll_s=0.5)
    except WaitFailed:
        raise RunFailed(f"the controller at controller.remote never forwarded {len(left)} of {len(pairs)} host pairs "
                        f"(first: {left[0][0]} -> {left[0][1]}) within {timeout_s:g} s; traced {fwd.traces} hops") \
            from None
    took = time.monotonic() - t0
    log(f"routes ready: every one of {len(pairs)} host pairs forwarded by the flow tables, {took:.2f} s after "
        f"{sent} warm-up frames ({fwd.traces} hops traced, {polls} passes)")
    return {"remote_version": REMOTE_VERSION, "pairs": len(pairs), "warmup_frames": sent, "traces": fwd.traces,
            "passes": polls, "ready_after_s": took}
