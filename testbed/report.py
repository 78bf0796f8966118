"""A run's report: plots (PNG) and report.md plus a self-contained report.html, drawn from the
tables and summary that testbed.analysis wrote. Reads only the run folder, so it can be redrawn.

    plots/queues.png            queue depth over time, busiest ports
    plots/latency_cdf.png       one-way latency CDF per traffic class
    plots/link_utilisation.png  heat map: every switch egress port over time
    plots/timeline.png          every message and compute step per rank, coloured by iteration
"""
from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on a test VM
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from testbed import link_analysis  # noqa: E402
from testbed.flow_analysis import class_of_dscp  # noqa: E402

BUSIEST_PORTS = 6
HEATMAP_MAX_PORTS = 64
DPI = 110


def _traffic_window(run_dir: Path) -> tuple[int, int]:
    e = json.loads((run_dir / "raw" / "engine.json").read_text())
    return e["start_ns"], e["end_ns"]


def plot_queues(run_dir: Path, out: Path, t0: int, t1: int) -> bool:
    path = run_dir / "queues.parquet"
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


def plot_latency_cdf(run_dir: Path, out: Path, classes: dict[int, str]) -> bool:
    pkts = pd.read_parquet(run_dir / "packets.parquet", columns=["latency_ns", "dscp"]).dropna()
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


def plot_utilisation(run_dir: Path, out: Path) -> bool:
    path = run_dir / "link_utilisation.parquet"
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


def plot_timeline(run_dir: Path, out: Path, t0: int) -> bool:
    msgs = pd.read_parquet(run_dir / "messages.parquet")
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


PLOTS = (("queues.png", "Queue depth over time"), ("latency_cdf.png", "Latency CDF per class"),
         ("link_utilisation.png", "Link utilisation"), ("timeline.png", "Collective timeline"))


def draw_plots(run_dir: Path) -> list[str]:
    plots = run_dir / "plots"
    plots.mkdir(exist_ok=True)
    sc = json.loads((run_dir / "raw" / "scenario.json").read_text())
    t0, t1 = _traffic_window(run_dir)
    drawn = []
    for name, ok in (("queues.png", plot_queues(run_dir, plots / "queues.png", t0, t1)),
                     ("latency_cdf.png", plot_latency_cdf(run_dir, plots / "latency_cdf.png",
                                                          class_of_dscp(sc.get("classes", [])))),
                     ("link_utilisation.png", plot_utilisation(run_dir, plots / "link_utilisation.png")),
                     ("timeline.png", plot_timeline(run_dir, plots / "timeline.png", t0))):
        if ok:
            drawn.append(name)
    return drawn


# -- the document ---------------------------------------------------------------------------
# A report is a list of blocks rendered twice: ("h", level, text), ("p", text), ("table", header,
# rows), ("img", file, caption).

def _num(v, spec="{:.3g}"):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, float):
        return spec.format(v)
    return str(v)


def blocks(s: dict, drawn: list[str]) -> list[tuple]:
    fid, col, pk = s["fidelity"], s["collective"], s["packets"]
    lf = fid.get("links") or {}
    out: list[tuple] = [("h", 1, f"{s['scenario']}: {s['status'].upper()}")]
    out.append(("p", f"Run {s['run_id']}, commit {s.get('git_commit') or '-'}, datapath "
                     f"{s['mechanisms'].get('datapath', '-')}."))
    verdict = {"kept_up": "VALID: the emulation kept up",
               "not_judged": "NOT JUDGED: too little was busy to tell whether the emulation kept up; "
                             "the numbers below are no result"}.get(
        fid["verdict"], "INVALID: the emulation could not keep up; the numbers below may not be the "
                        "configured fabric's")
    out.append(("h", 2, f"Fidelity: {verdict}"))
    hw = (fid.get("hosts") or {}).get("worst") or {}
    rows = [("busy links judged", _num(lf.get("busy_links"))),
            ("drain within tolerance, worst link / all", f"{_num(lf.get('worst_share'), '{:.1%}')} / "
                                                         f"{_num(lf.get('overall_share'), '{:.1%}')}"),
            ("criterion", f"each busy link >= {_num(lf.get('min_share'), '{:.0%}')} of its backlogged "
                          f"windows of max({_num(lf.get('min_window_ms'))} ms, {_num(lf.get('window_frames'))} "
                          f"frame times) within {_num(lf.get('tolerance'), '{:.0%}')} of its rate plus one "
                          f"{_num(lf.get('frame_bytes'))} B frame, and its whole backlogged time within "
                          f"{_num(lf.get('tolerance'), '{:.0%}')}"),
            ("machine CPU idle", _num(fid.get("machine_cpu_idle_fraction"), "{:.0%}")),
            ("sending hosts judged", _num((fid.get("hosts") or {}).get("judged_hosts"))),
            ("worst sending host: windows within tolerance / idle with work",
             f"{_num(hw.get('share'), '{:.1%}')} / {_num(hw.get('idle_share'), '{:.2%}')}")]
    out.append(("table", ("", ""), rows))
    for note in fid["notes"]:
        out.append(("p", f"- {note}"))
    if s["problems"]:
        out.append(("h", 2, "Problems"))
        out += [("p", f"- {p}") for p in s["problems"]]
    if s.get("expectations"):
        out.append(("h", 2, "Expectations"))
        out.append(("table", ("metric", "expected", "actual", "verdict"),
                    [(e["metric"], f"{e['op']} {e['expected']}", _num(e["actual"]),
                      "ok" if e["ok"] else "FAILED" if e["ok"] is False else "not judged")
                     for e in s["expectations"]]))
    out.append(("h", 2, "Workload"))
    rows = [("workload", f"{col['algorithm']}, {col['ranks']} ranks, {col['bytes_per_rank']} B per rank, "
                         f"{col['link_bw_mbps']} Mb/s links"),
            ("iterations complete", f"{col['iterations_complete']} of {col['iterations']}"),
            ("time per iteration (s)", ", ".join(_num(t, "{:.4f}") for t in col["time_s"])),
            ("analytical bound (s)", f"{_num(col['bound_s'], '{:.4f}')} ({col['bound_formula']})"),
            ("bound / measured (mean, worst)", f"{_num(col['bound_ratio'])}, {_num(col['bound_ratio_min'])}"),
            ("bus bandwidth (Mb/s)", _num(col.get("busbw_mbps"), "{:.1f}"))]
    out.append(("table", ("", ""), rows))
    out.append(("h", 2, "Packets"))
    out.append(("table", ("", ""), [
        ("sent / received / lost", f"{pk['sent']} / {pk['received']} / {pk['lost']}"),
        ("retransmitted / NAKs / timeouts", f"{pk['retransmitted']} / {pk['naks']} / {pk['timeouts']}"),
        ("port buffer drops", _num(pk["port_buffer_drops"])), ("ECN CE-marked", _num(pk["ecn_ce_marked"])),
        ("PFC pauses", _num((s.get("qos") or {}).get("pfc", {}).get("pauses")))]))
    lat = s.get("latency_by_class_us") or {}
    if lat:
        out.append(("h", 2, "One-way latency per class (us)"))
        out.append(("table", ("class", "packets", "p50", "p99", "p99.9", "max"),
                    [(c, _num(d["packets"]), _num(d["p50_us"], "{:.0f}"), _num(d["p99_us"], "{:.0f}"),
                      _num(d["p999_us"], "{:.0f}"), _num(d["max_us"], "{:.0f}")) for c, d in lat.items()]))
    fct = s.get("fct_slowdown") or {}
    if fct.get("by_tag"):
        out.append(("h", 2, "Message completion: slowdown against the ideal"))
        out.append(("p", fct["definition"]))
        out.append(("table", ("traffic", "messages", "p50", "p95", "p99", "max"),
                    [(t, _num(d["messages"]), _num(d.get("p50")), _num(d.get("p95")), _num(d.get("p99")),
                      _num(d.get("max"))) for t, d in fct["by_tag"].items()]))
    links = s.get("links") or {}
    if links.get("busiest"):
        out.append(("h", 2, "Busiest links"))
        out.append(("table", ("port", "to", "utilisation", "deepest queue (B)"),
                    [(b["port"], b["to"], _num(b["utilisation"], "{:.1%}"), _num(b["max_queue_bytes"], "{:.0f}"))
                     for b in links["busiest"]]))
    if lf.get("links"):
        out.append(("h", 2, "Links that drained least faithfully"))
        out.append(("table", ("port", "rate (Mb/s)", "windows (ms each)", "within tolerance", "slow", "fast",
                              "long-run drain / rate"),
                    [(c["port"], _num(c["rate_mbps"]), f"{_num(c['windows'])} ({_num(c['window_ms'], '{:.1f}')})",
                      _num(c["share"], "{:.1%}"), _num(c["slow_windows"]), _num(c["fast_windows"]),
                      _num(c["drain_ratio"], "{:.4f}"))
                     for c in lf["links"][:8]]))
    captions = dict(PLOTS)
    if drawn:
        out.append(("h", 2, "Plots"))
        out += [("img", f"plots/{name}", captions[name]) for name in drawn]
    out.append(("p", "Tables: messages, iterations, flows, latency, fct, links, link_utilisation (.parquet and "
                     ".csv); packets, queues, qp_events (.parquet); summary.json."))
    return out


def to_markdown(bl: list[tuple]) -> str:
    lines = []
    for b in bl:
        if b[0] == "h":
            lines += ["#" * b[1] + " " + b[2], ""]
        elif b[0] == "p":
            lines += [b[1], ""]
        elif b[0] == "table":
            header, rows = b[1], b[2]
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + "|".join("---" for _ in header) + "|")
            lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
            lines.append("")
        elif b[0] == "img":
            lines += [f"![{b[2]}]({b[1]})", ""]
    return "\n".join(lines)


def to_html(bl: list[tuple], run_dir: Path) -> str:
    e = html.escape
    body = []
    for b in bl:
        if b[0] == "h":
            cls = ""
            if b[2].startswith("Fidelity:"):
                cls = ' class="ok"' if b[2].startswith("Fidelity: VALID:") else ' class="bad"'
            body.append(f"<h{b[1]}{cls}>{e(b[2])}</h{b[1]}>")
        elif b[0] == "p":
            body.append(f"<p>{e(b[1])}</p>")
        elif b[0] == "table":
            head = "".join(f"<th>{e(h)}</th>" for h in b[1]) if any(b[1]) else ""
            rows = "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in r) + "</tr>" for r in b[2])
            body.append(f"<table>{'<tr>' + head + '</tr>' if head else ''}{rows}</table>")
        elif b[0] == "img":
            data = base64.b64encode((run_dir / b[1]).read_bytes()).decode()
            body.append(f'<figure><img alt="{e(b[2])}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{e(b[2])}</figcaption></figure>")
    style = ("body{font-family:sans-serif;max-width:70em;margin:1em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;"
             "text-align:left}.ok{color:#17692c}.bad{color:#b00020}img{max-width:100%}")
    title = e(bl[0][2]) if bl and bl[0][0] == "h" else "report"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title><style>{style}</style>"
            f"</head><body>{''.join(body)}</body></html>\n")


def write_report(run_dir: Path, summary: dict | None = None) -> Path:
    run_dir = Path(run_dir)
    summary = summary or json.loads((run_dir / "summary.json").read_text())
    drawn = draw_plots(run_dir)
    bl = blocks(summary, drawn)
    (run_dir / "report.md").write_text(to_markdown(bl))
    out = run_dir / "report.html"
    out.write_text(to_html(bl, run_dir))
    return out
