"""Flow helpers shared by the apps (as simple_switch_13's add_flow)."""
from __future__ import annotations

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ROUTE_PRIORITY = 100


def add_flow(dp, priority: int, match, actions, table_id: int = 0) -> None:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
    dp.send_msg(parser.OFPFlowMod(datapath=dp, table_id=table_id, priority=priority,
                                  match=match, instructions=inst))


def delete_all_flows(dp) -> None:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    dp.send_msg(parser.OFPFlowMod(datapath=dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                                  out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY, match=parser.OFPMatch()))


def barrier(dp) -> int:
    """Send a barrier request; its reply (same xid) proves every earlier message was applied."""
    req = dp.ofproto_parser.OFPBarrierRequest(dp)
    dp.set_xid(req)
    dp.send_msg(req)
    return req.xid


def install_route(dp, ip: str, out_port: int) -> None:
    """IPv4 and ARP toward one host: ARP is routed by target address, never flooded."""
    parser = dp.ofproto_parser
    actions = [parser.OFPActionOutput(out_port)]
    add_flow(dp, ROUTE_PRIORITY, parser.OFPMatch(eth_type=ETH_TYPE_IPV4, ipv4_dst=ip), actions)
    add_flow(dp, ROUTE_PRIORITY, parser.OFPMatch(eth_type=ETH_TYPE_ARP, arp_tpa=ip), actions)
