"""The port QoS BPF object (testbed/fabric/bpf/port_qos.bpf.c): built by `make bpf`, loaded with
libbpf, its array maps shared with user space by mmap (no syscall per read or write).

The runner loads the object and attaches its programs (testbed.fabric.ports); the switch agent gets
the maps' file descriptors and maps them into its own memory. The numpy dtypes below mirror
the C structs field by field.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import socket
from pathlib import Path

import numpy as np

from testbed.built import stale_build
from testbed.errors import SetupError
from testbed.paths import BUILD_DIR
from testbed.scenario.schema import MAX_CLASSES as SCENARIO_MAX_CLASSES

SOURCE = Path(__file__).with_name("bpf") / "port_qos.bpf.c"
OBJECT = BUILD_DIR / "port_qos.bpf.o"

MAX_QUEUES = 16384  # 2048 ports of 8 classes: a k=10 fat-tree
# the classes a port has, one definition for Python (a scenario's limit) and this program's maps;
# port_qos.bpf.c's #define MAX_CLASSES is held to it by tests/unit/test_built.py
MAX_CLASSES = SCENARIO_MAX_CLASSES
HIST_BUCKETS = 32
DSCP_MAP_ENTRIES = 72
NON_IP_KEY, FIRST_MINOR_KEY = 64, 66

QUEUE = np.dtype([("depth_bytes", "<u8"), ("enq_bytes", "<u8"), ("enq_pkts", "<u8"),
                  ("deq_bytes", "<u8"), ("deq_pkts", "<u8"), ("drop_pkts", "<u8"),
                  ("ect_pkts", "<u8"), ("mark_pkts", "<u8"), ("xoff_cross_ns", "<u8"),
                  ("xoff_crossings", "<u8")])
PROFILE = np.dtype([("limit_bytes", "<u4"), ("kmin_bytes", "<u4"), ("kmax_bytes", "<u4"),
                    ("pmax_q16", "<u4"), ("ecn_on", "<u4"), ("xoff_bytes", "<u4"),
                    ("hist_bucket_bytes", "<u4"), ("pad", "<u4")])
HIST = np.dtype([("ect", "<u8", (HIST_BUCKETS,)), ("marked", "<u8", (HIST_BUCKETS,))])
INGRESS = np.dtype([("in_bytes", "<u8"), ("in_pkts", "<u8"), ("out_bytes", "<u8"), ("out_pkts", "<u8"),
                    ("xoff_bytes", "<u8"), ("lost_bytes", "<u8"), ("xoff_cross_ns", "<u8"),
                    ("xoff_crossings", "<u8"), ("byte_ps", "<u8"), ("ahead_ns", "<u8"), ("ahead_ps", "<u8"),
                    ("peak_held_bytes", "<u8"), ("peak_ahead_bytes", "<u8"), ("tai_minus_real_ns", "<u8"),
                    ("wire_max_ns", "<u8"), ("peak_wire_ns", "<u8")])
# per switch port slot: the corrupt fault's rate and the frames it hit (struct corrupt)
CORRUPT = np.dtype([("threshold", "<u4"), ("pad", "<u4"), ("frames", "<u8")])
MAPS = {"queues": (QUEUE, MAX_QUEUES), "profiles": (PROFILE, MAX_QUEUES), "hists": (HIST, MAX_QUEUES),
        "ingress": (INGRESS, MAX_QUEUES), "dscp_class": (np.dtype("<u8"), DSCP_MAP_ENTRIES),
        "corrupt": (CORRUPT, MAX_QUEUES // MAX_CLASSES)}
HASH_MAPS = ("port_slot", "host_mac")
PROGRAMS = ("port_enqueue", "port_dequeue", "host_enqueue", "host_dequeue")


class BpfUnavailable(SetupError):
    pass


def require_object(path: Path = OBJECT) -> None:
    """Fail before anything starts if the compiled program is missing or not built from SOURCE."""
    why = stale_build(path, SOURCE, "bpf")
    if why:
        raise BpfUnavailable(why)


def _libbpf():
    name = ctypes.util.find_library("bpf")
    if not name:
        raise BpfUnavailable("libbpf is not installed (Debian package libbpf1; `make setup` installs it)")
    lib = ctypes.CDLL(name, use_errno=True)
    lib.bpf_object__open_file.restype = ctypes.c_void_p
    lib.bpf_object__open_file.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    lib.bpf_object__load.argtypes = [ctypes.c_void_p]
    lib.bpf_object__close.argtypes = [ctypes.c_void_p]
    lib.bpf_object__find_program_by_name.restype = ctypes.c_void_p
    lib.bpf_object__find_program_by_name.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.bpf_object__find_map_by_name.restype = ctypes.c_void_p
    lib.bpf_object__find_map_by_name.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.bpf_program__fd.argtypes = [ctypes.c_void_p]
    lib.bpf_map__fd.argtypes = [ctypes.c_void_p]
    lib.bpf_map_update_elem.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
    return lib


class PortQosObject:
    """The loaded object: program and map file descriptors, for as long as it is open."""

    def __init__(self, path: Path = OBJECT):
        require_object(path)
        self._lib = _libbpf()
        self._obj = self._lib.bpf_object__open_file(str(path).encode(), None)
        if not self._obj:
            raise BpfUnavailable(f"libbpf could not open {path}: {os.strerror(ctypes.get_errno())}")
        if self._lib.bpf_object__load(self._obj) != 0:
            err = ctypes.get_errno()
            self.close()
            raise BpfUnavailable(f"the kernel refused {path.name} ({os.strerror(err)}): needs BPF with "
                                 f"cls_bpf, clsact and mmapable array maps (Linux >= 5.5)")
        self.prog_fd = {}
        for name in PROGRAMS:
            prog = self._lib.bpf_object__find_program_by_name(self._obj, name.encode())
            self.prog_fd[name] = self._lib.bpf_program__fd(prog)
        self.map_fd = {}
        for name in (*MAPS, *HASH_MAPS):
            m = self._lib.bpf_object__find_map_by_name(self._obj, name.encode())
            self.map_fd[name] = self._lib.bpf_map__fd(m)

    def set_port_slot(self, ifindex: int, slot: int) -> None:
        key, value = ctypes.c_uint32(ifindex), ctypes.c_uint32(slot)
        if self._lib.bpf_map_update_elem(self.map_fd["port_slot"], ctypes.byref(key), ctypes.byref(value), 0):
            raise OSError(ctypes.get_errno(), f"port_slot update for ifindex {ifindex}")

    def set_host_mac(self, ip: str, mac: str) -> None:
        """Where port_enqueue finds the Ethernet source address an ingress tag replaced."""
        key = ctypes.c_uint32(int.from_bytes(socket.inet_aton(ip), "little"))
        value = ctypes.c_uint64(int.from_bytes(bytes.fromhex(mac.replace(":", "")) + b"\0\0", "little"))
        if self._lib.bpf_map_update_elem(self.map_fd["host_mac"], ctypes.byref(key), ctypes.byref(value), 0):
            raise OSError(ctypes.get_errno(), f"host_mac update for {ip}")

    def close(self) -> None:
        if self._obj:
            self._lib.bpf_object__close(self._obj)
            self._obj = None


class MappedArrays:
    """numpy views of the object's array maps, from their file descriptors (in any process); a
    reader's (the northbound API) mapped read-only."""

    def __init__(self, map_fds: dict[str, int], names=tuple(MAPS), writable: bool = True):
        self._mmaps = []
        self.views: dict[str, np.ndarray] = {}
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        for name in names:
            dtype, n = MAPS[name]
            size = -(-dtype.itemsize * n // mmap.PAGESIZE) * mmap.PAGESIZE
            mm = mmap.mmap(int(map_fds[name]), size, mmap.MAP_SHARED, prot)
            self._mmaps.append(mm)
            self.views[name] = np.frombuffer(mm, dtype=dtype, count=n)

    def __getattr__(self, name):
        try:
            return self.views[name]
        except KeyError:
            raise AttributeError(name) from None

    def close(self) -> None:
        self.views.clear()
        for mm in self._mmaps:
            try:
                mm.close()
            except BufferError:  # a numpy view is still alive somewhere; the mapping goes at exit
                pass
        self._mmaps = []
