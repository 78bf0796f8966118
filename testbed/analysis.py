"""Analysis of a run folder, re-runnable: raw files in, tables and summary.json out.

    packets.parquet     one row per packet sent: flow, msg, seq, psn, tx_ns, rx_ns, bytes, ecn
    messages.parquet    one row per message (a collective step): timing from release to arrival,
                        FCT (release to fully acknowledged), payload bytes delivered
    flows.parquet       one row per queue pair: retransmissions, NAKs, timeouts, CNPs, rate cuts
    qp_events.parquet   every NAK, go-back, timeout, CNP and DCQCN rate change, per queue pair
    iterations.parquet  one row per collective iteration: time, analytical bound, ratio
    latency.parquet     one-way latency distribution per (flow, DSCP), and per DSCP over all flows (flow -1)
    nic_queues.parquet  every host NIC class's queue depth on a 1 ms grid (from the records)
    fct.parquet         every network message's completion time against the ideal, and the slowdown
    links.parquet       one row per switch egress port: bytes, utilisation, queue
    link_utilisation.parquet  per port and time bin: utilisation (the heat map's data)
    queues.parquet      the queue telemetry (every sample of every queue that changed)
    summary.json        the numbers a user reads first (schema below, SUMMARY_VERSION)

Every table except the per-packet and per-sample ones (packets, queues, qp_events) is also
written as CSV beside its parquet file. report.md and report.html (testbed.report) put the numbers
and plots together.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd

from testbed import link_analysis, records
from testbed.bounds import planned_bound
from testbed.collectives import Message, busbw_factor
from testbed.flow_analysis import class_latency, class_of_dscp, fct_table, latency_table, slowdown_summary
from testbed.packets import HEADER_BYTES
from testbed.qos_analysis import pfc_events, qos_summary
from testbed.regress import check_expectations
from testbed.scenario import DcqcnSpec, Scenario
from testbed.host_analysis import host_fidelity, nic_queue_series, nic_queues
from testbed.transport_analysis import time_dilation, transport_summary
from testbed.workload import pipeline_job

SUMMARY_VERSION = 1
NO_SINGLE_S = ("pipeline", "chakra", "simai")
# Fidelity thresholds: the run says it could not keep up when any is crossed.
MAX_MACHINE_BUSY_FRACTION = 0.97
# Open vSwitch may lag for an instant; lagging this often means the fabric ran above its capacity.
MAX_INPUT_BUSY_FRACTION = 0.05


def _read_json(path: Path):
    return json.loads(path.read_text())


def packet_table(raw: Path, messages: pd.DataFrame) -> pd.DataFrame:
    tx = pd.DataFrame(records.read(raw / "tx.bin", records.TX_DTYPE)).drop(columns="_pad")
    rx = pd.DataFrame(records.read(raw / "rx.bin", records.RX_DTYPE)).drop(columns="_pad")
    # the send time in each packet's stamp identifies the transmission, retransmissions included
    rx = rx.drop_duplicates(["msg", "seq", "tx_ns"])
    df = tx.merge(rx[["msg", "seq", "tx_ns", "rx_ns", "ecn", "accepted", "dscp"]], on=["msg", "seq", "tx_ns"],
                  how="left")
    df["flow"] = messages["flow"].to_numpy()[df["msg"].to_numpy()]
    df = df.rename(columns={"frame_bytes": "bytes"})
    df["rx_ns"] = df["rx_ns"].astype("Int64")
    for col in ("ecn", "dscp"):
        df[col] = df[col].astype("UInt8")
    df["accepted"] = df["accepted"].astype("boolean")
    df["retransmit"] = (df["flags"] & 1).astype(bool)
    depart = df["depart_ns"].astype("Int64").where(df["depart_ns"] >= 0)
    df["depart_ns"] = depart
    # one-way latency from the wire: departure onto the host link to the kernel's arrival time;
    # the wait in the sender's own NIC queue before that is NIC queueing, apart
    df["latency_ns"] = df["rx_ns"] - depart
    df["nic_queue_ns"] = depart - df["tx_ns"]
    return df[["flow", "msg", "seq", "psn", "retransmit", "cls", "tx_ns", "depart_ns", "rx_ns", "latency_ns",
               "nic_queue_ns", "bytes", "ecn", "dscp", "accepted"]]


def add_wire_times(msgs: pd.DataFrame, pkts: pd.DataFrame) -> None:
    """Each message's first departure onto its host link, its wait in the NIC before it, and its
    FCT from the wire: first departure to the kernel's arrival time of its last packet."""
    first = pkts[(pkts["seq"] == 0) & ~pkts["retransmit"]].groupby("msg")["depart_ns"].min()
    msgs["first_depart_ns"] = first.reindex(msgs["msg"]).astype("Int64").to_numpy()
    msgs["nic_wait_ns"] = msgs["first_depart_ns"] - msgs["release_ns"]
    msgs["fct_ns"] = msgs["complete_ns"] - msgs["first_depart_ns"]


def _iteration_messages(msgs: pd.DataFrame, plan: dict, iteration: int) -> list[Message]:
    """One iteration's messages as planned (the schedule and the plan's dependencies)."""
    deps = {m[0]: tuple(m[3]) for m in plan["messages"]}
    return [Message(int(r.msg), iteration, int(r.step), r.src, r.dst, int(r.bytes), deps[int(r.msg)], op=r.op,
                    duration_ns=int(r.duration_ns))
            for r in msgs[msgs["iteration"] == iteration].itertuples()]


def message_table(raw: Path) -> pd.DataFrame:
    sched = pd.DataFrame(_read_json(raw / "schedule.json")).set_index("id")
    timing = pd.DataFrame(_read_json(raw / "messages.json")).set_index("id")
    df = sched.join(timing.drop(columns=["bytes"]))
    df.index.name = "msg"
    df = df.reset_index()
    for col in ("release_ns", "first_tx_ns", "last_tx_ns", "complete_ns", "acked_ns"):
        df[col] = df[col].where(df[col] > 0).astype("Int64")
    df["complete"] = (df["recv_packets"] >= df["packets"]) & df["complete_ns"].notna()
    df["duration_ns"] = df["complete_ns"] - df["release_ns"]
    # the sender's work completion: release to the last byte acknowledged (the data plane's clock)
    df["wc_ns"] = df["acked_ns"] - df["release_ns"]
    return df


def iteration_table(msgs: pd.DataFrame, bound: float) -> pd.DataFrame:
    """Per iteration of the workload (its messages and compute steps): time from the first
    release to the last completion, against the analytical bound."""
    rows = []
    for it, g in msgs.groupby("iteration"):
        complete = bool(g["complete"].all())
        start = g["release_ns"].min()
        end = g["complete_ns"].max() if complete else pd.NA
        t = (end - start) / 1e9 if complete else np.nan
        rows.append({"iteration": it, "complete": complete, "start_ns": start, "end_ns": end,
                     "time_s": t, "bound_s": bound, "bound_ratio": bound / t if complete else np.nan})
    return pd.DataFrame(rows)


def _jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


FAULT_WINDOW_NS = 5_000_000_000


def fault_table(raw: Path, pkts: pd.DataFrame) -> list[dict]:
    """Each fault with the controller's reaction (time to the last affected route confirmed by a
    barrier) and the traffic's: when the first packet in flight was lost, when every flow that
    lost packets had delivered again, and how many were lost."""
    events = _jsonl(raw / "controller_events.jsonl")
    done = [e for e in events if e["event"] == "reroute_done"]
    out = []
    for f in _jsonl(raw / "faults.jsonl"):
        t = f["t_ns"]
        after = [e for e in done if e["t_ns"] >= t]
        window = pkts[(pkts["tx_ns"] >= t - 50_000_000) & (pkts["tx_ns"] <= t + FAULT_WINDOW_NS)]
        lost = window[window["rx_ns"].isna()]
        recovered_ns = None
        if len(lost):
            ends = []
            for flow, g in lost.groupby("flow"):
                later = pkts[(pkts["flow"] == flow) & (pkts["tx_ns"] > g["tx_ns"].max()) & (pkts["accepted"] == True)]
                ends.append(later["rx_ns"].min() if len(later) else None)
            recovered_ns = None if any(e is None or pd.isna(e) for e in ends) else int(max(ends))
        out.append({**f, "reroute_ms": (after[0]["t_ns"] - t) / 1e6 if after else None,
                    "lost_packets_around": int(len(lost)),
                    "traffic_affected_ms": (int(lost["tx_ns"].min()) - t) / 1e6 if len(lost) else None,
                    "traffic_recovered_ms": (recovered_ns - t) / 1e6 if recovered_ns else None})
    return out


def switch_tx_packets(queues: list[dict], fabric: dict) -> dict[str, int]:
    """Packets each switch sent out of its ports during the run (from the ports' qdiscs)."""
    switches = {s["name"] for s in fabric["switches"]}
    out: dict[str, int] = {}
    for q in queues:
        if q["node"] in switches:
            out[q["node"]] = out.get(q["node"], 0) + q["sent_packets"]
    return out


def background_flows(msgs: pd.DataFrame, tags: pd.Series, bw_bps: float) -> list[dict]:
    """Completion of traffic outside the collective (bulk, victim), against its time alone at
    line rate."""
    out = []
    for _, m in msgs[tags.isin(["bulk", "victim"])].iterrows():
        ideal = m["bytes"] * 8 / bw_bps
        fct = (m["complete_ns"] - m["release_ns"]) / 1e9 if m["complete"] else None
        out.append({"msg": int(m["msg"]), "tag": m["tag"], "src": m["src"], "dst": m["dst"], "bytes": int(m["bytes"]),
                    "fct_s": fct, "ideal_s": ideal, "slowdown": fct / ideal if fct else None})
    return out


def _write(df: pd.DataFrame, run_dir: Path, name: str, csv: bool = True) -> None:
    df.to_parquet(run_dir / f"{name}.parquet", index=False)
    if csv:
        df.to_csv(run_dir / f"{name}.csv", index=False)


def heatmap_bin_ms(duration_s: float, max_bins: int = 200) -> float:
    """The smallest of 1, 2, 5, 10, 20, 50... ms that keeps the heat map under max_bins columns."""
    for step in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000):
        if duration_s * 1000 / step <= max_bins:
            return float(step)
    return 10000.0


def _pct(series: pd.Series, q: float) -> float | None:
    s = series.dropna()
    return float(np.percentile(s.to_numpy(dtype="float64"), q)) if len(s) else None


def link_deltas(start: dict[str, dict], end: dict[str, dict]) -> dict[str, dict]:
    """Per interface: what its kernel counters moved between the two readings."""
    return {name: {k: v - start.get(name, {}).get(k, 0) for k, v in c.items()} for name, c in end.items()}


def ovs_internal_drops(moved: dict[str, dict], switches: set[str], accounted: int) -> int:
    """Frames Open vSwitch's ports took in during the traffic but never sent on, less those
    already accounted for on the way (dropped or still held by a switch port's queue, dropped at
    ovs-vswitchd's receive sockets): pipeline drops and sends the kernel refused, which OVS drops
    silently. Any non-RoCE frame it dropped counts too, so this can only over-report."""
    ports = [d for name, d in moved.items() if name.rsplit("-eth", 1)[0] in switches]
    return max(0, sum(d["rx_packets"] - d["tx_packets"] for d in ports) - accounted)


def frame_bytes(pkts: pd.DataFrame, sc: dict) -> int:
    """The run's largest frame on the wire: the one-frame quantum of the fidelity rules."""
    return int(pkts["bytes"].max()) if len(pkts) else sc["workload"]["payload_bytes"] + HEADER_BYTES


def link_views(run_dir: Path, raw: Path, tel: pd.DataFrame | None, fabric_doc: dict, sc: dict, engine: dict,
               pkts: pd.DataFrame) -> tuple[dict, dict]:
    """Per-link tables (links, link_utilisation) and the drain-rate fidelity verdict, from the
    queue telemetry over the traffic phase."""
    run = sc["run"]
    series = link_analysis.port_series(tel) if tel is not None else []
    rates, peers = link_analysis.port_rates(fabric_doc, sc["fabric"]["bw_mbps"])
    start, end = engine["start_ns"], engine["end_ns"]
    frame = frame_bytes(pkts, sc)
    fid = link_analysis.link_fidelity(
        series, rates, frame, run["fidelity_tolerance"], run["fidelity_min_share"],
        link_analysis.pause_windows(pfc_events(raw), end))
    links = link_analysis.link_table(series, rates, peers, start, end)
    _write(links, run_dir, "links")
    bin_ms = heatmap_bin_ms((end - start) / 1e9)
    _write(link_analysis.utilisation(series, rates, start, end, bin_ms), run_dir, "link_utilisation")
    busiest = links.sort_values("utilisation", ascending=False).head(5)
    return {"ports": int(len(links)), "utilisation_bin_ms": bin_ms,
            "mean_utilisation": float(links["utilisation"].mean()) if len(links) else None,
            "busiest": busiest[["port", "to", "utilisation", "max_queue_bytes"]].to_dict("records")}, fid


def resent_in_flight_at_end(pkts: pd.DataFrame, end_ns: int, in_fault: pd.Series) -> int:
    """Copies go-back-N resent whose data another copy delivered, never received, and sent less
    than the run's longest one-way latency before the traffic ended: they were still on their way
    when the receivers stopped listening (the engine ends once every message is acknowledged), so
    they are not losses. A CI run of a k=8 fat-tree at 10 Mb/s had 352, every one's data delivered,
    sent 4-609 ms before the end against a 955 ms longest latency. Not those around a fault, which
    are its."""
    received = pkts["rx_ns"].notna()
    if received.all() or not received.any():
        return 0
    longest = int(pkts.loc[received, "latency_ns"].max())
    late = ~received & pkts["retransmit"].astype(bool) & (pkts["tx_ns"] > end_ns - longest) & ~in_fault
    if not late.any():
        return 0
    delivered = pd.MultiIndex.from_frame(pkts.loc[received, ["msg", "seq"]])
    return int(pd.MultiIndex.from_frame(pkts.loc[late, ["msg", "seq"]]).isin(delivered).sum())


def analyze(run_dir: Path) -> dict:
    run_dir = Path(run_dir)
    raw = run_dir / "raw"
    manifest = _read_json(run_dir / "manifest.json")
    sc = manifest["scenario"]
    engine = _read_json(raw / "engine.json")
    msgs = message_table(raw)
    pkts = packet_table(raw, msgs)
    add_wire_times(msgs, pkts)
    plan = _read_json(raw / "plan.json")
    n = len(manifest["ranks"])
    bw_bps = sc["fabric"]["bw_mbps"] * 1e6
    S = sc["workload"]["bytes_per_rank"]
    workload = sc["workload"]["type"]
    tags = msgs["tag"] if "tag" in msgs else pd.Series("collective", index=msgs.index)
    if workload == "pipeline":
        job = pipeline_job(Scenario.from_dict(sc))
    first = _iteration_messages(msgs, plan, 0) if workload in ("pipeline", "chakra", "simai") else []
    bound, formula, bound_terms = planned_bound(workload, n, S, bw_bps, first)
    iters = iteration_table(msgs[tags.isin(["collective", "compute"])], bound)
    _write(pkts, run_dir, "packets", csv=False)
    _write(msgs, run_dir, "messages")
    _write(iters, run_dir, "iterations")

    sent = len(pkts)
    received = int(pkts["rx_ns"].notna().sum())
    lat_us = pkts["latency_ns"].astype("float64") / 1e3
    queues = _read_json(raw / "queues_end.json") if (raw / "queues_end.json").exists() else []
    fabric_doc = _read_json(raw / "fabric.json")
    switches = {sw["name"] for sw in fabric_doc["switches"]}
    # A host NIC's leaf "drops" what the engine offered while it was full (paused): the engine got
    # ENOBUFS and kept the packet, so only switch ports' leaf drops are losses.
    qdisc_drops = int(sum(q["drops"] for q in queues if q["node"] in switches))
    # Packets still in a queue when the traffic ended (a spurious retransmission behind a pause).
    queued_at_end = int(sum(q["qlen"] for q in queues))
    switch_queued = int(sum(q["qlen"] for q in queues if q["node"] in switches))
    ovs_socket_drops = sum(_read_json(raw / "ovs_socket_drops_end.json").values()) \
        if (raw / "ovs_socket_drops_end.json").exists() else 0
    links0 = _read_json(raw / "links_start.json") if (raw / "links_start.json").exists() else {}
    links1 = _read_json(raw / "links_end.json") if (raw / "links_end.json").exists() else {}
    moved = link_deltas(links0, links1)
    # a veth refusing a frame (its peer's receive backlog full: netdev_max_backlog) counts it in
    # the peer's rx_dropped, and some kernels also in the sender's tx_dropped: may over-report
    link_drops = int(sum(d["tx_dropped"] + d["rx_dropped"] for d in moved.values()))
    socket_drops = int(sum(h["socket_drops"] for h in engine["hosts"]))
    duration_s = (engine["end_ns"] - engine["start_ns"]) / 1e9
    payload_delivered = int(msgs.loc[msgs["complete"], "bytes"].sum())
    cpu = manifest.get("cpu", {})
    host_fid = host_fidelity(raw, pkts, plan, engine["start_ns"],
                             link_analysis.pause_windows(pfc_events(raw), engine["end_ns"]),
                             frame_bytes=frame_bytes(pkts, sc),
                             burst_bytes=sc["fabric"]["nic_burst_frames"] * frame_bytes(pkts, sc),
                             tolerance=sc["run"]["fidelity_tolerance"],
                             min_share=sc["run"]["fidelity_min_share"])
    _write(nic_queue_series(pkts, plan, engine["start_ns"], engine["end_ns"]), run_dir, "nic_queues", csv=False)

    complete_iters = iters[iters["complete"]]
    mean_t = float(complete_iters["time_s"].mean()) if len(complete_iters) else None
    problems = []
    if engine["reason"] != "complete":
        problems.append(f"traffic did not complete: {engine['reason']} "
                        f"({engine['messages_completed']}/{engine['messages']} messages)")
    reliable = engine["transport"]["reliability"] != "none"
    faults = fault_table(raw, pkts)
    # Packets in flight on a link when it goes down vanish with the link's queue, which no counter
    # reports: lost packets sent from just before a link or switch failure until its reroute is
    # confirmed are attributed to the failure.
    in_fault = pd.Series(False, index=pkts.index)
    for f in faults:
        if f["action"] in ("link_down", "switch_down"):
            end = f["t_ns"] + int(((f["reroute_ms"] or FAULT_WINDOW_NS / 1e6) + 100) * 1e6)
            in_fault |= (pkts["tx_ns"] >= f["t_ns"] - 50_000_000) & (pkts["tx_ns"] <= end)
    lost_to_faults = int((in_fault & pkts["rx_ns"].isna()).sum())
    resent_in_flight = resent_in_flight_at_end(pkts, engine["end_ns"], in_fault)
    qos = qos_summary(raw, duration_s)
    buffer_drops = qos["queues"]["buffer_drops"] if qos else 0
    ovs_dropped = ovs_internal_drops(moved, switches, qdisc_drops + buffer_drops + switch_queued + ovs_socket_drops)
    counted_drops = (qdisc_drops + buffer_drops + ovs_dropped + ovs_socket_drops + socket_drops + lost_to_faults
                     + queued_at_end + link_drops)
    lost = sent - received - resent_in_flight
    if lost and not reliable:
        problems.append(f"{lost} of {sent} packets lost "
                        f"(qdisc drops {qdisc_drops}, receiver socket drops {socket_drops})")
    # Every lost packet must have been dropped somewhere that counts drops (ACK drops count too,
    # so this can only under-report). At a time limit, packets still in flight are not drops.
    unexplained = lost - counted_drops
    if unexplained > 0 and engine["reason"] in ("complete", "stalled"):
        problems.append(f"{unexplained} lost packets are not accounted for: {lost} data packets lost, drops "
                        f"counted {counted_drops} (port buffers {buffer_drops}, leaf qdiscs {qdisc_drops}, "
                        f"still queued at the end {queued_at_end}, inside Open vSwitch {ovs_dropped}, "
                        f"Open vSwitch receive sockets {ovs_socket_drops}, receiver sockets {socket_drops}, "
                        f"veth drops {link_drops}, "
                        f"in flight on failed links {lost_to_faults})")
    fidelity_notes = []
    # data packets the emulator's own plumbing lost, not a switch queue the policy runs: a real
    # fabric would not have lost them (what each place dropped may include ACKs and other frames)
    plumbing = ovs_dropped + ovs_socket_drops + link_drops
    beyond_queues = max(0, lost - qdisc_drops - buffer_drops - queued_at_end - lost_to_faults)
    lost_inside_emulator = min(beyond_queues, plumbing + socket_drops)
    if plumbing and lost_inside_emulator:
        fidelity_notes.append(f"the emulator itself dropped frames while {lost} data packets were lost (inside "
                              f"Open vSwitch {ovs_dropped}, at its receive sockets {ovs_socket_drops}, at veths "
                              f"{link_drops})")
    if not host_fid["valid"]:
        w = host_fid["worst"]
        fidelity_notes.append(
            f"{len(host_fid['failing_hosts'])} of {host_fid['sending_hosts']} sending hosts' links idled with "
            f"work waiting for over {host_fid['tolerance']:.0%} (plus one frame time) of more than "
            f"{1 - host_fid['min_share']:.0%} of their windows of busy time, or sent ahead of their rate "
            f"there, or idled over {host_fid['tolerance']:.0%} of all of it (worst {w['host']}: "
            f"{w['within_tolerance']} of {w['windows']} {w['window_ms']:.1f} ms windows within, idle "
            f"{w['idle_share']:.2%} of {w['windowed_ms']:.0f} ms in windows; lead ran "
            f"dry {w['lead_dry_ms']:.2f} ms, the shaper late {w['late_ms']:.2f} ms, rate-limited queue pairs "
            f"behind {w['qp_behind_ms']:.2f} ms)")
    backlog = qos["ovs_input_backlog"] if qos else None
    ingress_pfc = bool(qos) and sc["qos"]["pfc"] and qos["pfc"].get("accounting") == "ingress"
    if backlog and backlog["samples"] and backlog["busy_samples"] / backlog["samples"] > MAX_INPUT_BUSY_FRACTION:
        fidelity_notes.append(
            f"Open vSwitch fell behind: frames waited in its input sockets (over "
            f"{backlog['busy_threshold_bytes'] // 1024} KiB on a port) in "
            f"{backlog['busy_samples'] / backlog['samples']:.0%} of samples, up to "
            f"{backlog['max_bytes'] // 1024} KiB on {backlog['worst_ports'][0]['port']}, "
            f"{'in one queue for every class (the ingress PFC counts see it, priorities do not)' if ingress_pfc else 'unseen by priorities and pauses'}")
    if cpu.get("machine_busy_fraction", 0) > MAX_MACHINE_BUSY_FRACTION:
        fidelity_notes.append(f"the machine was {cpu['machine_busy_fraction']:.0%} busy")
    late_overruns = [r for r in qos["pfc"]["headroom_overruns"] if r["late"]] if qos else []
    if late_overruns:
        # A switch's headroom holds what arrives while its pause takes effect; this one's pause came
        # later than the headroom is sized for, so what a lossless switch would have held, it did not
        w = max(late_overruns, key=lambda r: r["max_held_bytes"] - r["limit_bytes"])
        fidelity_notes.append(
            f"the switch agent paused later than the PFC headroom allows ({qos['pfc']['reaction_us']['allowance']:.0f} "
            f"us): {len(late_overruns)} lossless rows held more than XOFF plus headroom (worst {w['port']} class "
            f"{w['class']}: {w['max_held_bytes']} of {w['limit_bytes']} bytes, its slowest pause "
            f"{w['max_reaction_us']:.0f} us)")
    summary = {
        "summary_version": SUMMARY_VERSION,
        "run_id": manifest["run_id"],
        "scenario": sc["name"],
        "status": "ok" if not problems else "failed",
        "problems": problems,
        "mechanisms": manifest["mechanisms"],
        "timings_s": manifest["timings_s"],
        "collective": {
            "algorithm": workload, "ranks": n, "bytes_per_rank": S, "bound_formula": formula,
            "bound_terms": bound_terms,
            "link_bw_mbps": sc["fabric"]["bw_mbps"],
            "iterations": len(iters), "iterations_complete": int(iters["complete"].sum()),
            "time_s": [None if np.isnan(t) else float(t) for t in iters["time_s"]],
            "mean_time_s": mean_t,
            "bound_s": float(iters["bound_s"].iloc[0]),
            "bound_ratio": (float(iters["bound_s"].iloc[0]) / mean_t) if mean_t else None,
            "bound_ratio_min": float(complete_iters["bound_ratio"].min()) if len(complete_iters) else None,
            # bandwidths of a single collective of S bytes per rank (nccl-tests' definitions); a
            # pipeline or a trace has no one S
            "algbw_mbps": S * 8 / mean_t / 1e6 if mean_t and workload not in NO_SINGLE_S else None,
            "busbw_mbps": S * 8 / mean_t / 1e6 * busbw_factor(workload, n) if mean_t and workload not in NO_SINGLE_S
                          else None,
            "header_overhead_fraction": HEADER_BYTES / (HEADER_BYTES + sc["workload"]["payload_bytes"]),
        },
        "latency_us": {"p50": _pct(lat_us, 50), "p99": _pct(lat_us, 99),
                       "min": float(lat_us.min()) if received else None,
                       "max": float(lat_us.max()) if received else None,
                       "definition": "departure onto the host link to arrival at the destination's kernel"},
        "nic_queueing": nic_queues(pkts, plan),
        "goodput": {"payload_bytes_delivered": payload_delivered, "traffic_duration_s": duration_s,
                    "aggregate_mbps": payload_delivered * 8 / duration_s / 1e6 if duration_s > 0 else None},
        "packets": {"sent": sent, "received": received, "lost": lost,
                    "resent_in_flight_at_end": resent_in_flight,
                    "retransmitted": int(pkts["retransmit"].sum()),
                    "discarded_out_of_order": int(sum(f["out_of_order"] for f in engine["flows"])),
                    "duplicates": int(sum(f["duplicates"] for f in engine["flows"])),
                    "naks": int(sum(f["naks"] for f in engine["flows"])),
                    "timeouts": int(sum(f["timeouts"] for f in engine["flows"])),
                    "acks": int(sum(h["acks_tx"] for h in engine["hosts"])),
                    "port_buffer_drops": buffer_drops,
                    "qdisc_drops": qdisc_drops, "queued_at_end": queued_at_end,
                    "receiver_socket_drops": socket_drops,
                    "dropped_inside_ovs": ovs_dropped,
                    "ovs_rx_socket_drops": ovs_socket_drops,
                    "veth_drops": link_drops,
                    "lost_inside_emulator": lost_inside_emulator,
                    "lost_on_failed_links": lost_to_faults,
                    "unaccounted": max(0, unexplained),
                    "ovs_drop_counters": manifest.get("ovs_drops_during_traffic", {}),
                    "stray": int(sum(h["stray"] for h in engine["hosts"])),
                    "ecn_ce_marked": int((pkts["ecn"] == 3).sum())},
        "fidelity": {
            "verdict": "kept_up" if not fidelity_notes else "could_not_keep_up",
            "notes": fidelity_notes,
            "hosts": host_fid,
            # the scheduler's share in that: the data plane's waits that ended over 1 ms late
            "engine_late_wakeups": {"count": engine.get("oversleeps"), "total_ms": engine.get("oversleep_ms"),
                                    "max_ms": engine.get("max_oversleep_ms"),
                                    "involuntary_switches": engine.get("involuntary_switches")},
            "machine_busy_fraction": cpu.get("machine_busy_fraction"),
            "machine_steal_fraction": cpu.get("steal_fraction"),
            "cores_used": {**cpu.get("processes_cores", {}),
                           "engine": engine["cpu_s"] / duration_s if duration_s > 0 else None},
            "cpus": manifest["machine"]["cpus"],
        },
    }
    if workload == "pipeline" and "op" in msgs:
        # per iteration: the pipeline's 1F1B (compute and activation/gradient transfers), then the
        # DP AllReduces of every stage
        phases = {"pipeline_1f1b": msgs["op"].isin(["compute", "p2p"]), "dp_allreduce": msgs["op"].isin(["reduce", "copy"])}
        summary["collective"]["phases_s"] = {}
        for name, sel in phases.items():
            spans = [(g["complete_ns"].max() - g["release_ns"].min()) / 1e9
                     for _, g in msgs[sel].groupby("iteration") if g["complete"].all()]
            summary["collective"]["phases_s"][name] = [float(x) for x in spans]
        summary["collective"]["model"] = dataclasses.asdict(job)
    if "group" in msgs and (msgs["group"] != "").any():
        # each collective instance (or phase) of a step: its span in every iteration
        summary["collective"]["collectives"] = [
            {"name": name, "ranks": int(pd.concat([g["src"], g["dst"]]).nunique()),
             "bytes_per_iteration": int(g.loc[g["iteration"] == g["iteration"].min(), "bytes"].sum()),
             "time_s": [float((x["complete_ns"].max() - x["release_ns"].min()) / 1e9) if x["complete"].all() else None
                        for _, x in g.groupby("iteration")]}
            for name, g in msgs[msgs["group"] != ""].groupby("group", sort=False)]
    if workload in ("pipeline", "chakra", "simai"):
        w = sc["workload"]
        summary["collective"]["scale"] = {"bytes": w["bytes_scale"], "time": w["time_scale"]}
        if workload != "pipeline":
            summary["collective"]["trace"] = w["trace"]
            summary["collective"]["collective_algorithm"] = w["collective_algorithm"]
        summary["collective"]["transfers"] = int((msgs["op"] != "compute").sum()) // max(1, len(iters))
        summary["collective"]["compute_steps"] = int((msgs["op"] == "compute").sum()) // max(1, len(iters))
    summary["faults"] = faults
    summary["qos"] = qos
    summary["latency_by_dscp_us"] = {
        str(int(d)): {"packets": int(len(g)), "p50": _pct(g["latency_ns"].astype("float64") / 1e3, 50),
                      "p99": _pct(g["latency_ns"].astype("float64") / 1e3, 99)}
        for d, g in pkts[pkts["rx_ns"].notna()].groupby("dscp")}
    summary["background"] = background_flows(msgs, tags, bw_bps)
    if qos and qos["pfc"]["deadlock"]:
        summary["status"] = "deadlock"
        summary["problems"].append(f"PFC deadlock: a cycle of {len(qos['pfc']['deadlock']['cycle'])} paused queues "
                                   f"made no progress for {qos['pfc']['deadlock']['stuck_ms']:.0f} ms")
    summary["switch_tx_packets"] = switch_tx_packets(queues, fabric_doc)
    tel = pd.read_parquet(run_dir / "queues.parquet") if (run_dir / "queues.parquet").exists() else None
    class_names = ({int(c): n for c, n in tel[["class", "class_name"]].drop_duplicates().itertuples(index=False)}
                   if tel is not None and not tel.empty else {})
    tr, flows = transport_summary(run_dir, pkts, msgs, plan, engine, tel, class_names,
                           summary["fidelity"]["cores_used"], duration_s)
    summary["transport"] = tr
    # a run recorded before the field existed is judged with its default
    ref_rtt_us = sc["dcqcn"].get("ref_base_rtt_us", DcqcnSpec().ref_base_rtt_us)
    summary["time_dilation"] = time_dilation(tr["dcqcn"], ref_rtt_us, summary["latency_us"]["min"])
    classes = class_of_dscp(sc.get("classes", []))
    _write(latency_table(pkts, flows, classes), run_dir, "latency")
    summary["latency_by_class_us"] = class_latency(pkts, classes)
    fct = fct_table(msgs, pkts, flows, bw_bps)
    _write(fct, run_dir, "fct")
    summary["fct_slowdown"] = slowdown_summary(fct)
    summary["links"], link_fid = link_views(run_dir, raw, tel, fabric_doc, sc, engine, pkts)
    summary["fidelity"]["links"] = link_fid
    summary["fidelity"]["machine_cpu_idle_fraction"] = (1 - cpu["machine_busy_fraction"]
                                                        if cpu.get("machine_busy_fraction") is not None else None)
    if link_fid["busy_links"] and not link_fid["valid"]:
        failing = [c for c in link_fid["links"] if c["port"] in link_fid["failing_links"]]
        jittery = [c for c in failing if c["share"] < link_fid["min_share"]]
        slow = [c for c in failing if not c["drain_ratio_ok"]]
        if jittery:
            worst = jittery[0]
            summary["fidelity"]["notes"].append(
                f"{len(jittery)} of {link_fid['busy_links']} busy links drained at their rate in fewer than "
                f"{link_fid['min_share']:.0%} of their backlogged windows (worst {worst['port']}: "
                f"{worst['share']:.1%} of {worst['windows']} {worst['window_ms']:.1f} ms windows, "
                f"{worst['slow_windows']} slow, {worst['fast_windows']} fast)")
        if slow:
            worst = max(slow, key=lambda c: abs(c["drain_ratio"] - 1))
            summary["fidelity"]["notes"].append(
                f"{len(slow)} of {link_fid['busy_links']} busy links drained at more than "
                f"{link_fid['tolerance']:.0%} from their rate over all their backlogged time (worst "
                f"{worst['port']}: {worst['drain_ratio']:.3f} of its rate)")
        summary["fidelity"]["verdict"] = "could_not_keep_up"
    if tr["messages_with_wrong_bytes"]:
        summary["problems"].append(f"{tr['messages_with_wrong_bytes']} messages completed with the wrong "
                                   f"number of payload bytes")
        summary["status"] = "failed"
    if tr["agents"]["receiver_socket_drops"]:
        summary["fidelity"]["notes"].append(
            f"the engine's receive sockets dropped {tr['agents']['receiver_socket_drops']} packets: "
            f"the traffic agents could not keep up")
        summary["fidelity"]["verdict"] = "could_not_keep_up"
    resent = summary["packets"]["retransmitted"]
    if resent and not summary["packets"]["lost"] and not sc.get("faults"):
        # nothing was lost and no link changed, yet go-back-N resent: frames arrived out of order or
        # late, which a flow's fixed path through real switches does not do (Open vSwitch's
        # per-port threads reorder now and then); the times and queues that followed are the emulator's
        summary["fidelity"]["notes"].append(
            f"{resent} frames were resent though none was lost and no link changed: frames reordered or "
            f"delayed inside the emulator set off go-back-N")
        summary["fidelity"]["verdict"] = "could_not_keep_up"
    summary["packets"]["resent_without_loss"] = bool(resent and not summary["packets"]["lost"] and not sc.get("faults"))
    fid = summary["fidelity"]
    if fid["verdict"] == "kept_up" and not link_fid["busy_links"] and not host_fid["judged_hosts"]:
        # nothing failed, but nothing was judged either: a starved fabric is not a faithful one
        fid["verdict"] = "not_judged"
        fid["notes"].append(f"too little was busy to judge: no switch port was backlogged for "
                            f"{link_fid['min_windows']} or more windows of max({link_fid['min_window_ms']:g} ms, "
                            f"{link_fid['window_frames']} frame times), and no sending host was busy for as many")
    fid["valid"] = fid["verdict"] == "kept_up"
    summary["git_commit"] = manifest.get("git_commit")
    # the scenario's own expectations, on the finished summary; a performance expectation is not
    # judged on a run the emulation did not run faithfully
    summary["expectations"] = check_expectations(summary, sc.get("expect", []), fid["valid"])
    broken = [e for e in summary["expectations"] if e["ok"] is False]
    if broken:
        summary["problems"] += [f"expectation failed: {e['metric']} {e['op']} {e['expected']} "
                                f"(is {e['actual']}{', ' + e['why'] if e['why'] else ''})" for e in broken]
        if summary["status"] == "ok":
            summary["status"] = "regressed"
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    if sc["run"].get("report", True):
        from testbed.report import write_report  # matplotlib only when a report is asked for
        write_report(run_dir, summary)
    return summary
