"""Scenario files read and checked: each value against its declaration, the cross-checks that need
the fabric and the workload, `--set` overrides. Anything else in a file is an error naming the
file and the field (exit 2)."""
from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from testbed.analysis.shapes import metric_path_error
from testbed.errors import InputError, did_you_mean
from testbed.metrics import DERIVED, TRACKED, tolerance_of
from testbed.scenario.schema import (DEFAULT_CLASSES, READABLE_VERSIONS, Dilation, JobSpec, MAX_CLASSES, POLICY_FIELDS,
                                     SECTIONS,
                                     TOP_LEVEL, TOPOLOGY_FIELDS, ClassSpec, ExpectSpec, FaultSpec, PolicyChangeSpec,
                                     DcqcnSpec, Scenario, ToleranceSpec, WorkloadSpec, build_fabric,
                                     dcqcn_reference_rates)
from testbed.scenario.overrides import apply_overrides
from testbed.traffic.workload import grid_width, job_fabric, trace_messages
from testbed.units import parse_bytes
from testbed.wire import HEADER_BYTES

SCENARIO_DIR = Path(os.environ.get("TESTBED_SCENARIO_DIR", Path(__file__).resolve().parents[2] / "scenarios"))
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def _check_value(where: str, name: str, raw: Any, meta: dict) -> Any:
    kind, lo, hi = meta["kind"], meta["lo"], meta["hi"]

    def fail(msg: str):
        raise InputError(where, name, f"{msg} ({meta['doc']})")

    if kind == "any":
        return raw
    if kind == "dilation":
        if raw == "auto":
            return raw
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw) or raw < 1:
            fail(f"expected \"auto\" or a number >= 1, got {raw!r}")
        return float(raw)
    if kind == "bool":
        if not isinstance(raw, bool):
            fail(f"expected true or false, got {raw!r}")
        return raw
    if kind == "str":
        if not isinstance(raw, str):
            fail(f"expected a string, got {raw!r}")
        if meta["choices"] and raw not in meta["choices"]:
            fail(f"expected one of {', '.join(meta['choices'])}; got {raw!r}")
        return raw
    if kind == "str_list":
        if not isinstance(raw, (list, tuple)) or not all(isinstance(v, str) for v in raw):
            fail(f"expected a list of strings, got {raw!r}")
        return tuple(raw)
    if kind == "int_list":
        if not isinstance(raw, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                         for v in raw):
            fail(f"expected a list of integers, got {raw!r}")
        n_lo, n_hi = meta["length"]
        if not n_lo <= len(raw) <= n_hi:
            fail(f"expected {n_lo} to {n_hi} numbers, got {len(raw)}")
        if any(not lo <= v <= hi for v in raw):
            fail(f"every number must be in {lo}..{hi}, got {list(raw)}")
        return tuple(raw)
    if kind == "bytes":
        try:
            value = parse_bytes(raw)
        except ValueError as e:
            fail(str(e))
    elif kind == "int":
        if isinstance(raw, bool) or not isinstance(raw, int):
            fail(f"expected an integer, got {raw!r}")
        value = raw
    elif kind == "float":
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            fail(f"expected a number, got {raw!r}")
        value = float(raw)
        if not math.isfinite(value):
            fail(f"expected a finite number, got {raw!r}")
    else:  # pragma: no cover - schema bug
        raise AssertionError(kind)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        fail(f"must be between {lo} and {hi}, got {value}")
    return value


def _build_section(where: str, section: str, cls, table: Any):
    if not isinstance(table, dict):
        raise InputError(where, section, f"expected a table [{section}], got {table!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in table:
        if key not in fields:
            raise InputError(where, f"{section}.{key}",
                             f"unknown field{did_you_mean(key, fields)}; expected one of {', '.join(fields)}")
    values = {k: _check_value(where, f"{section}.{k}", v, fields[k].metadata) for k, v in table.items()}
    return cls(**values)


def _cross_checks(where: str, sc: Scenario, fabric_keys: set[str]) -> None:
    """What no single field can say: the settings against each other, then against the fabric they
    build, its workload and its faults."""
    _check_settings(where, sc, fabric_keys)
    try:
        fabric = build_fabric(sc.fabric)
    except ValueError as e:
        raise InputError(where, "fabric", str(e)) from None
    n_hosts = len(fabric.hosts)
    if n_hosts < 2:
        raise InputError(where, "fabric", "a collective needs at least 2 hosts")
    # every link end has a slot of MAX_CLASSES queues in the port program's maps
    from testbed.fabric.bpfmaps import MAX_QUEUES  # noqa: PLC0415
    ports = len(fabric.interfaces())
    if ports > MAX_QUEUES // MAX_CLASSES:
        raise InputError(where, "fabric", f"{ports} link ends; the port program holds at most "
                         f"{MAX_QUEUES // MAX_CLASSES} (testbed/fabric/bpf/port_qos.bpf.c MAX_QUEUES)")
    if sc.jobs:
        _check_jobs(where, sc, fabric)
    else:
        _check_workload_shape(where, sc, fabric)
        _check_workload_parties(where, sc, fabric)
    _check_faults(where, sc, fabric)
    _check_classes(where, sc)


def _check_settings(where: str, sc: Scenario, fabric_keys: set[str]) -> None:
    f, w, c = sc.fabric, sc.workload, sc.controller
    for topo, keys in TOPOLOGY_FIELDS.items():
        for key in sorted(keys & fabric_keys):
            if topo != f.topology:
                raise InputError(where, f"fabric.{key}", f"only applies to topology {topo}, not {f.topology}")
    if f.topology == "fattree" and f.k % 2:
        raise InputError(where, "fabric.k", f"must be even, got {f.k}")
    if c.routing == "dimension_order" and f.topology != "torus":
        raise InputError(where, "controller.routing", f"dimension_order needs a torus, not a {f.topology}")
    if c.dateline and (f.topology != "torus" or c.routing in ("ecmp", "dmodk")):
        raise InputError(where, "controller.dateline", "needs a torus with single-path routing")
    if c.dateline and c.vc1_dscp == w.dscp:
        raise InputError(where, "controller.vc1_dscp", f"must differ from workload.dscp ({w.dscp})")
    if sc.transport.cc == "dcqcn":
        default = next((k for k in sc.classes if k.default), None)
        cls = default if sc.qos.scheduling == "fifo" else next((k for k in sc.classes if w.dscp in k.dscp), default)
        if not sc.qos.ecn or (cls is not None and not cls.ecn) or not w.ect:
            raise InputError(where, "transport.cc", "dcqcn reacts to ECN marks: it needs qos.ecn = true, a class "
                             f"with ecn = true for workload.dscp {w.dscp} and workload.ect = true")
    if c.ecn_tuning == "adaptive":
        _check_ecn_tuning(where, sc)
    frame = w.payload_bytes + HEADER_BYTES
    if frame > f.mtu_bytes + 14:
        raise InputError(where, "workload.payload_bytes",
                         f"a {w.payload_bytes}-byte payload makes {frame}-byte frames, over fabric.mtu_bytes "
                         f"{f.mtu_bytes} + 14")
    if f.queue_limit_bytes < 2 * frame:
        raise InputError(where, "fabric.queue_limit_bytes",
                         f"must hold at least two {frame}-byte frames, got {f.queue_limit_bytes}")


def _check_ecn_tuning(where: str, sc: Scenario) -> None:
    """Adaptive ECN tuning: something to tune, bounds that are bounds, and every marking class
    starting inside them (the app moves a profile, it never jumps one into its bounds)."""
    c = sc.controller
    marking = [k for k in sc.classes if k.ecn]
    if not sc.qos.ecn or not marking:
        raise InputError(where, "controller.ecn_tuning", "adaptive tunes the marking classes: it needs qos.ecn = true "
                         "and a class with ecn = true")
    for name, (lo, hi) in (("ecn_tuning_kmin_bytes", c.ecn_tuning_kmin_bytes),
                           ("ecn_tuning_kmax_bytes", c.ecn_tuning_kmax_bytes)):
        if lo > hi:
            raise InputError(where, f"controller.{name}", f"expected [lo, hi] with lo <= hi, got [{lo}, {hi}]")
    if c.ecn_tuning_pmax_min > c.ecn_tuning_pmax_max:
        raise InputError(where, "controller.ecn_tuning_pmax_min", f"must not exceed ecn_tuning_pmax_max "
                         f"({c.ecn_tuning_pmax_max}), got {c.ecn_tuning_pmax_min}")
    for i, k in enumerate(sc.classes):
        if not k.ecn:
            continue
        for field, value, (lo, hi) in (("ecn_kmin_bytes", k.ecn_kmin_bytes, c.ecn_tuning_kmin_bytes),
                                       ("ecn_kmax_bytes", max(k.ecn_kmax_bytes, k.ecn_kmin_bytes),
                                        c.ecn_tuning_kmax_bytes),
                                       ("ecn_pmax", k.ecn_pmax, (c.ecn_tuning_pmax_min, c.ecn_tuning_pmax_max))):
            if not lo <= value <= hi:
                raise InputError(where, f"classes[{i}].{field}", f"is {value}, outside controller.ecn_tuning's "
                                 f"bounds [{lo}, {hi}]: adaptive tuning starts from the class's profile")


def _check_workload_shape(where: str, sc: Scenario, fabric) -> None:
    """The workload against the fabric's size: a trace that parses, enough stages, a grid."""
    w, n_hosts = sc.workload, len(fabric.hosts)
    if w.type == "parameter_server":
        colocated = w.ps_placement == "colocated"
        workers = w.ps_workers or (n_hosts if colocated else n_hosts - w.ps_servers)
        hosts_needed = workers if colocated else workers + w.ps_servers
        if workers < 1 or hosts_needed > n_hosts:
            raise InputError(where, "workload.ps_workers" if w.ps_workers else "workload.ps_servers",
                             f"{workers} workers and {w.ps_servers} {w.ps_placement} servers need {max(hosts_needed, 2)} "
                             f"hosts; this fabric has {n_hosts}")
        if colocated and w.ps_servers > workers:
            raise InputError(where, "workload.ps_servers", f"{w.ps_servers} colocated servers need as many workers "
                             f"to sit on; there are {workers}")
    if w.type in ("chakra", "simai"):
        trace_messages(sc, [h.name for h in fabric.hosts], where)  # a bad trace file is bad input
    if w.type == "pipeline":
        if w.tp * w.pp * w.dp > n_hosts:
            raise InputError(where, "workload.pp", f"tp x pp x dp = {w.tp * w.pp * w.dp} ranks need as many hosts; "
                             f"this fabric has {n_hosts}")
        if w.dp % w.ep:
            raise InputError(where, "workload.ep", f"an EP group takes ep of a stage's dp = {w.dp} replicas: "
                             f"ep = {w.ep} must divide it")
        if w.ep > 1 and not w.moe_every:
            raise InputError(where, "workload.ep", "expert parallelism needs MoE layers (set workload.moe_every)")
        if w.num_experts and not w.moe_every:
            raise InputError(where, "workload.num_experts", "experts need MoE layers (set workload.moe_every)")
        if w.num_experts % w.ep:
            # Megatron asserts it: each EP rank holds num_experts / ep whole experts
            raise InputError(where, "workload.num_experts", f"each of the ep = {w.ep} EP hosts holds whole experts: "
                             f"num_experts = {w.num_experts} must be a multiple of it")
        if w.ep > 1 and w.tp > 1 and not w.tp_sequence_parallel:
            # Megatron refuses MoE with TP but without sequence parallelism: the tokens an EP rank
            # dispatches are its sequence shard
            raise InputError(where, "workload.tp_sequence_parallel", "MoE with tp > 1 needs sequence parallelism, "
                             "as Megatron does")
    if w.type == "halving_doubling" and n_hosts & (n_hosts - 1):
        raise InputError(where, "workload.type", f"halving_doubling needs a power-of-two number of ranks; this "
                         f"fabric has {n_hosts} hosts")
    if w.type == "torus2d_allreduce":
        x = grid_width(sc, fabric)
        if x < 2 or n_hosts % x or n_hosts // x < 2:
            raise InputError(where, "workload.grid_x", f"rows of {x} ranks do not make a grid of at least 2 x 2 "
                             f"out of {n_hosts} hosts")


def _check_faults(where: str, sc: Scenario, fabric) -> None:
    for i, fault in enumerate(sc.faults):
        if fault.action.startswith("link_"):
            try:
                link = fabric.link_by_name(fault.link)
            except KeyError:
                raise InputError(where, f"faults[{i}].link", f"no link {fault.link!r} in this fabric "
                                 f"(write it as <node>-<node>, e.g. {fabric.links[-1].name})") from None
            if link.a in fabric.host_by_name or link.b in fabric.host_by_name:
                raise InputError(where, f"faults[{i}].link", "only switch-to-switch links can fail "
                                 "(a host's only link down would cut it off)")
        elif fault.action == "corrupt":
            if fault.link != "*":
                try:
                    fabric.link_by_name(fault.link)
                except KeyError:
                    raise InputError(where, f"faults[{i}].link", f"no link {fault.link!r} in this fabric (write "
                                     f"it as <node>-<node>, e.g. {fabric.links[-1].name}, or \"*\" for every "
                                     f"link)") from None
        elif fault.action.startswith("switch_") and fault.switch not in fabric.switch_by_name:
            raise InputError(where, f"faults[{i}].switch", f"no switch {fault.switch!r} in this fabric "
                             f"(e.g. {fabric.switches[-1].name})")


def _check_workload_parties(where: str, sc: Scenario, fabric) -> None:
    """Who sends to whom: hosts that exist, and shifts and counts that send something."""
    w = sc.workload
    hosts = [h.name for h in fabric.hosts]
    n_hosts = len(hosts)
    if w.type == "incast":
        if w.receiver and w.receiver not in hosts:
            raise InputError(where, "workload.receiver", f"no host {w.receiver!r} in this fabric (e.g. {hosts[0]})")
        if w.senders > n_hosts - 1:
            raise InputError(where, "workload.senders", f"at most {n_hosts - 1} hosts can send to one receiver")
        if w.not_ect_senders > w.senders:
            raise InputError(where, "workload.not_ect_senders", f"more than the {w.senders} senders")
    if w.bulk_shift and w.bulk_shift % n_hosts == 0:
        raise InputError(where, "workload.bulk_shift", f"a multiple of the {n_hosts} hosts sends nothing anywhere")
    if w.victim:
        pair = w.victim.split(">")
        if len(pair) != 2 or any(p not in hosts for p in pair) or pair[0] == pair[1]:
            raise InputError(where, "workload.victim", f"expected <src host>><dst host> of two hosts, e.g. "
                             f"{hosts[0]}>{hosts[-1]}; got {w.victim!r}")
    if w.type == "shift" and w.shift % n_hosts == 0:
        raise InputError(where, "workload.shift", f"a multiple of the {n_hosts} ranks sends nothing anywhere")
    if w.bytes_per_rank < n_hosts:
        raise InputError(where, "workload.bytes_per_rank",
                         f"must be at least one byte per rank ({n_hosts}), got {w.bytes_per_rank}")


def _check_classes(where: str, sc: Scenario) -> None:
    classes, f = sc.classes, sc.fabric
    if not 1 <= len(classes) <= MAX_CLASSES:
        raise InputError(where, "classes", f"expected 1 to {MAX_CLASSES} classes, got {len(classes)}")
    seen_names: set[str] = set()
    owner: dict[int, str] = {}
    for i, c in enumerate(classes):
        at = f"classes[{i}]"
        if not _NAME_RE.match(c.name) or c.name in seen_names:
            raise InputError(where, f"{at}.name", f"needs a unique name (letters, digits, - and _), got {c.name!r}")
        seen_names.add(c.name)
        for d in c.dscp:
            if d in owner:
                raise InputError(where, f"{at}.dscp", f"DSCP {d} is already in class {owner[d]}")
            owner[d] = c.name
        buffer = c.buffer_bytes or f.queue_limit_bytes
        if c.ecn and c.ecn_kmin_bytes > c.ecn_kmax_bytes:
            raise InputError(where, f"{at}.ecn_kmin_bytes", f"must not exceed ecn_kmax_bytes ({c.ecn_kmax_bytes})")
        frame = sc.workload.payload_bytes + HEADER_BYTES
        if sc.qos.pfc and c.pfc and not c.xoff_bytes and buffer < 2 * frame:
            # qos.py's derived XOFF is never below two frames (a pause for less would stop a port
            # mid-frame): above such a buffer the class would drop before it paused
            raise InputError(where, f"{at}.buffer_bytes", f"a lossless class needs a buffer of at least two "
                             f"frames ({2 * frame} bytes at payload_bytes {sc.workload.payload_bytes}), got {buffer}")
        if c.pfc and c.xoff_bytes and c.xoff_bytes > buffer:
            raise InputError(where, f"{at}.xoff_bytes", f"must not exceed the class's buffer ({buffer})")
        if c.pfc and c.xon_bytes and c.xoff_bytes and c.xon_bytes >= c.xoff_bytes:
            raise InputError(where, f"{at}.xon_bytes", f"must be below xoff_bytes ({c.xoff_bytes})")
    if sum(c.default for c in classes) != 1:
        raise InputError(where, "classes", "exactly one class needs default = true (it takes unlisted DSCPs)")


def _check_policy_change(where: str, i: int, c: PolicyChangeSpec, classes, scheduling: str) -> PolicyChangeSpec:
    at = f"policy_changes[{i}]"
    if c.class_name not in {k.name for k in classes}:
        raise InputError(where, f"{at}.class_name", f"no class {c.class_name!r}; classes are "
                         f"{', '.join(k.name for k in classes)}")
    if c.field not in POLICY_FIELDS:
        raise InputError(where, f"{at}.field", f"expected one of {', '.join(POLICY_FIELDS)}, got {c.field!r}")
    why = policy_field_refused(c.field, scheduling)
    if why:
        raise InputError(where, f"{at}.field", why)
    meta = {f.name: f for f in dataclasses.fields(ClassSpec)}[c.field].metadata
    value = _check_value(where, f"{at}.value", c.value, meta)
    return dataclasses.replace(c, value=value)


def policy_field_refused(field: str, scheduling: str) -> str:
    """Why a run-time change of this [[classes]] field could not act under qos.scheduling ("": it
    can). A weight is a class's share only under weighted scheduling: elsewhere a change of it
    would be logged and do nothing."""
    if field == "weight" and scheduling != "weighted":
        return f"weight acts only under qos.scheduling = \"weighted\" (this scenario's is {scheduling!r})"
    return ""


def _resolve_apps(where: str, ctl, base_dir: Path):
    """controller.apps as absolute paths to the files, each checked to be there; a scenario
    without a routing app needs one of its own."""
    paths = []
    for i, p in enumerate(ctl.apps):
        path = (base_dir / p).resolve()
        if path.suffix != ".py" or not path.is_file():
            raise InputError(where, "controller.apps", f"{p!r} ({path}) is not a .py file (paths are relative to "
                             f"the scenario file's folder, {base_dir})")
        if path.stem in ("proactive_routing", "qos_policy") or path.stem in (q.stem for q in paths):
            raise InputError(where, "controller.apps", f"{p!r}: os-ken names a file's app module by its stem, and "
                             f"{path.stem!r} is taken: rename the file")
        paths.append(path)
    if ctl.app == "none" and not paths and not ctl.remote:
        raise InputError(where, "controller.app", "none needs a routing app of your own in controller.apps")
    if ctl.remote:
        try:
            parse_endpoint(ctl.remote)
        except ValueError as e:
            raise InputError(where, "controller.remote", str(e)) from None
        if paths:
            raise InputError(where, "controller.apps", "your apps run in the testbed's own controller, which no switch "
                             "connects to when controller.remote is set: run them in yours")
    return dataclasses.replace(ctl, apps=tuple(str(p) for p in paths))


def parse_endpoint(text: str) -> tuple[str, int]:
    """controller.remote's IPv4:PORT, or ValueError saying what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError(f"expected IP:PORT, got {text!r}")
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise ValueError(f"expected an IPv4 address before the port, got {host!r}") from None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected a port 1-65535, got {port!r}")
    return host, int(port)


def _check_remote(where: str, sc: Scenario) -> None:
    """What only the testbed's own routing app does, refused with an external controller."""
    ctl = sc.controller
    if not ctl.remote:
        return
    refuse = []
    if ctl.dateline:
        refuse.append(("controller.dateline", "the dateline's virtual channels are the testbed's routing app's"))
    if sc.qos.pfc and sc.qos.pfc_accounting == "ingress":
        refuse.append(("qos.pfc_accounting", "the ingress rule needs every frame tagged with its ingress port by the "
                       "testbed's routing app: set qos.pfc_accounting = \"egress\" (or qos.pfc = false)"))
    if len({j.tenant for j in sc.jobs}) > 1 and ctl.tenant_isolation:
        refuse.append(("controller.tenant_isolation", "tenant VLANs are pushed by the testbed's routing app"))
    if any(f.action == "controller_kill" for f in sc.faults):
        refuse.append(("faults", "controller_kill kills the testbed's controller, not yours"))
    if refuse:
        field, why = refuse[0]
        raise InputError(where, field, f"with controller.remote: {why}")


def check_class_value(where: str, field: str, value: Any) -> Any:
    """A value for one [[classes]] field, checked (and a size with a unit parsed) as a file's is: what
    a controller app asks of the QoS app at run time is held to the same rules."""
    fields = {f.name: f for f in dataclasses.fields(ClassSpec)}
    if field not in fields:
        raise InputError(where, field, f"not a [[classes]] field{did_you_mean(field, fields)}")
    return _check_value(where, field, value, fields[field].metadata)


def _check_expect(where: str, i: int, e: ExpectSpec) -> ExpectSpec:
    at = f"expect[{i}]"
    if not re.match(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$", e.metric):
        raise InputError(where, f"{at}.metric", f"expected a dotted path into summary.json, got {e.metric!r}")
    if (e.value is None) == (not e.than):
        raise InputError(where, at, "give exactly one of value and than")
    if e.metric in DERIVED or e.than in DERIVED:
        raise InputError(where, f"{at}.metric", f"{e.metric if e.metric in DERIVED else e.than} is derived from "
                         f"the run's checks: expect the check itself (e.g. qos.pfc.deadlocked, "
                         f"collective.iterations_complete, packets.lost)")
    if e.than and not re.match(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$", e.than):
        raise InputError(where, f"{at}.than", f"expected a dotted path into summary.json, got {e.than!r}")
    # a path no run's summary can hold fails here, not after a whole run (docs/summary.schema.json)
    for name, path in (("metric", e.metric), ("than", e.than)):
        why = path and metric_path_error(path)
        if why:
            raise InputError(where, f"{at}.{name}", f"{path!r} is not in summary.json: {why}")
    if e.value is not None:
        numeric = isinstance(e.value, (int, float)) and not isinstance(e.value, bool)
        if not numeric and not (isinstance(e.value, (str, bool)) and e.op in ("==", "!=")):
            raise InputError(where, f"{at}.value", f"{e.value!r} with {e.op}: ordering needs a number")
    return e


def _check_tolerance(where: str, i: int, t: ToleranceSpec) -> ToleranceSpec:
    if tolerance_of(t.metric) is None:
        raise InputError(where, f"tolerance[{i}].metric", f"{t.metric!r} is not a tracked metric; tracked: "
                         f"{', '.join(TRACKED)}")
    if tolerance_of(t.metric).better == "equal":
        raise InputError(where, f"tolerance[{i}].metric", f"{t.metric} must equal its baseline: no tolerance")
    return t


def load_document(name: str, doc: dict[str, Any], where: str, overrides: list[str] = (),
                  base_dir: Path | None = None) -> Scenario:
    """A scenario from its parsed file (where: how errors name it; base_dir: its folder, which
    controller.apps' paths are relative to)."""
    for key in doc:
        if key not in TOP_LEVEL:
            raise InputError(where, key, f"unknown field{did_you_mean(key, TOP_LEVEL)}; expected one of "
                             f"{', '.join(sorted(TOP_LEVEL))}")
    # a file without a version predates hardware time: version 1
    version = doc.get("scenario_version", 1)
    if version not in READABLE_VERSIONS:
        raise InputError(where, "scenario_version", f"this testbed reads versions "
                         f"{', '.join(map(str, READABLE_VERSIONS))}, got {version!r}")
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise InputError(where, "description", "expected a string")
    regress_skip = doc.get("regress_skip", "")
    if not isinstance(regress_skip, str) or ("regress_skip" in doc and not regress_skip.strip()):
        raise InputError(where, "regress_skip", "expected why the regression suite leaves this scenario out, "
                         "as a non-empty string")
    tables = {s: dict(doc.get(s, {})) if isinstance(doc.get(s, {}), dict) else doc[s] for s in SECTIONS}
    faults_doc = doc.get("faults", [])
    if not isinstance(faults_doc, list):
        raise InputError(where, "faults", "expected an array of tables [[faults]]")
    classes_doc = doc.get("classes")
    if classes_doc is not None and not isinstance(classes_doc, list):
        raise InputError(where, "classes", "expected an array of tables [[classes]]")
    arrays = {"classes": None if classes_doc is None else list(classes_doc), "jobs": doc.get("jobs", []),
              "faults": list(faults_doc), "policy_changes": doc.get("policy_changes", [])}
    arrays = {k: list(v) if isinstance(v, list) else v for k, v in arrays.items()}
    set_here = apply_overrides(overrides, tables, arrays)
    _check_version_fields(where, version, tables, overrides)
    try:
        sc = _build(name, doc, where, version, tables, arrays, base_dir or SCENARIO_DIR)
    except InputError as e:
        # a value the command line set is named as the user wrote it
        if e.where == where and e.field in set_here:
            raise InputError("--set", set_here[e.field], e.message) from None
        raise
    return dataclasses.replace(sc, overrides=tuple(overrides)) if overrides else sc


def _build(name: str, doc: dict, where: str, version: int, tables: dict, arrays: dict, base_dir: Path) -> Scenario:
    description, regress_skip = doc.get("description", ""), doc.get("regress_skip", "")
    faults_doc, classes_doc = arrays["faults"], arrays["classes"]
    built = {}
    for section, cls in SECTIONS.items():
        built[section] = _build_section(where, section, cls, tables[section])
    faults = tuple(_build_section(where, f"faults[{i}]", FaultSpec, t) for i, t in enumerate(faults_doc))
    classes = DEFAULT_CLASSES if classes_doc is None else tuple(
        _build_section(where, f"classes[{i}]", ClassSpec, t) for i, t in enumerate(classes_doc))
    changes_doc = arrays["policy_changes"]
    if not isinstance(changes_doc, list):
        raise InputError(where, "policy_changes", "expected an array of tables [[policy_changes]]")
    changes = tuple(_build_section(where, f"policy_changes[{i}]", PolicyChangeSpec, t)
                    for i, t in enumerate(changes_doc))
    changes = tuple(_check_policy_change(where, i, c, classes, built["qos"].scheduling)
                    for i, c in enumerate(changes))
    expect_doc = doc.get("expect", [])
    if not isinstance(expect_doc, list):
        raise InputError(where, "expect", "expected an array of tables [[expect]]")
    expect = tuple(_check_expect(where, i, _build_section(where, f"expect[{i}]", ExpectSpec, t))
                   for i, t in enumerate(expect_doc))
    tol_doc = doc.get("tolerance", [])
    if not isinstance(tol_doc, list):
        raise InputError(where, "tolerance", "expected an array of tables [[tolerance]]")
    tolerance = tuple(_check_tolerance(where, i, _build_section(where, f"tolerance[{i}]", ToleranceSpec, t))
                      for i, t in enumerate(tol_doc))
    jobs = _jobs(where, arrays["jobs"])
    built["controller"] = _resolve_apps(where, built["controller"], base_dir)
    built, dilation = _hardware_view(version, built, tables)
    built = {**built, "dcqcn": _reference_rates(built["dcqcn"], tables["dcqcn"])}
    sc = Scenario(name=name, path=where, description=description, faults=faults, classes=classes,
                  policy_changes=changes, expect=expect, tolerance=tolerance, jobs=jobs, version=version,
                  regress_skip=regress_skip,
                  dilation=dilation, **built)
    if jobs or built["workload"].type == "jobs":
        sc = _resolve_jobs(where, sc)
    if any(f.action == "corrupt" for f in faults) and not sc.transport.verify_icrc:
        # a corrupted frame is dropped by the receiver's ICRC check, as a NIC drops it; without the
        # check it would be taken as good data
        sc = dataclasses.replace(sc, transport=dataclasses.replace(sc.transport, verify_icrc=True))
    _cross_checks(where, sc, set(tables["fabric"]) if isinstance(tables["fabric"], dict) else set())
    _check_remote(where, sc)
    return sc


# what each version gives, and the field it must not: version 1 is in emulated Mb/s at D = 1
_V1_ONLY = {"fabric.bw_mbps": "fabric.bw_gbps", "fabric.uplink_bw_mbps": "fabric.uplink_bw_gbps"}
_V2_ONLY = ("fabric.bw_gbps", "fabric.uplink_bw_gbps", "run.dilation")
# version 2's RTO when a file gives none: hardware time, above any queueing a path of 256 KiB
# buffers holds at 100 Gb/s (version 1's 200 ms would be 200 ms x D of wall-clock time)
V2_RTO_MS = 1.0


def _check_version_fields(where: str, version: int, tables: dict, overrides) -> None:
    def given(key):
        section, fname = key.split(".")
        return isinstance(tables[section], dict) and fname in tables[section]

    def source(key):
        return "--set" if any(o.split("=", 1)[0].strip() == key for o in overrides) else where

    if version == 1:
        for key in _V2_ONLY:
            if given(key) and not (key == "run.dilation" and tables["run"]["dilation"] == 1):
                raise InputError(source(key), key, "a version 1 file gives emulated rates in Mb/s and runs at "
                                 "D = 1; hardware rates and dilation need scenario_version = 2 "
                                 "(docs/dilation.md)")
    else:
        for key, instead in _V1_ONLY.items():
            if given(key):
                raise InputError(source(key), key, f"a version 2 file describes the hardware fabric: give its "
                                 f"rate as {instead} (Gb/s); the run divides it by run.dilation")


def _reference_rates(dcqcn: DcqcnSpec, table) -> DcqcnSpec:
    """HPCC dcqcn_paper's rate steps scale with the link its values are given for: those the file
    leaves unset follow ref_gbps."""
    given = table if isinstance(table, dict) else {}
    rates = {k: v for k, v in dcqcn_reference_rates(dcqcn.ref_gbps).items() if k not in given}
    return dataclasses.replace(dcqcn, **rates)


def _hardware_view(version: int, built: dict, tables: dict):
    """The scenario at D = 1 (every rate and time the hardware's) and its unresolved Dilation:
    version 2's Gb/s become the Mb/s every planner reads; DCQCN's values are given for the
    hardware link unless [dcqcn] names another rate. A version 1 file is its own hardware."""
    f = built["fabric"]
    if version == 1:
        run = dataclasses.replace(built["run"], dilation=1.0)
        return {**built, "run": run}, Dilation(factor=1.0, chosen_by="version1", hw_bw_gbps=f.bw_mbps / 1e3,
                                               hw_uplink_bw_gbps=f.uplink_bw_mbps / 1e3,
                                               link_delay_ns=f.link_delay_ns, switch_latency_ns=f.switch_latency_ns)
    fabric = dataclasses.replace(f, bw_mbps=f.bw_gbps * 1e3, uplink_bw_mbps=f.uplink_bw_gbps * 1e3)
    transport = built["transport"]
    if "rto_ms" not in (tables["transport"] if isinstance(tables["transport"], dict) else {}):
        transport = dataclasses.replace(transport, rto_ms=V2_RTO_MS)
    dcqcn = built["dcqcn"]
    if "ref_gbps" not in (tables["dcqcn"] if isinstance(tables["dcqcn"], dict) else {}):
        dcqcn = dataclasses.replace(dcqcn, ref_gbps=f.bw_gbps)
    return {**built, "fabric": fabric, "transport": transport, "dcqcn": dcqcn}, Dilation(
        factor=1.0, chosen_by="unresolved", hw_bw_gbps=f.bw_gbps, hw_uplink_bw_gbps=f.uplink_bw_gbps,
        link_delay_ns=f.link_delay_ns, switch_latency_ns=f.switch_latency_ns)


def _resolve_jobs(where: str, sc: Scenario) -> Scenario:
    """Each job's hosts, named or counted off in fabric order, none in two jobs."""
    if sc.workload.type != "jobs":
        raise InputError(where, "workload.type", "[[jobs]] need workload.type = \"jobs\"")
    if not sc.jobs:
        raise InputError(where, "jobs", "workload.type jobs needs at least one [[jobs]] table")
    try:
        fabric = build_fabric(sc.fabric)
    except ValueError as e:
        raise InputError(where, "fabric", str(e)) from None
    names = [h.name for h in fabric.hosts]
    taken = {h for j in sc.jobs for h in j.hosts}
    resolved = []
    for i, j in enumerate(sc.jobs):
        if bool(j.hosts) == bool(j.host_count):
            raise InputError(where, f"jobs[{i}].hosts", "give a job its hosts or a host_count, one of the two")
        hosts = list(j.hosts)
        for h in hosts:
            if h not in fabric.host_by_name:
                raise InputError(where, f"jobs[{i}].hosts", f"no host {h!r} in this fabric (e.g. {names[0]})")
        if len(set(hosts)) != len(hosts):
            raise InputError(where, f"jobs[{i}].hosts", "a host appears twice")
        for h in hosts:
            other = next((k.name for k in resolved if h in k.hosts), None)
            if other:
                raise InputError(where, f"jobs[{i}].hosts", f"{h} is also {other}'s: jobs need hosts of their own")
        if j.host_count:
            free = [h for h in names if h not in taken]
            if len(free) < j.host_count:
                raise InputError(where, f"jobs[{i}].host_count", f"{j.host_count} hosts asked, {len(free)} left")
            hosts = free[:j.host_count]
            taken |= set(hosts)
        resolved.append(dataclasses.replace(j, hosts=tuple(hosts), host_count=0))
    return dataclasses.replace(sc, jobs=tuple(resolved))


def _check_jobs(where: str, sc: Scenario, fabric) -> None:
    """Each job's workload against its hosts, as a scenario of its own would be (its errors named
    under jobs[i]); and every tenant's traffic in classes of its own."""
    from testbed.fabric import qos  # noqa: PLC0415 (the loader is imported by the fabric's planners)
    cls = qos.class_of_dscp(sc)
    owner: dict[int, str] = {}
    for i, j in enumerate(sc.jobs):
        sub = dataclasses.replace(sc, workload=j.workload, jobs=())
        try:
            _check_workload_shape(where, sub, job_fabric(fabric, j))
            _check_workload_parties(where, sub, job_fabric(fabric, j))
        except InputError as e:
            raise InputError(where, f"jobs[{i}].{e.field}" if e.field else f"jobs[{i}]", e.message) from None
        for dscp in {j.workload.dscp} | ({j.workload.bulk_dscp} if j.workload.bulk_shift else set()):
            if owner.setdefault(cls[dscp], j.tenant) != j.tenant:
                raise InputError(where, f"jobs[{i}].workload.dscp", f"DSCP {dscp} is in class "
                                 f"{sc.classes[cls[dscp]].name}, tenant {owner[cls[dscp]]}'s: each tenant needs "
                                 f"classes of its own (their weights are its share of every port)")


def _jobs(where: str, jobs_doc: Any) -> tuple[JobSpec, ...]:
    """[[jobs]] as JobSpecs, each with its [jobs.workload] table (hosts resolved later, against the
    fabric)."""
    if not isinstance(jobs_doc, list):
        raise InputError(where, "jobs", "expected an array of tables [[jobs]]")
    out = []
    for i, t in enumerate(jobs_doc):
        if not isinstance(t, dict):
            raise InputError(where, f"jobs[{i}]", "expected a table")
        t = dict(t)
        workload = _build_section(where, f"jobs[{i}].workload", WorkloadSpec, t.pop("workload", {}))
        job = _build_section(where, f"jobs[{i}]", JobSpec, t)
        if not _NAME_RE.match(job.name):
            raise InputError(where, f"jobs[{i}].name", f"expected a name of letters, digits, - and _, got {job.name!r}")
        if workload.type == "jobs":
            raise InputError(where, f"jobs[{i}].workload.type", "a job's workload cannot be jobs itself")
        out.append(dataclasses.replace(job, tenant=job.tenant or job.name, workload=workload))
    names = [j.name for j in out]
    for i, n in enumerate(names):
        if n in names[:i]:
            raise InputError(where, f"jobs[{i}].name", f"{n!r} names an earlier job too")
    return tuple(out)


def scenario_path(name: str) -> Path:
    """A scenario's file: a name in scenarios/ (allreduce-torus), or a path to a .toml file anywhere
    (./my-policy.toml), whose stem then names its runs and its baseline."""
    if isinstance(name, str) and name.endswith(".toml"):
        path = Path(name)
        if not path.is_file():
            raise InputError(name, None, "no such scenario file")
        if not _NAME_RE.match(path.stem):
            raise InputError(name, None, f"the file's name {path.stem!r} names its runs and its baseline: "
                             "lower-case letters, digits, - and _ only")
        return path
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InputError("NAME", None, f"{name!r} is neither a scenario name (letters, digits, - and _ only) nor "
                         "a path to a .toml file")
    path = SCENARIO_DIR / f"{name}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))
        raise InputError("NAME", None, f"no scenario {name!r} in {SCENARIO_DIR}{did_you_mean(name, known)} "
                         f"(a file elsewhere is given by its path, ending in .toml); known: {', '.join(known)}")
    return path


def load_scenario(name: str, overrides: list[str] = ()) -> Scenario:
    """A scenario by name or by path (scenario_path), with --set overrides."""
    path = scenario_path(name)
    where = f"scenarios/{path.name}" if path.parent.resolve() == SCENARIO_DIR.resolve() else str(path)
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise InputError(where, None, f"not valid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise InputError(where, None, f"not UTF-8 text: {e}") from None
    return load_document(path.stem, doc, where, overrides, base_dir=path.parent)


def list_scenarios() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))
