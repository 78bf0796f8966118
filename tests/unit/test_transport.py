import random

import pytest

"""Go-back-N as the data plane runs it: nicdp.c's state machines, driven through testbed.traffic.nic."""
from testbed.traffic.nic import AETH_ACK, AETH_NAK_SEQ, PSN_MOD, Receiver, Sender, unwrap


def test_unwrap_handles_24_bit_wraparound():
    assert unwrap(5, PSN_MOD - 3) == PSN_MOD + 5
    assert unwrap(PSN_MOD - 1, PSN_MOD + 2) == PSN_MOD - 1
    assert unwrap(7, 7) == 7


def run_link(n_packets, loss, seed, ack_every=4, rto_ns=1000, start_psn=0):
    """Drive a sender and a receiver over a lossy in-order link until everything is delivered."""
    rng = random.Random(seed)
    tx, rx = Sender(start_psn), Receiver(ack_every, start_psn)
    delivered, now, new = [], 0, 0
    for _ in range(100_000):
        now += 10
        psn = tx.next_resend()
        if psn is not None:
            seq = psn - start_psn
        elif new < n_packets:
            psn, seq = tx.sent_new(now), new
            new += 1
        else:
            if not tx.outstanding:
                break
            tx.timed_out(now, rto_ns)
            continue
        if rng.random() < loss:
            continue
        accepted, reply, rpsn = rx.received(psn % PSN_MOD, seq == n_packets - 1)
        if accepted:
            delivered.append(seq)
        if reply is not None and rng.random() >= loss:
            (tx.acked if reply == AETH_ACK else tx.nacked)(rpsn, now)
    return tx, rx, delivered


@pytest.mark.parametrize("loss", [0.0, 0.01, 0.1, 0.3])
@pytest.mark.parametrize("seed", range(5))
def test_every_packet_delivered_once_in_order_despite_loss(loss, seed):
    tx, rx, delivered = run_link(500, loss, seed)
    assert delivered == list(range(500))
    assert not tx.outstanding
    if loss == 0:
        assert tx.retransmitted == 0 and rx.out_of_order == 0


def test_works_across_the_psn_wraparound():
    tx, rx, delivered = run_link(300, 0.05, 1, start_psn=PSN_MOD - 100)
    assert delivered == list(range(300)) and not tx.outstanding


def test_one_nak_per_gap_then_go_back():
    tx, rx = Sender(), Receiver(ack_every=100)
    for _ in range(5):
        tx.sent_new(0)
    assert rx.received(0, False) == (True, None, 0)
    assert rx.received(2, False) == (False, AETH_NAK_SEQ, 1)   # 1 was lost
    assert rx.received(3, False) == (False, None, 0)            # no NAK storm
    tx.nacked(1, 5)
    assert tx.to_resend == [1, 2, 3, 4] and tx.outstanding == [1, 2, 3, 4]
    tx.nacked(1, 6)                                             # the same NAK again: no second go-back
    assert tx.retransmitted == 4
    assert rx.received(1, False) == (True, None, 0)
    assert rx.received(1, False) == (False, AETH_ACK, 1)        # duplicate: re-ACK


def test_a_gap_is_nak_ed_again_after_the_interval_as_hpcc_does():
    # HPCC's receiver (rdma-hw.cc, m_nack_interval): a frame past the gap that arrives an interval
    # after the last NAK NAKs it again, so a lost NAK (or a lost resend) costs the interval, not
    # the sender's RTO; before the interval, no NAK storm
    rx = Receiver(ack_every=100, nak_interval_ns=500)
    assert rx.received(0, False, 0) == (True, None, 0)
    assert rx.received(2, False, 10) == (False, AETH_NAK_SEQ, 1)     # 1 lost; this NAK is lost too
    assert rx.received(3, False, 400) == (False, None, 0)            # within the interval
    assert rx.received(4, False, 510) == (False, AETH_NAK_SEQ, 1)    # an interval on: NAKed again
    assert rx.received(5, False, 600) == (False, None, 0)
    # the sender takes the second NAK, resends from 1, and the gap closes
    tx = Sender()
    for _ in range(6):
        tx.sent_new(0)
    tx.nacked(1, 520)
    assert tx.to_resend == [1, 2, 3, 4, 5]
    assert rx.received(1, False, 700) == (True, None, 0)
    # its resend lost as well: the frames after it past the interval NAK again, and the sender,
    # done going back over 1, goes back once more
    tx2, rx2 = Sender(), Receiver(ack_every=100, nak_interval_ns=500)
    for _ in range(4):
        tx2.sent_new(0)
    assert rx2.received(0, False, 0)[0]
    assert rx2.received(2, False, 10)[1] == AETH_NAK_SEQ
    tx2.nacked(1, 20)
    while tx2.next_resend() is not None:                             # 1, 2, 3 resent; 1 lost again
        pass
    assert rx2.received(2, False, 600) == (False, AETH_NAK_SEQ, 1)
    tx2.nacked(1, 610)
    assert tx2.to_resend == [1, 2, 3] and tx2.retransmitted == 6
    # with no interval: one NAK per gap, however long it lasts
    once = Receiver(ack_every=100)
    assert once.received(1, False, 0)[1] == AETH_NAK_SEQ
    assert once.received(2, False, 10**9) == (False, None, 0)


def test_timeout_goes_back_to_the_oldest_unacked():
    tx = Sender()
    for _ in range(3):
        tx.sent_new(0)
    assert not tx.timed_out(50, 100)
    assert tx.timed_out(101, 100)
    assert tx.to_resend == [0, 1, 2] and tx.timeouts == 1
    assert not tx.timed_out(1000, 100)                          # going back already: no second timeout
