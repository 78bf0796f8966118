"""The northbound API's cost to a run and its reaction time (`make bench ARGS="--only api"`):
allreduce-torus with the API off, on and unused, and on with clients (bench/api_clients.py, a
process of its own), rounds of the three in turn so that a bad minute spoils one of each."""
from __future__ import annotations

import json
import re
import subprocess
import sys

from bench import scenarios
from testbed.analysis import summary as analysis
from testbed.run import runner
from testbed.run.calibrate import resolve
from testbed.runfolder import RunFolder
from testbed.scenario import load_scenario

STARTED = re.compile(r"northbound API on http://127\.0\.0\.1:(\d+)/ \(token (\S+);")
# a change that moves a queue profile the ring's traffic never uses: the bulk class's buffer
CHANGE = ("bulk", "buffer_bytes", json.dumps(196608))   # from its 256 KiB (the queue limit)


def one(mode: str, log) -> dict:
    clients = {}

    def run_log(msg):
        log(msg)
        m = STARTED.search(msg)
        if m and mode == "clients":
            clients["proc"] = subprocess.Popen([sys.executable, "-m", "bench.api_clients", m.group(1), m.group(2),
                                                *CHANGE], stdout=subprocess.PIPE, text=True)
    sets = ["run.report=false"] + (["run.api_port=0"] if mode == "off" else [])
    run_dir = runner.run(resolve(load_scenario("allreduce-torus", sets), log=log), log=run_log,
                         results_dir=scenarios.RESULTS)
    s = analysis.analyze(run_dir)
    row = {"mode": mode, "run": str(run_dir), "valid": bool(s["fidelity"]["valid"]), "status": s["status"],
           "bound_ratio": s["collective"]["bound_ratio"], "D": s["dilation"]["factor"],
           "machine_busy": s["fidelity"].get("machine_busy_fraction"),
           "api_cores": s["fidelity"]["cores_used"].get("northbound api"),
           "controller_cores": s["fidelity"]["cores_used"].get("controller")}
    if "proc" in clients:
        out, _ = clients["proc"].communicate(timeout=60)
        c = json.loads(out.strip().splitlines()[-1])
        row["clients"] = c
        change = c.get("change") or {}
        events = [json.loads(l) for l in RunFolder(run_dir).controller_events.read_text().splitlines()]
        asked = change.get("asked_ns")
        applied = [e["t_ns"] for e in events if e["event"] == "qos_applied" and e.get("kind") == "update"
                   and asked and e["t_ns"] > asked]
        if asked and applied:
            row["change_to_applied_ms"] = (applied[0] - asked) / 1e6
            row["change_to_applied_us_hw"] = (applied[0] - asked) / 1e3 / row["D"]
        row["change_answer_ms"] = (change["answered_ns"] - asked) / 1e6 if asked else None
    log(f"api {mode}: valid={row['valid']} ratio {row['bound_ratio']:.4f} D {row['D']:g} api cores "
        f"{row['api_cores']} change->applied {row.get('change_to_applied_ms')}")
    return row


def bench(rounds: int, log) -> dict:
    rows = [one(mode, log) for _ in range(rounds) for mode in ("off", "on", "clients")]
    out = {"rows": rows}
    for mode in ("off", "on", "clients"):
        r = [x for x in rows if x["mode"] == mode]
        out[mode] = {"runs": len(r), "valid": sum(x["valid"] for x in r),
                     "bound_ratio": [min(x["bound_ratio"] for x in r), max(x["bound_ratio"] for x in r)],
                     "api_cores": [x["api_cores"] for x in r]}
    lat = [x["change_to_applied_ms"] for x in rows if x.get("change_to_applied_ms") is not None]
    out["change_to_applied_ms"] = [min(lat), max(lat)] if lat else None
    return out
