"""trace.json: a run as a trace in the Chrome JSON trace event format, which ui.perfetto.dev and
chrome://tracing open (ASTRA-sim and Chakra users read their simulations the same way).

Times are the hardware fabric's: microseconds since the traffic's start, the emulated clock / D
(summary.dilation.factor; D = 1 for a run without dilation). Every span carries its emulated
times in its args too, so a trace can be laid beside the run's tables.

One process per node, and one for the workload:
- a host: its compute stream (its steps one at a time, as the data plane runs them), and one
  track per queue pair it sends on. A message is an async span from its release to its last frame
  in at the receiver (a message that never completed runs to the traffic's end), with the NIC wait, FCT and bytes in its args; a queue pair's messages may
  overlap (the next is released before the last frame of the one before is in), which async
  spans allow and a thread's stack of complete events does not. DCQCN's rate is a counter per
  queue pair, and its NAKs, go-backs, timeouts and CNPs are instants on it.
- a switch (or a host, whose NIC its leaf switch can pause): one track per port and class that was
  paused, each pause from its assertion to its resume (one never resumed runs to the traffic's end),
  with its cause, the queue over its XOFF, in its args: congestion spreading reads hop by hop.
- "workload": each iteration, from its first release to its last completion, and the run's
  faults and policy changes as global instants.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from testbed.analysis.links import pause_spans
from testbed.runfolder import RunFolder, read_jsonl

TRACE_NAME = "trace.json"
# the transport's events worth a mark on a queue pair's track (rate changes are its counter)
QP_INSTANTS = ("nak_sent", "nak_received", "go_back_nak", "go_back_timeout", "cnp_sent", "cnp_received",
               "icrc_dropped")


@dataclass
class Clock:
    """Emulated CLOCK_MONOTONIC nanoseconds to the hardware fabric's microseconds since traffic start."""
    t0_ns: int
    factor: float

    def us(self, t_ns) -> float:
        return round((int(t_ns) - self.t0_ns) / self.factor / 1e3, 6)

    def dur_us(self, d_ns) -> float:
        return round(max(int(d_ns), 0) / self.factor / 1e3, 6)


@dataclass
class Tracks:
    """Process and thread ids by name, and the metadata events that name them."""
    events: list = field(default_factory=list)
    pids: dict = field(default_factory=dict)
    tids: dict = field(default_factory=dict)

    def pid(self, process: str, sort: int) -> int:
        if process not in self.pids:
            self.pids[process] = len(self.pids) + 1
            p = self.pids[process]
            self.events += [{"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": process}},
                            {"ph": "M", "name": "process_sort_index", "pid": p, "tid": 0, "args": {"sort_index": sort}}]
        return self.pids[process]

    def tid(self, pid: int, thread: str) -> int:
        key = (pid, thread)
        if key not in self.tids:
            self.tids[key] = sum(1 for k in self.tids if k[0] == pid) + 1
            self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": self.tids[key],
                                "args": {"name": thread}})
        return self.tids[key]


def _node_sort(name: str) -> tuple:
    return (len(name), name)


def _qp_name(f: dict) -> str:
    return f"qp {f['id']} to {f['dst']} ({f['tag']}, class {f['class']})"


def _messages(msgs: pd.DataFrame, plan: dict, clock: Clock, end_ns: int, tr: Tracks, out: list) -> None:
    """end_ns: the traffic's end, where a message that never completed ends."""
    flows = {f["id"]: f for f in plan["flows"]}
    hosts = sorted(set(msgs["src"]), key=_node_sort)
    host_sort = {h: i for i, h in enumerate(hosts)}
    done = msgs[msgs["release_ns"].notna()]
    for r in done.itertuples(index=False):
        pid = tr.pid(f"host {r.src}", 100 + host_sort[r.src])
        end = r.complete_ns if pd.notna(r.complete_ns) else None
        if r.flow < 0:
            # a compute step: its host's one stream ran it from first_tx to complete
            if end is None or pd.isna(r.first_tx_ns):
                continue
            out.append({"ph": "X", "name": f"compute {r.op}" if r.op != "compute" else "compute", "cat": "compute",
                        "pid": pid, "tid": tr.tid(pid, "compute stream"), "ts": clock.us(r.first_tx_ns),
                        "dur": clock.dur_us(end - r.first_tx_ns),
                        "args": {"msg": int(r.msg), "iteration": int(r.iteration), "step": int(r.step),
                                 "emulated_start_ns": int(r.first_tx_ns), "emulated_end_ns": int(end)}})
            continue
        f = flows[int(r.flow)]
        track = _qp_name(f)
        tid = tr.tid(pid, track)
        args = {"msg": int(r.msg), "iteration": int(r.iteration), "step": int(r.step), "bytes": int(r.bytes),
                "dst": r.dst, "op": r.op, "emulated_release_ns": int(r.release_ns)}
        if pd.notna(r.nic_wait_ns):
            args["nic_wait_us"] = clock.dur_us(r.nic_wait_ns)
        if pd.notna(r.fct_ns):
            args["fct_us"] = clock.dur_us(r.fct_ns)
        if end is None:
            args["incomplete"] = True
        # named by its queue pair: a viewer lays spans of one name on one track, stacked where
        # they overlap, so each queue pair's messages read as one lane
        common = {"cat": f"message,{f['tag']}", "id": int(r.msg), "pid": pid, "tid": tid, "name": track}
        out.append({**common, "ph": "b", "ts": clock.us(r.release_ns), "args": args})
        out.append({**common, "ph": "e", "ts": clock.us(end if end is not None else max(end_ns, r.release_ns))})


def _qp_counters(events: pd.DataFrame, plan: dict, clock: Clock, tr: Tracks, out: list) -> None:
    flows = {f["id"]: f for f in plan["flows"]}
    for flow, g in events.groupby("flow"):
        f = flows.get(int(flow))
        if f is None:
            continue
        pid = tr.pid(f"host {f['src']}", 100)
        tid = tr.tid(pid, _qp_name(f))
        rates = g[g["event"].str.startswith("rate_")]
        for r in rates.itertuples(index=False):
            # a counter is per process, named per queue pair: the DCQCN rate in the hardware's Gb/s
            out.append({"ph": "C", "name": f"dcqcn rate qp {f['id']} (Gb/s)", "pid": pid, "ts": clock.us(r.t_ns),
                        "args": {"rate": round(r.rate_bps * clock.factor / 1e9, 6),
                                 "target": round(r.target_bps * clock.factor / 1e9, 6)}})
        for r in g[g["event"].isin(QP_INSTANTS)].itertuples(index=False):
            out.append({"ph": "i", "s": "t", "name": str(r.event), "cat": "transport", "pid": pid, "tid": tid,
                        "ts": clock.us(r.t_ns), "args": {"value": int(r.value)}})


def _pauses(events: list[dict], hosts: set[str], clock: Clock, end_ns: int, tr: Tracks, out: list) -> None:
    """hosts: the nodes that are hosts (a host NIC's class can be paused too, by its leaf switch)."""
    spans = pause_spans(pd.DataFrame(events), end_ns)
    order = {n: i for i, n in enumerate(sorted(set(spans["node"].dropna()), key=_node_sort))}
    for p in spans.to_dict("records"):
        node, cls = p["node"], p["class"]
        pid = tr.pid(f"host {node}", 100 + order[node]) if node in hosts else tr.pid(f"switch {node}", 10 + order[node])
        out.append({"ph": "X", "name": f"PAUSE class {cls}", "cat": "pfc", "pid": pid,
                    "tid": tr.tid(pid, f"{p['port']} class {cls} paused"), "ts": clock.us(p["start_ns"]),
                    "dur": clock.dur_us(p["end_ns"] - p["start_ns"]),
                    "args": {"cause": p["cause"],
                             "cause_class": None if pd.isna(p["cause_class"]) else int(p["cause_class"]),
                             "end": p["ended_by"], "emulated_start_ns": int(p["start_ns"]),
                             "emulated_end_ns": int(p["end_ns"])}})


def _workload(iterations: pd.DataFrame, faults: list[dict], policy: list[dict], clock: Clock, tr: Tracks,
              out: list) -> None:
    pid = tr.pid("workload", 0)
    tid = tr.tid(pid, "iterations")
    for r in iterations.itertuples(index=False):
        if pd.isna(r.start_ns) or pd.isna(r.end_ns):
            continue
        common = {"cat": "iteration", "id": int(r.iteration), "pid": pid, "tid": tid, "name": f"iteration {r.iteration}"}
        args = {"bound_ratio": None if pd.isna(r.bound_ratio) else round(float(r.bound_ratio), 6),
                "time_us": clock.dur_us(r.end_ns - r.start_ns)}
        out.append({**common, "ph": "b", "ts": clock.us(r.start_ns), "args": args})
        out.append({**common, "ph": "e", "ts": clock.us(r.end_ns)})
    for f in faults:
        out.append({"ph": "i", "s": "g", "name": f"fault {f['action']}", "cat": "fault", "pid": pid, "tid": tid,
                    "ts": clock.us(f["t_ns"]), "args": {k: v for k, v in f.items() if k in ("link", "switch", "links")}})
    for p in policy:
        out.append({"ph": "i", "s": "g", "name": f"policy {p.get('class_name')} {p.get('field')}", "cat": "policy", "pid": pid, "tid": tid,
                    "ts": clock.us(p["t_ns"]), "args": {k: v for k, v in p.items() if k not in ("t_ns", "event")}})


def build_trace(rf: RunFolder, factor: float) -> dict:
    """The run folder's trace, as the JSON object format (traceEvents plus metadata)."""
    engine = json.loads(rf.engine_stats.read_text())
    plan = json.loads(rf.engine_plan.read_text())
    clock = Clock(int(engine["start_ns"]), float(factor) if factor else 1.0)
    tr = Tracks()
    out: list = []
    msgs = pd.read_parquet(rf.table("messages"))
    end_ns = int(engine["end_ns"])
    _messages(msgs, plan, clock, end_ns, tr, out)
    qp_path = rf.table("qp_events")
    if qp_path.exists():
        _qp_counters(pd.read_parquet(qp_path), plan, clock, tr, out)
    _pauses(read_jsonl(rf.pfc_events), {h["name"] for h in plan.get("hosts", [])}, clock, end_ns, tr, out)
    it_path = rf.table("iterations")
    iterations = pd.read_parquet(it_path) if it_path.exists() else pd.DataFrame(
        columns=["iteration", "start_ns", "end_ns", "bound_ratio"])
    policy = [e for e in read_jsonl(rf.controller_events) if e.get("event") == "qos_policy_changed"]
    _workload(iterations, read_jsonl(rf.faults), policy, clock, tr, out)
    return {"traceEvents": tr.events + out, "displayTimeUnit": "ns",
            "otherData": {"time": "hardware microseconds since the traffic's start (emulated / D)",
                          "dilation_factor": clock.factor, "traffic_start_emulated_ns": clock.t0_ns}}


def write_trace(run_dir: Path, factor: float) -> Path:
    rf = RunFolder(run_dir)
    path = rf.root / TRACE_NAME
    path.write_text(json.dumps(build_trace(rf, factor), separators=(",", ":")))
    return path
