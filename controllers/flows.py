"""OpenFlow helpers shared by the apps (as simple_switch_13's add_flow), for OpenFlow 1.3 and 1.5."""
from __future__ import annotations

import struct

from os_ken.ofproto import ofproto_v1_5

from controllers.rules import ETH_TYPE_IPV4, TAG_PRIORITY, TAG_TABLE, IngressTag, Rule, TenantTag
from testbed.fabric.tenants import OFPVID_PRESENT

ETH_TYPE_8021Q = 0x8100

# Open vSwitch hashes only IPs (and TCP/SCTP ports) in a plain select group, which would put
# every RoCE flow (UDP) between two hosts on one path. Its Netronome group property (an
# OpenFlow 1.5 experimenter property, OVS Documentation/group-selection-method-property.txt)
# selects "hash" over named fields: the 5-tuple here, so each queue pair's UDP source port
# gives it its own path, as RoCE NICs intend.
NTR_VENDOR_ID = 0x0000154D
NTRT_SELECTION_METHOD = 1
OFPGPT_EXPERIMENTER = 0xFFFF
# Hashed fields as OXM TLVs whose values are full masks: ipv4 src/dst, udp src/dst, ip_proto.
_HASH_FIELDS = (struct.pack("!I4s", 0x80001604, b"\xff" * 4) + struct.pack("!I4s", 0x80001804, b"\xff" * 4)
                + struct.pack("!I2s", 0x80001E02, b"\xff" * 2) + struct.pack("!I2s", 0x80002002, b"\xff" * 2)
                + struct.pack("!I1s", 0x80001401, b"\xff"))


class NtrSelectionMethod:
    """OVS's group property selecting the bucket by a hash of named fields (struct
    ntr_group_prop_selection_method); os-ken has no class for it, its experimenter property
    carries only 32-bit words and these TLVs are 33 bytes."""

    def __init__(self, method: bytes = b"hash", fields: bytes = _HASH_FIELDS, param: int = 0):
        self.method, self.fields, self.param = method, fields, param

    def serialize(self) -> bytearray:
        body = struct.pack("!IIxxxx16sQ", NTR_VENDOR_ID, NTRT_SELECTION_METHOD, self.method, self.param) + self.fields
        length = 4 + len(body)
        out = bytearray(struct.pack("!HH", OFPGPT_EXPERIMENTER, length) + body)
        out += bytes(-length % 8)
        return out


def add_flow(dp, priority: int, match, actions, cookie: int = 0, table_id: int = 0,
             goto_table: int | None = None) -> None:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
    if goto_table is not None:
        inst.append(parser.OFPInstructionGotoTable(goto_table))
    dp.send_msg(parser.OFPFlowMod(datapath=dp, table_id=table_id, priority=priority, cookie=cookie,
                                  match=match, instructions=inst))


def delete_flows(dp, cookie: int | None = None) -> None:
    """Delete every flow (cookie None) or those of one cookie."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    kwargs = dict(cookie=cookie, cookie_mask=0xFFFFFFFFFFFFFFFF) if cookie is not None else {}
    dp.send_msg(parser.OFPFlowMod(datapath=dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                                  out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY, match=parser.OFPMatch(),
                                  **kwargs))


def delete_flow_strict(dp, priority: int, match, table_id: int = 0) -> None:
    """Delete the one flow of exactly this match and priority."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    dp.send_msg(parser.OFPFlowMod(datapath=dp, command=ofp.OFPFC_DELETE_STRICT, table_id=table_id, priority=priority,
                                  out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY, match=match))


def delete_groups(dp) -> None:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL))


def barrier(dp) -> int:
    """Send a barrier request; its reply (same xid) proves every earlier message was applied."""
    req = dp.ofproto_parser.OFPBarrierRequest(dp)
    dp.set_xid(req)
    dp.send_msg(req)
    return req.xid


def add_select_group(dp, group_id: int, ports: tuple[int, ...], hash_basis: int = 0) -> bool:
    """An ECMP group over ``ports``; returns whether it hashes on the 5-tuple (OpenFlow 1.5).
    Switches at successive tiers must hash with different bases (seeds), or a flow's choice at
    one tier decides its choice at the next and half the paths stay idle (ECMP polarization)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    if ofp.OFP_VERSION == ofproto_v1_5.OFP_VERSION:
        buckets = [parser.OFPBucket(bucket_id=i, actions=[parser.OFPActionOutput(p)],
                                    properties=[parser.OFPGroupBucketPropWeight(type_=ofp.OFPGBPT_WEIGHT, weight=1)])
                   for i, p in enumerate(ports)]
        dp.send_msg(parser.OFPGroupMod(dp, ofp.OFPGC_ADD, ofp.OFPGT_SELECT, group_id, buckets=buckets,
                                       properties=[NtrSelectionMethod(param=hash_basis)]))
        return True
    buckets = [parser.OFPBucket(weight=1, actions=[parser.OFPActionOutput(p)]) for p in ports]
    dp.send_msg(parser.OFPGroupMod(dp, ofp.OFPGC_ADD, ofp.OFPGT_SELECT, group_id, buckets))
    return False


def install_ingress_tags(dp, tags: list[IngressTag], then_table: int, tenants: list[TenantTag] = ()) -> None:
    """Table 0 of a switch: under PFC's ingress rule each IPv4 frame's Ethernet source becomes its
    ingress tag with the arriving DSCP in its low six bits (an Open vSwitch move action); a frame
    from a tenant's host gets its tenant's VLAN (tenants); everything goes on to the routes."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    vlan = {t.in_port: [parser.OFPActionPushVlan(ETH_TYPE_8021Q),
                        parser.OFPActionSetField(vlan_vid=OFPVID_PRESENT | t.vid)] for t in tenants}
    for tag in tags:
        if ofp.OFP_VERSION == ofproto_v1_5.OFP_VERSION:  # OpenFlow 1.5's own copy-field action
            move = parser.OFPActionCopyField(n_bits=6, oxm_ids=["ip_dscp", "eth_src"])
        else:  # Open vSwitch's move extension
            move = parser.NXActionRegMove(src_field="ip_dscp", dst_field="eth_src", n_bits=6)
        actions = [parser.OFPActionSetField(eth_src=tag.eth_src), move] + vlan.get(tag.in_port, [])
        add_flow(dp, TAG_PRIORITY, parser.OFPMatch(in_port=tag.in_port, eth_type=ETH_TYPE_IPV4), actions,
                 table_id=TAG_TABLE, goto_table=then_table)
    for port, actions in vlan.items():   # the tenant's other frames (ARP) below its IPv4 rule
        add_flow(dp, TAG_PRIORITY - 1, parser.OFPMatch(in_port=port), actions, table_id=TAG_TABLE,
                 goto_table=then_table)
    add_flow(dp, 0, parser.OFPMatch(), [], table_id=TAG_TABLE, goto_table=then_table)


def install_rule(dp, rule: Rule, group_id: int | None, table_id: int = 0) -> None:
    parser = dp.ofproto_parser
    actions = []
    if rule.set_dscp is not None:
        actions.append(parser.OFPActionSetField(ip_dscp=rule.set_dscp))
    if rule.pop_vlan:
        actions.append(parser.OFPActionPopVlan())
    if len(rule.ports) == 1:
        actions.append(parser.OFPActionOutput(rule.ports[0]))
    else:
        actions.append(parser.OFPActionGroup(group_id))
    add_flow(dp, rule.priority, parser.OFPMatch(**dict(rule.match)), actions, cookie=rule.cookie,
             table_id=table_id)
