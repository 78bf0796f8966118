"""Flow rules of the routing apps, as pure data (no os-ken here), so they can be tested
without a switch. The apps turn them into OpenFlow messages (controllers/flows.py).

Per destination host, a switch gets one IPv4 and one ARP rule toward its next hop(s); several
next hops become an ECMP select group. With the torus dateline on, the lossless classes get
extra rules that carry the virtual channel in the DSCP (class DSCP on channel 0, its channel-1
DSCP after a dateline), decided by testbed.fabric.routing.next_vc.

Under PFC's ingress rule every switch first tags each IPv4 frame with where it entered
(ingress_tags): the Ethernet source becomes TAG_MAC0:TAG_MAC1, the ingress port's slot in the port
program's maps, 0, and the frame's DSCP as it arrived (before any dateline rewrite); the routes
then live in ROUTE_TABLE. The egress port's program reads the tag and puts the source back
(testbed/fabric/bpf/port_qos.bpf.c), so no tagged frame leaves a switch.
"""
from __future__ import annotations

from dataclasses import dataclass

from testbed.fabric.qos import switch_port_slots
from testbed.fabric.routing import RouteTable, next_vc
from testbed.fabric.tenants import OFPVID_NONE, OFPVID_PRESENT
from topologies.model import Fabric

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ROUTE_PRIORITY = 100
VC_PRIORITY = 110
VC_IN_PORT_PRIORITY = 120
TAG_PRIORITY = 10
TAG_MAC0, TAG_MAC1 = 0x7E, 0xCC  # testbed/fabric/bpf/port_qos.bpf.c
TAG_TABLE, ROUTE_TABLE = 0, 1


@dataclass(frozen=True)
class Rule:
    priority: int
    match: tuple[tuple[str, object], ...]   # OpenFlow match fields, os-ken names
    set_dscp: int | None                     # rewrite before output, or None
    ports: tuple[int, ...]                   # one port, or several for an ECMP group
    cookie: int                              # the destination host: its rules change together
    pop_vlan: bool = False                   # the last hop toward a tenant's host: its tag comes off


@dataclass(frozen=True)
class IngressTag:
    in_port: int
    eth_src: str   # the tag, its low six bits to take the frame's DSCP


def ingress_tags(fabric: Fabric, switch: str, slots: dict[tuple[str, int], int] | None = None) -> list[IngressTag]:
    """One tag rule per port of ``switch``: its slot (testbed.fabric.qos.switch_port_slots, computed once
    by a caller tagging every switch) in the source."""
    slots = slots or switch_port_slots(fabric)
    return [IngressTag(port, f"{TAG_MAC0:02x}:{TAG_MAC1:02x}:{slots[(switch, port)] >> 8:02x}:"
                             f"{slots[(switch, port)] & 0xFF:02x}:00:00")
            for port in sorted(fabric.ports[switch])]


def host_cookie(fabric: Fabric, host: str) -> int:
    return 1 + [h.name for h in fabric.hosts].index(host)


@dataclass(frozen=True)
class TenantTag:
    in_port: int
    vid: int       # the VLAN its host's frames get on entering the fabric


def tenant_tags(fabric: Fabric, switch: str, vids: dict[str, int]) -> list[TenantTag]:
    """The ports of ``switch`` that face a tenant's host, with its tenant's VLAN."""
    return [TenantTag(port, vids[peer]) for port, (peer, _, _) in sorted(fabric.ports[switch].items())
            if peer in vids]


def rules_for(fabric: Fabric, table: RouteTable, switch: str, host: str,
              vc_dscp: dict[int, int] | None = None, vids: dict[str, int] | None = None) -> list[Rule]:
    """Every rule ``switch`` needs toward ``host`` (none when it has no route). With tenants
    (vids: tenant host -> VLAN, testbed.fabric.tenants) every rule also matches the destination's
    VLAN, untagged for a host of no tenant, so another tenant's frames match none."""
    ports = table[switch].get(host)
    if not ports:
        return []
    ip = fabric.host_by_name[host].ip
    cookie = host_cookie(fabric, host)
    tag: tuple = ()
    pop = False
    if vids:
        tag = (("vlan_vid", OFPVID_PRESENT | vids[host] if host in vids else OFPVID_NONE),)
        pop = host in vids and len(ports) == 1 and fabric.ports[switch][ports[0]][0] == host
    out = [Rule(ROUTE_PRIORITY, (("eth_type", ETH_TYPE_IPV4), ("ipv4_dst", ip)) + tag, None, ports, cookie, pop),
           Rule(ROUTE_PRIORITY, (("eth_type", ETH_TYPE_ARP), ("arp_tpa", ip)) + tag, None, ports, cookie, pop)]
    if not vc_dscp or fabric.kind != "torus":
        return out
    if len(ports) != 1:
        raise ValueError("the dateline scheme needs single-path (dimension-order) routes")
    (port,) = ports
    out_dim = fabric.ports[switch][port][2].dim
    same_dim_in = [p for p, (_, _, link) in fabric.ports[switch].items()
                   if out_dim is not None and link.dim == out_dim and p != port]
    for c0, c1 in vc_dscp.items():
        channel = (c0, c1)
        for vc in (0, 1):
            base = (("eth_type", ETH_TYPE_IPV4), ("ipv4_dst", ip), ("ip_dscp", channel[vc])) + tag
            nvc = next_vc(fabric, switch, None, port, vc, dateline=True)
            out.append(Rule(VC_PRIORITY, base, channel[nvc] if channel[nvc] != channel[vc] else None,
                            ports, cookie, pop))
            for q in same_dim_in:
                nvc = next_vc(fabric, switch, q, port, vc, dateline=True)
                out.append(Rule(VC_IN_PORT_PRIORITY, (("in_port", q),) + base,
                                channel[nvc] if channel[nvc] != channel[vc] else None, ports, cookie, pop))
    return out
