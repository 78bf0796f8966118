"""What the report's time plots show, as data: the still plots (testbed.analysis.report, PNG) and
the zoomable page (testbed.analysis.interactive) draw the same series from here. Every time is the
hardware fabric's microseconds since the traffic's start (emulated / D), every rate the hardware's,
every link named by its ends. Reads only the run folder."""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from testbed.analysis import links as link_analysis
from testbed.runfolder import RunFolder, read_jsonl

BUSIEST_PORTS = 6
PAUSE_ROWS = 40
DCQCN_QPS = 16
HEATMAP_MAX_PORTS = 64


def hw_us(t_ns, t0: int, factor: float):
    """Emulated CLOCK_MONOTONIC ns to the hardware fabric's microseconds since the traffic's start."""
    return (t_ns - t0) / factor / 1e3


def link_labels(fabric: dict, ports: list[str]) -> list[str]:
    """Each egress port by its link's ends ("s0_0→s1_0"), with the port where two share the ends."""
    ends = {port: f"{node}→{far}" for port, (node, far, _) in link_analysis.interface_ends(fabric).items()}
    named = [ends.get(p, p) for p in ports]
    return [f"{n} ({p})" if named.count(n) > 1 else n for n, p in zip(named, ports)]


@dataclass(frozen=True)
class Steps:
    """A step function: y[i] holds from t_us[i] to t_us[i + 1] (and y[-1] to the end)."""
    label: str
    t_us: np.ndarray
    y: np.ndarray


def changes_only(t: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The samples where a step function changes, and its last: the same steps, drawn exactly, from
    a 1 kHz telemetry whose queues sit still most of the time."""
    if len(y) < 3:
        return t, y
    keep = np.ones(len(y), dtype=bool)
    keep[1:-1] = y[1:-1] != y[:-2]
    return t[keep], y[keep]


def queue_steps(rf: RunFolder, t0: int, t1: int, factor: float, top: int = BUSIEST_PORTS) -> list[Steps]:
    """Queue depth (KB) per class of the `top` deepest switch queues over the traffic phase, deepest
    first, those that stayed empty left out unless all did (priority-mix's point is RoCE's queue
    against bulk's on one port)."""
    path = rf.table("queues")
    if not path.exists():
        return []
    tel = pd.read_parquet(path)
    tel = tel[(tel["t_ns"] >= t0) & (tel["t_ns"] <= t1) & tel["port"].notna()]
    if tel.empty:
        return []
    names = dict(zip(tel["port"].unique(), link_labels(json.loads(rf.fabric.read_text()), list(tel["port"].unique()))))
    series = link_analysis.port_series(tel.assign(port=tel["port"].map(names) + " " + tel["class_name"].astype(str)))
    busiest = sorted(series, key=lambda s: s.depth_bytes.max(), reverse=True)[:top]
    # queues that never held a byte say nothing beside one that did (every port's idle classes)
    busiest = [s for s in busiest if s.depth_bytes.max() > 0] or busiest
    return [Steps(s.port, *changes_only(hw_us(s.t_ns, t0, factor), s.depth_bytes / 1e3)) for s in busiest]


def message_bars(rf: RunFolder, t0: int, factor: float) -> pd.DataFrame:
    """Every completed message and compute step, first packet (or release) to completion: src,
    dst, op, bytes, iteration, compute (bool), row (the sending rank's, ranks in name order),
    start_us and dur_us (at least a 2000th of the run, so the thinnest still shows)."""
    path = rf.table("messages")
    msgs = pd.read_parquet(path) if path.exists() else pd.DataFrame(columns=["complete_ns"])
    msgs = msgs[msgs["complete_ns"].notna()]
    if msgs.empty:
        return pd.DataFrame(columns=["src", "dst", "op", "bytes", "iteration", "compute", "row", "start_us", "dur_us"])
    ranks = sorted(msgs["src"].unique(), key=lambda h: (len(h), h))
    start = msgs["first_tx_ns"].fillna(msgs["release_ns"]).astype("float64")
    end = msgs["complete_ns"].astype("float64")
    min_us = max(hw_us(float(end.max()), t0, factor), 1e-9) / 2000
    return pd.DataFrame({
        "src": msgs["src"], "dst": msgs["dst"], "op": msgs["op"] if "op" in msgs else "",
        "bytes": msgs["bytes"], "iteration": msgs["iteration"].astype(int),
        "compute": msgs["op"].eq("compute") if "op" in msgs else False,
        "row": msgs["src"].map({r: i for i, r in enumerate(ranks)}),
        "start_us": hw_us(start, t0, factor), "dur_us": np.maximum((end - start) / factor / 1e3, min_us),
    }).reset_index(drop=True)


def rank_names(bars: pd.DataFrame) -> list[str]:
    """message_bars' rows, in order."""
    return list(bars.drop_duplicates("row").sort_values("row")["src"])


@dataclass(frozen=True)
class Pauses:
    """Every pause of the first `rows` port classes to be paused, in order of first pause (a pause
    spreading upstream reads downward, hop by hop): bars (row, port, class, start_us, dur_us, cause,
    ended_by), each row's label, and how many pauses and paused classes there were in all."""
    bars: pd.DataFrame
    labels: list[str]
    pauses: int
    classes: int


def pause_bars(rf: RunFolder, t0: int, t1: int, factor: float, rows: int = PAUSE_ROWS) -> Pauses | None:
    spans = link_analysis.pause_spans(pd.DataFrame(read_jsonl(rf.pfc_events)), t1)
    if spans.empty:
        return None
    first = spans.groupby(["port", "class"])["start_ns"].min().sort_values(kind="stable")
    shown = list(first.index[:rows])
    ports = list(dict.fromkeys([*first.index.get_level_values(0), *spans["cause"].dropna().astype(str)]))
    names = dict(zip(ports, link_labels(json.loads(rf.fabric.read_text()), ports)))
    row = {key: i for i, key in enumerate(shown)}
    keys = list(zip(spans["port"], spans["class"]))
    keep = np.array([k in row for k in keys])
    s = spans[keep]
    bars = pd.DataFrame({"row": [row[k] for k, kept in zip(keys, keep) if kept], "port": s["port"].map(names),
                         "class": s["class"], "start_us": hw_us(s["start_ns"].astype("float64"), t0, factor),
                         "dur_us": (s["end_ns"] - s["start_ns"]).astype("float64") / factor / 1e3,
                         "cause": s["cause"].fillna("").astype(str).map(lambda p: names.get(p, p)),
                         "ended_by": s["ended_by"]})
    return Pauses(bars.reset_index(drop=True), [f"{names[p]} class {c}" for p, c in shown], len(spans), len(first))


@dataclass(frozen=True)
class Dcqcn:
    """The DCQCN rate (hardware Gb/s) of the `top` queue pairs cut most, to the traffic's end; the
    CNPs each received (hardware us); the rate cuts over every queue pair."""
    rates: list[Steps]
    cnps: list[np.ndarray]
    cuts: int


def dcqcn_steps(rf: RunFolder, t0: int, t1: int, factor: float, top: int = DCQCN_QPS) -> Dcqcn | None:
    path = rf.table("qp_events")
    if not path.exists():
        return None
    ev = pd.read_parquet(path)
    rates = ev[ev["event"].str.startswith("rate_")]
    if rates.empty:
        return None
    cuts = rates[rates["event"] == "rate_cut"].groupby("flow").size()
    flows = list(cuts.sort_values(ascending=False, kind="stable").index[:top]) or list(rates["flow"].unique()[:top])
    cnps = ev[ev["event"] == "cnp_received"]
    steps, marks = [], []
    for flow in flows:
        g = rates[rates["flow"] == flow]
        t = np.append(hw_us(g["t_ns"].to_numpy(dtype="float64"), t0, factor), hw_us(t1, t0, factor))
        r = g["rate_bps"].to_numpy(dtype="float64") * factor / 1e9
        steps.append(Steps(f"qp {flow}", t, np.append(r, r[-1])))
        marks.append(hw_us(cnps.loc[cnps["flow"] == flow, "t_ns"].to_numpy(dtype="float64"), t0, factor))
    return Dcqcn(steps, marks, int(cuts.sum()))


@dataclass(frozen=True)
class Utilisation:
    """Switch egress ports that carried traffic (the busiest `max_ports`) by time bin: grid (ports x
    bins, fraction of the link's rate), labels, the first bin's start and a bin's width in hardware
    us, and how many ports carried traffic in all."""
    grid: np.ndarray
    labels: list[str]
    start_us: float
    bin_us: float
    carried: int


def utilisation_grid(rf: RunFolder, factor: float, max_ports: int = HEATMAP_MAX_PORTS) -> Utilisation | None:
    path = rf.table("link_utilisation")
    if not path.exists():
        return None
    util = pd.read_parquet(path)
    if util.empty or util["bytes"].sum() == 0:
        return None
    grid = util.pivot_table(index="port", columns="t_ms", values="utilisation", aggfunc="sum")
    grid = grid[grid.sum(axis=1) > 0]
    carried = len(grid)
    if len(grid) > max_ports:
        grid = grid.loc[grid.sum(axis=1).nlargest(max_ports).index]
    grid = grid.sort_index()
    bin_ms = float(np.diff(grid.columns[:2])[0]) if grid.shape[1] > 1 else 1.0
    # t_ms: emulated ms since the traffic's start
    k = 1e3 / factor
    return Utilisation(grid.to_numpy(), link_labels(json.loads(rf.fabric.read_text()), list(grid.index)),
                       float(grid.columns[0]) * k, bin_ms * k, carried)
