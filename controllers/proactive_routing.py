"""Proactive routing: every route of the fabric installed when a switch connects, rerouted
when a link fails.

Routes come from testbed.fabric.routing (dimension-order on a torus, optionally with the dateline
virtual channels; ECMP select groups hashing the 5-tuple, or single shortest paths elsewhere),
rules from controllers.rules, for IPv4 and ARP, with no flooding and no packet-in. A barrier
per switch confirms its routes are in; when every switch has confirmed, the app logs
``routes_ready``. When a port goes down (OFPPortStatus) the app recomputes the routes without
that link, reinstalls only the destinations whose next hops changed (make before break: the new
rules replace the old in place, and only then are the old rules the new routes lack deleted, so
no frame meets a switch with no rule), and logs ``reroute_done`` once every affected switch has
confirmed with a barrier. With controller.reroute = false it leaves the routes as they are.

Under PFC's ingress rule table 0 tags every IPv4 frame with its ingress port
(controllers.rules.ingress_tags), and with isolated tenants it pushes each tenant host's VLAN
(testbed.fabric.tenants); the routes then go in table 1, each matching its destination's VLAN.

Its settings come from the resolved scenario the launcher hands every app: controller.routing
(dimension_order, shortest_path, ecmp, dmodk), controller.dateline with controller.vc1_dscp (the
workload's DSCP after the dateline), and qos.pfc_accounting (ingress: the tags).
"""
from __future__ import annotations

import time

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3, ofproto_v1_5

from controllers.api import EventRoutesChanged, RoutesReady, logged_errors
from controllers.flows import (add_select_group, barrier, delete_flow_strict, delete_flows, delete_groups,
                               install_ingress_tags, install_rule)
from controllers.rules import ROUTE_TABLE, ingress_tags, rules_for, tenant_tags
from testbed.fabric.qos import switch_port_slots
from testbed.fabric.routing import compute_routes
from testbed.fabric.tenants import host_vids


class ProactiveRouting(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION, ofproto_v1_5.OFP_VERSION]
    _EVENTS = [EventRoutesChanged]   # published on every reroute, to the apps that depend on routes

    def __init__(self, *args, testbed, **kwargs):
        super().__init__(*args, **kwargs)
        self.event_log = testbed.events
        self.fabric = testbed.fabric
        sc = testbed.scenario
        self.routing = sc.controller.routing
        self.dateline = sc.controller.dateline
        self.reroute = sc.controller.reroute
        # after the dateline the workload's DSCP moves to the second virtual channel's
        self.vc_dscp = {sc.workload.dscp: sc.controller.vc1_dscp} if self.dateline else {}
        # under the ingress rule every switch tags a frame with the port it entered by
        self.ingress_tags = sc.qos.pfc and sc.qos.pfc_accounting == "ingress"
        # tenants: every tenant host's frames tagged with its VLAN on entering the fabric
        self.vids = host_vids(sc)
        self.route_table = ROUTE_TABLE if self.ingress_tags or self.vids else 0
        self.slots = switch_port_slots(self.fabric) if self.ingress_tags else {}
        self.down_links: frozenset = frozenset()
        self.down_ports: set[tuple[str, int]] = set()
        self.routes = compute_routes(self.fabric, self.routing)
        self.switch_by_dpid = {s.dpid: s for s in self.fabric.switches}
        self.datapaths: dict[int, object] = {}
        self.groups: dict[int, dict[tuple[int, ...], int]] = {}
        self.readiness = RoutesReady(self.fabric, self.event_log)
        self.pending_reroute: dict[int, int] = {}   # dpid -> barrier xid of a reroute
        self.reroute_started_ns = 0
        self.event_log.write("app_started", app="proactive_routing", routing=self.routing,
                             dateline=self.dateline, ingress_tags=self.ingress_tags, tenant_vlans=len(set(self.vids.values())),
                             switches=len(self.fabric.switches),
                             routes=sum(len(r) for r in self.routes.values()))

    # -- installing ---------------------------------------------------------------------------

    def _group_for(self, dp, ports: tuple[int, ...]) -> int | None:
        if len(ports) < 2:
            return None
        groups = self.groups.setdefault(dp.id, {})
        if ports not in groups:
            groups[ports] = len(groups) + 1
            # Per-switch hash basis against polarization: a fixed function of the DPID.
            hashed = add_select_group(dp, groups[ports], ports, hash_basis=(dp.id * 0x9E3779B97F4A7C15) & 0xFFFFFFFF)
            if not hashed and len(groups) == 1:
                self.event_log.write("ecmp_without_l4_hash", dpid=dp.id,
                                     reason="switch negotiated OpenFlow 1.3: OVS hashes IPs only")
        return groups[ports]

    def _install_host(self, dp, switch: str, host: str) -> list:
        """The rules toward host on switch, installed (an add over an identical match replaces it)."""
        rules = rules_for(self.fabric, self.routes, switch, host, self.vc_dscp, self.vids)
        for rule in rules:
            install_rule(dp, rule, self._group_for(dp, rule.ports), table_id=self.route_table)
        return rules

    def _reinstall_host(self, dp, switch: str, host: str, old_routes) -> None:
        """Make before break: the new rules toward host replace the old ones of the same match in
        place (an add over an identical match and priority swaps its actions atomically), and only
        then the old ones the new routes no longer have are deleted. Deleting first, as a reroute
        once did, left a gap in which the switch had no rule and dropped what arrived."""
        old = rules_for(self.fabric, old_routes, switch, host, self.vc_dscp, self.vids)
        kept = {(r.priority, r.match) for r in self._install_host(dp, switch, host)}
        parser = dp.ofproto_parser
        for r in old:
            if (r.priority, r.match) not in kept:
                delete_flow_strict(dp, r.priority, parser.OFPMatch(**dict(r.match)), table_id=self.route_table)

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    @logged_errors
    def switch_features(self, ev):
        dp = ev.msg.datapath
        sw = self.switch_by_dpid.get(dp.id)
        if sw is None:
            self.event_log.write("unknown_switch", dpid=dp.id)
            return
        self.datapaths[dp.id] = dp
        self.event_log.write("switch_connected", switch=sw.name, dpid=dp.id, openflow=dp.ofproto.OFP_VERSION)
        delete_flows(dp)
        delete_groups(dp)
        self.groups.pop(dp.id, None)
        if self.route_table == ROUTE_TABLE:
            install_ingress_tags(dp, ingress_tags(self.fabric, sw.name, self.slots) if self.ingress_tags else [],
                                 then_table=ROUTE_TABLE, tenants=tenant_tags(self.fabric, sw.name, self.vids))
        n = sum(len(self._install_host(dp, sw.name, h.name)) for h in self.fabric.hosts)
        self.readiness.sent(dp)
        self.event_log.write("switch_rules_sent", switch=sw.name, rules=n)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    @logged_errors
    def barrier_reply(self, ev):
        dp = ev.msg.datapath
        if self.pending_reroute.get(dp.id) == ev.msg.xid:
            del self.pending_reroute[dp.id]
            if not self.pending_reroute:
                self.event_log.write("reroute_done", duration_ms=(time.monotonic_ns() - self.reroute_started_ns) / 1e6)
            return
        self.readiness.reply(ev)

    # -- failures -------------------------------------------------------------------------------

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    @logged_errors
    def port_status(self, ev):
        msg = ev.msg
        dp, ofp = msg.datapath, msg.datapath.ofproto
        sw = self.switch_by_dpid.get(dp.id)
        port = msg.desc.port_no
        if sw is None or port not in self.fabric.ports[sw.name]:
            return
        link = self.fabric.ports[sw.name][port][2]
        down = bool(msg.desc.state & ofp.OFPPS_LINK_DOWN) or bool(msg.desc.config & ofp.OFPPC_PORT_DOWN)
        self.event_log.write("port_status", switch=sw.name, port=port, link=link.name, down=down)
        # A link is down while either end reports it down; both ends' reports arrive separately.
        (self.down_ports.add if down else self.down_ports.discard)((sw.name, port))
        links = frozenset(l for l in self.fabric.links
                          if (l.a, l.a_port) in self.down_ports or (l.b, l.b_port) in self.down_ports)
        if links != self.down_links:
            self.down_links = links
            if self.reroute:
                self._reroute()
            else:
                self.event_log.write("reroute_skipped", down_links=sorted(l.name for l in links),
                                     why="controller.reroute = false")

    def _reroute(self) -> None:
        self.reroute_started_ns = time.monotonic_ns()
        old, self.routes = self.routes, compute_routes(self.fabric, self.routing, self.down_links)
        self.send_event_to_observers(EventRoutesChanged(self.routes, tuple(sorted(l.name for l in self.down_links))))
        changed = 0
        for dpid, dp in self.datapaths.items():
            sw = self.switch_by_dpid[dpid].name
            hosts = [h.name for h in self.fabric.hosts if self.routes[sw].get(h.name) != old[sw].get(h.name)]
            if not hosts:
                continue
            for host in hosts:
                self._reinstall_host(dp, sw, host, old)
            changed += len(hosts)
            self.pending_reroute[dpid] = barrier(dp)
        self.event_log.write("reroute_started", down_links=sorted(l.name for l in self.down_links),
                             switches=len(self.pending_reroute), routes_changed=changed)
        if not self.pending_reroute:
            self.event_log.write("reroute_done", duration_ms=(time.monotonic_ns() - self.reroute_started_ns) / 1e6)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    @logged_errors
    def error(self, ev):
        msg = ev.msg
        data = bytes(msg.data or b"")
        self.event_log.write("openflow_error", dpid=msg.datapath.id, type=msg.type, code=msg.code,
                             failed_msg_type=data[1] if len(data) > 1 else None, failed_msg=data[:64].hex())

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    @logged_errors
    def switch_gone(self, ev):
        dp = ev.datapath
        if dp.id is not None:
            self.readiness.gone(dp.id)
            self.datapaths.pop(dp.id, None)
            sw = self.switch_by_dpid.get(dp.id)
            self.event_log.write("switch_disconnected", dpid=dp.id, switch=sw.name if sw else None)
