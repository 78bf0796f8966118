"""A run's report: plots (PNG) and report.md plus a self-contained report.html, drawn from the
tables and summary that testbed.analysis.summary wrote. Reads only the run folder, so it can be redrawn.

    plots/queues.png            queue depth over time, busiest ports
    plots/latency_cdf.png       one-way latency CDF per traffic class
    plots/link_utilisation.png  heat map: every switch egress port over time
    plots/timeline.png          every message and compute step per rank, coloured by iteration
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
from testbed.analysis.document import blocks, to_html, to_markdown  # noqa: E402
from testbed.analysis.flows import class_of_dscp  # noqa: E402
from testbed.runfolder import RunFolder  # noqa: E402

BUSIEST_PORTS = 6
HEATMAP_MAX_PORTS = 64
DPI = 110


def _traffic_window(rf: RunFolder) -> tuple[int, int]:
    e = json.loads(rf.engine_stats.read_text())
    return e["start_ns"], e["end_ns"]


def plot_queues(rf: RunFolder, out: Path, t0: int, t1: int) -> bool:
    path = rf.table("queues")
    if not path.exists():
        return False
    tel = pd.read_parquet(path)
    # the telemetry runs from before the traffic: show the traffic phase
    series = link_analysis.port_series(tel[(tel["t_ns"] >= t0) & (tel["t_ns"] <= t1)])
    busiest = sorted(series, key=lambda s: s.depth_bytes.max(), reverse=True)[:BUSIEST_PORTS]
    if not busiest:
        return False
    empty = busiest[0].depth_bytes.max() == 0
    fig, ax = plt.subplots(figsize=(9, 4))
    for s in busiest:
        ax.step((s.t_ns - t0) / 1e6, s.depth_bytes / 1e3, where="post", label=s.port, lw=0.9)
    ax.set_xlabel("time since traffic start (ms)")
    ax.set_ylabel("queued (KB, all classes)")
    ax.set_title(f"queue depth, the {len(busiest)} deepest switch ports (1 kHz telemetry)"
                 + (": no queue built up" if empty else ""))
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return True


def plot_latency_cdf(rf: RunFolder, out: Path, classes: dict[int, str]) -> bool:
    pkts = pd.read_parquet(rf.table("packets"), columns=["latency_ns", "dscp"]).dropna()
    if pkts.empty:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    names = pkts["dscp"].astype(int).map(classes).fillna("?")
    for name in sorted(names.unique()):
        v = np.sort(pkts.loc[names == name, "latency_ns"].to_numpy(dtype="float64") / 1e3)
        ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=f"{name} ({len(v)} packets)")
    ax.set_xscale("log")
    ax.set_xlabel("one-way latency (us)")
    ax.set_ylabel("fraction of packets")
    ax.set_title("latency CDF per traffic class")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return True


def plot_utilisation(rf: RunFolder, out: Path) -> bool:
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
    bin_ms = float(np.diff(grid.columns[:2])[0]) if grid.shape[1] > 1 else 1.0
    fig, ax = plt.subplots(figsize=(10, max(3, 0.16 * len(grid) + 1.2)))
    im = ax.imshow(grid.to_numpy(), aspect="auto", interpolation="nearest", cmap="viridis", vmin=0, vmax=1,
                   extent=(grid.columns[0], grid.columns[-1] + bin_ms, len(grid) - 0.5, -0.5))
    ax.set_yticks(range(len(grid)))
    ax.set_yticklabels(grid.index, fontsize=6)
    ax.set_xlabel(f"time since traffic start (ms), {bin_ms:g} ms bins")
    ax.set_title(f"link utilisation, {len(grid)} switch egress ports that carried traffic" if carried == len(grid)
                 else f"link utilisation, the busiest {len(grid)} of {carried} switch egress ports that carried traffic")
    fig.colorbar(im, ax=ax, label="fraction of the link's rate")
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return True


def plot_timeline(rf: RunFolder, out: Path, t0: int) -> bool:
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
    for (src, it, comp), g in msgs.assign(_s=start, _c=is_compute).groupby(["src", "iteration", "_c"]):
        bars = [((a - t0) / 1e6, max((b - a) / 1e6, 0.05)) for a, b in zip(g["_s"], g["complete_ns"].astype("float64"))]
        ax.broken_barh(bars, (row[src] - 0.38, 0.76), facecolors="lightgrey" if comp else cmap(int(it) % 10),
                       edgecolors="black" if comp else "none", linewidth=0.2, alpha=0.9)
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels(ranks, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time since traffic start (ms)")
    ax.set_title("messages per sending rank, first packet to last, coloured by iteration"
                 + (" (grey: compute)" if is_compute.any() else ""))
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return True


def draw_plots(rf: RunFolder) -> list[str]:
    """Every plot the run's tables allow, by name (plots/<name>.png)."""
    rf.plots.mkdir(exist_ok=True)
    sc = json.loads(rf.scenario.read_text())
    t0, t1 = _traffic_window(rf)
    drawn = []
    for name, ok in (("queues", plot_queues(rf, rf.plot("queues"), t0, t1)),
                     ("latency_cdf", plot_latency_cdf(rf, rf.plot("latency_cdf"), class_of_dscp(sc.get("classes", [])))),
                     ("link_utilisation", plot_utilisation(rf, rf.plot("link_utilisation"))),
                     ("timeline", plot_timeline(rf, rf.plot("timeline"), t0))):
        if ok:
            drawn.append(name)
    return drawn


def write_report(run_dir: Path, summary: dict | None = None) -> Path:
    rf = RunFolder(run_dir)
    summary = summary or json.loads(rf.summary.read_text())
    drawn = draw_plots(rf)
    bl = blocks(summary, drawn)
    rf.report_md.write_text(to_markdown(bl))
    rf.report_html.write_text(to_html(bl, rf.root))
    return rf.report_html
