"""`--set KEY=VALUE`: a change to one field of a scenario file without copying it. KEY is
`section.field` for a table ([fabric], [qos], ...), `classes.NAME.field` or `jobs.NAME.field`
(`jobs.NAME.workload.field`) for an array table whose entries have names, and `faults.N.field` or
`policy_changes.N.field` (N from 0, in file order) for one whose entries have none. A sweep of an ECN
threshold or a fault's time is then a loop over --set, not a folder of copied files."""
from __future__ import annotations

import dataclasses
import tomllib
from typing import Any

from testbed.errors import InputError, did_you_mean
from testbed.scenario.schema import (DEFAULT_CLASSES, SECTIONS, ClassSpec, FaultSpec, JobSpec, PolicyChangeSpec,
                                     WorkloadSpec)

# array tables --set reaches, and whether an entry is found by its name or by its place
ARRAYS = {"classes": (ClassSpec, "name"), "jobs": (JobSpec, "name"), "faults": (FaultSpec, "index"),
          "policy_changes": (PolicyChangeSpec, "index")}
_FORMS = ("<section>.<field> (sections: " + ", ".join(SECTIONS) + "), classes.<name>.<field>, jobs.<name>.<field>, "
          "jobs.<name>.workload.<field>, faults.<n>.<field>, policy_changes.<n>.<field>")


def parse_override(text: str) -> tuple[str, Any]:
    """`key=value`; the value is read as TOML (numbers, lists, booleans) or else as a string."""
    if "=" not in text:
        raise InputError("--set", text, "expected KEY=VALUE, KEY one of " + _FORMS)
    key, raw = text.split("=", 1)
    key = key.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def _fields(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _unknown_field(key: str, name: str, cls) -> InputError:
    names = _fields(cls)
    return InputError("--set", key, f"unknown field {name!r}{did_you_mean(name, names)}; expected one of "
                      f"{', '.join(names)}")


def default_classes_doc() -> list[dict]:
    """DEFAULT_CLASSES as the [[classes]] tables a file would give, for a --set on a file that
    gives none."""
    out = []
    for c in DEFAULT_CLASSES:
        t = dataclasses.asdict(c)
        out.append({k: list(v) if isinstance(v, tuple) else v for k, v in t.items()})
    return out


def _entry(key: str, array: str, items: list, ident: str) -> int:
    """The index in items of the entry `ident` names: by name, or by its place from 0."""
    how = ARRAYS[array][1]
    if how == "index":
        if not ident.isdigit() or int(ident) >= len(items):
            raise InputError("--set", key, (f"{array} entries are numbered from 0 in file order; the file has "
                                            f"{len(items)}, so expected 0..{len(items) - 1}") if items else
                             f"the file has no [[{array}]] to change")
        return int(ident)
    names = [t.get("name") if isinstance(t, dict) else None for t in items]
    if ident not in names:
        given = [n for n in names if isinstance(n, str)]
        raise InputError("--set", key, f"no {array[:-1] if array != 'classes' else 'class'} named {ident!r}"
                         f"{did_you_mean(ident, given)}; the file's: {', '.join(given) or 'none'}")
    return names.index(ident)


def apply_overrides(overrides, tables: dict, arrays: dict) -> dict[str, str]:
    """Each override written into the file's tables (section -> dict) and array tables (name ->
    list of dicts, None where the file gives none), in place. Returns, for each field an override
    set, the name the loader's errors give it (`classes[1].ecn_kmin_bytes`) -> the key the user
    wrote, so that an error in a value set on the command line names --set and that key."""
    set_here: dict[str, str] = {}
    for text in overrides:
        key, value = parse_override(text)
        parts = key.split(".")
        head = parts[0]
        if head in SECTIONS:
            if len(parts) != 2 or not parts[1]:
                raise InputError("--set", key, f"expected {head}.<field>")
            if not isinstance(tables[head], dict):
                continue  # the file's own error is reported when it is built
            if parts[1] not in _fields(SECTIONS[head]):
                raise _unknown_field(key, parts[1], SECTIONS[head])
            tables[head][parts[1]] = value
            set_here[key] = key
            continue
        if head not in ARRAYS:
            raise InputError("--set", key, f"expected one of {_FORMS}{did_you_mean(head, [*SECTIONS, *ARRAYS])}")
        cls, how = ARRAYS[head]
        if len(parts) < 3:
            raise InputError("--set", key, f"expected {head}.<{'name' if how == 'name' else 'n'}>.<field>")
        if head == "classes" and arrays["classes"] is None:
            arrays["classes"] = default_classes_doc()
        items = arrays[head] if arrays[head] is not None else []
        if not isinstance(items, list):
            continue  # the file's own error
        i = _entry(key, head, items, parts[1])
        if not isinstance(items[i], dict):
            continue  # the file's own error
        items[i] = table = dict(items[i])
        rest = parts[2:]
        if head == "jobs" and rest[0] == "workload":
            if len(rest) != 2 or not rest[1]:
                raise InputError("--set", key, "expected jobs.<name>.workload.<field>")
            if rest[1] not in _fields(WorkloadSpec):
                raise _unknown_field(key, rest[1], WorkloadSpec)
            if not isinstance(table.get("workload", {}), dict):
                continue  # the file's own error
            table["workload"] = {**table.get("workload", {}), rest[1]: value}
            set_here[f"jobs[{i}].workload.{rest[1]}"] = key
            continue
        if len(rest) != 1:
            raise InputError("--set", key, f"expected {head}.{parts[1]}.<field>")
        if rest[0] not in _fields(cls):
            raise _unknown_field(key, rest[0], cls)
        table[rest[0]] = value
        set_here[f"{head}[{i}].{rest[0]}"] = key
    return set_here
