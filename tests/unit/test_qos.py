"""Port QoS as data: class maps, HTB layouts, PFC thresholds, the pause map and its deadlock
structure (pure, no root)."""
import dataclasses
import json

import networkx as nx
import numpy as np
import pytest

from testbed.fabric import qos
from testbed.fabric.bpfmaps import PROFILE
from testbed.fabric.routing import compute_routes
from testbed.scenario import build_fabric, load_scenario
from testbed.scenario.dilation import dilate


def pause_graph(sc):
    fabric = build_fabric(sc.fabric)
    feeds = qos.pause_map(fabric, compute_routes(fabric, sc.controller.routing), sc)
    g = nx.DiGraph()
    for queue, ups in feeds.items():
        for up in ups:
            g.add_edge(up, queue)
    return fabric, feeds, g


def test_dscp_map_follows_classes_and_fifo_collapses_them():
    sc = load_scenario("allreduce-torus")
    m = qos.class_of_dscp(sc)
    assert len(m) == 65 and m[26] == m[27] == 1 and m[48] == m[46] == 0 and m[0] == m[10] == 2
    assert m[64] == 0  # non-IP frames ride the top class
    fifo = qos.class_of_dscp(load_scenario("allreduce-torus", ["qos.scheduling=fifo"]))
    assert set(fifo) == {2}


def test_strict_and_weighted_htb_layouts():
    strict = qos.port_layout(load_scenario("allreduce-torus")).htb_classes(100e6)
    assert [c.prio for c in strict] == [0, 1, 2] and all(c.ceil_bps == 100e6 for c in strict)
    assert all(c.rate_bps <= 100e6 * 0.01 for c in strict)
    sc = load_scenario("two-jobs-fattree")
    weighted = qos.port_layout(sc).htb_classes(100e6)
    assert len({c.prio for c in weighted}) == 1 and all(c.ceil_bps == 100e6 for c in weighted)
    # the weights split what the classes borrow (DRR quanta); no class sends on a share of its own,
    # which HTB's parent could not hold back (the port drained above its rate)
    assert [c.quantum_bytes for c in weighted] == [c.weight * qos.frame_bytes(sc) for c in sc.classes]
    assert [c.weight for c in sc.classes] == [1, 8, 1]
    assert sum(c.rate_bps for c in weighted) <= 100e6 * 0.01


@pytest.mark.parametrize("link_bps", [0.5e6, 2.5e6, 100e6])
def test_a_class_sends_a_frame_on_its_own_rate_at_most_once_a_minute(link_bps):
    # the frame a class sends on its own tokens passes its parent's bucket: at the old 8 kbit/s
    # guarantee one went every 4.15 s a class, and two classes' together failed a drain window
    for name in ("two-jobs-fattree", "allreduce-torus"):
        layout = qos.port_layout(load_scenario(name))
        for c in layout.htb_classes(link_bps):
            frame_s = layout.frame_bytes * 8 / c.rate_bps
            assert frame_s >= qos.HTB_DEBT_CAP_S
            # and the class's one-frame bucket, in HTB's 64 ns ticks, fits the u32 tc hands it in
            assert frame_s * 1e9 / 64 < 2 ** 32


def test_pfc_thresholds_leave_headroom_for_every_upstream():
    sc = load_scenario("incast-pfc")
    roce = dataclasses.replace(sc.classes[1], buffer_bytes=1 << 20, xoff_bytes=0, xon_bytes=0)
    p = qos.queue_profile(sc, roce, [100e6] * 4 + [400e6], reaction_s=0.002)
    frame = qos.frame_bytes(sc)
    in_flight = 4 * 25_000 + 100_000 + 5 * 2 * frame
    assert p.pfc_on and p.limit_bytes == 1 << 20
    assert p.xoff_bytes == (1 << 20) - in_flight
    # a resumed upstream sends one frame ahead of its rate (the agent's one-frame bucket at resume)
    assert p.xon_bytes == (1 << 20) - in_flight - 5 * frame
    assert p.xon_bytes < p.xoff_bytes
    off = qos.queue_profile(load_scenario("incast-pfc", ["qos.pfc=false"]), roce, [100e6], 0.002)
    assert not off.pfc_on and np.array([off.bpf_row()], dtype=PROFILE)["xoff_bytes"][0] == 0


def test_ecn_profile_row_matches_the_bpf_struct():
    sc = load_scenario("incast-ecn")
    prof = qos.queue_profile(sc, sc.classes[1], [100e6], 0.002)
    (row,) = np.array([prof.bpf_row()], dtype=PROFILE)   # as the agent writes it into the map
    assert (row["limit_bytes"], row["kmin_bytes"], row["kmax_bytes"], row["ecn_on"], row["xoff_bytes"]) == \
        (2 << 20, 100000, 400000, 1, 0)
    assert row["pmax_q16"] == round(0.2 * 65536) and row["hist_bucket_bytes"] == 2 * 400000 // 32
    assert qos.QueueProfile.from_json(json.loads(json.dumps(prof.to_json()))) == prof   # the policy message


def test_pause_map_feeds_a_leaf_port_from_its_hosts_and_spines():
    sc = load_scenario("incast-pfc")
    fabric, feeds, _ = pause_graph(sc)
    h = fabric.host_by_name["h0_0"]
    ups = feeds[(h.switch, h.switch_port, 1)]
    local = {"h0_1", "h0_2", "h0_3", "h0_4"}
    nodes = {u[0] for u in ups}
    assert local <= nodes and nodes - local and nodes - local <= {"spine0", "spine1"}
    assert all(u[2] == 1 for u in ups)  # no class changes on a leaf-spine


def test_pause_map_on_a_ring_is_cyclic_without_dateline_and_acyclic_with_it():
    sc = load_scenario("pfc-deadlock-torus")
    _, _, g = pause_graph(sc)
    roce = [n for n in g if n[2] in (1, 2)]
    assert not nx.is_directed_acyclic_graph(g.subgraph(roce))
    _, _, g2 = pause_graph(load_scenario("pfc-deadlock-torus", ["controller.dateline=true"]))
    roce2 = [n for n in g2 if n[2] in (1, 2)]
    assert nx.is_directed_acyclic_graph(g2.subgraph(roce2))
    # the dateline link's channel-1 queue is fed from channel 0 upstream
    assert any(u[2] == 1 and q[2] == 2 for q, ups in qos.pause_map(
        build_fabric(sc.fabric), compute_routes(build_fabric(sc.fabric), "shortest_path"),
        load_scenario("pfc-deadlock-torus", ["controller.dateline=true"])).items() for u in ups)


def test_find_cycle():
    assert qos.find_cycle({1: {2}, 2: {3}, 3: set()}) is None
    cyc = qos.find_cycle({1: {2}, 2: {3}, 3: {1}, 4: {1}})
    assert sorted(cyc) == [1, 2, 3]


@pytest.mark.parametrize("override,field", [
    ("qos.scheduling=round_robin", "qos.scheduling"),
    ("qos.telemetry_hz=1", "qos.telemetry_hz"),
])
def test_bad_qos_settings_name_the_field(override, field):
    from testbed.errors import InputError
    with pytest.raises(InputError) as e:
        load_scenario("incast-ecn", [override])
    assert e.value.field == field


def test_class_table_errors_name_the_class_and_field():
    from testbed.errors import InputError
    from testbed.scenario import load_document
    base = {"classes": [{"name": "a", "dscp": [26], "default": True}, {"name": "b", "dscp": [26]}]}
    with pytest.raises(InputError) as e:
        load_document("x", base, "x.toml")
    assert e.value.field == "classes[1].dscp"
    with pytest.raises(InputError) as e:
        load_document("x", {"classes": [{"name": "a", "dscp": [1]}]}, "x.toml")
    assert e.value.field == "classes"  # no default class
    with pytest.raises(InputError) as e:
        load_document("x", {"classes": [{"name": "a", "default": True, "pfc": True, "xoff_bytes": 10,
                                         "xon_bytes": 20}]}, "x.toml")
    assert e.value.field == "classes[0].xon_bytes"
    with pytest.raises(InputError) as e:
        load_document("x", {"classes": [{"name": "a", "default": True, "colour": "red"}]}, "x.toml")
    assert e.value.field == "classes[0].colour"


def test_policy_names_every_switch_queue_and_pauses_by_name():
    sc = load_scenario("incast-pfc", ["qos.pfc_accounting=egress"])
    fabric = build_fabric(sc.fabric)
    pol = qos.policy(sc, fabric, compute_routes(fabric, "shortest_path"))
    n_switch_ports = sum(len(p) for p in fabric.ports.values())
    assert len(pol.queues) == n_switch_ports * len(sc.classes)
    assert pol.pfc_accounting == "egress" and pol.ingress == {}
    assert set(pol.pause_map["leaf0-eth1:1"]) >= {"h0_1-eth0:1", "h0_4-eth0:1"}
    assert all(k.endswith(":1") for k in pol.pause_map)  # only the lossless class pauses
    off = qos.policy(sc.with_class_change("roce", "pfc", False), fabric, compute_routes(fabric, "shortest_path"))
    assert off.pause_map == {} and not off.queues["leaf0-eth1:1"].pfc_on


@pytest.mark.parametrize("name,overrides", [("incast-pfc", []), ("pipeline-fattree", []),
                                            ("dateline-torus", []), ("pfc-deadlock-torus", [])])
def test_ingress_rule_pauses_only_the_peer_of_the_ingress_port_in_the_class_it_arrived_in(name, overrides):
    sc = load_scenario(name, overrides)
    fabric = build_fabric(sc.fabric)
    pol = qos.policy(sc, fabric, compute_routes(fabric, sc.controller.routing))
    assert pol.pfc_accounting == "ingress"
    lossless = [i for i, c in enumerate(sc.classes) if c.pfc]
    expected = {}
    for sw, ports in fabric.ports.items():
        for port, (peer, peer_port, _) in ports.items():
            up = fabric.intf_name(peer, peer_port if peer in fabric.switch_by_name else 0)
            for c in lossless:
                expected[qos.queue_key(fabric.intf_name(sw, port), c)] = (qos.queue_key(up, c),)
    assert pol.pause_map == expected
    assert set(pol.ingress) == set(expected)
    # an egress queue's depth pauses nothing under this rule: its XOFF is off in the data path
    assert not any(q.pfc_on for q in pol.queues.values())


@pytest.mark.parametrize("name", ["incast-pfc", "pipeline-fattree", "dateline-torus", "pfc-deadlock-torus"])
def test_ingress_thresholds_keep_every_egress_buffer_lossless(name):
    # What an egress queue holds came in at the switch's other ports; each holds at most XOFF plus
    # the headroom its paused peer may still deliver. The derived (or set) thresholds must fit the
    # class's buffer on every egress port, whichever ports feed it. The headroom is what the
    # emulated link delivers while the switch agent reacts (wall-clock time): at D = 1000, where
    # these scenarios' 100 Gb/s run at 100 Mb/s; a larger D only shrinks it.
    sc = dilate(load_scenario(name), 1000, "set")
    fabric = build_fabric(sc.fabric)
    pol = qos.policy(sc, fabric, compute_routes(fabric, sc.controller.routing))
    frame = qos.frame_bytes(sc)
    for c, spec in enumerate(sc.classes):
        if not spec.pfc:
            continue
        buffer = spec.buffer_bytes or sc.fabric.queue_limit_bytes
        for sw, ports in fabric.ports.items():
            t = {p: pol.ingress[qos.queue_key(fabric.intf_name(sw, p), c)] for p in ports}
            for egress in ports:
                worst = sum(v.xoff_bytes + v.headroom_bytes for p, v in t.items() if p != egress)
                assert worst <= buffer, (sw, egress, worst, buffer)
            for v in t.values():
                assert frame <= v.xon_bytes < v.xoff_bytes, v


def test_derived_ingress_thresholds_from_rates_and_reaction_time():
    sc = load_scenario("incast-pfc")
    roce = dataclasses.replace(sc.classes[1], buffer_bytes=1 << 20, xoff_bytes=0, xon_bytes=0)
    frame = qos.frame_bytes(sc)
    # a leaf: four hosts at 100 Mb/s, one uplink at 400 Mb/s, 2 ms to react
    p = qos.ingress_profile(sc, roce, [100e6] * 4 + [400e6], 100e6, reaction_s=0.002)
    host, up = 25_000 + 3 * frame, 100_000 + 3 * frame
    assert p.headroom_bytes == host
    # any four of the five ports may feed the fifth: the uplink and three hosts at worst
    assert p.xoff_bytes == ((1 << 20) - up - 3 * host) // 4
    assert p.xon_bytes == p.xoff_bytes - host
    # a buffer too small for that still pauses at two frames
    tiny = dataclasses.replace(roce, buffer_bytes=64 << 10)
    small = qos.ingress_profile(sc, tiny, [100e6] * 5, 100e6, reaction_s=0.002)
    assert small.xoff_bytes == 2 * frame and small.xon_bytes == frame
    # set by hand, they are kept
    hand = qos.ingress_profile(sc, dataclasses.replace(roce, xoff_bytes=300_000, xon_bytes=100_000),
                               [100e6] * 5, 100e6, reaction_s=0.002)
    assert (hand.xoff_bytes, hand.xon_bytes) == (300_000, 100_000)


def test_ingress_tags_carry_the_slot_the_port_program_reads():
    from controllers.rules import TAG_MAC0, TAG_MAC1, ingress_tags
    fabric = build_fabric(load_scenario("pipeline-fattree").fabric)
    slots = qos.switch_port_slots(fabric)
    assert sorted(slots.values()) == list(range(len(slots)))
    seen = set()
    for sw in fabric.switch_by_name:
        tags = ingress_tags(fabric, sw)
        assert {t.in_port for t in tags} == set(fabric.ports[sw])
        for t in tags:
            b = bytes.fromhex(t.eth_src.replace(":", ""))
            # what untag() in port_qos.bpf.c reads: magic, slot (big-endian), a free byte, DSCP bits
            assert (b[0], b[1]) == (TAG_MAC0, TAG_MAC1) and b[4] == 0 and b[5] & 0x3F == 0
            assert not b[0] & 1  # a unicast source
            slot = b[2] << 8 | b[3]
            assert slot == slots[(sw, t.in_port)]
            seen.add(slot)
    assert seen == set(slots.values())


def test_scenario_round_trips_through_json_and_policy_changes_are_checked():
    import json
    from testbed.errors import InputError
    from testbed.scenario import Scenario, load_document
    sc = load_scenario("pfc-deadlock-torus")
    assert Scenario.from_dict(json.loads(json.dumps(sc.to_dict()))) == sc
    ok = load_document("x", {"policy_changes": [{"at_s": 1, "class_name": "roce", "field": "ecn_kmin_bytes",
                                                 "value": "64KiB"}]}, "x.toml")
    assert ok.policy_changes[0].value == 65536
    for change, field in (({"class_name": "nope", "field": "ecn"}, "policy_changes[0].class_name"),
                          ({"class_name": "roce", "field": "dscp"}, "policy_changes[0].field"),
                          ({"class_name": "roce", "field": "ecn", "value": 3}, "policy_changes[0].value")):
        with pytest.raises(InputError) as e:
            load_document("x", {"policy_changes": [change]}, "x.toml")
        assert e.value.field == field


def test_offload_features_are_those_ethtool_K_turns_off():
    from testbed.fabric.ports import offload_feature
    off = ["tx-checksum-ip-generic", "tx-checksum-sctp", "rx-checksum", "tx-tcp-segmentation",
           "tx-tcp6-segmentation", "tx-tcp-ecn-segmentation", "tx-tcp-mangleid-segmentation",
           "tx-tcp-accecn-segmentation", "tx-udp-segmentation", "tx-generic-segmentation", "rx-gro"]
    kept = ["tx-scatter-gather", "rx-vlan-hw-parse", "tx-udp_tnl-segmentation", "highdma", "rx-gro-list",
            "tx-gre-segmentation", "rx-lro"]
    assert all(offload_feature(n) for n in off)
    assert not any(offload_feature(n) for n in kept)


def test_derived_headroom_is_the_hardwares_at_any_dilation_and_the_agent_gets_d_times_its_time():
    # incast-pfc's hardware: 500 ns links, a 500 ns PFC response: the headroom covers 1.5 us of
    # line rate. Dilated, the bytes stay (the link's rate / D over 1.5 us x D), and the switch agent
    # may take 1.5 us x D of wall clock to pause
    hw = load_scenario("incast-pfc")
    assert (hw.fabric.link_delay_ns, hw.qos.pfc_response_ns) == (500, 500)
    frame = qos.frame_bytes(hw)
    headrooms = {}
    for d in (6300, 16000, 32000):
        sc = dilate(hw, d, "set")
        assert qos.headroom_time_s(sc) == pytest.approx(1.5e-6 * d)
        fabric = build_fabric(sc.fabric)
        pol = qos.policy(sc, fabric, compute_routes(fabric, sc.controller.routing))
        assert pol.reaction_allowance_us == pytest.approx(1.5 * d)
        headrooms[d] = {k: v.headroom_bytes for k, v in pol.ingress.items()}
    assert headrooms[6300] == headrooms[16000] == headrooms[32000]
    # a 100 Gb/s host link: 12.5 GB/s x 1.5 us = 18750 bytes, and three frames
    assert headrooms[16000]["leaf0-eth1:1"] == 18750 + 3 * frame
    # a version 1 file runs at D = 1, where no agent pauses within 1.5 us: the headroom covers the
    # agent's own reaction instead
    assert qos.headroom_time_s(hw) == pytest.approx(qos.emulator_reaction_s(hw)) == pytest.approx(0.002)


def test_a_lossless_class_below_two_frames_of_buffer_is_refused():
    # its derived XOFF is never below two frames: above a smaller buffer it would drop before pausing
    from testbed.errors import InputError
    from testbed.scenario import load_document
    from testbed.wire import HEADER_BYTES

    def doc(buffer):
        return {"workload": {"payload_bytes": 4096}, "qos": {"pfc": True},
                "classes": [{"name": "a", "default": True, "pfc": True, "buffer_bytes": buffer}]}
    frame = 4096 + HEADER_BYTES
    with pytest.raises(InputError) as e:
        load_document("x", doc(2 * frame - 1), "x.toml")
    assert e.value.field == "classes[0].buffer_bytes" and str(2 * frame) in str(e.value)
    sc = load_document("x", doc(2 * frame), "x.toml")
    assert qos.queue_profile(sc, sc.classes[0], [100e6], 0.002).xoff_bytes <= 2 * frame


def test_the_deadlocking_ring_is_dateline_torus_without_its_dateline():
    # the root tests run the deadlock once, as dateline-torus sabotaged (tests/integration/conftest.py
    # ring_without_dateline): that is pfc-deadlock-torus in all but its words and judgements
    shipped = load_scenario("pfc-deadlock-torus")
    sabotaged = load_scenario("dateline-torus", ["controller.dateline=false"])
    differ = {f.name for f in dataclasses.fields(shipped) if getattr(shipped, f.name) != getattr(sabotaged, f.name)}
    assert differ == {"name", "path", "description", "expect", "tolerance", "regress_skip", "overrides"}
