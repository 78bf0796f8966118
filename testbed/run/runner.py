"""One run of a scenario: controller, fabric, traffic, raw results. Analysis is a separate step
(testbed.analysis.summary), which the CLI runs right after.

Order of life: lock -> clean what dead runs left -> controller listening -> fabric up ->
routes ready -> engine runs the workload -> counters read -> fabric down -> controller down.
Every step is a context manager, so an exception, Ctrl-C or SIGTERM unwinds all of it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from testbed.errors import RunFailed, SetupError
from testbed.fabric import bpfmaps
from testbed.fabric import qos
from testbed.fabric.agent_plan import AgentPlan, QueueSpec
from testbed.fabric.net import EmulatedFabric
from testbed.fabric.ports import PortConfig, leaf_minor
from testbed.fabric.tenants import mechanism as tenant_mechanism
from testbed.fabric.tenants import tenants
from testbed.paths import PROJECT_ROOT
from testbed.records import HeartbeatWatch
from testbed.run import northbound, probe
from testbed.run.capture import HostCaptures
from testbed.run.controller import Controller
from testbed.run.cpu import CpuMeter
from testbed.run.faults import FaultInjector
from testbed.run.isolation import check_isolation
from testbed.run.procs import ManagedProcess, WaitFailed, wait_until
from testbed.run.remote import host_pairs, remote_listening, wait_forwarding
from testbed.run.state import RunLock, RunRecord, clean_stale
from testbed.runfolder import RunFolder
from testbed.scenario import Scenario, build_fabric, dcqcn_described, dcqcn_overrides, parse_endpoint
from testbed.traffic import nic
from testbed.traffic.plan import EnginePlan
from testbed.traffic.workload import build_messages, engine_plan, nic_lead_ns

RESULTS_DIR = Path(os.environ.get("TESTBED_RESULTS_DIR", PROJECT_ROOT / "results"))
MANIFEST_VERSION = 2   # 2: the scenario as run (emulated) carries its dilation
ENGINE_GRACE_S = 30.0
# From the engine's time limit to the switch agent's stop: the engine's exit, the runner's counters
# of every port (under a second here), with room to spare. A bound, for a calibration rung's agent.
AGENT_STOP_S = 10.0
ENGINE_HEARTBEAT_TIMEOUT_S = 3.0


def run(sc: Scenario, log=print, results_dir: Path | None = None, progress=None, alone: dict | None = None) -> Path:
    """Run the scenario; returns its run folder (raw files and manifest.json). Interrupts unwind
    it: the CLI turns SIGTERM into testbed.errors.Terminated and keeps SIGINT a KeyboardInterrupt.
    progress(EngineProgress, elapsed_s, time_limit_s), if given, is called about every 200 ms of
    the traffic phase with the engine's last heartbeat record. alone: with [[jobs]], each job's mean
    iteration when it ran alone (the CLI's runs before this one), kept in the manifest for the
    analysis's slowdowns."""
    if sc.dilation.chosen_by == "unresolved":
        raise ValueError(f"{sc.name}: a hardware scenario runs at a dilation: resolve it first "
                         f"(testbed.run.calibrate.resolve)")
    fabric = build_fabric(sc.fabric)
    ranks, messages = build_messages(sc, fabric)
    base = results_dir or RESULTS_DIR
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    run_id = f"{sc.name}-{stamp}"
    if sc.controller.remote and not remote_listening(*parse_endpoint(sc.controller.remote)):
        raise SetupError(f"no controller listens at {sc.controller.remote} (controller.remote): start yours first")
    with RunLock(run_id, f"scenario {sc.name}"):
        too_small = probe.socket_buffers_too_small()
        if too_small:
            raise SetupError(f"{'; '.join(too_small)}: ovs-vswitchd would drop packets silently "
                             f"(run `make setup`, which raises them)")
        bpfmaps.require_object()
        nic.require_built()
        clean_stale(log=log)
        # under the lock (another run's API on the port is that run's, which the lock refuses first)
        # and after a dead run's leftovers are gone, before anything of this run exists
        api_port = northbound.port_for(sc)
        run_dir = base / sc.name / stamp
        rf = RunFolder(run_dir)
        rf.raw.mkdir(parents=True)
        datapath = probe.choose_datapath()
        record = RunRecord(run_id)
        manifest = {
            "manifest_version": MANIFEST_VERSION, "run_id": run_id, "scenario": sc.to_dict(),
            "started_utc": datetime.now(timezone.utc).isoformat(), "git_commit": probe.git_commit(),
            "versions": probe.versions(), "machine": probe.machine(),
            "mechanisms": mechanisms(sc, datapath),
            "ranks": ranks,
            "alone": alone or {},
            "timings_s": {},
        }
        rf.fabric.write_text(fabric.to_json())
        rf.schedule.write_text(json.dumps(
            [{"id": m.id, "iteration": m.iteration, "step": m.step, "src": m.src, "dst": m.dst,
              "bytes": m.bytes, "chunk": m.chunk, "tag": m.tag, "op": m.op, "duration_ns": m.duration_ns,
              "group": m.group, "instance": m.instance, "job": m.job, "comm": m.comm}
             for m in messages]))
        try:
            _emulate(sc, fabric, messages, run_dir, record, datapath, manifest, log, progress, api_port)
        except BaseException as e:  # the run folder says why it ended, whatever ended it
            manifest["error"] = f"{type(e).__name__}: {e}"
            raise
        finally:
            # what the teardown left (an interrupt it could not hold off, a command that failed)
            # goes now, by the record, before the record does
            try:
                left = record.close()
            except Exception as e:  # the record stays, for `testbed clean` and the next run
                left = []
                manifest["cleanup_error"] = repr(e)
                log(f"could not remove what the teardown left ({e!r}); `testbed clean` will")
            if left:
                manifest["removed_after_teardown"] = left
                log(f"removed what the teardown left: {', '.join(left)}")
            manifest["finished_utc"] = datetime.now(timezone.utc).isoformat()
            rf.manifest.write_text(json.dumps(manifest, indent=1))
        return run_dir


def _dcqcn_mechanism(sc: Scenario) -> str:
    """The manifest's words for the congestion control: the reference configuration and every field
    the scenario changed in it."""
    return (f"; DCQCN (CNPs from receivers, rate machine per queue pair): "
            f"{dcqcn_described(dcqcn_overrides(dataclasses.asdict(sc.dcqcn)))}, given for {sc.dcqcn.ref_gbps:g} Gb/s, "
            f"time-dilated")


def mechanisms(sc: Scenario, datapath: str) -> dict[str, str]:
    """What the run uses on this machine for each part of the fabric, in words: every result says
    which mechanism produced it."""
    return {
        "datapath": "ovs-kernel" if datapath == "kernel" else "ovs-userspace (netdev)",
        "shaping": "htb per port (link rate) with one class per priority and a tbf leaf per class, "
                   "set over netlink (pyroute2)",
        "queues": f"{sc.qos.scheduling} scheduling over {len(sc.classes)} classes "
                  f"({', '.join(c.name for c in sc.classes)}), classified by DSCP in a cls_bpf program",
        "ecn": "per packet, RED profile on the exact queue depth, in a cls_bpf program at enqueue "
               "(kernel red/prio absent here; one mechanism on every kernel keeps runs comparable)"
               if sc.qos.ecn else "off",
        "pfc": (("switch agent: XOFF/XON on the bytes each (ingress port, class) holds in its switch, "
                 "counted in the port program from arrival to departure, the ingress carried in the "
                 "Ethernet source by the controller's flows; pauses the ingress port's peer"
                 if sc.qos.pfc_accounting == "ingress" else
                 "switch agent: XOFF/XON on the egress queue's exact depth; pauses every upstream the "
                 "routes feed into it") +
                "; pause = tbf rate change on the upstream class leaf over netlink, resume = rate back "
                "plus an 802.1Qbb XON frame") if sc.qos.pfc else "off",
        "tenant_isolation": tenant_mechanism(sc),
        "qos_policy": f"os-ken {sc.controller.qos_app}: computes the port policy from the classes and "
                      f"routes, sends it to the switch agent, logs its reports and decisions",
        "telemetry": f"switch agent reads BPF queue counters (mmap) at {sc.qos.telemetry_hz:g} Hz",
        "ecn_tuning": (f"os-ken ecn_tuning: every marking class's Kmin, Kmax and Pmax moved from the agent's "
                       f"per-queue deltas (10 reports a second), windows of "
                       f"{sc.controller.ecn_tuning_window_us:g} us hardware time, toward queue p99 <= "
                       f"{sc.controller.ecn_tuning_queue_p99_bytes} B at utilisation >= "
                       f"{sc.controller.ecn_tuning_utilisation:g}") if sc.controller.ecn_tuning == "adaptive" else "off",
        "offloads": "off on every veth" if datapath == "user" else "unchanged",
        "traffic": f"compiled NIC data plane (testbed/traffic/nic/nicdp.c) in one process; per host an AF_PACKET "
                   f"socket per NIC class, opened in its namespace, batched I/O (sendmmsg/recvmmsg) "
                   f"at most every {sc.transport.engine_batch_us:g} us; line rate from the host NIC's "
                   f"HTB class (burst {sc.fabric.nic_burst_frames} frames), fed a lead of "
                   f"{nic_lead_ns(sc) / 1e3:.0f} us of frames per class "
                   f"({nic_lead_ns(sc) * sc.fabric.bw_mbps * 1e6 / 8e9 / qos.frame_bytes(sc):.1f} frames)"
                   + ("; each throttled queue pair paced to its DCQCN rate in the data plane"
                      if sc.transport.cc == "dcqcn" else "")
                   + f"; RC order per queue pair, {sc.transport.channels} queue pair(s) per host pair "
                     f"and kind",
        "transport": f"RoCE RC per queue pair: {sc.transport.reliability}"
                     + (", ICRC checked at the receiver" if sc.transport.verify_icrc else "")
                     + (_dcqcn_mechanism(sc) if sc.transport.cc == "dcqcn" else "; no congestion control (line rate)"),
        "capture": (f"tcpdump in each traffic host's namespace, snaplen {sc.run.capture_snaplen_bytes} B"
                    if sc.run.capture else "off"),
        "routing": f"the user's controller at {sc.controller.remote} (controller.remote); ready when a frame of "
                   f"every host pair was traced through the switches' flow tables to its destination, after "
                   f"warm-up frames (testbed/run/remote.py)" if sc.controller.remote else
                   (f"os-ken {sc.controller.app} ({sc.controller.routing}"
                    f"{', dateline virtual channels' if sc.controller.dateline else ''}), proactive, "
                    f"barrier-confirmed") if sc.controller.app != "none" else
                   "the scenario's own app (controller.apps), ready when it wrote routes_ready",
        "controller_apps": [{"file": p, "sha256": hashlib.sha256(Path(p).read_bytes()).hexdigest()}
                            for p in sc.controller.apps],
        "ecmp": "OpenFlow 1.5 select groups, OVS hash over the 5-tuple" if sc.controller.routing == "ecmp"
                else "none",
        "timestamps": "departure: the kernel's software TX timestamp (SO_TIMESTAMPING SCM_TSTAMP_SND), "
                      "taken when the host NIC's qdisc hands the frame to the veth, i.e. as it starts "
                      "onto the wire; arrival: the kernel's receive timestamp (SO_TIMESTAMPNS) on the "
                      "destination's veth; handoff: the data plane's clock when it queued the frame. "
                      "All CLOCK_REALTIME kernel stamps are mapped to CLOCK_MONOTONIC, shared by every "
                      "namespace, with the offset read at each pass (adjustments between two reads are "
                      "the error: none here). One-way latency = arrival - departure (wire and fabric, "
                      "to within the softirq delay of each stamp, microseconds on this machine); NIC "
                      "queueing = departure - handoff",
    }


def _emulate(sc, fabric, messages, run_dir, record, datapath, manifest, log, progress, api_port) -> None:
    rf = RunFolder(run_dir)
    timings = manifest["timings_s"]
    t0 = time.monotonic()
    # The QoS app and the switch agent meet on an abstract Unix socket (no file to clean up).
    agent_socket = f"fabric-testbed/{os.getpid()}/{time.monotonic_ns()}"
    rf.scenario.write_text(json.dumps(sc.to_dict()))
    # every app reads its settings from the resolved scenario; the agent's socket is the run's wiring
    # with controller.remote the testbed's controller keeps only the QoS app, which no switch connects to
    apps = [a for a in (sc.controller.app, sc.controller.qos_app) if a != "none"
            and not (sc.controller.remote and a == sc.controller.app)]
    if sc.controller.ecn_tuning == "adaptive":
        apps.append("ecn_tuning")
    params = {"agent_socket": agent_socket}
    if api_port:
        apps.append("northbound")
        params.update(api_socket=f"{agent_socket}/api", api_routes="remote" if sc.controller.remote else "own")
    ctl = Controller(apps=apps,
                     app_files=list(sc.controller.apps), params=params,
                     fabric_json=rf.fabric, scenario_json=rf.scenario, events_path=rf.controller_events,
                     log_path=rf.controller_log)
    ctl.on_start = record.add_process
    ports = PortConfig(mtu_bytes=sc.fabric.mtu_bytes,
                       queue_limit_bytes=sc.fabric.queue_limit_bytes,
                       htb_burst_bytes=qos.switch_burst_bytes(sc),
                       nic_burst_bytes=sc.fabric.nic_burst_frames * qos.frame_bytes(sc),
                       offloads_off=(datapath == "user"),
                       layout=qos.port_layout(sc))
    with ctl:
        ctl.wait_listening(timeout_s=30)
        log(f"controller listening on 127.0.0.1:{ctl.port} (pid {ctl.pid})")
        if sc.controller.remote:
            remote_ip, remote_port = parse_endpoint(sc.controller.remote)
            net = EmulatedFabric(fabric, ports, remote_port, datapath, record, controller_ip=remote_ip)
        else:
            net = EmulatedFabric(fabric, ports, ctl.port, datapath, record)
        try:
            with net:
                manifest["mechanisms"]["receive_steering"] = net.ports.steering
                log(f"fabric up: {len(fabric.switches)} switches, {len(fabric.hosts)} hosts, "
                    f"{len(fabric.links)} links ({manifest['mechanisms']['datapath']}; {net.ports.steering})")
                host_pids = {h.name: net.host_pid(h.name) for h in fabric.hosts}
                if sc.controller.remote:
                    manifest["remote"] = wait_forwarding(fabric, host_pairs(messages), host_pids, sc.workload.dscp,
                                                         sc.run.routes_ready_timeout_s, log)
                else:
                    ctl.wait_routes_ready(sc.run.routes_ready_timeout_s)
                timings["routes_ready"] = time.monotonic() - t0
                log(f"routes ready {timings['routes_ready']:.2f} s after start")
                if len(tenants(sc)) > 1:
                    manifest["isolation"] = check_isolation(sc, fabric, host_pids, rf.isolation, log)
                plan = engine_plan(sc, fabric, messages, host_pids, str(run_dir))
                rf.engine_plan.write_text(json.dumps(plan.to_json()))
                agent_plan = build_agent_plan(sc, net.ports, str(run_dir), agent_socket)
                rf.agent_plan.write_text(json.dumps(agent_plan.to_json()))
                # after SIGTERM it resumes every paused port and writes its telemetry and stats: on a
                # VM whose CPU was stolen for 0.4 s at a time that outlasted 5 s once (killed, exit -9)
                agent = ManagedProcess("switch agent", [sys.executable, "-m", "testbed.fabric.agent",
                                                        str(rf.agent_plan)],
                                       rf.agent_log, cwd=str(PROJECT_ROOT),
                                       pass_fds=tuple(agent_plan.map_fds.values()), stop_timeout_s=30.0)
                agent.on_start = record.add_process
                with agent:
                    wait_until(lambda: rf.announced("agent") or not agent.alive(), 30,
                               "the switch agent to apply the controller's port policy")
                    if not agent.alive():
                        raise RunFailed(f"the switch agent failed to start; log:\n{agent.log_tail()}")
                    with contextlib.ExitStack() as stack:
                        api = None
                        if api_port:
                            api = stack.enter_context(northbound.ApiProcess(
                                rf, api_port, params["api_socket"], agent_plan.map_fds, record))
                            manifest["api"] = {"port": api_port, "pid": api.pid}
                            log(f"northbound API on http://127.0.0.1:{api_port}/ (token {api.token}; docs/api.md)")
                        if sc.run.capture:
                            used = {h.name: (h.pid, h.ifname) for h in plan.hosts}
                            caps = stack.enter_context(HostCaptures(used, rf.pcap,
                                                                    sc.run.capture_snaplen_bytes, record))
                            log(f"capturing on {len(used)} hosts to {rf.pcap}")
                        _traffic(sc, fabric, net, plan, rf, ctl, record, manifest, log, agent, progress, api)
                    if sc.run.capture:
                        manifest["capture"] = caps.stats
                if agent.proc.returncode not in (0, None):
                    raise RunFailed(f"the switch agent failed (exit {agent.proc.returncode}); log:\n"
                                    f"{agent.log_tail()}")
                rf.ovs_socket_drops_end.write_text(json.dumps(net.ovs_socket_drops()))
                rf.flows_end.write_text(json.dumps(net.flow_stats()))
                rf.groups_end.write_text(json.dumps(net.group_stats()))
        finally:
            timings.update(net.timings)
    timings["total"] = time.monotonic() - t0
    if not sc.controller.remote and not ctl.find_event("routes_ready"):
        raise RunFailed("the controller never reported its routes ready")


def build_agent_plan(sc, ports, out_dir: str, agent_socket: str) -> AgentPlan:
    """What the switch agent needs to act on the ports: every switch queue and every pausable
    leaf. The policy itself (profiles, thresholds, pause map) comes from the controller."""
    leaves = ports.leaves()
    queues = tuple(QueueSpec(index=leaf.queue, node=leaf.node, port=leaf.port, ifname=leaf.ifname, cls=leaf.cls,
                             class_name=sc.classes[leaf.cls].name) for leaf in leaves if leaf.switch)
    return AgentPlan(
        out_dir=out_dir, controller_socket=agent_socket,
        map_fds={name: fd for name, fd in ports.bpf.map_fd.items() if name in bpfmaps.MAPS},
        first_minor=leaf_minor(0), frame_bytes=qos.frame_bytes(sc), poll_hz=sc.qos.agent_poll_hz,
        telemetry_hz=sc.qos.telemetry_hz, deadlock_detect_ms=sc.qos.deadlock_detect_ms,
        watchdog_ms=sc.qos.pfc_watchdog_ms, queues=queues, leaves=leaves,
        # only a calibration rung stops once its verdict is settled: it wants no results but
        # that verdict, and a rung far above the machine's capacity would otherwise run on, losing
        # tens of thousands of frames, to its time limit (2026-12-05, CI: the 40 Mb/s rungs of the
        # 4x4 torus, the 2x2x4 torus and the k=4 fat-tree took 34-40 s each, Open vSwitch behind
        # in 30-87% of samples)
        give_up_after_s=sc.run.time_limit_s + AGENT_STOP_S if sc.dilation.chosen_by == "calibration" else 0.0,
        ecn_reports=sc.controller.ecn_tuning == "adaptive")


def _traffic(sc, fabric, net, plan: EnginePlan, rf: RunFolder, ctl, record, manifest, log, agent, progress,
             api=None) -> None:
    engine = ManagedProcess("engine", [sys.executable, "-m", "testbed.traffic.engine", str(rf.engine_plan)],
                            rf.engine_log, cwd=str(PROJECT_ROOT))
    engine.on_start = record.add_process
    cpu = CpuMeter({"ovs-vswitchd": probe.ovs_vswitchd_pid(), "controller": ctl.pid, "switch agent": agent.pid,
                    **({"northbound api": manifest["api"]["pid"]} if "api" in manifest else {})})
    log(f"traffic: {sc.workload.type}, {len(plan.messages)} messages over {len(plan.flows)} flows")
    # every port's counters, before the engine sends its first frame and when it is done: what
    # the fabric moved during the traffic phase
    rf.links_start.write_text(json.dumps(net.ports.link_counters()))
    with engine:
        # Measure CPU over the traffic phase only, not the engine's imports and socket setup.
        wait_until(lambda: rf.announced("engine") or engine.proc.poll() is not None, 60,
                   "the traffic engine to open its sockets")
        drops0 = probe.ovs_drop_counters()
        cpu.begin()
        # the fault schedule's clock starts with the traffic
        with FaultInjector(sc, fabric, net, ctl, rf.faults, log) as faults:
            deadline = sc.run.time_limit_s + ENGINE_GRACE_S
            # only a calibration rung's agent may say it is behind (build_agent_plan)
            rung = sc.dilation.chosen_by == "calibration"
            started, next_show = time.monotonic(), [0.0]
            heartbeat = HeartbeatWatch(rf.heartbeat)

            def finished():
                if not ctl.alive() and not sc.controller.survive_controller_loss:
                    noticed = time.monotonic_ns()
                    rf.controller_lost.write_text(json.dumps(
                        {"noticed_ns": noticed, "killed_ns": faults.controller_killed_ns or None}))
                    planned = (f" (killed by the fault schedule; noticed after "
                               f"{(noticed - faults.controller_killed_ns) / 1e6:.0f} ms)"
                               if faults.controller_killed_ns else "")
                    raise RunFailed(f"the controller exited during the run{planned}; the run was stopped "
                                    f"(set controller.survive_controller_loss to keep forwarding); log:\n"
                                    f"{ctl.log_tail()}")
                faults.apply_due()
                if api is not None:
                    api.serve(faults)
                if engine.proc.poll() is not None:
                    return True
                if not agent.alive():
                    raise RunFailed(f"the switch agent exited during the run; log:\n{agent.log_tail()}")
                if rf.deadlock.exists():
                    log("PFC deadlock detected: stopping the traffic (see raw/deadlock.json)")
                    engine.stop()
                    return True
                if rung and rf.behind.exists():
                    log("Open vSwitch was behind in more samples than any verdict allows: stopping this "
                        "calibration rung (see raw/behind.json)")
                    engine.stop()
                    return True
                if progress and time.monotonic() >= next_show[0]:
                    next_show[0] = time.monotonic() + 0.2
                    p = rf.progress()
                    if p:
                        progress(p, time.monotonic() - started, sc.run.time_limit_s)
                if (heartbeat.silent_s() or 0) > ENGINE_HEARTBEAT_TIMEOUT_S:
                    raise RunFailed(f"the traffic engine stopped responding (no heartbeat for "
                                    f"{ENGINE_HEARTBEAT_TIMEOUT_S:g} s); log:\n{engine.log_tail()}")
                return False

            try:
                wait_until(finished, deadline, "the traffic engine to finish", poll_s=0.005)
            except WaitFailed:
                raise RunFailed(f"the traffic engine did not finish within {deadline:g} s; log:\n"
                                f"{engine.log_tail()}") from None
        manifest["cpu"] = cpu.end()
        # What is still queued when the traffic ends, before the agent resumes paused ports and
        # they drain toward hosts that no longer listen.
        rf.queues_end.write_text(json.dumps(net.ports.queue_stats()))
        rf.links_end.write_text(json.dumps(net.ports.link_counters()))
        rf.corrupted_end.write_text(json.dumps(net.ports.corrupted_frames()))
        agent.stop()
        drops1 = probe.ovs_drop_counters()
        manifest["ovs_drops_during_traffic"] = {k: drops1[k] - drops0[k] for k in drops0}
    if engine.proc.returncode not in (0, 3):
        raise RunFailed(f"the traffic engine failed (exit {engine.proc.returncode}); log:\n{engine.log_tail()}")
    stats = json.loads(rf.engine_stats.read_text())
    manifest["engine"] = {"reason": stats["reason"], "cpu_s": stats["cpu_s"], "scheduling": stats["scheduling"]}
