"""2D/3D torus: one switch per coordinate, wraparound links in every dimension.

Identifiers from the coordinate c = (x, y[, z]) and host index i:
- DPID  = 0x10000000000 | x << 16 | y << 8 | z
- MAC   = 02:<i>:00:<x>:<y>:<z>  (locally administered)
- IP    = 10.<x>.<y>.<16 z + i + 1>/8  (every host on-link: the controller routes ARP too)
- switch ports: 1..H for hosts, then H + 1 + 2 d (toward +d) and H + 2 + 2 d (toward -d).
A dimension of size 2 gets two parallel links (its + and - ports), as a real torus does;
a dimension of size 1 gets none.

Also usable with plain Mininet: ``mn --custom topologies/torus.py --topo torus,4,4``.
"""
from __future__ import annotations

import itertools

# `mn --custom` execs this file without the project on sys.path: make the package importable.
if __name__ != "topologies.torus":
    import os as _os
    import sys as _sys
    _root = _os.path.dirname(_os.path.dirname(_os.path.abspath(_sys._getframe().f_code.co_filename)))
    if _root not in _sys.path:
        _sys.path.insert(0, _root)

from topologies.model import Fabric, Host, Link, Switch, coord_suffix

MAX_DIM_SIZE = 16
MAX_HOSTS_PER_SWITCH = 15


def plus_port(hosts_per_switch: int, dim: int) -> int:
    return hosts_per_switch + 1 + 2 * dim


def minus_port(hosts_per_switch: int, dim: int) -> int:
    return hosts_per_switch + 2 + 2 * dim


def torus(dims: tuple[int, ...] | list[int], hosts_per_switch: int = 1) -> Fabric:
    dims = tuple(int(d) for d in dims)
    if len(dims) not in (2, 3):
        raise ValueError(f"a torus has 2 or 3 dimensions, got {len(dims)}")
    if any(d < 1 or d > MAX_DIM_SIZE for d in dims):
        raise ValueError(f"torus dimension sizes must be 1..{MAX_DIM_SIZE}, got {dims}")
    if not 1 <= hosts_per_switch <= MAX_HOSTS_PER_SWITCH:
        raise ValueError(f"hosts_per_switch must be 1..{MAX_HOSTS_PER_SWITCH}")
    coords = list(itertools.product(*(range(d) for d in dims)))
    switches, hosts, links = [], [], []
    for c in coords:
        x, y, z = (c + (0,))[:3]
        sname = f"s{coord_suffix(c)}"
        switches.append(Switch(sname, (1 << 40) | (x << 16) | (y << 8) | z, c))
        for i in range(hosts_per_switch):
            hname = f"h{coord_suffix(c)}" + (f"_{i}" if i else "")
            hosts.append(Host(hname, f"02:{i:02x}:00:{x:02x}:{y:02x}:{z:02x}",
                              f"10.{x}.{y}.{16 * z + i + 1}", 8, c, sname, i + 1))
            links.append(Link(hname, 0, sname, i + 1))
    for c in coords:
        for d, size in enumerate(dims):
            if size < 2:
                continue
            nxt = list(c)
            nxt[d] = (c[d] + 1) % size
            links.append(Link(f"s{coord_suffix(c)}", plus_port(hosts_per_switch, d),
                              f"s{coord_suffix(tuple(nxt))}", minus_port(hosts_per_switch, d), dim=d))
    return Fabric("torus", dims, tuple(switches), tuple(hosts), tuple(links),
                  meta={"hosts_per_switch": hosts_per_switch})


def snake_order(fabric: Fabric) -> list[str]:
    """Hosts in a Hamiltonian cycle of the torus: consecutive hosts one switch hop apart
    (boustrophedon over the dimensions, closed by a wraparound link). Hosts sharing a
    switch are consecutive."""
    dims = fabric.dims

    def snake(ds: tuple[int, ...]) -> list[tuple[int, ...]]:
        if len(ds) == 1:
            return [(i,) for i in range(ds[0])]
        inner = snake(ds[1:])
        out = []
        for i in range(ds[0]):
            seq = inner if i % 2 == 0 else inner[::-1]
            out.extend((i,) + s for s in seq)
        return out

    by_coord: dict[tuple[int, ...], list[str]] = {}
    for h in fabric.hosts:
        by_coord.setdefault(h.coord, []).append(h.name)
    return [name for c in snake(dims) for name in by_coord[c]]


def _mininet_torus(*dims: int, hosts: int = 1):
    # Imported here, not at the top, so the topology stays pure data for everything but mn.
    from topologies.mn_adapter import to_mininet_topo
    return to_mininet_topo(torus(dims, hosts))



topos = {"torus": _mininet_torus}
