"""The one adapter from a pure Fabric to a Mininet Topo (used by the runner and by `mn --custom`);
the topologies themselves stay pure data and import it only when mn asks for a Topo."""
from __future__ import annotations

from mininet.topo import Topo

from topologies.model import Fabric


def to_mininet_topo(fabric: Fabric) -> Topo:
    topo = Topo()
    for s in fabric.switches:
        topo.addSwitch(s.name, dpid=f"{s.dpid:016x}")
    for h in fabric.hosts:
        topo.addHost(h.name, ip=f"{h.ip}/{h.prefix_len}", mac=h.mac)
    for link in fabric.links:
        topo.addLink(link.a, link.b, port1=link.a_port, port2=link.b_port)
    return topo
