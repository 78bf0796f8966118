"""The Chrome JSON trace event format's rules, as a check: what ui.perfetto.dev's and chrome://tracing's
JSON importers need of a trace (the Trace Event Format document, Google, "JSON Object Format").

Kept apart from the writer (testbed.analysis.trace) so that the tests hold the writer to the format,
not to itself:
- the object form: {"traceEvents": [...]} with an optional displayTimeUnit of "ms" or "ns";
- every event has a one-letter phase, a string name, integer pid and tid, and (but metadata) a
  numeric ts in microseconds;
- complete events (X) have a dur >= 0, and those of one thread nest: one that starts inside
  another ends inside it, as a stack of calls does;
- nestable async events (b, e) carry a cat and an id; each begin is ended once, by an end of the
  same cat, id and name, at or after it;
- counters (C) carry numeric args; instants (i, I) a scope of g, p or t if any;
- metadata (M) is one of process_name, process_sort_index, thread_name, thread_sort_index,
  process_labels, with its value in args.
"""
from __future__ import annotations

from collections import defaultdict

PHASES = set("BEXiICbneSTpFsftPNODMVvRc()")
METADATA = {"process_name": "name", "thread_name": "name", "process_labels": "labels",
            "process_sort_index": "sort_index", "thread_sort_index": "sort_index"}
NEST_SLACK_US = 1e-6   # times are rounded to the picosecond: a child may end that much past its parent


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def format_problems(trace) -> list[str]:
    """Every way the trace breaks the format, as sentences naming the event; [] if none."""
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["not the JSON object format: no traceEvents list"]
    out = []
    if trace.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        out.append(f"displayTimeUnit {trace['displayTimeUnit']!r} is neither ms nor ns")
    spans = defaultdict(list)
    opened: dict[tuple, list] = defaultdict(list)
    for i, e in enumerate(trace["traceEvents"]):
        where = f"event {i} ({e.get('ph')!r} {e.get('name')!r})"
        ph = e.get("ph")
        if ph not in PHASES:
            out.append(f"{where}: unknown phase")
            continue
        if not isinstance(e.get("name"), str):
            out.append(f"{where}: name is not a string")
        if not isinstance(e.get("pid"), int) or (ph != "C" and not isinstance(e.get("tid"), int)):
            out.append(f"{where}: pid and tid must be integers")
        if ph == "M":
            key = METADATA.get(e.get("name"))
            if key is None or key not in (e.get("args") or {}):
                out.append(f"{where}: metadata must be one of {sorted(METADATA)} with args.{key or 'name'}")
            continue
        if not _num(e.get("ts")):
            out.append(f"{where}: ts is not a number")
            continue
        if ph == "X":
            if not _num(e.get("dur")) or e["dur"] < 0:
                out.append(f"{where}: a complete event needs dur >= 0")
            else:
                spans[(e.get("pid"), e.get("tid"))].append((e["ts"], e["ts"] + e["dur"], i))
        elif ph in "be":
            if not isinstance(e.get("cat"), str) or "id" not in e:
                out.append(f"{where}: an async event needs cat and id")
                continue
            key = (e["cat"], str(e["id"]), e["name"])
            if ph == "b":
                opened[key].append(e["ts"])
            elif not opened[key]:
                out.append(f"{where}: an async end with no begin of its cat, id and name")
            else:
                start = opened[key].pop()
                if e["ts"] < start:
                    out.append(f"{where}: an async end before its begin")
        elif ph == "C":
            args = e.get("args") or {}
            if not args or not all(_num(v) for v in args.values()):
                out.append(f"{where}: a counter's args must be numbers")
        elif ph in "iI" and e.get("s", "t") not in ("g", "p", "t"):
            out.append(f"{where}: an instant's scope must be g, p or t")
    for key, left in opened.items():
        if left:
            out.append(f"async {key}: {len(left)} begin(s) never ended")
    for (pid, tid), ss in spans.items():
        stack: list[tuple] = []
        for start, end, i in sorted(ss, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1][1] <= start + NEST_SLACK_US:
                stack.pop()
            if stack and end > stack[-1][1] + NEST_SLACK_US:
                out.append(f"event {i} on pid {pid} tid {tid}: overlaps event {stack[-1][2]} without nesting in it")
            stack.append((start, end, i))
    return out
