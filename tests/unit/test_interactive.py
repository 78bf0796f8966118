"""The report's time series (testbed.analysis.plotdata) and the zoomable page drawn from them
(testbed.analysis.interactive), on a synthetic run folder at D = 1000 whose answers are worked out
by hand in hardware microseconds since the traffic's start."""
import json

import numpy as np
import pandas as pd
import pytest

from testbed.analysis import plotdata
from testbed.analysis.interactive import layout, write_interactive
from testbed.runfolder import RunFolder

T0 = 50_000_000_000
D = 1000.0
US = int(D * 1000)   # one hardware microsecond, in emulated nanoseconds
END = T0 + 100 * US
SUMMARY = {"scenario": "s", "status": "ok", "run_id": "s-1"}


@pytest.fixture
def folder(tmp_path):
    """h0 sends h1 one message (1 to 21 us) and computes (5 to 15 us); s0-eth1's class 3 queue fills
    to 8 KB at 10 us and empties at 30 us, and is paused from 40 to 45 us; queue pair 0's rate is cut
    from 100 to 40 Gb/s at 12 us after a CNP at 11 us."""
    rf = RunFolder(tmp_path)
    rf.raw.mkdir()
    rf.engine_stats.write_text(json.dumps({"start_ns": T0, "end_ns": END}))
    rf.fabric.write_text(json.dumps({"links": [{"a": "s0", "a_port": 1, "b": "s1", "b_port": 1},
                                               {"a": "s0", "a_port": 2, "b": "h0", "b_port": 0}]}))
    pd.DataFrame([
        {"msg": 0, "iteration": 0, "src": "h0", "dst": "h1", "bytes": 4096, "op": "reduce",
         "release_ns": T0, "first_tx_ns": T0 + 1 * US, "complete_ns": T0 + 21 * US},
        {"msg": 1, "iteration": 0, "src": "h0", "dst": "h0", "bytes": 0, "op": "compute",
         "release_ns": T0 + 5 * US, "first_tx_ns": pd.NA, "complete_ns": T0 + 15 * US},
    ]).astype({c: "Int64" for c in ("release_ns", "first_tx_ns", "complete_ns")}).to_parquet(rf.table("messages"))
    # telemetry rows only where a queue changed, the first before the traffic
    tel = [(T0 - 5 * US, 0), (T0 + 10 * US, 8000), (T0 + 20 * US, 8000), (T0 + 30 * US, 0), (T0 + 40 * US, 0)]
    pd.DataFrame([{"t_ns": t, "queue": 3, "depth_bytes": d, "deq_bytes": 0, "node": "s0", "port": "s0-eth1",
                   "class": 3, "class_name": "roce"} for t, d in tel]).to_parquet(rf.table("queues"))
    rf.pfc_events.write_text("\n".join(json.dumps(e) for e in [
        {"t_ns": T0 + 40 * US, "event": "pause", "node": "s0", "port": "s0-eth1", "class": 3, "cause": "s0-eth2"},
        {"t_ns": T0 + 45 * US, "event": "resume", "node": "s0", "port": "s0-eth1", "class": 3, "reason": "xon"},
    ]) + "\n")
    pd.DataFrame([{"t_ns": T0 + 11 * US, "flow": 0, "rate_bps": 0.0, "event": "cnp_received"},
                  {"t_ns": T0 + 12 * US, "flow": 0, "rate_bps": 40e9 / D, "event": "rate_cut"}]
                 ).to_parquet(rf.table("qp_events"))
    pd.DataFrame([{"port": "s0-eth1", "t_ms": t, "bytes": b, "utilisation": u}
                  for t, b, u in ((0.0, 100.0, 0.5), (0.05, 200.0, 1.0))]).to_parquet(rf.table("link_utilisation"))
    return rf


def test_changes_only_keeps_the_same_steps():
    rng = np.random.default_rng(7)
    t = np.cumsum(rng.integers(1, 5, 400)).astype(float)
    y = rng.integers(0, 3, 400).astype(float)   # mostly repeats
    ct, cy = plotdata.changes_only(t, y)
    assert len(ct) < len(t) and ct[-1] == t[-1]
    # the step function's value at every original sample is unchanged
    assert np.array_equal(cy[np.searchsorted(ct, t, side="right") - 1], y)


def test_the_series_are_in_hardware_microseconds_since_the_traffic_start(folder):
    (q,) = plotdata.queue_steps(folder, T0, END, D)
    assert q.label == "s0→s1 roce"
    # the 20 us sample repeats 8 KB and goes; the traffic phase starts at 10 us's change
    assert list(q.t_us) == [10.0, 30.0, 40.0] and list(q.y) == [8.0, 0.0, 0.0]
    bars = plotdata.message_bars(folder, T0, D).set_index("op")
    assert bars.loc["reduce", "start_us"] == 1.0 and bars.loc["reduce", "dur_us"] == 20.0
    # a compute step has no first frame: it runs from its release
    assert bars.loc["compute", "start_us"] == 5.0 and bool(bars.loc["compute", "compute"])
    p = plotdata.pause_bars(folder, T0, END, D)
    assert p.labels == ["s0→s1 class 3"] and p.pauses == 1
    assert p.bars.iloc[0][["start_us", "dur_us", "cause", "ended_by"]].tolist() == [40.0, 5.0, "s0→h0", "xon"]
    d = plotdata.dcqcn_steps(folder, T0, END, D)
    assert d.cuts == 1 and list(d.rates[0].t_us) == [12.0, 100.0] and list(d.rates[0].y) == [40.0, 40.0]
    assert list(d.cnps[0]) == [11.0]
    u = plotdata.utilisation_grid(folder, D)
    assert u.labels == ["s0→s1"] and u.bin_us == pytest.approx(0.05) and u.grid.tolist() == [[0.5, 1.0]]


def test_a_queue_that_stayed_empty_is_left_out_unless_all_did(folder):
    tel = pd.read_parquet(folder.table("queues"))
    idle = tel.assign(queue=4, depth_bytes=0, class_name="bulk")
    pd.concat([tel, idle]).to_parquet(folder.table("queues"))
    assert [q.label for q in plotdata.queue_steps(folder, T0, END, D)] == ["s0→s1 roce"]
    idle.to_parquet(folder.table("queues"))
    (q,) = plotdata.queue_steps(folder, T0, END, D)
    assert q.label == "s0→s1 bulk" and q.y.max() == 0


def test_every_plot_follows_one_time_axis_and_the_bars_name_their_message_or_pause(folder):
    from bokeh.models import HoverTool, Range1d
    from bokeh.plotting import figure
    page = layout(folder, SUMMARY, T0, END, D)
    figs = [c for c in page.children if isinstance(c, figure)]
    titles = [f.title.text for f in figs]
    assert [t.split(",")[0].split(" (")[0] for t in titles] == [
        "messages per sending rank", "queue depth per class", "PFC pauses per paused port and class",
        "DCQCN rate per queue pair", "CNPs each of those queue pairs received", "link utilisation"]
    x = figs[0].x_range
    assert isinstance(x, Range1d) and (x.start, x.end) == (0, 100.0)
    assert all(f.x_range is x for f in figs)
    hover = {f.title.text.split(",")[0]: [tt for h in f.select(HoverTool) for tt in h.tooltips] for f in figs}
    assert ("", "@src → @dst, @op") in hover["messages per sending rank"]
    assert ("cause", "@cause") in hover["PFC pauses per paused port and class (1 pauses; rows in order of first pause)"]


def test_the_page_opens_offline_and_is_removed_when_nothing_is_left_to_show(folder, tmp_path):
    out = write_interactive(folder, SUMMARY, T0, END, D)
    page = out.read_text()
    assert out.name == "interactive.html" and "Bokeh" in page
    # bokeh's JavaScript is inlined: no script fetched from anywhere
    assert "<script src=" not in page.replace("<script src=\"data:", "")
    assert json.dumps("s0→s1 class 3")[1:-1] in page   # the document's JSON, as bokeh escapes it
    for name in ("messages", "queues", "qp_events", "link_utilisation"):
        folder.table(name).unlink()
    folder.pfc_events.write_text("")
    assert write_interactive(folder, SUMMARY, T0, END, D) is None and not out.exists()
