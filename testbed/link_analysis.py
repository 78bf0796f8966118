"""Per-link analysis from the switch agent's queue telemetry: utilisation over time and the
emulation's fidelity verdict (after Mininet-HiFi's link monitoring).

A link is emulated faithfully when, whenever its egress queue is backlogged, it drains at its
configured rate. The telemetry counts the bytes of whole frames that left each queue (counted at
the far end of the link) once per sampling interval. For every interval with the port's queue
non-empty at both of its ends and the port not paused by PFC, the drained bytes are compared with
rate x interval. Two errors add up in that comparison: the link's own (the tolerance, 10% by
default, of rate x interval) and the counter's: a perfect link drains whole frames, so a count
read between frames is off by up to one frame. An interval passes when it is within the sum.
Short intervals judge jitter (a link that stalls); over all backlogged intervals together the
link must also drain at its rate within the tolerance, which judges a link that is steadily a
little slow, which one frame of slack per interval would hide. A busy link is one with enough
backlogged intervals to judge. Pure functions of tables, so they are tested on constructed series.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

# A 99% share means something only over 100 intervals or more: fewer, and one miss decides.
MIN_BACKLOGGED_INTERVALS = 100


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
    forward over the grid of sampling times and add its classes up per port."""
    if tel.empty:
        return []
    grid = np.sort(tel["t_ns"].unique())
    out = []
    for port, g in tel.groupby("port", sort=True):
        depth = g.pivot_table(index="t_ns", columns="queue", values="depth_bytes", aggfunc="last")
        deq = g.pivot_table(index="t_ns", columns="queue", values="deq_bytes", aggfunc="last")
        depth = depth.reindex(grid).ffill().fillna(0).sum(axis=1).to_numpy(dtype="float64")
        deq = deq.reindex(grid).ffill().fillna(0).sum(axis=1).to_numpy(dtype="float64")
        out.append(PortSeries(str(port), grid, depth, deq))
    return out


def paused_mask(t_ns: np.ndarray, pauses: list[tuple[int, int]]) -> np.ndarray:
    """For the n-1 intervals of t_ns: True where any [pause_ns, resume_ns) overlaps the interval."""
    mask = np.zeros(max(0, len(t_ns) - 1), dtype=bool)
    for start, end in pauses:
        mask |= (t_ns[:-1] < end) & (t_ns[1:] > start)
    return mask


def pause_windows(events: pd.DataFrame, end_ns: int) -> dict[str, list[tuple[int, int]]]:
    """Per port: the [pause, resume) windows of any of its classes (a pause never resumed lasts to
    end_ns)."""
    out: dict[str, list[tuple[int, int]]] = {}
    if events.empty or "event" not in events:
        return out
    open_at: dict[tuple[str, int], int] = {}
    for e in events[events["event"].isin(["pause", "resume"])].sort_values("t_ns").to_dict("records"):
        key = (e["port"], int(e["class"]))
        if e["event"] == "pause":
            open_at.setdefault(key, int(e["t_ns"]))
        elif key in open_at:
            out.setdefault(e["port"], []).append((open_at.pop(key), int(e["t_ns"])))
    for (port, _), start in open_at.items():
        out.setdefault(port, []).append((start, end_ns))
    return out


def drain_check(s: PortSeries, rate_bps: float, frame_bytes: int, tolerance: float,
                pauses: list[tuple[int, int]] = ()) -> dict:
    """The port's backlogged intervals and how many drained at rate_bps within the tolerance."""
    dt_s = np.diff(s.t_ns) / 1e9
    drained = np.diff(s.drained_bytes)
    # more than the frame on the wire queued at both ends: the queue had work all along
    backlogged = (s.depth_bytes[:-1] > frame_bytes) & (s.depth_bytes[1:] > frame_bytes) & (dt_s > 0)
    if len(pauses):
        backlogged &= ~paused_mask(s.t_ns, list(pauses))
    expected = rate_bps / 8 * dt_s[backlogged]
    got = drained[backlogged]
    allowed = tolerance * expected + frame_bytes
    ok = np.abs(got - expected) <= allowed
    n = int(backlogged.sum())
    ratio = got / expected if n else np.array([])
    drain_ratio = float(got.sum() / expected.sum()) if n else None
    return {"port": s.port, "rate_mbps": rate_bps / 1e6, "backlogged_intervals": n,
            "within_tolerance": int(ok.sum()), "share": float(ok.mean()) if n else None,
            "slow_intervals": int((got < expected - allowed).sum()),
            "fast_intervals": int((got > expected + allowed).sum()),
            # over all backlogged time together: the long-run drain rate against the configured
            "drain_ratio": drain_ratio,
            "drain_ratio_ok": drain_ratio is not None and abs(drain_ratio - 1) <= tolerance,
            "ratio_p1": float(np.percentile(ratio, 1)) if n else None,
            "ratio_p50": float(np.percentile(ratio, 50)) if n else None,
            "ratio_p99": float(np.percentile(ratio, 99)) if n else None}


def coarsen(s: PortSeries, every: int) -> PortSeries:
    """Every n-th sample: the drain judged over n sampling intervals."""
    return PortSeries(s.port, s.t_ns[::every], s.depth_bytes[::every], s.drained_bytes[::every])


def link_fidelity(series: list[PortSeries], rates_bps: dict[str, float], frame_bytes: int,
                  tolerance: float, min_share: float, pauses: dict[str, list[tuple[int, int]]] | None = None,
                  interval_ms: float | None = None, min_intervals: int = MIN_BACKLOGGED_INTERVALS) -> dict:
    """The verdict over every busy link: valid when each drained at its rate in at least min_share
    of its backlogged intervals, and at its rate over all of them together (interval_ms: judged
    over that many ms, default each sample)."""
    pauses = pauses or {}
    if series and interval_ms and len(series[0].t_ns) > 1:
        every = max(1, round(interval_ms * 1e6 / float(np.median(np.diff(series[0].t_ns)))))
        series = [coarsen(s, every) for s in series]
    checks = [drain_check(s, rates_bps[s.port], frame_bytes, tolerance, pauses.get(s.port, ()))
              for s in series if s.port in rates_bps]
    busy = [c for c in checks if c["backlogged_intervals"] >= min_intervals]
    failing = sorted((c for c in busy if c["share"] < min_share or not c["drain_ratio_ok"]),
                     key=lambda c: c["share"])
    intervals = np.diff(series[0].t_ns) if series else np.array([])
    total = sum(c["backlogged_intervals"] for c in busy)
    return {
        "method": "share of backlogged, unpaused sampling intervals in which a link drained rate x interval "
                  "within the tolerance plus one frame (the counter's quantum), and the drain over all of "
                  "them together within the tolerance",
        "interval_ms": float(np.median(intervals) / 1e6) if len(intervals) else None,
        "tolerance": tolerance, "frame_bytes": frame_bytes, "min_share": min_share,
        "min_backlogged_intervals": min_intervals,
        "busy_links": len(busy),
        "valid": not failing,
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


def port_rates(fabric: dict, default_bw_mbps: float) -> tuple[dict[str, float], dict[str, str]]:
    """Each interface's rate in bit/s and the node at its other end, from fabric.json."""
    rates, peers = {}, {}
    for link in fabric["links"]:
        bps = (link.get("bw_mbps") or default_bw_mbps) * 1e6
        a, b = f"{link['a']}-eth{link['a_port']}", f"{link['b']}-eth{link['b_port']}"
        rates[a] = rates[b] = bps
        peers[a], peers[b] = link["b"], link["a"]
    return rates, peers
