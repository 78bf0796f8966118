"""Command line: `testbed run NAME|FILE.toml [--set KEY=VALUE ...]`, `check`, `analyze RUN_DIR`, `list`,
`clean` and the rest (main's parser). Exit codes: EXIT_CODES."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

import signal

from testbed.errors import Busy, InputError, RunFailed, SetupError, Terminated, on_signal
from testbed.runfolder import RunFolder

EXIT_CODES = {
    0: "ok",
    1: "the run failed or regressed (lost packets, an incomplete collective, a component died, a broken "
       "expectation, a metric beyond its baseline's limit)",
    2: "bad input: the message names the file (or --set) and the field; nothing was started",
    3: "another run holds the machine",
    4: "inconclusive: nothing failed, but the emulation did not run the fabric faithfully, or too little was "
       "busy to judge it",
    5: "setup: this machine or tree cannot start what was asked (not root, Open vSwitch not answering, "
       "objects of the same name already there, a dirty tree for a baseline, too few runs for a spread)",
    130: "interrupted (Ctrl-C); everything the run created was removed",
    143: "terminated (SIGTERM); everything the run created was removed",
}
NEEDS_ROOT = "emulation needs root (Mininet, Open vSwitch, namespaces)"

# Logs and CI capture output without a terminal, where rich would fold tables at 80 columns.
console = Console(stderr=False, width=None if sys.stdout.isatty() else 140)


def print_summary(s: dict, run_dir: Path) -> None:
    """The run's document (testbed.analysis.document, the report's own), then its verdicts."""
    from testbed.analysis.document import blocks, to_console
    rf = RunFolder(run_dir)
    to_console(blocks(s), console)
    console.print()
    print_fidelity(s["fidelity"])
    if s["problems"]:
        console.print(f"[bold red]FAILED[/]: {'; '.join(s['problems'])}")
    elif s["status"] == "inconclusive":
        unjudged = [f"{e['metric']} ({e['why']})" for e in s["expectations"] if e["ok"] is None]
        why = ("the emulation did not run the configured fabric faithfully" if s["fidelity"]["verdict"] != "kept_up"
               else "expectations it could not judge: " + "; ".join(unjudged))
        console.print(f"[bold yellow]INCONCLUSIVE[/]: nothing failed, but this run is no result: {escape(why)} (exit 4)")
    else:
        console.print("[bold green]OK[/]")
    console.print(f"results: {run_dir}" + (f" (report: {rf.report_html})" if rf.report_html.exists() else ""))


def print_fidelity(fid: dict) -> None:
    """The verdict on the emulation itself, on its own line: a result is only worth what the
    emulation's fidelity says."""
    lf, hf = fid.get("links") or {}, fid.get("hosts") or {}
    idle = fid.get("machine_cpu_idle_fraction")
    # what was judged, each side: a verdict resting on the hosts alone says so
    detail = (f"{lf['busy_links']} busy link(s), worst drained at rate in {lf['worst_share']:.1%} of its backlogged "
              f"windows (needs {lf['min_share']:.0%})" if lf.get("busy_links")
              else "no switch link was busy long enough to judge its drain rate")
    if lf.get("short_links"):
        detail += f"; {lf['short_links']} link(s) with fewer windows judged over their whole backlogged time"
    if hf.get("judged_hosts"):
        worst = hf.get("worst") or {}
        detail += (f"; {hf['judged_hosts']} sending host(s) judged" + (
            f", worst at rate in {worst['share']:.1%} of its busy windows" if worst.get("share") is not None else ""))
    else:
        detail += "; no sending host was busy long enough to judge"
    detail += f"; machine CPU idle {idle:.0%}" if idle is not None else ""
    if fid["verdict"] == "kept_up":
        console.print(f"[bold green]FIDELITY VALID[/]: {detail}")
    elif fid["verdict"] == "not_judged":
        console.print(f"[bold yellow]FIDELITY NOT JUDGED[/]: {'; '.join(fid['notes'])}")
    else:
        console.print(f"[bold yellow]FIDELITY INVALID[/]: the emulation could not keep up, so these numbers may "
                      f"not be the configured fabric's: {'; '.join(fid['notes'])}")


def exit_code(summary: dict) -> int:
    """From the run's one status: 0 ok, 4 inconclusive (no result: not faithful, or not judged), 1
    any failure."""
    return {"ok": 0, "inconclusive": 4}.get(summary["status"], 1)


class TrafficProgress:
    """The traffic phase on a terminal: messages and payload done against the plan, the elapsed
    time against the time limit (a log has only the lines before and after)."""

    def __init__(self):
        from rich.progress import BarColumn, Progress, TextColumn
        self.bar = Progress(TextColumn("traffic"), BarColumn(), TextColumn("{task.fields[text]}"),
                            console=console, transient=True)
        self.task = None

    def __call__(self, p, elapsed_s: float, limit_s: float) -> None:
        text = (f"{p.messages_done}/{p.messages} messages, {p.payload_bytes_done / 2**20:.1f}/"
                f"{p.payload_bytes / 2**20:.1f} MiB, {elapsed_s:.1f} s of {limit_s:g} s")
        if self.task is None:
            self.bar.start()
            self.task = self.bar.add_task("traffic", total=max(1, p.messages), text=text)
        self.bar.update(self.task, completed=p.messages_done, text=text)

    def close(self) -> None:
        if self.task is not None:
            self.bar.stop()


def run_with_progress(sc, results_dir=None):
    from testbed.run import runner
    alone = measure_alone(sc) if len(sc.jobs) > 1 and sc.run.measure_alone else None
    shown = TrafficProgress() if console.is_terminal else None
    try:
        return runner.run(sc, log=lambda m: console.print(f"[dim]{m}[/]"), progress=shown, alone=alone,
                          results_dir=results_dir)
    finally:
        if shown:
            shown.close()


def measure_alone(sc) -> dict:
    """Each of the scenario's jobs run alone on the same fabric, one after the other (one emulation
    at a time), before they run together: its mean iteration, and whether that run kept up."""
    import dataclasses
    from testbed.analysis import summary as analysis
    out = {}
    for job in sc.jobs:
        solo = dataclasses.replace(sc, name=f"{sc.name}.alone.{job.name}", jobs=(job,), expect=())
        console.print(f"[dim]{sc.name}: job {job.name} alone first[/]")
        run_dir = run_with_progress(solo)
        s = analysis.analyze(run_dir)
        j = s["jobs"][job.name]
        out[job.name] = {"mean_time_s": j["mean_time_s"], "kept_up": s["fidelity"]["verdict"] == "kept_up",
                         "run_id": s["run_id"]}
        console.print(f"[dim]{sc.name}: job {job.name} alone: {j['mean_time_s']} s an iteration, "
                      f"{s['fidelity']['verdict']}[/]")
    return out


def run_and_judge(sc, results_dir=None) -> dict:
    """One emulation of a resolved scenario and its analysis (a calibration's runs)."""
    from testbed.analysis import summary as analysis
    run_dir = run_with_progress(sc, results_dir)
    return analysis.analyze(run_dir)


def resolve(sc, slower: float = 1.0, at_least: float = 1.0):
    """The scenario at its dilation: as set, or auto (calibrating this machine first if needed, and
    no less than at_least), times slower (a run again: testbed.run.calibrate.slower_after)."""
    from testbed.run.calibrate import resolve as resolve_dilation
    return resolve_dilation(sc, run_and_judge, lambda m: console.print(f"[dim]{m}[/]"), slower=slower,
                            at_least=at_least)


def cmd_run(args) -> int:
    run_dir, summary = _run_and_analyze(args.name, args.set)
    print_summary(summary, run_dir)
    return exit_code(summary)


def cmd_calibrate(args) -> int:
    """Measure this machine's faithful rate for the scenario's fabric again (cached for auto)."""
    from testbed.run.calibrate import auto_factor, calibrate, spare_cores
    from testbed.scenario import load_scenario
    sc = load_scenario(args.name, args.set)
    if os.geteuid() != 0:
        raise SetupError(NEEDS_ROOT)
    cal = calibrate(sc, run_and_judge, lambda m: console.print(f"[dim]{m}[/]"), from_top=True)
    console.print(f"{args.name}: {sc.fabric.topology} kept up at {cal['faithful_mbps']:g} Mb/s "
                  f"({cal['frame_bytes']} B payloads, {cal['spare_cores']:.2f} cores spare); cached in {cal['file']}")
    if sc.version >= 2:
        d, how = auto_factor(sc, cal, spare_cores())
        console.print(f"{args.name}: auto dilation now {d:g} ({sc.fabric.bw_mbps / 1e3:g} Gb/s links emulated at "
                      f"{sc.fabric.bw_mbps / d:.3g} Mb/s)")
    return 0


def _run_dir(target: str) -> Path:
    """A run folder, or a scenario name for its latest run under results/."""
    from testbed.run.runner import RESULTS_DIR
    run_dir = Path(target)
    if RunFolder(run_dir).manifest.is_file():
        return run_dir
    runs = sorted(p.parent for p in (RESULTS_DIR / target).glob("*/manifest.json")) if "/" not in target else []
    if not runs:
        raise InputError(target, None, "neither a run folder (no manifest.json) nor a scenario with runs in "
                         f"{RESULTS_DIR}")
    return runs[-1]


def cmd_analyze(args) -> int:
    from testbed.analysis import summary as analysis
    run_dir = _run_dir(args.run)
    summary = analysis.analyze(run_dir)
    print_summary(summary, run_dir)
    return exit_code(summary)


def _run_and_analyze(name: str, sets: list[str], slower: float = 1.0, at_least: float = 1.0) -> tuple[Path, dict]:
    from testbed.analysis import summary as analysis
    from testbed.scenario import load_scenario
    sc = load_scenario(name, sets)
    if os.geteuid() != 0:
        raise SetupError(NEEDS_ROOT)
    run_dir = run_with_progress(resolve(sc, slower=slower, at_least=at_least))
    return run_dir, analysis.analyze(run_dir)


def _run_faithfully(name: str, sets: list[str], at_least: float = 1.0) -> tuple[Path, dict]:
    """A run, and more if the machine could not emulate it faithfully (testbed.run.calibrate.run_again:
    once more, then while the hypervisor stole from the runs), each at a larger multiple of auto's D
    (slower_after: 2, then 4; a D the scenario sets stays); the last is kept either way (baseline and regress call it inconclusive if it
    fell behind too). at_least: auto's D no less than this (regress: its baseline's)."""
    from testbed.run.calibrate import reached_verdict, run_again, slower_after
    runs = 0
    while True:
        run_dir, summary = _run_and_analyze(name, sets, slower_after(runs) if runs else 1.0, at_least)
        runs += 1
        if reached_verdict(summary):
            return run_dir, summary
        again = run_again(runs, summary)
        steal = summary["fidelity"].get("machine_steal_fraction") or 0.0
        auto = (summary.get("dilation") or {}).get("chosen_by") == "auto"
        more = f", running it once more{f' at {slower_after(runs):g}x auto dilation' if auto else ''}" if again else ""
        why = summary["fidelity"]["notes"] if summary["fidelity"]["verdict"] != "kept_up" else [
            f"{e['metric']} not judged: {e['why']}" for e in summary["expectations"] if e["ok"] is None]
        console.print(f"[yellow]{name}: no verdict (run {runs}, steal {steal:.0%}: {escape('; '.join(why))}){more}[/]")
        if not again:
            return run_dir, summary


def cmd_baseline(args) -> int:
    from testbed.analysis import summary as analysis
    from testbed.regress import limits
    from testbed.regress import baselines as regress
    from testbed.scenario import load_scenario
    sc = load_scenario(args.name)
    if args.run:
        run_dir = _run_dir(args.run)
        summary = analysis.analyze(run_dir)
    else:
        from testbed.run.probe import git_commit
        why = regress.unrecordable(git_commit())
        if why:  # before anything runs
            raise SetupError(f"baselines are recorded only from a clean tree: {why}")
        run_dir, summary = _run_faithfully(args.name, [])
    if summary["scenario"] != sc.name:
        raise InputError(str(run_dir), None, f"a run of {summary['scenario']}, not {sc.name}")
    why = regress.overridden(summary.get("overrides"))
    if why:
        raise InputError(str(RunFolder(run_dir).summary), "overrides", f"not stored as a baseline: {why}")
    if summary["status"] not in ("ok", "inconclusive"):
        raise RunFailed(f"{run_dir} is not a clean run (status {summary['status']}): not stored as a baseline")
    if summary["fidelity"]["verdict"] != "kept_up":
        console.print(f"[bold yellow]inconclusive[/]: {run_dir} could not keep up "
                      f"({'; '.join(summary['fidelity']['notes'])}): not stored as a baseline")
        return 4
    why = regress.unrecordable(summary.get("git_commit"))
    if why:
        raise SetupError(f"{run_dir} is not stored as a baseline: {why}")
    # a metric whose limit could never fail guards nothing: not tracked, and said so
    unreachable = limits.unreachable(regress.baseline_of(summary), sc)
    path = regress.save_baseline(summary, untracked=tuple(u.split(":", 1)[0] for u in unreachable))
    if unreachable:
        console.print(f"[bold yellow]not tracked, since with {args.name}'s tolerances their limits could never "
                      f"fail[/]: {escape('; '.join(unreachable))} (a scenario records its spread in "
                      f"{escape('[[tolerance]]')} tables: testbed spread {args.name})")
    console.print(f"baseline for {args.name} stored in {path} (run {summary['run_id']})")
    return 0


def _num(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_num(x) for x in v) + "]"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _judge(n: str, sets: list[str], scenario) -> dict:
    """One scenario of the suite, run (again if it could not keep up: _run_faithfully) and judged
    against its expectations and its baseline: its rows, its verdict and why it has none."""
    from testbed.regress import limits
    from testbed.regress import baselines as regress
    base = regress.load_baseline(scenario.name)
    # like for like: at its baseline's D where auto's is smaller. The emulator's own delays, divided
    # by D, stay in hardware-time results: incast-pfc's iteration measured 0.18 us (0.03%) longer at
    # D = 16000 than at the 31500 its spread was measured at, beyond that spread (2026-12-05). A
    # larger auto D (a slower machine) stays: the baseline's would not be kept up with.
    run_dir, s = _run_faithfully(n, sets, at_least=(base or {}).get("dilation_factor") or 1.0)
    rows = []
    for e in s["expectations"]:
        rows.append((e["metric"], f"{e['op']} {_num(e['expected'])}", "", _num(e["actual"]),
                     "ok" if e["ok"] else "regressed" if e["ok"] is False else "not judged"))
    stale = regress.unrecordable(base.get("git_commit")) if base else None
    if stale:
        console.print(f"[yellow]{n}: its baseline ({base['run_id']}) is not of a clean commit: {stale}; "
                      f"record it again with `testbed baseline {n}`[/]")
    unreachable = limits.unreachable(base, scenario) if base else []
    if unreachable:
        console.print(f"[yellow]{n}: some limits of its baseline could never fail: {escape('; '.join(unreachable))}[/]")
    finer = limits.finer_than_step(base, scenario) if base else []
    if finer:
        console.print(f"[yellow]{n}: some tolerances are finer than their metric moves, so a run a step away fails "
                      f"on the step alone: {escape('; '.join(finer))} (docs/regression.md)[/]")
    for c in regress.compare(s, base, limits.overrides(scenario)) if base else []:
        rows.append((c["metric"], _num(c["baseline"]), _num(c["limit"]), _num(c["now"]), c["verdict"]))
    # a run that failed outside its expectations (traffic stalled, a deadlock, lost or
    # unaccounted packets) fails as itself, named, whatever its baseline tracks
    others = [p for p in s["problems"] if not p.startswith("expectation failed")]
    if others:
        rows.append(("problems", "none", "", "; ".join(others), "regressed"))
    failed = [r[0] for r in rows if r[4] not in ("ok", "not judged")]
    not_judged = [r[0] for r in rows if r[4] == "not judged"]
    verdict = regress.verdict(failed, s["fidelity"]["verdict"] == "kept_up", regress.lost_to_the_emulator(s),
                              not_judged)
    why = (s["fidelity"]["notes"] or s["problems"] or [
        f"{e['metric']}: {e['why']}" for e in s["expectations"] if e["ok"] is None]) \
        if verdict == "inconclusive" else None
    return {"run_dir": run_dir, "summary": s, "rows": rows, "failed": failed, "not_judged": not_judged,
            "verdict": verdict, "no_verdict": why}


def _verdict_table(title: str, judged: dict[str, dict]) -> Table:
    table = Table(title=title)
    for col in ("scenario", "metric", "baseline / expected", "limit", "now", "verdict"):
        table.add_column(col, overflow="fold")
    for n, j in judged.items():
        for r in j["rows"]:
            color = "green" if r[4] == "ok" else "red"
            table.add_row(n, r[0], r[1], r[2], r[3], f"[{color}]{r[4]}[/]")
        table.add_row(n, "[bold]run[/]", "", "", j["run_dir"].name, f"[bold]{j['verdict']}[/]")
    return table


def cmd_regress(args) -> int:
    """Run each regression scenario, check its expectations and compare it with its baseline; a
    run whose fidelity fails is run again (once, then while steal spoiled it: _run_faithfully), and
    is inconclusive, never a pass, if the last fails too. A broken policy metric (marks, pauses,
    drops, losses, status) is a regression even then;
    a slower time or a longer queue on such a run is inconclusive (testbed.regress.baselines.verdict).
    With --sabotage, runs the named sabotages (testbed.regress.sabotage) instead: each must be
    called regressed."""
    from testbed.regress import baselines as regress
    from testbed.scenario import load_scenario
    if args.sabotage is not None:
        return _sabotage(args)
    names = args.names or regress.suite()
    scenarios = {n: load_scenario(n, args.set) for n in names}  # bad input before anything runs
    unjudged = [n for n in names if not regress.judges_something(n)]
    if unjudged:
        raise InputError(scenarios[unjudged[0]].path, "expect", "the scenario has no [[expect]] and no stored "
                         "baseline: a regression run of it would judge nothing")
    if not args.names:
        console.print(f"the suite: {len(names)} scenarios: {' '.join(names)}")
        for n, why in regress.left_out().items():
            console.print(f"  left out: {n}: {escape(why)}")
    judged = {}
    for n in names:
        judged[n] = _judge(n, args.set, scenarios[n])
    console.print(_verdict_table("regression: " + " ".join(names) + (f" (with {' '.join(args.set)})" if args.set else ""),
                                 judged))
    verdicts = {n: j["verdict"] for n, j in judged.items()}
    summary = {"verdicts": verdicts, "sets": args.set, "failed": {n: j["failed"] for n, j in judged.items()},
               "not_judged": {n: j["not_judged"] for n, j in judged.items()},
               "no_verdict": {n: j["no_verdict"] for n, j in judged.items() if j["no_verdict"]},
               "runs": {n: str(j["run_dir"]) for n, j in judged.items()}}
    print(json.dumps(summary), flush=True)  # one machine-readable line, never wrapped
    if any(v == "regressed" for v in verdicts.values()):
        return 1
    return 4 if any(v == "inconclusive" for v in verdicts.values()) else 0


def _sabotage(args) -> int:
    """Each sabotage's scenario, run with its --set and judged as regress judges it: caught when the
    verdict is regressed. Exit 0 if every one was caught, 1 if one passed (a policy the suite does
    not guard), 4 if one reached no verdict."""
    from testbed.regress.sabotage import by_name
    from testbed.scenario import load_scenario
    if args.names or args.set:
        raise InputError("--sabotage", " ".join(args.names + args.set),
                         "give the sabotages to run as --sabotage NAME[,NAME]; no scenarios or --set beside it")
    chosen = by_name([n for n in args.sabotage.split(",") if n])
    scenarios = {s.name: load_scenario(s.scenario, list(s.sets)) for s in chosen}  # bad input first
    judged, caught = {}, {}
    for sab in chosen:
        console.print(f"sabotage {sab.name}: {sab.scenario} with {' '.join(sab.sets)} ({sab.breaks})")
        j = _judge(sab.scenario, list(sab.sets), scenarios[sab.name])
        judged[f"{sab.name} ({sab.scenario})"] = j
        caught[sab.name] = {"regressed": "caught", "ok": "passed"}.get(j["verdict"], "no verdict")
    console.print(_verdict_table("sabotage: each must be caught (regressed)", judged))
    print(json.dumps({"sabotage": caught, "failed": {n.split(" ")[0]: j["failed"] for n, j in judged.items()},
                      "no_verdict": {n.split(" ")[0]: j["no_verdict"] for n, j in judged.items() if j["no_verdict"]},
                      "runs": {n.split(" ")[0]: str(j["run_dir"]) for n, j in judged.items()}}), flush=True)
    if any(v == "passed" for v in caught.values()):
        return 1
    return 4 if any(v == "no verdict" for v in caught.values()) else 0


def cmd_spread(args) -> int:
    """A scenario's run-to-run spread over its stored runs and its spread ledger
    (baselines/spread/NAME.jsonl), and the [[tolerance]] tables it gives; --record adds the stored
    runs to the ledger first."""
    from testbed.regress import baselines as regress
    from testbed.regress import limits
    from testbed.run.runner import RESULTS_DIR
    from testbed.scenario import load_scenario
    sc = load_scenario(args.name)
    name = sc.name
    roots = [Path(r) for r in args.runs] or [RESULTS_DIR / name]
    stored = []
    for root in roots:
        for f in sorted(root.glob("**/summary.json")):
            s = json.loads(f.read_text())
            if s.get("scenario") == name:
                stored.append(regress.spread_entry(s))
    # compare's policy B, a sweep or a sabotage sits beside the scenario's own runs: in its spread,
    # a run of another policy would widen the tolerance toward that policy
    foreign = [(e["run_id"], regress.foreign_overrides(e["overrides"])) for e in stored]
    foreign = [(run_id, sets) for run_id, sets in foreign if sets]
    if foreign:
        named = "; ".join(f"{run_id} ({' '.join(sets)})" for run_id, sets in foreign[:3])
        console.print(f"{len(foreign)} run(s) left out, made with --set that changes what {name} emulates or how "
                      f"it is judged: {escape(named)}{'; ...' if len(foreign) > 3 else ''}")
        left_out = {run_id for run_id, _ in foreign}
        stored = [e for e in stored if e["run_id"] not in left_out]
    if args.record:
        try:
            path, added = regress.record_spread(name, stored)
        except ValueError as e:
            raise SetupError(f"{name}'s spread ledger takes runs of clean commits only: {e}") from None
        console.print(f"{added} run(s) added to {path} ({len(stored) - added} already there)")
    ledger = regress.read_ledger(name)
    seen = {e["run_id"] for e in ledger}
    entries = ledger + [e for e in stored if e["run_id"] not in seen]
    stats = regress.spread(entries, lambda path: limits.resolution(path, sc))
    n = max((st["runs"] for st in stats.values() if st["class"] == "performance"), default=0)
    console.print(f"{args.name}: {len(entries)} runs ({len(ledger)} from its spread ledger), {n} faithful and ok")
    if n < regress.MIN_SPREAD_RUNS:
        if args.record:
            # what was asked is done: the runs are kept until enough have gathered
            console.print(f"{n} of the {regress.MIN_SPREAD_RUNS} faithful runs a spread needs: no tables yet")
            return 0
        raise SetupError(f"{n} faithful runs of {args.name}: a spread needs {regress.MIN_SPREAD_RUNS} or more")
    commits = sorted({e.get("git_commit") or "?" for e in entries})
    print(regress.tolerance_toml(stats, commits))
    return 0


def _summaries_in(target: str) -> list[dict]:
    """The runs a compare argument names: a run folder, or every run folder under a folder."""
    from testbed.analysis import summary as analysis
    root = Path(target)
    dirs = [root] if RunFolder(root).manifest.is_file() else sorted(p.parent for p in root.glob("**/manifest.json"))
    if not dirs:
        raise InputError(target, None, "neither a run folder (no manifest.json) nor a folder holding runs")
    out = []
    for d in dirs:
        f = d / "summary.json"
        out.append(json.loads(f.read_text()) if f.is_file() else analysis.analyze(d))
    return out


def _measured_spreads(name: str) -> dict[str, float]:
    """The scenario's [[tolerance]] tables (its measured run-to-run spread), if it is one of ours."""
    from testbed.scenario import load_scenario
    try:
        return {t.metric: t.abs for t in load_scenario(name).tolerance}
    except InputError:
        return {}


def cmd_compare(args) -> int:
    """Two runs or two groups of runs side by side, or a scenario under two --set variants run -n
    times each (interleaved, A then B, so that the machine's drift falls on both): which metrics
    differ beyond the run-to-run spread (testbed.regress.compare)."""
    from testbed.analysis.document import to_console, to_html
    from testbed.regress import compare
    from testbed.scenario import load_scenario
    if len(args.targets) == 2:
        if args.a or args.b or args.set or args.runs is not None:
            raise InputError("compare", None, "two run folders are compared as they are: --a, --b, --set and -n "
                             "belong to a scenario run here (compare NAME --a KEY=VALUE --b KEY=VALUE)")
        groups = [_summaries_in(t) for t in args.targets]
        labels = list(args.targets)
    elif len(args.targets) == 1:
        if not args.a and not args.b:
            raise InputError("compare", None, "one scenario needs its two variants: --a KEY=VALUE and/or "
                             "--b KEY=VALUE (each a --set; a side without one runs the file as it is)")
        n = 5 if args.runs is None else args.runs
        if n < 1:
            raise InputError("compare", "-n", f"expected at least 1 run a side, got {n}")
        name = args.targets[0]
        sets = {"A": args.set + args.a, "B": args.set + args.b}
        for side in sets:  # bad input before anything runs
            load_scenario(name, sets[side])
        if os.geteuid() != 0:
            raise SetupError(NEEDS_ROOT)
        groups, labels = [[], []], [" ".join(args.a) or "as the file is", " ".join(args.b) or "as the file is"]
        for i in range(n):
            for k, side in enumerate(("A", "B")):
                console.print(f"[dim]compare: {side} run {i + 1} of {n} ({escape(labels[k])})[/]")
                run_dir, summary = _run_faithfully(name, sets[side])
                groups[k].append(summary)
    else:
        raise InputError("compare", None, "expected two run folders (or folders of runs), or one scenario")
    spreads = _measured_spreads(groups[0][0]["scenario"]) if groups[0] else {}
    rows = compare.compare_groups(groups[0], groups[1], spreads)
    sides = [{"label": lab, "runs": len(g), "faithful": sum(s["fidelity"]["verdict"] == "kept_up" for s in g),
              "run_ids": [s["run_id"] for s in g]} for lab, g in zip(labels, groups)]
    doc = compare.document(rows, sides[0], sides[1])
    if args.json:
        print(json.dumps({"compare_version": compare.COMPARE_VERSION, "a": sides[0], "b": sides[1],
                          "rows": [r.to_dict() for r in rows]}))
    else:
        to_console(doc, console)
    if args.html:
        Path(args.html).write_text(to_html(doc, Path(".")))
        if not args.json:
            console.print(f"written: {args.html}")
    return 0


def cmd_check(args) -> int:
    """What a run would build and do, and whether this machine can run it: no root, starts nothing."""
    from testbed.check import describe, machine
    from testbed.scenario import load_scenario
    sc = load_scenario(args.name, args.set)
    d = describe(sc) | {"machine": machine(sc)}
    if args.json:
        print(json.dumps(d))
        return 0
    f, tr, b, q, m = d["fabric"], d["traffic"], d["bound"], d["qos"], d["machine"]
    t = Table(title=f"{sc.name}: {escape(sc.description)}")
    t.add_column("")
    t.add_column("a run would", overflow="fold")
    rates = ", ".join(f"{n} at {r} Mb/s" for r, n in f["links_by_rate_mbps"].items())
    t.add_row("fabric", f"{f['kind']} {'x'.join(map(str, f['dims']))}: {f['switches']} switches, {f['hosts']} hosts, "
                        f"{f['links']} links ({rates}); {f['frame_bytes']}-byte frames, MTU {f['mtu_bytes']}")
    t.add_row("routing", f"{f['routing']}" + (", dateline virtual channels" if f["dateline"] else ""))
    tags = ", ".join(f"{n} {tag}" for tag, n in tr["transfers_by_tag"].items())
    t.add_row("traffic", f"{tr['workload']} over {tr['ranks']} ranks, {tr['iterations']} iteration(s): "
                         f"{tr['transfers']} transfers ({tags}), {tr['bytes'] / 2**20:.2f} MiB in all, "
                         f"{tr['compute_steps']} compute steps ({tr['compute_s']:.3f} s)")
    t.add_row("bound per iteration", f"{b['per_iteration_s']:.4g} s of hardware time: {escape(b['formula'])}")
    dl = d["dilation"]
    t.add_row("dilation", (f"D = {dl['factor']:g}" + (f" (auto, from {dl['calibration']})" if dl["calibration"] else
                                                       " (version 1 file)" if dl["version"] == 1 else " (set)")
                           + f": links emulated at {dl['emulated_link_mbps']:.3g} Mb/s")
              if dl["factor"] else "auto: this machine has no calibration of this fabric for this code yet; the "
                                   "first run measures it (testbed calibrate)")
    qtxt = f"{q['scheduling']} over {', '.join(q['classes'])}; ECN {'on' if q['ecn'] else 'off'}; PFC "
    if q["pfc"]:
        allowed = (f", the switch agent's {q['reaction_allowance_ms']:.3g} ms at this D"
                   if q.get("reaction_allowance_ms") else "")
        qtxt += (f"{q['pfc_rule']} rule on {q['lossless_queues']} lossless queues, XOFF "
                 f"{q['xoff_bytes'][0]}-{q['xoff_bytes'][1]} B, XON {q['xon_bytes'][0]}-{q['xon_bytes'][1]} B, "
                 f"headroom for {q['headroom_covers_us_hardware']:.3g} us of hardware time{allowed}"
                 if q["xoff_bytes"] else f"{q['pfc_rule']} rule, no lossless queue")
    else:
        qtxt += "off"
    t.add_row("port QoS", qtxt)
    for c in q["profiles"]:
        words = [f"DSCP {','.join(map(str, c['dscp'])) or '-'}{' and every other' if c['default'] else ''}",
                 f"weight {c['weight']}", f"buffer {c['buffer_bytes'] or 'fabric.queue_limit_bytes'}"]
        if c["ecn"] and q["ecn"]:
            words.append(f"ECN Kmin {c['ecn']['ecn_kmin_bytes']} B, Kmax {c['ecn']['ecn_kmax_bytes']} B, "
                         f"Pmax {c['ecn']['ecn_pmax']:g}")
        if c["pfc"] and q["pfc"]:
            words.append("PFC " + ", ".join(f"{k.removesuffix('_bytes').upper()} {v or 'derived'}"
                                            for k, v in c["pfc"].items()))
        t.add_row(f"  class {escape(c['name'])}", "; ".join(words))
    if q.get("ecn_tuning"):
        tu = q["ecn_tuning"]
        t.add_row("ECN tuning", f"adaptive: each marking class's profile moved toward queue p99 <= "
                                f"{tu['queue_p99_bytes']} B at utilisation >= {tu['utilisation']:g}, within Kmin "
                                f"{tu['kmin_bytes'][0]}-{tu['kmin_bytes'][1]} B, Kmax {tu['kmax_bytes'][0]}-"
                                f"{tu['kmax_bytes'][1]} B, Pmax {tu['pmax'][0]:g}-{tu['pmax'][1]:g}; judged every "
                                f"{tu['window_us']:g} us of hardware time, a move after "
                                f"{tu['hysteresis_windows']} windows asking for it")
    a = d["asserts"]
    for f in a["faults"]:
        what = f["link"] or f["switch"]
        rate = f" at a frame error rate of {f['frame_error_rate']:g}" if f["action"] == "corrupt" else ""
        t.add_row("fault", f"{f['action']}{' ' + what if what else ''}{rate} at {f['at_s'] * 1e6:.4g} us of "
                           f"hardware time")
    for c in a["policy_changes"]:
        t.add_row("policy change", f"class {c['class_name']}: {c['field']} = {c['value']} at "
                                   f"{c['at_s'] * 1e6:.4g} us of hardware time")
    for e in a["expectations"]:
        t.add_row("expects", escape(f"{e['metric']} {e['op']} {e.get('than') or e.get('value')}"))
    b = a["baseline"]
    if sc.controller.apps:
        t.add_row("controller apps", escape(", ".join(sc.controller.apps)) + (
            " (the routing app among them)" if sc.controller.app == "none" else ""))
    t.add_row("regression", ("left out of the suite: " + escape(a["regress_skip"])) if a["regress_skip"]
              else ("outside scenarios/, so not in the suite: `testbed regress FILE` judges it, " if not
                    a["in_regression_suite"] else "in the suite, ") + (f"against baseline {b['run_id']} (commit {(b['git_commit'] or '?')[:8]}, "
                                       f"D = {b['dilation_factor']:g}): {b['metrics']} metrics, "
                                       f"{b['measured_tolerances']} with measured tolerances" if b
                                       else "against its expectations only (no baseline recorded)"))
    t.add_row("on this machine", f"{m['datapath']}, receive steering: {m['receive_steering']}, {m['cpus']} CPUs")
    console.print(t)
    if m["can_run_here"]:
        console.print("[green]valid[/]: a run here would start (make scenario NAME=...)")
    else:
        console.print("[green]valid[/], but a run here would not start: " + escape("; ".join(m["blockers"])))
    return 0


def cmd_list(_args) -> int:
    from testbed.scenario import list_scenarios, load_scenario
    for name in list_scenarios():
        console.print(f"{name}: {load_scenario(name).description}")
    return 0


def cmd_reference(args) -> int:
    from testbed.reference import main as reference
    return reference(["--write"] if args.write else [])


def cmd_status(args) -> int:
    from testbed.northbound.status import watch
    return watch(args.port, args.top, args.once, console)


def cmd_clean(_args) -> int:
    from testbed.run.state import RunLock, clean_stale
    with RunLock("clean", "testbed clean"):
        removed = clean_stale(log=console.print)
    console.print(f"removed {len(removed)} objects left by dead runs" if removed else "nothing to clean")
    return 0


def main(argv=None) -> int:
    # First thing: Ctrl-C and SIGTERM unwind whatever has started (a shell that starts us in the
    # background would otherwise have us ignore SIGINT).
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    ap = argparse.ArgumentParser(
        prog="testbed", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Packet-level emulation of AI-training fabrics: run a scenario, judge it, regress a suite.",
        epilog="NAME is a scenario in scenarios/ or a path to a .toml file. --set KEY=VALUE changes one field: "
               "section.field, classes.<name>.<field>, jobs.<name>[.workload].<field>, faults.<n>.<field>, "
               "policy_changes.<n>.<field>.\n\nexit codes:\n" + "\n".join(f"  {c:>3}  {w}" for c, w in EXIT_CODES.items()))
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run", help="run a scenario (a name in scenarios/, or a path to a .toml file)")
    p.add_argument("name")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("calibrate", help="measure the emulated rate this machine carries a scenario's fabric at "
                                         "faithfully (what run.dilation = \"auto\" divides by); cached")
    p.add_argument("name")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(func=cmd_calibrate)
    p = sub.add_parser("analyze", help="(re)analyse a run folder, or a scenario's latest run")
    p.add_argument("run", metavar="RUN_DIR|NAME")
    p.set_defaults(func=cmd_analyze)
    p = sub.add_parser("baseline", help="store a scenario's run (a new one, or --run) as its baseline")
    p.add_argument("name")
    p.add_argument("--run", metavar="RUN_DIR|NAME")
    p.set_defaults(func=cmd_baseline)
    p = sub.add_parser("regress", help="run regression scenarios against expectations and baselines")
    p.add_argument("names", nargs="*")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--sabotage", nargs="?", const="", default=None, metavar="NAME[,NAME]",
                   help="run the sabotages (all, or these) instead: each breaks one policy, and must be caught")
    p.set_defaults(func=cmd_regress)
    p = sub.add_parser("spread", help="a scenario's run-to-run spread over stored runs, as [[tolerance]] tables")
    p.add_argument("name")
    p.add_argument("runs", nargs="*", metavar="RESULTS_DIR", help="folders holding its runs (default: results/NAME)")
    p.add_argument("--record", action="store_true",
                   help="add those runs (of clean commits) to its spread ledger, baselines/spread/NAME.jsonl, which "
                        "keeps what each run gives the spread after its folder is gone")
    p.set_defaults(func=cmd_spread)
    p = sub.add_parser("compare", help="policy A or B? two runs, two folders of runs, or one scenario under two "
                                       "--set variants run -n times each: key metrics side by side, and which "
                                       "differ beyond the run-to-run spread")
    p.add_argument("targets", nargs="+", metavar="RUN_DIR|RESULTS_DIR|NAME")
    p.add_argument("--a", action="append", default=[], metavar="KEY=VALUE", help="variant A's --set")
    p.add_argument("--b", action="append", default=[], metavar="KEY=VALUE", help="variant B's --set")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="both variants' --set")
    p.add_argument("-n", "--runs", type=int, default=None, help="runs of each variant (default 5)")
    p.add_argument("--html", metavar="FILE", help="also write the comparison as an HTML page")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    p.set_defaults(func=cmd_compare)
    p = sub.add_parser("check", help="validate a scenario and show what a run would build and do (no root)")
    p.add_argument("name")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    p.set_defaults(func=cmd_check)
    sub.add_parser("list", help="list scenarios").set_defaults(func=cmd_list)
    p = sub.add_parser("reference", help="the scenario reference (docs/scenario-reference.md) from the field "
                                         "declarations")
    p.add_argument("--write", action="store_true", help="write the file instead of printing it")
    p.set_defaults(func=cmd_reference)
    p = sub.add_parser("status", help="a live table of the running emulation's busiest ports, from its "
                                      "northbound API (docs/api.md)")
    p.add_argument("--port", type=int, default=8650, help="the run's run.api_port (default 8650)")
    p.add_argument("--top", type=int, default=20, help="ports shown, worst first")
    p.add_argument("--once", action="store_true", help="print one table and exit")
    p.set_defaults(func=cmd_status)
    sub.add_parser("clean", help="remove what killed runs left behind").set_defaults(func=cmd_clean)
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except InputError as e:
        # escaped: a message quotes the file's own text, where brackets ([[classes]]) are not markup
        console.print(f"[bold red]error[/]: {escape(str(e))}", highlight=False)
        return InputError.exit_code
    except SetupError as e:
        console.print(f"[bold red]cannot start[/]: {escape(str(e))} (exit {SetupError.exit_code})", highlight=False)
        return SetupError.exit_code
    except (RunFailed, Busy) as e:
        console.print(f"[bold red]failed[/]: {escape(str(e))}", highlight=False)
        return e.exit_code
    except Terminated:  # before KeyboardInterrupt, its base class
        console.print("terminated; everything the run created was removed")
        return Terminated.exit_code
    except KeyboardInterrupt:
        console.print("interrupted; everything the run created was removed")
        return 130


if __name__ == "__main__":
    sys.exit(main())
