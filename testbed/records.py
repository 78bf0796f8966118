"""Raw per-packet records written by the NIC data plane (testbed/traffic/nic/nicdp.c, whose packed
structs these mirror) during a run, and their readers.

Each file is a flat array of little-endian fixed-size records (numpy dtypes below), written
in buffered chunks as the run goes, so a crash loses at most one chunk.

Times: tx_ns is when the data plane handed the frame to the host NIC's queue; depart_ns when
the NIC's shaper released it onto the wire (its software TX timestamp; -1 if it never left, or
its timestamp was lost); rx_ns when the destination's kernel received it.
"""
from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

TX = struct.Struct("<IIIqqIBB2x")    # msg, seq, psn, tx_ns, depart_ns, frame_bytes, flags (1: retx), NIC class
RX = struct.Struct("<IIqqIBBBIx")    # msg, seq, tx_ns, rx_ns, frame_bytes, ecn, accepted, dscp, link_ns
TX_DTYPE = np.dtype([("msg", "<u4"), ("seq", "<u4"), ("psn", "<u4"), ("tx_ns", "<i8"), ("depart_ns", "<i8"),
                     ("frame_bytes", "<u4"), ("flags", "u1"), ("cls", "u1"), ("_pad", "V2")])
RX_DTYPE = np.dtype([("msg", "<u4"), ("seq", "<u4"), ("tx_ns", "<i8"), ("rx_ns", "<i8"),
                     ("frame_bytes", "<u4"), ("ecn", "u1"), ("accepted", "u1"), ("dscp", "u1"),
                     ("link_ns", "<u4"), ("_pad", "V1")])
assert TX.size == TX_DTYPE.itemsize and RX.size == RX_DTYPE.itemsize

CHUNK_RECORDS = 8192


# The data plane's heartbeat file (raw/engine_heartbeat): one record rewritten in place every 200 ms
# and at the end (nicdp.c beat()); its beat count changing says it is alive (version 1 went by the
# file's mtime, which a step of the guest's wall clock made look 3 s old: 2026-12-03, a run killed
# while its data plane was sending, the VM's CLOCK_REALTIME stepped 1.5 s, then 12 s, against
# CLOCK_MONOTONIC within two minutes).
HEARTBEAT = struct.Struct("<9q")   # version, messages completed, acknowledged, planned, bytes done, planned,
                                   # beats, the traffic's start and the beat's time (CLOCK_MONOTONIC ns)
HEARTBEAT_VERSION = 4   # 3: every queue pair's live state after the record; 4: the times, and each
                        # compute stream's weighed time after the queue pairs


@dataclass(frozen=True)
class EngineProgress:
    messages_done: int
    messages_acked: int
    messages: int
    payload_bytes_done: int   # network messages' payload, counted when a message completes
    payload_bytes: int
    started_ns: int = 0       # the traffic's start (the data plane's first releases), CLOCK_MONOTONIC
    beat_ns: int = 0          # when the data plane wrote this record, on the same clock


def read_engine_progress(path: Path) -> EngineProgress | None:
    """The engine's last heartbeat record, or None before its first (or from another version)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(HEARTBEAT.size)
    except OSError:
        return None
    if len(raw) < HEARTBEAT.size:
        return None
    version, done, acked, planned, bytes_done, nbytes, _beats, started, beat = HEARTBEAT.unpack(raw)
    if version != HEARTBEAT_VERSION:
        return None
    return EngineProgress(done, acked, planned, bytes_done, nbytes, started, beat)


# After the heartbeat's record, one per queue pair rewritten with it (nicdp.c struct qp_live):
# DCQCN's rate, target rate (bits/s of the emulated link) and alpha, 0 without congestion control;
# PSNs acknowledged (una) and sent (next) so far; frames resent, CNPs received, rate cuts.
QP_LIVE = np.dtype([("rate_bps", "<f8"), ("target_bps", "<f8"), ("alpha", "<f8"), ("una", "<i8"),
                    ("next", "<i8"), ("retransmitted", "<i8"), ("cnps", "<i8"), ("cuts", "<i8")])


def read_qp_live(path: Path, n_flows: int) -> np.ndarray | None:
    """Every queue pair's state at the data plane's last heartbeat, or None before it wrote one (or
    from another version)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(HEARTBEAT.size + n_flows * QP_LIVE.itemsize)
    except OSError:
        return None
    if len(raw) < HEARTBEAT.size + n_flows * QP_LIVE.itemsize or HEARTBEAT.unpack(raw[:HEARTBEAT.size])[0] != HEARTBEAT_VERSION:
        return None
    return np.frombuffer(raw, dtype=QP_LIVE, count=n_flows, offset=HEARTBEAT.size)


@dataclass(frozen=True)
class ComputeBusy:
    """Each compute stream's weighed compute time up to one heartbeat (nicdp.c sync_busy): the steps
    tagged "compute" that ended, and the part run so far of the one running."""
    started_ns: int
    beat_ns: int
    busy_ns: tuple[int, ...]   # per stream, in testbed.traffic.plan.compute_streams' order


def read_compute_busy(path: Path, n_flows: int, n_streams: int) -> ComputeBusy | None:
    """The compute streams' time at the data plane's last heartbeat, or None before it wrote one,
    from another version, or torn: the block ends with its beat's count, which must be the
    header's (the data plane writes the two apart)."""
    at = HEARTBEAT.size + n_flows * QP_LIVE.itemsize
    size = at + (n_streams + 1) * 8
    try:
        with open(path, "rb") as f:
            raw = f.read(size)
    except OSError:
        return None
    if n_streams <= 0 or len(raw) < size:
        return None
    version, *_rest, beats, started, beat = HEARTBEAT.unpack(raw[:HEARTBEAT.size])
    busy = struct.unpack_from(f"<{n_streams + 1}q", raw, at)
    if version != HEARTBEAT_VERSION or busy[-1] != beats:
        return None
    return ComputeBusy(started, beat, tuple(busy[:-1]))


class HeartbeatWatch:
    """How long, on this process's monotonic clock, the data plane's heartbeat record has not
    changed: its beat count goes up every 200 ms while it runs. The wall clock (a file's mtime) is
    not used: a VM's can step by seconds."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.last: bytes | None = None
        self.changed_at = time.monotonic()

    def silent_s(self) -> float | None:
        """Seconds since the record last changed; None before the first record."""
        try:
            raw = self.path.read_bytes()[:HEARTBEAT.size]
        except OSError:
            raw = b""
        now = time.monotonic()
        if len(raw) < HEARTBEAT.size:
            self.changed_at = now
            return None
        if raw != self.last:
            self.last, self.changed_at = raw, now
        return now - self.changed_at


class RecordWriter:
    """Packs records into a preallocated buffer and appends it to the file chunk by chunk."""

    def __init__(self, path: Path, fmt: struct.Struct):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(path, "wb")
        self._fmt = fmt
        self._buf = bytearray(fmt.size * CHUNK_RECORDS)
        self._pos = 0
        self.count = 0

    def add(self, *fields) -> None:
        self._fmt.pack_into(self._buf, self._pos, *fields)
        self._pos += self._fmt.size
        self.count += 1
        if self._pos == len(self._buf):
            self._f.write(self._buf)
            self._pos = 0

    def close(self) -> None:
        if self._f.closed:
            return
        self._f.write(memoryview(self._buf)[:self._pos])
        self._f.close()


def read(path: Path, dtype: np.dtype) -> np.ndarray:
    data = path.read_bytes()
    whole = len(data) - len(data) % dtype.itemsize
    return np.frombuffer(data[:whole], dtype=dtype)


# Queue telemetry from the switch agent (raw/telemetry.bin): one row per queue that changed
# since the previous sample; queue is the row in raw/agent_plan.json's "queues".
TELEMETRY = np.dtype([("t_ns", "<i8"), ("queue", "<u4"), ("depth_bytes", "<u4"), ("enq_pkts", "<u8"),
                      ("enq_bytes", "<u8"), ("deq_bytes", "<u8"), ("drop_pkts", "<u8"), ("ect_pkts", "<u8"),
                      ("mark_pkts", "<u8")])

# What happened to each queue pair (raw/qp_events.bin), one row per event: the transport's
# recoveries, congestion notifications, every DCQCN rate change and every frame dropped for its
# ICRC. value: the PSN of a NAK, the packets a go-back resends; rates are the sender's after the
# event (0 where it does not apply).
QP_EVENT = struct.Struct("<qIB3xQddd")
QP_EVENT_DTYPE = np.dtype([("t_ns", "<i8"), ("flow", "<u4"), ("kind", "u1"), ("_pad", "V3"), ("value", "<u8"),
                           ("rate_bps", "<f8"), ("target_bps", "<f8"), ("alpha", "<f8")])
assert QP_EVENT.size == QP_EVENT_DTYPE.itemsize
NAK_SENT, NAK_RECEIVED, GO_BACK_NAK, GO_BACK_TIMEOUT, CNP_SENT, CNP_RECEIVED = 0, 1, 2, 3, 4, 5
# 6-9: testbed.traffic.transport's RATE_CUT, RATE_FAST_RECOVERY, RATE_ADDITIVE, RATE_HYPER
# 10: a data frame the receiver dropped for its ICRC; value: its message << 32 | its sequence
ICRC_DROPPED = 10
QP_EVENT_NAMES = {NAK_SENT: "nak_sent", NAK_RECEIVED: "nak_received", GO_BACK_NAK: "go_back_nak",
                  GO_BACK_TIMEOUT: "go_back_timeout", CNP_SENT: "cnp_sent", CNP_RECEIVED: "cnp_received",
                  6: "rate_cut", 7: "rate_fast_recovery", 8: "rate_additive_increase", 9: "rate_hyper_increase",
                  ICRC_DROPPED: "icrc_dropped"}

# When a host NIC's link idled although it had frames to send (raw/nic_gaps.bin): kind 0, the
# class's lead ran dry (flow -1); kind 1, a queue pair held back by its DCQCN rate was sent later
# than that rate allows.
NIC_GAP = np.dtype([("start_ns", "<i8"), ("end_ns", "<i8"), ("host", "<i4"), ("flow", "<i4"), ("cls", "u1"),
                    ("kind", "u1"), ("_pad", "V6")])
GAP_LEAD_DRY, GAP_QP_BEHIND = 0, 1
