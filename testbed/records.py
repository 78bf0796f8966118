"""Raw per-packet records written by the engine during a run, and their readers.

Each file is a flat array of little-endian fixed-size records (numpy dtypes below), written
in chunks as the run goes, so a crash loses at most one chunk.
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

TX = struct.Struct("<IIIqIB3x")      # msg, seq, psn, tx_ns, frame_bytes, flags (1: retransmission)
RX = struct.Struct("<IIqqIBBB5x")    # msg, seq, tx_ns, rx_ns, frame_bytes, ecn, accepted, dscp
TX_DTYPE = np.dtype([("msg", "<u4"), ("seq", "<u4"), ("psn", "<u4"), ("tx_ns", "<i8"),
                     ("frame_bytes", "<u4"), ("flags", "u1"), ("_pad", "V3")])
RX_DTYPE = np.dtype([("msg", "<u4"), ("seq", "<u4"), ("tx_ns", "<i8"), ("rx_ns", "<i8"),
                     ("frame_bytes", "<u4"), ("ecn", "u1"), ("accepted", "u1"), ("dscp", "u1"),
                     ("_pad", "V5")])
assert TX.size == TX_DTYPE.itemsize and RX.size == RX_DTYPE.itemsize

CHUNK_RECORDS = 8192


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
