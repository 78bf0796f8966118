"""What D a run gets: run.dilation as set, or "auto" from this machine's calibration.

The calibration (`testbed calibrate NAME`, or the first auto run that finds none) measures the
highest emulated link rate at which this machine carries the scenario's fabric faithfully: the
fabric and its routes as the scenario has them under one policy (cal_policy: PFC on or off as the
scenario has it), every host
sending at line rate
to the next in fabric order (a shift permutation, the ring's own pattern), for CAL_TRAFFIC_S (or
CAL_WINDOWS of the verdict's windows per host, if longer) at
each rate of LADDER_MBPS from the top until a run carries it (`carried`: its fidelity verdict is
kept_up, or fails only on the emulator's own latency, which the runs it sets up have MARGIN times
less of; a rung whose run failed while the hypervisor stole over RETRY_STEAL_FRACTION of the CPU is
run once more; a rung far above the machine stops as soon as no verdict could pass it). It is cached
per machine, version of the emulating code (testbed/, controllers/, topologies/ at the commit, and
any uncommitted change to them) and fabric (results/calibration/, or TESTBED_CALIBRATION_DIR), and
re-run when missing or stale.

An auto run then takes D = hardware rate / (faithful rate / MARGIN), times the scenario's demand
against the calibration's (frame-hops per second at line rate, never below 1) and the spare CPU
the calibration had against what is spare now (measured at start), rounded up to the R10 series
(1, 1.25, 1.6, 2, 2.5, 3.15, 4, 5, 6.3, 8 x 10^k) so that runs of one scenario share a D.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import json
import math
import os
import platform
import re
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

from testbed.errors import RunFailed
from testbed.fabric.qos import switch_burst_bytes
from testbed.paths import PROJECT_ROOT
from testbed.run import probe
from testbed.scenario import DEFAULT_CLASSES, QosSpec, Scenario, WorkloadSpec, build_fabric
from testbed.scenario.dilation import dilate

CALIBRATION_VERSION = 2   # 2: rungs of at least CAL_WINDOWS windows a host
# one cache per machine, whichever results folder a run writes to
CALIBRATION_DIR = Path(os.environ.get("TESTBED_CALIBRATION_DIR", PROJECT_ROOT / "results" / "calibration"))
LADDER_MBPS = (40.0, 20.0, 10.0, 5.0, 2.5, 1.25, 0.625)
CAL_TRAFFIC_S = 4.0
# ... and at least this many of the verdict's windows (max(1 ms, 20 frame times)) per sending host:
# the verdict needs 99% of a host's windows within, so a rung of fewer than 100 fails on one late
# window where a run of the scenario, with hundreds, passes it (2026-12-03: a 4x4 leaf-spine rung at
# 10 Mb/s, 4 s, 60 windows a host, failed on one host's one window, its shaper 9 ms late once at
# 0.5% steal; the rung at 5 Mb/s passed with 30, and auto's D came out 4x what it had been).
CAL_WINDOWS = 200
# A rung's traffic may run this many times as long as it takes at line rate (plus
# RUNG_LIMIT_START_S): a rung that took longer fell far behind, and its run is stopped rather than
# left to the scenario's time limit (2026-12-03: the k=8 fat-tree's 40 Mb/s rung, 4 s of traffic,
# ran 130 s before it ended, then took over 10 minutes to analyse its 1 GB of records).
RUNG_LIMIT_FACTOR = 3.0
RUNG_LIMIT_START_S = 10.0
# the chosen rate is the faithful one / MARGIN: one calibration run that kept up says little of
# the next twenty, and a run's own traffic is burstier than a permutation (measured: at 1.5, 7 of
# 23 scenario runs of the root tests could not keep up, each by a few windows: pipelines, PFC
# pauses and resumes, a reroute)
MARGIN = 2.5
# A rung that failed while the hypervisor stole more than this share of the CPU is run once more:
# such a run measured the neighbours, not the machine (2026-12-02: at 28-35% steal every rung from
# 40 to 5 Mb/s failed the 4x4 torus, which had kept up at 20 Mb/s an hour before, and auto's D came
# out 8x too large). On a quiet machine a failed rung is not run again.
RETRY_STEAL_FRACTION = 0.05
# A run that reached no verdict is run again (testbed regress and baseline, the root tests that need
# a verdict): once whatever the reason, then while the hypervisor stole over RETRY_STEAL_FRACTION of
# the CPU from it, up to MAX_RUNS in all (2026-12-02, a sweep of the 22 shipped scenarios: four of
# the six that did not keep up lost 15-26% of the CPU to steal, the other two 1.6% and 5.3%; of the
# 16 that kept up, 12 lost under 10%).
MAX_RUNS = 4


def stolen(summary: dict) -> bool:
    """Whether the hypervisor stole more of the CPU than a measurement can stand during a run."""
    return (summary["fidelity"].get("machine_steal_fraction") or 0.0) > RETRY_STEAL_FRACTION


def reached_verdict(summary: dict) -> bool:
    """Whether a run is a result: it kept up, and it judged every expectation (a job's SLA is not
    judged when the job's run alone, part of the same run, could not keep up)."""
    return summary["fidelity"]["verdict"] == "kept_up" and not any(
        e["ok"] is None for e in summary.get("expectations") or [])


def carried(summary: dict) -> bool:
    """Whether a calibration rung's run carried the fabric faithfully for the runs a calibration at
    its rate sets up: its verdict kept_up; or could_not_keep_up on the emulator's own per-hop latency
    alone, where that latency's share at the D such a run gets is within what the verdict allows.
    The emulator's latency is wall-clock, so its share of the hardware's per-hop latency goes as 1/D
    (testbed.analysis.hardware), and a run's D is at least MARGIN times its rung's (auto_factor); a
    run at a lower rate, with less for Open vSwitch to do, has no more of it. Judged at the rung's
    own D, the rule failed rungs whose runs it would pass: the 4x4 torus at 10 Mb/s on 15% (6% at
    the run's D), and auto's D came out twice what it needed (2026-12-05, CI). The run's own verdict
    holds it to the rule again, at its D."""
    fid = summary["fidelity"]
    if fid["verdict"] == "kept_up":
        return True
    em = (summary.get("dilation") or {}).get("emulator_latency") or {}
    return bool(fid["verdict"] == "could_not_keep_up" and len(fid["notes"]) == 1 and em.get("judged")
                and not em.get("ok") and em["share"] / MARGIN <= em["max_share"])


def run_again(runs: int, summary: dict) -> bool:
    """After `runs` runs, the last of which is `summary`: whether to run once more for a verdict."""
    if reached_verdict(summary) or runs >= MAX_RUNS:
        return False
    return runs == 1 or stolen(summary)


# A run again after one that could not keep up runs at twice auto's D: what the fabric does, in
# hardware time, does not depend on D (docs/fidelity.md: D, 2D and 4D agree within the spread of
# runs at D), and what the emulator adds shrinks by the factor. The same D again would meet the
# same machine (CI, 2026-12-03: two-jobs-fattree's two runs at D = 20000 both fell behind, their
# NIC engines' timers up to 16 ms late at 3-14% steal).
# Up to 4D, as far as that agreement was measured.
SLOWER_PER_RETRY = 2.0
SLOWER_MAX = 4.0


def slower_after(runs: int) -> float:
    """How much slower than auto's D the run after `runs` runs that could not keep up runs."""
    return min(SLOWER_MAX, SLOWER_PER_RETRY ** runs)


# the policy a calibration runs: the default classes with ECN marking, and PFC as the scenario has
# it: with PFC the switch agent polls every queue at 2 kHz, which costs a 4x4 torus half its
# faithful rate (measured: 5 Mb/s with PFC on, 20 Mb/s off)
def cal_policy(sc: Scenario) -> QosSpec:
    return QosSpec(ecn=True, pfc=sc.qos.pfc)
R10 = (1.0, 1.25, 1.6, 2.0, 2.5, 3.15, 4.0, 5.0, 6.3, 8.0)
CPU_FACTOR_MAX = 4.0


def r10_ceil(x: float) -> float:
    """The smallest value of the R10 series at or above x (x >= 1)."""
    if x <= 1.0:
        return 1.0
    k = math.floor(math.log10(x))
    for m in R10 + (10.0,):
        v = round(m * 10 ** k, 6)
        if v >= x * (1 - 1e-9):
            return v
    raise AssertionError(x)  # pragma: no cover


def signature(sc: Scenario) -> dict:
    """What a calibration depends on besides the machine and the code: the fabric's shape and
    routes, the frame, and whether PFC is on. The rest of the policy is the calibration's own
    (cal_policy), not the scenario's, so that scenarios on one fabric share one calibration."""
    f, w = sc.fabric, sc.workload
    return {"topology": f.topology, "dims": list(f.dims), "hosts_per_switch": f.hosts_per_switch, "k": f.k,
            "leaves": f.leaves, "spines": f.spines, "hosts_per_leaf": f.hosts_per_leaf,
            "mtu_bytes": f.mtu_bytes, "payload_bytes": w.payload_bytes, "htb_burst_bytes": switch_burst_bytes(sc),
            "nic_burst_frames": f.nic_burst_frames, "routing": sc.controller.routing, "pfc": sc.qos.pfc}


def machine_key() -> dict:
    m = probe.machine()
    model = ""
    try:
        model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("model name")), "")
    except OSError:
        pass
    return {"hostname": m["hostname"], "cpus": m["cpus"], "cpu_model": model, "kernel": platform.release()}


# what emulates: a commit that changes none of it (docs, scenarios, tests) keeps the calibration
CODE_DIRS = ("testbed", "controllers", "topologies")


C_COMMENT = re.compile(rb"/\*.*?\*/|//[^\n]*", re.S)


def _code_text(path: Path) -> bytes:
    """What of a source file the emulation runs: a Python module's syntax tree without its
    docstrings, a C file without its comments and with its spacing collapsed, anything else as it
    is."""
    text = path.read_bytes()
    if path.suffix == ".py":
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return text
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
                body[:1] = [] if len(body) > 1 else [ast.Pass()]
        return ast.dump(tree).encode()
    if path.suffix in (".c", ".h"):
        return re.sub(rb"\s+", b" ", C_COMMENT.sub(b" ", text)).strip()
    return text


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """The emulating code's version: a hash of its files as the working tree has them, without
    comments and docstrings (a commit's own hash would make every commit, a doc's too, measure the
    machine again; so would a comment reworded). Hashed once a process: a run asks for it twice."""
    files = subprocess.run(["git", "-C", str(PROJECT_ROOT), "ls-files", "-z", "--", *CODE_DIRS],
                           capture_output=True)
    if files.returncode != 0:
        return probe.git_commit() or "unknown"
    h = hashlib.sha1()
    for name in sorted(f for f in files.stdout.decode().split("\0") if f):
        path = PROJECT_ROOT / name
        if path.is_file():
            h.update(name.encode() + b"\0" + _code_text(path) + b"\0")
    return h.hexdigest()


def cache_file(sc: Scenario) -> tuple[Path, dict]:
    key = {"signature": signature(sc), "machine": machine_key(), "code": code_version(),
           "calibration_version": CALIBRATION_VERSION}
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return CALIBRATION_DIR / f"{sc.fabric.topology}-{digest}.json", key


def spare_cores(interval_s: float = 0.5) -> float:
    """CPUs' idle time over interval_s, in cores (steal counts as busy)."""
    def read():
        v = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        return v[3] + v[4], sum(v[:8])   # idle + iowait, all but guest
    i0, t0 = read()
    time.sleep(interval_s)
    i1, t1 = read()
    return (os.cpu_count() or 1) * (i1 - i0) / max(1, t1 - t0)


def frame_hops(sc: Scenario, pairs: list[tuple[str, str]]) -> float:
    """Frame-hops per frame time at line rate when each (src, dst) pair's source sends at once:
    a link carries a frame once per hop (one sender at line rate per source)."""
    from testbed.traffic.workload import path_links  # noqa: PLC0415
    links = path_links(build_fabric(sc.fabric))
    per_src: dict[str, list[int]] = {}
    for s, d in pairs:
        per_src.setdefault(s, []).append(links(s, d))
    return sum(sum(v) / len(v) for v in per_src.values())


def rung_traffic_s(rate_mbps: float, payload_bytes: int) -> float:
    """How long a rung's hosts send: CAL_TRAFFIC_S, or CAL_WINDOWS of the verdict's windows if longer."""
    from testbed.analysis.links import window_ns  # noqa: PLC0415
    from testbed.traffic.packets import HEADER_BYTES  # noqa: PLC0415
    return max(CAL_TRAFFIC_S, CAL_WINDOWS * window_ns(rate_mbps * 1e6, payload_bytes + HEADER_BYTES) / 1e9)


def rung_time_limit_s(traffic_s: float) -> float:
    """How long a rung's traffic may run: RUNG_LIMIT_FACTOR x what it takes at line rate, plus
    the data plane's start. A rung that takes longer fell behind by more than any verdict allows."""
    return RUNG_LIMIT_FACTOR * traffic_s + RUNG_LIMIT_START_S


def calibration_scenario(sc: Scenario, rate_mbps: float) -> Scenario:
    """The scenario's fabric and policy at an emulated rate, carrying the shift permutation."""
    payload = sc.workload.payload_bytes
    traffic_s = rung_traffic_s(rate_mbps, payload)
    size = max(payload, int(rate_mbps * 1e6 / 8 * traffic_s) // payload * payload)
    hw = dataclasses.replace(sc, name=f"{sc.name}.calibration", faults=(), policy_changes=(), expect=(),
                             tolerance=(), jobs=(), classes=DEFAULT_CLASSES, qos=cal_policy(sc),
                             # the fabric's capacity, measured with the testbed's own routing app (not the
                             # scenario's own apps, a controller.remote it may not be running, or the ECN
                             # tuning, which moves marks the shift permutation does not make)
                             controller=dataclasses.replace(sc.controller, dateline=False, app="proactive_routing",
                                                            apps=(), remote="", ecn_tuning="off"),
                             transport=dataclasses.replace(sc.transport, cc="none", reliability="go_back_n",
                                                           verify_icrc=False, channels=1),
                             workload=WorkloadSpec(type="shift", shift=1, bytes_per_rank=size, iterations=1,
                                                   payload_bytes=payload),
                             run=dataclasses.replace(sc.run, report=False, capture=False,
                                                     time_limit_s=rung_time_limit_s(traffic_s)))
    return dilate(hw, sc.fabric.bw_mbps / rate_mbps, "calibration")


def earlier(sc: Scenario) -> list[dict]:
    """The calibrations of sc's fabric on this machine by any version of the emulating code, newest
    first."""
    _, key = cache_file(sc)
    out = []
    for p in CALIBRATION_DIR.glob(f"{sc.fabric.topology}-*.json"):
        try:
            c = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        k = c.get("key") if isinstance(c, dict) else None
        if (isinstance(k, dict) and k.get("signature") == key["signature"] and k.get("machine") == key["machine"]
                and k.get("calibration_version") == CALIBRATION_VERSION and c.get("faithful_mbps")):
            out.append(c)
    return sorted(out, key=lambda c: str(c.get("measured_utc")), reverse=True)


def first_rung(sc: Scenario, from_top: bool) -> tuple[float, dict | None]:
    """The rate a calibration starts at: the ladder's top, or (unless from_top) the highest rate
    this machine has carried sc's fabric at in any earlier calibration, and that calibration. The
    rungs above it failed in every one of them, and a failing rung is the dearest: it falls behind
    and loses tens of thousands of frames before it ends (the 4x4 torus's 40 Mb/s rung failed in all
    18 of its calibrations here on 2026-12-04/05, by 10 versions of the code, 21-34 s each where
    timed: about 30 s of the flagship's 147 s first run after a code change). `testbed calibrate`
    starts from the top: what a change to the code gained shows there."""
    top = max(r for r in LADDER_MBPS if r <= sc.fabric.bw_mbps) if sc.fabric.bw_mbps >= LADDER_MBPS[-1] else 0.0
    if from_top:
        return top, None
    best = max(earlier(sc), key=lambda c: (c["faithful_mbps"], str(c.get("measured_utc"))), default=None)
    if best is None or best["faithful_mbps"] >= top:
        return top, None
    return best["faithful_mbps"], best


def calibrate(sc: Scenario, run_and_judge, log, from_top: bool = False) -> dict:
    """Measure, cache and return the calibration of sc's fabric here. run_and_judge(scenario,
    results_dir) runs one emulation and returns its summary. The ladder starts at first_rung."""
    path, key = cache_file(sc)
    spare = spare_cores()
    tried = []
    faithful = None
    start, after = first_rung(sc, from_top)
    if after is not None:
        log(f"calibrating {sc.fabric.topology} from {start:g} Mb/s: the highest rate this machine has carried it "
            f"at (calibration of {after['measured_utc'][:16]}); `testbed calibrate` measures from the top")
    for rate in (r for r in LADDER_MBPS if r <= start):
        for attempt in (1, 2):
            log(f"calibrating {sc.fabric.topology} at {rate:g} Mb/s (shift permutation, "
                f"{rung_traffic_s(rate, sc.workload.payload_bytes):.1f} s)"
                + (", again" if attempt == 2 else ""))
            s = run_and_judge(calibration_scenario(sc, rate), CALIBRATION_DIR / "runs")
            fid = s["fidelity"]
            steal = fid.get("machine_steal_fraction") or 0.0
            ok = carried(s)
            tried.append({"rate_mbps": rate, "verdict": fid["verdict"], "carried": ok, "run_id": s["run_id"],
                          "notes": fid["notes"][:3], "machine_busy_fraction": fid.get("machine_busy_fraction"),
                          "machine_steal_fraction": steal})
            if ok and s["status"] in ("ok", "inconclusive"):
                if fid["verdict"] != "kept_up":
                    share = s["dilation"]["emulator_latency"]["share"]
                    log(f"  carried at {rate:g} Mb/s: only the emulator's own latency failed it, {share:.0%} of the "
                        f"per-hop latency at the rung's D, {share / MARGIN:.0%} at the D of the runs it sets up")
                faithful = rate
                break
            log(f"  not kept up at {rate:g} Mb/s (steal {steal:.0%}): {(fid['notes'] or ['-'])[0][:160]}")
            if not stolen(s):
                break
        if faithful is not None:
            break
    if faithful is None:
        rates = ", ".join(f"{t['rate_mbps']:g}" for t in tried)
        raise RunFailed(f"calibration: this machine kept up with {sc.fabric.topology} at none of {rates} Mb/s")
    hosts = [h.name for h in build_fabric(sc.fabric).hosts]
    out = {"calibration_version": CALIBRATION_VERSION, "key": key, "faithful_mbps": faithful, "tried": tried,
           "started_mbps": start,
           "started_from": None if after is None else {"file": after.get("file"), "faithful_mbps": after["faithful_mbps"],
                                                       "measured_utc": after.get("measured_utc")},
           "frame_bytes": sc.workload.payload_bytes, "spare_cores": spare,
           "frame_hops": frame_hops(sc, [(h, hosts[(i + 1) % len(hosts)]) for i, h in enumerate(hosts)]),
           "measured_utc": datetime.now(timezone.utc).isoformat(), "file": str(path)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    return out


def cached(sc: Scenario) -> dict | None:
    path, key = cache_file(sc)
    try:
        c = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return c if c.get("key") == key else None


def scenario_pairs(sc: Scenario) -> list[tuple[str, str]]:
    from testbed.traffic.workload import build_messages  # noqa: PLC0415
    _, msgs = build_messages(sc, build_fabric(sc.fabric))
    return sorted({(m.src, m.dst) for m in msgs if m.op != "compute" and m.src != m.dst})


def auto_factor(sc: Scenario, cal: dict, spare_now: float) -> tuple[float, dict]:
    """D for hardware view sc from its calibration, and how it was reached."""
    base = sc.fabric.bw_mbps / (cal["faithful_mbps"] / MARGIN)
    demand = frame_hops(sc, scenario_pairs(sc))
    demand_ratio = max(1.0, demand / cal["frame_hops"]) if cal["frame_hops"] else 1.0
    cpu = min(CPU_FACTOR_MAX, max(1.0, cal["spare_cores"] / max(spare_now, 0.05)))
    d = r10_ceil(max(1.0, base * demand_ratio * cpu))
    return d, {"faithful_mbps": cal["faithful_mbps"], "margin": MARGIN, "demand_frame_hops": demand,
               "calibration_frame_hops": cal["frame_hops"], "demand_ratio": demand_ratio,
               "spare_cores_at_calibration": cal["spare_cores"], "spare_cores_now": spare_now,
               "cpu_factor": cpu, "unrounded": base * demand_ratio * cpu, "calibration_file": cal["file"],
               "calibration_measured_utc": cal["measured_utc"], "calibration_tried": cal["tried"],
               # the ladder's first rung: below its top when an earlier calibration started it lower
               "calibration_started_mbps": cal.get("started_mbps")}


def run_and_analyze(sc: Scenario, results_dir: Path | None = None, log=print) -> dict:
    """One emulation and its analysis, for callers without a display of their own (the bench)."""
    from testbed.analysis import summary as analysis  # noqa: PLC0415 (the analysis is heavy)
    from testbed.run import runner  # noqa: PLC0415 (the runner resolves nothing: it runs)
    return analysis.analyze(runner.run(sc, log=log, results_dir=results_dir))


def resolve(sc: Scenario, run_and_judge=None, log=print, slower: float = 1.0, at_least: float = 1.0) -> Scenario:
    """The emulated scenario a run of hardware view sc runs: at run.dilation, or auto.
    run_and_judge(scenario, results_dir) -> summary runs a calibration's emulations (default:
    run_and_analyze); they keep their run folders under CALIBRATION_DIR/runs. slower: auto's D
    times this (a run again after one that could not keep up: slower_after), its wall-clock guard
    with it; a D the scenario sets stays as set. at_least: auto's D no smaller than this (regress
    runs a scenario at its baseline's D where auto's is smaller: like for like)."""
    run_and_judge = run_and_judge or (lambda s, d: run_and_analyze(s, d, log))
    if sc.dilation.chosen_by not in ("unresolved", "version1"):
        return sc   # resolved already (a job measured alone, a calibration)
    if sc.version == 1:
        return dilate(sc, 1.0, "version1")
    if sc.run.dilation != "auto":
        return dilate(sc, float(sc.run.dilation), "set")
    cal = cached(sc)
    if cal is None:
        log(f"{sc.name}: no calibration of this fabric on this machine and emulating code; measuring it, once "
            f"(kept in {CALIBRATION_DIR})")
        cal = calibrate(sc, run_and_judge, log)
    d, how = auto_factor(sc, cal, spare_cores())
    if at_least > d:
        d, how = at_least, {**how, "auto": d, "at_least": at_least}
        # the wall-clock guard with it, as for slower
        sc = dataclasses.replace(sc, run=dataclasses.replace(sc.run, time_limit_s=sc.run.time_limit_s * at_least / how["auto"]))
    raised = f", raised from {how['auto']:g} to {at_least:g}, its baseline's" if "at_least" in how else ""
    if slower > 1.0:
        d, how = d * slower, {**how, "slower": slower}
        sc = dataclasses.replace(sc, run=dataclasses.replace(sc.run, time_limit_s=sc.run.time_limit_s * slower))
    log(f"{sc.name}: dilation {d:g} (auto: faithful {cal['faithful_mbps']:g} Mb/s here, margin {MARGIN:g}, "
        f"demand x{how['demand_ratio']:.2f}, spare CPU x{how['cpu_factor']:.2f}"
        f"{raised}"
        f"{f', x{slower:g} after a run that could not keep up' if slower > 1.0 else ''}); links at "
        f"{sc.fabric.bw_mbps / d:.3g} Mb/s")
    return dilate(sc, d, "auto", how)
