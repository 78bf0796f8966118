from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP

from testbed.traffic.packets import (ECT0, HEADER_BYTES, ROCE_UDP_PORT, DataTemplate, PayloadStamp, dissect)


def template(**kw):
    args = dict(src_mac="02:00:00:00:00:00", dst_mac="02:00:00:00:01:00", src_ip="10.0.0.1",
                dst_ip="10.0.1.1", dscp=26, flow=3, payload_bytes=4096)
    args.update(kw)
    return DataTemplate(**args)


def test_patched_packet_is_valid_rocev2_with_correct_icrc():
    t = template()
    frame = bytes(t.fill(psn=0x123456, msg=7, seq=9, tx_ns=1234567890123))
    assert len(frame) == 4096 + HEADER_BYTES
    p = dissect(frame)
    assert p[UDP].dport == ROCE_UDP_PORT and p[IP].tos == (26 << 2) | ECT0
    assert p[BTH].psn == 0x123456 and p[BTH].dqpn == 0x100 + 3
    assert (p[PayloadStamp].msg, p[PayloadStamp].seq, p[PayloadStamp].tx_ns) == (7, 9, 1234567890123)
    # Scapy recomputes the ICRC from scratch when the field is left empty.
    fresh = p.copy()
    fresh[BTH].icrc = None
    assert dissect(bytes(fresh))[BTH].icrc == p[BTH].icrc


def test_short_payload_template():
    t = template(payload_bytes=100)
    p = dissect(bytes(t.fill(1, 2, 3, 4)))
    assert p[IP].len == 20 + 8 + 12 + 100 + 4
    fresh = p.copy()
    fresh[BTH].icrc = None
    assert dissect(bytes(fresh))[BTH].icrc == p[BTH].icrc


def test_cnp_is_a_rocev2_cnp_with_becn_for_the_senders_queue_pair():
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from testbed.traffic.packets import CNP, QPN_BASE, ROCE_UDP_PORT, CnpTemplate
    c = CnpTemplate(src_mac="02:00:00:00:00:02", dst_mac="02:00:00:00:00:01", src_ip="10.0.0.2",
                    dst_ip="10.0.0.1", dscp=48, flow=5)
    p = dissect(c.bytes)
    assert p[UDP].dport == ROCE_UDP_PORT and p[IP].tos == 48 << 2
    assert p[BTH].opcode == CNP == 0x81 and p[BTH].becn == 1 and p[BTH].dqpn == QPN_BASE + 5
    # the ICRC is the one Scapy computes for the same packet
    assert bytes(p) == c.bytes


def test_a_message_goes_out_as_send_first_middle_last_with_ackreq_on_the_last():
    from testbed.traffic.packets import (ACKREQ, RC_SEND_FIRST, RC_SEND_LAST, RC_SEND_MIDDLE, RC_SEND_ONLY,
                                         PSN_OFF, PSN_STRUCT, send_opcode)
    assert [send_opcode(s, 4) for s in range(4)] == [RC_SEND_FIRST, RC_SEND_MIDDLE, RC_SEND_MIDDLE, RC_SEND_LAST]
    assert [send_opcode(s, 2) for s in range(2)] == [RC_SEND_FIRST, RC_SEND_LAST]
    assert send_opcode(0, 1) == RC_SEND_ONLY
    for op, ackreq in ((RC_SEND_FIRST, 0), (RC_SEND_MIDDLE, 0), (RC_SEND_LAST, 1), (RC_SEND_ONLY, 1)):
        t = template(opcode=op)
        frame = bytes(t.fill(psn=9, msg=2, seq=1, tx_ns=5))
        p = dissect(frame)
        assert p[BTH].opcode == op and p[BTH].ackreq == ackreq and p[BTH].psn == 9
        assert p[PayloadStamp].msg == 2 and p[PayloadStamp].seq == 1
        assert (PSN_STRUCT.unpack_from(frame, PSN_OFF)[0] & ACKREQ) == (ACKREQ if ackreq else 0)
        # the sealed ICRC is the one Scapy computes for the same packet
        p[BTH].icrc = None
        assert bytes(p) == frame


def test_the_engine_heartbeat_record_reads_back_and_an_unknown_version_is_not_guessed(tmp_path):
    from testbed.records import HEARTBEAT, EngineProgress, read_engine_progress
    beat = tmp_path / "engine_heartbeat"
    assert read_engine_progress(beat) is None            # not written yet
    beat.write_bytes(b"")
    assert read_engine_progress(beat) is None            # created, no record yet
    beat.write_bytes(HEARTBEAT.pack(4, 3, 2, 10, 4096, 40960, 7, 1000, 9000))
    assert read_engine_progress(beat) == EngineProgress(3, 2, 10, 4096, 40960, started_ns=1000, beat_ns=9000)
    beat.write_bytes(HEARTBEAT.pack(3, 3, 2, 10, 4096, 40960, 7, 0, 0))   # before the times and compute streams
    assert read_engine_progress(beat) is None


def test_the_engine_is_alive_while_its_beat_count_goes_up_whatever_the_wall_clock_does(tmp_path):
    # a VM's CLOCK_REALTIME can step by seconds (2026-12-03: 1.5 s, then 12 s): a file's mtime is no
    # liveness signal; the record's beat count, watched on this process's monotonic clock, is
    import os
    import time
    from testbed.records import HEARTBEAT, HeartbeatWatch
    beat = tmp_path / "engine_heartbeat"
    watch = HeartbeatWatch(beat)
    assert watch.silent_s() is None                        # nothing written yet
    beat.write_bytes(HEARTBEAT.pack(4, 0, 0, 10, 0, 40960, 1, 0, 0))
    assert watch.silent_s() < 0.05
    os.utime(beat, (time.time() - 3600, time.time() - 3600))   # an mtime an hour old: no matter
    assert watch.silent_s() < 0.05
    time.sleep(0.2)
    assert watch.silent_s() >= 0.2                         # the same record: silent since
    beat.write_bytes(HEARTBEAT.pack(4, 0, 0, 10, 0, 40960, 2, 0, 0))   # no progress, but a beat
    assert watch.silent_s() < 0.05


def test_a_kernel_stamp_from_either_side_of_a_wall_clock_step_lands_where_it_happened():
    # the data plane converts the kernel's wall-clock stamps with a measured offset; a VM's wall
    # clock can step by seconds between two measurements: a stamp that converts outside the span
    # its event lies in takes the offset from the other side of the step (nicdp.c stamp_on_mono)
    from testbed.traffic.nic import lib
    S = 1_000_000_000
    lo, hi = 10 * S, 10 * S + 300_000          # read between 10 s and 10.0003 s, monotonic
    before, after = 5 * S, 5 * S + 3 * S // 2  # wall - monotonic, before and after a 1.5 s step
    f = lib().stamp_on_mono
    # stamped after the step, converted with the new offset: as it is
    assert f(10 * S + 100_000 + after, lo, hi, after, before) == 10 * S + 100_000
    # stamped before the step, read after it: the old offset puts it back in its span
    assert f(10 * S + 100_000 + before, lo, hi, after, before) == 10 * S + 100_000
    # no step: the one offset
    assert f(10 * S + 200_000 + before, lo, hi, before, before) == 10 * S + 200_000
    # fits neither: kept as the newest offset gives it (no guessing)
    assert f(20 * S + after, lo, hi, after, before) == 20 * S
