"""k-ary fat-tree (Al-Fares et al.): k pods of k/2 edge and k/2 aggregation switches,
(k/2)^2 core switches, k/2 hosts per edge switch: 5k^2/4 switches, k^3/4 hosts.

Identifiers from (pod, tier, index):
- edge ``e<p>_<i>``, aggregation ``a<p>_<i>``, core ``c<i>_<j>`` (core c<i>_<j> connects to
  aggregation switch i of every pod); host m of edge e<p>_<i> is ``h<p>_<i>_<m>``
- DPID = tier << 40 | p << 16 | i << 8 | j (tier 1 edge, 2 aggregation, 3 core)
- host MAC 02:00:00:<p>:<i>:<m>, IP 10.<p>.<i>.<m + 2>/8
- edge ports 1..k/2 hosts, k/2 + 1 + j up to a<p>_<j>; aggregation ports 1 + j down to e<p>_<j>,
  k/2 + 1 + m up to c<i>_<m>; core c<i>_<m> port 1 + p down to a<p>_<i>.

Also usable with plain Mininet: ``mn --custom topologies/fattree.py --topo fattree,4``.
"""
from __future__ import annotations

# `mn --custom` execs this file without the project on sys.path: make the package importable.
if __name__ != "topologies.fattree":
    import os as _os
    import sys as _sys
    _root = _os.path.dirname(_os.path.dirname(_os.path.abspath(_sys._getframe().f_code.co_filename)))
    if _root not in _sys.path:
        _sys.path.insert(0, _root)

from topologies.model import Fabric, Host, Link, Switch

MAX_K = 16


def fattree(k: int) -> Fabric:
    if k < 2 or k % 2 or k > MAX_K:
        raise ValueError(f"a fat-tree needs an even k in 2..{MAX_K}, got {k}")
    half = k // 2
    switches, hosts, links = [], [], []
    for p in range(k):
        for i in range(half):
            switches.append(Switch(f"e{p}_{i}", (1 << 40) | (p << 16) | (i << 8), (p, 1, i)))
            switches.append(Switch(f"a{p}_{i}", (2 << 40) | (p << 16) | (i << 8), (p, 2, i)))
    for i in range(half):
        for j in range(half):
            switches.append(Switch(f"c{i}_{j}", (3 << 40) | (i << 8) | j, (-1, 3, i, j)))
    for p in range(k):
        for i in range(half):
            edge = f"e{p}_{i}"
            for m in range(half):
                name = f"h{p}_{i}_{m}"
                hosts.append(Host(name, f"02:00:00:{p:02x}:{i:02x}:{m:02x}", f"10.{p}.{i}.{m + 2}", 8,
                                  (p, i, m), edge, m + 1))
                links.append(Link(name, 0, edge, m + 1))
            for j in range(half):
                links.append(Link(edge, half + 1 + j, f"a{p}_{j}", 1 + i))
        for i in range(half):
            for m in range(half):
                links.append(Link(f"a{p}_{i}", half + 1 + m, f"c{i}_{m}", 1 + p))
    return Fabric("fattree", (k,), tuple(switches), tuple(hosts), tuple(links), meta={"k": k})


def _mininet_fattree(k: int = 4):
    from topologies.mn_adapter import to_mininet_topo
    return to_mininet_topo(fattree(k))


topos = {"fattree": _mininet_fattree}
