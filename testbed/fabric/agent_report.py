"""What the switch agent did, for raw/agent.json: its pauses and their reaction times against the
allowance, a deadlock, every queue at the end with the policy in force, the ingress rows, the ECN
marking histograms. Read by testbed.analysis.qos."""
from __future__ import annotations

import numpy as np

from testbed.fabric.qos import QueueProfile
from testbed.fabric.reconcile import held_bytes


def agent_account(agent) -> dict:
    """The account of a finished testbed.fabric.agent.Agent (its run's counters and the maps)."""
    react = np.array(agent.reaction_ns, dtype=np.int64)
    q_end = agent.maps.queues[agent.qidx]
    hists = agent.maps.hists[agent.qidx]
    qidx = agent.qidx
    return {
        "pauses": agent.pauses, "resumes": agent.resumes, "watchdog_fired": agent.watchdog_fired,
        "reaction_us": {"count": int(len(react)),
                        "p50": float(np.percentile(react, 50) / 1e3) if len(react) else None,
                        "p99": float(np.percentile(react, 99) / 1e3) if len(react) else None,
                        "max": float(react.max() / 1e3) if len(react) else None,
                        "allowance": agent.reaction_allowance_ns / 1e3,
                        "over_allowance": int((react > agent.reaction_allowance_ns).sum())
                        if agent.reaction_allowance_ns else None},
        "deadlock": agent.deadlock,
        "ovs_input_backlog": {**agent.inputs.result(), "stopped_the_run": agent.behind is not None},
        "controller_lost": agent.controller.lost,
        "queues": [{**q.to_json(), **pol} for q, pol in zip(agent.queues, agent.queue_policy)],
        "queues_end": [{"row": r, "port": agent.queues[r].ifname, "node": agent.queues[r].node,
                        "class": agent.queues[r].cls, "max_depth_bytes": int(agent.max_depth[qidx[r]]),
                        "depth_bytes": int(q_end["depth_bytes"][r]),
                        **{f: int(q_end[f][r]) for f in ("enq_pkts", "enq_bytes", "deq_pkts", "drop_pkts",
                                                        "ect_pkts", "mark_pkts", "xoff_crossings")}}
                       for r in range(len(qidx)) if q_end["enq_pkts"][r]],
        "pfc_accounting": agent.rule, "ingress_resyncs": agent.leaks.resyncs,
        "ingress_end": _ingress_end(agent) if agent.rule == "ingress" else [],
        "ecn_hist": {str(r): {"ect": hists["ect"][r].tolist(), "marked": hists["marked"][r].tolist(),
                              "bucket_bytes": QueueProfile.from_json(agent.queue_policy[r]["profile"]).hist_bucket_bytes}
                     for r in range(len(qidx)) if hists["ect"][r].any()},
    }


def _ingress_end(agent) -> list[dict]:
    """Every (ingress port, class) that saw a frame: what entered and left the switch there,
    what it held at most and holds now, its thresholds."""
    ing = agent.maps.ingress[agent.qidx]
    held = held_bytes(ing)
    out = []
    for r, ix in enumerate(agent.qidx):
        if not ing["in_pkts"][r]:
            continue
        q = agent.queues[r]
        out.append({"port": q.ifname, "node": q.node, "class": q.cls,
                    "in_pkts": int(ing["in_pkts"][r]), "in_bytes": int(ing["in_bytes"][r]),
                    "out_pkts": int(ing["out_pkts"][r]), "out_bytes": int(ing["out_bytes"][r]),
                    "lost_bytes": int(ing["lost_bytes"][r]), "held_bytes": int(held[r]),
                    "max_held_bytes": int(agent.max_held[ix]), "xoff_crossings": int(ing["xoff_crossings"][r]),
                    "max_reaction_us": int(agent.max_reaction[ix]) / 1e3,
                    "max_unanswered_us": int(agent.max_unanswered[ix]) / 1e3,
                    "peak_held_bytes": int(ing["peak_held_bytes"][r]),
                    "peak_ahead_bytes": int(ing["peak_ahead_bytes"][r]),
                    "peak_wire_us": int(ing["peak_wire_ns"][r]) / 1e3, "byte_ps": int(ing["byte_ps"][r]),
                    **agent.queue_policy[r].get("ingress", {})})
    return out
