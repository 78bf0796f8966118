"""What the ECN tuning did (controllers/ecn_tuning.py), from the controller's event log: each
window's evidence and outcome (ecn_tuning.csv, times from the traffic's start in hardware time),
each change, and per class where it started, where it ended and whether it settled."""
from __future__ import annotations

import pandas as pd

from testbed.runfolder import RunFolder, read_jsonl

# a class has settled when its last this-many judged windows (no idle, no settling) made no move
SETTLED_WINDOWS = 5
# converged: Kmin over the second half of the windows within this factor (the tuner's first step is x2)
CONVERGED_BAND = 1.5


def ecn_tuning_section(rf: RunFolder, start_ns: int, factor: float) -> tuple[dict | None, pd.DataFrame | None]:
    """The summary's qos.ecn_tuning, and the windows' table; None, None without the tuning."""
    events = read_jsonl(rf.controller_events) if rf.controller_events.exists() else []
    start = next((e for e in events if e["event"] == "ecn_tuning_start"), None)
    if start is None:
        return None, None

    def hw_us(t_ns):
        return (t_ns - start_ns) / factor / 1e3

    rows = [{"t_us": hw_us(e["t_ns"]), "class": e["class_name"], "outcome": e["outcome"], "call": e["call"],
             "queues": e["queues"], "worst_port": e["worst_port"], "p99_bytes": e["p99_bytes"],
             "utilisation": e["utilisation"], "marks": e["marks"], "arrivals": e["arrivals"],
             "kmin_bytes": e["profile"]["kmin_bytes"], "kmax_bytes": e["profile"]["kmax_bytes"],
             "pmax": e["profile"]["pmax"], "step": e["step"]}
            for e in events if e["event"] == "ecn_tuning_window"]
    windows = pd.DataFrame(rows, columns=["t_us", "class", "outcome", "call", "queues", "worst_port", "p99_bytes",
                                          "utilisation", "marks", "arrivals", "kmin_bytes", "kmax_bytes", "pmax",
                                          "step"])
    changes = [e for e in events if e["event"] == "ecn_tuning_change"]
    refused = [e for e in events if e["event"] == "ecn_tuning_refused"]
    target = start["target"]
    classes = {}
    for name, first in start["classes"].items():
        mine = [c for c in changes if c["class_name"] == name]
        w = windows[windows["class"] == name]
        # every window whose evidence the tuner weighed (not idle, not the one after a move)
        judged = w[~w["outcome"].isin(["idle", "settling"])]
        met = judged["call"] == "hold"
        # judged windows since the last change (the first judged after it sees the new profile)
        since = judged[judged["t_us"] > hw_us(mine[-1]["t_ns"])] if mine else judged
        half = judged.iloc[len(judged) // 2:]
        # the profile over the run's second half of windows: converged when Kmin stayed within
        # CONVERGED_BAND (the tuner's step closes in on the target's boundary, down to x1.1)
        later = w.iloc[len(w) // 2:]
        band = [int(later["kmin_bytes"].min()), int(later["kmin_bytes"].max())] if len(later) else None
        classes[name] = {
            "start": first, "end": mine[-1]["after"] if mine else first, "changes": len(mine),
            "harder": sum(c["direction"] == "harder" for c in mine),
            "gentler": sum(c["direction"] == "gentler" for c in mine),
            "reverted": sum(c["direction"] == "reverted" for c in mine),
            "windows": int(len(w)), "judged_windows": int(len(judged)), "met_windows": int(met.sum()),
            # of the judged windows in the run's second half, the share that met the target
            "met_share_second_half": float((half["call"] == "hold").mean()) if len(half) else None,
            "last_change_us": hw_us(mine[-1]["t_ns"]) if mine else None,
            "judged_since_last_change": int(len(since)),
            "settled": bool(len(since) >= SETTLED_WINDOWS),
            "kmin_bytes_second_half": band,
            "converged": bool(band is not None and band[1] <= CONVERGED_BAND * band[0] and len(judged) >= SETTLED_WINDOWS),
            "p99_bytes_second_half": float(half["p99_bytes"].max()) if len(half) else None,
            "utilisation_second_half": float(half["utilisation"].min()) if len(half) else None,
            "refused": [r["why"] for r in refused if r["class_name"] == name],
        }
    section = {"mode": "adaptive", "target": target, "window_us": start["window_us"],
               "window_wall_s": start["window_wall_s"], "changes": len(changes),
               "classes": classes,
               "history": [{"t_us": hw_us(c["t_ns"]), "class": c["class_name"], "direction": c["direction"],
                            "before": c["before"], "after": c["after"], "p99_bytes": c["p99_bytes"],
                            "utilisation": c["utilisation"], "worst_port": c["worst_port"]} for c in changes]}
    return section, windows
