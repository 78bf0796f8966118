"""The host side of the fidelity verdict, and the host NICs' queues.

A real NIC with frames to send keeps its link busy. The emulated one is the kernel's shaper fed
by the data plane's lead, and its link can idle with work waiting in three ways:
- the lead ran dry: the data plane was kept off the CPU longer than the lead lasts, so frames it
  had to send were not handed over (raw/nic_gaps.bin, kind 0, with its exact span);
- frames were waiting in the NIC (handed over, their tx_ns, and not yet left) yet the link sent
  less than its rate allows: the kernel's shaper ran late (found from the records' exact
  departures);
- a queue pair that DCQCN holds below line rate builds no lead; when the data plane sent it later
  than its rate allows, that QP fell behind (kind 1, with its span).
Each is a time the link idled with work waiting, and each is known exactly: the data plane
records its gaps' spans (a class's gap counts only while the NIC neither held nor sent a frame of
another class), and a late shaper is what the NIC sent short of a perfect NIC at line rate given
the same frames at the same handoff times.

They are judged by the switch links' rule (testbed/analysis/links.py) on the host's busy time: 1 ms
intervals in which its NIC sent a frame, held one, or idled with work waiting, and was not paused
by PFC, cut into windows of max(1 ms, 20 frame times) of busy time: a window may take several busy
spans in a row, since a NIC with no work is not judged and a workload whose messages each wait their
path's latency keeps its NIC busy in spans shorter than a window (testbed.analysis.hosts.busy_windows). A window passes when its link idled with
work waiting for at most the tolerance of it plus one frame time (a switch port's allowance, so
both ends of a wire are judged alike), and sent no more than its rate allows within the tolerance,
plus one frame and the NIC shaper's configured burst (fabric.nic_burst_frames, what it may send
back to back after idling). A host passes when its windows pass in at least the minimum share and,
over all of them and without the per-window frame, it idled within the tolerance: a shaper steadily
a little slow passes each window but not this. A host busy for less than one window is not judged.
Times are exact, so a 50 us dry spell costs 50 us, not a whole 1 ms interval (the rule before).

The NIC queue of each host class is known exactly from the records: a frame is in it from its
handoff (tx_ns) to its departure (depart_ns).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from testbed import records
from testbed.analysis.links import MIN_WINDOWS, window_ns
from testbed.runfolder import RunFolder

INTERVAL_NS = 1_000_000
# As many windows as a link needs (at a 99% share, fewer than 100 must all pass): one busy window
# judged no more of a run than it covered, yet validated all of it.
HOST_MIN_WINDOWS = MIN_WINDOWS


def _sender_of(pkts: pd.DataFrame, plan: dict) -> pd.Series:
    """The sending host of each packet, by its flow."""
    return pkts["flow"].map({f["id"]: f["src"] for f in plan["flows"]})


def _read_gaps(rf: RunFolder) -> np.ndarray:
    path = rf.nic_gaps
    return records.read(path, records.NIC_GAP) if path.exists() else np.zeros(0, records.NIC_GAP)


def _merged(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """Spans as sorted, disjoint [start, end) pairs (overlaps joined)."""
    st, en = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    keep = en > st
    st, en = st[keep], en[keep]
    if not len(st):
        return st, en
    order = np.argsort(st, kind="stable")
    st, en = st[order], np.maximum.accumulate(en[order])
    new = np.concatenate([[True], st[1:] > en[:-1]])
    last = np.concatenate([np.flatnonzero(new)[1:] - 1, [len(st) - 1]])
    return st[new], en[last]


def _inside(t: np.ndarray, spans: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    st, en = spans
    k = np.searchsorted(st, t, side="right") - 1
    return (k >= 0) & (t < en[np.maximum(k, 0)]) if len(st) else np.zeros(len(t), dtype=bool)


def span_ns_per_interval(starts, ends, t0: int, b0: int, n: int, minus=None) -> np.ndarray:
    """How many ns of the spans fall in each of the n intervals from b0, less what the spans
    `minus` (starts, ends) cover; overlapping spans count once."""
    out = np.zeros(n, dtype="float64")
    spans = _merged(starts, ends)
    if not len(spans[0]) or n <= 0:
        return out
    cut = _merged(*minus) if minus is not None else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    lo, hi = t0 + b0 * INTERVAL_NS, t0 + (b0 + n) * INTERVAL_NS
    pts = np.unique(np.concatenate([spans[0], spans[1], cut[0], cut[1],
                                    t0 + (b0 + np.arange(n + 1, dtype=np.int64)) * INTERVAL_NS]))
    pts = pts[(pts >= lo) & (pts <= hi)]
    mid = pts[:-1] + (pts[1:] - pts[:-1]) // 2
    take = _inside(mid, spans) & ~_inside(mid, cut)
    bins = (pts[:-1] - t0) // INTERVAL_NS - b0
    return np.bincount(bins[take], weights=(pts[1:] - pts[:-1])[take], minlength=n).astype("float64")[:n]


def covered_intervals(starts: np.ndarray, ends: np.ndarray, t0: int) -> tuple[int, np.ndarray]:
    """The first 1 ms interval any span touches, and from it a flag per interval: touched by a
    span or not (a span [s, e) touches every interval from s's to that of e - 1 ns)."""
    if not len(starts):
        return 0, np.zeros(0, dtype=bool)
    first = (starts - t0) // INTERVAL_NS
    last = (np.maximum(ends, starts + 1) - 1 - t0) // INTERVAL_NS
    b0 = int(first.min())
    mark = np.zeros(int(last.max()) - b0 + 2, dtype=np.int64)
    np.add.at(mark, first - b0, 1)
    np.add.at(mark, last - b0 + 1, -1)
    return b0, np.cumsum(mark)[:-1] > 0


def ideal_departed(a: int, b: int, queued_at_a: float, tx_in: np.ndarray, size_in: np.ndarray,
                   rate_bytes_ns: float) -> float:
    """Bytes a work-conserving NIC at its line rate would send in (a, b], holding queued_at_a
    bytes at a and handed the frames tx_in (sorted, in (a, b]) of size_in: the least, over the
    times it could have started a busy period, of the work it had by then plus the rate for the
    rest (the output of a rate-R server is min over s of arrivals by s plus R(b - s))."""
    handed_before = queued_at_a + np.concatenate([[0.0], np.cumsum(size_in)[:-1]])
    terms = handed_before + rate_bytes_ns * (b - tx_in)
    return float(min(rate_bytes_ns * (b - a), queued_at_a + size_in.sum(), terms.min() if len(terms) else np.inf))


def busy_windows(t_ns: np.ndarray, judged: np.ndarray, span_ns: float) -> list[list[tuple[int, int]]]:
    """Windows of at least span_ns of busy time, each a list of (first, last) sample indices of
    the busy spans it takes in order: a span long enough makes windows of its own, back to back;
    what is left of it joins the next span's (a host with no work is not judged, and a workload
    whose every message waits its path's latency is busy in spans shorter than a window); what is
    left at the end is not judged."""
    out, current, have = [], [], 0.0
    edges = np.flatnonzero(np.diff(np.concatenate([[0], judged.astype(np.int8), [0]])))
    for run_start, run_end in zip(edges[::2], edges[1::2]):   # intervals run_start .. run_end-1
        i = int(run_start)
        while i < run_end:
            j = int(np.searchsorted(t_ns, t_ns[i] + (span_ns - have), side="left"))
            if j > run_end:
                current.append((i, int(run_end)))
                have += float(t_ns[run_end] - t_ns[i])
                break
            current.append((i, j))
            out.append(current)
            current, have = [], 0.0
            i = j
    return out


def judge_host(mine: pd.DataFrame, dry: np.ndarray, behind: np.ndarray, paused_spans: list[tuple[int, int]],
               bw_bps: float, frame_bytes: int, burst_bytes: int, start_ns: int, tolerance: float,
               min_share: float) -> dict:
    """One sending host's windows of busy time and how many idled with work waiting within the
    tolerance."""
    left = mine[mine["depart_ns"].notna() & (mine["depart_ns"] >= 0)]
    dep = left["depart_ns"].to_numpy(dtype="int64")
    tx = left["tx_ns"].to_numpy(dtype="int64")
    size = left["bytes"].to_numpy(dtype="float64")
    byte_ns = 8e9 / bw_bps                          # ns a byte takes on the wire
    waiting = (tx, dep)                             # each frame in the NIC: handed over, not yet left
    wire = (dep, dep + (size * byte_ns).astype("int64"))
    spans = [waiting, wire, (dry["start_ns"], dry["end_ns"]), (behind["start_ns"], behind["end_ns"])]
    b0, busy = covered_intervals(np.concatenate([np.asarray(a, np.int64) for a, _ in spans]),
                                 np.concatenate([np.asarray(e, np.int64) for _, e in spans]), start_ns)
    n = len(busy)
    if not n:
        return {}
    paused = span_ns_per_interval(np.array([a for a, _ in paused_spans], np.int64),
                                  np.array([b for _, b in paused_spans], np.int64), start_ns, b0, n) > 0
    judged = busy & ~paused
    # a gap the data plane recorded idles the wire only while the NIC held nothing and sent
    # nothing (a class's gap while another class sends is no idle); while it held frames an
    # idle wire is the shaper's lateness, found from the departures below
    held = _merged(np.concatenate([waiting[0], wire[0]]), np.concatenate([waiting[1], wire[1]]))
    gap_ns = span_ns_per_interval(np.concatenate([dry["start_ns"], behind["start_ns"]]),
                                  np.concatenate([dry["end_ns"], behind["end_ns"]]), start_ns, b0, n, held)
    dry_ns = span_ns_per_interval(dry["start_ns"], dry["end_ns"], start_ns, b0, n, held)
    behind_ns = span_ns_per_interval(behind["start_ns"], behind["end_ns"], start_ns, b0, n, held)
    t_ns = start_ns + (b0 + np.arange(n + 1, dtype="int64")) * INTERVAL_NS
    span = window_ns(bw_bps, frame_bytes)
    win = busy_windows(t_ns, judged, span)
    c_gap = np.concatenate([[0.0], np.cumsum(np.where(judged, gap_ns, 0.0))])
    o_tx, o_dep = np.argsort(tx, kind="stable"), np.argsort(dep, kind="stable")
    tx_s, size_tx = tx[o_tx], size[o_tx]
    dep_s, end_s = dep[o_dep], wire[1][o_dep]
    c_tx = np.concatenate([[0.0], np.cumsum(size_tx)])
    c_dep = np.concatenate([[0.0], np.cumsum(size[o_dep])])
    rate = 1 / byte_ns
    longest = int(size.max() * byte_ns) + 1 if len(size) else 0
    ideal, sent = np.zeros(len(win)), np.zeros(len(win))
    length, gap = np.zeros(len(win)), np.zeros(len(win))
    for k, segments in enumerate(win):
        for i, j in segments:
            a, b = int(t_ns[i]), int(t_ns[j])
            ia, ib = np.searchsorted(tx_s, [a, b], side="right")
            lo, da, db = np.searchsorted(dep_s, [a - longest, a, b], side="right")
            # both sides counted as bytes on the wire within (a, b]: the frame being sent at a
            # carries its rest into the segment, for the real NIC and the perfect one alike
            rest = float(np.maximum(0, end_s[lo:da] - a).sum()) * rate
            queued = c_tx[ia] - c_dep[da] + rest
            ideal[k] += ideal_departed(a, b, queued, tx_s[ia:ib], size_tx[ia:ib], rate)
            sent[k] += rest + float((np.minimum(end_s[da:db], b) - dep_s[da:db]).sum()) * rate
            length[k] += (j - i) * INTERVAL_NS
            gap[k] += c_gap[j] - c_gap[i]
    pieces = np.array([len(w) for w in win], dtype=np.int64)
    # what the NIC sent short of a perfect one given the same frames, as wire time
    short_ns = np.maximum(0.0, ideal - sent) * byte_ns
    idle = gap + short_ns
    # a NIC cannot send faster than its link: a shaper releasing more than its configured bucket
    # (burst_bytes, which it may send back to back after idling: once per busy span) ahead of rate
    fast = sent > length * rate * (1 + tolerance) + frame_bytes + burst_bytes * pieces
    # the switch links' allowance, the tolerance and one frame time, so both ends of a wire are
    # judged alike (a switch port's counter cannot see an idle shorter than a frame)
    ok = (idle <= tolerance * length + frame_bytes * byte_ns) & ~fast
    judged_ns = float(judged.sum() * INTERVAL_NS)
    win_ns = float(length.sum())
    total_gap = float(gap.sum())
    # over the whole busy time, without the frame each window is allowed: a shaper steadily a
    # little slow passes each window, not this; a window the NIC sent ahead in (its burst after
    # idling) does not make up for one it fell behind in
    total_late = float(short_ns.sum())
    drain_ratio = float(sent.sum() / ideal.sum()) if ideal.sum() > 0 else None
    idle_share = (total_gap + total_late) / win_ns if win_ns else 0.0
    n_win = len(win)
    share = float(ok.mean()) if n_win else None
    is_judged = n_win >= HOST_MIN_WINDOWS
    return {"busy_ms": judged_ns / 1e6, "windowed_ms": win_ns / 1e6, "paused_intervals": int((busy & paused).sum()),
            "window_ms": span / 1e6, "windows": n_win, "within_tolerance": int(ok.sum()), "share": share,
            "fast_windows": int(fast.sum()), "judged": is_judged,
            "lead_dry_ms": float(dry_ns[judged].sum() / 1e6), "qp_behind_ms": float(behind_ns[judged].sum() / 1e6),
            "late_ms": total_late / 1e6, "idle_share": idle_share,
            # what it sent over its windows against a perfect NIC given the same frames (above 1
            # by the NIC's burst after each idle period)
            "drain_ratio": drain_ratio,
            "ok": not is_judged or (share >= min_share and idle_share <= tolerance)}


def host_fidelity(rf: RunFolder, pkts: pd.DataFrame, plan: dict, start_ns: int,
                  pauses: dict[str, list[tuple[int, int]]] | None = None, *, frame_bytes: int,
                  burst_bytes: int, tolerance: float, min_share: float) -> dict:
    """Per sending host: its windows of busy time, how many idled with work waiting within the
    tolerance, and the verdict (see the module). An interval in which PFC paused any class of the
    host's NIC is not judged: a paused NIC holds its frames by design."""
    pauses = pauses or {}
    gaps = _read_gaps(rf)
    src = _sender_of(pkts, plan)
    out = []
    for hi, spec in enumerate(plan["hosts"]):
        name = spec["name"]
        mine = pkts[src == name]
        if mine.empty:
            continue
        g = gaps[gaps["host"] == hi]
        v = judge_host(mine, g[g["kind"] == records.GAP_LEAD_DRY], g[g["kind"] == records.GAP_QP_BEHIND],
                       pauses.get(spec.get("ifname", ""), []), spec.get("bw_bps") or 1e12, frame_bytes,
                       burst_bytes, start_ns, tolerance, min_share)
        if v:
            out.append({"host": name, **v})
    judged = [h for h in out if h["judged"]]
    worst = min(judged, key=lambda h: (h["ok"], h["share"], -h["idle_share"])) if judged else None
    return {"method": "share of windows of busy time spanning max(1 ms, 20 frame times) in which a sending "
                      "host's link idled with work waiting (the lead dry, a rate-limited QP behind, the shaper "
                      "late against a perfect NIC given the same frames) for at most the tolerance plus one "
                      "frame time and sent no more than its rate and burst allow; and over all its busy time, "
                      "the idle share within the tolerance",
            "interval_ms": INTERVAL_NS / 1e6, "tolerance": tolerance, "min_share": min_share,
            "burst_bytes": burst_bytes,
            "min_windows": HOST_MIN_WINDOWS, "judged_hosts": len(judged),
            "sending_hosts": len(out), "failing_hosts": [h["host"] for h in out if not h["ok"]],
            "worst": worst, "valid": all(h["ok"] for h in out), "hosts": out}


def nic_queues(pkts: pd.DataFrame, plan: dict) -> dict:
    """The host NICs' queueing: per host and class, the time frames waited in the NIC's queue
    (handoff to departure: the lead, priority and pause) and its depth when each frame arrived."""
    timed = pkts[pkts["depart_ns"] >= 0]
    if timed.empty:
        return {"frames": 0}
    wait_us = (timed["depart_ns"] - timed["tx_ns"]).astype("float64") / 1e3
    rows = []
    for (flow_host, cls), g in timed.assign(host=_sender_of(timed, plan)).groupby(["host", "cls"]):
        t_in, t_out, size = g["tx_ns"].to_numpy(), g["depart_ns"].to_numpy(), g["bytes"].to_numpy()
        order = np.argsort(t_out, kind="stable")
        left = np.cumsum(size[order])                      # bytes departed up to each departure
        arrived = np.cumsum(size[np.argsort(t_in, kind="stable")])
        # depth seen by each arriving frame: bytes handed over before it, less bytes departed
        n_out = np.searchsorted(np.sort(t_out), np.sort(t_in), side="right")
        depth = arrived - size[np.argsort(t_in, kind="stable")] - np.where(n_out > 0, left[np.maximum(n_out - 1, 0)], 0)
        w = (g["depart_ns"] - g["tx_ns"]).astype("float64") / 1e3
        rows.append({"host": flow_host, "class": int(cls), "frames": int(len(g)),
                     "wait_us_p50": float(np.percentile(w, 50)), "wait_us_p99": float(np.percentile(w, 99)),
                     "depth_bytes_p50": float(np.percentile(depth, 50)),
                     "depth_bytes_max": float(depth.max())})
    return {"frames": int(len(timed)), "wait_us_p50": float(np.percentile(wait_us, 50)),
            "wait_us_p99": float(np.percentile(wait_us, 99)),
            "untimed_frames": int((pkts["depart_ns"] < 0).sum()), "by_host_class": rows}


def nic_queue_series(pkts: pd.DataFrame, plan: dict, start_ns: int, end_ns: int) -> pd.DataFrame:
    """Every host NIC class's queue depth on the switch telemetry's 1 ms grid, exact from the
    records: bytes handed to it by then less bytes that had left by then."""
    grid = np.arange(start_ns, end_ns, INTERVAL_NS, dtype="int64")
    timed = pkts[pkts["depart_ns"].notna()]
    out = []
    for (host, cls), g in timed.assign(host=_sender_of(timed, plan)).groupby(["host", "cls"]):
        size = g["bytes"].to_numpy(dtype="int64")
        t_in, t_out = g["tx_ns"].to_numpy(dtype="int64"), g["depart_ns"].to_numpy(dtype="int64")
        o_in, o_out = np.argsort(t_in, kind="stable"), np.argsort(t_out, kind="stable")
        c_in = np.concatenate([[0], np.cumsum(size[o_in])])
        c_out = np.concatenate([[0], np.cumsum(size[o_out])])
        depth = (c_in[np.searchsorted(t_in[o_in], grid, side="right")]
                 - c_out[np.searchsorted(t_out[o_out], grid, side="right")])
        out.append(pd.DataFrame({"t_ns": grid, "host": host, "class": int(cls), "depth_bytes": depth}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["t_ns", "host", "class", "depth_bytes"])
