"""Scenario files: schema, validation and `--set` overrides.

A scenario is a TOML file in scenarios/ with four tables: [fabric], [controller],
[workload], [run]. Every field, its unit (in its name), default and range is declared once,
below; anything else in a file is an error naming the file and the field.
"""
from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.errors import InputError
from testbed.units import parse_bytes

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"
SCENARIO_VERSION = 1
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def spec(default, doc: str, kind: str, lo=None, hi=None, choices=None, length=None):
    """A scenario field: kind is int, float, str, bytes (int or "4MiB"), bool or int_list."""
    meta = dict(doc=doc, kind=kind, lo=lo, hi=hi, choices=choices, length=length)
    if isinstance(default, (list, tuple)):
        return field(default_factory=lambda: tuple(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class FabricSpec:
    topology: str = spec("torus", "fabric kind", "str", choices=("torus",))
    dims: tuple = spec((4, 4), "torus size per dimension (2 or 3 numbers)", "int_list", 1, 16, length=(2, 3))
    hosts_per_switch: int = spec(1, "hosts attached to each switch", "int", 1, 15)
    bw_mbps: float = spec(100.0, "rate of every link, Mb/s", "float", 1.0, 10000.0)
    mtu_bytes: int = spec(9000, "MTU of every veth, bytes", "int", 1500, 9000)
    queue_limit_bytes: int = spec(262144, "buffer of every egress port (bfifo), bytes", "bytes", 4096, 64 << 20)
    htb_burst_bytes: int = spec(61440, "HTB burst and cburst of every shaped port, bytes: larger bursts "
                                "cost less CPU but are coarser at sub-millisecond timescales", "bytes",
                                1600, 1 << 20)


@dataclass(frozen=True)
class ControllerSpec:
    app: str = spec("proactive_routing", "os-ken app in controllers/", "str", choices=("proactive_routing",))
    routing: str = spec("dimension_order", "route algorithm", "str",
                        choices=("dimension_order", "shortest_path"))


@dataclass(frozen=True)
class WorkloadSpec:
    type: str = spec("ring_allreduce", "collective to replay", "str", choices=("ring_allreduce",))
    bytes_per_rank: int = spec(4 << 20, "AllReduce buffer size per rank, bytes", "bytes", 1024, 1 << 30)
    iterations: int = spec(3, "AllReduce iterations (a barrier separates them)", "int", 1, 1000)
    payload_bytes: int = spec(4096, "RoCE payload per packet (path MTU), bytes", "int", 256, 8900)
    dscp: int = spec(26, "DSCP of data packets", "int", 0, 63)


@dataclass(frozen=True)
class RunSpec:
    seed: int = spec(1, "random seed", "int", 0, 2**31 - 1)
    time_limit_s: float = spec(120.0, "traffic phase time limit, s", "float", 1.0, 3600.0)
    routes_ready_timeout_s: float = spec(60.0, "wait for the controller's routes, s", "float", 1.0, 600.0)
    stall_timeout_s: float = spec(3.0, "end the traffic phase after this long without progress, s",
                                  "float", 0.1, 600.0)


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    description: str
    fabric: FabricSpec
    controller: ControllerSpec
    workload: WorkloadSpec
    run: RunSpec

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["scenario_version"] = SCENARIO_VERSION
        return d


SECTIONS = {"fabric": FabricSpec, "controller": ControllerSpec, "workload": WorkloadSpec, "run": RunSpec}
TOP_LEVEL = {"description", "scenario_version", *SECTIONS}


def _check_value(where: str, name: str, raw: Any, meta: dict) -> Any:
    kind, lo, hi = meta["kind"], meta["lo"], meta["hi"]

    def fail(msg: str):
        raise InputError(where, name, f"{msg} ({meta['doc']})")

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
                             f"unknown field; expected one of {', '.join(fields)}")
    values = {k: _check_value(where, f"{section}.{k}", v, fields[k].metadata) for k, v in table.items()}
    return cls(**values)


def _cross_checks(where: str, sc: Scenario) -> None:
    f, w = sc.fabric, sc.workload
    frame = w.payload_bytes + 14 + 20 + 8 + 12 + 4
    if frame > f.mtu_bytes + 14:
        raise InputError(where, "workload.payload_bytes",
                         f"a {w.payload_bytes}-byte payload makes {frame}-byte frames, over fabric.mtu_bytes "
                         f"{f.mtu_bytes} + 14")
    if f.queue_limit_bytes < 2 * frame:
        raise InputError(where, "fabric.queue_limit_bytes",
                         f"must hold at least two {frame}-byte frames, got {f.queue_limit_bytes}")
    n_hosts = f.hosts_per_switch
    for d in f.dims:
        n_hosts *= d
    if n_hosts < 2:
        raise InputError(where, "fabric.dims", "a collective needs at least 2 hosts")
    if w.bytes_per_rank < n_hosts:
        raise InputError(where, "workload.bytes_per_rank",
                         f"must be at least one byte per rank ({n_hosts}), got {w.bytes_per_rank}")


def parse_override(text: str) -> tuple[str, Any]:
    """`section.field=value`; the value is read as TOML (numbers, lists, booleans) or else as a string."""
    if "=" not in text:
        raise InputError("--set", text, "expected section.field=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if key.count(".") != 1 or key.split(".")[0] not in SECTIONS:
        raise InputError("--set", key, f"expected <section>.<field> with section one of {', '.join(SECTIONS)}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def load_document(name: str, doc: dict[str, Any], where: str, overrides: list[str] = ()) -> Scenario:
    for key in doc:
        if key not in TOP_LEVEL:
            raise InputError(where, key, f"unknown field; expected one of {', '.join(sorted(TOP_LEVEL))}")
    version = doc.get("scenario_version", SCENARIO_VERSION)
    if version != SCENARIO_VERSION:
        raise InputError(where, "scenario_version", f"this testbed reads version {SCENARIO_VERSION}, got {version!r}")
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise InputError(where, "description", "expected a string")
    tables = {s: dict(doc.get(s, {})) if isinstance(doc.get(s, {}), dict) else doc[s] for s in SECTIONS}
    for text in overrides:
        key, value = parse_override(text)
        section, fname = key.split(".")
        if not isinstance(tables[section], dict):
            break  # the file's own error is reported below
        if fname not in {f.name for f in dataclasses.fields(SECTIONS[section])}:
            raise InputError("--set", key, f"unknown field; expected one of "
                             f"{', '.join(f.name for f in dataclasses.fields(SECTIONS[section]))}")
        tables[section][fname] = value
    built = {}
    for section, cls in SECTIONS.items():
        try:
            built[section] = _build_section(where, section, cls, tables[section])
        except InputError as e:
            if overrides and any(o.split("=", 1)[0].strip() == e.field for o in overrides):
                raise InputError("--set", e.field, e.message) from None
            raise
    sc = Scenario(name=name, path=where, description=description, **built)
    _cross_checks(where, sc)
    return sc


def scenario_path(name: str) -> Path:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InputError("NAME", None, f"{name!r} is not a scenario name (letters, digits, - and _ only)")
    path = SCENARIO_DIR / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SCENARIO_DIR.glob("*.toml")))
        raise InputError("NAME", None, f"no scenario {name!r} in scenarios/; known: {known}")
    return path


def load_scenario(name: str, overrides: list[str] = ()) -> Scenario:
    path = scenario_path(name)
    where = f"scenarios/{path.name}"
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise InputError(where, None, f"not valid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise InputError(where, None, f"not UTF-8 text: {e}") from None
    return load_document(name, doc, where, overrides)


def list_scenarios() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))
