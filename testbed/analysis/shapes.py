"""The summary's sections, typed below the top level: what docs/summary.schema.json says of the keys
each section has, and what a scenario's [[expect]] paths are checked against before anything runs
(testbed.scenario.loader, with the committed schema: `metric_path_error`).

Each section is built as a dict by its producer in testbed.analysis; the keys here are theirs, and
every root test holds every run's summary to the schema (tests/integration/helpers.summary_of), so a
producer that grows a key without it here fails there. A closed object lists all its keys; an open
one (`OPEN`: a record whose fields are another module's, like the dilation's calibration) only says
it is an object, and a path may go anywhere inside it. No import beyond the standard library: the
loader reads the committed schema, not this module's callers."""
from __future__ import annotations

import difflib
import json
from functools import cache
from pathlib import Path

NUM = {"type": "number"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
ANY: dict = {}
OPEN = {"type": "object"}
SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "summary.schema.json"


def null(s: dict) -> dict:
    return {"anyOf": [s, {"type": "null"}]}


def arr(items: dict) -> dict:
    return {"type": "array", "items": items}


def obj(required: dict, optional: dict | None = None) -> dict:
    """A closed object: these keys, and no others."""
    return {"type": "object", "properties": {**required, **(optional or {})}, "required": list(required),
            "additionalProperties": False}


def mapping(values: dict) -> dict:
    """An object keyed by names the run chooses (a DSCP, a class, a job, a tag)."""
    return {"type": "object", "additionalProperties": values}


COLLECTIVE = obj(
    {"algorithm": STR, "ranks": NUM, "bytes_per_rank": NUM, "bound_formula": STR, "bound_terms": null(OPEN),
     "link_bw_mbps": NUM, "iterations": NUM, "iterations_complete": NUM, "time_s": arr(null(NUM)),
     "mean_time_s": null(NUM), "bound_s": NUM, "bound_ratio": null(NUM), "bound_ratio_min": null(NUM),
     "algbw_mbps": null(NUM), "busbw_mbps": null(NUM), "header_overhead_fraction": NUM},
    # by workload (testbed.analysis.summary.collective_section)
    {"phases_s": OPEN, "model": OPEN, "parallelism": OPEN, "collectives": arr(OPEN), "ddp": OPEN,
     "transfers": NUM, "parameter_server": OPEN, "scale": OPEN, "trace": ANY, "collective_algorithm": ANY,
     "compute_steps": NUM})
TRAINING = null(obj({"sync_share": null(NUM), "sync_share_by_iteration": arr(null(NUM)),
                     "exposed_comm_s": null(NUM), "exposed_comm_s_by_iteration": arr(null(NUM)),
                     "hosts_computing": NUM, "definition": STR}))
SLOWDOWN_STATS = obj({"messages": NUM}, {"p50": NUM, "p95": NUM, "p99": NUM, "max": NUM})
BOTTLENECK = null(obj({"port": STR, "class": NUM, "class_name": null(STR), "samples": NUM, "mean_bytes": NUM,
                       "p50_bytes": NUM, "p95_bytes": NUM, "p99_bytes": NUM, "max_bytes": NUM,
                       "run_max_bytes": NUM}))

SECTIONS: dict[str, dict] = {
    "collective": COLLECTIVE,
    "training": TRAINING,
    "jobs": null(mapping(obj({
        "tenant": STR, "hosts": arr(STR), "workload": STR, "mean_time_s": null(NUM), "collective": COLLECTIVE,
        "training": TRAINING, "alone_mean_time_s": null(NUM), "alone_run_id": null(STR),
        "alone_kept_up": null(BOOL), "slowdown": null(NUM)}))),
    "isolation": null(obj({"isolation_version": NUM, "mechanism": STR, "pairs": arr(OPEN), "cross_tenant_sent": NUM,
                           "cross_tenant_delivered": NUM, "same_tenant_sent": NUM, "same_tenant_delivered": NUM})),
    "latency_us": obj({"p50": null(NUM), "p99": null(NUM), "min": null(NUM), "max": null(NUM), "definition": STR}),
    "nic_queueing": obj({"frames": NUM}, {"wait_us_p50": null(NUM), "wait_us_p99": null(NUM),
                                          "untimed_frames": NUM, "by_host_class": arr(OPEN)}),
    "goodput": obj({"payload_bytes_delivered": NUM, "traffic_duration_s": NUM, "aggregate_mbps": null(NUM)}),
    "faults": arr(obj({"t_ns": NUM, "at_s": NUM, "action": STR, "reroute_ms": null(NUM),
                       "lost_packets_around": NUM, "traffic_affected_ms": null(NUM),
                       "traffic_recovered_ms": null(NUM)},
                      {"link": STR, "switch": STR, "links": arr(STR), "frame_error_rate": NUM, "ports": arr(STR),
                       "by": STR})),
    "qos": null(obj({
        "telemetry": obj({"target_hz": NUM, "achieved_hz": null(NUM), "late_samples": NUM, "rows": NUM,
                          "pfc_poll_hz": null(NUM), "blind_max_us": null(NUM), "blind_over_1ms": null(NUM),
                          "agent_cores": NUM}),
        "queues": obj({"busiest": arr(OPEN), "buffer_drops": NUM, "drops_by_port": arr(OPEN)}),
        "ecn": obj({"marked": NUM, "ect_packets": NUM, "marking_ports": arr(OPEN), "profiles": arr(OPEN)}),
        "ovs_input_backlog": null(OPEN),
        "pfc": obj({"accounting": STR, "ingress": null(OPEN), "pauses": NUM, "resumes": NUM, "paused_ports": NUM,
                    "paused_hosts": arr(STR), "reaction_us": null(OPEN), "watchdog_fired": NUM,
                    "headroom_overruns": arr(OPEN), "paused_time": arr(OPEN), "resume_release": null(OPEN),
                    "deadlock": null(OPEN), "deadlocked": BOOL},
                   {"pauses_per_mb": null(NUM)}),
    }, {
        # controller.ecn_tuning = "adaptive" (testbed.analysis.ecn_tuning); absent otherwise
        "ecn_tuning": obj({"mode": STR, "target": OPEN, "window_us": NUM, "window_wall_s": NUM, "changes": NUM,
                           "classes": mapping(obj({
                               "start": OPEN, "end": OPEN, "changes": NUM, "harder": NUM, "gentler": NUM,
                               "reverted": NUM,
                               "windows": NUM, "judged_windows": NUM, "met_windows": NUM,
                               "met_share_second_half": null(NUM), "last_change_us": null(NUM),
                               "judged_since_last_change": NUM, "settled": BOOL,
                               "p99_bytes_second_half": null(NUM), "utilisation_second_half": null(NUM),
                               "kmin_bytes_second_half": null(arr(NUM)), "converged": BOOL,
                               "refused": arr(STR)})),
                           "history": arr(OPEN)}),
    })),
    "latency_by_dscp_us": mapping(obj({"packets": NUM, "p50": null(NUM), "p99": null(NUM)})),
    "latency_by_class_us": mapping(obj({"packets": NUM, "mean_us": null(NUM), "min_us": null(NUM),
                                        "p50_us": null(NUM), "p90_us": null(NUM), "p99_us": null(NUM),
                                        "p999_us": null(NUM), "max_us": null(NUM)})),
    "transport": obj({
        "reliability": STR, "cc": STR, "dcqcn": null(OPEN), "retransmitted_packets": NUM, "retransmitted_bytes": NUM,
        "naks": NUM, "go_backs": NUM, "timeouts": NUM, "cnps_sent": NUM, "cnps_received": NUM, "rate_cuts": NUM,
        "icrc_errors": NUM, "messages_with_wrong_bytes": NUM,
        "message_fct_s": obj({"p50": null(NUM), "p99": null(NUM), "max": null(NUM)}),
        "steady_state": null(obj({"start_ns": NUM, "end_ns": NUM, "duration_s": NUM, "flows": NUM,
                                  "jain_index": null(NUM), "flow_mbps": mapping(NUM), "total_mbps": NUM,
                                  "bottleneck_queue": BOTTLENECK})),
        "agents": OPEN}),
    "time_dilation": null(obj({"dcqcn_time_scale": null(NUM), "fabric_base_rtt_us": null(NUM),
                               "fabric_base_rtt_definition": STR, "reference_base_rtt_us": null(NUM),
                               "dilated_reference_rtt_us": null(NUM), "rtt_ratio": null(NUM),
                               "warning": null(STR)})),
    "dilation": obj({
        "factor": NUM, "chosen_by": STR, "hardware": OPEN, "emulated": OPEN, "calibration": null(OPEN),
        "emulator_latency": OPEN,
        # each headline value in hardware units beside its emulated one (testbed.analysis.hardware)
        "metrics": obj({name: OPEN for name in (
            "iteration_s", "bound_s", "busbw", "fct_p50", "fct_p99", "one_way_latency_p50", "one_way_latency_p99",
            "bottleneck_queueing_delay_p99", "longest_pause", "paused_total", "pfc_headroom_time",
            "pfc_reaction_max", "dcqcn_final_rate_p50")} | {"bound_ratio": null(NUM)})}),
    "fct_slowdown": null(obj({"definition": STR, "all": SLOWDOWN_STATS, "by_tag": mapping(SLOWDOWN_STATS)})),
    "links": obj({"ports": NUM, "utilisation_bin_ms": NUM, "mean_utilisation": null(NUM), "busiest": arr(OPEN),
                  "ecmp": null(obj({"groups": NUM, "loaded_groups": NUM, "members_used_share": null(NUM),
                                    "max_over_mean": null(NUM), "per_group": arr(OPEN)}))}),
}


@cache
def committed_schema() -> dict:
    return json.loads(SCHEMA_FILE.read_text())


def metric_path_error(path: str, schema: dict | None = None) -> str | None:
    """Why a dotted path into summary.json cannot name a value of any run, or None if it can (or
    leads into an open record, whose fields this schema does not list)."""
    node, walked = schema or committed_schema(), []
    for part in path.split("."):
        node = _step(node, part, ".".join(walked) or "summary.json")
        if isinstance(node, str):
            return node
        if node is None:
            return None   # inside an open record
        walked.append(part)
    return None


def _step(node: dict, part: str, where: str):
    """The schema under ``part``, None for an open record, or why there is none (a str)."""
    branches = [b for b in node.get("anyOf", [node]) if b.get("type") != "null"]
    why = None
    for b in branches:
        t = b.get("type")
        if t == "array":
            if part.isdigit():
                return b.get("items", ANY)
            why = why or f"{where} is a list: expected an index (0, 1, ...), got {part!r}"
        elif t == "object":
            props = b.get("properties", {})
            if part in props:
                return props[part]
            extra = b.get("additionalProperties", True)
            if isinstance(extra, dict):
                return extra
            if extra is not False:
                return None
            close = difflib.get_close_matches(part, list(props), n=1)
            why = why or (f"{where} has no {part!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                          + f" (it has: {', '.join(props)})")
        elif not b:
            return None   # any value: not declared here
        else:
            why = why or f"{where} is a {t}, with no {part!r} inside"
    return why
