"""What a tracked metric can physically be in a scenario, and whether a baseline's limits lie
inside it. Pure: from the scenario and its topology, no run.

A limit outside what the scenario can produce never fails, so it guards nothing: a queue's p99
cannot exceed its class buffer, a one-way latency through queues that drop when full cannot
exceed their buffers drained at line rate (a PFC class may be held by pauses, so only the run's
time limit bounds it there), Jain's index lies in [1/n, 1] over n flows, a count of packets lies
between none and all the workload sends, and a marked or paused count of zero (the policy gone)
must fall outside a "near" limit. `testbed baseline` leaves such a metric out of the baseline it
stores (its run-to-run spread, or a default tolerance, covers all it can take: it cannot tell a
regression), `testbed regress` warns about a stored one, and a unit test refuses every committed
baseline that has one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx

from testbed.fabric.qos import class_of_dscp, frame_bytes
from testbed.regress import baselines as regress
from testbed.scenario import Scenario, build_fabric
from testbed.traffic.workload import build_messages, flow_marking

INF = math.inf
# a run may beat the line-rate bound by its NIC's burst (testbed/analysis/bounds.py): well under this
BOUND_RATIO_MAX = 1.05


@dataclass(frozen=True)
class Range:
    lo: float
    hi: float
    why: str


def _packets(sc: Scenario) -> tuple[int, int]:
    """Data packets the workload sends (each message in payload-sized frames), and its flows."""
    _, msgs = build_messages(sc, build_fabric(sc.fabric))
    packets = sum(max(1, math.ceil(m.bytes / sc.workload.payload_bytes)) for m in msgs)
    return packets, len({(m.src, m.dst) for m in msgs})


def _class_index(sc: Scenario, name: str) -> int | None:
    return next((i for i, c in enumerate(sc.classes) if c.name == name), None)


def _buffer(sc: Scenario, cls: int) -> int:
    return sc.classes[cls].buffer_bytes or sc.fabric.queue_limit_bytes


def _data_classes(sc: Scenario) -> set[int]:
    """The classes a run's data frames queue in: each flow's (a job's or the bulk traffic's may
    differ from the collective's). Acknowledgements are left out: a header-only frame per
    `ack_every_packets` data frames, their class never holds the deepest queue of a run that sends
    data."""
    fabric = build_fabric(sc.fabric)
    cls = class_of_dscp(sc)
    return {cls[flow_marking(sc, fabric, m.src, m.tag)[0]] for m in build_messages(sc, fabric)[1] if m.bytes}


def max_latency_s(sc: Scenario, cls: int) -> float:
    """The longest a frame of class cls can take one way: through every switch egress of the
    longest shortest path between two hosts' switches, each holding a full buffer drained at the
    slowest line rate; a class PFC pauses can be held by the pauses, so only the run's time limit
    bounds it."""
    if sc.qos.pfc and sc.classes[cls].pfc:
        return sc.run.time_limit_s
    fabric = build_fabric(sc.fabric)
    g = nx.Graph(fabric.switch_graph())
    edge = sorted({h.switch for h in fabric.hosts})
    lengths = dict(nx.all_pairs_shortest_path_length(g))
    hops = max(lengths[a][b] for a in edge for b in edge) + 1
    return hops * _buffer(sc, cls) * 8 / (sc.fabric.bw_mbps * 1e6)


def overrides(sc: Scenario) -> dict[str, tuple[float, float]]:
    """The scenario's [[tolerance]] tables as regress.compare and tolerance_of take them."""
    return {t.metric: (t.rel, t.abs) for t in sc.tolerance}


def resolution(path: str, sc: Scenario) -> float:
    """The step a tracked metric moves in, 0 where it is continuous: a queue holds whole frames, so
    a percentile of its depth is a multiple of the frame. Two runs whose queues spent 0.9% and 1.1%
    of their time three frames deep have p99s a frame apart (hybrid-torus: 0-0.88% over 19 runs
    here, all at two frames; over 1% in a CI run), so no tolerance of such a metric is finer than
    its step (baselines.spread)."""
    if path == "transport.steady_state.bottleneck_queue.p99_bytes":
        return float(frame_bytes(sc))
    return 0.0


def physical_range(path: str, sc: Scenario) -> Range | None:
    """The values a tracked metric can take in this scenario, or None when this module knows no
    bound for it (which the unit test refuses: every tracked metric needs one)."""
    if path == "collective.bound_ratio":
        return Range(0.0, BOUND_RATIO_MAX, "no run beats the bound by more than its NIC burst")
    if path == "collective.mean_time_s":
        return Range(0.0, sc.run.time_limit_s, "a run longer than run.time_limit_s is stopped")
    if path == "collective.iterations_complete":
        return Range(0, sc.workload.iterations, "workload.iterations")
    if path.startswith("latency_by_class_us."):
        cls = _class_index(sc, path.split(".")[1])
        if cls is None:
            return None
        return Range(0.0, max_latency_s(sc, cls) * 1e6, "its buffers along the longest path at line rate, "
                     "or the time limit where PFC can hold it")
    if path == "transport.steady_state.bottleneck_queue.p99_bytes":
        # the bottleneck is whichever port and class queued deepest, in any class data queues in
        frame = frame_bytes(sc)
        whole = max(_buffer(sc, c) for c in _data_classes(sc)) // frame * frame
        return Range(0.0, whole, f"the whole frames of {frame} bytes the largest buffer of a class with data holds")
    if path == "transport.steady_state.jain_index":
        flows = _packets(sc)[1]
        return Range(1.0 / flows, 1.0, f"Jain's index over {flows} flows")
    if path in ("qos.ecn.marked", "packets.lost", "packets.retransmitted", "qos.queues.buffer_drops",
                "packets.unaccounted"):
        packets = _packets(sc)[0]
        return Range(0, packets if path != "packets.retransmitted" else INF, f"{packets} data packets sent")
    if path == "packets.timeouts":
        return Range(0, INF, "retransmission timeouts")
    if path == "qos.pfc.pauses":
        return Range(0, INF, "pauses")
    if path == "qos.pfc.pauses_per_mb":
        return Range(0, INF, "pauses per MB delivered")
    if path == "qos.pfc.deadlocked":
        return Range(False, True, "a flag")
    if path == "transport.messages_with_wrong_bytes":
        return Range(0, len(build_messages(sc, build_fabric(sc.fabric))[1]), "messages")
    return None


def unreachable(baseline: dict, sc: Scenario) -> list[str]:
    """Each tracked metric of the baseline whose limit (with the scenario's tolerances) lies where
    the scenario cannot take it, so that it could never fail: "metric: why"."""
    rows = regress.compare(_as_summary(baseline["metrics"]), baseline, overrides(sc))
    out = []
    for r in rows:
        tol = regress.tolerance_of(r["metric"], overrides(sc))
        rng = physical_range(r["metric"], sc)
        if rng is None:
            continue   # unbounded() names it
        lim = r["limit"]
        if tol.better == "lower" and not lim < rng.hi:
            out.append(f"{r['metric']}: limit {lim:.4g} is not below {rng.hi:.4g} ({rng.why}): it can never fail")
        elif tol.better == "higher" and not lim > rng.lo:
            out.append(f"{r['metric']}: limit {lim:.4g} is not above {rng.lo:.4g} ({rng.why}): it can never fail")
        elif tol.better == "near" and not (lim[1] < rng.hi and (lim[0] > rng.lo or r["baseline"] == rng.lo)):
            # (a baseline of none, marks or pauses where the policy asks for none, need only be
            # able to fail upwards)
            out.append(f"{r['metric']}: limits [{lim[0]:.4g}, {lim[1]:.4g}] are not inside ({rng.lo:.4g}, "
                       f"{rng.hi:.4g}) ({rng.why}): the policy gone, or doing everything, would pass")
        elif tol.better == "equal" and not rng.lo <= r["baseline"] <= rng.hi:
            out.append(f"{r['metric']}: baseline {r['baseline']} is outside [{rng.lo}, {rng.hi}] ({rng.why})")
    return out


def unbounded(baseline: dict, sc: Scenario) -> list[str]:
    """The baseline's tracked metrics this module knows no physical bound for."""
    return [p for p in baseline["metrics"] if regress.tolerance_of(p) is not None and physical_range(p, sc) is None]


def _as_summary(metrics: dict) -> dict:
    """A summary-shaped dict holding the baseline's own values, so compare() yields each limit."""
    out: dict = {}
    for path, v in metrics.items():
        node = out
        *parents, last = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = v
    return out


def finer_than_step(baseline: dict, sc: Scenario) -> list[str]:
    """Each tracked metric of the baseline whose tolerance (the scenario's, or the default) is finer
    than the step the metric moves in (resolution): a run a step away from the baseline fails it
    while what the metric summarises barely moved. "metric: why"."""
    out = []
    for path, base in baseline["metrics"].items():
        step = resolution(path, sc)
        tol = regress.tolerance_of(path, overrides(sc)) if step else None
        margin = max(abs(base) * tol.rel, tol.abs) if tol is not None else step
        if margin < step:
            out.append(f"{path}: tolerance {margin:.6g} is finer than its step {step:.6g}")
    return out
