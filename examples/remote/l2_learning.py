"""An L2 learning switch: the classic first OpenFlow controller, as an os-ken app to start yourself
for a scenario's controller.remote (docs/controller-apps.md). os-ken 4.x ships no sample apps (Ryu's
simple_switch_13 did this); this one is the testbed's, written for the contract's test.

Each switch sends the frames it has no rule for to the controller (a table-miss rule). The app
learns which port each source MAC came in by; a frame to a MAC it knows goes out that port, and a
rule for that (in port, source, destination) is installed so the next ones never come up; a frame
to a MAC it does not know is flooded. Flooding needs a loop-free fabric (a leaf-spine with one spine,
a tree): on a torus or a fat-tree a flood comes back.

    python -m controllers.launcher --port 6653 --app-file examples/remote/l2_learning.py
"""
from __future__ import annotations

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib.packet import ethernet, packet
from os_ken.ofproto import ofproto_v1_3


class L2Learning(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.port_of: dict[int, dict[str, int]] = {}   # dpid -> MAC -> port

    def _add_flow(self, dp, priority: int, match, actions) -> None:
        ofp, parser = dp.ofproto, dp.ofproto_parser
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
        dp.send_msg(parser.OFPFlowMod(datapath=dp, priority=priority, match=match, instructions=inst))

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev):
        dp = ev.msg.datapath
        ofp, parser = dp.ofproto, dp.ofproto_parser
        # what no rule matches comes up whole (no buffering in the switch)
        self._add_flow(dp, 0, parser.OFPMatch(), [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)])

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        ofp, parser = dp.ofproto, dp.ofproto_parser
        in_port = msg.match["in_port"]
        eth = packet.Packet(msg.data).get_protocols(ethernet.ethernet)[0]
        learned = self.port_of.setdefault(dp.id, {})
        learned[eth.src] = in_port
        out = learned.get(eth.dst, ofp.OFPP_FLOOD)
        actions = [parser.OFPActionOutput(out)]
        if out != ofp.OFPP_FLOOD:
            self._add_flow(dp, 1, parser.OFPMatch(in_port=in_port, eth_dst=eth.dst, eth_src=eth.src), actions)
        data = msg.data if msg.buffer_id == ofp.OFP_NO_BUFFER else None
        dp.send_msg(parser.OFPPacketOut(datapath=dp, buffer_id=msg.buffer_id, in_port=in_port, actions=actions,
                                        data=data))
