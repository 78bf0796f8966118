"""Per-link analysis from the switch agent's queue telemetry: utilisation over time and the
emulation's fidelity verdict (after Mininet-HiFi's link monitoring).

A link is emulated faithfully when, whenever its egress queue is backlogged, it drains at its
configured rate. The telemetry counts the bytes of whole frames that left each queue (counted at
the far end of the link) once per sampling interval (1 ms). The drain is judged over windows of
consecutive backlogged sampling intervals (the queue non-empty at both ends of each, the port not
paused by PFC) spanning at least max(1 ms, 20 frame times at the link's rate): 6.6 ms at 100 Mb/s
and 66 ms at 10 Mb/s with 4 KB frames. Two errors add up in each window: the link's own (the
tolerance, 3% by default, of rate x window) and the counter's: a perfect link drains whole frames,
so a count read between frames is off by up to one frame, which is 5% of a 20-frame window at any
rate (over a fixed 1 ms it was 33% at 100 Mb/s, and three times the window at 10 Mb/s). A window
passes when it is within the sum. Windows judge a link that stalls or bursts; over all its windows
together the link must also drain at its rate within the tolerance, which judges a link steadily a
little slow. Not over every backlogged interval: a backlog shorter than a window ends in the interval
its last frame arrives in, which is not backlogged at its end, so each short backlog loses up to a
frame of its drain to the count (a perfect 5 Mb/s link fed bursts of 2-11 frames measured 0.84 of
its rate that way, and two-jobs-fattree's core port 0.90 with every window at 1.00). A busy link is
one with enough windows to judge. Pure functions of tables,
so they are tested on constructed series.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

# A window spans this many frame times, and at least MIN_WINDOW_MS: the counter's one-frame
# quantum is then 5% of what a window should drain, at every rate and frame size.
WINDOW_FRAMES = 20
MIN_WINDOW_MS = 1.0
# A link is judged from this many windows on (at a 99% share, fewer than 100 must all pass).
MIN_WINDOWS = 20


@dataclass(frozen=True)
class PortSeries:
    """One switch egress port on the common sampling grid: t_ns (n), and per sample the bytes queued
    over all its classes and the cumulative bytes drained."""
    port: str
    t_ns: np.ndarray
    depth_bytes: np.ndarray
    drained_bytes: np.ndarray


def port_series(tel: pd.DataFrame) -> list[PortSeries]:
    """The telemetry holds a row per queue only when it changed; carry each queue's last value
    forward over the grid of sampling times and add its classes up per port. Each queue's value is
    a step function of the grid, so a port's sum is the running total of its queues' steps (a
    pivot per port took 5 of the flagship's 10 s of analysis, called three times a run)."""
    if tel.empty:
        return []
    grid = np.unique(tel["t_ns"].to_numpy())
    tel = tel[tel["port"].notna()]
    if tel.empty:
        return []
    at = np.searchsorted(grid, tel["t_ns"].to_numpy())
    queue = tel["queue"].to_numpy()
    port_of_row, ports = pd.factorize(tel["port"], sort=True)
    # rows by queue, then time, then as recorded: a queue's last row at a sampling time is its value there
    order = np.lexsort((np.arange(len(tel)), at, queue))
    q, t = queue[order], at[order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = (q[1:] != q[:-1]) | (t[1:] != t[:-1])
    rows, q, t = order[last], q[last], t[last]
    first_of_queue = np.ones(len(rows), dtype=bool)
    first_of_queue[1:] = q[1:] != q[:-1]
    out_cols = {}
    for col in ("depth_bytes", "deq_bytes"):
        v = tel[col].to_numpy(dtype="float64")[rows]
        step = v - np.where(first_of_queue, 0.0, np.roll(v, 1))
        steps = np.bincount(port_of_row[rows] * len(grid) + t, weights=step, minlength=len(ports) * len(grid))
        out_cols[col] = np.cumsum(steps.reshape(len(ports), len(grid)), axis=1)
    return [PortSeries(str(port), grid, out_cols["depth_bytes"][i], out_cols["deq_bytes"][i])
            for i, port in enumerate(ports)]


def paused_mask(t_ns: np.ndarray, pauses: list[tuple[int, int]]) -> np.ndarray:
    """For the n-1 intervals of t_ns: True where any [pause_ns, resume_ns) overlaps the interval."""
    mask = np.zeros(max(0, len(t_ns) - 1), dtype=bool)
    for start, end in pauses:
        mask |= (t_ns[:-1] < end) & (t_ns[1:] > start)
    return mask


SPAN_COLUMNS = ["node", "port", "class", "start_ns", "end_ns", "cause", "cause_class", "ended_by"]


def pause_spans(events: pd.DataFrame, end_ns: int) -> pd.DataFrame:
    """Every pause of a port's class (the agent's pause/resume events, raw/pfc_events.jsonl): node,
    port and class paused, from its assertion to its resume, the queue that caused it, and what
    ended it (the resume's reason; "never resumed" for one still asserted at end_ns, where it ends).
    An assertion while the class is paused already adds nothing."""
    if events.empty or "event" not in events:
        return pd.DataFrame(columns=SPAN_COLUMNS)
    open_at: dict[tuple[str, int], dict] = {}
    rows = []
    for e in events[events["event"].isin(["pause", "resume"])].sort_values("t_ns", kind="stable").to_dict("records"):
        key = (e["port"], int(e["class"]))
        if e["event"] == "pause":
            open_at.setdefault(key, e)
        elif key in open_at:
            p = open_at.pop(key)
            rows.append((p, int(e["t_ns"]), e.get("reason") or "resume"))
    rows += [(p, end_ns, "never resumed") for p in open_at.values()]
    return pd.DataFrame([{"node": p.get("node"), "port": p["port"], "class": int(p["class"]), "start_ns": int(p["t_ns"]),
                          "end_ns": int(end), "cause": p.get("cause"), "cause_class": p.get("cause_class"),
                          "ended_by": why} for p, end, why in rows], columns=SPAN_COLUMNS)


def pause_windows(events: pd.DataFrame, end_ns: int) -> dict[str, list[tuple[int, int]]]:
    """Per port: the [pause, resume) windows of any of its classes (a pause never resumed lasts to
    end_ns)."""
    out: dict[str, list[tuple[int, int]]] = {}
    for r in pause_spans(events, end_ns).itertuples(index=False):
        out.setdefault(r.port, []).append((r.start_ns, r.end_ns))
    return out


def down_windows(faults: list[dict], fabric: dict, end_ns: int) -> dict[str, list[tuple[int, int]]]:
    """Per port: the [down, up) spans of its link (a link or switch fault's records, raw/faults.jsonl;
    a link never brought up again is down to end_ns). A port whose link is down drains nothing, by
    the fault's design, not the emulator's failing; what it held is the fault's loss."""
    ends = {}
    for link in fabric["links"]:
        ports = (f"{link['a']}-eth{link['a_port']}", f"{link['b']}-eth{link['b_port']}")
        ends[f"{link['a']}-{link['b']}"] = ends[f"{link['b']}-{link['a']}"] = ports
    out: dict[str, list[tuple[int, int]]] = {}
    down_at: dict[str, int] = {}
    for f in sorted(faults, key=lambda f: f["t_ns"]):
        if not f["action"].startswith(("link_", "switch_")):
            continue
        for name in f.get("links") or []:
            for port in ends.get(name, ()):
                if f["action"].endswith("_down"):
                    down_at.setdefault(port, int(f["t_ns"]))
                elif port in down_at:
                    out.setdefault(port, []).append((down_at.pop(port), int(f["t_ns"])))
    for port, t in down_at.items():
        out.setdefault(port, []).append((t, end_ns))
    return out


def window_ns(rate_bps: float, frame_bytes: int) -> float:
    """The span a link's drain is judged over: max(MIN_WINDOW_MS, WINDOW_FRAMES frame times)."""
    return max(MIN_WINDOW_MS * 1e6, WINDOW_FRAMES * frame_bytes * 8 / rate_bps * 1e9)


def runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of each run of consecutive set flags: intervals start .. end-1."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], flags.astype(np.int8), [0]])))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def windows(t_ns: np.ndarray, judged: np.ndarray, span_ns: float) -> list[tuple[int, int]]:
    """(first, last) sample indices of back-to-back windows of at least span_ns, each made of
    consecutive judged intervals (judged: one flag per interval); what is left of a run of judged
    intervals too short for a window is not judged."""
    out = []
    for run_start, run_end in runs(judged):
        i = run_start
        while True:
            j = int(np.searchsorted(t_ns, t_ns[i] + span_ns, side="left"))
            if j > run_end:
                break
            out.append((i, j))
            i = j
    return out


def drain_check(s: PortSeries, rate_bps: float, frame_bytes: int, tolerance: float,
                pauses: list[tuple[int, int]] = (), burst_bytes: int = 0) -> dict:
    """The port's backlogged windows and how many drained at rate_bps within the tolerance.
    burst_bytes: the port shaper's bucket, full after the port idled. The window that opens a
    backlog may be off by it either way, and no other window: the port sends the bucket ahead of
    its rate as the backlog builds, before the first sample that counts it backlogged, and that
    window pays it back (dateline-torus's first window drained 0.912 of its rate, two-jobs-
    fattree's core port 0.897 after an idle spell, each the first of its backlog, at two
    dilations; every other window passed); or frames arrive together, the first sample already
    counts the backlog, and the bucket leaves inside the window (two-jobs-fattree's core port at
    1.25 Mb/s, 2026-12-05: its opening window 2.01 frames ahead, the bucket being 2; the port's 21
    other windows 0.950-1.000). The long-run drain over all windows is held to the tolerance
    without it."""
    dt_s = np.diff(s.t_ns) / 1e9
    drained = np.diff(s.drained_bytes)
    # more than the frame on the wire queued at both ends: the queue had work all along
    backlogged = (s.depth_bytes[:-1] > frame_bytes) & (s.depth_bytes[1:] > frame_bytes) & (dt_s > 0)
    if len(pauses):
        backlogged &= ~paused_mask(s.t_ns, list(pauses))
    span = window_ns(rate_bps, frame_bytes)
    win = windows(s.t_ns, backlogged, span)
    first = np.array([w[0] for w in win], dtype=np.int64)
    last = np.array([w[1] for w in win], dtype=np.int64)
    expected = rate_bps / 8 * (s.t_ns[last] - s.t_ns[first]) / 1e9
    got = s.drained_bytes[last] - s.drained_bytes[first]
    allowed = tolerance * expected + frame_bytes
    backlogs = runs(backlogged)
    opens = np.isin(first, [a for a, _ in backlogs])
    slack = burst_bytes * opens
    slow, fast = got < expected - allowed - slack, got > expected + allowed + slack
    ok = ~slow & ~fast
    n = len(win)
    ratio = got / expected if n else np.array([])
    # over all its windows together: the long-run drain rate against the configured
    in_windows = np.zeros(len(dt_s), dtype=bool)
    for a, b in win:
        in_windows[a:b] = True
    all_expected = float((rate_bps / 8 * dt_s[in_windows]).sum())
    drain_ratio = float(drained[in_windows].sum() / all_expected) if all_expected > 0 else None
    # A port with too few windows for their share to mean anything is judged over its whole
    # backlogged time instead, each backlog allowed the frame its count can miss at its end (see
    # the module): a 93% ring port in 14 backlogs of about a window each fails by this, where its
    # windows alone were too few to judge it
    backlog_expected = float((rate_bps / 8 * dt_s[backlogged]).sum())
    backlog_drained = float(drained[backlogged].sum())
    backlog_allowed = tolerance * backlog_expected + frame_bytes * len(backlogs)
    return {"port": s.port, "rate_mbps": rate_bps / 1e6, "window_ms": span / 1e6,
            "backlogged_intervals": int(backlogged.sum()), "windows": n,
            "within_tolerance": int(ok.sum()), "share": float(ok.mean()) if n else None,
            "slow_windows": int(slow.sum()), "fast_windows": int(fast.sum()),
            "drain_ratio": drain_ratio,
            "drain_ratio_ok": drain_ratio is not None and abs(drain_ratio - 1) <= tolerance,
            "ratio_p1": float(np.percentile(ratio, 1)) if n else None,
            "ratio_p50": float(np.percentile(ratio, 50)) if n else None,
            "ratio_p99": float(np.percentile(ratio, 99)) if n else None,
            "backlogs": len(backlogs),
            "backlog_drain_ratio": backlog_drained / backlog_expected if backlog_expected > 0 else None,
            "backlog_allowed_ratio": backlog_allowed / backlog_expected if backlog_expected > 0 else None,
            "backlog_ok": abs(backlog_drained - backlog_expected) <= backlog_allowed}


def link_fidelity(series: list[PortSeries], rates_bps: dict[str, float], frame_bytes: int,
                  tolerance: float, min_share: float, pauses: dict[str, list[tuple[int, int]]] | None = None,
                  min_windows: int = MIN_WINDOWS, burst_bytes: int = 0) -> dict:
    """The verdict over every busy link: valid when each drained at its rate in at least min_share
    of its backlogged windows, and at its rate over all of them."""
    pauses = pauses or {}
    checks = [drain_check(s, rates_bps[s.port], frame_bytes, tolerance, pauses.get(s.port, ()), burst_bytes)
              for s in series if s.port in rates_bps]
    busy = [c for c in checks if c["windows"] >= min_windows]
    failing = sorted((c for c in busy if c["share"] < min_share or not c["drain_ratio_ok"]),
                     key=lambda c: c["share"])
    # ports with a window but too few to count as busy: judged over their whole backlogged time
    short = [c for c in checks if 0 < c["windows"] < min_windows]
    failing_short = sorted((c for c in short if not c["backlog_ok"]), key=lambda c: c["backlog_drain_ratio"])
    intervals = np.diff(series[0].t_ns) if series else np.array([])
    total = sum(c["windows"] for c in busy)
    return {
        "method": "share of windows of backlogged, unpaused sampling intervals spanning max(1 ms, 20 frame "
                  "times) in which a link drained rate x window within the tolerance plus one frame (the "
                  "counter's quantum), and the drain over all its windows within the tolerance",
        "interval_ms": float(np.median(intervals) / 1e6) if len(intervals) else None,
        "window_frames": WINDOW_FRAMES, "min_window_ms": MIN_WINDOW_MS,
        "window_ms": sorted({round(c["window_ms"], 3) for c in checks}),
        "tolerance": tolerance, "frame_bytes": frame_bytes, "min_share": min_share,
        "min_windows": min_windows,
        "busy_links": len(busy),
        "short_links": len(short),
        "failing_short_links": [{"port": c["port"], "backlogs": c["backlogs"],
                                 "drain_ratio": c["backlog_drain_ratio"], "allowed": c["backlog_allowed_ratio"]}
                                for c in failing_short],
        "valid": not failing and not failing_short,
        "worst_share": min((c["share"] for c in busy), default=None),
        "overall_share": sum(c["within_tolerance"] for c in busy) / total if total else None,
        "failing_links": [c["port"] for c in failing],
        "links": sorted(busy, key=lambda c: c["share"])}


def utilisation(series: list[PortSeries], rates_bps: dict[str, float], start_ns: int, end_ns: int,
                bin_ms: float) -> pd.DataFrame:
    """Per port and time bin: drained bytes against the link's capacity over the bin, as a
    fraction. t_ms is the bin's start after start_ns."""
    bin_ns = int(bin_ms * 1e6)
    edges = np.arange(start_ns, end_ns + bin_ns, bin_ns)
    rows = []
    for s in series:
        if s.port not in rates_bps:
            continue
        # the cumulative drain at each bin edge (last sample at or before it), so a bin's share is exact
        # to within one sampling interval
        idx = np.searchsorted(s.t_ns, edges, side="right") - 1
        cum = np.where(idx >= 0, s.drained_bytes[np.clip(idx, 0, None)], 0.0)
        per_bin = np.diff(cum)
        cap = rates_bps[s.port] / 8 * np.diff(edges) / 1e9
        rows.append(pd.DataFrame({"port": s.port, "t_ms": (edges[:-1] - start_ns) / 1e6,
                                  "bytes": per_bin, "utilisation": per_bin / cap}))
    if not rows:
        return pd.DataFrame(columns=["port", "t_ms", "bytes", "utilisation"])
    return pd.concat(rows, ignore_index=True)


def link_table(series: list[PortSeries], rates_bps: dict[str, float], peers: dict[str, str], start_ns: int,
               end_ns: int) -> pd.DataFrame:
    """One row per switch egress port: where it leads, its rate, bytes drained during the traffic,
    mean utilisation, peak and mean queue."""
    span_s = max(1e-9, (end_ns - start_ns) / 1e9)
    rows = []
    for s in series:
        if s.port not in rates_bps:
            continue
        inside = (s.t_ns >= start_ns) & (s.t_ns <= end_ns)
        # the counters as they stood when the traffic started (the last sample before it, else
        # nothing yet) and the first sample once it ended: a NIC's lead can reach a port within
        # the telemetry's first millisecond
        i0 = int(np.searchsorted(s.t_ns, start_ns, side="right")) - 1
        i1 = min(int(np.searchsorted(s.t_ns, end_ns, side="left")), len(s.t_ns) - 1)
        before = float(s.drained_bytes[i0]) if i0 >= 0 else 0.0
        moved = float(s.drained_bytes[i1]) - before if len(s.t_ns) else 0.0
        rows.append({"port": s.port, "to": peers.get(s.port, ""), "rate_mbps": rates_bps[s.port] / 1e6,
                     "bytes": moved, "utilisation": moved * 8 / (rates_bps[s.port] * span_s),
                     "max_queue_bytes": float(s.depth_bytes.max()) if len(s.depth_bytes) else 0.0,
                     "mean_queue_bytes": float(s.depth_bytes[inside].mean()) if inside.any() else 0.0})
    return pd.DataFrame(rows, columns=["port", "to", "rate_mbps", "bytes", "utilisation", "max_queue_bytes",
                                       "mean_queue_bytes"])


def interface_ends(fabric: dict) -> dict[str, tuple[str, str, str]]:
    """Each interface of fabric.json's links: its node, the node at the link's other end, and that
    end's interface."""
    out = {}
    for link in fabric["links"]:
        a, b = f"{link['a']}-eth{link['a_port']}", f"{link['b']}-eth{link['b_port']}"
        out[a], out[b] = (link["a"], link["b"], b), (link["b"], link["a"], a)
    return out


def port_rates(fabric: dict, default_bw_mbps: float) -> tuple[dict[str, float], dict[str, str]]:
    """Each interface's rate in bit/s and the node at its other end, from fabric.json (runs recorded
    before every link's rate was concrete there leave the scenario's default to fill in)."""
    rates, peers = {}, {}
    for link in fabric["links"]:
        bps = (link.get("bw_mbps") or default_bw_mbps) * 1e6
        a, b = f"{link['a']}-eth{link['a_port']}", f"{link['b']}-eth{link['b_port']}"
        rates[a] = rates[b] = bps
        peers[a], peers[b] = link["b"], link["a"]
    return rates, peers
