"""Verdicts on a run's summary: the scenario's own expectations, and the comparison against a
stored baseline with per-metric tolerances. Pure functions of summary dicts."""
from __future__ import annotations

import json
import operator
import os
from collections.abc import Callable
from decimal import ROUND_CEILING, Decimal
from pathlib import Path

from testbed.errors import InputError
from testbed.metrics import DERIVED, TRACKED, Tolerance, metric_class, tolerance_of  # noqa: F401 (also regress's API)
from testbed.paths import PROJECT_ROOT
from testbed.scenario.overrides import parse_override

BASELINE_VERSION = 2   # 2: times in hardware time (tracked_value)
BASELINE_DIR = Path(os.environ.get("TESTBED_BASELINE_DIR", PROJECT_ROOT / "baselines"))

_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
        "!=": operator.ne}
MISSING = object()


def metric(summary: dict, path: str):
    """summary["a"]["b"]... for the dotted path "a.b..."; list items by index; MISSING if absent."""
    node = summary
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return MISSING
    return node


def check_expectations(summary: dict, expects: list[dict], fidelity_valid: bool = True) -> list[dict]:
    """Each expectation judged: ok True or False, or None (not judged) for a performance metric of a
    run the emulation did not run faithfully, whose times and queues are the machine's, not the
    fabric's. A policy metric is judged on every run, but for losses the emulator itself explains
    on such a run (lost_to_the_emulator)."""
    explained = [] if fidelity_valid else lost_to_the_emulator(summary)
    out = []
    for e in expects:
        actual = metric(summary, e["metric"])
        want = metric(summary, e["than"]) if e.get("than") else e["value"]
        kind = metric_class(e["metric"])
        alone = metric(summary, e["metric"].removesuffix("slowdown") + "alone_kept_up") \
            if e["metric"].startswith("jobs.") and e["metric"].endswith(".slowdown") else MISSING
        if actual is None and alone is False:
            ok, why = None, "not judged: the job's run alone could not keep up, so its time alone is the machine's"
        elif actual is None and alone is None:
            ok, why = None, "not judged: the job was not run alone first (run.measure_alone = false)"
        elif actual is MISSING or actual is None:
            ok, why = False, "not in the summary"
        elif want is MISSING or want is None:
            # nothing to compare with (e.g. the bulk traffic never ran): the policy went unchecked,
            # which passes nothing
            ok, why = False, f"not in the summary: {e['than']}"
        else:
            try:
                ok, why = bool(_OPS[e["op"]](actual, want)), ""
            except TypeError:
                ok, why = False, "not comparable"
            if kind == "performance" and not fidelity_valid:
                ok, why = None, (f"not judged: a performance metric, and the emulation did not run faithfully "
                                 f"(it would have {'passed' if ok else 'failed'})")
            elif not ok and e["metric"] in explained:
                ok, why = None, "not judged: the emulator's own loss (see the fidelity notes)"
        out.append({"metric": e["metric"], "class": kind, "op": e["op"], "expected": e.get("than") or e["value"],
                    "actual": None if actual is MISSING else actual,
                    "than_value": None if not e.get("than") or want is MISSING else want, "ok": ok, "why": why})
    return out


# What a lost packet sets off: when the emulator's own plumbing lost every lost packet, these say
# nothing about the policy.
LOSS_METRICS = ("packets.lost", "packets.retransmitted", "packets.timeouts", "packets.naks")


def lost_to_the_emulator(summary: dict) -> list[str]:
    """The loss metrics a run's emulator explains: every lost packet was dropped inside Open
    vSwitch, at its or the receivers' sockets or at a veth, none in a switch queue the policy runs;
    or every switch buffer drop was in a switch and class whose lossless rows outgrew their headroom
    only because the agent paused too late or their links ran ahead of their rate."""
    p = summary.get("packets", {})
    qos = summary.get("qos") or {}
    overruns = ((qos.get("pfc") or {}).get("headroom_overruns")) or []
    if overruns and drops_behind_the_emulators_overruns(overruns, (qos.get("queues") or {}).get("drops_by_port")):
        # a switch that reacts in time behind links at their rate holds those frames
        # (testbed.analysis.qos.headroom_overruns), so the drops they caused are the emulator's
        return ["packets.port_buffer_drops", *LOSS_METRICS]
    if p.get("resent_without_loss"):
        # go-back-N set off by frames reordered or delayed inside the emulator (testbed.analysis.summary)
        return ["packets.retransmitted", "packets.naks", "packets.timeouts"]
    return list(LOSS_METRICS) if 0 < p.get("lost", 0) <= p.get("lost_inside_emulator", 0) else []


def drops_behind_the_emulators_overruns(overruns: list[dict], drops_by_port: list[dict] | None) -> bool:
    """Whether every switch buffer drop fell in a switch and class where lossless rows outgrew their
    headroom and each of them did so for the emulator's reasons (late or link_ahead). The frames a
    row takes in past its headroom wait in its own switch's buffer, in its class, whichever egress
    port they leave by; a drop anywhere else, or beside a row that outgrew its headroom though
    paused in time, is the policy's. Without the drops' places (drops_by_port) nothing is excused."""
    if not drops_by_port:
        return False
    rows: dict[tuple[str, int], bool] = {}
    for r in overruns:
        key = (r["port"].rsplit("-eth", 1)[0], r["class"])
        rows[key] = rows.get(key, True) and bool(r["late"] or r.get("link_ahead"))
    return all(rows.get((d["port"].rsplit("-eth", 1)[0], d["class"]), False)
               for d in drops_by_port if d["drops"])


def verdict(failed: list[str], fidelity_valid: bool, explained: list[str] = (), not_judged: list[str] = ()) -> str:
    """ok / regressed / inconclusive for one scenario: a policy metric that broke is a regression
    even when the emulation could not keep up; a performance metric then proves nothing, and
    neither do losses the emulator itself explains (explained). A row left unjudged (not_judged:
    e.g. a job's SLA when its run alone could not keep up) leaves the scenario without a verdict:
    what was not checked has not passed."""
    if any(metric_class(m) == "policy" and (fidelity_valid or m not in explained) for m in failed):
        return "regressed"
    if not fidelity_valid:
        return "inconclusive"
    if failed:
        return "regressed"
    return "inconclusive" if not_judged else "ok"


def expand(pattern: str, summary: dict) -> list[str]:
    """The summary's paths a tracked pattern names: a `*` part stands for every key at that level."""
    paths = [""]
    for part in pattern.split("."):
        nxt = []
        for prefix in paths:
            node = metric(summary, prefix[:-1]) if prefix else summary
            keys = sorted(node) if part == "*" and isinstance(node, dict) else [part]
            nxt += [f"{prefix}{k}." for k in keys]
        paths = nxt
    return [p[:-1] for p in paths]


def tracked_value(summary: dict, path: str):
    """A tracked metric as baselines keep it: a time of the fabric in hardware time (its value / the
    run's dilation factor; a run before dilation existed ran at 1)."""
    v = metric(summary, path)
    tol = tolerance_of(path)
    if tol is not None and tol.hardware_time and isinstance(v, (int, float)) and not isinstance(v, bool):
        return v / float((summary.get("dilation") or {}).get("factor", 1.0))
    return v


def baseline_of(summary: dict) -> dict:
    metrics = {}
    for pattern in TRACKED:
        for p in expand(pattern, summary):
            v = tracked_value(summary, p)
            if v is not MISSING and v is not None:
                metrics[p] = v
    return {"baseline_version": BASELINE_VERSION, "scenario": summary["scenario"], "run_id": summary["run_id"],
            "git_commit": summary.get("git_commit"),
            "dilation_factor": float((summary.get("dilation") or {}).get("factor", 1.0)), "metrics": metrics}


def compare(summary: dict, baseline: dict, overrides: dict[str, tuple[float, float]] | None = None) -> list[dict]:
    """One row per tracked metric of the baseline: baseline, now, allowed bound, verdict
    (overrides: the scenario's own tolerances, see tolerance_of for a run that could not keep up)."""
    faithful = (summary.get("fidelity") or {}).get("verdict", "kept_up") == "kept_up"
    rows = []
    for path, base in baseline["metrics"].items():
        tol = tolerance_of(path, overrides, faithful)
        now = tracked_value(summary, path)
        if tol is None:
            continue
        if now is MISSING or now is None:
            rows.append({"metric": path, "baseline": base, "now": None, "limit": None, "verdict": "missing"})
            continue
        if tol.better == "equal":
            ok, limit = now == base, base
        elif tol.better == "near":
            margin = max(abs(base) * tol.rel, tol.abs)
            limit = [base - margin, base + margin]
            ok = limit[0] <= now <= limit[1]
        elif tol.better == "higher":
            limit = base - max(abs(base) * tol.rel, tol.abs)
            ok = now >= limit
        else:
            limit = base + max(abs(base) * tol.rel, tol.abs)
            ok = now <= limit
        rows.append({"metric": path, "baseline": base, "now": now, "limit": limit,
                     "verdict": "ok" if ok else "regressed"})
    return rows


# A tolerance is this many times the range a metric took over a scenario's faithful runs: a new run
# falls outside a sample's own range 2/(n+1) of the time (6% at n = 33), which over a scenario's
# dozen metrics would fail it on spread alone every few runs.
SPREAD_FACTOR = 1.5
MIN_SPREAD_RUNS = 20
# a tolerance is written to this many significant figures, rounded up: rounded to the nearest, it
# could fall short of SPREAD_FACTOR x the range (dateline-torus's queue p99 over 531712 .. 548328
# bytes: 1.5 x the range is 24924 bytes, six frames of 4154, stored as 24900; a CI run six frames
# above the baseline failed it)
TOLERANCE_DIGITS = 3


def round_up(x: float, digits: int = TOLERANCE_DIGITS) -> float:
    """x >= 0 to `digits` significant figures, rounded up (a float's last-place noise first rounded
    off at 12, so that 1.5 x 0.19 = 0.28500000000000003 stays 0.285)."""
    if x <= 0:
        return 0.0
    q = Decimal(f"{x:.12g}")
    return float(q.quantize(Decimal(1).scaleb(q.adjusted() - digits + 1), rounding=ROUND_CEILING))


SPREAD_VERSION = 1


# --set keys that change how a run is carried out or kept, not what it emulates nor how it is
# judged: a run with only these still measures the scenario its file describes (a spread's runs at
# twice auto's D, as regress's second run would be)
RECORDABLE_OVERRIDES = frozenset({"run.dilation", "run.report", "run.api_port", "run.capture",
                                  "run.capture_snaplen_bytes", "run.time_limit_s", "run.stall_timeout_s",
                                  "run.routes_ready_timeout_s"})


def foreign_overrides(overrides) -> list[str]:
    """The --set overrides (as given) under which a run measured something other than what its
    scenario file describes: compare's policy B (`classes.roce.ecn_kmin_bytes=20KB`) in a scenario's
    spread would widen its tolerance toward that policy."""
    return [o for o in overrides or () if parse_override(o)[0] not in RECORDABLE_OVERRIDES]


def spread_entry(summary: dict) -> dict:
    """What a run gives its scenario's spread: its tracked metrics (baseline_of), its status and its
    fidelity verdict. A spread ledger (record_spread) keeps these, so that a spread can gather runs of
    several sessions or machines without their folders, and the tolerances keep their evidence."""
    return {"spread_version": SPREAD_VERSION, **baseline_of(summary), "status": summary["status"],
            "fidelity_verdict": (summary.get("fidelity") or {}).get("verdict"),
            "overrides": list(summary.get("overrides") or ())}


def spread(entries: list[dict], resolution: Callable[[str], float] = lambda path: 0.0) -> dict[str, dict]:
    """Per tracked metric with a tolerance, over spread_entry records: how many runs, their least,
    median and largest value, and the tolerance that spread gives. Over the runs in which nothing
    failed; a performance metric only over the faithful ones, since it is judged only on those, and a
    policy metric over all of them, since it is judged on every run.

    A metric that moves in steps (resolution: its step, 0 where it is continuous; limits.resolution)
    gets at least one step: its runs can agree to the step while what it summarises moves, and the
    next run crosses the step (a queue's p99 in whole frames; docs/regression.md)."""
    clean = [e for e in entries if e["status"] == "ok"]
    values: dict[str, list[float]] = {}
    for e in clean:
        faithful = e["fidelity_verdict"] == "kept_up"
        for path, v in e["metrics"].items():
            tol = tolerance_of(path)
            if tol is None or tol.better == "equal" or isinstance(v, (bool, str)):
                continue
            if metric_class(path) == "performance" and not faithful:
                continue
            values.setdefault(path, []).append(float(v))
    out = {}
    for path, vs in sorted(values.items()):
        vs = sorted(vs)
        lo, hi = vs[0], vs[-1]
        mid = len(vs) // 2
        measured = round_up(SPREAD_FACTOR * (hi - lo))
        step = resolution(path)
        out[path] = {"runs": len(vs), "class": metric_class(path), "min": lo, "max": hi,
                     "median": vs[mid] if len(vs) % 2 else (vs[mid - 1] + vs[mid]) / 2,
                     "abs": max(measured, step), "step": step if step > measured else None}
    return out


def ledger_path(name: str, directory: Path = BASELINE_DIR) -> Path:
    return directory / "spread" / f"{name}.jsonl"


def read_ledger(name: str, directory: Path = BASELINE_DIR) -> list[dict]:
    """The scenario's spread ledger (one spread_entry a line), or [] if it has none."""
    p = ledger_path(name, directory)
    if not p.exists():
        return []
    out = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            e = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"{p}:{n}", None, f"not JSON ({err.msg})") from None
        if not isinstance(e, dict) or e.get("spread_version") != SPREAD_VERSION:
            raise InputError(f"{p}:{n}", "spread_version", f"{e.get('spread_version') if isinstance(e, dict) else e!r}, "
                             f"this testbed reads {SPREAD_VERSION}")
        if e.get("baseline_version") != BASELINE_VERSION:
            raise InputError(f"{p}:{n}", "baseline_version", f"{e.get('baseline_version')!r}, this testbed reads "
                             f"{BASELINE_VERSION}: its metrics are not comparable")
        if e.get("scenario") != name:
            raise InputError(f"{p}:{n}", "scenario", f"{e.get('scenario')!r} in the ledger of {name}")
        out.append(e)
    return out


def record_spread(name: str, entries: list[dict], directory: Path = BASELINE_DIR) -> tuple[Path, int]:
    """Add the runs not yet in the scenario's ledger; how many were new. Every run must be of a clean
    commit, as a baseline must (unrecordable), and of the scenario as its file describes it
    (foreign_overrides): a ValueError naming the first that is not, and nothing written."""
    for e in entries:
        why = unrecordable(e.get("git_commit")) or overridden(e.get("overrides"))
        if why:
            raise ValueError(f"run {e['run_id']}: {why}")
        if e["scenario"] != name:
            raise ValueError(f"run {e['run_id']} is of {e['scenario']}, not {name}")
    p = ledger_path(name, directory)
    have = {e["run_id"] for e in read_ledger(name, directory)}
    new = [e for e in entries if e["run_id"] not in have]
    if new:
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("a") as f:
            for e in sorted(new, key=lambda e: e["run_id"]):
                f.write(json.dumps(e, sort_keys=True) + "\n")
    return p, len(new)


def tolerance_toml(stats: dict[str, dict], commits: list[str]) -> str:
    """The [[tolerance]] tables a scenario file records its spread in."""
    runs = {c: max((st["runs"] for st in stats.values() if st["class"] == c), default=0)
            for c in ("performance", "policy")}
    names = ", ".join(c[:8] + ("-dirty" if c.endswith("-dirty") else "") for c in commits)
    lines = [f"# Run-to-run spread: performance metrics over {runs['performance']} faithful runs, policy metrics "
             f"over {runs['policy']} runs",
             f"# (commits {names}): each tolerance is {SPREAD_FACTOR:g} x the range, rounded up to "
             f"{TOLERANCE_DIGITS} figures (testbed spread)."]
    for path, st in stats.items():
        lines += ["[[tolerance]]", f'metric = "{path}"',
                  f"abs = {st['abs']!r}  # {st['min']:.6g} .. {st['max']:.6g}, median {st['median']:.6g}"
                  + (f"; its step, {st['step']:.6g}" if st.get("step") else ""), "rel = 0.0",
                  ""]
    return "\n".join(lines)


def suite() -> list[str]:
    """The regression suite: every shipped scenario but those whose file says why it is left out
    (regress_skip). A scenario in it must judge something (judges_something): the unit tests hold
    every shipped file to that, so a new scenario cannot join the suite and pass unjudged."""
    from testbed.scenario import list_scenarios, load_scenario
    return [n for n in list_scenarios() if not load_scenario(n).regress_skip]


def left_out() -> dict[str, str]:
    """The shipped scenarios the suite leaves out, each with its file's reason."""
    from testbed.scenario import list_scenarios, load_scenario
    why = {n: load_scenario(n).regress_skip for n in list_scenarios()}
    return {n: w for n, w in why.items() if w}


def judges_something(name: str, directory: Path = BASELINE_DIR) -> bool:
    """Whether a run of the scenario has anything to be judged on: an expectation of its policy, or
    a stored baseline."""
    from testbed.scenario import load_scenario
    sc = load_scenario(name)
    return bool(sc.expect) or load_baseline(sc.name, directory) is not None


def load_baseline(name: str, directory: Path = BASELINE_DIR) -> dict | None:
    p = directory / f"{name}.json"
    if not p.exists():
        return None
    base = json.loads(p.read_text())
    if base.get("baseline_version") != BASELINE_VERSION:
        raise ValueError(f"{p}: baseline_version {base.get('baseline_version')!r}, this testbed reads "
                         f"{BASELINE_VERSION}: record it again (testbed baseline {name})")
    return base


def unrecordable(commit: str | None) -> str | None:
    """Why a run of this commit (testbed.run.probe.git_commit) cannot be a baseline, or None: a baseline
    must name the commit it measured, so a tree with uncommitted changes (or outside git) is refused."""
    if not commit:
        return "the run names no git commit"
    if commit.endswith("-dirty"):
        return f"the run is of commit {commit[:12]} with uncommitted changes: commit them first"
    return None


def overridden(overrides) -> str | None:
    """Why a run made with these --set overrides cannot stand for its scenario, or None."""
    bad = foreign_overrides(overrides)
    return (f"it was made with --set {' '.join(bad)}, which changes what its scenario emulates or how it is "
            f"judged (only {', '.join(sorted(RECORDABLE_OVERRIDES))} may be set)") if bad else None


def save_baseline(summary: dict, directory: Path = BASELINE_DIR, untracked: tuple[str, ...] = ()) -> Path:
    """Store the run's baseline, without the metrics in untracked (whose limits could never fail)."""
    why = unrecordable(summary.get("git_commit")) or overridden(summary.get("overrides"))
    if why:
        raise ValueError(why)
    directory.mkdir(parents=True, exist_ok=True)
    p = directory / f"{summary['scenario']}.json"
    base = baseline_of(summary)
    base["metrics"] = {k: v for k, v in base["metrics"].items() if k not in untracked}
    p.write_text(json.dumps(base, indent=1, sort_keys=True) + "\n")
    return p
