"""The traffic engine: the process that plays every emulated host's RoCE NIC.

    python -m testbed.traffic.engine PLAN.json

Python does the setup: it opens each host's sockets inside its namespace (an AF_PACKET socket
that receives and sends ACKs and CNPs, and one send socket per NIC class that the host's flows
use), builds each flow's headers with Scapy, and lays the plan out as arrays. The per-packet work
is the compiled data plane's (testbed/traffic/nic/nicdp.c): sending, receiving, go-back-N, the CNP
notification point and the DCQCN reaction point, the per-class lead that the kernel's shaper
serialises at line rate, and the per-packet records (raw/tx.bin, rx.bin, qp_events.bin,
nic_gaps.bin; testbed.records). This file then writes raw/messages.json and raw/engine.json.
"""
from __future__ import annotations

import ctypes as C
import json
import os
import resource
import signal
import socket
import struct
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from testbed.fabric.netns import netns_of
from testbed.run.procs import take_priority
from testbed.runfolder import RunFolder
from testbed.traffic import nic
from testbed.traffic.packets import (MESSAGE_END_FILTER, PAYLOAD_HEADER_LEN, RC_SEND_ONLY, ROCE_SOCKET_FILTER,
                                     ROCE_UDP_PORT, AckTemplate, CnpTemplate, DataTemplate)
from testbed.traffic.plan import EnginePlan, FlowSpec, HostSpec, MessageSpec, compute_streams, weighs_in_sync_share
from testbed.traffic.transport import dcqcn_params

ETH_P_IP = 0x0800
ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
PACKET_STATISTICS = 6
SO_ATTACH_FILTER = 26
SO_RCVBUFFORCE = 33
RCVBUF_BYTES = 32 << 20
DOOR_RCVBUF_BYTES = 4 << 20
EXIT_COMPLETE, EXIT_INCOMPLETE = 0, 3
# The data plane keeps a lead of frames in every NIC, so it can wait for the CPU while a message
# is under way; but a message's first frames have no lead: a GPU posts its send and the NIC starts
# at once, and the host verdict counts the wait as its link idling with work. At nice 5 (below
# Open vSwitch's forwarding thread, so that it could preempt the data plane) a release waited
# 1.9-2.4 ms for its first frame at p99 and up to 9 ms on pipeline-fattree, 3000 involuntary
# context switches a run, and such waits were 3 of the 5 invalid runs of 2026-12-04/05's regress
# rounds. A real-time priority below the switch agent's (agent.py) took that p99 to 71-93 us and the
# switches to under 15 (5 runs each, D = 16000, 2026-12-05), Open vSwitch's share of a core
# unchanged (0.67-0.69 against 0.69-0.74): the data plane waits in epoll between passes and used
# 0.09 of a core there, so it does not starve the datapath. Without the right to it (a container without
# CAP_SYS_NICE), the best nice level the agent falls back to.
ENGINE_RT_PRIORITY = 5
ENGINE_NICE_FALLBACK = -5
# DCQCN timers (alpha, cut, increase) are kept to the nanosecond but applied at this granularity.
CC_TICK_MIN_NS, CC_TICK_MAX_NS = 100_000, 1_000_000


def attach_filter(sock: socket.socket, program: tuple) -> None:
    insns = b"".join(struct.pack("HBBI", *i) for i in program)
    buf = C.create_string_buffer(insns)
    prog = struct.pack("HL", len(program), C.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, prog)


def tap(ifname: str, program: tuple, rcvbuf_bytes: int) -> socket.socket:
    """A packet socket that sees every frame arriving on ifname that program accepts (the filter
    goes on before bind, so nothing unfiltered is ever queued), and none of our own going out."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    try:
        attach_filter(s, program)
        s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf_bytes)
        s.bind((ifname, ETH_P_ALL))
    except BaseException:
        s.close()
        raise
    return s


class HostSockets:
    """One host's sockets, opened in its namespace and used from here."""

    def __init__(self, spec: HostSpec, classes: set[int]):
        self.name = spec.name
        with netns_of(spec.pid):
            # Every protocol: a device's taps see a frame before tc ingress, where the NIC's
            # host_dequeue program ends RoCE frames (testbed.fabric.ports); our own frames going out are
            # not looped back to it.
            self.rx = tap(spec.ifname, ROCE_SOCKET_FILTER, RCVBUF_BYTES)
            # The doorbell: a copy of each message's last frame, which wakes the data plane
            # from its batching sleep (the frame itself is read from rx's ring).
            self.door = tap(spec.ifname, MESSAGE_END_FILTER, DOOR_RCVBUF_BYTES)
            # Send-only sockets (protocol 0 receives nothing); their error queues carry the TX
            # timestamps, charged to their receive buffers.
            self.data: dict[int, socket.socket] = {}
            for c in sorted(classes):
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
                s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
                s.bind((spec.ifname, 0))
                self.data[c] = s
            # The host's own stack also sees our UDP packets; a bound socket that is never read
            # makes it drop them quietly instead of answering ICMP port-unreachable.
            self.sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
            self.sink.bind(("0.0.0.0", ROCE_UDP_PORT))

    def sockets(self) -> list[socket.socket]:
        return [self.rx, self.door, self.sink, *self.data.values()]

    def socket_drops(self) -> int:
        _packets, drops = struct.unpack("II", self.rx.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        return drops


def _ptr(arr: np.ndarray, ctype):
    return arr.ctypes.data_as(C.POINTER(ctype))


def flow_frames(flows: tuple[FlowSpec, ...], specs: dict[str, HostSpec], ack_dscp: int) -> dict[str, np.ndarray]:
    """Per queue pair, the frames the data plane patches and sends: its data frames' prefix, and the
    ACK and CNP its receiver sends back to the sender's queue pair."""
    prefix, acks, cnps = bytearray(), bytearray(), bytearray()
    for f in flows:
        s, d = specs[f.src], specs[f.dst]
        ends = dict(src_mac=s.mac, dst_mac=d.mac, src_ip=s.ip, dst_ip=d.ip, flow=f.id)
        back = dict(src_mac=d.mac, dst_mac=s.mac, src_ip=d.ip, dst_ip=s.ip, flow=f.id)
        tmpl = DataTemplate(**ends, dscp=f.dscp, payload_bytes=PAYLOAD_HEADER_LEN, ect=f.ect,
                            opcode=RC_SEND_ONLY)
        prefix += tmpl.buf[:nic.PREFIX_LEN]
        acks += AckTemplate(**back, dscp=ack_dscp).buf
        cnps += CnpTemplate(**back, dscp=ack_dscp).bytes
    assert len(acks) == len(flows) * nic.ACK_LEN and len(cnps) == len(flows) * nic.CNP_LEN
    return {"flow_prefix": np.frombuffer(bytes(prefix) or b"\0", np.uint8).copy(),
            "flow_ack": np.frombuffer(bytes(acks) or b"\0", np.uint8).copy(),
            "flow_cnp": np.frombuffer(bytes(cnps) or b"\0", np.uint8).copy()}


def message_arrays(msgs: tuple[MessageSpec, ...], nf: int) -> dict[str, np.ndarray]:
    """The plan's messages as the data plane's arrays: each one's queue pair, bytes, compute time and
    dependencies still to complete, and who depends on whom (CSR: dep_ptr, dep_idx)."""
    a = {}
    msg_flow = np.array([m.flow for m in msgs], np.int32)
    a["msg_flow"] = msg_flow
    a["msg_bytes"] = np.array([m.bytes for m in msgs], np.int64)
    a["msg_duration_ns"] = np.array([m.duration_ns for m in msgs], np.int64)
    a["msg_waiting"] = np.array([len(m.deps) for m in msgs], np.int32)
    streams = {h: i for i, h in enumerate(compute_streams(msgs))}
    a["msg_stream"] = np.array([streams[m.host] if m.flow < 0 and m.host else -1 for m in msgs], np.int32)
    a["msg_sync"] = np.array([weighs_in_sync_share(m) for m in msgs], np.int32)
    dependents: list[list[int]] = [[] for _ in range(len(msgs))]
    for m in msgs:
        for d in m.deps:
            dependents[d].append(m.id)
    a["dep_ptr"] = np.cumsum([0] + [len(d) for d in dependents]).astype(np.int32)
    a["dep_idx"] = np.array([x for d in dependents for x in d] or [0], np.int32)
    a["flow_n_msgs"] = np.bincount(msg_flow[msg_flow >= 0], minlength=nf).astype(np.int32)[:nf] \
        if nf else np.zeros(1, np.int32)
    return a


class Engine:
    def __init__(self, plan: EnginePlan):
        self.plan = plan
        self.folder = RunFolder(plan.out_dir)
        self.scheduling = "as started"   # main() sets the data plane's own priority
        transport = plan.transport
        flows, msgs = plan.flows, plan.messages
        self.cc = transport["cc"] == "dcqcn"
        specs = {h.name: h for h in plan.hosts}
        host_ix = {h.name: i for i, h in enumerate(plan.hosts)}
        classes: dict[str, set[int]] = {h.name: set() for h in plan.hosts}
        for f in flows:
            classes[f.src].add(f.cls)
        self.hosts = [HostSockets(h, classes[h.name]) for h in plan.hosts]
        nh, nf, nm = len(self.hosts), len(flows), len(msgs)
        a = self.arrays = {}
        a["host_rx_fd"] = np.array([h.rx.fileno() for h in self.hosts], np.int32)
        a["host_door_fd"] = np.array([h.door.fileno() for h in self.hosts], np.int32)
        data_fd = np.full((max(nh, 1), nic.MAX_CLASSES), -1, np.int32)
        for i, h in enumerate(self.hosts):
            for c, s in h.data.items():
                data_fd[i, c] = s.fileno()
        a["host_data_fd"] = data_fd
        a["host_bw_bps"] = np.array([h.bw_bps for h in plan.hosts], np.float64)
        a["flow_src"] = np.array([host_ix[f.src] for f in flows], np.int32)
        a["flow_dst"] = np.array([host_ix[f.dst] for f in flows], np.int32)
        a["flow_cls"] = np.array([f.cls for f in flows], np.int32)
        a["flow_delay_ns"] = np.array([f.delay_ns for f in flows], np.int64)
        self.delayed = bool(a["flow_delay_ns"].any())
        a.update(flow_frames(flows, specs, transport["ack_dscp"]))
        self.dcqcn = [dcqcn_params(plan.dcqcn, specs[f.src].bw_bps) for f in flows] if self.cc else []
        dc = (nic.DcqcnParams * max(nf, 1))()
        for i, p in enumerate(self.dcqcn):
            dc[i] = nic.DcqcnParams.of(p)
        self._dcqcn_arr = dc
        a.update(message_arrays(msgs, nf))
        # what the data plane writes back
        for k in ("release_ns", "first_tx_ns", "last_tx_ns", "complete_ns", "acked_ns", "sent_packets",
                  "recv_packets", "recv_bytes"):
            a[k] = np.zeros(max(nm, 1), np.int64)
        a["host_stats"] = np.zeros((max(nh, 1), len(nic.HOST_STATS)), np.int64)
        a["flow_stats"] = np.zeros((max(nf, 1), len(nic.FLOW_STATS)), np.int64)
        a["flow_rate"] = np.zeros((max(nf, 1), 2), np.float64)
        for k in ("msg_flow", "msg_bytes", "msg_duration_ns", "msg_waiting", "msg_stream", "msg_sync", "flow_src", "flow_dst",
                  "flow_cls", "host_rx_fd", "host_door_fd", "host_bw_bps"):
            if not len(a[k]):
                a[k] = np.zeros(1, a[k].dtype)
        cc_tick = (min(CC_TICK_MAX_NS, max(CC_TICK_MIN_NS, min(p["rate_decrease_interval_ns"] // 2
                                                                 for p in self.dcqcn)))
                   if self.dcqcn else CC_TICK_MAX_NS)
        f = self.folder
        self.c_plan = nic.Plan(
            n_hosts=nh, n_flows=nf, n_msgs=nm, payload_bytes=plan.payload_bytes,
            reliable=int(transport["reliability"] == "go_back_n"), cc=int(self.cc),
            verify_icrc=int(transport["verify_icrc"]), ack_every=transport["ack_every_packets"],
            rto_ns=int(transport["rto_ms"] * 1e6), time_limit_ns=int(plan.time_limit_s * 1e9),
            stall_ns=int(plan.stall_timeout_s * 1e9), lead_ns=int(plan.nic_lead_ns),
            batch_ns=int(transport["engine_batch_us"] * 1e3), cc_tick_ns=cc_tick,
            nak_interval_ns=int(transport["nak_interval_us"] * 1e3),
            tx_path=bytes(f.tx), rx_path=bytes(f.rx), qp_path=bytes(f.qp_events), gap_path=bytes(f.nic_gaps),
            heartbeat_path=bytes(f.heartbeat),
            host_rx_fd=_ptr(a["host_rx_fd"], C.c_int32), host_data_fd=_ptr(a["host_data_fd"], C.c_int32),
            host_door_fd=_ptr(a["host_door_fd"], C.c_int32), host_bw_bps=_ptr(a["host_bw_bps"], C.c_double),
            flow_src=_ptr(a["flow_src"], C.c_int32), flow_dst=_ptr(a["flow_dst"], C.c_int32),
            flow_cls=_ptr(a["flow_cls"], C.c_int32), flow_n_msgs=_ptr(a["flow_n_msgs"], C.c_int32),
            flow_prefix=_ptr(a["flow_prefix"], C.c_ubyte), flow_ack=_ptr(a["flow_ack"], C.c_ubyte),
            flow_cnp=_ptr(a["flow_cnp"], C.c_ubyte), flow_dcqcn=dc,
            msg_flow=_ptr(a["msg_flow"], C.c_int32), msg_bytes=_ptr(a["msg_bytes"], C.c_int64),
            msg_duration_ns=_ptr(a["msg_duration_ns"], C.c_int64), msg_waiting=_ptr(a["msg_waiting"], C.c_int32),
            dep_ptr=_ptr(a["dep_ptr"], C.c_int32), dep_idx=_ptr(a["dep_idx"], C.c_int32),
            flow_delay_ns=_ptr(a["flow_delay_ns"], C.c_int64) if self.delayed else None,
            msg_stream=_ptr(a["msg_stream"], C.c_int32), n_streams=int(a["msg_stream"].max(initial=-1)) + 1,
            msg_sync=_ptr(a["msg_sync"], C.c_int32))
        self.result = nic.Result(**{k: _ptr(a[k], C.c_int64) for k in (
            "release_ns", "first_tx_ns", "last_tx_ns", "complete_ns", "acked_ns", "sent_packets", "recv_packets",
            "recv_bytes", "host_stats", "flow_stats")}, flow_rate=_ptr(a["flow_rate"], C.c_double))
        self.n_msgs = nm

    def run(self) -> dict:
        lib = nic.lib()
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        rc = lib.nic_run(C.byref(self.c_plan), C.byref(self.result))
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        r = self.result
        if rc != 0:
            raise RuntimeError(f"the NIC data plane failed: {r.error.decode(errors='replace')}")
        a, plan = self.arrays, self.plan
        hosts = []
        for i, h in enumerate(self.hosts):
            st = dict(zip(nic.HOST_STATS, (int(x) for x in a["host_stats"][i])))
            st["socket_drops"] = h.socket_drops()
            hosts.append({"name": h.name, **st})
        flows = []
        for i in range(len(plan.flows)):
            st = dict(zip(nic.FLOW_STATS, (int(x) for x in a["flow_stats"][i])))
            if not self.cc:
                for k in ("cnps", "rate_cuts"):
                    st.pop(k)
            else:
                st["final_rate_bps"], st["alpha"] = float(a["flow_rate"][i, 0]), float(a["flow_rate"][i, 1])
            flows.append(st)
        return {
            "reason": nic.REASONS[r.reason], "start_ns": r.start_ns, "end_ns": r.end_ns,
            "clock_offset_ns": r.clock_offset_ns,
            "messages": self.n_msgs, "messages_completed": r.messages_completed,
            "messages_acknowledged": r.messages_acknowledged,
            "cpu_s": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
            # passes of the loop, and waits that ended over 1 ms after the time asked for (the
            # scheduler kept the data plane off the CPU); the kernel's forced context switches
            "wakeups": r.wakeups, "oversleeps": r.late_wakeups, "oversleep_ms": r.late_wakeup_ns / 1e6,
            "max_oversleep_ms": r.max_late_wakeup_ns / 1e6,
            "involuntary_switches": cpu1.ru_nivcsw - cpu0.ru_nivcsw,
            "voluntary_switches": cpu1.ru_nvcsw - cpu0.ru_nvcsw,
            "tx_records": r.tx_records, "rx_records": r.rx_records, "untimed_departures": r.untimed_departures,
            "delayed_frames": r.delayed_frames, "delayed_max": r.delayed_max,
            # the wall clock, which stamps frames, stepped against the monotonic one this often
            "clock_steps": r.clock_steps,
            "nic_lead_ns": plan.nic_lead_ns, "scheduling": self.scheduling,
            "engine_batch_us": plan.transport["engine_batch_us"], "transport": plan.transport, "hosts": hosts,
            "flows": flows,
            "dcqcn": self.dcqcn[0] if self.cc else None,
        }

    def close(self) -> None:
        """Close every socket at once: each packet socket's release waits for an RCU grace period
        (twice with a ring), which one after another takes over 20 s for a k=8 fat-tree's 128
        hosts (measured); concurrent waits share their grace periods."""
        socks = [s for h in self.hosts for s in h.sockets()]
        with ThreadPoolExecutor(max_workers=min(64, max(1, len(socks)))) as pool:
            list(pool.map(lambda s: s.close(), socks))

    def message_table(self) -> dict:
        a, n = self.arrays, self.n_msgs
        npk = [max(1, -(-int(b) // self.plan.payload_bytes)) if f >= 0 else 0
               for f, b in zip(a["msg_flow"][:n], a["msg_bytes"][:n])]
        return {"id": list(range(n)), "flow": a["msg_flow"][:n].tolist(), "bytes": a["msg_bytes"][:n].tolist(),
                "packets": npk, **{k: a[k][:n].tolist() for k in (
                    "sent_packets", "recv_packets", "recv_bytes", "release_ns", "first_tx_ns", "last_tx_ns",
                    "complete_ns", "acked_ns")}}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    plan = EnginePlan.from_json(json.loads(Path(argv[0]).read_text()))
    nic.lib()  # a missing or stale build fails here, before the runner sees "ready"
    stopped = []
    # Until the data plane takes over SIGTERM/SIGINT (and after it hands them back), a stop
    # request before or after the traffic is only remembered.
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopped.append(1))
    engine = Engine(plan)
    engine.scheduling = take_priority(ENGINE_RT_PRIORITY, ENGINE_NICE_FALLBACK)
    folder = engine.folder
    folder.announce("engine")
    if stopped:
        nic.lib().nic_request_stop()
    stats = engine.run()
    folder.message_times.write_text(json.dumps(engine.message_table()))
    folder.engine_stats.write_text(json.dumps(stats, indent=1))
    engine.close()
    return EXIT_COMPLETE if stats["reason"] == "complete" else EXIT_INCOMPLETE


if __name__ == "__main__":
    sys.exit(main())
