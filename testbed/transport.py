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
