import shutil
import subprocess

import pytest

from controllers.rules import VC_IN_PORT_PRIORITY, rules_for
from testbed.fabric.routing import compute_routes, is_dateline
from topologies.fattree import fattree
from topologies.torus import torus


def test_plain_rules_route_ipv4_and_arp_only():
    f = torus((4, 4))
    rules = rules_for(f, compute_routes(f, "dimension_order"), "s0_0", "h2_3")
    assert [dict(r.match)["eth_type"] for r in rules] == [0x0800, 0x0806]
    assert all(r.set_dscp is None and len(r.ports) == 1 for r in rules)


def test_ecmp_rules_carry_every_next_hop():
    f = fattree(4)
    (ip_rule, arp_rule) = rules_for(f, compute_routes(f, "ecmp"), "e0_0", "h3_1_1")
    assert ip_rule.ports == arp_rule.ports == (3, 4)


def test_dateline_rules_switch_channel_on_the_wraparound_link():
    f = torus((4, 4))
    table = compute_routes(f, "dimension_order")
    # s3_0 -> h0_0 leaves on the + port of dimension 0: the wraparound (dateline) link.
    rules = rules_for(f, table, "s3_0", "h0_0", {26: 27})
    (port,) = table["s3_0"]["h0_0"]
    assert is_dateline(f, f.ports["s3_0"][port][2])
    vc_rules = [r for r in rules if ("ip_dscp", 26) in r.match]
    assert vc_rules and all(r.set_dscp == 27 for r in vc_rules)
    # at the destination switch, channel 1 returns to the class DSCP before the host
    last = [r for r in rules_for(f, table, "s0_0", "h0_0", {26: 27}) if ("ip_dscp", 27) in r.match]
    assert last and all(r.set_dscp == 26 for r in last)


def test_dateline_rules_keep_channel_within_a_dimension_and_reset_on_turns():
    f = torus((4, 4))
    table = compute_routes(f, "dimension_order")
    rules = rules_for(f, table, "s0_0", "h1_1", {26: 27})  # s0_0 -> s1_0 along dim 0, no dateline
    same_dim = [r for r in rules if r.priority == VC_IN_PORT_PRIORITY and ("ip_dscp", 27) in r.match]
    assert same_dim and all(r.set_dscp is None for r in same_dim)   # stays on channel 1
    from_elsewhere = [r for r in rules if r.priority != VC_IN_PORT_PRIORITY and ("ip_dscp", 27) in r.match]
    assert from_elsewhere and all(r.set_dscp == 26 for r in from_elsewhere)  # a turn: back to channel 0


@pytest.mark.skipif(not shutil.which("ovs-ofctl"), reason="needs ovs-ofctl to decode OpenFlow")
def test_select_group_message_decodes_in_open_vswitch_as_a_5_tuple_hash():
    from os_ken.ofproto import ofproto_v1_5, ofproto_v1_5_parser

    from controllers.flows import add_select_group

    sent = []

    class Datapath:
        ofproto, ofproto_parser, id = ofproto_v1_5, ofproto_v1_5_parser, 1

        def send_msg(self, msg):
            msg.serialize()
            sent.append(bytes(msg.buf).hex())

    assert add_select_group(Datapath(), 7, (3, 4), hash_basis=0x1234)
    out = subprocess.run(["ovs-ofctl", "ofp-print", sent[0]], capture_output=True, text=True)
    assert "decode error" not in out.stdout + out.stderr
    assert "selection_method=hash" in out.stdout
    assert "fields(ip_src,ip_dst,nw_proto,udp_src,udp_dst)" in out.stdout
    assert "selection_method_param=4660" in out.stdout
    assert "group_id=7" in out.stdout and "output:3" in out.stdout and "output:4" in out.stdout
