"""Stage 3 of a run's analysis: did the emulation run the fabric faithfully?

Each rule below that a run breaks adds a note saying what the emulator (not the policy) did wrong,
with its numbers; any note makes the verdict `could_not_keep_up`. A run with no note but too little
busy to judge is `not_judged`; only `kept_up` is a valid run (`valid`), whose performance metrics
mean something.
"""
from __future__ import annotations

from testbed.analysis.losses import LossAccount
from testbed.analysis.tables import RunInputs
# Open vSwitch lagging in more than this share of the samples (the switch agent, which counts them,
# stops a calibration rung by the same rule), and the machine busier than this over the traffic: the
# run could not keep up (the northbound API shows both during the run)
from testbed.fabric.agent_plan import MAX_INPUT_BUSY_FRACTION, MAX_MACHINE_BUSY_FRACTION


def cores_used(inp: RunInputs) -> dict:
    """The CPU each process used over the traffic, in cores."""
    d = inp.duration_s
    return {**inp.cpu.get("processes_cores", {}), "engine": inp.engine["cpu_s"] / d if d > 0 else None}


def judge(inp: RunInputs, acc: LossAccount, packets: dict, host_fid: dict, link_fid: dict, qos: dict | None,
          transport: dict, emulator: dict | None = None) -> dict:
    """The summary's fidelity section: the verdict, its notes, and what it was judged on.
    emulator: the emulator's own per-hop latency in hardware time (testbed.analysis.hardware)."""
    notes = (_plumbing_notes(acc) + _host_notes(host_fid) + _machine_notes(inp, qos) + _link_notes(link_fid)
             + _engine_notes(transport, packets) + _emulator_notes(emulator))
    if notes:
        verdict = "could_not_keep_up"
    elif not link_fid["busy_links"] and not host_fid["judged_hosts"]:
        # nothing failed, but nothing was judged either: a starved fabric is not a faithful one
        verdict = "not_judged"
        notes.append(f"too little was busy to judge: no switch port was backlogged for "
                     f"{link_fid['min_windows']} or more windows of max({link_fid['min_window_ms']:g} ms, "
                     f"{link_fid['window_frames']} frame times), and no sending host was busy for as many")
    else:
        verdict = "kept_up"
    cpu, engine = inp.cpu, inp.engine
    return {
        "verdict": verdict,
        "notes": notes,
        "hosts": host_fid,
        # the scheduler's share in that: the data plane's waits that ended over 1 ms late
        "engine_late_wakeups": {"count": engine.get("oversleeps"), "total_ms": engine.get("oversleep_ms"),
                                "max_ms": engine.get("max_oversleep_ms"),
                                "involuntary_switches": engine.get("involuntary_switches")},
        "machine_busy_fraction": cpu.get("machine_busy_fraction"),
        "machine_steal_fraction": cpu.get("steal_fraction"),
        "cores_used": cores_used(inp),
        "cpus": inp.manifest["machine"]["cpus"],
        "links": link_fid,
        "machine_cpu_idle_fraction": (1 - cpu["machine_busy_fraction"]
                                      if cpu.get("machine_busy_fraction") is not None else None),
        "valid": verdict == "kept_up",
    }


def _emulator_notes(emulator: dict | None) -> list[str]:
    if not emulator or emulator["ok"]:
        return []
    return [f"the emulator's own forwarding latency, {emulator['per_hop_ns_hardware']:.0f} ns a hop in hardware time "
            f"({emulator['per_hop_us_emulated']:.0f} us here / D), is {emulator['share']:.0%} of the configured "
            f"{emulator['configured_per_hop_ns']:.0f} ns a hop (at most {emulator['max_share']:.0%}): a larger "
            f"run.dilation shrinks it"]


def _plumbing_notes(acc: LossAccount) -> list[str]:
    # data packets the emulator's own plumbing lost, not a switch queue the policy runs
    plumbing = acc.dropped_inside_ovs + acc.ovs_rx_socket_drops + acc.veth_drops
    if not (plumbing and acc.lost_inside_emulator):
        return []
    return [f"the emulator itself dropped frames while {acc.lost} data packets were lost (inside "
            f"Open vSwitch {acc.dropped_inside_ovs}, at its receive sockets {acc.ovs_rx_socket_drops}, at veths "
            f"{acc.veth_drops})"]


def _host_notes(host_fid: dict) -> list[str]:
    if host_fid["valid"]:
        return []
    w = host_fid["worst"]
    return [f"{len(host_fid['failing_hosts'])} of {host_fid['sending_hosts']} sending hosts' links idled with "
            f"work waiting for over {host_fid['tolerance']:.0%} (plus one frame time) of more than "
            f"{1 - host_fid['min_share']:.0%} of their windows of busy time, or sent ahead of their rate "
            f"there, or idled over {host_fid['tolerance']:.0%} of all of it (worst {w['host']}: "
            f"{w['within_tolerance']} of {w['windows']} {w['window_ms']:.1f} ms windows within, idle "
            f"{w['idle_share']:.2%} of {w['windowed_ms']:.0f} ms in windows; lead ran "
            f"dry {w['lead_dry_ms']:.2f} ms, the shaper late {w['late_ms']:.2f} ms, rate-limited queue pairs "
            f"behind {w['qp_behind_ms']:.2f} ms)"]


def _machine_notes(inp: RunInputs, qos: dict | None) -> list[str]:
    """Open vSwitch falling behind, a saturated machine, and PFC pauses later than the headroom."""
    notes = []
    if qos is None:
        # every run starts the switch agent: without its account (killed before it wrote it), Open
        # vSwitch's input backlog and PFC's reaction went unchecked, which is no verdict
        notes.append("the switch agent left no account (raw/agent.json): Open vSwitch's input backlog and the "
                     "PFC pauses' timeliness could not be checked")
    backlog = qos["ovs_input_backlog"] if qos else None
    ingress_pfc = bool(qos) and inp.scenario["qos"]["pfc"] and qos["pfc"].get("accounting") == "ingress"
    if backlog and backlog["samples"] and backlog["busy_samples"] / backlog["samples"] > MAX_INPUT_BUSY_FRACTION:
        seen = ("in one queue for every class (the ingress PFC counts see it, priorities do not)" if ingress_pfc
                else "unseen by priorities and pauses")
        notes.append(
            f"Open vSwitch fell behind: frames waited in its input sockets (over "
            f"{backlog['busy_threshold_bytes'] // 1024} KiB on a port) in "
            f"{backlog['busy_samples'] / backlog['samples']:.0%} of samples, up to "
            f"{backlog['max_bytes'] // 1024} KiB on {backlog['worst_ports'][0]['port']}, {seen}"
            + ("; the calibration rung was stopped once no verdict could pass it" if backlog.get("stopped_the_run")
               else ""))
    if inp.cpu.get("machine_busy_fraction", 0) > MAX_MACHINE_BUSY_FRACTION:
        notes.append(f"the machine was {inp.cpu['machine_busy_fraction']:.0%} busy")
    overruns = qos["pfc"]["headroom_overruns"] if qos else []
    late = [r for r in overruns if r["late"]]
    if late:
        # A switch's headroom holds what arrives while its pause takes effect; this one's pause came
        # later than the headroom is sized for, so what a lossless switch would have held, it did not
        w = _worst_overrun(late)
        notes.append(
            f"the switch agent paused later than the PFC headroom allows ({qos['pfc']['reaction_us']['allowance']:.0f} "
            f"us): {len(late)} lossless rows held more than XOFF plus headroom (worst {_held(w)}, its slowest "
            f"answer to XOFF {w['max_reaction_us']:.0f} us)")
    ahead = [r for r in overruns if r.get("link_ahead")]
    if ahead:
        # the pause came in time, but the link had delivered faster than its rate, which the
        # headroom (sized on a link at its rate) need not hold and a hardware link does not do
        w = _worst_overrun(ahead)
        notes.append(
            f"{len(ahead)} lossless rows held more than XOFF plus headroom though paused in time, as their links "
            f"had delivered faster than their rate or held frames in a CPU's backlog (worst {_held(w)}, "
            f"{w['ahead_bytes']} bytes ahead of the link's rate, frames held up to {w.get('wire_us', 0):.0f} us; "
            f"slowest pause {w['max_reaction_us']:.0f} us)")
    return notes


def _worst_overrun(rows: list[dict]) -> dict:
    return max(rows, key=lambda r: r["max_held_bytes"] - r["limit_bytes"])


def _held(r: dict) -> str:
    return f"{r['port']} class {r['class']}: {r['max_held_bytes']} of {r['limit_bytes']} bytes"


def _link_notes(link_fid: dict) -> list[str]:
    if link_fid["valid"]:
        return []
    notes = []
    short = link_fid.get("failing_short_links") or []
    if short:
        worst = min(short, key=lambda c: c["drain_ratio"])
        notes.append(
            f"{len(short)} of {link_fid['short_links']} links with too few windows to count as busy drained "
            f"at more than the tolerance plus one frame a backlog from their rate over all their backlogged "
            f"time (worst {worst['port']}: {worst['drain_ratio']:.3f} of its rate over {worst['backlogs']} "
            f"backlogs, {worst['allowed']:.1%} off allowed)")
    if not link_fid["failing_links"]:
        return notes
    short_notes = len(notes)
    failing = [c for c in link_fid["links"] if c["port"] in link_fid["failing_links"]]
    jittery = [c for c in failing if c["share"] < link_fid["min_share"]]
    slow = [c for c in failing if not c["drain_ratio_ok"]]
    if jittery:
        worst = jittery[0]
        notes.append(
            f"{len(jittery)} of {link_fid['busy_links']} busy links drained at their rate in fewer than "
            f"{link_fid['min_share']:.0%} of their backlogged windows (worst {worst['port']}: "
            f"{worst['share']:.1%} of {worst['windows']} {worst['window_ms']:.1f} ms windows, "
            f"{worst['slow_windows']} slow, {worst['fast_windows']} fast)")
    if slow:
        worst = max(slow, key=lambda c: abs(c["drain_ratio"] - 1))
        notes.append(
            f"{len(slow)} of {link_fid['busy_links']} busy links drained at more than "
            f"{link_fid['tolerance']:.0%} from their rate over all their backlogged windows (worst "
            f"{worst['port']}: {worst['drain_ratio']:.3f} of its rate)")
    if len(notes) == short_notes:
        # invalid for a reason neither rule names (kept so that the verdict cannot pass it by)
        notes.append(f"{len(failing)} of {link_fid['busy_links']} busy links failed the drain-rate rules")
    return notes


def _engine_notes(transport: dict, packets: dict) -> list[str]:
    notes = []
    if transport["agents"]["receiver_socket_drops"]:
        notes.append(f"the engine's receive sockets dropped {transport['agents']['receiver_socket_drops']} packets: "
                     f"the traffic agents could not keep up")
    if packets["resent_without_loss"]:
        # the times and queues that followed are the emulator's
        notes.append(f"{packets['retransmitted']} frames were resent though none was lost and no link changed: "
                     f"frames reordered or delayed inside the emulator set off go-back-N")
    return notes
