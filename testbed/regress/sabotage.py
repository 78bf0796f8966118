"""Sabotages: each breaks one policy of a suite scenario with `--set`, and the suite must call the
run regressed. `testbed regress --sabotage` (make sabotage) runs them: a sabotage the suite passes
is a policy the suite does not guard."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sabotage:
    name: str
    scenario: str
    sets: tuple[str, ...]
    breaks: str      # the policy it breaks, and what the scenario's expectations should see


SABOTAGES = (
    Sabotage("ecn-off", "incast-ecn", ("qos.ecn=false",),
             "ECN marking at the congested port: no frame is marked"),
    Sabotage("dcqcn-off", "dcqcn-incast", ("transport.cc=none",),
             "DCQCN at the senders: no CNP, no rate cut, the queue far above K"),
    Sabotage("pfc-off", "incast-pfc", ("qos.pfc=false",),
             "PFC on the lossless class: no pause, the incast overflows the buffer"),
    Sabotage("priorities-swapped", "priority-mix", ("workload.dscp=0", "workload.bulk_dscp=26"),
             "strict priority: the collective runs in the bulk class and the bulk traffic in the high one"),
    Sabotage("route-into-failed-link", "linkfail-torus3d", ("controller.reroute=false",),
             "failover: the routes stay on the failed link"),
    Sabotage("isolation-off", "two-jobs-fattree", ("controller.tenant_isolation=false",),
             "tenant isolation: each tenant's hosts reach the other's"),
    Sabotage("watchdog-off", "pfc-watchdog-torus", ("qos.pfc_watchdog_ms=0",),
             "the PFC watchdog: the cyclic pauses deadlock the ring"),
    Sabotage("ecmp-off", "ps-fattree", ("controller.routing=shortest_path",),
             "ECMP: one path a destination, no select group spreads the flows over the uplinks"),
    Sabotage("ecn-tuning-off", "ecn-tuning-incast", ("controller.ecn_tuning=off",),
             "ECN tuning: no app moves the thresholds, which stay 800 KB deep"),
    Sabotage("ecn-tuning-pinned", "ecn-tuning-incast",
             ("controller.ecn_tuning_kmin_bytes=[800000, 800000]", "controller.ecn_tuning_kmax_bytes=[800000, 800000]"),
             "ECN tuning held to the deep thresholds it starts from: it can move Pmax only"),
)


def by_name(names: list[str]) -> list[Sabotage]:
    """The named sabotages (all of them for none); an unknown name is bad input."""
    from testbed.errors import InputError
    known = {s.name: s for s in SABOTAGES}
    for n in names:
        if n not in known:
            raise InputError("--sabotage", n, f"no such sabotage; expected one of {', '.join(known)}")
    return [known[n] for n in names] if names else list(SABOTAGES)
