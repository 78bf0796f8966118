"""Two-tier leaf-spine: every leaf connects to every spine once.

Identifiers: leaf ``leaf<i>``, spine ``spine<j>``, host m of leaf i ``h<i>_<m>``;
DPID = 4 << 40 | i (leaves), 5 << 40 | j (spines); host MAC 02:00:01:00:<i>:<m>,
IP 10.<i>.0.<m + 1>/8; leaf ports 1..H hosts, H + 1 + j up to spine j; spine port 1 + i down to leaf i.
Host links run at the fabric rate; uplinks at ``uplink_bw_mbps`` (None: the fabric rate), so the
oversubscription is hosts_per_leaf x host rate / (spines x uplink rate).

Also usable with plain Mininet: ``mn --custom topologies/leafspine.py --topo leafspine,4,2,4``.
"""
from __future__ import annotations

if __name__ != "topologies.leafspine":
    import os as _os
    import sys as _sys
    _root = _os.path.dirname(_os.path.dirname(_os.path.abspath(_sys._getframe().f_code.co_filename)))
    if _root not in _sys.path:
        _sys.path.insert(0, _root)

from topologies.model import Fabric, Host, Link, Switch

MAX_LEAVES, MAX_SPINES, MAX_HOSTS_PER_LEAF = 64, 32, 64


def leafspine(leaves: int, spines: int, hosts_per_leaf: int, uplink_bw_mbps: float | None = None) -> Fabric:
    if not (1 <= leaves <= MAX_LEAVES and 1 <= spines <= MAX_SPINES and 1 <= hosts_per_leaf <= MAX_HOSTS_PER_LEAF):
        raise ValueError(f"leaf-spine sizes out of range: leaves 1..{MAX_LEAVES}, spines 1..{MAX_SPINES}, "
                         f"hosts per leaf 1..{MAX_HOSTS_PER_LEAF}")
    switches, hosts, links = [], [], []
    for i in range(leaves):
        switches.append(Switch(f"leaf{i}", (4 << 40) | i, (1, i)))
    for j in range(spines):
        switches.append(Switch(f"spine{j}", (5 << 40) | j, (2, j)))
    for i in range(leaves):
        for m in range(hosts_per_leaf):
            name = f"h{i}_{m}"
            hosts.append(Host(name, f"02:00:01:00:{i:02x}:{m:02x}", f"10.{i}.0.{m + 1}", 8, (i, m), f"leaf{i}", m + 1))
            links.append(Link(name, 0, f"leaf{i}", m + 1))
        for j in range(spines):
            links.append(Link(f"leaf{i}", hosts_per_leaf + 1 + j, f"spine{j}", 1 + i, bw_mbps=uplink_bw_mbps))
    return Fabric("leafspine", (leaves, spines), tuple(switches), tuple(hosts), tuple(links),
                  meta={"hosts_per_leaf": hosts_per_leaf, "uplink_bw_mbps": uplink_bw_mbps})


def _mininet_leafspine(leaves: int = 4, spines: int = 2, hosts_per_leaf: int = 4):
    from topologies.mn_adapter import to_mininet_topo
    return to_mininet_topo(leafspine(leaves, spines, hosts_per_leaf))


topos = {"leafspine": _mininet_leafspine}
