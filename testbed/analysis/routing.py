"""How the routing policy spread traffic over equal-cost paths: per ECMP group (a switch's select
group, the ports its buckets output to), the bytes each member port drained during the traffic.

Where a flow lands depends on the group's hash and the flows' headers, not on how fast the
emulator ran, so the spread is a policy outcome: a policy that pins every flow to one uplink
leaves members unused whatever the machine did."""
from __future__ import annotations

import pandas as pd

# A member carried its share when it drained at least this many of the run's frames: below it,
# only control traffic (ARP, a probe) crossed it.
USED_FRAMES = 10


def ecmp_groups(groups_end: dict[str, list[dict]]) -> list[tuple[str, tuple[int, ...]]]:
    """Each switch's distinct equal-cost port sets (a select group of two or more ports): groups
    toward different destinations over the same uplinks are one set."""
    out = []
    for sw, groups in sorted(groups_end.items()):
        sets = {tuple(sorted(set(g["out_ports"]))) for g in groups}
        out += [(sw, ports) for ports in sorted(sets) if len(ports) > 1]
    return out


def ecmp_spread(groups_end: dict[str, list[dict]], links: pd.DataFrame, frame_bytes: int) -> dict | None:
    """The summary's routing.ecmp: over the equal-cost port sets that carried traffic (at least
    USED_FRAMES frames a member on average), the share of member ports that carried at least
    USED_FRAMES frames, and the busiest member's bytes against the set's mean (1: even; n: all
    on one of n). None without ECMP groups."""
    sets = ecmp_groups(groups_end)
    if not sets:
        return None
    moved = dict(zip(links["port"], links["bytes"])) if len(links) else {}
    floor = USED_FRAMES * frame_bytes
    rows = []
    for sw, ports in sets:
        b = [float(moved.get(f"{sw}-eth{p}", 0.0)) for p in ports]
        mean = sum(b) / len(b)
        if mean < floor:
            continue
        rows.append({"switch": sw, "ports": list(ports), "bytes": b, "used": sum(x >= floor for x in b),
                     "max_over_mean": max(b) / mean})
    members = sum(len(r["ports"]) for r in rows)
    return {"groups": len(sets), "loaded_groups": len(rows),
            "members_used_share": sum(r["used"] for r in rows) / members if members else None,
            "max_over_mean": max((r["max_over_mean"] for r in rows), default=None),
            "per_group": rows}
