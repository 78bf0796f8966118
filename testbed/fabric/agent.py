"""The switch agent: the fast loop of every switch's QoS, in one process.

    python -m testbed.fabric.agent PLAN.json      (map fds inherited from the runner)

It reads the port queues straight from the BPF maps (mmapped: no syscall per sample), so it
can afford to look often:
- PFC: under the ingress rule (802.1Qbb), what a switch holds per (ingress port, class), counted
  by the port program from the frame's arrival to its departure, at or above XOFF pauses that
  port's peer in that class; below XON it resumes it. Under the egress rule an egress queue at or
  above XOFF pauses every upstream the routes feed into it (pause map). A pause is a
  precomputed netlink message that sets the upstream TBF leaf's rate to ~0 (a few us each).
  Every pause is logged with the time its row first crossed XOFF since it was last below XON
  (stamped in the data path; the agent re-arms the stamp), so reaction time is measured, not
  estimated, and a row that outgrew its headroom behind a late pause is reported as the
  emulator's failing (testbed.analysis.qos.headroom_overruns).
- PFC watchdog (optional): an upstream paused longer than the limit is resumed and the queue
  that paused it stops asking (its packets are dropped at its buffer instead) until it drains.
- Deadlock detection: a cycle of paused, non-empty queues that made no progress for
  deadlock_detect_ms is a PFC deadlock; it is logged and reported, and the runner ends the run.
- Telemetry: every 1/telemetry_hz the counters of every queue that changed are appended to
  raw/telemetry.bin (testbed.records.TELEMETRY layout).
Policy (profiles, DSCP map, thresholds) comes from the controller through the plan and the
control file; the agent applies it and logs what it applied.
"""
from __future__ import annotations

import gc
import json
import os
import resource
import signal
import socket
import sys
import time
from pathlib import Path

import numpy as np

from testbed.fabric.agent_io import InputBacklog, Netlink, PortSockets, htb_class_message, pfc_frame, tbf_message
from testbed.fabric.agent_link import (Applied, ControllerLink, DeadlockFound, PolicyMessage, PolicyUpdate,
                                       TelemetrySummary, TrafficStarted, WatchdogFired)
from testbed.fabric.agent_plan import AgentPlan
from testbed.fabric.agent_report import agent_account
from testbed.fabric.bpfmaps import FIRST_MINOR_KEY, NON_IP_KEY, MappedArrays
from testbed.fabric.pfc import Pause, PfcState, Resume, waiting_queues
from testbed.fabric.qos import find_cycle, quantum_bytes, queue_weight
from testbed.fabric.reconcile import IngressLeaks, StaleDepths, held_bytes
from testbed.fabric.telemetry import TelemetryWriter
from testbed.run.procs import take_priority
from testbed.runfolder import RunFolder

DEADLOCK_CHECK_NS = 10_000_000
FLUSH_NS = 20_000_000
# 50 Hz: at 200 Hz reading and parsing the 80 sockets cost 0.05 core (measured).
INPUT_SAMPLE_NS = 20_000_000
REPORT_NS = 100_000_000  # telemetry summaries to the controller
MIN_SLEEP_S = 50e-6
SO_TIMESTAMPNS = 35   # asm-generic/socket.h (Python's socket module leaves it out)
# A resumed leaf keeps its one-frame HTB bucket until the agent's next look (at least this many
# frame times at its rate): the XON frame runs the port's qdisc, and the first frame it dequeues
# spends the credit the pause saved up (HTB caps the credit at the bucket when it charges a frame).
# Keeping the small bucket longer only adds the slow windows a late kernel timer then cannot
# catch up (measured on incast-pfc, bench/README.md).
RESTORE_FRAMES = 0


class Agent:
    def __init__(self, plan: AgentPlan, maps: MappedArrays):
        self.plan, self.maps = plan, maps
        self.folder = RunFolder(plan.out_dir)
        self.nl = Netlink()
        self.queues = plan.queues                         # switch queues
        # per queue (plan row): the policy in force, as agent.json reports it (profile, ingress)
        self.queue_policy: list[dict] = [{} for _ in self.queues]
        self.qidx = np.array([q.index for q in self.queues], dtype=np.int64)
        # Everything below works on the contiguous prefix of the BPF arrays that holds every
        # queue (a view: no copy per look); rows of unused classes stay zero.
        self.n = int(self.qidx.max()) + 1 if len(self.qidx) else 0
        self.plan_row = np.full(self.n, -1, dtype=np.int64)
        self.plan_row[self.qidx] = np.arange(len(self.qidx))
        self.leaves = plan.leaves                      # every (port, class) leaf, pausable or not
        # per pausable leaf: pause, resume, its HTB bucket cut to a frame for the resume, and given back
        self.leaf_msgs = [[tbf_message(l, l.paused), tbf_message(l, l.running),
                           htb_class_message(l, l.htb_resume), htb_class_message(l, l.htb_running)]
                          if l.pausable else None for l in self.leaves]
        # per leaf: its HTB class's DRR quantum now (the classes' weights, from the policy)
        self.leaf_quantum = [l.htb_running["quantum"] for l in self.leaves]
        self.class_scheduling = "strict"
        # leaf -> when its own HTB bucket goes back: after RESTORE_FRAMES frame times at its rate
        self.restore_at: dict[int, int] = {}
        self.frame_ns = [plan.frame_bytes * 8e9 / l.bw_bps if l.pausable else 0 for l in self.leaves]
        self.xon_frames = [pfc_frame(c, 0) for c in range(8)]
        self.port_socks = PortSockets()
        self.leaf_queue = {i: l.queue for i, l in enumerate(self.leaves) if l.queue >= 0}
        self.queue_leaf = {ix: i for i, ix in self.leaf_queue.items()}
        # each (ingress port, class) row's link rate, for port_dequeue's measure of how far the
        # link ran ahead of it (a link's two ends run at the same rate)
        tai_minus_real = max(0, time.clock_gettime_ns(time.CLOCK_TAI) - time.time_ns())
        for ix, leaf in self.queue_leaf.items():
            if self.leaves[leaf].bw_bps > 0:
                maps.ingress["byte_ps"][ix] = round(8e12 / self.leaves[leaf].bw_bps)
                maps.ingress["tai_minus_real_ns"][ix] = tai_minus_real
        # a socket that asks for receive timestamps makes the kernel stamp every frame as it enters
        # a CPU's backlog (a global switch), which port_dequeue reads for the time a link held it
        self.stamps = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.stamps.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        # The controller's policy names a queue by its QueueId's key; the data path, by its row.
        self.key_index = {q.id.key: q.index for q in self.queues}
        self.key_leaf = {l.id.key: i for i, l in enumerate(self.leaves)}
        # Policy state, from the controller: the PFC rule; queue index (an egress queue, or under
        # the ingress rule the (ingress port, class) of the same index) -> leaf ids to pause;
        # thresholds.
        self.rule = "egress"
        self.pfc = PfcState(self.n)
        self.max_depth = np.zeros(self.n, dtype=np.uint64)
        self.max_held = np.zeros(self.n, dtype=np.int64)   # ingress rule: most a row held
        self.max_reaction = np.zeros(self.n, dtype=np.int64)  # slowest pause a row asked for
        # a row's XOFF crossing the agent never answered: it fell below XON before any look saw it
        # above XOFF, so no pause (and no reaction) was recorded; the longest from such a crossing
        # to the look that cleared its stamp (the agent kept off its CPU misses crossings whole)
        self.answered = np.zeros(self.n, dtype=bool)
        self.max_unanswered = np.zeros(self.n, dtype=np.int64)
        self.reaction_allowance_ns = 0                     # what the headroom assumes (policy)
        # a switch's egress queue rows (the deadlock check follows an ingress row to them)
        self.switch_rows: dict[str, list[int]] = {}
        for q in self.queues:
            self.switch_rows.setdefault(q.node, []).append(q.index)
        self.paused_since: dict[int, int] = {}
        self.events = open(self.folder.pfc_events, "w", buffering=1 << 16)
        self.telemetry = TelemetryWriter(self.folder.telemetry, self.plan_row)
        self.stale = StaleDepths(self.n, self.plan_row, self.queue_leaf, self.leaves, self._log, self.nl.qdisc_qlens)
        self.leaks = IngressLeaks(self.plan_row, self.queues, self.switch_rows, self._log)
        self.reaction_ns: list[int] = []
        self.pauses = self.resumes = self.watchdog_fired = 0
        # per leaf: pauses so far and the time they held it (ended pauses), for the live counters
        self.leaf_pauses: dict[int, list[int]] = {}
        self.deadlock: dict | None = None
        self.behind: dict | None = None   # a calibration rung's settled verdict (give_up_after_s)
        self.stop_requested = False
        self.scheduling = "default"
        self.controller: ControllerLink | None = None
        # what the ECN tuning reads (plan.ecn_reports): each queue's ECT arrivals by depth bucket and
        # marks, and its port's bytes sent, since the last report
        # (only with the tuning on: no other run pays for it at start or in the loop)
        if plan.ecn_reports:
            self._port_of_row = np.unique([q.ifname for q in self.queues], return_inverse=True)[1] \
                if len(self.queues) else np.zeros(0, dtype=np.int64)
            self._last_ecn = self._ecn_counters()

    # -- policy ------------------------------------------------------------------------------

    def open_sockets(self) -> None:
        """Every netlink and packet socket a pause or resume may need, opened now: entering a
        namespace on the first pause cost that pause milliseconds (measured)."""
        for leaf_ids in self.pfc.feeders.values():
            for leaf in leaf_ids:
                l = self.leaves[leaf]
                self.nl.sock(l.ns_pid)
                self.port_socks.open(l.ns_pid, l.ifname)

    def apply_policy(self, msg: PolicyMessage | PolicyUpdate) -> None:
        """A policy (everything) or an update (the queues that changed, and the pause map and the
        ingress thresholds if they changed) from the controller, written into the BPF maps."""
        m = self.maps
        if isinstance(msg, PolicyMessage):
            pol = msg.policy
            m.dscp_class[:NON_IP_KEY + 1] = pol.dscp_class
            m.dscp_class[FIRST_MINOR_KEY] = self.plan.first_minor
            self.rule = pol.pfc_accounting
            self.reaction_allowance_ns = int(pol.reaction_allowance_us * 1e3)
            self.class_scheduling = pol.scheduling
            queues, pause_map, ingress = pol.queues, pol.pause_map, pol.ingress
            weights, port_weights = pol.weights, pol.port_weights
        else:
            queues, pause_map, ingress = msg.queues, msg.pause_map, msg.ingress
            weights, port_weights = msg.weights, msg.port_weights
        if pause_map is not None:
            self.pfc.feeders = {self.key_index[k]: [self.key_leaf[u] for u in ups] for k, ups in pause_map.items()}
        xoff, xon = self.pfc.xoff.copy(), self.pfc.xon.copy()
        for key, prof in queues.items():
            ix = self.key_index[key]
            m.profiles[ix] = prof.bpf_row()
            self.queue_policy[self.plan_row[ix]]["profile"] = prof.to_json()
            if self.rule == "egress":
                xoff[ix], xon[ix] = prof.xoff_bytes if prof.pfc_on else 0, prof.xon_bytes
        if self.rule == "ingress" and ingress is not None:
            # every lossless (ingress port, class) is in a policy; an update names them all again
            xoff[:] = 0
            xon[:] = 0
            m.ingress["xoff_bytes"][:self.n] = 0
            for key, th in ingress.items():
                ix = self.key_index[key]
                xoff[ix], xon[ix] = th.xoff_bytes, th.xon_bytes
                m.ingress["xoff_bytes"][ix] = th.xoff_bytes
                self.queue_policy[self.plan_row[ix]]["ingress"] = th.to_json()
        # a row no longer lossless stops holding its upstreams back
        self.carry_out(self.pfc.set_thresholds(xoff, xon))
        reweighted = self.reweight(weights, port_weights or {}) if weights is not None else 0
        applied = Applied(kind=msg.TYPE, queues=len(queues), ecn_queues=int(sum(q.ecn_on for q in queues.values())),
                          pfc_accounting=self.rule, pfc_queues=int(self.pfc.lossless.sum()), reweighted=reweighted)
        self._log({"event": "policy_applied", **applied.body()})
        self.controller.send(applied)

    def reweight(self, weights: tuple[int, ...], port_weights: dict[str, int]) -> int:
        """Every leaf's HTB quantum from the classes' weights (a switch port's own over its class's):
        a leaf whose quantum changed gets it now, in the bucket it is in (a just-resumed leaf keeps
        its one-frame bucket until restore_buckets gives its own back, which then carries the new
        quantum too). How many leaves changed. A class-wide change is one netlink request per port
        of the fabric, hosts' too, while no queue is watched: a weight is a rare, planned change."""
        changed = 0
        for i, l in enumerate(self.leaves):
            weight = queue_weight(l.id.key, l.cls, weights, port_weights)
            if l.queue >= 0:
                self.queue_policy[self.plan_row[l.queue]]["weight"] = weight
            quantum = quantum_bytes(self.class_scheduling, weight, self.plan.frame_bytes)
            if quantum == self.leaf_quantum[i]:
                continue
            self.leaf_quantum[i] = quantum
            resume = htb_class_message(l, {**l.htb_resume, "quantum": quantum})
            running = htb_class_message(l, {**l.htb_running, "quantum": quantum})
            if self.leaf_msgs[i] is not None:
                self.leaf_msgs[i][2:] = [resume, running]
            self.nl.request(l.ns_pid, resume if i in self.restore_at else running)
            changed += 1
        return changed

    # -- PFC ---------------------------------------------------------------------------------

    def _log(self, rec: dict) -> None:
        rec.setdefault("t_ns", time.monotonic_ns())
        self.events.write(json.dumps(rec) + "\n")

    def carry_out(self, decisions: list) -> None:
        """Do what the PFC state decided, in order."""
        for d in decisions:
            if isinstance(d, Pause):
                self._pause(d.leaf, d.row, d.cross_ns)
            elif isinstance(d, Resume):
                self._resume(d.leaf, d.row, d.reason)
            else:
                q = self.queues[self.plan_row[d.row]]
                self._log({"event": "watchdog_restored", "queue": q.ifname, "class": q.cls})

    def _pause(self, leaf: int, row: int, cross_ns: int) -> None:
        """row: the queue index of the row asking for the pause."""
        l = self.leaves[leaf]
        self.nl.request(l.ns_pid, self.leaf_msgs[leaf][0])
        t = time.monotonic_ns()
        self.paused_since[leaf] = t
        self.pauses += 1
        self.leaf_pauses.setdefault(leaf, [0, 0])[0] += 1
        reaction = t - cross_ns if cross_ns else None
        if reaction is not None:
            self.reaction_ns.append(reaction)
            self.max_reaction[row] = max(self.max_reaction[row], reaction)
        q = self.queues[self.plan_row[row]]
        self._log({"t_ns": t, "event": "pause", "node": l.node, "port": l.ifname, "class": l.cls,
                   "cause": q.ifname, "cause_class": q.cls, "accounting": self.rule, "xoff_cross_ns": cross_ns,
                   "reaction_ns": reaction})

    def _resume(self, leaf: int, row: int, reason: str) -> None:
        l = self.leaves[leaf]
        # HTB saved up its whole bucket while the class was paused (idle, to HTB): a one-frame
        # bucket first, so the first frame that leaves spends the credit, not a burst of it
        self.nl.request(l.ns_pid, self.leaf_msgs[leaf][2])
        self.nl.request(l.ns_pid, self.leaf_msgs[leaf][1])
        self.restore_at[leaf] = time.monotonic_ns() + int(RESTORE_FRAMES * self.frame_ns[leaf])
        # The TBF's new rate only counts once its qdisc runs again; the XON frame makes it run.
        self.port_socks.send(l.ns_pid, l.ifname, self.xon_frames[l.cls])
        t = time.monotonic_ns()
        since = self.paused_since.pop(leaf)
        self.resumes += 1
        self.leaf_pauses[leaf][1] += t - since
        self._log({"t_ns": t, "event": "resume", "node": l.node, "port": l.ifname, "class": l.cls,
                   "cause": self.queues[self.plan_row[row]].ifname, "paused_ns": t - since, "reason": reason})

    def restore_buckets(self, now: int) -> None:
        """Give resumed leaves their own HTB bucket back, once their first frames have left (it
        keeps the shaper at its rate through the kernel's timer lateness)."""
        for leaf, at in list(self.restore_at.items()):
            if now >= at:
                del self.restore_at[leaf]
                self.nl.request(self.leaves[leaf].ns_pid, self.leaf_msgs[leaf][3])

    def check_watchdog(self, now: int, limit_ns: int) -> None:
        for leaf, since in list(self.paused_since.items()):
            if now - since < limit_ns or leaf not in self.paused_since:
                continue
            self.watchdog_fired += 1
            rows = sorted(self.pfc.causes.get(leaf, ()))
            fired = WatchdogFired(node=self.leaves[leaf].node, port=self.leaves[leaf].ifname,
                                  cls=self.leaves[leaf].cls, paused_ns=now - since,
                                  causes=[self.queues[self.plan_row[r]].ifname for r in rows])
            self._log({"event": "watchdog", **fired.body()})
            self.controller.send(fired)
            self.carry_out(self.pfc.watchdog(leaf))

    def check_deadlock(self, now: int, stuck_ns: int) -> None:
        """A cycle in the wait-for graph (testbed.fabric.pfc.waiting_queues) whose members all made
        no progress for stuck_ns is a deadlock."""
        q = self.maps.queues[:self.n]
        waits = waiting_queues(self.pfc.causes, self.leaf_queue, q["depth_bytes"], self.rule,
                               lambda row: self.switch_rows[self.queues[self.plan_row[row]].node])
        cycle = find_cycle(waits)
        if not cycle:
            self._stuck_since = {}
            return
        key = tuple(sorted(cycle))
        deq = tuple(int(q["deq_bytes"][r]) for r in key)
        seen = self._stuck_since.get(key)
        if seen is None or seen[1] != deq:
            self._stuck_since = {key: (now, deq)}
            return
        if now - seen[0] >= stuck_ns and self.deadlock is None:
            members = [{"port": self.queues[self.plan_row[r]].ifname,
                        "class": self.queues[self.plan_row[r]].cls,
                        "depth_bytes": int(q["depth_bytes"][r])} for r in cycle]
            self.deadlock = {"t_ns": now, "stuck_ms": (now - seen[0]) / 1e6, "cycle": members}
            self._log({"event": "deadlock", **self.deadlock})
            self.controller.send(DeadlockFound(**self.deadlock))
            self.folder.deadlock.write_text(json.dumps(self.deadlock, indent=1))

    # -- telemetry ---------------------------------------------------------------------------

    def _ecn_counters(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per plan row: ECT arrivals by depth bucket, marks; per port: bytes sent (every class)."""
        rows = self.qidx
        deq = self.maps.queues["deq_bytes"][rows].astype(np.float64)
        return (self.maps.hists["ect"][rows], self.maps.queues["mark_pkts"][rows],
                np.bincount(self._port_of_row, weights=deq) if len(rows) else deq)

    def ecn_report(self) -> list:
        """Each queue that took ECT frames since the last report, and each marking queue whose port
        sent bytes since it: [port, class, bucket bytes, [[bucket, ECT arrivals], ...], marks, the
        port's bytes sent]. Deltas, so the reader needs no state of the agent's; a report lost costs
        its reader a window, not a wrong one. A marking queue's port is in every report it sent in,
        arrivals or not: a window's utilisation adds up its reports, and a port draining a deep
        queue while DCQCN holds its senders to a few frames a report would otherwise count only the
        reports that had an arrival (ecn-tuning-incast, CI of 9134903: 36% or 76% of its rate, by how
        48 arrivals a window fell among 25 reports, while it sent at 100%)."""
        ect, marks, port_deq = self._ecn_counters()
        last_ect, last_marks, last_deq = self._last_ecn
        self._last_ecn = (ect, marks, port_deq)
        d_ect = ect - last_ect
        sent = (port_deq - last_deq)[self._port_of_row] > 0
        marking = self.maps.profiles["ecn_on"][self.qidx] != 0
        busy = np.flatnonzero((d_ect.sum(axis=1) > 0) | (marking & sent))
        width = self.maps.profiles["hist_bucket_bytes"][self.qidx]
        out = []
        for r in busy:
            b = np.flatnonzero(d_ect[r])
            out.append([self.queues[r].ifname, int(self.queues[r].cls), int(width[r]),
                        [[int(i), int(d_ect[r, i])] for i in b], int(marks[r] - last_marks[r]),
                        int(port_deq[self._port_of_row[r]] - last_deq[self._port_of_row[r]])])
        return out

    def report(self, now: int, q: np.ndarray) -> None:
        """A summary for the controller: the deepest queues, totals, what is paused (each paused
        leaf, since when, and the queues holding it paused)."""
        depth = q["depth_bytes"]
        top = np.argsort(depth)[::-1][:3]
        # read now, not at the sample: a pause this pass made after the sample is in paused_since
        at = time.monotonic_ns()
        paused = [[self.leaves[leaf].ifname, self.leaves[leaf].cls, at - since,
                   [self.queues[self.plan_row[r]].id.key for r in sorted(self.pfc.causes.get(leaf, ()))]]
                  for leaf, since in self.paused_since.items()]
        self.controller.send(TelemetrySummary(
            t_ns=now,
            deepest=[[self.queues[self.plan_row[r]].ifname, int(self.queues[self.plan_row[r]].cls),
                      int(depth[r])] for r in top if depth[r] and self.plan_row[r] >= 0],
            marked=int(q["mark_pkts"].sum()), dropped=int(q["drop_pkts"].sum()),
            paused_ports=len(self.pfc.causes), pauses=self.pauses, paused=paused,
            pause_counts=[[self.leaves[leaf].ifname, self.leaves[leaf].cls, n, ended_ns]
                          for leaf, (n, ended_ns) in self.leaf_pauses.items()],
            ovs_input=[self.inputs.samples, self.inputs.busy_samples],
            ecn_queues=self.ecn_report() if self.plan.ecn_reports else []))

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> dict:
        """Look, sample and keep house until asked to stop; then resume everything and report."""
        p = self.plan
        sample_ns = int(1e9 / p.telemetry_hz)
        # Without PFC nothing needs a faster look than the telemetry's.
        poll_ns = int(1e9 / p.poll_hz) if self.pfc.feeders else sample_ns
        self._stuck_ns = int(p.deadlock_after_ms * 1e6)
        self._watchdog_ns = int(p.watchdog_ms * 1e6)
        self._stuck_since: dict = {}
        self._traffic_started = False
        self._view = view = self.maps.queues[:self.n]
        self._ing = self.maps.ingress[:self.n]
        self.inputs = InputBacklog({l.ifindex: l.ifname for l in self.leaves if l.switch})
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        start = time.monotonic_ns()
        self._last_look, self._blind_max_ns, self._blind_over_ms = start, 0, 0
        next_sample = start
        polls = sweeps = late_samples = 0
        # Housekeeping, one task per pass and a look between any two: each took up to 0.2-0.9 ms
        # here (measured), so several in one pass would add up to the reaction the headroom
        # allows. (The agent's longer blind spots, 3-9 ms now and then, remained: they are the
        # machine's, the hypervisor's steal among them.) [next due, period, task]
        chores = [[start + DEADLOCK_CHECK_NS, DEADLOCK_CHECK_NS, self._chore_control],
                  [start + REPORT_NS, REPORT_NS, self._chore_report],
                  [start, INPUT_SAMPLE_NS, self._chore_inputs],
                  [start + FLUSH_NS, FLUSH_NS, self._chore_flush]]
        while not self.stop_requested:
            now = time.monotonic_ns()
            np.maximum(self.max_depth, view["depth_bytes"], out=self.max_depth)
            if self.pfc.feeders:
                self._look(now)
            if self.restore_at:
                self.restore_buckets(now)
            polls += 1
            if now >= next_sample:
                self.telemetry.sample(now, view)
                sweeps += 1
                if now - next_sample > sample_ns:
                    late_samples += 1
                    next_sample = now
                next_sample += sample_ns
            due = min(chores, key=lambda c: c[0])
            if now >= due[0]:
                due[2](now)
                due[0] = now + due[1]
            wait = min(now + poll_ns, next_sample, min(c[0] for c in chores)) - time.monotonic_ns()
            time.sleep(max(wait / 1e9, MIN_SLEEP_S))
        end = time.monotonic_ns()
        # Resume whatever is still paused, so the fabric drains cleanly.
        self.carry_out(self.pfc.release_all("agent_stop"))
        self.telemetry.sample(end, view)
        self.telemetry.flush()
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "start_ns": start, "end_ns": end, "scheduling": self.scheduling, "polls": polls, "sweeps": sweeps,
            "late_samples": late_samples, "poll_hz_achieved": polls / max(1e-9, (end - start) / 1e9),
            "blind_max_us": self._blind_max_ns / 1e3, "blind_over_1ms": self._blind_over_ms,
            "telemetry_hz_achieved": sweeps / max(1e-9, (end - start) / 1e9),
            "cpu_s": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
            **agent_account(self),
        }

    def _look(self, now: int) -> None:
        """One PFC look at every lossless row: pauses and resumes carried out, stamps re-armed. The
        longest a row went unlooked-at, and how often over 1 ms, are kept: PFC headroom only covers
        the agent's reaction while these stay within its allowance."""
        blind = now - self._last_look
        self._last_look = now
        self._blind_max_ns = max(self._blind_max_ns, blind)
        self._blind_over_ms += blind > 1_000_000
        read_ns = time.monotonic_ns()   # the data path stamps with the same clock
        if self.rule == "ingress":
            rows, level = self._ing, held_bytes(self._ing)
            np.maximum(self.max_held, level, out=self.max_held)
        else:
            rows, level = self._view, self._view["depth_bytes"].astype(np.int64)
        cross = rows["xoff_cross_ns"]
        decisions = self.pfc.look(level, cross)
        self.answered |= self.pfc.asserted
        self.carry_out(decisions)
        # Only a stamp from before this look's reading: carrying out its pauses takes a while, and
        # a row below XON then may have crossed XOFF since (a CI run lost such stamps, and its
        # pauses then had no reaction time)
        clear = self.pfc.rearm(level, cross, read_ns)
        missed = clear & ~self.answered
        if missed.any():
            self.max_unanswered[missed] = np.maximum(self.max_unanswered[missed],
                                                     read_ns - cross[missed].astype(np.int64))
        cross[clear] = 0
        self.answered[clear] = False

    def _chore_control(self, now: int) -> None:
        """Deadlocks, the watchdog, the controller's messages, and telling it the traffic started."""
        if self.pfc.causes:
            self.check_deadlock(now, self._stuck_ns)
        if self._watchdog_ns:
            self.check_watchdog(now, self._watchdog_ns)
        for msg in self.controller.receive(timeout_s=None):
            self.apply_policy(msg)
        if not self._traffic_started and self.folder.announced("engine"):
            self._traffic_started = True
            self.controller.send(TrafficStarted(t_ns=now))

    def _chore_inputs(self, now: int) -> None:
        """Open vSwitch's input backlog; and in a calibration rung, whether it has already been
        behind in more of the samples than the verdict allows in all the rung can still run."""
        self.inputs.sample()
        give_up_s = self.plan.give_up_after_s
        if give_up_s and self._traffic_started and self.behind is None and self.inputs.past_any_verdict(
                int(give_up_s * 1e9 / INPUT_SAMPLE_NS) + 1):
            self.behind = {"t_ns": now, "samples": self.inputs.samples, "busy_samples": self.inputs.busy_samples,
                           "give_up_after_s": give_up_s}
            self._log({"event": "behind", **self.behind})
            self.folder.behind.write_text(json.dumps(self.behind, indent=1))

    def _chore_report(self, now: int) -> None:
        self.report(now, self._view)
        self.stale.check(self._view, self.pfc.causes)
        if self.rule == "ingress" and self.pfc.feeders:
            self.leaks.check(self._ing, self.maps.queues["depth_bytes"], self.inputs.read_bytes)

    def _chore_flush(self, now: int) -> None:
        self.telemetry.flush()
        self.events.flush()

    def close(self) -> None:
        self.events.close()
        self.telemetry.close()
        self.nl.close()
        self.stamps.close()
        self.port_socks.close()
        self.controller.close()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    plan = AgentPlan.from_json(json.loads(Path(argv[0]).read_text()))
    maps = MappedArrays({k: int(v) for k, v in plan.map_fds.items()})
    agent = Agent(plan, maps)
    gc.disable()

    def stop(_signum, _frame):
        agent.stop_requested = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    agent.controller = ControllerLink(plan.controller_socket)
    first = agent.controller.receive(timeout_s=30.0)
    if not first or not isinstance(first[0], PolicyMessage):
        raise SystemExit(f"the controller sent no port policy (got {first!r})")
    agent.apply_policy(first[0])
    agent.open_sockets()
    if agent.pfc.feeders:
        # A pause is only as quick as the agent's wake-up. A switch does this in hardware; here
        # the agent gets a real-time priority (it sleeps between looks, MIN_SLEEP_S at least, so
        # it cannot starve the datapath), else the best nice level. Without PFC, preempting the
        # traffic a thousand times a second for telemetry would only cost fidelity (measured).
        agent.scheduling = take_priority(10, -10)
    agent.folder.announce("agent")
    try:
        stats = agent.run()
    finally:
        agent.close()
    agent.folder.agent_stats.write_text(json.dumps(stats, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
