"""Tenants on one fabric, kept apart as the users' fabrics keep them, pure.

Each tenant of a scenario's [[jobs]] gets an 802.1Q VLAN: its hosts' frames are tagged where they
enter the fabric (the edge switch's port from the host), every route matches the destination's
VLAN, and the last hop pops the tag toward the host. A frame for another tenant's host matches no
route and is dropped at the first switch. Hosts in no job carry no tag and reach only each other.

VXLAN is what the users' fabrics run; here Open vSwitch's userspace datapath would need a routed
underlay (an IP and a route per bridge) to terminate tunnels on the switches, which the emulated
fabric does not have: VLANs give the same isolation on the same switches, and say so in every
result (mechanisms.tenant_isolation).

Tenants and traffic classes share the port program's MAX_CLASSES (8) classes: a tenant's jobs
send in DSCPs of classes no other tenant uses (the loader checks), so a class's weight or priority
is that tenant's share of every port and host NIC.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from testbed.scenario.schema import Scenario

VID_BASE = 100
OFPVID_PRESENT = 0x1000    # OpenFlow's "a tag is present" bit in vlan_vid (matches and set-fields)
OFPVID_NONE = 0x0000       # matches frames with no tag


def tenants(sc: Scenario) -> list[str]:
    """The scenario's tenants, in the order their first job appears."""
    return list(dict.fromkeys(j.tenant for j in sc.jobs))


def isolated(sc: Scenario) -> bool:
    return len(tenants(sc)) > 1 and sc.controller.tenant_isolation


def tenant_vids(sc: Scenario) -> dict[str, int]:
    """Each tenant's VLAN id."""
    return {t: VID_BASE + i for i, t in enumerate(tenants(sc))}


def host_vids(sc: Scenario) -> dict[str, int]:
    """Each tenant host's VLAN id (none when tenants are not isolated)."""
    if not isolated(sc):
        return {}
    vids = tenant_vids(sc)
    return {h: vids[j.tenant] for j in sc.jobs for h in j.hosts}


def mechanism(sc: Scenario) -> str:
    if len(tenants(sc)) < 2:
        return "none (one tenant)"
    if not sc.controller.tenant_isolation:
        return "off (controller.tenant_isolation = false)"
    return f"802.1Q VLAN per tenant ({', '.join(f'{t}: {v}' for t, v in tenant_vids(sc).items())})"
