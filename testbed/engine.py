"""The traffic engine: one process, one event loop, every emulated host's packet I/O.

    python -m testbed.engine PLAN.json

Each host gets an AF_PACKET socket opened inside its namespace (then used from here). The
loop releases messages when their dependencies have arrived, paces every host's sends to
its link rate, sends prebuilt RoCEv2 frames as bytes, and timestamps every arrival.
Raw per-packet records stream to OUT/raw/tx.bin and rx.bin (formats in testbed.records).
"""
from __future__ import annotations

import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time
from collections import deque
from pathlib import Path

from testbed import records
from testbed.netns import netns_of
from testbed.packets import (DataTemplate, PAYLOAD_HEADER_LEN, PAYLOAD_MAGIC, PAYLOAD_OFF, PAYLOAD_STRUCT,
                             ROCE_SOCKET_FILTER, ROCE_UDP_PORT, IP_OFF)

ETH_P_IP = 0x0800
SOL_PACKET = 263
PACKET_STATISTICS = 6
SO_ATTACH_FILTER = 26
SO_RCVBUFFORCE = 33
RCVBUF_BYTES = 32 << 20
# A host whose sends fell this far behind its pacing clock (the engine was descheduled)
# resumes from "now minus this" rather than bursting out everything it owes.
CATCHUP_LIMIT_NS = 2_000_000
IDLE_POLL_S = 0.05
EXIT_COMPLETE, EXIT_INCOMPLETE = 0, 3


def _attach_filter(sock: socket.socket) -> None:
    import ctypes
    insns = b"".join(struct.pack("HBBI", *i) for i in ROCE_SOCKET_FILTER)
    buf = ctypes.create_string_buffer(insns)
    prog = struct.pack("HL", len(ROCE_SOCKET_FILTER), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, prog)


class Host:
    __slots__ = ("name", "idx", "sock", "sink", "queue", "next_tx", "late_ns",
                 "tx_pkts", "rx_pkts", "stray", "dup")

    def __init__(self, idx: int, spec: dict):
        self.name, self.idx = spec["name"], idx
        with netns_of(spec["pid"]):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
            # The filter goes on before bind, so nothing unfiltered is ever queued.
            _attach_filter(self.sock)
            self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
            self.sock.bind((spec["ifname"], ETH_P_IP))
            # The host's own stack also sees our UDP packets; a bound socket that is never read
            # makes it drop them quietly instead of answering ICMP port-unreachable.
            self.sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
            self.sink.bind(("0.0.0.0", ROCE_UDP_PORT))
        self.sock.setblocking(False)
        self.queue: deque[int] = deque()
        self.next_tx = 0
        self.late_ns = 0
        self.tx_pkts = self.rx_pkts = self.stray = self.dup = 0

    def socket_drops(self) -> int:
        packets, drops = struct.unpack("II", self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        return drops


class Engine:
    def __init__(self, plan: dict):
        self.plan = plan
        self.out = Path(plan["out_dir"])
        self.payload = plan["payload_bytes"]
        self.hosts = [Host(i, h) for i, h in enumerate(plan["hosts"])]
        by_name = {h.name: h for h in self.hosts}
        specs = {h["name"]: h for h in plan["hosts"]}
        self.bw_bps = [specs[h.name]["bw_bps"] for h in self.hosts]
        flows = plan["flows"]
        self.flow_src = [by_name[f["src"]].idx for f in flows]
        self.flow_dst = [by_name[f["dst"]].idx for f in flows]
        self.flow_psn = [0] * len(flows)
        self.templates: dict[tuple[int, int], DataTemplate] = {}
        for f in flows:
            s, d = specs[f["src"]], specs[f["dst"]]
            for plen in {self.payload} | {self._tail(m[2]) for m in plan["messages"] if m[1] == f["id"]}:
                self.templates[(f["id"], plen)] = DataTemplate(
                    src_mac=s["mac"], dst_mac=d["mac"], src_ip=s["ip"], dst_ip=d["ip"],
                    dscp=plan["dscp"], flow=f["id"], payload_bytes=plen)
        msgs = plan["messages"]
        n = len(msgs)
        self.msg_flow = [m[1] for m in msgs]
        self.msg_bytes = [m[2] for m in msgs]
        self.msg_npkts = [max(1, -(-m[2] // self.payload)) for m in msgs]
        self.msg_waiting = [len(m[3]) for m in msgs]
        self.dependents: list[list[int]] = [[] for _ in range(n)]
        for m in msgs:
            for d in m[3]:
                self.dependents[d].append(m[0])
        self.msg_sent = [0] * n
        self.msg_recv = [0] * n
        self.release_ns = [0] * n
        self.first_tx_ns = [0] * n
        self.last_tx_ns = [0] * n
        self.complete_ns = [0] * n
        self.completed = 0
        self.active: set[int] = set()
        self.stop_requested = False
        self.tx_log = records.RecordWriter(self.out / "raw" / "tx.bin", records.TX)
        self.rx_log = records.RecordWriter(self.out / "raw" / "rx.bin", records.RX)

    def _tail(self, nbytes: int) -> int:
        rest = nbytes % self.payload
        return max(rest, PAYLOAD_HEADER_LEN) if rest else self.payload

    def release(self, msg: int, now: int) -> None:
        h = self.hosts[self.flow_src[self.msg_flow[msg]]]
        self.release_ns[msg] = now
        h.queue.append(msg)
        if h.idx not in self.active:
            self.active.add(h.idx)
            if h.next_tx < now:
                h.next_tx = now

    def send_due(self, h: Host, now: int) -> None:
        q = h.queue
        payload = self.payload
        bw = self.bw_bps[h.idx]
        if h.next_tx < now - CATCHUP_LIMIT_NS:
            h.late_ns += now - CATCHUP_LIMIT_NS - h.next_tx
            h.next_tx = now - CATCHUP_LIMIT_NS
        while q and h.next_tx <= now:
            msg = q[0]
            seq = self.msg_sent[msg]
            flow = self.msg_flow[msg]
            # Payloads shorter than the testbed header are padded to it on the wire.
            plen = max(min(payload, self.msg_bytes[msg] - seq * payload), PAYLOAD_HEADER_LEN)
            tmpl = self.templates[(flow, plen)]
            psn = self.flow_psn[flow]
            t = time.monotonic_ns()
            h.sock.send(tmpl.fill(psn, msg, seq, t))
            self.tx_log.add(msg, seq, psn, t, tmpl.length)
            self.flow_psn[flow] = (psn + 1) & 0xFFFFFF
            if seq == 0:
                self.first_tx_ns[msg] = t
            seq += 1
            self.msg_sent[msg] = seq
            h.tx_pkts += 1
            h.next_tx += int(tmpl.length * 8e9 / bw)
            if seq == self.msg_npkts[msg]:
                self.last_tx_ns[msg] = t
                q.popleft()
            elif len(q) > 1:
                q.rotate(-1)
        if not q:
            self.active.discard(h.idx)

    def receive(self, h: Host, buf: bytearray) -> bool:
        sock = h.sock
        got = False
        nmsgs = len(self.msg_recv)
        while True:
            try:
                n = sock.recv_into(buf)
            except BlockingIOError:
                return got
            rx = time.monotonic_ns()
            magic, flow, msg, seq, tx = PAYLOAD_STRUCT.unpack_from(buf, PAYLOAD_OFF)
            if magic != PAYLOAD_MAGIC or msg >= nmsgs or self.flow_dst[self.msg_flow[msg]] != h.idx:
                h.stray += 1
                continue
            got = True
            h.rx_pkts += 1
            self.rx_log.add(msg, seq, tx, rx, n, buf[IP_OFF + 1] & 3)
            r = self.msg_recv[msg] + 1
            self.msg_recv[msg] = r
            if r == self.msg_npkts[msg]:
                self.complete_ns[msg] = rx
                self.completed += 1
                for d in self.dependents[msg]:
                    self.msg_waiting[d] -= 1
                    if self.msg_waiting[d] == 0:
                        self.release(d, rx)
            elif r > self.msg_npkts[msg]:
                h.dup += 1

    def run(self) -> dict:
        ep = select.epoll()
        by_fd = {}
        for h in self.hosts:
            ep.register(h.sock.fileno(), select.EPOLLIN)
            by_fd[h.sock.fileno()] = h
        buf = bytearray(65536)
        nmsgs = len(self.msg_npkts)
        limit_ns = int(self.plan["time_limit_s"] * 1e9)
        stall_ns = int(self.plan["stall_timeout_s"] * 1e9)
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        start = time.monotonic_ns()
        for m in range(nmsgs):
            if self.msg_waiting[m] == 0:
                self.release(m, start)
        last_progress = start
        reason = "complete"
        hosts = self.hosts
        while self.completed < nmsgs:
            now = time.monotonic_ns()
            if self.active:
                progressed = False
                for i in list(self.active):
                    h = hosts[i]
                    if h.next_tx <= now:
                        self.send_due(h, now)
                        progressed = True
                if progressed:
                    last_progress = now
            wake = min((hosts[i].next_tx for i in self.active), default=now + int(IDLE_POLL_S * 1e9))
            timeout = max(0.0, (wake - time.monotonic_ns()) / 1e9)
            for fd, _ in ep.poll(timeout):
                if self.receive(by_fd[fd], buf):
                    last_progress = time.monotonic_ns()
            if self.stop_requested:
                reason = "terminated"
                break
            now = time.monotonic_ns()
            if now - start > limit_ns:
                reason = "time_limit"
                break
            if now - last_progress > stall_ns:
                reason = "stalled"
                break
        end = time.monotonic_ns()
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        self.tx_log.close()
        self.rx_log.close()
        return {
            "reason": reason, "start_ns": start, "end_ns": end,
            "messages": nmsgs, "messages_completed": self.completed,
            "cpu_s": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
            "hosts": [{"name": h.name, "tx_packets": h.tx_pkts, "rx_packets": h.rx_pkts,
                       "socket_drops": h.socket_drops(), "stray": h.stray, "duplicates": h.dup,
                       "pacing_late_ns": h.late_ns} for h in hosts],
        }

    def message_table(self) -> dict:
        return {"id": list(range(len(self.msg_npkts))), "flow": self.msg_flow, "bytes": self.msg_bytes,
                "packets": self.msg_npkts, "sent_packets": self.msg_sent, "recv_packets": self.msg_recv,
                "release_ns": self.release_ns, "first_tx_ns": self.first_tx_ns,
                "last_tx_ns": self.last_tx_ns, "complete_ns": self.complete_ns}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    plan = json.loads(Path(argv[0]).read_text())
    engine = Engine(plan)
    import gc
    gc.disable()  # the hot loop allocates no cycles; a collection pause would show as latency

    def stop(_signum, _frame):
        engine.stop_requested = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    raw = Path(plan["out_dir"]) / "raw"
    (raw / "engine_ready").write_text(str(os.getpid()))
    stats = engine.run()
    (raw / "messages.json").write_text(json.dumps(engine.message_table()))
    (raw / "engine.json").write_text(json.dumps(stats, indent=1))
    return EXIT_COMPLETE if stats["reason"] == "complete" else EXIT_INCOMPLETE


if __name__ == "__main__":
    sys.exit(main())
