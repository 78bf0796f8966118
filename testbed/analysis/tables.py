"""Stage 1 of a run's analysis: what the run recorded, loaded once (RunInputs), and its raw records
as tables (Tables), written to the run folder:

    packets.parquet     one row per packet sent: flow, msg, seq, psn, tx_ns, rx_ns, bytes, ecn
    messages.parquet    one row per message (a collective step): timing from release to arrival,
                        FCT (release to fully acknowledged), payload bytes delivered
    iterations.parquet  one row per collective iteration: time, analytical bound, ratio
    nic_queues.parquet  every host NIC class's queue depth on a 1 ms grid (from the records)
    queues.parquet      the queue telemetry (every sample of every queue that changed)

The later stages (losses, fidelity, the summary) read these tables, never the raw files again.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from testbed import records
from testbed.analysis.bounds import planned_bound
from testbed.analysis.hosts import nic_queue_series
from testbed.analysis.qos import pfc_events, telemetry_table
from testbed.runfolder import RunFolder, read_jsonl
from testbed.traffic.collectives import Message
from testbed.traffic.packets import HEADER_BYTES
from testbed.traffic.workload import message_latency_s
from topologies.model import Fabric

NO_SINGLE_S = ("pipeline", "ddp", "parameter_server", "chakra", "simai")   # no one collective of S bytes a rank
SCALED = ("pipeline", "chakra", "simai")   # their bytes and compute scaled by workload.bytes_scale, time_scale
# A fault's window for the packets it may have destroyed: from as long before it as a packet took
# to arrive (in_flight_before_ns), for this long
FAULT_WINDOW_NS = 5_000_000_000
MIN_IN_FLIGHT_NS = 50_000_000


def in_flight_before_ns(pkts: pd.DataFrame, t_ns: int) -> int:
    """How long before t_ns a packet still on its way at t_ns may have been sent: the longest
    one-way latency of a packet delivered that was sent before t_ns, at least MIN_IN_FLIGHT_NS. A
    fixed 50 ms was too short once queues are dilated: on incast-fattree-pfc at D = 16000 behind
    PFC pauses, delivered packets took up to 8.1 s, and the 118 a link failure destroyed had been
    sent 0.9-1.3 s before it."""
    before = pkts["rx_ns"].notna() & (pkts["tx_ns"] < t_ns)
    longest = int(pkts.loc[before, "latency_ns"].max()) if before.any() else 0
    return max(MIN_IN_FLIGHT_NS, longest)


def read_json(path: Path):
    return json.loads(path.read_text())


def dilation_factor(sc: dict) -> float:
    """The run's D, from its resolved scenario (1 for a run recorded before dilation)."""
    return float((sc.get("dilation") or {}).get("factor") or 1.0)


def hardware_columns(df: pd.DataFrame, start_ns: int, factor: float, at: tuple[str, ...] = (),
                     spans: tuple[str, ...] = ()) -> pd.DataFrame:
    """df with each emulated time in the hardware fabric's time beside it: for a CLOCK_MONOTONIC
    column of `at` (x_ns), x_hw_us, microseconds since the traffic's start / D; for a duration of
    `spans` (x_ns, or x_s), x_hw_us, its microseconds / D. A column the table lacks is skipped."""
    out = df.copy()

    def floats(col: str) -> pd.Series:
        # an unfinished iteration's end is pd.NA in an object column: NaN here
        return pd.to_numeric(out[col], errors="coerce").astype("float64")

    for col in at:
        if col in out:
            out[col.removesuffix("_ns") + "_hw_us"] = (floats(col) - start_ns) / factor / 1e3
    for col in spans:
        if col in out:
            unit_us = 1e-3 if col.endswith("_ns") else 1e6
            out[col.rsplit("_", 1)[0] + "_hw_us"] = floats(col) * unit_us / factor
    return out


def write_table(df: pd.DataFrame, rf: RunFolder, name: str, csv: bool = True) -> None:
    df.to_parquet(rf.table(name), index=False)
    if csv:
        df.to_csv(rf.root / f"{name}.csv", index=False)


@dataclass(frozen=True)
class RunInputs:
    """What the runner, the engine and the agent recorded, read once."""
    folder: RunFolder
    manifest: dict
    scenario: dict                 # the resolved scenario, as the manifest recorded it
    engine: dict                   # raw/engine.json
    plan: dict                     # raw/plan.json, the engine's plan
    fabric: dict                   # raw/fabric.json
    queues_end: list               # every port qdisc's counters after the traffic
    links_moved: dict              # per interface: what its kernel counters moved during the traffic
    ovs_socket_drops: int          # frames Open vSwitch's receive sockets dropped
    corrupted: dict                # per switch port: the frames its bit errors hit (corrupt faults)

    @property
    def switches(self) -> set[str]:
        return {sw["name"] for sw in self.fabric["switches"]}

    @property
    def duration_s(self) -> float:
        return (self.engine["end_ns"] - self.engine["start_ns"]) / 1e9

    @property
    def cpu(self) -> dict:
        return self.manifest.get("cpu", {})


def load(rf: RunFolder) -> RunInputs:
    manifest = read_json(rf.manifest)
    drops = read_json(rf.ovs_socket_drops_end) if rf.ovs_socket_drops_end.exists() else {}
    start = read_json(rf.links_start) if rf.links_start.exists() else {}
    end = read_json(rf.links_end) if rf.links_end.exists() else {}
    return RunInputs(folder=rf, manifest=manifest, scenario=manifest["scenario"], engine=read_json(rf.engine_stats),
                     plan=read_json(rf.engine_plan), fabric=read_json(rf.fabric),
                     queues_end=read_json(rf.queues_end) if rf.queues_end.exists() else [],
                     links_moved=link_deltas(start, end), ovs_socket_drops=int(sum(drops.values())),
                     corrupted=read_json(rf.corrupted_end) if rf.corrupted_end.exists() else {})


@dataclass(frozen=True)
class Tables:
    messages: pd.DataFrame
    packets: pd.DataFrame
    iterations: pd.DataFrame
    telemetry: pd.DataFrame | None     # None: the agent sampled nothing
    pfc_events: pd.DataFrame
    bound_formula: str
    bound_terms: dict | None
    jobs: dict | None = None           # [[jobs]]: name -> testbed.analysis.jobs.JobView

    @property
    def tags(self) -> pd.Series:
        m = self.messages
        return m["tag"] if "tag" in m else pd.Series("collective", index=m.index)


def build(inp: RunInputs) -> Tables:
    """Every table of stage 1, written to the run folder."""
    rf, sc = inp.folder, inp.scenario
    msgs = message_table(rf)
    pkts = packet_table(rf, msgs)
    add_wire_times(msgs, pkts)
    workload = sc["workload"]["type"]
    tags = msgs["tag"] if "tag" in msgs else pd.Series("collective", index=msgs.index)
    jobs = None
    if workload == "jobs":
        from testbed.analysis.jobs import job_views  # noqa: PLC0415 (it plans each job again)
        jobs = job_views(sc, msgs, lambda m: iteration_messages(m, inp.plan, 0))
        iters = pd.concat([iteration_table(v.messages[tags[v.messages.index].isin(["collective", "compute"])],
                                           v.bound_s).assign(job=name) for name, v in jobs.items()],
                          ignore_index=True)
        first_job = next(iter(jobs.values()))
        formula, terms = first_job.bound_formula, first_job.bound_terms
    else:
        latency = message_latency_s(sc["fabric"], Fabric.from_json(json.dumps(inp.fabric)))
        work = msgs if workload in NO_SINGLE_S else msgs[tags.isin(["collective", "compute"])]
        first = iteration_messages(work, inp.plan, 0) if workload in NO_SINGLE_S or latency else []
        bound, formula, terms = planned_bound(workload, len(inp.manifest["ranks"]), sc["workload"]["bytes_per_rank"],
                                              sc["fabric"]["bw_mbps"] * 1e6, first, latency)
        iters = iteration_table(msgs[tags.isin(["collective", "compute"])], bound)
    write_table(pkts, rf, "packets", csv=False)
    start, factor = inp.engine["start_ns"], dilation_factor(sc)
    write_table(hardware_columns(msgs, start, factor, ("release_ns", "first_tx_ns", "first_depart_ns", "complete_ns",
                                                       "acked_ns"), ("duration_ns", "fct_ns", "nic_wait_ns", "wc_ns")),
                rf, "messages")
    write_table(hardware_columns(iters, start, factor, ("start_ns", "end_ns"), ("time_s", "bound_s")), rf, "iterations")
    write_table(nic_queue_series(pkts, inp.plan, inp.engine["start_ns"], inp.engine["end_ns"]), rf, "nic_queues",
                csv=False)
    tel = None
    if rf.agent_plan.exists() and rf.telemetry.exists():
        tel = telemetry_table(rf, read_json(rf.agent_plan))
        if tel.empty:
            tel = None
        else:
            write_table(tel, rf, "queues", csv=False)
    return Tables(messages=msgs, packets=pkts, iterations=iters, telemetry=tel, pfc_events=pfc_events(rf),
                  bound_formula=formula, bound_terms=terms, jobs=jobs)


def packet_table(rf: RunFolder, messages: pd.DataFrame) -> pd.DataFrame:
    tx = pd.DataFrame(records.read(rf.tx, records.TX_DTYPE)).drop(columns="_pad")
    rx = pd.DataFrame(records.read(rf.rx, records.RX_DTYPE)).drop(columns="_pad")
    # the send time in each packet's stamp identifies the transmission, retransmissions included
    rx = rx.drop_duplicates(["msg", "seq", "tx_ns"])
    df = tx.merge(rx[["msg", "seq", "tx_ns", "rx_ns", "link_ns", "ecn", "accepted", "dscp"]], on=["msg", "seq", "tx_ns"],
                  how="left")
    df["flow"] = messages["flow"].to_numpy()[df["msg"].to_numpy()]
    df = df.rename(columns={"frame_bytes": "bytes"})
    df["rx_ns"] = df["rx_ns"].astype("Int64")
    # from reaching the receiving NIC to its last bit in: its wait behind its queue pair's frames
    # ahead of it and its own frame time (the delay line's second wait; 0 in runs before it)
    df["link_ns"] = df["link_ns"].astype("Int64")
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
               "nic_queue_ns", "link_ns", "bytes", "ecn", "dscp", "accepted"]]


def add_wire_times(msgs: pd.DataFrame, pkts: pd.DataFrame) -> None:
    """Each message's first departure onto its host link, its wait in the NIC before it, and its
    FCT from the wire: first departure to the kernel's arrival time of its last packet."""
    first = pkts[(pkts["seq"] == 0) & ~pkts["retransmit"]].groupby("msg")["depart_ns"].min()
    msgs["first_depart_ns"] = first.reindex(msgs["msg"]).astype("Int64").to_numpy()
    msgs["nic_wait_ns"] = msgs["first_depart_ns"] - msgs["release_ns"]
    msgs["fct_ns"] = msgs["complete_ns"] - msgs["first_depart_ns"]


def iteration_messages(msgs: pd.DataFrame, plan: dict, iteration: int) -> list[Message]:
    """One iteration's messages as planned (the schedule and the plan's dependencies)."""
    planned = {m["id"]: m for m in plan["messages"]}
    # the planned compute time (the table's duration_ns is the measured one, none for a message
    # that never completed)
    return [Message(int(r.msg), iteration, int(r.step), r.src, r.dst, int(r.bytes), tuple(planned[int(r.msg)]["deps"]),
                    op=r.op, duration_ns=int(planned[int(r.msg)]["duration_ns"]))
            for r in msgs[msgs["iteration"] == iteration].itertuples()]


def message_table(rf: RunFolder) -> pd.DataFrame:
    sched = pd.DataFrame(read_json(rf.schedule)).set_index("id")
    timing = pd.DataFrame(read_json(rf.message_times)).set_index("id")
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


def fault_table(rf: RunFolder, pkts: pd.DataFrame) -> list[dict]:
    """Each fault with the controller's reaction (time to the last affected route confirmed by a
    barrier) and the traffic's: when the first packet in flight was lost, when every flow that
    lost packets had delivered again, and how many were lost."""
    done = [e for e in read_jsonl(rf.controller_events) if e["event"] == "reroute_done"]
    out = []
    for f in read_jsonl(rf.faults):
        t = f["t_ns"]
        after = [e for e in done if e["t_ns"] >= t]
        window = pkts[(pkts["tx_ns"] >= t - in_flight_before_ns(pkts, t)) & (pkts["tx_ns"] <= t + FAULT_WINDOW_NS)]
        lost = window[window["rx_ns"].isna()]
        recovered_ns = None
        if len(lost):
            ends = []
            for flow, g in lost.groupby("flow"):
                later = pkts[(pkts["flow"] == flow) & (pkts["tx_ns"] > g["tx_ns"].max()) & pkts["accepted"].eq(True)]
                ends.append(later["rx_ns"].min() if len(later) else None)
            recovered_ns = None if any(e is None or pd.isna(e) for e in ends) else int(max(ends))
        # only a link or switch going down or up moves routes; a reroute after bit errors or a
        # controller's death is another fault's
        moves_routes = f["action"].startswith(("link_", "switch_"))
        out.append({**f, "reroute_ms": (after[0]["t_ns"] - t) / 1e6 if after and moves_routes else None,
                    "lost_packets_around": int(len(lost)),
                    "traffic_affected_ms": (int(lost["tx_ns"].min()) - t) / 1e6 if len(lost) else None,
                    "traffic_recovered_ms": (recovered_ns - t) / 1e6 if recovered_ns else None})
    return out


def link_deltas(start: dict[str, dict], end: dict[str, dict]) -> dict[str, dict]:
    """Per interface: what its kernel counters moved between the two readings."""
    return {name: {k: v - start.get(name, {}).get(k, 0) for k, v in c.items()} for name, c in end.items()}


def frame_bytes(pkts: pd.DataFrame, sc: dict) -> int:
    """The run's largest frame on the wire: the one-frame quantum of the fidelity rules."""
    return int(pkts["bytes"].max()) if len(pkts) else sc["workload"]["payload_bytes"] + HEADER_BYTES


def heatmap_bin_ms(duration_s: float, max_bins: int = 200) -> float:
    """The smallest of 1, 2, 5, 10, 20, 50... ms that keeps the heat map under max_bins columns."""
    for step in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000):
        if duration_s * 1000 / step <= max_bins:
            return float(step)
    return 10000.0


def pct(series: pd.Series, q: float) -> float | None:
    s = series.dropna()
    return float(np.percentile(s.to_numpy(dtype="float64"), q)) if len(s) else None
