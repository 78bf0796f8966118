"""Time dilation: a scenario describes the hardware fabric; a run emulates it D times slower.

dilate() is the one place that turns the hardware view (what the loader returns: every rate and
time the hardware's, D = 1) into the emulated scenario every process of a run reads (the plan,
the NIC data plane's timers, the fault schedule, the controller's policy changes):

- every link rate / D (bytes per second of the emulated fabric);
- every hardware time x D: propagation and switch latency, compute steps, the RTO, DCQCN's timers
  (and its rate steps / D, by its time_scale), the PFC response and watchdog, fault and policy-change
  times;
- bytes unchanged: MTU, messages, buffers, ECN and PFC thresholds, the bandwidth-delay product.

What stays wall-clock, because it is the emulator's and not the fabric's: run.time_limit_s,
routes_ready_timeout_s, stall_timeout_s (raised to twice the dilated RTO, so that a timeout is
never a stall), the switch agent's sampling and poll rates, the data plane's batch and lead, and
qos.deadlock_detect_ms (the testbed's own detector; the switch agent waits at least twice the
dilated PFC watchdog, AgentPlan.deadlock_after_ms, so that a cycle the watchdog breaks in hardware
time is not declared a deadlock first). Gupta et al. (NSDI'06) and VT-Mininet scale
the same way; REFERENCE.md lists what scales and what does not.
"""
from __future__ import annotations

import dataclasses

from testbed.scenario.schema import Scenario, WorkloadSpec

# compute a workload's planner reads, per type: pipeline multiplies fwd/bwd by time_scale, the
# traces only use time_scale, ddp and the parameter server their own fields
_TRACE_TYPES = ("chakra", "simai")


def _dilate_workload(w: WorkloadSpec, d: float) -> WorkloadSpec:
    return dataclasses.replace(
        w, fwd_compute_ms=w.fwd_compute_ms * d, bwd_compute_ms=w.bwd_compute_ms * d,
        ps_compute_ms=w.ps_compute_ms * d, ps_aggregate_ms=w.ps_aggregate_ms * d,
        time_scale=w.time_scale * d if w.type in _TRACE_TYPES else w.time_scale)


def dilate(sc: Scenario, factor: float, chosen_by: str, calibration: dict | None = None) -> Scenario:
    """The emulated scenario of hardware view sc at dilation factor (>= 1)."""
    if sc.dilation.factor != 1.0:
        raise ValueError(f"{sc.name} is dilated already ({sc.dilation.factor:g})")
    if not factor >= 1.0:
        raise ValueError(f"a dilation factor is >= 1, got {factor!r}")
    d = float(factor)
    f = sc.fabric
    fabric = dataclasses.replace(f, bw_mbps=f.bw_mbps / d, uplink_bw_mbps=f.uplink_bw_mbps / d,
                                 link_delay_ns=f.link_delay_ns * d, switch_latency_ns=f.switch_latency_ns * d)
    transport = dataclasses.replace(sc.transport, rto_ms=sc.transport.rto_ms * d,
                                    nak_interval_us=sc.transport.nak_interval_us * d)
    dcqcn = dataclasses.replace(sc.dcqcn, time_scale=sc.dcqcn.time_scale * d)
    qos = dataclasses.replace(sc.qos, pfc_watchdog_ms=sc.qos.pfc_watchdog_ms * d,
                              pfc_response_ns=sc.qos.pfc_response_ns * d)
    run = dataclasses.replace(sc.run, dilation=d,
                              stall_timeout_s=max(sc.run.stall_timeout_s, 2 * transport.rto_ms / 1e3))
    return dataclasses.replace(
        sc, fabric=fabric, transport=transport, dcqcn=dcqcn, qos=qos, run=run,
        workload=_dilate_workload(sc.workload, d),
        jobs=tuple(dataclasses.replace(j, workload=_dilate_workload(j.workload, d)) for j in sc.jobs),
        faults=tuple(dataclasses.replace(x, at_s=x.at_s * d) for x in sc.faults),
        policy_changes=tuple(dataclasses.replace(c, at_s=c.at_s * d) for c in sc.policy_changes),
        dilation=dataclasses.replace(sc.dilation, factor=d, chosen_by=chosen_by, calibration=calibration))

