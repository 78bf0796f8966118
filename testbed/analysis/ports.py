"""ports.parquet / ports.csv: every switch egress port's counters over the traffic phase, worst port
first, as an operator reads `show interface counters` and `show qos interface` on a RoCE switch.

One row per switch egress port (the ports the agent's telemetry watches):
- port, and link: the port's two ends by node ("s0_0->s1_0");
- rate: the hardware fabric's Gb/s, and the emulated Mb/s it ran at (/ D);
- bytes drained during the traffic and utilisation (%, of the link's rate);
- queue depth over all its classes: its peak over the run, and the p99 of the telemetry's samples
  during the traffic;
- ECN: packets that could be marked (ECT) and those marked; buffer drops (the switch's own, by its
  buffer policy; a frame the emulator lost is the loss account's, not a port's);
- PFC: pauses received (this port's egress paused by the node at its far end) and the time it was
  paused (any class; hardware microseconds), and pauses sent (those this port's switch sent to the
  node at its far end: that node's port toward it was paused);
- CRC errors: frames this port sent that bit errors on its link damaged (a corrupt fault), which
  the far end counts on arrival.

Worst first: drops, then CRC errors, then paused time, then the p99 queue, then utilisation. Pure
functions of the telemetry series, the agent's end counters, the pause events and the corrupt
faults' counts.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from testbed.analysis.links import PortSeries, interface_ends, pause_spans

COLUMNS = ["port", "link", "hardware_gbps", "emulated_mbps", "bytes", "utilisation_pct", "queue_peak_bytes",
           "queue_p99_bytes", "ect_packets", "ecn_marked", "drops", "crc_errors", "pauses_received", "paused_us",
           "pauses_sent"]


def _union_ns(spans: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def _pauses(events: pd.DataFrame, end_ns: int) -> tuple[dict[str, int], dict[str, list[tuple[int, int]]]]:
    """Per paused interface: pauses asserted, and its [pause, resume) spans (to end_ns if never resumed)."""
    spans = pause_spans(events, end_ns)
    windows = {port: list(zip(g["start_ns"], g["end_ns"])) for port, g in spans.groupby("port")}
    return spans.groupby("port").size().to_dict(), windows


def port_counters(links: pd.DataFrame, series: list[PortSeries], fabric: dict, queues_end: list[dict],
                  pfc_events: pd.DataFrame, start_ns: int, end_ns: int, factor: float,
                  corrupted: dict[str, int] | None = None) -> pd.DataFrame:
    """The table (see the module's docstring). links: testbed.analysis.links.link_table's rows (rate,
    bytes drained, utilisation and peak queue of each port); queues_end: the agent's end counters
    per port and class; factor: D; corrupted: the frames each port's bit errors hit."""
    corrupted = corrupted or {}
    ends = interface_ends(fabric)
    q = pd.DataFrame(queues_end, columns=["port", "ect_pkts", "mark_pkts", "drop_pkts"])
    counted = q.groupby("port")[["ect_pkts", "mark_pkts", "drop_pkts"]].sum()
    pauses, spans = _pauses(pfc_events, end_ns)
    by_port = {s.port: s for s in series}
    rows = []
    for r in links.to_dict("records"):
        port = r["port"]
        node, far_node, far = ends.get(port, (port, "?", ""))
        s = by_port[port]
        depth = s.depth_bytes[(s.t_ns >= start_ns) & (s.t_ns <= end_ns)]
        c = counted.loc[port] if port in counted.index else {"ect_pkts": 0, "mark_pkts": 0, "drop_pkts": 0}
        rows.append({"port": port, "link": f"{node}->{far_node}",
                     "hardware_gbps": r["rate_mbps"] * factor / 1e3, "emulated_mbps": r["rate_mbps"],
                     "bytes": r["bytes"], "utilisation_pct": 100 * r["utilisation"],
                     "queue_peak_bytes": r["max_queue_bytes"],
                     "queue_p99_bytes": float(np.percentile(depth, 99)) if len(depth) else 0.0,
                     "ect_packets": int(c["ect_pkts"]), "ecn_marked": int(c["mark_pkts"]), "drops": int(c["drop_pkts"]),
                     "crc_errors": int(corrupted.get(port, 0)), "pauses_received": pauses.get(port, 0),
                     "paused_us": _union_ns(spans.get(port, [])) / factor / 1e3,
                     "pauses_sent": pauses.get(far, 0)})
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.sort_values(["drops", "crc_errors", "paused_us", "queue_p99_bytes", "utilisation_pct"], ascending=False,
                          kind="stable").reset_index(drop=True)
