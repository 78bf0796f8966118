"""A copy go-back-N resent and still on its way when the traffic ended is not a loss, and nothing
else is excused with it (testbed.analysis.losses.resent_in_flight_at_end)."""
import pandas as pd

from testbed.analysis.losses import resent_in_flight_at_end

MS = 1_000_000


def packets(rows):
    df = pd.DataFrame(rows, columns=["msg", "seq", "retransmit", "tx_ns", "rx_ns"])
    df["rx_ns"] = df["rx_ns"].astype("Int64")
    df["latency_ns"] = df["rx_ns"] - df["tx_ns"]
    return df


def test_only_late_resent_copies_of_delivered_data_are_in_flight_at_the_end():
    end = 1000 * MS
    df = packets([
        (0, 0, False, 0, 300 * MS),          # delivered, 300 ms: the longest latency
        (0, 0, True, 900 * MS, None),        # its resent copy, 100 ms before the end: in flight
        (0, 1, True, 600 * MS, 800 * MS),    # a resent copy that arrived
        (0, 1, True, 950 * MS, None),        # and another still on its way: in flight
        (0, 2, False, 100 * MS, None),       # a first copy lost, its data never delivered: lost
        (0, 3, False, 50 * MS, 200 * MS),
        (0, 3, True, 500 * MS, None),        # resent 500 ms before the end, longer than any latency: lost
        (0, 4, True, 990 * MS, None),        # resent late, but its data never arrived at all: lost
    ])
    no_fault = pd.Series(False, index=df.index)
    assert resent_in_flight_at_end(df, end, no_fault) == 2
    # around a fault the loss is the fault's, not the end's
    fault = pd.Series([False, True] + [False] * 6, index=df.index)
    assert resent_in_flight_at_end(df, end, fault) == 1
    # nothing lost, or nothing received: nothing to excuse
    assert resent_in_flight_at_end(df[df["rx_ns"].notna()], end, no_fault[df["rx_ns"].notna()]) == 0


def test_a_failure_owns_what_was_on_its_way_when_it_came_and_nothing_older():
    # a link fails at 2 s; a packet sent before it took up to 1.5 s to arrive (queues behind
    # pauses, dilated), so what was sent from 0.5 s on and never arrived is the failure's; a loss
    # sent before that is not, nor one sent after the reroute (20 ms, plus 100 ms)
    from testbed.analysis.losses import fault_mask
    t = 2000 * MS
    df = packets([
        (0, 0, False, 100 * MS, 1600 * MS),     # delivered, 1.5 s on its way
        (0, 1, False, 400 * MS, None),          # lost 1.6 s before the failure: older than any flight
        (0, 2, False, 900 * MS, None),          # lost 1.1 s before it: in flight when it came
        (0, 3, False, 2050 * MS, None),         # lost during the reroute
        (0, 4, False, 2500 * MS, None),         # lost long after it
    ])
    mask = fault_mask(df, [{"action": "link_down", "t_ns": t, "reroute_ms": 20.0}])
    assert mask.tolist() == [False, False, True, True, False]
    # with nothing delivered before the failure the window is 50 ms
    mask = fault_mask(df.iloc[1:], [{"action": "link_down", "t_ns": t, "reroute_ms": 20.0}])
    assert mask.tolist() == [False, False, True, False]


def _icrc_events(seqs):
    """The receivers' ICRC drops of message 0's frames seqs, each 0.5 ms after the frame was sent."""
    return pd.DataFrame([{"t_ns": q * MS + MS // 2, "flow": 0, "value": (0 << 32) | q, "event": "icrc_dropped"}
                         for q in seqs])


def test_each_icrc_drop_names_the_latest_lost_transmission_of_its_frame_once():
    from testbed.analysis.losses import bit_error_losses
    # message 3's frame 5 sent three times, lost twice; message 3's frame 6 lost once
    pkts = packets([(3, 5, False, 1 * MS, None), (3, 5, True, 4 * MS, None), (3, 5, True, 9 * MS, 10 * MS),
                    (3, 6, False, 2 * MS, None)]).assign(flow=1)
    ev = pd.DataFrame([{"t_ns": 5 * MS, "flow": 1, "value": (3 << 32) | 5, "event": "icrc_dropped"},
                       {"t_ns": 2 * MS, "flow": 1, "value": (3 << 32) | 5, "event": "icrc_dropped"},
                       {"t_ns": 3 * MS, "flow": 1, "value": (3 << 32) | 6, "event": "icrc_dropped"},
                       {"t_ns": 3 * MS, "flow": 2, "value": (3 << 32) | 6, "event": "icrc_dropped"},   # another qp
                       {"t_ns": 3 * MS, "flow": 1, "value": 0, "event": "cnp_sent"}])
    assert bit_error_losses(pkts, ev) == 3
    # two drops of the same frame before its first resend name one transmission
    assert bit_error_losses(pkts, pd.concat([ev.iloc[[1]], ev.iloc[[1]]])) == 1
    assert bit_error_losses(pkts, None) == 0 and bit_error_losses(pkts, ev.iloc[[4]]) == 0


def _inputs(tmp_path, icrc_errors, corrupted):
    """A run of 10 data packets of which the last 3 never arrived, and the receivers' ICRC drops and
    the switch ports' bit-error counts given; nothing else dropped anything."""
    from testbed.analysis.tables import RunInputs, Tables
    from testbed.runfolder import RunFolder
    pkts = packets([(0, i, False, i * MS, (i * MS + MS) if i < 7 else None) for i in range(10)]).assign(flow=0)
    engine = {"hosts": [{"socket_drops": 0, "icrc_errors": icrc_errors}], "reason": "complete", "messages": 1,
              "messages_completed": 1, "end_ns": 100 * MS, "transport": {"reliability": "go_back_n"}}
    inp = RunInputs(folder=RunFolder(tmp_path), manifest={}, scenario={}, engine=engine, plan={},
                    fabric={"switches": [{"name": "s0"}]}, queues_end=[], links_moved={}, ovs_socket_drops=0,
                    corrupted=corrupted)
    t = Tables(messages=pd.DataFrame(), packets=pkts, iterations=pd.DataFrame(), telemetry=None,
               pfc_events=pd.DataFrame(), bound_formula="", bound_terms=None)
    return inp, t


def test_frames_a_corrupt_fault_damaged_are_lost_to_the_receivers_icrc_check(tmp_path):
    from testbed.analysis.losses import account
    inp, t = _inputs(tmp_path, icrc_errors=3, corrupted={"s0-eth1": 2, "s0-eth2": 1})
    acc = account(inp, t, [], 0, _icrc_events([7, 8, 9]))
    assert (acc.lost, acc.icrc_drops, acc.corrupted_frames, acc.unaccounted) == (3, 3, 3, 0)
    assert acc.lost_to_bit_errors == 3 and acc.lost_inside_emulator == 0 and acc.problems == ()
    # a drop naming a frame that arrived names no loss: the account says so
    acc = account(inp, t, [], 0, _icrc_events([6, 8, 9]))
    assert acc.lost_to_bit_errors == 2 and any("2 of them name a lost transmission" in p for p in acc.problems)


def test_icrc_drops_no_fault_explains_are_a_problem_and_losses_without_them_unaccounted(tmp_path):
    from testbed.analysis.losses import account
    acc = account(*_inputs(tmp_path, icrc_errors=3, corrupted={}), [], 0)
    assert any("no fault damaged" in p for p in acc.problems)
    acc = account(*_inputs(tmp_path, icrc_errors=0, corrupted={"s0-eth1": 3}), [], 0)
    assert acc.unaccounted == 3 and any("not accounted for" in p for p in acc.problems)
