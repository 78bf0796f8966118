"""Reliable-connection transport of one queue pair, as RoCE NICs run it: go-back-N.

Pure state machines (no sockets, no clock), driven by the engine and tested on their own.

- The sender numbers packets with PSNs (24 bits on the wire, unbounded here), keeps every
  unacknowledged packet, drops what an ACK covers, goes back to the NAKed PSN and resends
  everything from there, and goes back to the oldest unacknowledged packet when no ACK has
  advanced for a retransmission timeout.
- The receiver accepts only the expected PSN. An ACK (coalesced: every ``ack_every`` packets
  and at each message's last packet) acknowledges everything before the expected PSN; the first
  packet past a gap triggers one NAK (PSN sequence error) carrying the expected PSN; duplicates
  are dropped and re-ACKed.
"""
from __future__ import annotations

from collections import deque

PSN_MOD = 1 << 24
HALF = 1 << 23

# AETH syndromes (IBA 9.7.5.1): ACK with an unlimited credit count; NAK "PSN sequence error".
AETH_ACK = 0x1F
AETH_NAK_SEQ = 0x60


def unwrap(psn24: int, reference: int) -> int:
    """The unbounded PSN closest to ``reference`` whose low 24 bits are ``psn24``."""
    delta = (psn24 - reference) % PSN_MOD
    return reference + delta if delta < HALF else reference + delta - PSN_MOD


class SenderFlow:
    __slots__ = ("next_psn", "unacked", "resend", "last_progress_ns", "retransmitted", "naks", "timeouts")

    def __init__(self):
        self.next_psn = 0
        self.unacked: deque[tuple[int, int, int]] = deque()   # (psn, msg, seq)
        self.resend: deque[tuple[int, int, int]] = deque()
        self.last_progress_ns = 0
        self.retransmitted = self.naks = self.timeouts = 0

    def sent_new(self, msg: int, seq: int, now_ns: int) -> int:
        psn = self.next_psn
        self.next_psn += 1
        if not self.unacked:
            self.last_progress_ns = now_ns
        self.unacked.append((psn, msg, seq))
        return psn

    def acked(self, psn24: int, now_ns: int) -> list[tuple[int, int, int]]:
        """Everything up to and including ``psn24`` is acknowledged; returns what that freed."""
        if not self.unacked:
            return []
        upto = unwrap(psn24, self.unacked[0][0])
        freed = []
        while self.unacked and self.unacked[0][0] <= upto:
            freed.append(self.unacked.popleft())
        if freed:
            self.last_progress_ns = now_ns
            while self.resend and self.resend[0][0] <= upto:
                self.resend.popleft()
        return freed

    def nacked(self, psn24: int, now_ns: int) -> list[tuple[int, int, int]]:
        """The receiver expects ``psn24``: everything before it arrived, resend from it on."""
        freed = self.acked((psn24 - 1) % PSN_MOD, now_ns) if self.unacked else []
        self.naks += 1
        if self.resend and self.resend[0][0] <= unwrap(psn24, self.resend[0][0]):
            return freed  # already going back over that PSN: a NAK from the old, in-flight packets
        self._go_back()
        return freed

    def timed_out(self, now_ns: int, rto_ns: int) -> bool:
        if self.unacked and not self.resend and now_ns - self.last_progress_ns > rto_ns:
            self.timeouts += 1
            self.last_progress_ns = now_ns
            self._go_back()
            return True
        return False

    def _go_back(self) -> None:
        self.resend = deque(self.unacked)
        self.retransmitted += len(self.resend)


class ReceiverFlow:
    __slots__ = ("expected", "since_ack", "nak_outstanding", "ack_every", "out_of_order", "duplicates")

    def __init__(self, ack_every: int):
        self.expected = 0
        self.since_ack = 0
        self.nak_outstanding = False
        self.ack_every = ack_every
        self.out_of_order = self.duplicates = 0

    def received(self, psn24: int, last_of_message: bool) -> tuple[bool, int | None, int]:
        """Returns (accepted, reply syndrome or None, PSN for the reply)."""
        psn = unwrap(psn24, self.expected)
        if psn == self.expected:
            self.expected += 1
            self.nak_outstanding = False
            self.since_ack += 1
            if last_of_message or self.since_ack >= self.ack_every:
                self.since_ack = 0
                return True, AETH_ACK, (self.expected - 1) % PSN_MOD
            return True, None, 0
        if psn > self.expected:
            self.out_of_order += 1
            if not self.nak_outstanding:
                self.nak_outstanding = True
                return False, AETH_NAK_SEQ, self.expected % PSN_MOD
            return False, None, 0
        self.duplicates += 1
        return False, AETH_ACK, (self.expected - 1) % PSN_MOD


# -- DCQCN ------------------------------------------------------------------------------------

# Rate-machine events, as recorded per queue pair (testbed.records.QP_EVENT kinds).
RATE_CUT, RATE_FAST_RECOVERY, RATE_ADDITIVE, RATE_HYPER = 6, 7, 8, 9


def dcqcn_params(spec: dict, link_bps: float) -> dict:
    """A [dcqcn] table, given for spec["ref_gbps"], as the engine runs it on a link of link_bps:
    every time multiplied and every rate divided by the dilation factor."""
    scale = spec["time_scale"] or spec["ref_gbps"] * 1e9 / link_bps

    def ns(us):
        return int(round(us * 1e3 * scale))

    def bps(mbps):
        return mbps * 1e6 / scale

    return {"time_scale": scale, "line_bps": link_bps,
            "cnp_interval_ns": ns(spec["cnp_interval_us"]),
            "alpha_interval_ns": max(1, ns(spec["alpha_interval_us"])),
            "rate_decrease_interval_ns": ns(spec["rate_decrease_interval_us"]),
            "rate_increase_timer_ns": max(1, ns(spec["rate_increase_timer_us"])),
            "byte_counter_bytes": spec["byte_counter_bytes"], "g": spec["g"],
            "fast_recovery_rounds": spec["fast_recovery_rounds"],
            "rai_bps": bps(spec["rai_mbps"]), "rhai_bps": bps(spec["rhai_mbps"]),
            "min_rate_bps": min(link_bps, bps(spec["min_rate_mbps"])),
            "rate_on_first_cnp": spec["rate_on_first_cnp"], "clamp_target_rate": spec["clamp_target_rate"]}


class Dcqcn:
    """DCQCN's reaction point (the sender side of one queue pair), as HPCC's rdma-hw.cc runs it.

    A CNP flags the next rate cut (at most one per rate-decrease interval) and the next alpha
    update. A cut sets the target rate Rt to the current rate Rc (unless no increase happened since
    the previous cut and clamping is off) and Rc = Rc (1 - alpha/2); it restarts the increase timer
    and the byte counter. Every alpha interval alpha = (1 - g) alpha, plus g if a CNP came in it.
    Each increase event (timer period T, or B bytes sent) moves Rc halfway to Rt: for the first F
    events after a cut as they are (fast recovery), at the F-th after raising Rt by R_AI (additive
    increase), after that by R_HAI (hyper increase); the stage is the further of the two counters,
    as in HPCC's timer-driven machine with the byte counter as a second clock. The machine
    starts at the first CNP and rests again once it is back at line rate; ``log`` collects
    (t_ns, kind, rate, target, alpha) of each rate change for the engine to record.
    """

    __slots__ = ("p", "line", "rate", "target", "alpha", "first", "running", "cnp_alpha", "cut_pending",
                 "last_cut_ns", "next_alpha_ns", "next_cut_ns", "next_increase_ns", "timer_stage",
                 "byte_stage", "bytes", "log", "cuts", "cnps")

    NEVER = 1 << 62

    def __init__(self, params: dict):
        self.p = params
        self.line = self.rate = self.target = params["line_bps"]
        self.alpha = 1.0
        self.first = True
        self.running = False
        self.cnp_alpha = self.cut_pending = False
        self.last_cut_ns = -self.NEVER
        self.next_alpha_ns = self.next_cut_ns = self.next_increase_ns = self.NEVER
        self.timer_stage = self.byte_stage = self.bytes = 0
        self.log: list[tuple[int, int, float, float, float]] = []
        self.cuts = self.cnps = 0

    def cnp(self, now: int) -> None:
        p = self.p
        self.cnps += 1
        if self.first:
            self.first = False
            self.alpha = 1.0
            self.target = self.rate = max(p["min_rate_bps"], self.rate * p["rate_on_first_cnp"])
            self.next_alpha_ns = now + p["alpha_interval_ns"]
        else:
            self.cnp_alpha = True
            if not self.running:
                # alpha kept decaying while the machine rested
                missed = max(0, (now - self.next_alpha_ns) // p["alpha_interval_ns"] + 1)
                self.alpha *= (1 - p["g"]) ** missed
                self.next_alpha_ns += missed * p["alpha_interval_ns"]
        self.running = True
        if not self.cut_pending:
            self.cut_pending = True
            self.next_cut_ns = max(now, self.last_cut_ns + p["rate_decrease_interval_ns"])
        self.advance(now)

    def advance(self, now: int) -> None:
        """Run every timer that fired up to ``now``, in time order."""
        p = self.p
        while self.running:
            t = min(self.next_alpha_ns, self.next_cut_ns, self.next_increase_ns)
            if t > now:
                return
            if t == self.next_cut_ns:
                self._cut(t)
            elif t == self.next_alpha_ns:
                self.alpha = (1 - p["g"]) * self.alpha + (p["g"] if self.cnp_alpha else 0.0)
                self.cnp_alpha = False
                self.next_alpha_ns = t + p["alpha_interval_ns"]
            else:
                self.timer_stage += 1
                self.next_increase_ns = t + p["rate_increase_timer_ns"]
                self._increase(t)

    def sent(self, nbytes: int, now: int) -> None:
        """The byte counter: one increase event per byte_counter_bytes sent since the last cut."""
        b = self.p["byte_counter_bytes"]
        if not (self.running and b):
            return
        self.bytes += nbytes
        if self.bytes >= b:
            self.bytes -= b
            self.byte_stage += 1
            self._increase(now)

    def _cut(self, t: int) -> None:
        p = self.p
        if p["clamp_target_rate"] or self.timer_stage or self.byte_stage:
            self.target = self.rate
        self.rate = max(p["min_rate_bps"], self.rate * (1 - self.alpha / 2))
        self.cut_pending = False
        self.next_cut_ns = self.NEVER
        self.last_cut_ns = t
        self.timer_stage = self.byte_stage = self.bytes = 0
        self.next_increase_ns = t + p["rate_increase_timer_ns"]
        self.cuts += 1
        self.log.append((t, RATE_CUT, self.rate, self.target, self.alpha))

    def _increase(self, t: int) -> None:
        p = self.p
        f = p["fast_recovery_rounds"]
        stage = max(self.timer_stage, self.byte_stage)
        if stage < f:
            kind = RATE_FAST_RECOVERY
        elif stage == f:
            kind = RATE_ADDITIVE
            self.target = min(self.line, self.target + p["rai_bps"])
        else:
            kind = RATE_HYPER
            self.target = min(self.line, self.target + p["rhai_bps"])
        self.rate = min(self.line, (self.rate + self.target) / 2)
        self.log.append((t, kind, self.rate, self.target, self.alpha))
        if self.rate >= self.line * (1 - 1e-9) and not self.cut_pending:
            # back at line rate: nothing left to recover; alpha's decay is caught up at the next CNP
            self.rate = self.target = self.line
            self.running = False
            self.next_increase_ns = self.NEVER
