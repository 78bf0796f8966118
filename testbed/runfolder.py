"""One run's folder: every file in it by name, and the signals its processes give each other there.

The runner, the switch agent, the engine and the analysis are separate processes, and the folder is
what they share. Every file they write or read is named here once, as an attribute of RunFolder
(``folder.agent_stats`` is raw/agent.json), so that no module spells a file name of its own and the
folder's layout reads in one place:

    <run>/manifest.json, summary.json, report.md, report.html, <table>.parquet/.csv, plots/, pcap/
    <run>/raw/   what the processes wrote during the run (the analysis's only input)

The readiness signals (``announce``/``announced``) and the engine's heartbeat are files in raw/ too:
a process that is ready writes its PID there, and the heartbeat's beat count going up says the engine
is alive (testbed.records.HeartbeatWatch).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from testbed.records import EngineProgress, read_engine_progress


def read_jsonl(path: Path) -> list[dict]:
    """A JSON-lines file of the folder (events, faults), [] if the run wrote none."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class _File:
    """A file of the folder: under raw/ (written during the run) or at its top (the analysis's)."""

    def __init__(self, name: str, what: str, raw: bool = True):
        self.name, self.what, self.raw = name, what, raw

    def __set_name__(self, owner, attr: str) -> None:
        owner.FILES = {**getattr(owner, "FILES", {}), attr: self}

    def __get__(self, folder: "RunFolder | None", owner=None):
        if folder is None:
            return self
        return (folder.raw if self.raw else folder.root) / self.name


def _result(name: str, what: str) -> _File:
    return _File(name, what, raw=False)


class RunFolder:
    # -- written by the runner, before and after the traffic
    scenario = _File("scenario.json", "the resolved scenario (every default filled in)")
    fabric = _File("fabric.json", "the fabric: switches, hosts, links with their rates and ports")
    schedule = _File("schedule.json", "every message of the plan, with its step, chunk and tag")
    engine_plan = _File("plan.json", "the engine's plan: hosts, queue pairs, messages, transport")
    agent_plan = _File("agent_plan.json", "the switch agent's plan: queues, pausable leaves, rates")
    controller_events = _File("controller_events.jsonl", "the controller's events: routes, reroutes, policy")
    controller_log = _File("controller.log", "the controller's output")
    controller_lost = _File("controller_lost.json", "written if the controller died during the traffic")
    agent_log = _File("agent.log", "the switch agent's output")
    engine_log = _File("engine.log", "the engine's output")
    faults = _File("faults.jsonl", "every fault injected, with its time")
    links_start = _File("links_start.json", "every link end's kernel counters before the traffic")
    links_end = _File("links_end.json", "the same after it")
    queues_end = _File("queues_end.json", "every port qdisc's counters after the traffic")
    flows_end = _File("flows_end.json", "every switch's flow entries with their packet counters")
    groups_end = _File("groups_end.json", "every switch's group buckets with their counters")
    ovs_socket_drops_end = _File("ovs_socket_drops_end.json", "frames Open vSwitch's sockets dropped")
    corrupted_end = _File("corrupted_end.json", "the frames each switch port's bit errors hit (corrupt faults)")
    # -- written by the engine (the binary records: testbed.records)
    tx = _File("tx.bin", "one record per frame sent")
    rx = _File("rx.bin", "one record per frame received")
    qp_events = _File("qp_events.bin", "every NAK, go-back, timeout, CNP and rate change")
    nic_gaps = _File("nic_gaps.bin", "the NIC's late hand-offs to the kernel")
    isolation = _File("isolation.json", "the tenant-isolation probes: sent and delivered per host pair")
    heartbeat = _File("engine_heartbeat", "the engine's progress, rewritten in place; its beat count going up says it is alive")
    engine_stats = _File("engine.json", "the engine's own account: timings, CPU, what it sent")
    message_times = _File("messages.json", "every message's release, first send and completion")
    # -- written by the switch agent
    agent_stats = _File("agent.json", "the agent's account: queues at the end, PFC, telemetry rates")
    telemetry = _File("telemetry.bin", "queue samples (testbed.records.TELEMETRY)")
    pfc_events = _File("pfc_events.jsonl", "every pause and resume, with its cause and reaction")
    deadlock = _File("deadlock.json", "written when the agent finds a PFC deadlock")
    behind = _File("behind.json", "written when a calibration rung's agent finds Open vSwitch behind in more "
                                  "samples than any verdict allows")
    # -- written by the runner and the analysis at the top of the folder
    manifest = _result("manifest.json", "what ran: versions, mechanisms, timings, the error if any")
    summary = _result("summary.json", "the results (testbed.analysis.summary)")
    report_md = _result("report.md", "the report")
    report_html = _result("report.html", "the report, with its plots")
    flows_csv = _result("flows.csv", "the per-queue-pair table as CSV")
    plots = _result("plots", "the report's plots")
    pcap = _result("pcap", "per-host captures, when the run captured")

    SIGNALS = ("agent", "engine")

    def __init__(self, root: Path | str, raw: Path | str | None = None):
        self.root = Path(root)
        self.raw = Path(raw) if raw is not None else self.root / "raw"

    @classmethod
    def of_raw(cls, raw: Path | str) -> "RunFolder":
        """The folder whose raw files are in raw (a test's own folder of hand-made records, say)."""
        return cls(Path(raw).parent, raw)

    def table(self, name: str) -> Path:
        """An analysis table: <name>.parquet at the top of the folder."""
        return self.root / f"{name}.parquet"

    def plot(self, name: str) -> Path:
        return self.plots / f"{name}.png"

    # -- readiness and liveness

    def _signal(self, who: str) -> Path:
        if who not in self.SIGNALS:
            raise ValueError(f"no readiness signal {who!r} (known: {', '.join(self.SIGNALS)})")
        return self.raw / f"{who}_ready"

    def announce(self, who: str) -> None:
        """This process is ready: its PID under raw/, written in one go (a reader sees all or none)."""
        tmp = self.raw / f".{who}_ready.tmp"
        tmp.write_text(str(os.getpid()))
        tmp.rename(self._signal(who))

    def announced(self, who: str) -> bool:
        return self._signal(who).exists()

    def announced_pid(self, who: str) -> int:
        return int(self._signal(who).read_text())

    def progress(self) -> EngineProgress | None:
        return read_engine_progress(self.heartbeat)
