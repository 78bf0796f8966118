"""A run's report: plots (PNG) and report.md plus a self-contained report.html, drawn from the
tables and summary that testbed.analysis.summary wrote. Reads only the run folder, so it can be redrawn.
Every time axis is the hardware fabric's, since the traffic's start (emulated / D), and every link
is named by its ends.

    plots/queues.png            queue depth over time per class, the deepest switch queues
    plots/latency_cdf.png       one-way latency CDF per traffic class
    plots/link_utilisation.png  heat map: every switch egress port over time
    plots/timeline.png          every message and compute step per rank, coloured by iteration
    plots/pauses.png            every PFC pause per paused port and class, in order of first pause
    plots/dcqcn.png             DCQCN rate per queue pair, and the CNPs it received
    trace.json                  the run as a Perfetto / Chrome trace, in hardware time (testbed.analysis.trace)
"""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on a test VM
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from testbed.analysis import links as link_analysis  # noqa: E402
from testbed.analysis.document import PORT_ROWS, blocks, to_html, to_markdown  # noqa: E402
from testbed.analysis.flows import class_of_dscp  # noqa: E402
from testbed.analysis.tables import dilation_factor  # noqa: E402
from testbed.analysis.trace import write_trace  # noqa: E402
from testbed.runfolder import RunFolder, read_jsonl  # noqa: E402

BUSIEST_PORTS = 6
HEATMAP_MAX_PORTS = 64
DPI = 110


def _traffic_window(rf: RunFolder) -> tuple[int, int]:
    e = json.loads(rf.engine_stats.read_text())
    return e["start_ns"], e["end_ns"]


def link_labels(fabric: dict, ports: list[str]) -> list[str]:
    """Each egress port by its link's ends ("s0_0→s1_0"), with the port where two share the ends."""
    ends = {port: f"{node}→{far}" for port, (node, far, _) in link_analysis.interface_ends(fabric).items()}
    named = [ends.get(p, p) for p in ports]
    return [f"{n} ({p})" if named.count(n) > 1 else n for n, p in zip(named, ports)]


def hw_us(t_ns, t0: int, factor: float):
    """Emulated CLOCK_MONOTONIC ns to the hardware fabric's microseconds since the traffic's start."""
    return (t_ns - t0) / factor / 1e3


def plot_queues(rf: RunFolder, out: Path, t0: int, t1: int, factor: float) -> bool:
    path = rf.table("queues")
    if not path.exists():
        return False
    tel = pd.read_parquet(path)
    # the telemetry runs from before the traffic: show the traffic phase, one line per class of a
    # port (priority-mix's point is RoCE's queue against bulk's on one port)
    tel = tel[(tel["t_ns"] >= t0) & (tel["t_ns"] <= t1) & tel["port"].notna()]
    if tel.empty:
        return False
    names = dict(zip(tel["port"].unique(), link_labels(json.loads(rf.fabric.read_text()), list(tel["port"].unique()))))
    series = link_analysis.port_series(tel.assign(port=tel["port"].map(names) + " " + tel["class_name"].astype(str)))
    busiest = sorted(series, key=lambda s: s.depth_bytes.max(), reverse=True)[:BUSIEST_PORTS]
    empty = busiest[0].depth_bytes.max() == 0
    fig, ax = plt.subplots(figsize=(9, 4))
    for s in busiest:
        ax.step(hw_us(s.t_ns, t0, factor), s.depth_bytes / 1e3, where="post", label=s.port, lw=0.9)
    ax.set_xlabel("time since traffic start (us, hardware time)")
    ax.set_ylabel("queued (KB)")
    ax.set_title(f"queue depth per class, the {len(busiest)} deepest switch queues (1 kHz telemetry, emulated)"
                 + (": no queue built up" if empty else ""))
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return True


def plot_latency_cdf(rf: RunFolder, out: Path, classes: dict[int, str], factor: float) -> bool:
    pkts = pd.read_parquet(rf.table("packets"), columns=["latency_ns", "dscp"]).dropna()
    if pkts.empty:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    names = pkts["dscp"].astype(int).map(classes).fillna("?")
    for name in sorted(names.unique()):
        v = np.sort(pkts.loc[names == name, "latency_ns"].to_numpy(dtype="float64") / factor / 1e3)
        ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=f"{name} ({len(v)} packets)")
    ax.set_xscale("log")
    ax.set_xlabel("one-way latency (us, hardware time)")
    ax.set_ylabel("fraction of packets")
    ax.set_title("latency CDF per traffic class")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return True


def plot_utilisation(rf: RunFolder, out: Path, factor: float) -> bool:
    path = rf.table("link_utilisation")
    if not path.exists():
        return False
    util = pd.read_parquet(path)
    if util.empty or util["bytes"].sum() == 0:
        return False
    grid = util.pivot_table(index="port", columns="t_ms", values="utilisation", aggfunc="sum")
    grid = grid[grid.sum(axis=1) > 0]
    carried = len(grid)
    if len(grid) > HEATMAP_MAX_PORTS:
        grid = grid.loc[grid.sum(axis=1).nlargest(HEATMAP_MAX_PORTS).index]
    grid = grid.sort_index()
    labels = link_labels(json.loads(rf.fabric.read_text()), list(grid.index))
    bin_ms = float(np.diff(grid.columns[:2])[0]) if grid.shape[1] > 1 else 1.0
    fig, ax = plt.subplots(figsize=(10, max(3, 0.16 * len(grid) + 1.2)))
    # t_ms: emulated ms since the traffic's start; the axis is the hardware's microseconds
    k = 1e3 / factor
    im = ax.imshow(grid.to_numpy(), aspect="auto", interpolation="nearest", cmap="viridis", vmin=0, vmax=1,
                   extent=(grid.columns[0] * k, (grid.columns[-1] + bin_ms) * k, len(grid) - 0.5, -0.5))
    ax.set_yticks(range(len(grid)))
    ax.set_yticklabels(labels, fontsize=6)
    ax.set_xlabel(f"time since traffic start (us, hardware time), {bin_ms * k:.3g} us bins")
    ax.set_title(f"link utilisation, {len(grid)} switch egress ports that carried traffic" if carried == len(grid)
                 else f"link utilisation, the busiest {len(grid)} of {carried} switch egress ports that carried traffic")
    fig.colorbar(im, ax=ax, label="fraction of the link's rate")
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return True


def plot_timeline(rf: RunFolder, out: Path, t0: int, factor: float) -> bool:
    msgs = pd.read_parquet(rf.table("messages"))
    msgs = msgs[msgs["complete_ns"].notna()]
    if msgs.empty:
        return False
    ranks = sorted(msgs["src"].unique(), key=lambda h: (len(h), h))
    row = {r: i for i, r in enumerate(ranks)}
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.28 * len(ranks) + 1.2)))
    cmap = plt.get_cmap("tab10")
    start = msgs["first_tx_ns"].fillna(msgs["release_ns"]).astype("float64")
    is_compute = msgs["op"].eq("compute") if "op" in msgs else pd.Series(False, index=msgs.index)
    # the thinnest bar still drawn: a 2000th of the run
    min_us = max(hw_us(float(msgs["complete_ns"].max()), t0, factor), 1e-9) / 2000
    for (src, it, comp), g in msgs.assign(_s=start, _c=is_compute).groupby(["src", "iteration", "_c"]):
        bars = [(hw_us(a, t0, factor), max(hw_us(b, a, factor), min_us))
                for a, b in zip(g["_s"], g["complete_ns"].astype("float64"))]
        ax.broken_barh(bars, (row[src] - 0.38, 0.76), facecolors="lightgrey" if comp else cmap(int(it) % 10),
                       edgecolors="black" if comp else "none", linewidth=0.2, alpha=0.9)
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels(ranks, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time since traffic start (us, hardware time)")
    ax.set_title("messages per sending rank, first packet to last, coloured by iteration"
                 + (" (grey: compute)" if is_compute.any() else ""))
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return True


PAUSE_ROWS = 40
DCQCN_QPS = 16


def plot_pauses(rf: RunFolder, out: Path, t0: int, t1: int, factor: float) -> bool:
    """Each paused port class's pauses over time, rows in the order each class was first paused: a
    pause spreading upstream reads downward, hop by hop."""
    spans = link_analysis.pause_spans(pd.DataFrame(read_jsonl(rf.pfc_events)), t1)
    if spans.empty:
        return False
    first = spans.groupby(["port", "class"])["start_ns"].min().sort_values(kind="stable")
    shown = list(first.index[:PAUSE_ROWS])
    names = dict(zip(first.index.get_level_values(0),
                     link_labels(json.loads(rf.fabric.read_text()), list(first.index.get_level_values(0)))))
    row = {key: i for i, key in enumerate(shown)}
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.22 * len(shown) + 1.4)))
    for key, g in spans.groupby(["port", "class"]):
        if key in row:
            ax.broken_barh([(hw_us(a, t0, factor), hw_us(b, a, factor)) for a, b in zip(g["start_ns"], g["end_ns"])],
                           (row[key] - 0.38, 0.76), facecolors="tab:red", alpha=0.8)
    ax.set_yticks(range(len(shown)))
    ax.set_yticklabels([f"{names[p]} class {c}" for p, c in shown], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, hw_us(t1, t0, factor))
    ax.set_xlabel("time since traffic start (us, hardware time)")
    ax.set_title(f"PFC pauses per paused port and class ({len(spans)} pauses; rows in order of first pause"
                 + (f", the first {PAUSE_ROWS} of {len(first)}" if len(first) > PAUSE_ROWS else "") + ")")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return True


def plot_dcqcn(rf: RunFolder, out: Path, t0: int, t1: int, factor: float) -> bool:
    """Each queue pair's DCQCN rate over time (hardware Gb/s) and the CNPs it received, the queue
    pairs whose rate was cut most."""
    path = rf.table("qp_events")
    if not path.exists():
        return False
    ev = pd.read_parquet(path)
    rates = ev[ev["event"].str.startswith("rate_")]
    if rates.empty:
        return False
    cuts = rates[rates["event"] == "rate_cut"].groupby("flow").size()
    flows = list(cuts.sort_values(ascending=False, kind="stable").index[:DCQCN_QPS]) or \
        list(rates["flow"].unique()[:DCQCN_QPS])
    cnps = ev[ev["event"] == "cnp_received"]
    fig, (ax, rug) = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True, gridspec_kw={"height_ratios": [4, 1]})
    for i, flow in enumerate(flows):
        g = rates[rates["flow"] == flow]
        t = np.append(hw_us(g["t_ns"].to_numpy(dtype="float64"), t0, factor), hw_us(t1, t0, factor))
        r = np.append(g["rate_bps"].to_numpy() * factor / 1e9, g["rate_bps"].iloc[-1] * factor / 1e9)
        ax.step(t, r, where="post", lw=0.9, label=f"qp {flow}")
        c = cnps[cnps["flow"] == flow]
        rug.plot(hw_us(c["t_ns"].to_numpy(dtype="float64"), t0, factor), np.full(len(c), i), "|", ms=6)
    ax.set_ylabel("DCQCN rate (Gb/s, hardware)")
    ax.set_title(f"DCQCN rate per queue pair, the {len(flows)} cut most ({int(cuts.sum())} cuts in all)")
    ax.legend(fontsize=7, ncol=4)
    ax.grid(alpha=0.3)
    rug.set_yticks(range(len(flows)))
    rug.set_yticklabels([f"qp {f}" for f in flows], fontsize=6)
    rug.set_ylabel("CNPs", fontsize=8)
    rug.set_xlabel("time since traffic start (us, hardware time)")
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return True


def draw_plots(rf: RunFolder) -> list[str]:
    """Every plot the run's tables allow, by name (plots/<name>.png)."""
    rf.plots.mkdir(exist_ok=True)
    sc = json.loads(rf.scenario.read_text())
    t0, t1 = _traffic_window(rf)
    factor = dilation_factor(sc)
    drawn = []
    for name, ok in (("queues", plot_queues(rf, rf.plot("queues"), t0, t1, factor)),
                     ("latency_cdf", plot_latency_cdf(rf, rf.plot("latency_cdf"), class_of_dscp(sc.get("classes", [])),
                                                      factor)),
                     ("link_utilisation", plot_utilisation(rf, rf.plot("link_utilisation"), factor)),
                     ("timeline", plot_timeline(rf, rf.plot("timeline"), t0, factor)),
                     ("pauses", plot_pauses(rf, rf.plot("pauses"), t0, t1, factor)),
                     ("dcqcn", plot_dcqcn(rf, rf.plot("dcqcn"), t0, t1, factor))):
        if ok:
            drawn.append(name)
    return drawn


def write_report(run_dir: Path, summary: dict | None = None) -> Path:
    rf = RunFolder(run_dir)
    summary = summary or json.loads(rf.summary.read_text())
    drawn = draw_plots(rf)
    ports = pd.read_parquet(rf.table("ports")) if rf.table("ports").exists() else pd.DataFrame()
    bl = blocks(summary, drawn, ports.head(PORT_ROWS).to_dict("records"), len(ports))
    rf.report_md.write_text(to_markdown(bl))
    rf.report_html.write_text(to_html(bl, rf.root))
    write_trace(rf.root, (summary.get("dilation") or {}).get("factor") or 1.0)
    return rf.report_html
