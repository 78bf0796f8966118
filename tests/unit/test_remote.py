"""controller.remote (issue 27, item 3): the endpoint, what an external controller cannot do here,
and reading Open vSwitch's own trace of a frame through a bridge's flow tables."""
import pytest

from testbed.errors import InputError
from testbed.run.remote import datapath_ports, host_pairs, parse_trace, split_actions
from testbed.scenario import load_scenario, parse_endpoint
from testbed.traffic.collectives import Message

DPIF = """netdev@ovs-netdev: hit:120 missed:34
  leaf0:
    leaf0 65534/1: (tap)
    leaf0-eth1 1/2: (system)
    leaf0-eth6 6/7: (system)
  spine0:
    spine0 65534/3: (tap)
    spine0-eth1 1/8: (system)
"""

FORWARDED = """Flow: udp,in_port=1,vlan_tci=0x0000,dl_src=00:00:00:00:00:01,dl_dst=00:00:00:00:00:02,nw_src=10.0.0.1

bridge("leaf0")
---------------
 0. in_port=1,dl_src=00:00:00:00:00:01,dl_dst=00:00:00:00:00:02, priority 1
    output:6

Final flow: unchanged
Megaflow: recirc_id=0,eth,ip,in_port=1,dl_src=00:00:00:00:00:01,dl_dst=00:00:00:00:00:02,nw_frag=no
Datapath actions: 7
"""

TO_CONTROLLER = """bridge("leaf0")
---------------
 0. priority 0
    CONTROLLER:65535

Final flow: unchanged
Megaflow: recirc_id=0,eth,ip,in_port=1,nw_frag=no
Datapath actions: userspace(pid=4294967295,controller(reason=1,dont_send=0,continuation=0,recirc_id=1,rule_cookie=0,controller_id=0,max_len=65535))
"""


def test_the_endpoint_is_an_ipv4_address_and_a_port():
    assert parse_endpoint("127.0.0.1:6653") == ("127.0.0.1", 6653)
    for bad in ("6653", "localhost:6653", "127.0.0.1:0", "127.0.0.1:x", "::1:6653"):
        with pytest.raises(ValueError):
            parse_endpoint(bad)


@pytest.mark.parametrize("sets,field,words", [
    (["controller.remote=127.0.0.1"], "controller.remote", "IP:PORT"),
    # the ingress rule needs every frame tagged with its ingress port by the testbed's routing app
    (["controller.remote=127.0.0.1:6653", "qos.pfc=true"], "qos.pfc_accounting", "egress"),
    (["controller.remote=127.0.0.1:6653", 'controller.apps=["../examples/ecn-tuner/ecn_tuner.py"]'],
     "controller.apps", "no switch connects to"),
    (["controller.remote=127.0.0.1:6653", "controller.dateline=true"], "controller.dateline", "virtual channels"),
])
def test_what_only_the_testbeds_routing_app_does_is_refused(sets, field, words):
    # the dateline needs a torus; the rest are the incast's
    with pytest.raises(InputError) as e:
        load_scenario("allreduce-torus" if field == "controller.dateline" else "incast-ecn", sets)
    assert e.value.field == field and words in e.value.message, str(e.value)


def test_a_remote_scenario_loads_and_keeps_the_endpoint():
    sc = load_scenario("incast-ecn", ["controller.remote=127.0.0.1:6653", "qos.pfc=true",
                                      "qos.pfc_accounting=egress"])
    assert sc.controller.remote == "127.0.0.1:6653"


def test_datapath_ports_name_the_interfaces():
    assert datapath_ports(DPIF) == {1: "leaf0", 2: "leaf0-eth1", 7: "leaf0-eth6", 3: "spine0", 8: "spine0-eth1"}


def test_a_trace_gives_the_ports_a_frame_leaves_by_or_the_packet_in():
    assert parse_trace(FORWARDED) == ([7], False, None)
    assert parse_trace(TO_CONTROLLER) == ([], True, None)
    assert parse_trace("Final flow: unchanged\nDatapath actions: drop\n") == ([], False, None)
    # a flood leaves by several; a rewrite gives the flow the next bridge sees
    outs, ctl, flow = parse_trace("Final flow: udp,in_port=1,dl_vlan=10\nDatapath actions: push_vlan(vid=10,pcp=0),2,3\n")
    assert (outs, ctl, flow) == ([2, 3], False, "udp,in_port=1,dl_vlan=10")
    assert split_actions("set(ipv4(src=1.1.1.1,dst=2.2.2.2)),4") == ["set(ipv4(src=1.1.1.1,dst=2.2.2.2))", "4"]


def test_the_pairs_are_the_workloads_both_ways():
    msgs = [Message(0, 0, 0, "h1", "h2", 10, ()), Message(1, 0, 0, "h3", "h3", 0, (), op="compute"),
            Message(2, 0, 1, "h2", "h1", 10, ())]
    assert host_pairs(msgs) == [("h1", "h2"), ("h2", "h1")]
