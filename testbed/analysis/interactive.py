"""interactive.html: the report's time plots on one zoomable time axis (bokeh, its JavaScript inlined:
the page opens offline, copied anywhere). Zooming or panning one plot moves them all, so a queue
building, the pause it sets off, the rate cut it brings and the messages it delays line up. The
same series as the still plots (testbed.analysis.plotdata), in hardware microseconds since the
traffic's start; hovering a bar names its message or pause."""
from __future__ import annotations

import html
from pathlib import Path

import numpy as np
from bokeh.embed import file_html
from bokeh.layouts import column
from bokeh.models import (ColorBar, ColumnDataSource, CustomJSTickFormatter, Div, FixedTicker, HoverTool,
                          LinearColorMapper, Range1d)
from bokeh.palettes import Category10_10, Viridis256
from bokeh.plotting import figure
from bokeh.resources import INLINE

from testbed.analysis import plotdata
from testbed.runfolder import RunFolder

INTERACTIVE_NAME = "interactive.html"
TOOLS = "xpan,xwheel_zoom,box_zoom,reset,save"
X_LABEL = "time since traffic start (us, hardware time)"


def _figure(title: str, x_range: Range1d, height: int, **kw):
    f = figure(title=title, x_range=x_range, height=height, sizing_mode="stretch_width", tools=TOOLS,
               active_scroll="xwheel_zoom", x_axis_label=X_LABEL, output_backend="canvas", **kw)
    f.toolbar.logo = None
    return f


def _row_axis(f, labels: list[str]) -> None:
    """Rows 0..n-1 top down, each named."""
    f.y_range = Range1d(len(labels) - 0.5, -0.5)
    f.yaxis.ticker = FixedTicker(ticks=list(range(len(labels))))
    f.yaxis.formatter = CustomJSTickFormatter(args={"names": labels}, code="return names[tick] || ''")
    f.yaxis.major_label_text_font_size = "7pt"
    f.ygrid.grid_line_color = None


def _timeline(bars, x_range):
    ranks = plotdata.rank_names(bars)
    colours = np.where(bars["compute"], "lightgrey",
                       np.array(Category10_10)[bars["iteration"].to_numpy() % 10])
    src = ColumnDataSource({**{c: bars[c].to_numpy() for c in ("src", "dst", "op", "bytes", "iteration", "row",
                                                                 "start_us", "dur_us")},
                            "end_us": (bars["start_us"] + bars["dur_us"]).to_numpy(), "colour": colours})
    f = _figure("messages per sending rank, first packet to last, coloured by iteration (grey: compute)", x_range,
                max(160, 18 * len(ranks) + 80))
    f.hbar(y="row", left="start_us", right="end_us", height=0.76, fill_color="colour", line_color=None, source=src)
    f.add_tools(HoverTool(tooltips=[("", "@src → @dst, @op"), ("bytes", "@bytes"), ("iteration", "@iteration"),
                                    ("start (us)", "@start_us{0.000}"), ("took (us)", "@dur_us{0.000}")]))
    _row_axis(f, ranks)
    return f


def _steps(title: str, y_label: str, lines: list[plotdata.Steps], x_range, height: int = 300):
    f = _figure(title, x_range, height, y_axis_label=y_label)
    for i, line in enumerate(lines):
        f.step(line.t_us, line.y, mode="after", line_width=1.2, color=Category10_10[i % 10], legend_label=line.label)
    f.legend.click_policy = "hide"
    f.legend.label_text_font_size = "7pt"
    f.add_layout(f.legend[0], "right")
    return f


def _pauses(p: plotdata.Pauses, x_range):
    b = p.bars
    src = ColumnDataSource({**{c: b[c].to_numpy() for c in ("row", "port", "class", "start_us", "dur_us", "cause",
                                                              "ended_by")},
                            "end_us": (b["start_us"] + b["dur_us"]).to_numpy()})
    shown = f", the first {len(p.labels)} of {p.classes}" if p.classes > len(p.labels) else ""
    f = _figure(f"PFC pauses per paused port and class ({p.pauses} pauses; rows in order of first pause{shown})",
                x_range, max(160, 16 * len(p.labels) + 80))
    f.hbar(y="row", left="start_us", right="end_us", height=0.76, fill_color="firebrick", line_color=None, source=src)
    f.add_tools(HoverTool(tooltips=[("", "@port class @class"), ("paused (us)", "@dur_us{0.000}"),
                                    ("from (us)", "@start_us{0.000}"), ("cause", "@cause"), ("ended by", "@ended_by")]))
    _row_axis(f, p.labels)
    return f


def _cnps(d: plotdata.Dcqcn, x_range):
    f = _figure("CNPs each of those queue pairs received", x_range, max(120, 12 * len(d.rates) + 70))
    for i, (line, t) in enumerate(zip(d.rates, d.cnps)):
        f.scatter(t, np.full(len(t), i), marker="dash", angle=np.pi / 2, size=8, color=Category10_10[i % 10])
    _row_axis(f, [line.label for line in d.rates])
    return f


def _utilisation(u: plotdata.Utilisation, x_range):
    n, bins = u.grid.shape
    shown = f"{n} switch egress ports" if u.carried == n else f"the busiest {n} of {u.carried} switch egress ports"
    f = _figure(f"link utilisation, {shown} that carried traffic ({u.bin_us:.3g} us bins)", x_range,
                max(160, 12 * n + 90))
    mapper = LinearColorMapper(palette=Viridis256, low=0, high=1)
    # the image's row i spans y i +- 0.5, drawn top down by the row axis
    f.image(image=[u.grid], x=u.start_us, y=-0.5, dw=bins * u.bin_us, dh=n, color_mapper=mapper)
    f.add_layout(ColorBar(color_mapper=mapper, title="fraction of the link's rate"), "right")
    f.add_tools(HoverTool(tooltips=[("utilisation", "@image{0.000}")]))
    _row_axis(f, u.labels)
    return f


def layout(rf: RunFolder, summary: dict, t0: int, t1: int, factor: float):
    """The page's plots, one x range for all, or None if the run has no time series to show."""
    end_us = plotdata.hw_us(t1, t0, factor)
    x_range = Range1d(0, max(end_us, 1e-9))
    figs = []
    bars = plotdata.message_bars(rf, t0, factor)
    if not bars.empty:
        figs.append(_timeline(bars, x_range))
    queues = plotdata.queue_steps(rf, t0, t1, factor, top=2 * plotdata.BUSIEST_PORTS)
    if queues:
        figs.append(_steps(f"queue depth per class, the {len(queues)} deepest switch queues (click a name to hide it)",
                           "queued (KB)", queues, x_range))
    pauses = plotdata.pause_bars(rf, t0, t1, factor)
    if pauses is not None:
        figs.append(_pauses(pauses, x_range))
    dcqcn = plotdata.dcqcn_steps(rf, t0, t1, factor)
    if dcqcn is not None:
        figs.append(_steps(f"DCQCN rate per queue pair, the {len(dcqcn.rates)} cut most ({dcqcn.cuts} cuts in all)",
                           "rate (Gb/s, hardware)", dcqcn.rates, x_range))
        figs.append(_cnps(dcqcn, x_range))
    util = plotdata.utilisation_grid(rf, factor)
    if util is not None:
        figs.append(_utilisation(util, x_range))
    if not figs:
        return None
    e = html.escape
    head = Div(text=f"<h2>{e(summary['scenario'])}: {e(summary['status'].upper())}</h2>"
                    f"<p>Run {e(summary['run_id'])} at D = {factor:g}. Scroll to zoom time, drag to pan, reset to "
                    f"see the whole run: every plot follows. Times in hardware microseconds since the traffic's "
                    f"start.</p>", sizing_mode="stretch_width")
    return column([head, *figs], sizing_mode="stretch_width")


def write_interactive(rf: RunFolder, summary: dict, t0: int, t1: int, factor: float) -> Path | None:
    """interactive.html in the run folder (an earlier one removed if the run has nothing to show)."""
    out = rf.root / INTERACTIVE_NAME
    page = layout(rf, summary, t0, t1, factor)
    if page is None:
        out.unlink(missing_ok=True)
        return None
    out.write_text(file_html(page, INLINE, f"{summary['scenario']}: time plots"))
    return out
