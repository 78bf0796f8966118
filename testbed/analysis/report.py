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
    plots/ecn_tuning.png        the ECN tuning's thresholds over time, and what each window saw
    interactive.html            the time plots on one zoomable time axis (testbed.analysis.interactive)
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

from testbed.analysis import plotdata  # noqa: E402
from testbed.analysis.document import PORT_ROWS, blocks, to_html, to_markdown  # noqa: E402
from testbed.analysis.flows import class_of_dscp  # noqa: E402
from testbed.analysis.interactive import write_interactive  # noqa: E402
from testbed.analysis.tables import dilation_factor  # noqa: E402
from testbed.analysis.trace import write_trace  # noqa: E402
from testbed.runfolder import RunFolder  # noqa: E402

DPI = 110


def _traffic_window(rf: RunFolder) -> tuple[int, int]:
    e = json.loads(rf.engine_stats.read_text())
    return e["start_ns"], e["end_ns"]


def plot_queues(rf: RunFolder, out: Path, t0: int, t1: int, factor: float) -> bool:
    lines = plotdata.queue_steps(rf, t0, t1, factor)
    if not lines:
        return False
    empty = max(line.y.max() for line in lines) == 0
    fig, ax = plt.subplots(figsize=(9, 4))
    for line in lines:
        ax.step(line.t_us, line.y, where="post", label=line.label, lw=0.9)
    ax.set_xlabel("time since traffic start (us, hardware time)")
    ax.set_ylabel("queued (KB)")
    ax.set_title(f"queue depth per class, the {len(lines)} deepest switch queues (1 kHz telemetry, emulated)"
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
    u = plotdata.utilisation_grid(rf, factor)
    if u is None:
        return False
    n, bins = u.grid.shape
    fig, ax = plt.subplots(figsize=(10, max(3, 0.16 * n + 1.2)))
    im = ax.imshow(u.grid, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0, vmax=1,
                   extent=(u.start_us, u.start_us + bins * u.bin_us, n - 0.5, -0.5))
    ax.set_yticks(range(n))
    ax.set_yticklabels(u.labels, fontsize=6)
    ax.set_xlabel(f"time since traffic start (us, hardware time), {u.bin_us:.3g} us bins")
    ax.set_title(f"link utilisation, {n} switch egress ports that carried traffic" if u.carried == n
                 else f"link utilisation, the busiest {n} of {u.carried} switch egress ports that carried traffic")
    fig.colorbar(im, ax=ax, label="fraction of the link's rate")
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return True


def plot_timeline(rf: RunFolder, out: Path, t0: int, factor: float) -> bool:
    bars = plotdata.message_bars(rf, t0, factor)
    if bars.empty:
        return False
    ranks = plotdata.rank_names(bars)
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.28 * len(ranks) + 1.2)))
    cmap = plt.get_cmap("tab10")
    for (row, it, comp), g in bars.groupby(["row", "iteration", "compute"]):
        ax.broken_barh(list(zip(g["start_us"], g["dur_us"])), (row - 0.38, 0.76),
                       facecolors="lightgrey" if comp else cmap(int(it) % 10),
                       edgecolors="black" if comp else "none", linewidth=0.2, alpha=0.9)
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels(ranks, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time since traffic start (us, hardware time)")
    ax.set_title("messages per sending rank, first packet to last, coloured by iteration"
                 + (" (grey: compute)" if bars["compute"].any() else ""))
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return True


def plot_pauses(rf: RunFolder, out: Path, t0: int, t1: int, factor: float) -> bool:
    """Each paused port class's pauses over time, rows in the order each class was first paused: a
    pause spreading upstream reads downward, hop by hop."""
    p = plotdata.pause_bars(rf, t0, t1, factor)
    if p is None:
        return False
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.22 * len(p.labels) + 1.4)))
    for row, g in p.bars.groupby("row"):
        ax.broken_barh(list(zip(g["start_us"], g["dur_us"])), (row - 0.38, 0.76), facecolors="tab:red", alpha=0.8)
    ax.set_yticks(range(len(p.labels)))
    ax.set_yticklabels(p.labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, plotdata.hw_us(t1, t0, factor))
    ax.set_xlabel("time since traffic start (us, hardware time)")
    ax.set_title(f"PFC pauses per paused port and class ({p.pauses} pauses; rows in order of first pause"
                 + (f", the first {len(p.labels)} of {p.classes}" if p.classes > len(p.labels) else "") + ")")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return True


def plot_dcqcn(rf: RunFolder, out: Path, t0: int, t1: int, factor: float) -> bool:
    """Each queue pair's DCQCN rate over time (hardware Gb/s) and the CNPs it received, the queue
    pairs whose rate was cut most."""
    d = plotdata.dcqcn_steps(rf, t0, t1, factor)
    if d is None:
        return False
    fig, (ax, rug) = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True, gridspec_kw={"height_ratios": [4, 1]})
    for i, (line, cnps) in enumerate(zip(d.rates, d.cnps)):
        ax.step(line.t_us, line.y, where="post", lw=0.9, label=line.label)
        rug.plot(cnps, np.full(len(cnps), i), "|", ms=6)
    ax.set_ylabel("DCQCN rate (Gb/s, hardware)")
    ax.set_title(f"DCQCN rate per queue pair, the {len(d.rates)} cut most ({d.cuts} cuts in all)")
    ax.legend(fontsize=7, ncol=4)
    ax.grid(alpha=0.3)
    rug.set_yticks(range(len(d.rates)))
    rug.set_yticklabels([line.label for line in d.rates], fontsize=6)
    rug.set_ylabel("CNPs", fontsize=8)
    rug.set_xlabel("time since traffic start (us, hardware time)")
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return True


def plot_ecn_tuning(rf: RunFolder, out: Path) -> bool:
    """Per tuned class over the run (hardware time): Kmin and Kmax as the tuning moved them, and each
    judged window's worst queue p99 and utilisation against the target."""
    if not rf.table("ecn_tuning").exists():
        return False
    w = pd.read_parquet(rf.table("ecn_tuning"))
    if w.empty:
        return False
    target = json.loads(rf.summary.read_text())["qos"]["ecn_tuning"]["target"]
    fig, (ax, ut) = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]})
    for name, g in w.groupby("class"):
        ax.step(g["t_us"], g["kmin_bytes"] / 1e3, where="post", lw=1.2, label=f"{name} Kmin")
        ax.step(g["t_us"], g["kmax_bytes"] / 1e3, where="post", lw=1.0, ls="--", label=f"{name} Kmax")
        ax.plot(g["t_us"], g["p99_bytes"] / 1e3, "o", ms=3, label=f"{name} window p99")
        ut.plot(g["t_us"], g["utilisation"], "o-", ms=3, lw=0.6, label=name)
    ax.axhline(target["queue_p99_bytes"] / 1e3, color="k", lw=0.8, ls=":", label="queue budget")
    ut.axhline(target["utilisation"], color="k", lw=0.8, ls=":")
    ax.set_ylabel("KB")
    ax.set_yscale("log")
    ax.set_title("ECN tuning: thresholds, and each window's worst queue p99 at a marking port")
    ax.legend(fontsize=7, ncol=3)
    ax.grid(alpha=0.3)
    ut.set_ylabel("utilisation", fontsize=8)
    ut.set_xlabel("time since traffic start (us, hardware time)")
    ut.grid(alpha=0.3)
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
                     ("dcqcn", plot_dcqcn(rf, rf.plot("dcqcn"), t0, t1, factor)),
                     ("ecn_tuning", plot_ecn_tuning(rf, rf.plot("ecn_tuning")))):
        if ok:
            drawn.append(name)
    return drawn


def write_report(run_dir: Path, summary: dict | None = None) -> Path:
    rf = RunFolder(run_dir)
    summary = summary or json.loads(rf.summary.read_text())
    drawn = draw_plots(rf)
    t0, t1 = _traffic_window(rf)
    write_interactive(rf, summary, t0, t1, dilation_factor(json.loads(rf.scenario.read_text())))
    ports = pd.read_parquet(rf.table("ports")) if rf.table("ports").exists() else pd.DataFrame()
    bl = blocks(summary, drawn, ports.head(PORT_ROWS).to_dict("records"), len(ports))
    rf.report_md.write_text(to_markdown(bl))
    rf.report_html.write_text(to_html(bl, rf.root))
    write_trace(rf.root, (summary.get("dilation") or {}).get("factor") or 1.0)
    return rf.report_html
