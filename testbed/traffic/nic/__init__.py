"""The compiled NIC data plane (nicdp.c, built by `make setup` into build/libnicdp.so), loaded with
ctypes: the engine hands it the plan and the sockets; the unit tests drive its go-back-N and
DCQCN state machines through the thin classes below. There is no Python twin of either.
"""
from __future__ import annotations

import ctypes as C
from pathlib import Path

from testbed.built import stale_build
from testbed.errors import SetupError
from testbed.paths import BUILD_DIR

LIBRARY = BUILD_DIR / "libnicdp.so"
SOURCE = Path(__file__).with_name("nicdp.c")
MAX_CLASSES = 8
PREFIX_LEN, ACK_LEN, CNP_LEN = 54, 62, 74
# per-host and per-flow counters of nic_result, in nicdp.c's order
HOST_STATS = ("tx_packets", "rx_packets", "acks_tx", "acks_rx", "cnps_tx", "cnps_rx", "stray", "icrc_errors",
              "nic_full", "lead_dry_ns", "lead_dry_gaps", "sent_bytes")
FLOW_STATS = ("retransmitted", "naks", "timeouts", "out_of_order", "duplicates", "cnps", "rate_cuts",
              "behind_rate_ns", "rate_limited_ns")
REASONS = ("complete", "terminated", "time_limit", "stalled", "error")
AETH_ACK, AETH_NAK_SEQ = 0x1F, 0x60
PSN_MOD = 1 << 24

i32, i64, f64 = C.c_int32, C.c_int64, C.c_double


class GbnSender(C.Structure):
    _fields_ = [("next", i64), ("una", i64), ("resend", i64), ("resend_end", i64), ("last_progress_ns", i64),
                ("retransmitted", C.c_uint64), ("naks", C.c_uint64), ("timeouts", C.c_uint64)]


class GbnReceiver(C.Structure):
    _fields_ = [("expected", i64), ("since_ack", i32), ("nak_outstanding", i32), ("ack_every", i32), ("_pad", i32),
                ("out_of_order", C.c_uint64), ("duplicates", C.c_uint64), ("last_nak_ns", i64),
                ("nak_interval_ns", i64)]


class DcqcnParams(C.Structure):
    _fields_ = [("line_bps", f64), ("min_rate_bps", f64), ("rai_bps", f64), ("rhai_bps", f64), ("g", f64),
                ("rate_on_first_cnp", f64), ("cnp_interval_ns", i64), ("alpha_interval_ns", i64),
                ("rate_decrease_interval_ns", i64), ("rate_increase_timer_ns", i64), ("byte_counter_bytes", i64),
                ("fast_recovery_rounds", i32), ("clamp_target_rate", i32)]

    @classmethod
    def of(cls, p: dict) -> "DcqcnParams":
        """From testbed.traffic.transport.dcqcn_params()."""
        return cls(**{name: p[name] for name, _ in cls._fields_})


class RateEvent(C.Structure):
    _fields_ = [("t_ns", i64), ("kind", i32), ("_pad", i32), ("rate", f64), ("target", f64), ("alpha", f64)]


DCQCN_LOG = 64


class DcqcnState(C.Structure):
    _fields_ = [("p", DcqcnParams), ("rate", f64), ("target", f64), ("alpha", f64), ("first", i32),
                ("running", i32), ("cnp_alpha", i32), ("cut_pending", i32), ("last_cut_ns", i64),
                ("next_alpha_ns", i64), ("next_cut_ns", i64), ("next_increase_ns", i64), ("timer_stage", i64),
                ("byte_stage", i64), ("bytes", i64), ("cuts", C.c_uint64), ("cnps", C.c_uint64), ("n_log", i32),
                ("_pad", i32), ("log", RateEvent * DCQCN_LOG)]


P = C.POINTER


class Plan(C.Structure):
    _fields_ = [("n_hosts", i32), ("n_flows", i32), ("n_msgs", i32), ("payload_bytes", i32),
                ("reliable", i32), ("cc", i32), ("verify_icrc", i32), ("ack_every", i32),
                ("rto_ns", i64), ("time_limit_ns", i64), ("stall_ns", i64), ("lead_ns", i64), ("batch_ns", i64),
                ("cc_tick_ns", i64), ("nak_interval_ns", i64),
                ("tx_path", C.c_char_p), ("rx_path", C.c_char_p), ("qp_path", C.c_char_p), ("gap_path", C.c_char_p),
                ("heartbeat_path", C.c_char_p),
                ("host_rx_fd", P(i32)), ("host_data_fd", P(i32)), ("host_door_fd", P(i32)),
                ("host_bw_bps", P(f64)),
                ("flow_src", P(i32)), ("flow_dst", P(i32)), ("flow_cls", P(i32)), ("flow_n_msgs", P(i32)),
                ("flow_prefix", P(C.c_ubyte)), ("flow_ack", P(C.c_ubyte)), ("flow_cnp", P(C.c_ubyte)),
                ("flow_dcqcn", P(DcqcnParams)),
                ("msg_flow", P(i32)), ("msg_bytes", P(i64)), ("msg_duration_ns", P(i64)), ("msg_waiting", P(i32)),
                ("dep_ptr", P(i32)), ("dep_idx", P(i32)), ("flow_delay_ns", P(i64)),
                ("msg_stream", P(i32)), ("n_streams", i32), ("msg_sync", P(i32))]


class Result(C.Structure):
    _fields_ = [("start_ns", i64), ("end_ns", i64), ("clock_offset_ns", i64), ("reason", i32), ("_pad", i32),
                ("messages_completed", i64), ("messages_acknowledged", i64),
                ("wakeups", i64), ("late_wakeups", i64), ("late_wakeup_ns", i64), ("max_late_wakeup_ns", i64),
                ("tx_records", i64), ("rx_records", i64), ("untimed_departures", i64),
                ("error", C.c_char * 256),
                ("release_ns", P(i64)), ("first_tx_ns", P(i64)), ("last_tx_ns", P(i64)), ("complete_ns", P(i64)),
                ("acked_ns", P(i64)), ("sent_packets", P(i64)), ("recv_packets", P(i64)), ("recv_bytes", P(i64)),
                ("host_stats", P(i64)), ("flow_stats", P(i64)), ("flow_rate", P(f64)),
                ("delayed_frames", i64), ("delayed_max", i64), ("clock_steps", i64)]


_lib = None


class NotBuilt(SetupError):
    pass


def require_built() -> None:
    """Fail before anything starts if the library is missing or not built from SOURCE."""
    why = stale_build(LIBRARY, SOURCE, "nic")
    if why:
        raise NotBuilt(why)


def lib() -> C.CDLL:
    """The library, loaded once; its struct sizes are checked against the mirrors above."""
    global _lib
    if _lib is None:
        require_built()
        L = C.CDLL(str(LIBRARY))
        L.nic_sizeof.argtypes = [C.c_int]
        for i, s in enumerate((GbnSender, GbnReceiver, DcqcnParams, DcqcnState, Plan, Result)):
            if L.nic_sizeof(i) != C.sizeof(s):
                raise RuntimeError(f"{LIBRARY}: struct {s.__name__} is {L.nic_sizeof(i)} bytes there, "
                                   f"{C.sizeof(s)} here")
        L.psn_unwrap.restype = i64
        L.stamp_on_mono.restype = i64
        L.stamp_on_mono.argtypes = [i64, i64, i64, i64, i64]
        L.psn_unwrap.argtypes = [i64, i64]
        L.gbn_sender_init.argtypes = [P(GbnSender), i64]
        L.gbn_sent_new.restype = i64
        L.gbn_sent_new.argtypes = [P(GbnSender), i64]
        L.gbn_acked.restype = i64
        L.gbn_acked.argtypes = [P(GbnSender), i64, i64]
        L.gbn_nacked.restype = i64
        L.gbn_nacked.argtypes = [P(GbnSender), i64, i64]
        L.gbn_timed_out.argtypes = [P(GbnSender), i64, i64]
        L.gbn_resending.argtypes = [P(GbnSender)]
        L.gbn_receiver_init.argtypes = [P(GbnReceiver), i32, i64, i64]
        L.gbn_received.argtypes = [P(GbnReceiver), i64, C.c_int, i64, P(i32), P(i64)]
        L.dcqcn_init.argtypes = [P(DcqcnState), P(DcqcnParams)]
        L.dcqcn_cnp.argtypes = [P(DcqcnState), i64]
        L.dcqcn_advance.argtypes = [P(DcqcnState), i64]
        L.dcqcn_sent.argtypes = [P(DcqcnState), i64, i64]
        L.roce_icrc.restype = C.c_uint32
        L.roce_icrc.argtypes = [C.c_char_p, C.c_int]
        L.roce_data_frame.restype = C.c_uint32
        L.roce_data_frame.argtypes = [C.c_char_p, C.c_char_p, C.c_int, i64, C.c_int, C.c_uint32, C.c_uint32,
                                      C.c_uint32, i64, C.c_int]
        L.nic_run.argtypes = [P(Plan), P(Result)]
        _lib = L
    return _lib


def unwrap(psn24: int, reference: int) -> int:
    """The unbounded PSN closest to ``reference`` whose low 24 bits are ``psn24``."""
    return lib().psn_unwrap(psn24, reference)


class Sender:
    """One queue pair's go-back-N sender (nicdp.c's gbn_sender)."""

    def __init__(self, start_psn: int = 0):
        self.s = GbnSender()
        lib().gbn_sender_init(C.byref(self.s), start_psn)

    def __getattr__(self, name):
        return getattr(self.s, name)

    @property
    def outstanding(self) -> list[int]:
        return list(range(self.s.una, self.s.next))

    @property
    def to_resend(self) -> list[int]:
        return list(range(self.s.resend, self.s.resend_end))

    def sent_new(self, now_ns: int) -> int:
        return lib().gbn_sent_new(C.byref(self.s), now_ns)

    def next_resend(self) -> int | None:
        """Take the next PSN to resend, if the QP is going back."""
        if not lib().gbn_resending(C.byref(self.s)):
            return None
        psn = self.s.resend
        self.s.resend += 1
        return psn

    def acked(self, psn24: int, now_ns: int) -> int:
        return lib().gbn_acked(C.byref(self.s), psn24, now_ns)

    def nacked(self, psn24: int, now_ns: int) -> int:
        return lib().gbn_nacked(C.byref(self.s), psn24, now_ns)

    def timed_out(self, now_ns: int, rto_ns: int) -> bool:
        return bool(lib().gbn_timed_out(C.byref(self.s), now_ns, rto_ns))


class Receiver:
    """One queue pair's go-back-N receiver (nicdp.c's gbn_receiver)."""

    def __init__(self, ack_every: int, start_psn: int = 0, nak_interval_ns: int = 0):
        self.r = GbnReceiver()
        lib().gbn_receiver_init(C.byref(self.r), ack_every, start_psn, nak_interval_ns)

    def __getattr__(self, name):
        return getattr(self.r, name)

    def received(self, psn24: int, last_of_message: bool, now_ns: int = 0) -> tuple[bool, int | None, int]:
        """(accepted, reply syndrome or None, PSN for the reply)."""
        syn, rpsn = i32(), i64()
        ok = lib().gbn_received(C.byref(self.r), psn24, int(last_of_message), now_ns, C.byref(syn), C.byref(rpsn))
        return bool(ok), (syn.value or None), rpsn.value


class Dcqcn:
    """DCQCN's reaction point of one queue pair (nicdp.c's dcqcn). ``log`` holds the rate events
    since it was last cleared: (t_ns, kind, rate, target, alpha)."""

    def __init__(self, params: dict):
        self.p = params
        self.d = DcqcnState()
        lib().dcqcn_init(C.byref(self.d), C.byref(DcqcnParams.of(params)))
        self._log: list[tuple] = []

    def __getattr__(self, name):
        return getattr(self.d, name)

    def _collect(self) -> None:
        d = self.d
        self._log += [(e.t_ns, e.kind, e.rate, e.target, e.alpha) for e in d.log[:d.n_log]]
        d.n_log = 0

    @property
    def log(self) -> list[tuple]:
        self._collect()
        return self._log

    def cnp(self, now: int) -> None:
        lib().dcqcn_cnp(C.byref(self.d), now)
        self._collect()

    def advance(self, now: int) -> None:
        lib().dcqcn_advance(C.byref(self.d), now)
        self._collect()

    def sent(self, nbytes: int, now: int) -> None:
        lib().dcqcn_sent(C.byref(self.d), nbytes, now)
        self._collect()


def data_frame(prefix: bytes, opcode: int, psn: int, ackreq: bool, flow: int, msg: int, seq: int, tx_ns: int,
               payload_bytes: int) -> bytes:
    """A whole data frame as the data plane puts it on the wire (for tests and checks)."""
    hdr = C.create_string_buffer(78)
    crc = lib().roce_data_frame(hdr, prefix, opcode, psn, int(ackreq), flow, msg, seq, tx_ns, payload_bytes)
    return hdr.raw + bytes(payload_bytes - 24) + crc.to_bytes(4, "little")
