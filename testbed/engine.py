"""The traffic engine: one process, one event loop, every emulated host's packet I/O.

    python -m testbed.engine PLAN.json

Each host gets an AF_PACKET socket opened inside its namespace (then used from here). The
loop releases messages when their dependencies have arrived, paces every host's sends to
its link rate, sends prebuilt RoCEv2 frames as bytes, and timestamps every arrival. Each
flow is a queue pair running go-back-N (testbed.transport) unless the plan turns
reliability off; with DCQCN on, receivers send CNPs for CE-marked packets and each queue pair
is paced to its own DCQCN rate. Raw per-packet records stream to OUT/raw/tx.bin and rx.bin,
and every queue pair's recoveries, CNPs and rate changes to qp_events.bin (testbed.records).
"""
from __future__ import annotations

import ctypes
import errno
import gc
import heapq
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

from isal.isal_zlib import crc32

from testbed import records
from testbed.netns import netns_of
from testbed.packets import (AETH_STRUCT, BTH_OFF, CNP, HEADER_BYTES, ICRC_LEN, ICRC_STRUCT, IP_OFF,
                             PAYLOAD_HEADER_LEN, PAYLOAD_MAGIC, PAYLOAD_OFF, PAYLOAD_STRUCT, PSN_OFF, PSN_STRUCT,
                             QPN_BASE, QPN_STRUCT, RC_ACKNOWLEDGE, RC_SEND_FIRST, RC_SEND_LAST, RC_SEND_MIDDLE,
                             RC_SEND_ONLY, ROCE_SOCKET_FILTER, ROCE_UDP_PORT, SEND_OPCODES, AckTemplate,
                             CnpTemplate, DataTemplate)
from testbed.records import (CNP_RECEIVED, CNP_SENT, GO_BACK_NAK, GO_BACK_TIMEOUT, NAK_RECEIVED, NAK_SENT)
from testbed.transport import AETH_ACK, AETH_NAK_SEQ, Dcqcn, ReceiverFlow, SenderFlow, dcqcn_params

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
RTO_CHECK_NS = 1_000_000
HEARTBEAT_NS = 200_000_000
# The NIC's queue is full (its class is paused by PFC, or the link is slower than the pacing):
# try again this much later, as a NIC holds its work queue until the port may send.
NIC_BACKOFF_NS = 50_000
EXIT_COMPLETE, EXIT_INCOMPLETE = 0, 3
# DCQCN timers (alpha, cut, increase) are kept to the nanosecond but applied at this granularity.
CC_TICK_MIN_NS, CC_TICK_MAX_NS = 100_000, 1_000_000
TX_RETRANSMIT = 1


def _attach_filter(sock: socket.socket) -> None:
    insns = b"".join(struct.pack("HBBI", *i) for i in ROCE_SOCKET_FILTER)
    buf = ctypes.create_string_buffer(insns)
    prog = struct.pack("HL", len(ROCE_SOCKET_FILTER), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, prog)


class Host:
    __slots__ = ("name", "idx", "sock", "sink", "queues", "resend_flows", "next_tx", "late_ns",
                 "tx_pkts", "rx_pkts", "acks_tx", "acks_rx", "cnps_tx", "cnps_rx", "stray", "icrc_errors",
                 "nic_full", "nic_full_ns")

    def __init__(self, idx: int, spec: dict, n_prio: int):
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
        # released messages with new packets to send, one queue per NIC priority (0 first)
        self.queues: list[deque[int]] = [deque() for _ in range(n_prio)]
        self.resend_flows: deque[int] = deque()   # flows of this host going back (go-back-N)
        self.next_tx = 0
        self.late_ns = 0
        self.tx_pkts = self.rx_pkts = self.acks_tx = self.acks_rx = self.cnps_tx = self.cnps_rx = 0
        self.stray = self.icrc_errors = 0
        self.nic_full = self.nic_full_ns = 0

    def socket_drops(self) -> int:
        _packets, drops = struct.unpack("II", self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        return drops


class Engine:
    def __init__(self, plan: dict):
        self.plan = plan
        self.out = Path(plan["out_dir"])
        self.oversleeps = self.oversleep_ns = self.max_oversleep_ns = 0
        self.payload = plan["payload_bytes"]
        transport = plan["transport"]
        self.reliable = transport["reliability"] == "go_back_n"
        self.rto_ns = int(transport["rto_ms"] * 1e6)
        self.cc = transport["cc"] == "dcqcn"
        self.verify_icrc = transport["verify_icrc"]
        flows = plan["flows"]
        # Under strict priority the NIC serves its classes in order, as a RoCE NIC's ETS does
        # in strict mode; otherwise one queue, served round robin.
        self.flow_prio = [f["nic_priority"] for f in flows]
        n_prio = max(self.flow_prio, default=0) + 1
        self.hosts = [Host(i, h, n_prio) for i, h in enumerate(plan["hosts"])]
        by_name = {h.name: h for h in self.hosts}
        specs = {h["name"]: h for h in plan["hosts"]}
        self.flow_src = [by_name[f["src"]].idx for f in flows]
        self.flow_dst = [by_name[f["dst"]].idx for f in flows]
        self.senders = [SenderFlow() for _ in flows]
        self.receivers = [ReceiverFlow(transport["ack_every_packets"]) for _ in flows]
        # data templates by (flow, opcode, payload length)
        self.templates: dict[tuple[int, int, int], DataTemplate] = {}
        self.gap_ns: dict[tuple[int, int, int], int] = {}  # pacing interval of each template at its sender's rate
        self.acks: list[AckTemplate] = []
        self.cnps: list[CnpTemplate] = []
        # ICRC check at the receiver: the CRC of each template's invariant header, by (flow, opcode,
        # frame length)
        self.rx_crc_base: dict[tuple[int, int, int], int] = {}
        shapes: dict[int, set[tuple[int, int]]] = {f["id"]: set() for f in flows}
        for m in plan["messages"]:
            if m[1] < 0:
                continue
            npk, tail = max(1, -(-m[2] // self.payload)), self._tail(m[2])
            if npk == 1:
                shapes[m[1]].add((RC_SEND_ONLY, tail))
            else:
                shapes[m[1]].update({(RC_SEND_FIRST, self.payload), (RC_SEND_LAST, tail)})
                if npk > 2:
                    shapes[m[1]].add((RC_SEND_MIDDLE, self.payload))
        for f in flows:
            s, d = specs[f["src"]], specs[f["dst"]]
            for op, plen in shapes[f["id"]]:
                tmpl = DataTemplate(src_mac=s["mac"], dst_mac=d["mac"], src_ip=s["ip"], dst_ip=d["ip"],
                                    dscp=f["dscp"], flow=f["id"], payload_bytes=plen, ect=f["ect"], opcode=op)
                self.templates[(f["id"], op, plen)] = tmpl
                self.rx_crc_base[(f["id"], op, tmpl.length)] = tmpl.crc_base
                self.gap_ns[(f["id"], op, plen)] = int(tmpl.length * 8e9 / s["bw_bps"])
            self.acks.append(AckTemplate(src_mac=d["mac"], dst_mac=s["mac"], src_ip=d["ip"], dst_ip=s["ip"],
                                         dscp=transport["ack_dscp"], flow=f["id"]))
            self.cnps.append(CnpTemplate(src_mac=d["mac"], dst_mac=s["mac"], src_ip=d["ip"], dst_ip=s["ip"],
                                         dscp=transport["ack_dscp"], flow=f["id"]))
        # Per queue pair: DCQCN's rate machine, the time its rate limiter next lets it send (0 when
        # congestion control is off: always), and when its receiver last sent a CNP.
        self.flow_next_ns = [0] * len(flows)
        self.dcqcn = ([Dcqcn(dcqcn_params(plan["dcqcn"], specs[f["src"]]["bw_bps"])) for f in flows]
                      if self.cc else [])
        self.cnp_interval_ns = [d.p["cnp_interval_ns"] for d in self.dcqcn]
        self.last_cnp_ns = [-(1 << 62)] * len(flows)
        self.cc_running: set[int] = set()
        self.cc_tick_ns = (min(CC_TICK_MAX_NS, max(CC_TICK_MIN_NS, min(d.p["rate_decrease_interval_ns"] // 2
                                                                         for d in self.dcqcn)))
                           if self.dcqcn else CC_TICK_MAX_NS)
        msgs = plan["messages"]
        n = len(msgs)
        # A message with flow -1 is compute: no packets, it completes duration_ns after its release.
        self.msg_flow = [m[1] for m in msgs]
        self.msg_bytes = [m[2] for m in msgs]
        self.msg_duration_ns = [m[4] if len(m) > 4 else 0 for m in msgs]
        self.msg_npkts = [max(1, -(-m[2] // self.payload)) if m[1] >= 0 else 0 for m in msgs]
        self.timers: list[tuple[int, int]] = []  # (done_ns, compute message), a heap
        self.msg_waiting = [len(m[3]) for m in msgs]
        self.dependents: list[list[int]] = [[] for _ in range(n)]
        for m in msgs:
            for d in m[3]:
                self.dependents[d].append(m[0])
        self.msg_sent = [0] * n
        self.msg_recv = [0] * n
        self.msg_recv_bytes = [0] * n   # payload bytes of accepted packets, padding excluded
        self.msg_acked = [0] * n
        self.release_ns = [0] * n
        self.first_tx_ns = [0] * n
        self.last_tx_ns = [0] * n
        self.complete_ns = [0] * n
        self.acked_ns = [0] * n
        self.completed = 0
        self.acked = 0   # messages whose every packet the sender has seen acknowledged
        self.active: set[int] = set()
        self.stop_requested = False
        self.last_progress = 0
        self.tx_log = records.RecordWriter(self.out / "raw" / "tx.bin", records.TX)
        self.rx_log = records.RecordWriter(self.out / "raw" / "rx.bin", records.RX)
        self.qp_log = records.RecordWriter(self.out / "raw" / "qp_events.bin", records.QP_EVENT)

    def _event(self, t: int, flow: int, kind: int, value: int = 0) -> None:
        if self.cc:
            d = self.dcqcn[flow]
            self.qp_log.add(t, flow, kind, value, d.rate, d.target, d.alpha)
        else:
            self.qp_log.add(t, flow, kind, value, 0.0, 0.0, 0.0)

    def _rate_changes(self, flow: int) -> None:
        log = self.dcqcn[flow].log
        for t, kind, rate, target, alpha in log:
            self.qp_log.add(t, flow, kind, 0, rate, target, alpha)
        log.clear()

    def _tail(self, nbytes: int) -> int:
        rest = nbytes % self.payload
        return max(rest, PAYLOAD_HEADER_LEN) if rest else self.payload

    def _activate(self, h: Host, now: int) -> None:
        if h.idx not in self.active:
            self.active.add(h.idx)
            if h.next_tx < now:
                h.next_tx = now

    def release(self, msg: int, now: int) -> None:
        flow = self.msg_flow[msg]
        self.release_ns[msg] = now
        if flow < 0:
            heapq.heappush(self.timers, (now + self.msg_duration_ns[msg], msg))
            return
        h = self.hosts[self.flow_src[flow]]
        h.queues[self.flow_prio[flow]].append(msg)
        self._activate(h, now)

    def _complete(self, msg: int, t: int) -> None:
        """Every byte of ``msg`` is at its destination (or its compute is done): release what
        waited for it."""
        self.complete_ns[msg] = t
        self.completed += 1
        for d in self.dependents[msg]:
            self.msg_waiting[d] -= 1
            if self.msg_waiting[d] == 0:
                self.release(d, t)

    def run_compute(self, now: int) -> None:
        timers = self.timers
        while timers and timers[0][0] <= now:
            done, msg = heapq.heappop(timers)
            self.acked_ns[msg] = done
            self.acked += 1
            self.last_progress = now
            self._complete(msg, done)

    def _go_back(self, flow: int, now: int) -> None:
        h = self.hosts[self.flow_src[flow]]
        if flow not in h.resend_flows:
            h.resend_flows.append(flow)
        self._activate(h, now)

    # -- sending ------------------------------------------------------------------------------

    def _pick(self, h: Host, now: int):
        """The next packet host h may send now: (flow, msg, seq, psn, queue), queue None for a
        retransmission; or (None, wake_ns) when its queue pairs with work wait for their rate
        limiters; or None when it has nothing to send. Retransmissions go first, as a NIC's
        go-back-N does; a queue pair going back sends nothing new until it has caught up."""
        ready = self.flow_next_ns
        wake = None
        rq = h.resend_flows
        for _ in range(len(rq)):
            flow = rq[0]
            resend = self.senders[flow].resend
            if not resend:  # an ACK covered what was left to resend
                rq.popleft()
                continue
            if ready[flow] <= now:
                psn, msg, seq = resend[0]
                return flow, msg, seq, psn, None
            wake = ready[flow] if wake is None else min(wake, ready[flow])
            rq.rotate(-1)
        for q in h.queues:
            for _ in range(len(q)):
                msg = q[0]
                flow = self.msg_flow[msg]
                if ready[flow] <= now and not self.senders[flow].resend:
                    return flow, msg, self.msg_sent[msg], self.senders[flow].next_psn, q
                if not self.senders[flow].resend:
                    wake = ready[flow] if wake is None else min(wake, ready[flow])
                q.rotate(-1)
        return None if wake is None else (None, wake)

    def send_due(self, h: Host, now: int) -> None:
        payload = self.payload
        cc = self.cc
        if h.next_tx < now - CATCHUP_LIMIT_NS:
            h.late_ns += now - CATCHUP_LIMIT_NS - h.next_tx
            h.next_tx = now - CATCHUP_LIMIT_NS
        rq = h.resend_flows
        while h.next_tx <= now:
            if cc:
                pick = self._pick(h, now)
                if pick is None:
                    break
                if pick[0] is None:  # every queue pair with work waits for its rate
                    h.next_tx = max(h.next_tx, pick[1])
                    return
                flow, msg, seq, psn, q = pick
            elif rq:  # the same choice as _pick's, inline: every queue pair may always send
                flow = rq[0]
                resend = self.senders[flow].resend
                if not resend:
                    rq.popleft()
                    continue
                psn, msg, seq = resend[0]
                q = None
            else:
                for q in h.queues:
                    if q:
                        break
                else:
                    break
                msg = q[0]
                seq = self.msg_sent[msg]
                flow = self.msg_flow[msg]
                psn = self.senders[flow].next_psn
            # Payloads shorter than the testbed header are padded to it on the wire.
            plen = max(min(payload, self.msg_bytes[msg] - seq * payload), PAYLOAD_HEADER_LEN)
            npk = self.msg_npkts[msg]
            key = (flow, RC_SEND_ONLY if npk == 1 else RC_SEND_FIRST if seq == 0
                   else RC_SEND_LAST if seq == npk - 1 else RC_SEND_MIDDLE, plen)
            tmpl = self.templates[key]
            t = time.monotonic_ns()
            try:
                h.sock.send(tmpl.fill(psn, msg, seq, t))
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
                # The NIC queue is full: nothing was sent and no state moved; retry later.
                h.nic_full += 1
                h.nic_full_ns += NIC_BACKOFF_NS
                h.next_tx = now + NIC_BACKOFF_NS
                return
            if q is None:
                resend = self.senders[flow].resend
                resend.popleft()
                if not resend:
                    rq.popleft()
            else:
                self.senders[flow].sent_new(msg, seq, t)
                if seq == 0:
                    self.first_tx_ns[msg] = t
                seq1 = seq + 1
                self.msg_sent[msg] = seq1
                if seq1 == self.msg_npkts[msg]:
                    self.last_tx_ns[msg] = t
                    q.popleft()
                elif len(q) > 1:
                    q.rotate(-1)
            self.tx_log.add(msg, seq, psn & 0xFFFFFF, t, tmpl.length, 0 if q is not None else TX_RETRANSMIT)
            h.tx_pkts += 1
            h.next_tx += self.gap_ns[key]
            if cc:
                # The queue pair's rate limiter: at most one gap of credit after a late start.
                d = self.dcqcn[flow]
                gap = int(tmpl.length * 8e9 / d.rate)
                self.flow_next_ns[flow] = max(self.flow_next_ns[flow], now - gap) + gap
                if d.running:
                    d.sent(tmpl.length, t)
                    if d.log:
                        self._rate_changes(flow)
        if not h.resend_flows and not any(h.queues):
            self.active.discard(h.idx)

    # -- receiving ----------------------------------------------------------------------------

    def receive(self, h: Host, buf: bytearray) -> None:
        sock = h.sock
        nmsgs = len(self.msg_recv)
        while True:
            try:
                n = sock.recv_into(buf)
            except BlockingIOError:
                return
            rx = time.monotonic_ns()
            opcode = buf[BTH_OFF]
            if opcode == RC_ACKNOWLEDGE:
                self._ack(h, buf, rx)
                continue
            if opcode == CNP:
                self._cnp(h, buf, rx)
                continue
            magic, flow, msg, seq, tx = PAYLOAD_STRUCT.unpack_from(buf, PAYLOAD_OFF)
            if (opcode not in SEND_OPCODES or magic != PAYLOAD_MAGIC or msg >= nmsgs
                    or self.msg_flow[msg] != flow or self.flow_dst[flow] != h.idx):
                h.stray += 1
                continue
            if self.verify_icrc:
                base = self.rx_crc_base.get((flow, opcode, n))
                if base is None or (crc32(memoryview(buf)[PSN_OFF:n - ICRC_LEN], base)
                                    != ICRC_STRUCT.unpack_from(buf, n - ICRC_LEN)[0]):
                    h.icrc_errors += 1  # a RoCE NIC drops it silently; go-back-N recovers
                    continue
            h.rx_pkts += 1
            ecn = buf[IP_OFF + 1] & 3
            if ecn == 3 and self.cc and rx - self.last_cnp_ns[flow] >= self.cnp_interval_ns[flow]:
                self.last_cnp_ns[flow] = rx
                if self._reply(h, self.cnps[flow].bytes):
                    h.cnps_tx += 1
                    self._event(rx, flow, CNP_SENT)
            last = seq == self.msg_npkts[msg] - 1
            if self.reliable:
                psn = PSN_STRUCT.unpack_from(buf, PSN_OFF)[0] & 0xFFFFFF
                accepted, reply, reply_psn = self.receivers[flow].received(psn, last)
                # A lost ACK is covered by a later, cumulative one (or the RTO), a lost NAK by the RTO.
                if reply is not None and self._reply(h, self.acks[flow].fill(reply_psn, reply, self.msg_recv[msg])):
                    h.acks_tx += 1
                    if reply == AETH_NAK_SEQ:
                        self._event(rx, flow, NAK_SENT, reply_psn)
            else:
                accepted = True
            self.rx_log.add(msg, seq, tx, rx, n, ecn, accepted, buf[IP_OFF + 1] >> 2)
            if not accepted:
                continue
            r = self.msg_recv[msg] + 1
            self.msg_recv[msg] = r
            self.msg_recv_bytes[msg] += min(n - HEADER_BYTES, self.msg_bytes[msg] - seq * self.payload)
            self.last_progress = rx
            if r == self.msg_npkts[msg]:
                self._complete(msg, rx)

    def _reply(self, h: Host, frame) -> bool:
        """Send an ACK, NAK or CNP now, ahead of the pacing (the NIC's control path)."""
        try:
            h.sock.send(frame)
            return True
        except OSError as e:
            if e.errno != errno.ENOBUFS:
                raise
            h.nic_full += 1
            return False

    def _flow_of_reply(self, h: Host, buf: bytearray) -> int | None:
        flow = (QPN_STRUCT.unpack_from(buf, BTH_OFF + 4)[0] & 0xFFFFFF) - QPN_BASE
        if not 0 <= flow < len(self.senders) or self.flow_src[flow] != h.idx:
            h.stray += 1
            return None
        return flow

    def _cnp(self, h: Host, buf: bytearray, now: int) -> None:
        flow = self._flow_of_reply(h, buf)
        if flow is None:
            return
        h.cnps_rx += 1
        if not self.cc:
            return
        d = self.dcqcn[flow]
        d.cnp(now)
        self._event(now, flow, CNP_RECEIVED)
        self._rate_changes(flow)
        self.cc_running.add(flow)

    def _ack(self, h: Host, buf: bytearray, now: int) -> None:
        flow = self._flow_of_reply(h, buf)
        if flow is None:
            return
        h.acks_rx += 1
        psn = PSN_STRUCT.unpack_from(buf, PSN_OFF)[0] & 0xFFFFFF
        syndrome = AETH_STRUCT.unpack_from(buf, PAYLOAD_OFF)[0] >> 24
        sender = self.senders[flow]
        if syndrome == AETH_ACK:
            freed = sender.acked(psn, now)
        else:
            before = sender.retransmitted
            freed = sender.nacked(psn, now)
            self._event(now, flow, NAK_RECEIVED, psn)
            if sender.retransmitted != before:
                self._event(now, flow, GO_BACK_NAK, sender.retransmitted - before)
            if sender.resend:
                self._go_back(flow, now)
        for _psn, msg, _seq in freed:
            a = self.msg_acked[msg] + 1
            self.msg_acked[msg] = a
            if a == self.msg_npkts[msg]:
                self.acked_ns[msg] = now
                self.acked += 1
        if freed:
            self.last_progress = now

    def check_timeouts(self, now: int) -> None:
        for flow, sender in enumerate(self.senders):
            if sender.unacked and sender.timed_out(now, self.rto_ns):
                self._event(now, flow, GO_BACK_TIMEOUT, len(sender.resend))
                self._go_back(flow, now)

    def run_rate_timers(self, now: int) -> None:
        for flow in list(self.cc_running):
            d = self.dcqcn[flow]
            d.advance(now)
            if d.log:
                self._rate_changes(flow)
            if not d.running:
                self.cc_running.discard(flow)

    # -- the loop -----------------------------------------------------------------------------

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
        self.last_progress = start
        next_rto_check = start + RTO_CHECK_NS
        next_cc = start + self.cc_tick_ns
        heartbeat = self.out / "raw" / "engine_heartbeat"
        heartbeat.touch()
        next_heartbeat = start + HEARTBEAT_NS
        reason = "complete"
        hosts = self.hosts
        # A message is done when its receiver has it all and, on a reliable transport, when its
        # sender has seen it all acknowledged (the work completion a RoCE application waits for).
        while self.completed < nmsgs or (self.reliable and self.acked < nmsgs):
            now = time.monotonic_ns()
            for i in list(self.active):
                h = hosts[i]
                if h.next_tx <= now:
                    try:
                        self.send_due(h, now)
                    except OSError as e:
                        raise RuntimeError(f"host {h.name}: sending failed: {e}") from e
            if now >= next_heartbeat:  # the runner's proof that this loop is alive
                os.utime(heartbeat)
                next_heartbeat = now + HEARTBEAT_NS
            if self.reliable and now >= next_rto_check:
                self.check_timeouts(now)
                next_rto_check = now + RTO_CHECK_NS
            if self.timers and self.timers[0][0] <= now:
                self.run_compute(now)
            if self.cc_running and now >= next_cc:
                self.run_rate_timers(now)
                next_cc = now + self.cc_tick_ns
            wake = min((hosts[i].next_tx for i in self.active), default=now + int(IDLE_POLL_S * 1e9))
            if self.reliable:
                wake = min(wake, next_rto_check)
            if self.cc_running:
                wake = min(wake, next_cc)
            if self.timers:
                wake = min(wake, self.timers[0][0])
            before = time.monotonic_ns()
            timeout = max(0.0, (wake - before) / 1e9)
            events = ep.poll(timeout)
            # Woken later than asked (epoll rounds up to 1 ms): time the scheduler kept this loop off
            # the CPU, the usual reason the engine falls behind its pacing.
            over = time.monotonic_ns() - before - max(timeout * 1e9, 1e6)
            if over > 1_000_000:
                self.oversleeps += 1
                self.oversleep_ns += int(over)
                self.max_oversleep_ns = max(self.max_oversleep_ns, int(over))
            for fd, _ in events:
                h = by_fd[fd]
                try:
                    self.receive(h, buf)
                except OSError as e:
                    raise RuntimeError(f"host {h.name}: receiving failed: {e}") from e
            if self.stop_requested:
                reason = "terminated"
                break
            now = time.monotonic_ns()
            if now - start > limit_ns:
                reason = "time_limit"
                break
            if now - self.last_progress > stall_ns:
                reason = "stalled"
                break
        end = time.monotonic_ns()
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        self.tx_log.close()
        self.rx_log.close()
        self.qp_log.close()
        return {
            "reason": reason, "start_ns": start, "end_ns": end,
            "messages": nmsgs, "messages_completed": self.completed, "messages_acknowledged": self.acked,
            "cpu_s": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
            # waits that ended over 1 ms after the time asked for (the scheduler's delay), and
            # the context switches the kernel forced on the loop
            "oversleeps": self.oversleeps, "oversleep_ms": self.oversleep_ns / 1e6,
            "max_oversleep_ms": self.max_oversleep_ns / 1e6,
            "involuntary_switches": cpu1.ru_nivcsw - cpu0.ru_nivcsw,
            "voluntary_switches": cpu1.ru_nvcsw - cpu0.ru_nvcsw,
            "transport": self.plan["transport"],
            "hosts": [{"name": h.name, "tx_packets": h.tx_pkts, "rx_packets": h.rx_pkts,
                       "acks_tx": h.acks_tx, "acks_rx": h.acks_rx, "cnps_tx": h.cnps_tx, "cnps_rx": h.cnps_rx,
                       "socket_drops": h.socket_drops(), "stray": h.stray, "icrc_errors": h.icrc_errors,
                       "nic_full": h.nic_full, "nic_full_ms": h.nic_full_ns / 1e6,
                       "pacing_late_ns": h.late_ns} for h in hosts],
            "flows": [{"retransmitted": s.retransmitted, "naks": s.naks, "timeouts": s.timeouts,
                       "out_of_order": r.out_of_order, "duplicates": r.duplicates,
                       **({"cnps": d.cnps, "rate_cuts": d.cuts, "final_rate_bps": d.rate, "alpha": d.alpha}
                          if self.cc else {})}
                      for s, r, d in zip(self.senders, self.receivers, self.dcqcn or [None] * len(self.senders))],
            "dcqcn": self.dcqcn[0].p if self.cc else None,
        }

    def message_table(self) -> dict:
        return {"id": list(range(len(self.msg_npkts))), "flow": self.msg_flow, "bytes": self.msg_bytes,
                "packets": self.msg_npkts, "sent_packets": self.msg_sent, "recv_packets": self.msg_recv,
                "recv_bytes": self.msg_recv_bytes,
                "release_ns": self.release_ns, "first_tx_ns": self.first_tx_ns,
                "last_tx_ns": self.last_tx_ns, "complete_ns": self.complete_ns, "acked_ns": self.acked_ns}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    plan = json.loads(Path(argv[0]).read_text())
    engine = Engine(plan)
    gc.disable()  # the hot loop makes no reference cycles; a collection pause would show as latency

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
