"""Proactive routing: every route of the fabric installed when a switch connects.

Dimension-order routes on a torus, shortest paths otherwise (testbed.routing computes them),
for IPv4 and ARP, with no flooding and no packet-in. A barrier per switch confirms its routes
are in; when every switch of the fabric has confirmed, the app logs ``routes_ready``.
"""
from __future__ import annotations

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3

from controllers.flows import barrier, delete_all_flows, install_route
from testbed.routing import compute_routes


class ProactiveRouting(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, testbed, **kwargs):
        super().__init__(*args, **kwargs)
        self.event_log = testbed.events
        self.fabric = testbed.fabric
        self.routing = testbed.params.get("routing", "dimension_order" if self.fabric.kind == "torus"
                                          else "shortest_path")
        self.routes = compute_routes(self.fabric, self.routing)
        self.switch_by_dpid = {s.dpid: s for s in self.fabric.switches}
        self.barrier_xid: dict[int, int] = {}
        self.ready: set[int] = set()
        self.event_log.write("app_started", app="proactive_routing", routing=self.routing,
                          switches=len(self.fabric.switches),
                          routes=sum(len(r) for r in self.routes.values()))

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev):
        dp = ev.msg.datapath
        sw = self.switch_by_dpid.get(dp.id)
        if sw is None:
            self.event_log.write("unknown_switch", dpid=dp.id)
            return
        self.event_log.write("switch_connected", switch=sw.name, dpid=dp.id)
        delete_all_flows(dp)
        for host_name, port in self.routes[sw.name].items():
            install_route(dp, self.fabric.host_by_name[host_name].ip, port)
        self.barrier_xid[dp.id] = barrier(dp)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def barrier_reply(self, ev):
        dp = ev.msg.datapath
        if self.barrier_xid.get(dp.id) != ev.msg.xid or dp.id in self.ready:
            return
        self.ready.add(dp.id)
        sw = self.switch_by_dpid[dp.id]
        self.event_log.write("switch_ready", switch=sw.name, flows=2 * len(self.routes[sw.name]))
        if len(self.ready) == len(self.switch_by_dpid):
            self.event_log.write("routes_ready", switches=len(self.ready))

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def error(self, ev):
        msg = ev.msg
        self.event_log.write("openflow_error", dpid=msg.datapath.id, type=msg.type, code=msg.code)

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def switch_gone(self, ev):
        dp = ev.datapath
        if dp.id is not None:
            self.ready.discard(dp.id)
            sw = self.switch_by_dpid.get(dp.id)
            self.event_log.write("switch_disconnected", dpid=dp.id, switch=sw.name if sw else None)
