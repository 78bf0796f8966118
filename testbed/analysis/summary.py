"""A run folder's analysis, re-runnable (`testbed analyze`): raw files in, tables, summary.json and
the report out, in stages, each a module with its own inputs and outputs:

1. tables (testbed.analysis.tables): the raw records as tables, written as parquet/CSV;
2. losses (testbed.analysis.losses): every packet accounted for;
3. fidelity (testbed.analysis.fidelity): whether the emulation ran the fabric faithfully;
4. the Summary (below): a frozen, versioned record, whose JSON Schema is docs/summary.schema.json;
5. the scenario's expectations on it (testbed.regress.baselines), which settle its status;
6. the report (testbed.analysis.report).

Besides stage 1's tables, the stages write flows.parquet and qp_events.parquet (per queue pair,
testbed.analysis.transport), latency.parquet and fct.parquet (testbed.analysis.flows), links.parquet
and link_utilisation.parquet (per switch egress port). Every table except the per-packet and
per-sample ones (packets, queues, qp_events, nic_queues) is also written as CSV.
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from testbed.analysis import fidelity, losses, tables
from testbed.analysis import links as link_analysis
from testbed.analysis.ecn_tuning import ecn_tuning_section
from testbed.analysis.flows import class_latency, class_of_dscp, fct_table, latency_table, slowdown_summary
from testbed.analysis.hardware import dilation_section, emulator_latency
from testbed.analysis.hosts import host_fidelity, nic_queues
from testbed.analysis.jobs import jobs_section, view_inputs
from testbed.analysis.parallelism import iteration_split, layer_collectives
from testbed.analysis.ports import port_counters
from testbed.analysis.qos import qos_summary
from testbed.analysis.routing import ecmp_spread
from testbed.analysis.shapes import SECTIONS
from testbed.analysis.tables import NO_SINGLE_S, SCALED, RunInputs, Tables, pct, read_json, write_table
from testbed.analysis.training import training_section
from testbed.fabric.qos import switch_burst_bytes
from testbed.traffic.ddp import bucket_sizes
from testbed.analysis.transport import qp_event_table, time_dilation, transport_summary
from testbed.paths import PROJECT_ROOT
from testbed.regress.baselines import check_expectations
from testbed.runfolder import RunFolder, read_jsonl
from testbed.scenario import DCQCN_REFERENCE, DcqcnSpec, Scenario, dcqcn_overrides
from testbed.traffic.collectives import busbw_factor, chunk_sizes
from testbed.traffic.packets import HEADER_BYTES
from testbed.traffic.workload import path_links, pipeline_job
from topologies.model import Fabric

SUMMARY_VERSION = 5   # 2: training (the synchronisation share); 3: jobs; 4: dilation, status inconclusive;
#                       5: bit errors (packets.icrc_drops, corrupted_frames, lost_to_bit_errors)
SCHEMA_PATH = PROJECT_ROOT / "docs" / "summary.schema.json"
Status = Literal["ok", "failed", "deadlock", "regressed", "inconclusive"]
Verdict = Literal["kept_up", "could_not_keep_up", "not_judged"]


def doc(text: str, default=dataclasses.MISSING):
    return field(metadata={"doc": text}) if default is dataclasses.MISSING else \
        field(default=default, metadata={"doc": text})


@dataclass(frozen=True)
class Packets:
    """Every packet sent, and where each lost one went (testbed.analysis.losses)."""
    sent: int = doc("data packets sent, retransmissions included")
    received: int = doc("of those, received")
    lost: int = doc("sent, never received, and not a resent copy still on its way")
    resent_in_flight_at_end: int = doc("resent copies on their way when the traffic ended, their data delivered")
    retransmitted: int = doc("go-back-N retransmissions")
    discarded_out_of_order: int = doc("frames a receiver discarded as out of order")
    duplicates: int = doc("frames a receiver saw twice")
    naks: int = doc("NAKs sent")
    timeouts: int = doc("retransmission timeouts")
    acks: int = doc("ACKs sent")
    port_buffer_drops: int = doc("drops at the emulated switch buffers")
    qdisc_drops: int = doc("drops at switch ports' leaf qdiscs")
    queued_at_end: int = doc("frames still in a qdisc when the traffic ended")
    receiver_socket_drops: int = doc("drops at the engine's receive sockets")
    dropped_inside_ovs: int = doc("frames Open vSwitch took in and never sent on, less those accounted for")
    ovs_rx_socket_drops: int = doc("drops at Open vSwitch's receive sockets")
    veth_drops: int = doc("drops at veths (may over-report)")
    lost_inside_emulator: int = doc("lost data packets the emulator's plumbing explains")
    lost_on_failed_links: int = doc("lost in flight on links that failed")
    icrc_drops: int = doc("data frames receivers dropped for a bad ICRC: bit errors of a corrupt fault")
    corrupted_frames: int = doc("frames the corrupt faults hit, as the switch ports counted them (a hit frame "
                                "a later queue dropped is that queue's loss)")
    lost_to_bit_errors: int = doc("lost data packets a receiver's ICRC drop names, frame by frame (queue pair, "
                                  "message, sequence)")
    unaccounted: int = doc("lost packets no counter explains: a run with any failed")
    ovs_drop_counters: dict = doc("Open vSwitch's own drop counters over the traffic")
    stray: int = doc("frames a host received that no queue pair expected")
    ecn_ce_marked: int = doc("data packets that arrived marked CE")
    resent_without_loss: bool = doc("go-back-N resent though nothing was lost and no link changed")


@dataclass(frozen=True)
class Fidelity:
    """Whether the emulation ran the fabric faithfully (testbed.analysis.fidelity)."""
    verdict: Verdict = doc("kept_up, could_not_keep_up or not_judged (too little was busy)")
    notes: list[str] = doc("what the emulator did wrong, with its numbers")
    hosts: dict = doc("the host side: every sending host's windows of busy time")
    engine_late_wakeups: dict = doc("the data plane's waits that ended over 1 ms late")
    machine_busy_fraction: float | None = doc("the machine's busy share over the traffic")
    machine_steal_fraction: float | None = doc("the hypervisor's steal over the traffic")
    cores_used: dict = doc("each process's CPU over the traffic, in cores")
    cpus: int = doc("the machine's CPUs")
    links: dict = doc("the switch side: every busy link's drain rate in its backlogged windows")
    machine_cpu_idle_fraction: float | None = doc("1 - machine_busy_fraction")
    valid: bool = doc("verdict is kept_up: the run's performance metrics mean something")


@dataclass(frozen=True)
class Summary:
    """summary.json: the numbers a user reads first, versioned by summary_version."""
    summary_version: int = doc("this record's version")
    run_id: str = doc("the run's folder name under results/<scenario>/")
    scenario: str = doc("the scenario's name")
    status: Status = doc("the run's final word: ok; failed (problems), deadlock (PFC) or regressed (an expectation "
                         "broke), each a failure; or inconclusive (nothing failed, but the emulation did not run "
                         "the fabric faithfully or too little was busy to judge: no result)")
    problems: list[str] = doc("why the status is not ok")
    mechanisms: dict = doc("what the run used on this machine: datapath, queues, marking, steering")
    timings_s: dict = doc("bring-up and teardown phases")
    collective: dict = doc("the workload's iterations against the analytical bound")
    training: dict | None = doc("a workload that computes: the share of each iteration its workers waited on "
                                "communication (sync_share, sync_share_by_iteration); None otherwise")
    jobs: dict | None = doc("with [[jobs]]: per job its tenant, hosts, collective and training sections (the "
                            "top-level ones are the first job's) and, measured alone in the same invocation, its "
                            "slowdown; None otherwise")
    isolation: dict | None = doc("tenants: the isolation probes sent before the traffic, from a host of every "
                                 "tenant to one of every other and to one of its own (cross_tenant_delivered, "
                                 "same_tenant_delivered, mechanism, per pair); None with fewer than two tenants")
    latency_us: dict = doc("one-way latency over every packet: p50, p99, min, max")
    nic_queueing: dict = doc("the host NICs' queues")
    goodput: dict = doc("payload delivered over the traffic's duration")
    packets: Packets = doc("every packet accounted for")
    fidelity: Fidelity = doc("the fidelity verdict")
    faults: list[dict] = doc("each fault, with the controller's and the traffic's reaction (by api: a link taken down or up through the northbound API)")
    qos: dict | None = doc("queues, ECN, PFC and the agent's telemetry (None: no switch agent)")
    latency_by_dscp_us: dict = doc("latency per DSCP")
    background: list[dict] = doc("traffic outside the collective (bulk, victim) against its time alone")
    switch_tx_packets: dict = doc("packets each switch sent")
    transport: dict = doc("per queue pair: recoveries, CNPs, DCQCN, fairness, the engine's load")
    time_dilation: dict | None = doc("DCQCN's parameters against the emulated fabric's base RTT")
    dilation: dict = doc("the run in the hardware fabric's time: factor (D), chosen_by (auto, set, version1), the "
                         "hardware and emulated rates and latencies, the calibration auto used, the emulator's own "
                         "per-hop latency against the configured one, and metrics: each headline value in hardware "
                         "units beside its emulated one (testbed.analysis.hardware)")
    latency_by_class_us: dict = doc("latency per traffic class")
    fct_slowdown: dict | None = doc("message completion times against the ideal")
    links: dict = doc("per switch egress port: utilisation and queue; ecmp: how the routing spread the traffic over "
                      "each switch's equal-cost ports (members_used_share, max_over_mean, per_group; a policy metric)")
    git_commit: str | None = doc("the testbed's commit")
    expectations: list[dict] = doc("the scenario's expectations, each judged or why not")
    overrides: list[str] = doc("the --set overrides the run was made with, as given (a spread or a baseline "
                               "refuses one that changed what the scenario emulates or how it is judged)")

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Summary":
        if d.get("summary_version") != SUMMARY_VERSION:
            raise ValueError(f"summary_version {d.get('summary_version')!r}, this testbed reads {SUMMARY_VERSION}")
        return cls(**{**d, "packets": Packets(**d["packets"]), "fidelity": Fidelity(**d["fidelity"])})

    @classmethod
    def load(cls, rf: RunFolder) -> "Summary":
        return cls.from_json(json.loads(rf.summary.read_text()))


def json_schema() -> dict:
    """The JSON Schema of summary.json, from the dataclasses above and each section's keys
    (testbed.analysis.shapes) (docs/summary.schema.json)."""
    top = _schema(Summary)
    for name, shape in SECTIONS.items():
        top["properties"][name] = {**shape, "description": top["properties"][name]["description"]}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "summary.json",
            "description": f"{Summary.__doc__} (summary_version {SUMMARY_VERSION})", **top}


def _schema(tp) -> dict:
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        props = {}
        for f in dataclasses.fields(tp):
            props[f.name] = {**_schema(hints[f.name]), "description": f.metadata["doc"]}
        return {"type": "object", "description": tp.__doc__, "properties": props,
                "required": [f.name for f in dataclasses.fields(tp)], "additionalProperties": False}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_schema(a) for a in args]}
    if origin is list:
        return {"type": "array", "items": _schema(args[0])} if args else {"type": "array"}
    return {int: {"type": "integer"}, float: {"type": "number"}, str: {"type": "string"}, bool: {"type": "boolean"},
            dict: {"type": "object"}, type(None): {"type": "null"}}[tp]


def analyze(run_dir: Path | str) -> dict:
    """Every stage over one run folder; returns summary.json's record."""
    rf = RunFolder(run_dir)
    inp = tables.load(rf)
    t = tables.build(inp)
    sc, engine = inp.scenario, inp.engine
    faults = tables.fault_table(rf, t.packets)
    qos = qos_summary(rf, t.telemetry, t.pfc_events)
    tuning, tuning_windows = ecn_tuning_section(rf, inp.engine["start_ns"], tables.dilation_factor(sc))
    if qos and tuning:
        qos["ecn_tuning"] = tuning
        write_table(tuning_windows, rf, "ecn_tuning")
    acc = losses.account(inp, t, faults, qos["queues"]["buffer_drops"] if qos else 0, qp_event_table(rf))
    packets = losses.packets_section(acc, inp, t)
    frame = tables.frame_bytes(t.packets, sc)
    host_fid = host_fidelity(rf, t.packets, inp.plan, engine["start_ns"],
                             link_analysis.pause_windows(t.pfc_events, engine["end_ns"]), frame_bytes=frame,
                             burst_bytes=sc["fabric"]["nic_burst_frames"] * frame,
                             tolerance=sc["run"]["fidelity_tolerance"], min_share=sc["run"]["fidelity_min_share"])
    tr, flows = transport_summary(rf, t.packets, t.messages, inp.plan, engine, t.telemetry, _class_names(t),
                                  fidelity.cores_used(inp), inp.duration_s)
    series = link_analysis.port_series(t.telemetry) if t.telemetry is not None else []
    links, link_fid = link_views(rf, inp, t, series)
    fab = Fabric.from_json(json.dumps(inp.fabric))
    dil = sc.get("dilation") or {}
    emulator = emulator_latency(t.packets, inp.plan, path_links(fab), float(dil.get("factor", 1.0)),
                                dil.get("link_delay_ns", 0.0) + dil.get("switch_latency_ns", 0.0),
                                switch_queues(series, fab, frame))
    fid = fidelity.judge(inp, acc, packets, host_fid, link_fid, qos, tr, emulator)
    classes = class_of_dscp(sc.get("classes", []))
    write_table(latency_table(t.packets, flows, classes), rf, "latency")
    fct = fct_table(t.messages, t.packets, flows, sc["fabric"]["bw_mbps"] * 1e6)
    write_table(tables.hardware_columns(fct, inp.engine["start_ns"], tables.dilation_factor(sc), ("start_ns",),
                                        ("fct_ns", "ideal_fct_ns", "nic_wait_ns")), rf, "fct")
    # a run recorded before the field existed is judged with its default
    ref_rtt_us = sc["dcqcn"].get("ref_base_rtt_us", DcqcnSpec().ref_base_rtt_us)
    if tr["dcqcn"]:
        # which DCQCN ran: the reference configuration, and every field the scenario changed in it
        tr["dcqcn"] = {**tr["dcqcn"], "reference": DCQCN_REFERENCE, "overrides": dcqcn_overrides(sc["dcqcn"])}
    latency = _latency(t.packets)
    problems = list(acc.problems)
    deadlock = qos["pfc"]["deadlock"] if qos else None
    if deadlock:
        problems.append(f"PFC deadlock: a cycle of {len(deadlock['cycle'])} paused queues "
                        f"made no progress for {deadlock['stuck_ms']:.0f} ms")
    if tr["messages_with_wrong_bytes"]:
        problems.append(f"{tr['messages_with_wrong_bytes']} messages completed with the wrong number of payload bytes")
    if t.jobs:
        # each job as if alone on its hosts; the top-level sections are the first job's
        sections = {}
        for name, v in t.jobs.items():
            ji, jt = view_inputs(inp, t, v)
            sections[name] = (collective_section(ji, jt), training_section(jt.messages, jt.iterations))
        jobs = jobs_section(t.jobs, sections, inp.manifest.get("alone") or {})
        collective, training = next(iter(sections.values()))
    else:
        jobs, collective, training = None, collective_section(inp, t), training_section(t.messages, t.iterations)
    goodput = _goodput(inp, t)
    if qos:
        # pauses against the traffic carried: a band a scenario can hold whatever its size; far
        # more is a PFC policy pausing too eagerly, which a bare pauses > 0 passes
        mb = goodput["payload_bytes_delivered"] / 1e6
        qos["pfc"]["pauses_per_mb"] = qos["pfc"]["pauses"] / mb if mb else None
    summary = Summary(
        summary_version=SUMMARY_VERSION, run_id=inp.manifest["run_id"], scenario=sc["name"],
        status=status_of(acc.problems, deadlock, tr["messages_with_wrong_bytes"], []),
        problems=problems, mechanisms=inp.manifest["mechanisms"], timings_s=inp.manifest["timings_s"],
        collective=collective, training=training, jobs=jobs, isolation=inp.manifest.get("isolation"),
        latency_us=latency, nic_queueing=nic_queues(t.packets, inp.plan),
        goodput=goodput, packets=Packets(**packets), fidelity=Fidelity(**fid), faults=faults, qos=qos,
        latency_by_dscp_us=_latency_by_dscp(t.packets),
        background=background_flows(t.messages, t.tags, sc["fabric"]["bw_mbps"] * 1e6),
        switch_tx_packets=switch_tx_packets(inp.queues_end, inp.fabric), transport=tr,
        time_dilation=time_dilation(tr["dcqcn"], ref_rtt_us, latency["min"]),
        dilation=dilation_section(sc, collective, latency, tr, qos, emulator,
                                  flows["final_rate_bps"].tolist() if "final_rate_bps" in flows else []),
        latency_by_class_us=class_latency(t.packets, classes), fct_slowdown=slowdown_summary(fct), links=links,
        git_commit=inp.manifest.get("git_commit"), expectations=[], overrides=list(sc.get("overrides", ())))
    # the scenario's own expectations, on the finished summary; a performance expectation is not
    # judged on a run the emulation did not run faithfully
    expectations = check_expectations(summary.to_json(), sc.get("expect", []), fid["valid"])
    broken = [e for e in expectations if e["ok"] is False]
    problems += [f"expectation failed: {e['metric']} {e['op']} {e['expected']} "
                 f"(is {e['actual']}{', ' + e['why'] if e['why'] else ''})" for e in broken]
    status = status_of(acc.problems, deadlock, tr["messages_with_wrong_bytes"], broken, fid["valid"],
                       [e for e in expectations if e["ok"] is None])
    summary = dataclasses.replace(summary, status=status, problems=problems, expectations=expectations)
    out = summary.to_json()
    rf.summary.write_text(json.dumps(out, indent=1))
    if sc["run"].get("report", True):
        from testbed.analysis.report import write_report  # matplotlib only when a report is asked for
        write_report(rf.root, out)
    return out


def status_of(failures, deadlock, wrong_bytes: int, broken: list, faithful: bool = True,
              unjudged: list = ()) -> Status:
    """One status, by precedence: a message with the wrong bytes fails the run whatever else; then
    a PFC deadlock; then any failure the loss account found; then a broken expectation; then a
    run that is no result (not faithful, or an expectation it could not judge) is inconclusive,
    never ok."""
    if wrong_bytes:
        return "failed"
    if deadlock:
        return "deadlock"
    if failures:
        return "failed"
    if broken:
        return "regressed"
    return "ok" if faithful and not unjudged else "inconclusive"


def collective_section(inp: RunInputs, t: Tables) -> dict:
    """The workload's iterations against the analytical bound, and what it was."""
    sc, msgs, iters = inp.scenario, t.messages, t.iterations
    workload, n, S = sc["workload"]["type"], len(inp.manifest["ranks"]), sc["workload"]["bytes_per_rank"]
    complete = iters[iters["complete"]]
    mean_t = float(complete["time_s"].mean()) if len(complete) else None
    single_s = mean_t and workload not in NO_SINGLE_S
    out = {
        "algorithm": workload, "ranks": n, "bytes_per_rank": S, "bound_formula": t.bound_formula,
        "bound_terms": t.bound_terms,
        "link_bw_mbps": sc["fabric"]["bw_mbps"],
        "iterations": len(iters), "iterations_complete": int(iters["complete"].sum()),
        "time_s": [None if np.isnan(x) else float(x) for x in iters["time_s"]],
        "mean_time_s": mean_t,
        "bound_s": float(iters["bound_s"].iloc[0]),
        "bound_ratio": (float(iters["bound_s"].iloc[0]) / mean_t) if mean_t else None,
        "bound_ratio_min": float(complete["bound_ratio"].min()) if len(complete) else None,
        # bandwidths of a single collective of S bytes per rank (nccl-tests' definitions); a
        # pipeline or a trace has no one S
        "algbw_mbps": S * 8 / mean_t / 1e6 if single_s else None,
        "busbw_mbps": S * 8 / mean_t / 1e6 * busbw_factor(workload, n) if single_s else None,
        "header_overhead_fraction": HEADER_BYTES / (HEADER_BYTES + sc["workload"]["payload_bytes"]),
    }
    if workload == "pipeline" and "op" in msgs:
        # per iteration: the pipeline's 1F1B (compute, activation/gradient transfers and the
        # layers' TP and EP collectives), then the DP AllReduces of every stage
        dp = msgs["group"].str.startswith("dp_allreduce")
        phases = {"pipeline_1f1b": t.tags.isin(["collective", "compute"]) & ~dp, "dp_allreduce": dp}
        out["phases_s"] = {}
        for name, sel in phases.items():
            spans = [(g["complete_ns"].max() - g["release_ns"].min()) / 1e9
                     for _, g in msgs[sel].groupby("iteration") if g["complete"].all()]
            out["phases_s"][name] = [float(x) for x in spans]
        job = pipeline_job(Scenario.from_dict(sc))
        out["model"] = dataclasses.asdict(job)
        out["parallelism"] = {
            "tp": job.tp, "pp": job.pp, "dp": job.dp, "ep": job.ep, "rank_order": sc["workload"].get("rank_order", "tp-pp-dp"),
            "sequence_parallel": job.sequence_parallel, "moe_every": job.moe_every,
            "num_experts": job.num_experts,
            "expert_dp": job.dp // job.ep,
            "layer_collectives": layer_collectives(msgs, job.tp, job.ep, job.tp_bytes, job.a2a_bytes,
                                                   sc["fabric"]["bw_mbps"] * 1e6),
            "iteration_split": iteration_split(msgs, iters)}
    once = msgs["group"] != "" if "group" in msgs else None
    if once is not None and "instance" in msgs:
        once &= msgs["instance"] < 0     # a layer's collectives are timed per instance, above
    if once is not None and once.any():
        # each collective instance (or phase) of a step: its span in every iteration
        out["collectives"] = [
            {"name": name, "ranks": int(pd.concat([g["src"], g["dst"]]).nunique()),
             "bytes_per_iteration": int(g.loc[g["iteration"] == g["iteration"].min(), "bytes"].sum()),
             "time_s": [float((x["complete_ns"].max() - x["release_ns"].min()) / 1e9) if x["complete"].all() else None
                        for _, x in g.groupby("iteration")]}
            for name, g in msgs[once].groupby("group", sort=False)]
    if workload == "ddp":
        w = sc["workload"]
        # a run recorded before DDP's bucket sizes split its bytes evenly over ddp_buckets
        sizes = (chunk_sizes(S, w["ddp_buckets"]) if "ddp_buckets" in w
                 else bucket_sizes(S, w["ddp_first_bucket_bytes"], w["ddp_bucket_cap_bytes"]))
        out["ddp"] = {"buckets": len(sizes), "bucket_bytes": sizes, "overlap": w["ddp_overlap"]}
        out["transfers"] = int((msgs["op"] != "compute").sum()) // max(1, len(iters))
    if workload == "parameter_server":
        w = sc["workload"]
        out["parameter_server"] = {"servers": w["ps_servers"], "placement": w["ps_placement"], "sync": w["ps_sync"],
                                   "workers": int(msgs.loc[msgs["tag"] == "compute", "src"].nunique()),
                                   "bytes_per_worker": S}
        out["transfers"] = int((msgs["op"] != "compute").sum()) // max(1, len(iters))
    if workload in SCALED:
        w = sc["workload"]
        out["scale"] = {"bytes": w["bytes_scale"], "time": w["time_scale"]}
        if workload != "pipeline":
            out["trace"] = w["trace"]
            out["collective_algorithm"] = w["collective_algorithm"]
        out["transfers"] = int((msgs["op"] != "compute").sum()) // max(1, len(iters))
        out["compute_steps"] = int((msgs["op"] == "compute").sum()) // max(1, len(iters))
    return out


def _latency(pkts: pd.DataFrame) -> dict:
    lat_us = pkts["latency_ns"].astype("float64") / 1e3
    received = int(pkts["rx_ns"].notna().sum())
    return {"p50": pct(lat_us, 50), "p99": pct(lat_us, 99),
            "min": float(lat_us.min()) if received else None,
            "max": float(lat_us.max()) if received else None,
            "definition": "departure onto the host link to arrival at the destination's kernel"}


def _latency_by_dscp(pkts: pd.DataFrame) -> dict:
    return {str(int(d)): {"packets": int(len(g)), "p50": pct(g["latency_ns"].astype("float64") / 1e3, 50),
                          "p99": pct(g["latency_ns"].astype("float64") / 1e3, 99)}
            for d, g in pkts[pkts["rx_ns"].notna()].groupby("dscp")}


def _goodput(inp: RunInputs, t: Tables) -> dict:
    delivered = int(t.messages.loc[t.messages["complete"], "bytes"].sum())
    d = inp.duration_s
    return {"payload_bytes_delivered": delivered, "traffic_duration_s": d,
            "aggregate_mbps": delivered * 8 / d / 1e6 if d > 0 else None}


def _class_names(t: Tables) -> dict:
    tel = t.telemetry
    if tel is None:
        return {}
    return {int(c): n for c, n in tel[["class", "class_name"]].drop_duplicates().itertuples(index=False)}


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


def switch_queues(series: list, fab: Fabric, frame_bytes: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The telemetry grid and, per sample, whether any switch port held more than a frame (what
    testbed.analysis.hardware.emulator_latency leaves out); None without telemetry."""
    switches = {s.name for s in fab.switches}
    series = [s for s in series if s.port.rsplit("-eth", 1)[0] in switches]
    if not series:
        return None
    return series[0].t_ns, np.any([s.depth_bytes > frame_bytes for s in series], axis=0)


def link_views(rf: RunFolder, inp: RunInputs, t: Tables, series: list) -> tuple[dict, dict]:
    """Per-link tables (links, link_utilisation) and the drain-rate fidelity verdict, from the
    queue telemetry over the traffic phase (series: link_analysis.port_series of it)."""
    sc, engine = inp.scenario, inp.engine
    run = sc["run"]
    rates, peers = link_analysis.port_rates(inp.fabric, sc["fabric"]["bw_mbps"])
    start, end = engine["start_ns"], engine["end_ns"]
    # neither a paused port nor one whose link a fault took down is judged meanwhile
    held = link_analysis.pause_windows(t.pfc_events, end)
    for port, spans in link_analysis.down_windows(read_jsonl(rf.faults), inp.fabric, end).items():
        held.setdefault(port, []).extend(spans)
    frame = tables.frame_bytes(t.packets, sc)
    # the bucket the run gave its switch ports
    burst = switch_burst_bytes(Scenario.from_dict(sc))
    fid = link_analysis.link_fidelity(series, rates, frame, run["fidelity_tolerance"], run["fidelity_min_share"],
                                      held, burst_bytes=burst)
    links = link_analysis.link_table(series, rates, peers, start, end)
    write_table(links, rf, "links")
    agent = read_json(rf.agent_stats) if rf.agent_stats.exists() else {}
    write_table(port_counters(links, series, inp.fabric, agent.get("queues_end") or [], t.pfc_events, start, end,
                              tables.dilation_factor(sc), inp.corrupted), rf, "ports")
    bin_ms = tables.heatmap_bin_ms((end - start) / 1e9)
    util = link_analysis.utilisation(series, rates, start, end, bin_ms)
    # t_ms: emulated ms since the traffic's start
    util["t_hw_us"] = util["t_ms"].astype("float64") * 1e3 / tables.dilation_factor(sc)
    write_table(util, rf, "link_utilisation")
    busiest = links.sort_values("utilisation", ascending=False).head(5)
    groups = read_json(rf.groups_end) if rf.groups_end.exists() else {}
    return {"ports": int(len(links)), "utilisation_bin_ms": bin_ms,
            "mean_utilisation": float(links["utilisation"].mean()) if len(links) else None,
            "busiest": busiest[["port", "to", "utilisation", "max_queue_bytes"]].to_dict("records"),
            "ecmp": ecmp_spread(groups, links, frame)}, fid
