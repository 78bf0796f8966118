"""The data model every topology produces: switches, hosts, links and their ports.

Naming (fixed here for everyone, as Mininet's net.py does for h1/s1):
- a switch at coordinate (x, y[, z]) is ``s<x>_<y>[_<z>]``; its ports are ``<switch>-eth<port>``;
- host i attached to that switch is ``h<x>_<y>[_<z>]`` (i = 0) or ``h<x>_<y>[_<z>]_<i>``;
  its only port is ``<host>-eth0``;
- port numbers on a switch are OpenFlow port numbers (Mininet passes them as ofport_request).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property

MODEL_VERSION = 1


@dataclass(frozen=True)
class Switch:
    name: str
    dpid: int
    coord: tuple[int, ...]


@dataclass(frozen=True)
class Host:
    name: str
    mac: str
    ip: str
    prefix_len: int
    coord: tuple[int, ...]
    switch: str
    switch_port: int

    @property
    def intf(self) -> str:
        return f"{self.name}-eth0"


@dataclass(frozen=True)
class Link:
    """A full-duplex link. For torus links, ``a`` reaches ``b`` in the + direction of ``dim``.
    ``bw_mbps`` None: a topology leaves the rate to the scenario (Fabric.with_link_rate fills it)."""
    a: str
    a_port: int
    b: str
    b_port: int
    dim: int | None = None
    bw_mbps: float | None = None

    @property
    def name(self) -> str:
        return f"{self.a}-{self.b}"


@dataclass(frozen=True)
class Fabric:
    kind: str
    dims: tuple[int, ...]
    switches: tuple[Switch, ...]
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @cached_property
    def switch_by_name(self) -> dict[str, Switch]:
        return {s.name: s for s in self.switches}

    @cached_property
    def host_by_name(self) -> dict[str, Host]:
        return {h.name: h for h in self.hosts}

    @cached_property
    def ports(self) -> dict[str, dict[int, tuple[str, int, Link]]]:
        """switch name -> {port: (peer node, peer port, link)} for every switch port."""
        out: dict[str, dict[int, tuple[str, int, Link]]] = {s.name: {} for s in self.switches}
        for link in self.links:
            for node, port, peer, peer_port in ((link.a, link.a_port, link.b, link.b_port),
                                                (link.b, link.b_port, link.a, link.a_port)):
                if node in out:
                    if port in out[node]:
                        raise ValueError(f"port {port} of {node} used twice")
                    out[node][port] = (peer, peer_port, link)
        return out

    def switch_graph(self):
        """Switches only, as a networkx MultiGraph; one edge per switch-to-switch link."""
        import networkx as nx  # here, so `mn --custom` (Debian's python3, no networkx) can load topologies
        g = nx.MultiGraph()
        g.add_nodes_from(s.name for s in self.switches)
        for link in self.links:
            if link.a in self.switch_by_name and link.b in self.switch_by_name:
                g.add_edge(link.a, link.b, key=(link.a, link.a_port), link=link)
        return g

    def with_link_rate(self, bw_mbps: float) -> "Fabric":
        """This fabric with every link's rate concrete: bw_mbps where the topology left it open."""
        return replace(self, links=tuple(l if l.bw_mbps is not None else replace(l, bw_mbps=bw_mbps)
                                         for l in self.links))

    def link_by_name(self, name: str) -> Link:
        """A link by "<a>-<b>" (either order); several parallel links: the first."""
        for link in self.links:
            if name in (f"{link.a}-{link.b}", f"{link.b}-{link.a}"):
                return link
        raise KeyError(name)

    def intf_name(self, node: str, port: int) -> str:
        return f"{node}-eth{0 if node in self.host_by_name else port}"

    def interfaces(self) -> list[tuple[str, str]]:
        """(node, interface name) for every link end."""
        out = []
        for link in self.links:
            for node, port in ((link.a, link.a_port), (link.b, link.b_port)):
                out.append((node, f"{node}-eth{0 if node in self.host_by_name else port}"))
        return out

    def to_json(self) -> str:
        d = asdict(self)
        d["model_version"] = MODEL_VERSION
        return json.dumps(d, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Fabric":
        d = json.loads(text)
        if d.pop("model_version", None) != MODEL_VERSION:
            raise ValueError("fabric description has another model version")
        return cls(
            kind=d["kind"], dims=tuple(d["dims"]), meta=d["meta"],
            switches=tuple(Switch(s["name"], s["dpid"], tuple(s["coord"])) for s in d["switches"]),
            hosts=tuple(Host(**{**h, "coord": tuple(h["coord"])}) for h in d["hosts"]),
            links=tuple(Link(**l) for l in d["links"]),
        )


def coord_suffix(coord: tuple[int, ...]) -> str:
    return "_".join(str(c) for c in coord)
