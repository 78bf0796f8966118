"""Analysis of the switch agent's raw files: queue telemetry, ECN marking against its profile,
PFC pauses and their reaction times, deadlocks. Pure functions of raw/ files.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from testbed import records
from testbed.analysis.links import port_series
from testbed.runfolder import RunFolder, read_jsonl


def telemetry_table(rf: RunFolder, plan: dict) -> pd.DataFrame:
    """raw/telemetry.bin as a table, with each queue's port, node and class name."""
    tel = pd.DataFrame(records.read(rf.telemetry, records.TELEMETRY))
    if tel.empty:
        return tel
    queues = pd.DataFrame(plan["queues"])[["node", "ifname", "class", "class_name"]]
    queues.index.name = "queue"
    return tel.join(queues, on="queue").rename(columns={"ifname": "port"})


def pfc_events(rf: RunFolder) -> pd.DataFrame:
    return pd.DataFrame(read_jsonl(rf.pfc_events))


def marking_profile(hist: dict, profile: dict) -> list[dict]:
    """Per queue-depth bucket at enqueue: ECT packets, how many were marked, and the fraction the
    RED profile (a testbed.fabric.qos.QueueProfile's fields) asks for at the bucket's middle."""
    kmin, kmax, pmax, ecn_on = profile["kmin_bytes"], profile["kmax_bytes"], profile["pmax"], profile["ecn_on"]
    width = hist["bucket_bytes"]
    out = []
    for b, (ect, marked) in enumerate(zip(hist["ect"], hist["marked"])):
        if not ect:
            continue
        lo, hi = b * width, (b + 1) * width
        mid = (lo + hi) / 2
        if not ecn_on:
            want = 0.0
        elif mid < kmin:
            want = 0.0
        elif mid >= kmax:
            want = 1.0
        else:
            want = pmax * (mid - kmin) / max(1, kmax - kmin)
        out.append({"depth_from_bytes": lo, "depth_to_bytes": hi, "ect_packets": ect, "marked": marked,
                    "marked_fraction": marked / ect, "profile_fraction": want})
    return out


def paused_time(events: pd.DataFrame) -> list[dict]:
    """Total paused time per (port, class) from pause/resume pairs."""
    if events.empty or "event" not in events:
        return []
    res = events[events["event"] == "resume"]
    if res.empty:
        return []
    g = res.groupby(["node", "port", "class"])["paused_ns"].agg(["sum", "count", "max"]).reset_index()
    return [{"node": r.node, "port": r.port, "class": int(r["class"]), "pauses": int(r["count"]),
             "paused_ms": float(r["sum"]) / 1e6, "longest_ms": float(r["max"]) / 1e6} for _, r in g.iterrows()]


RESUME_SPAN_NS = 2_000_000


def resume_release(tel: pd.DataFrame, events: pd.DataFrame, rates_bps: dict[str, float], frame_bytes: int,
                   span_ns: int = RESUME_SPAN_NS) -> dict:
    """What switch ports sent in the span_ns after each PFC resume beyond their rate, in frames,
    over the resumes after which the queue still held frames at the span's end (a port with
    nothing left to send says nothing about its shaper). A real port resumes at line rate; one
    whose shaper saved up its bucket while paused releases it at once."""
    if tel.empty or events.empty or "event" not in events:
        return {"resumes": 0}
    series = {x.port: x for x in port_series(tel)}
    excess, ports = [], []
    for e in events[(events["event"] == "resume")].to_dict("records"):
        ser, rate = series.get(e["port"]), rates_bps.get(e["port"])
        if ser is None or not rate:
            continue
        i = int(np.searchsorted(ser.t_ns, e["t_ns"], side="right")) - 1
        j = int(np.searchsorted(ser.t_ns, e["t_ns"] + span_ns, side="left"))
        if i < 0 or j >= len(ser.t_ns) or ser.depth_bytes[j] < frame_bytes:
            continue
        due = rate / 8 * (ser.t_ns[j] - ser.t_ns[i]) / 1e9
        excess.append((ser.drained_bytes[j] - ser.drained_bytes[i] - due) / frame_bytes)
        ports.append(e["port"])
    if not excess:
        return {"resumes": 0}

    def stats(a: np.ndarray) -> dict:
        return {"resumes": int(len(a)), "frames_over_rate_p50": float(np.median(a)),
                "frames_over_rate_p90": float(np.percentile(a, 90)), "frames_over_rate_max": float(a.max())}
    a, ports = np.array(excess), np.array(ports)
    by_port = sorted(({"port": str(p)} | stats(a[ports == p]) for p in np.unique(ports)),
                     key=lambda r: -r["resumes"])
    return {"span_ms": span_ns / 1e6, **stats(a), "by_port": by_port}


def ingress_summary(agent: dict) -> dict | None:
    """Under PFC's ingress rule: the (ingress port, class) rows that held most at their peak, how
    many frames' bytes had to be written off as lost inside a switch (ingress_resync events), and
    how many rows did not balance at the end (in != out + written off: a leak)."""
    rows = agent.get("ingress_end") or []
    if agent.get("pfc_accounting") != "ingress":
        return None
    busiest = sorted(rows, key=lambda r: r["max_held_bytes"], reverse=True)[:5]
    return {"rows": len(rows), "resyncs": agent.get("ingress_resyncs", 0),
            "lost_bytes": int(sum(r["lost_bytes"] for r in rows)),
            "unbalanced_rows": int(sum(1 for r in rows if r["held_bytes"] != 0)),
            "busiest": [{k: r.get(k) for k in ("port", "class", "max_held_bytes", "xoff_bytes", "xon_bytes",
                                               "xoff_crossings")} for r in busiest]}


def headroom_overruns(agent: dict) -> list[dict]:
    """The lossless (ingress port, class) rows that held more than XOFF plus their headroom: their
    upstream went on sending past what the headroom covers. The headroom holds what a link at its
    rate delivers while the pause takes effect, so an overrun has one of three causes:
    - late: the slowest pause the row asked for took longer than the reaction the headroom is sized
      for, or a crossing of XOFF went unanswered for longer (the row was back below XON before the
      agent looked: max_unanswered_us) (the machine kept the switch agent from running);
    - link_ahead: the pause came in time, but at the row's highest count its link had delivered
      beyond its rate (port_dequeue's peak_ahead_bytes: the upstream port's bucket let a burst out
      after an idle spell, or frames bunched up behind a late softirq) or had held frames in a CPU's
      backlog (peak_wire_us: bytes the upstream had sent before the pause that arrived after it),
      together at least the overrun, which a hardware link does not;
    - neither: the headroom is too small for the rates, or the pause did not hold (the policy's or
      the switch's failing).
    The first two are the emulator's (emulators)."""
    allowance = (agent.get("reaction_us") or {}).get("allowance") or 0
    out = []
    for r in agent.get("ingress_end") or []:
        if "headroom_bytes" not in r:
            continue
        limit = r["xoff_bytes"] + r["headroom_bytes"]
        peak = max(r["max_held_bytes"], r.get("peak_held_bytes", 0))
        if peak > limit:
            slowest = max(r["max_reaction_us"], r.get("max_unanswered_us", 0.0))
            late = bool(allowance and slowest > allowance)
            ahead = r.get("peak_ahead_bytes", 0)
            # what the link at its rate delivers while a frame waited that long in a backlog
            wire = int(r.get("peak_wire_us", 0) * 1e6 / r["byte_ps"]) if r.get("byte_ps") else 0
            link_ahead = not late and peak - limit <= ahead + wire
            out.append({"port": r["port"], "class": r["class"], "max_held_bytes": peak,
                        "limit_bytes": limit, "max_reaction_us": slowest,
                        "ahead_bytes": ahead, "wire_us": r.get("peak_wire_us", 0), "wire_bytes": wire,
                        "late": late, "link_ahead": link_ahead, "emulators": late or link_ahead})
    return out


def qos_summary(rf: RunFolder, tel: pd.DataFrame | None, events: pd.DataFrame) -> dict | None:
    """The summary's qos section, from the agent's account, its telemetry table and its PFC events
    (stage 1's tables); None for a run without a switch agent."""
    if not rf.agent_stats.exists():
        return None
    agent = json.loads(rf.agent_stats.read_text())
    plan = json.loads(rf.agent_plan.read_text())
    tel = tel if tel is not None else pd.DataFrame()
    qend = agent["queues_end"]
    busiest = sorted(qend, key=lambda q: q["max_depth_bytes"], reverse=True)[:8]
    marks = [q for q in qend if q["mark_pkts"]]
    by_row = {q["row"]: q for q in qend}
    ecn_profiles = []
    queues = agent["queues"]  # with the policy in force at the end
    for row, hist in agent["ecn_hist"].items():
        q = queues[int(row)]
        prof = q["profile"]
        if isinstance(prof, list):
            # a run recorded before the policy named its fields: the BPF struct's order
            prof = {"limit_bytes": prof[0], "kmin_bytes": prof[1], "kmax_bytes": prof[2], "pmax": prof[3] / 65536,
                    "ecn_on": bool(prof[4])}
        if prof["ecn_on"] or by_row.get(int(row), {}).get("mark_pkts"):
            ecn_profiles.append({"port": q["ifname"], "class": q["class_name"],
                                 "kmin_bytes": prof["kmin_bytes"], "kmax_bytes": prof["kmax_bytes"],
                                 "pmax": prof["pmax"], "buckets": marking_profile(hist, prof)})
    pauses = events[events["event"] == "pause"] if not events.empty else events
    hosts = {l["node"] for l in plan["leaves"] if not l["switch"]}
    return {
        "telemetry": {"target_hz": plan["telemetry_hz"], "achieved_hz": agent["telemetry_hz_achieved"],
                      "late_samples": agent["late_samples"], "rows": int(len(tel)),
                      "pfc_poll_hz": agent["poll_hz_achieved"],
                      # the longest the agent went without looking at the lossless rows
                      "blind_max_us": agent.get("blind_max_us"), "blind_over_1ms": agent.get("blind_over_1ms"),
                      "agent_cores": agent["cpu_s"] / max(1e-9, (agent["end_ns"] - agent["start_ns"]) / 1e9)},
        "queues": {"busiest": busiest,
                   "buffer_drops": int(sum(q["drop_pkts"] for q in qend)),
                   "drops_by_port": [{"port": q["port"], "class": q["class"], "drops": q["drop_pkts"]}
                                     for q in qend if q["drop_pkts"]]},
        "ecn": {"marked": int(sum(q["mark_pkts"] for q in qend)),
                "ect_packets": int(sum(q["ect_pkts"] for q in qend)),
                "marking_ports": [{"port": q["port"], "class": q["class"], "marked": q["mark_pkts"],
                                   "ect": q["ect_pkts"]} for q in marks],
                "profiles": ecn_profiles},
        "ovs_input_backlog": agent.get("ovs_input_backlog"),
        "pfc": {"accounting": agent.get("pfc_accounting", "egress"),
                "ingress": ingress_summary(agent),
                "pauses": agent["pauses"], "resumes": agent["resumes"],
                "paused_ports": int(pauses[["port", "class"]].drop_duplicates().shape[0]) if len(pauses) else 0,
                "paused_hosts": sorted(set(pauses["node"]) & hosts) if len(pauses) else [],
                "reaction_us": agent["reaction_us"], "watchdog_fired": agent["watchdog_fired"],
                "headroom_overruns": headroom_overruns(agent),
                "paused_time": paused_time(events),
                "resume_release": resume_release(
                    tel, events, {l["ifname"]: l["bw_bps"] for l in plan["leaves"] if l["switch"] and "bw_bps" in l},
                    plan.get("frame_bytes", 0) or 1),
                "deadlock": agent["deadlock"], "deadlocked": agent["deadlock"] is not None},
    }
