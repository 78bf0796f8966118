"""The host side of the fidelity verdict, and the host NICs' queues.

A real NIC with frames to send keeps its link busy. The emulated one is the kernel's shaper fed
by the data plane's lead, and its link can idle with work waiting in three ways:
- the lead ran dry: the data plane was kept off the CPU longer than the lead lasts, so frames it
  had to send were not handed over (raw/nic_gaps.bin, kind 0);
- frames were waiting in the NIC (handed over, their tx_ns, and not yet left) throughout a 1 ms
  interval, yet the link sent less than its rate allows, less 10% and one frame, as the switch
  links are judged: the kernel's shaper ran late and did not catch up within the interval (found
  from the records' exact departures);
- a queue pair that DCQCN holds below line rate builds no lead; when the data plane sent it later
  than its rate allows, that QP fell behind (kind 1).
All are judged per sending host over its busy 1 ms intervals: those in which its NIC sent a frame
or had one waiting.

The NIC queue of each host class is known exactly from the records: a frame is in it from its
handoff (tx_ns) to its departure (depart_ns).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from testbed import records

INTERVAL_NS = 1_000_000
MAX_IDLE_SHARE = 0.01
# A 1% share means something only over 100 intervals: a host with fewer busy ones is not judged.
MIN_JUDGED_INTERVALS = 100
DRAIN_TOLERANCE = 0.10
# A dry spell shorter than this inside an interval is timer slack, not an idle link.
IDLE_MIN_NS = 20_000


def slow_intervals(mine: pd.DataFrame, bw_bps: float, t0: int, tolerance: float = 0.10,
                   exclude: set[int] = frozenset()) -> tuple[set[int], float | None]:
    """The 1 ms intervals in which the host's NIC held frames throughout (handed over, not yet
    left) but its link sent less than its rate allows, less the tolerance and one frame (the
    switch links' drain rule, on exact departures): the kernel's shaper ran late and did not
    catch up within the interval; and the link's drain over all those backlogged intervals
    against its rate (a shaper steadily a little slow passes each interval but not this)."""
    d = mine[mine["depart_ns"].notna()]
    if d.empty:
        return set(), None
    dep = d["depart_ns"].to_numpy(dtype="int64")
    tx = d["tx_ns"].to_numpy(dtype="int64")
    size = d["bytes"].to_numpy(dtype="int64")
    order = np.argsort(dep, kind="stable")
    dep_s, size_s = dep[order], size[order]
    tx_s = np.sort(tx)
    b0, b1 = (int(dep_s[0] - t0) // INTERVAL_NS), (int(dep_s[-1] - t0) // INTERVAL_NS)
    edges = t0 + np.arange(b0, b1 + 2, dtype="int64") * INTERVAL_NS
    # frames in the NIC just after each departure and at each interval's start
    after_dep = np.searchsorted(tx_s, dep_s, side="right") - (np.arange(len(dep_s)) + 1)
    at_edge = np.searchsorted(tx_s, edges, side="right") - np.searchsorted(dep_s, edges, side="right")
    bin_of_dep = (dep_s - t0) // INTERVAL_NS - b0
    # an interval is backlogged when its start and every departure in it left frames waiting
    min_after = np.full(len(edges) - 1, 1 << 30, dtype="int64")
    np.minimum.at(min_after, bin_of_dep, after_dep)
    backlogged = (at_edge[:-1] > 0) & (min_after > 0)
    if exclude:
        backlogged &= ~np.isin(np.arange(b0, b0 + len(backlogged)), list(exclude))
    drained = np.bincount(bin_of_dep, weights=size_s, minlength=len(edges) - 1)
    due = bw_bps / 8 * INTERVAL_NS / 1e9
    slow = backlogged & (drained < due * (1 - tolerance) - size.max())
    ratio = float(drained[backlogged].sum() / (due * backlogged.sum())) if backlogged.sum() >= MIN_JUDGED_INTERVALS else None
    return set((np.nonzero(slow)[0] + b0).tolist()), ratio


def _sender_of(pkts: pd.DataFrame, plan: dict) -> pd.Series:
    """The sending host of each packet, by its flow."""
    return pkts["flow"].map({f["id"]: f["src"] for f in plan["flows"]})


def _read_gaps(raw: Path) -> np.ndarray:
    path = raw / "nic_gaps.bin"
    return records.read(path, records.NIC_GAP) if path.exists() else np.zeros(0, records.NIC_GAP)


def _bins_of_spans(starts: np.ndarray, ends: np.ndarray, t0: int, min_ns: int) -> set[int]:
    """The intervals in which a span covers at least min_ns."""
    out: set[int] = set()
    for s, e in zip(starts.tolist(), ends.tolist()):
        b0, b1 = (s - t0) // INTERVAL_NS, (e - t0) // INTERVAL_NS
        for b in range(int(b0), int(b1) + 1):
            lo, hi = max(s, t0 + b * INTERVAL_NS), min(e, t0 + (b + 1) * INTERVAL_NS)
            if hi - lo >= min_ns:
                out.add(b)
    return out


def host_fidelity(raw: Path, pkts: pd.DataFrame, plan: dict, start_ns: int,
                  pauses: dict[str, list[tuple[int, int]]] | None = None) -> dict:
    """Per sending host: its busy intervals, those in which its link idled with frames waiting
    (lead dry, a late departure) or a rate-limited QP fell behind, and the verdict (at most 1% of
    busy intervals). An interval in which PFC paused any class of the host's NIC is not judged: a
    paused NIC holds its frames by design."""
    pauses = pauses or {}
    gaps = _read_gaps(raw)
    src = _sender_of(pkts, plan)
    out = []
    for hi, spec in enumerate(plan["hosts"]):
        name = spec["name"]
        mine = pkts[src == name]
        if mine.empty:
            continue
        dep = mine["depart_ns"].to_numpy()
        busy = set(((dep[dep >= 0] - start_ns) // INTERVAL_NS).tolist())
        g = gaps[gaps["host"] == hi]
        dry = g[g["kind"] == records.GAP_LEAD_DRY]
        behind = g[g["kind"] == records.GAP_QP_BEHIND]
        bw = spec.get("bw_bps") or 1e12
        spans = pauses.get(spec.get("ifname", ""), [])
        paused = _bins_of_spans(np.array([a for a, _ in spans], np.int64), np.array([b for _, b in spans], np.int64),
                                start_ns, 1)
        dry_bins = _bins_of_spans(dry["start_ns"], dry["end_ns"], start_ns, IDLE_MIN_NS) - paused
        late_bins, drain_ratio = slow_intervals(mine, bw, start_ns, exclude=paused)
        behind_bins = _bins_of_spans(behind["start_ns"], behind["end_ns"], start_ns, IDLE_MIN_NS) - paused
        idle = dry_bins | late_bins | behind_bins
        busy = (busy | idle) - paused
        n_busy = len(busy)
        share = len(idle) / n_busy if n_busy else 0.0
        out.append({"host": name, "busy_intervals": n_busy, "idle_intervals": len(idle),
                    "paused_intervals": len(paused),
                    "lead_dry_intervals": len(dry_bins), "late_departure_intervals": len(late_bins),
                    "qp_behind_intervals": len(behind_bins), "idle_share": share,
                    "lead_dry_ms": float((dry["end_ns"] - dry["start_ns"]).sum() / 1e6),
                    "qp_behind_ms": float((behind["end_ns"] - behind["start_ns"]).sum() / 1e6),
                    # long-run drain of the NIC's link over its backlogged intervals (judged from 100 on)
                    "drain_ratio": drain_ratio,
                    "ok": share <= MAX_IDLE_SHARE and (drain_ratio is None or drain_ratio >= 1 - DRAIN_TOLERANCE)})
    worst = max(out, key=lambda h: (not h["ok"], h["idle_share"], -(h["drain_ratio"] or 1))) if out else None
    return {"interval_ms": INTERVAL_NS / 1e6, "max_idle_share": MAX_IDLE_SHARE,
            "min_judged_intervals": MIN_JUDGED_INTERVALS,
            "judged_hosts": sum(1 for h in out if h["busy_intervals"] >= MIN_JUDGED_INTERVALS),
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
