"""What a run of a scenario would build and do, without running it: `testbed check NAME`.

Pure planning (the same functions a run uses: the fabric, the routes, the messages, the port
policy, the plan-time bound) plus a look at what this machine offers. Needs no root and starts
nothing.
"""
from __future__ import annotations

import dataclasses
import os
from collections import Counter
from pathlib import Path

from testbed.analysis.bounds import planned_bound
from testbed.fabric import bpfmaps
from testbed.fabric import qos
from testbed.fabric.routing import compute_routes
from testbed.run import probe
from testbed.scenario import Scenario, build_fabric
from testbed.scenario.dilation import dilate
from testbed.traffic import nic
from testbed.traffic.workload import build_messages, job_fabric, job_scenario, message_latency_s

CHECK_VERSION = 1
RPS_PROBE = Path("/sys/class/net/lo/queues/rx-0/rps_cpus")


def machine(sc: Scenario) -> dict:
    """What a run here would use, and what would stop it from starting."""
    blockers = []
    if os.geteuid() != 0:
        blockers.append("not root (Mininet, Open vSwitch and namespaces need it)")
    try:
        bpfmaps.require_object()
    except bpfmaps.BpfUnavailable as e:
        blockers.append(str(e))
    try:
        nic.require_built()
    except nic.NotBuilt as e:
        blockers.append(str(e))
    blockers += probe.socket_buffers_too_small()
    datapath = probe.choose_datapath()
    return {"datapath": "ovs-kernel" if datapath == "kernel" else "ovs-userspace (netdev)",
            "receive_steering": "rps per flow on every veth" if RPS_PROBE.exists() else "none (no RPS)",
            "ecn": "per packet in the port program" if sc.qos.ecn else "off",
            "pfc": f"{sc.qos.pfc_accounting} rule, switch agent" if sc.qos.pfc else "off",
            "cpus": len(os.sched_getaffinity(0)), "can_run_here": not blockers, "blockers": blockers}


def dilation_of(sc: Scenario) -> dict:
    """The D a run would get: as set, version 1's 1, or auto's from this machine's cached
    calibration (None when there is none yet: the first run measures it)."""
    from testbed.run.calibrate import auto_factor, cached, spare_cores  # noqa: PLC0415
    setting = sc.run.dilation
    out = {"setting": setting, "version": sc.version, "hardware_link_gbps": sc.dilation.hw_bw_gbps,
           "factor": None, "calibration": None}
    if sc.version == 1 or setting != "auto":
        out["factor"] = 1.0 if sc.version == 1 else float(setting)
    else:
        cal = cached(sc)
        if cal is not None:
            out["factor"], _ = auto_factor(sc, cal, spare_cores(0.2))
            out["calibration"] = cal["file"]
    out["emulated_link_mbps"] = sc.fabric.bw_mbps / out["factor"] if out["factor"] else None
    return out


def _class_profile(c) -> dict:
    """A class as a run applies it: DSCPs, share, buffer, its ECN profile and its PFC settings (0:
    derived at run time, testbed/fabric/qos.py)."""
    d = dataclasses.asdict(c)
    out = {k: d[k] for k in ("name", "dscp", "default", "weight", "buffer_bytes")}
    out["ecn"] = ({k: d[k] for k in ("ecn_kmin_bytes", "ecn_kmax_bytes", "ecn_pmax")} if c.ecn else None)
    out["pfc"] = ({k: d[k] for k in ("xoff_bytes", "xon_bytes", "headroom_bytes")} if c.pfc else None)
    out["dscp"] = list(out["dscp"])
    return out


def asserts(sc: Scenario) -> dict:
    """What a run of ``sc`` is judged by, and what it does on purpose: its faults and policy
    changes (hardware time), its expectations, and the baseline `regress` holds it to."""
    from testbed.regress.baselines import load_baseline  # noqa: PLC0415
    base = load_baseline(sc.name)
    return {
        "faults": [dataclasses.asdict(f) for f in sc.faults],
        "policy_changes": [dataclasses.asdict(c) for c in sc.policy_changes],
        "expectations": [{"metric": e.metric, "op": e.op, **({"than": e.than} if e.than else {"value": e.value})}
                         for e in sc.expect],
        "baseline": None if base is None else {
            "run_id": base["run_id"], "git_commit": base.get("git_commit"),
            "dilation_factor": base.get("dilation_factor"), "metrics": len(base["metrics"]),
            "measured_tolerances": len(sc.tolerance)},
        # the suite is scenarios/'s files; one from elsewhere is regressed by naming it
        "in_regression_suite": not sc.regress_skip and sc.path == f"scenarios/{sc.name}.toml",
        "regress_skip": sc.regress_skip or None,
    }


def describe(sc: Scenario) -> dict:
    """The fabric, the traffic, the bound and the port policy a run of ``sc`` would have."""
    fabric = build_fabric(sc.fabric)
    ranks, messages = build_messages(sc, fabric)
    bw_bps = sc.fabric.bw_mbps * 1e6
    first = [m for m in messages if m.iteration == 0]
    bounds = {}
    for job in sc.jobs or (None,):   # each job's bound as if alone; a single workload's own
        js = job_scenario(sc, job) if job else sc
        jranks = build_messages(js, job_fabric(fabric, job))[0] if job else ranks
        bounds[job.name if job else ""] = planned_bound(js.workload.type, len(jranks), js.workload.bytes_per_rank,
                                                        bw_bps, [m for m in first if not job or m.job == job.name],
                                                        message_latency_s(sc.fabric, fabric))
    bound, formula, terms = next(iter(bounds.values()))
    transfers = [m for m in messages if m.op != "compute"]
    by_tag = Counter(m.tag for m in transfers)
    rates = Counter(link.bw_mbps for link in fabric.links)
    out = {
        "check_version": CHECK_VERSION, "scenario": sc.name, "description": sc.description,
        "fabric": {"kind": fabric.kind, "dims": list(fabric.dims), "switches": len(fabric.switches),
                   "hosts": len(fabric.hosts), "links": len(fabric.links),
                   "links_by_rate_mbps": {f"{r:g}": n for r, n in sorted(rates.items())},
                   "mtu_bytes": sc.fabric.mtu_bytes, "frame_bytes": qos.frame_bytes(sc),
                   "routing": sc.controller.routing, "dateline": sc.controller.dateline},
        "traffic": {"workload": sc.workload.type, "ranks": len(ranks), "iterations": sc.workload.iterations,
                    "transfers": len(transfers), "transfers_by_tag": dict(sorted(by_tag.items())),
                    "bytes": int(sum(m.bytes for m in transfers)),
                    "bytes_first_iteration": int(sum(m.bytes for m in first if m.op != "compute")),
                    "compute_steps": len(messages) - len(transfers),
                    "compute_s": sum(m.duration_ns for m in messages if m.op == "compute") / 1e9},
        "bound": {"per_iteration_s": bound, "formula": formula, "terms": terms,
                  "jobs": {name: {"per_iteration_s": b, "formula": f} for name, (b, f, _) in bounds.items()}
                  if sc.jobs else None},
        "qos": {"scheduling": sc.qos.scheduling, "classes": [c.name for c in sc.classes],
                "ecn": sc.qos.ecn, "pfc": sc.qos.pfc,
                "profiles": [_class_profile(c) for c in sc.classes],
                "ecn_tuning": None if sc.controller.ecn_tuning == "off" else {
                    "queue_p99_bytes": sc.controller.ecn_tuning_queue_p99_bytes,
                    "utilisation": sc.controller.ecn_tuning_utilisation,
                    "kmin_bytes": list(sc.controller.ecn_tuning_kmin_bytes),
                    "kmax_bytes": list(sc.controller.ecn_tuning_kmax_bytes),
                    "pmax": [sc.controller.ecn_tuning_pmax_min, sc.controller.ecn_tuning_pmax_max],
                    "window_us": sc.controller.ecn_tuning_window_us,
                    "hysteresis_windows": sc.controller.ecn_tuning_hysteresis_windows}},
        "asserts": asserts(sc),
    }
    out["dilation"] = dilation_of(sc)
    if sc.qos.pfc:
        # the thresholds a run derives, from the emulated fabric at the D a run would get; without a
        # calibration yet, at the smallest D where they are the hardware's (as at any D above it:
        # below it the headroom covers the switch agent's own reaction instead)
        hardware_s = qos.switch_headroom_time_s(sc)
        factor = out["dilation"]["factor"] or (max(1.0, qos.emulator_reaction_s(sc) / hardware_s)
                                               if hardware_s else 1.0)
        emulated = dilate(sc, factor, "check")
        efabric = build_fabric(emulated.fabric)
        pol = qos.policy(emulated, efabric, compute_routes(efabric, sc.controller.routing))
        if pol.pfc_accounting == "ingress":
            xoff = [t.xoff_bytes for t in pol.ingress.values()]
            xon = [t.xon_bytes for t in pol.ingress.values()]
        else:
            rows = [pol.queues[k] for k in pol.pause_map]
            xoff = [q.xoff_bytes for q in rows]
            xon = [q.xon_bytes for q in rows]
        out["qos"]["pfc_rule"] = pol.pfc_accounting
        out["qos"]["headroom_covers_us_hardware"] = qos.headroom_time_s(emulated) * 1e6 / factor
        out["qos"]["reaction_allowance_ms"] = pol.reaction_allowance_us / 1e3 if out["dilation"]["factor"] else None
        out["qos"]["lossless_queues"] = len(pol.pause_map)
        out["qos"]["xoff_bytes"] = [min(xoff), max(xoff)] if xoff else None
        out["qos"]["xon_bytes"] = [min(xon), max(xon)] if xon else None
    return out
