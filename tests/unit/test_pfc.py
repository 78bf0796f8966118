"""PFC's decisions apart from the switch agent's I/O (testbed.fabric.pfc): XOFF/XON hysteresis per row, a
leaf paused by the first row that asks and resumed by the last, a policy that ends a row's
losslessness, the watchdog, and the agent's stop."""
import numpy as np

from testbed.fabric.pfc import Pause, PfcState, Restored, Resume

KB = 1000


def state(feeders, xoff=100 * KB, xon=50 * KB, rows=4):
    st = PfcState(rows)
    st.feeders = feeders
    st.set_thresholds(np.full(rows, xoff, np.uint64), np.full(rows, xon, np.uint64))
    return st


def look(st, *held, cross=7):
    return st.look(np.array(held, np.int64), np.full(len(held), cross, np.uint64))


def test_a_row_pauses_at_xoff_and_resumes_below_xon_not_between():
    st = state({0: [10]})
    assert look(st, 99 * KB, 0, 0, 0) == []
    assert look(st, 100 * KB, 0, 0, 0) == [Pause(10, 0, 7)]
    assert look(st, 150 * KB, 0, 0, 0) == []      # already paused: no second pause
    assert look(st, 60 * KB, 0, 0, 0) == []       # between XON and XOFF: stays paused
    assert look(st, 49 * KB, 0, 0, 0) == [Resume(10, 0, "xon")]
    assert st.causes == {} and not st.asserted.any()


def test_a_leaf_two_rows_pause_is_resumed_by_the_last_of_them():
    st = state({0: [10], 1: [10, 11]})
    assert look(st, 100 * KB, 0, 0, 0) == [Pause(10, 0, 7)]
    assert look(st, 100 * KB, 100 * KB, 0, 0) == [Pause(11, 1, 7)]   # 10 is paused already
    assert look(st, 0, 100 * KB, 0, 0) == []                          # row 1 still holds 10
    assert look(st, 0, 0, 0, 0) == [Resume(10, 1, "xon"), Resume(11, 1, "xon")]


def test_a_row_that_is_no_longer_lossless_releases_its_feeders():
    st = state({0: [10], 2: [12]})
    look(st, 100 * KB, 0, 100 * KB, 0)
    xoff = np.array([0, 100 * KB, 100 * KB, 100 * KB], np.uint64)
    assert st.set_thresholds(xoff, np.full(4, 50 * KB, np.uint64)) == [Resume(10, 0, "policy")]
    assert set(st.causes) == {12}
    assert look(st, 500 * KB, 0, 100 * KB, 0) == []  # row 0 asks for nothing now


def test_the_watchdog_ignores_a_rows_pauses_until_it_drains_below_xon():
    st = state({0: [10, 11]})
    look(st, 100 * KB, 0, 0, 0)
    assert st.watchdog(10) == [Resume(10, 0, "watchdog"), Resume(11, 0, "watchdog")]
    assert look(st, 200 * KB, 0, 0, 0) == []        # ignored: no pause however full
    assert look(st, 40 * KB, 0, 0, 0) == [Restored(0)]
    assert look(st, 100 * KB, 0, 0, 0) == [Pause(10, 0, 7), Pause(11, 0, 7)]


def test_stopping_resumes_everything_once():
    st = state({0: [10], 1: [10, 11], 3: [13]})
    look(st, 100 * KB, 100 * KB, 0, 100 * KB)
    out = st.release_all("agent_stop")
    assert sorted(r.leaf for r in out) == [10, 11, 13] and all(r.reason == "agent_stop" for r in out)
    assert st.causes == {} and st.release_all("agent_stop") == []


def test_a_rows_crossing_stamp_is_rearmed_only_once_it_is_back_below_xon_and_released():
    # the data path stamps the first crossing of a cleared row, so clearing decides where a
    # pause's reaction time counts from
    st = state({0: [10], 1: [11]}, rows=3)
    held = lambda *h: np.array(h, np.int64)
    stamped = np.array([5, 5, 5], np.uint64)
    # row 0 between XON and XOFF (may have crossed and dipped back): kept; rows 1 and 2 below XON
    assert st.rearm(held(60 * KB, 10 * KB, 10 * KB), stamped, 100).tolist() == [False, True, True]
    look(st, 100 * KB, 0, 0)
    assert st.rearm(held(10 * KB, 0, 0), stamped, 100).tolist() == [False, True, True]   # asserted: its pause stands
    look(st, 10 * KB, 0, 0)                                                               # released at XON
    assert st.rearm(held(10 * KB, 0, 0), stamped, 100).tolist() == [True, True, True]
    # nothing to clear where nothing was stamped, nor a stamp newer than the reading: the row
    # crossed XOFF while the agent was carrying out the look's pauses
    assert st.rearm(held(0, 0, 0), np.array([0, 100, 150], np.uint64), 100).tolist() == [False, False, False]
    st.set_thresholds(np.zeros(3, np.uint64), np.zeros(3, np.uint64))                   # nothing lossless
    assert not st.rearm(held(0, 0, 0), stamped, 100).any()


def test_the_wait_for_graph_finds_a_ring_of_paused_queues_and_not_a_chain():
    # three switches in a ring: switch i's egress row i feeds switch i+1, whose ingress row 10+i
    # holds those bytes and pauses leaf i (row i's own leaf); host NIC leaf 9 is paused by row 10
    from testbed.fabric.pfc import waiting_queues
    from testbed.fabric.qos import find_cycle
    leaf_queue = {0: 0, 1: 1, 2: 2}             # a switch leaf's own egress queue; leaf 9 (a NIC) has none
    switch_of = {0: 0, 1: 1, 2: 2, 10: 1, 11: 2, 12: 0}
    egress = {s: [s] for s in range(3)}
    depth = np.array([5000, 5000, 5000] + [0] * 10)
    causes = {0: {10}, 1: {11}, 2: {12}, 9: {10}}
    waits = waiting_queues(causes, leaf_queue, depth, "ingress", lambda row: egress[switch_of[row]])
    assert waits == {0: {1}, 1: {2}, 2: {0}}
    assert sorted(find_cycle(waits)) == [0, 1, 2]
    # an empty queue in the ring waits on nothing and breaks it
    depth[1] = 0
    waits = waiting_queues(causes, leaf_queue, depth, "ingress", lambda row: egress[switch_of[row]])
    assert not find_cycle(waits)
    # under the egress rule a paused queue waits on the rows that paused it, themselves egress queues
    waits = waiting_queues({0: {1}, 1: {0}}, leaf_queue, np.array([1, 1, 0]), "egress", None)
    assert waits == {0: {1}, 1: {0}} and sorted(find_cycle(waits)) == [0, 1]
