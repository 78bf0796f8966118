"""`testbed status`: a compact live table of a running emulation, read from its northbound API
(the busiest switch ports first, as `show interface counters` would list them), refreshed twice a
second until the run ends."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

REFRESH_S = 0.5


class ApiGone(RuntimeError):
    pass


def fetch(port: int, path: str, timeout_s: float = 5.0) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout_s) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        raise ApiGone(f"no run's API answers on 127.0.0.1:{port} ({getattr(e, 'reason', e)})") from None


def worst_first(ports: list[dict]) -> list[dict]:
    """Ports that paused or dropped first, then by utilisation, then by queue."""
    return sorted(ports, key=lambda p: (-(p["dropped"] > 0), -bool(p["paused"]), -(p["utilisation_pct"] or 0.0),
                                        -p["queue_bytes"]))


def render(ports_doc: dict, progress_doc: dict, top: int):
    head = Text(f"{ports_doc['scenario']}  run {ports_doc['run']}  D = {ports_doc['dilation_factor']:g}  "
                f"t = {ports_doc['t_s']:.1f} s wall")
    p = progress_doc.get("progress")
    if p:
        frac = p["done_fraction"]
        head.append(f"  messages {p['messages_done']}/{p['messages']}"
                    + (f"  ({100 * frac:.0f}% of bytes)" if frac is not None else ""))
        sync = (p.get("training") or {}).get("sync_share_last_window")
        if sync is not None:
            head.append(f"  sync share {100 * sync:.0f}% (last {p['training']['window_us_hw']:.0f} us hw)")
    t = Table(box=None, pad_edge=False, header_style="bold")
    for col, just in (("link", "left"), ("util %", "right"), ("Gb/s hw", "right"), ("queue KB", "right"),
                      ("peak KB", "right"), ("ECN", "right"), ("drops", "right"), ("PFC rx", "right"),
                      ("PFC tx", "right"), ("paused", "left"), ("CRC", "right")):
        t.add_column(col, justify=just)
    for port in worst_first(ports_doc["ports"])[:top]:
        util = port["utilisation_pct"]
        t.add_row(port["link"], "-" if util is None else f"{util:.0f}",
                  "-" if port["tx_gbps_hw"] is None else f"{port['tx_gbps_hw']:.1f}",
                  f"{port['queue_bytes'] / 1e3:.1f}", f"{max(c['queue_peak_bytes'] for c in port['classes']) / 1e3:.1f}",
                  str(port["ecn_marked"]), str(port["dropped"]), str(port["pauses_received"]),
                  str(port["pauses_sent"]),
                  ",".join(c["class_name"] for c in port["classes"] if c["paused"]) or "",
                  str(port["crc_errors"]))
    foot = Text(f"{len(ports_doc['ports'])} switch ports; rates over the last {ports_doc['rate_window_s']:.1f} s",
                style="dim")
    return Group(head, t, foot)


def watch(port: int, top: int, once: bool, console: Console | None = None) -> int:
    console = console or Console()
    try:
        doc, prog = fetch(port, "/api/v1/ports"), fetch(port, "/api/v1/progress")
    except ApiGone as e:
        console.print(str(e))
        return 1
    if once:
        console.print(render(doc, prog, top))
        return 0
    with Live(render(doc, prog, top), console=console, refresh_per_second=4) as live:
        while True:
            time.sleep(REFRESH_S)
            try:
                doc, prog = fetch(port, "/api/v1/ports"), fetch(port, "/api/v1/progress")
            except ApiGone:
                break
            live.update(render(doc, prog, top))
    console.print("the run's API has gone: its traffic phase ended")
    return 0
