"""Analysis of what the transport did per queue pair: recoveries, CNPs, DCQCN rate trajectories,
fairness over the steady state, the bottleneck queue then, and the engine's own load. Pure
functions of a run folder's raw files and the tables testbed.analysis.summary built from them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from testbed import records
from testbed.runfolder import RunFolder

# The steady state: the span in which every collective flow is delivering, less this leading
# fraction of it (the start-up transient: every queue pair starts at line rate).
STEADY_SKIP_FRACTION = 0.3
TELEMETRY_GRID_NS = 1_000_000


def qp_event_table(rf: RunFolder) -> pd.DataFrame:
    path = rf.qp_events
    ev = pd.DataFrame(records.read(path, records.QP_EVENT_DTYPE)) if path.exists() else pd.DataFrame(
        columns=[n for n in records.QP_EVENT_DTYPE.names])
    ev = ev.drop(columns="_pad")
    ev["event"] = ev["kind"].map(records.QP_EVENT_NAMES).astype("string")
    return ev.drop(columns="kind").sort_values("t_ns", kind="stable").reset_index(drop=True)


def jain(x) -> float | None:
    x = np.asarray(x, dtype="float64")
    return float(x.sum() ** 2 / (len(x) * (x ** 2).sum())) if len(x) and (x ** 2).sum() > 0 else None


def steady_window(pkts: pd.DataFrame, flows: list[int]) -> tuple[int, int] | None:
    """(start_ns, end_ns) of the steady state of these flows, by arrival time, or None when
    they are never all delivering at once."""
    got = pkts[(pkts["accepted"] == True) & pkts["flow"].isin(flows)]  # noqa: E712 (nullable)
    if got.empty or got["flow"].nunique() < len(flows):
        return None
    by_flow = got.groupby("flow")["rx_ns"]
    start, end = int(by_flow.min().max()), int(by_flow.max().min())
    if end <= start:
        return None
    return start + int((end - start) * STEADY_SKIP_FRACTION), end


def queue_depths(tel: pd.DataFrame, t0: int, t1: int) -> pd.DataFrame:
    """Each queue's depth on a regular grid over [t0, t1): telemetry rows only exist where a
    queue changed, so each grid point takes the queue's last row before it."""
    grid = np.arange(t0, t1, TELEMETRY_GRID_NS, dtype="int64")
    out = {}
    for (port, cls), g in tel.groupby(["port", "class"]):
        t = g["t_ns"].to_numpy()
        d = g["depth_bytes"].to_numpy()
        i = np.searchsorted(t, grid, side="right") - 1
        out[(port, int(cls))] = np.where(i >= 0, d[np.maximum(i, 0)], 0)
    return pd.DataFrame(out, index=grid)


def bottleneck(tel: pd.DataFrame, window: tuple[int, int], class_names: dict) -> dict | None:
    """The switch queue with the largest mean depth in the window: its depth percentiles then,
    and its peak over the whole run (the start-up transient included)."""
    if tel is None or tel.empty:
        return None
    depths = queue_depths(tel, *window)
    if depths.empty:
        return None
    key = depths.mean().idxmax()
    d = depths[key].to_numpy(dtype="float64")
    whole = tel[(tel["port"] == key[0]) & (tel["class"] == key[1])]["depth_bytes"]
    port, cls = str(key[0]), int(key[1])
    return {"port": port, "class": cls, "class_name": class_names.get(cls),
            "samples": int(len(d)), "mean_bytes": float(d.mean()),
            "p50_bytes": float(np.percentile(d, 50)), "p95_bytes": float(np.percentile(d, 95)),
            "p99_bytes": float(np.percentile(d, 99)), "max_bytes": float(d.max()),
            "run_max_bytes": float(whole.max())}


def flow_table(pkts: pd.DataFrame, msgs: pd.DataFrame, events: pd.DataFrame, plan: dict,
               engine: dict) -> pd.DataFrame:
    rows = []
    counts = events.groupby(["flow", "event"]).size().unstack(fill_value=0) if len(events) else pd.DataFrame()
    rates = events[events["event"].str.startswith("rate_", na=False)] if len(events) else events
    min_rate = rates.groupby("flow")["rate_bps"].min() if len(rates) else pd.Series(dtype="float64")
    sent = pkts.groupby("flow").size()
    retx = pkts[pkts["retransmit"]].groupby("flow")["bytes"].agg(["size", "sum"])
    per_msg = msgs.groupby("flow")[["bytes"] + (["recv_bytes"] if "recv_bytes" in msgs else [])].agg(["size", "sum"])
    for f in plan["flows"]:
        i = f["id"]
        c = counts.loc[i] if i in counts.index else pd.Series(dtype="int64")
        st = engine["flows"][i]
        m = per_msg.loc[i] if i in per_msg.index else None
        rows.append({
            "flow": i, "src": f["src"], "dst": f["dst"], "tag": f["tag"], "comm": f.get("comm", ""), "dscp": f["dscp"],
            "udp_sport": 49152 + i % 16384, "messages": int(m[("bytes", "size")]) if m is not None else 0,
            "bytes": int(m[("bytes", "sum")]) if m is not None else 0,
            "delivered_bytes": int(m[("recv_bytes", "sum")]) if m is not None and "recv_bytes" in msgs else None,
            "packets_sent": int(sent.get(i, 0)),
            "retransmitted_packets": int(retx["size"].get(i, 0)),
            "retransmitted_bytes": int(retx["sum"].get(i, 0)),
            "naks_sent": int(c.get("nak_sent", 0)), "naks_received": int(c.get("nak_received", 0)),
            "go_backs": int(c.get("go_back_nak", 0)), "timeouts": int(st["timeouts"]),
            "cnps_sent": int(c.get("cnp_sent", 0)), "cnps_received": int(c.get("cnp_received", 0)),
            "rate_cuts": int(c.get("rate_cut", 0)),
            "min_rate_bps": float(min_rate[i]) if i in min_rate.index else None,
            "final_rate_bps": st.get("final_rate_bps"),
        })
    return pd.DataFrame(rows)


def transport_summary(rf: RunFolder, pkts: pd.DataFrame, msgs: pd.DataFrame, plan: dict, engine: dict,
                      tel: pd.DataFrame | None, class_names: dict, cores: dict,
                      duration_s: float) -> tuple[dict, pd.DataFrame]:
    """The summary's transport section, and the per-queue-pair table (written as flows.parquet/csv)."""
    events = qp_event_table(rf)
    events.to_parquet(rf.table("qp_events"), index=False)
    flows = flow_table(pkts, msgs, events, plan, engine)
    flows.to_parquet(rf.table("flows"), index=False)
    flows.to_csv(rf.flows_csv, index=False)
    collective = [f["id"] for f in plan["flows"] if f["tag"] == "collective"]
    window = steady_window(pkts, collective) if len(collective) > 1 else None
    steady = None
    if window:
        got = pkts[(pkts["accepted"] == True) & (pkts["rx_ns"] >= window[0]) & (pkts["rx_ns"] < window[1])]  # noqa: E712
        span_s = (window[1] - window[0]) / 1e9
        mbps = (got.groupby("flow")["bytes"].sum().reindex(collective, fill_value=0) * 8 / span_s / 1e6)
        steady = {"start_ns": window[0], "end_ns": window[1], "duration_s": span_s,
                  "flows": len(collective), "jain_index": jain(mbps.to_numpy()),
                  "flow_mbps": {str(k): float(v) for k, v in mbps.items()},
                  "total_mbps": float(mbps.sum()),
                  "bottleneck_queue": bottleneck(tel, window, class_names)}
    complete = msgs[msgs["complete"]]
    fct_s = ((complete["acked_ns"] - complete["release_ns"]) / 1e9).where(complete["acked_ns"] > 0)
    wrong = msgs[msgs["complete"] & (msgs["recv_bytes"] != msgs["bytes"])] if "recv_bytes" in msgs else msgs.iloc[:0]
    hosts = []
    for h in engine["hosts"]:
        hosts.append({"host": h["name"],
                      "tx_pps": (h["tx_packets"] + h["acks_tx"] + h.get("cnps_tx", 0)) / max(duration_s, 1e-9),
                      "rx_pps": (h["rx_packets"] + h["acks_rx"] + h.get("cnps_rx", 0)) / max(duration_s, 1e-9),
                      "receiver_socket_drops": h["socket_drops"], "icrc_errors": h.get("icrc_errors", 0),
                      "nic_refused": h["nic_full"], "lead_dry_ms": h["lead_dry_ns"] / 1e6})
    engine_cores, ovs_cores = cores.get("engine"), cores.get("ovs-vswitchd")
    total_pps = sum(x["tx_pps"] + x["rx_pps"] for x in hosts)
    data_packets = sum(h["tx_packets"] for h in engine["hosts"])
    summary = {
        "reliability": plan["transport"]["reliability"], "cc": plan["transport"]["cc"],
        "dcqcn": engine.get("dcqcn"),
        "retransmitted_packets": int(flows["retransmitted_packets"].sum()) if len(flows) else 0,
        "retransmitted_bytes": int(flows["retransmitted_bytes"].sum()) if len(flows) else 0,
        "naks": int(flows["naks_received"].sum()) if len(flows) else 0,
        "go_backs": int(flows["go_backs"].sum()) if len(flows) else 0,
        "timeouts": int(flows["timeouts"].sum()) if len(flows) else 0,
        "cnps_sent": int(flows["cnps_sent"].sum()) if len(flows) else 0,
        "cnps_received": int(flows["cnps_received"].sum()) if len(flows) else 0,
        "rate_cuts": int(flows["rate_cuts"].sum()) if len(flows) else 0,
        "icrc_errors": int(sum(x["icrc_errors"] for x in hosts)),
        "messages_with_wrong_bytes": int(len(wrong)),
        "message_fct_s": {"p50": float(fct_s.quantile(0.5)) if fct_s.notna().any() else None,
                          "p99": float(fct_s.quantile(0.99)) if fct_s.notna().any() else None,
                          "max": float(fct_s.max()) if fct_s.notna().any() else None},
        "steady_state": steady,
        "agents": {"hosts": hosts, "engine_cores": engine_cores, "ovs_vswitchd_cores": ovs_cores,
                   "engine_to_ovs_cpu": engine_cores / ovs_cores if engine_cores and ovs_cores else None,
                   "packets_per_s": total_pps,
                   # CPU per data packet sent (its receive and its share of ACKs and CNPs included)
                   "engine_cpu_us_per_data_packet": engine["cpu_s"] / data_packets * 1e6 if data_packets else None,
                   "data_plane_passes": engine.get("wakeups"),
                   "max_host_pps": max((x["tx_pps"] + x["rx_pps"] for x in hosts), default=0.0),
                   "receiver_socket_drops": int(sum(x["receiver_socket_drops"] for x in hosts))},
    }
    return summary, flows


# Beyond this factor either way the dilated control loop and the fabric it runs on disagree.
MAX_DILATION_MISMATCH = 2.0


def time_dilation(dcqcn: dict | None, ref_base_rtt_us: float, min_one_way_us: float | None) -> dict:
    """What runs dilated and what does not: DCQCN's timers are multiplied by its time scale, the
    fabric's own delays (Open vSwitch's per-hop latency, the kernel's) are what this machine makes
    them. Its base RTT is taken as twice the fastest data frame's one-way latency: what Open vSwitch
    and the kernel add with the queues empty (an emulated link's serialization is its shaper's,
    which an idle shaper does not impose, and an ACK is smaller than a data frame)."""
    base = 2 * min_one_way_us if min_one_way_us is not None else None
    out = {"dcqcn_time_scale": dcqcn["time_scale"] if dcqcn else None, "fabric_base_rtt_us": base,
           "fabric_base_rtt_definition": "twice the smallest one-way latency of a data frame",
           "reference_base_rtt_us": ref_base_rtt_us if dcqcn else None,
           "dilated_reference_rtt_us": ref_base_rtt_us * dcqcn["time_scale"] if dcqcn else None,
           "rtt_ratio": None, "warning": None}
    if dcqcn and base:
        ratio = base / out["dilated_reference_rtt_us"]
        out["rtt_ratio"] = ratio
        if not 1 / MAX_DILATION_MISMATCH <= ratio <= MAX_DILATION_MISMATCH:
            out["warning"] = (f"DCQCN runs {dcqcn['time_scale']:g}x dilated, as if the fabric's base RTT were "
                              f"{out['dilated_reference_rtt_us'] / 1e3:.2f} ms ({ref_base_rtt_us:g} us dilated); "
                              f"the emulated fabric's is {base / 1e3:.2f} ms, {ratio:.2g}x that: congestion "
                              f"feedback arrives {'later' if ratio > 1 else 'sooner'}, against DCQCN's timers, "
                              f"than on the reference fabric")
    return out
