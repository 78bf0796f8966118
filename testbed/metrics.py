"""The metrics regression testing tracks, as data: which summary paths a baseline keeps, how far
each may move the wrong way (Tolerance), and which are performance (an emulation that fell behind
degrades them by itself) and which policy (what the policy did). The scenario loader checks
[[expect]] and [[tolerance]] tables against them; testbed.regress.baselines judges runs with them."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    better: str        # "higher", "lower", "near" (a change either way is suspect) or "equal"
    rel: float = 0.0   # allowed relative worsening
    abs: float = 0.0   # and absolute
    # a time of the emulated fabric: baselines keep it, and runs are held to it, in hardware time
    # (the value / the run's dilation factor), so that runs at different D compare
    hardware_time: bool = False


# What a baseline keeps and how far each may move the wrong way before it is a regression.
TRACKED = {
    "collective.bound_ratio": Tolerance("higher", rel=0.10),
    "collective.mean_time_s": Tolerance("lower", rel=0.15, hardware_time=True),
    # latencies and queues vary most from run to run on a busy 2-core machine (measured: the
    # priority-mix RoCE p50 1.7 ms in one run, 2.0 ms in the next). Per class (each class the run
    # has): a latency over all classes moves with the mix of classes, not with the policy.
    # (abs in us of hardware time: 500 and 1000 us at version 1's D = 1)
    "latency_by_class_us.*.p50_us": Tolerance("lower", rel=1.0, abs=500, hardware_time=True),
    "latency_by_class_us.*.p99_us": Tolerance("lower", rel=1.0, abs=1000, hardware_time=True),
    "packets.lost": Tolerance("lower", rel=0.5, abs=5),
    # a frame reordered inside Open vSwitch now and then makes a lossless run NAK once and go back
    # over its window (measured on incast-pfc: 73-79 frames resent, none lost); losses and drops
    # are tracked on their own
    "packets.retransmitted": Tolerance("lower", rel=0.5, abs=100),
    "packets.timeouts": Tolerance("lower", rel=0.5, abs=2),
    "qos.queues.buffer_drops": Tolerance("lower", rel=0.5, abs=5),
    # marks and pauses follow the congestion: far fewer is as suspect as far more (a policy gone)
    "qos.ecn.marked": Tolerance("near", rel=0.5, abs=50),
    "qos.pfc.pauses": Tolerance("near", rel=0.9, abs=20),
    "qos.pfc.pauses_per_mb": Tolerance("near", rel=0.9, abs=1.0),
    # what a run's status summed up, each on its own: every iteration completed, no PFC deadlock,
    # every lost packet accounted for, every message with its bytes
    "qos.pfc.deadlocked": Tolerance("equal"),
    "collective.iterations_complete": Tolerance("equal"),
    "packets.unaccounted": Tolerance("lower"),
    "transport.messages_with_wrong_bytes": Tolerance("lower"),
    # incast-pfc's steady state (PFC blocking a victim) measured 0.43-0.51 from run to run
    "transport.steady_state.jain_index": Tolerance("higher", abs=0.1),
    "transport.steady_state.bottleneck_queue.p99_bytes": Tolerance("lower", rel=1.0, abs=50000),
}
# A run's status is derived from its checks, never a metric of its own: a baseline or an
# expectation names the check instead.
DERIVED = ("status",)


# Metrics an emulation that fell behind degrades by itself (times, rates, latencies, queues): the
# performance class. The rest count what the policy did (completions, marks, pauses, drops, losses),
# which a slow machine does not explain away: the policy class.
PERFORMANCE_PREFIXES = ("collective.", "latency", "goodput.", "fct_slowdown.", "background.",
                        "transport.steady_state.", "transport.fct", "links.", "jobs.", "training.",
                        # where the ECN tuning took each class follows the queues it saw, which an
                        # emulator behind makes (that it moved at all, qos.ecn_tuning.changes, does not)
                        "qos.ecn_tuning.classes.")
POLICY_PATHS = ("collective.iterations_complete",)
# where ECMP hashed the flows: the headers and the group decide it, not the emulator's speed
POLICY_PREFIXES = ("links.ecmp.",)


def metric_class(path: str) -> str:
    """"performance" or "policy" (see above)."""
    if path in POLICY_PATHS or path.startswith(POLICY_PREFIXES):
        return "policy"
    return "performance" if path.startswith(PERFORMANCE_PREFIXES) else "policy"


def tolerance_of(path: str, overrides: dict[str, tuple[float, float]] | None = None,
                 faithful: bool = True) -> Tolerance | None:
    """The tolerance of a tracked metric; overrides (a scenario's [[tolerance]]: path -> (rel, abs))
    widen or narrow it, its direction stays. A scenario's tolerance is its measured spread, which
    holds for runs as faithful as the ones it was measured over; a policy metric of a run that
    could not keep up (judged all the same) gets the wider of it and the default, which is set to
    catch a policy gone, not a machine slower than usual: a CI run whose bottleneck drained at 0.913
    of its rate marked 783 frames against incast-ecn's measured 832-910."""
    for pattern, tol in TRACKED.items():
        parts, want = path.split("."), pattern.split(".")
        if len(parts) == len(want) and all(w in ("*", p) for p, w in zip(parts, want)):
            if overrides and path in overrides:
                rel, abs_ = overrides[path]
                if not faithful:
                    rel, abs_ = max(rel, tol.rel), max(abs_, tol.abs)
                return Tolerance(tol.better, rel, abs_, tol.hardware_time)
            return tol
    return None
