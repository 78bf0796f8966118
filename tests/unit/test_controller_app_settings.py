"""Controller apps of the user's own (issue 27, item 1): the scenario's controller.apps, the per-port
queue settings the QoS app carries to the switch agent, and the tutorial's app on its fabric."""
import dataclasses
import importlib.util
from pathlib import Path

import pytest

from controllers.events import EventLog
from controllers.launcher import AppSettings
from testbed.errors import InputError
from testbed.fabric import qos
from testbed.fabric.routing import compute_routes
from testbed.scenario import build_fabric, check_class_value, load_document, load_scenario
from testbed.scenario.dilation import dilate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ecn-tuner"


def policy_of(name, *sets):
    sc = load_scenario(name, list(sets))
    fabric = build_fabric(sc.fabric)
    return qos.policy(sc, fabric, compute_routes(fabric, sc.controller.routing))


def test_apps_are_files_relative_to_the_scenarios_folder(tmp_path):
    (tmp_path / "mine.py").write_text("")
    doc = {"controller": {"apps": ["mine.py"]}}
    sc = load_document("x", doc, "x.toml", base_dir=tmp_path)
    assert sc.controller.apps == (str(tmp_path / "mine.py"),)
    with pytest.raises(InputError) as e:
        load_document("x", {"controller": {"apps": ["missing.py"]}}, "x.toml", base_dir=tmp_path)
    assert e.value.field == "controller.apps" and "not a .py file" in e.value.message
    # os-ken names a file's module by its stem: a built-in's name is taken
    (tmp_path / "qos_policy.py").write_text("")
    with pytest.raises(InputError) as e:
        load_document("x", {"controller": {"apps": ["qos_policy.py"]}}, "x.toml", base_dir=tmp_path)
    assert "rename the file" in e.value.message
    # without the built-in routing app, one of the scenario's own must route
    with pytest.raises(InputError) as e:
        load_document("x", {"controller": {"app": "none"}}, "x.toml", base_dir=tmp_path)
    assert e.value.field == "controller.app"


def test_a_port_of_its_own_gets_its_ecn_profile_and_no_other_does():
    pol = policy_of("incast-ecn")
    key = qos.queue_key("leaf0-eth1", 1)
    mine = qos.with_port_settings(pol, {key: {"ecn_kmin_bytes": 60000, "ecn_kmax_bytes": 240000, "ecn_pmax": 0.5}})
    assert (mine.queues[key].kmin_bytes, mine.queues[key].kmax_bytes, mine.queues[key].pmax) == (60000, 240000, 0.5)
    assert {k: q for k, q in mine.queues.items() if k != key} == {k: q for k, q in pol.queues.items() if k != key}
    assert pol.queues[key].kmin_bytes == 100000


@pytest.mark.parametrize("name,fields,words", [
    ("incast-ecn", {"ecn_kmin_bytes": 500000}, "above Kmax"),          # Kmax stays 400 KB
    ("incast-ecn", {"xoff_bytes": 1000}, "not a lossless"),           # ECN only: nothing pauses
    ("incast-ecn", {"pfc": True}, "cannot be set per port"),          # the pause map is a class's
    ("incast-pfc", {"buffer_bytes": 8192}, "XOFF .* above its buffer"),  # egress rule below

    ("incast-pfc", {"xon_bytes": 10 << 20}, "at most XOFF"),           # ingress rule
])
def test_what_the_agent_could_not_run_is_refused(name, fields, words):
    pol = policy_of(name, *(["qos.pfc_accounting=egress"] if "buffer_bytes" in fields else []))
    key = qos.queue_key("leaf0-eth1", 1)
    with pytest.raises(ValueError, match=words):
        qos.with_port_settings(pol, {key: fields})


def test_a_port_of_its_own_gets_its_weight_and_buffer_and_no_other_does():
    pol = policy_of("two-jobs-fattree")
    assert pol.scheduling == "weighted" and pol.weights == (1, 8, 1) and pol.port_weights == {}
    key = qos.queue_key("a0_0-eth3", 1)
    mine = qos.with_port_settings(pol, {key: {"weight": 2, "buffer_bytes": 4 << 20}})
    assert mine.port_weights == {key: 2}
    assert mine.weight_of(key, 1) == 2 and mine.weight_of(qos.queue_key("a0_0-eth4", 1), 1) == 8
    assert mine.weight_of(qos.queue_key("h0_0_0-eth0", 1), 1) == 8   # a host NIC's is its class's
    assert mine.queues[key].limit_bytes == 4 << 20 != pol.queues[key].limit_bytes
    assert {k: q for k, q in mine.queues.items() if k != key} == {k: q for k, q in pol.queues.items() if k != key}


def test_a_class_wide_buffer_below_a_classs_own_xoff_is_refused_and_one_above_moves_derived_thresholds():
    from testbed.scenario import Scenario
    sc = dilate(load_scenario("incast-pfc", ["qos.pfc_accounting=egress"]), 31500.0, "set")
    fabric = build_fabric(sc.fabric)
    table = compute_routes(fabric, sc.controller.routing)
    key = qos.queue_key("leaf0-eth1", 1)
    before = qos.policy(sc, fabric, table).queues[key]
    bigger = qos.policy(Scenario.with_class_change(sc, "roce", "buffer_bytes", 2 * before.limit_bytes), fabric, table)
    # derived XOFF keeps its headroom below the new top of the buffer
    assert bigger.queues[key].limit_bytes == 2 * before.limit_bytes
    assert before.xoff_bytes > 2 * qos.frame_bytes(sc)   # derived, not at its floor
    assert bigger.queues[key].xoff_bytes - before.xoff_bytes == before.limit_bytes
    pinned = sc.with_class_change("roce", "xoff_bytes", before.xoff_bytes)
    smaller = qos.policy(pinned.with_class_change("roce", "buffer_bytes", before.xoff_bytes // 2), fabric, table)
    with pytest.raises(ValueError, match="above its buffer"):
        qos.with_port_settings(smaller, {})


def test_a_weight_change_needs_weighted_scheduling():
    change = {"policy_changes": [{"at_s": 0.001, "class_name": "roce", "field": "weight", "value": 4}]}
    with pytest.raises(InputError) as e:
        load_document("x", change, "x.toml")
    assert e.value.field == "policy_changes[0].field" and "weighted" in e.value.message
    sc = load_document("x", {**change, "qos": {"scheduling": "weighted"}}, "x.toml")
    assert sc.policy_changes[0].value == 4
    assert qos.quantum_bytes("weighted", 4, 4200) == 16800 and qos.quantum_bytes("strict", 4, 4200) == 4200


def test_a_lossless_ports_thresholds_are_its_ingress_rows_under_the_ingress_rule():
    pol = policy_of("incast-pfc")
    key = qos.queue_key("leaf0-eth1", 1)
    xoff = pol.ingress[key].xoff_bytes
    mine = qos.with_port_settings(pol, {key: {"xoff_bytes": xoff // 2, "xon_bytes": xoff // 4}})
    assert (mine.ingress[key].xoff_bytes, mine.ingress[key].xon_bytes) == (xoff // 2, xoff // 4)
    assert mine.pause_map == pol.pause_map


def test_a_value_an_app_asks_for_is_checked_as_a_files():
    assert check_class_value("app", "ecn_kmin_bytes", "60KB") == 60000
    with pytest.raises(InputError, match="did you mean 'ecn_kmin_bytes'"):
        check_class_value("app", "ecn_kmin", 1)
    with pytest.raises(InputError):
        check_class_value("app", "ecn_pmax", 2.0)


def test_the_tutorial_app_sets_each_port_from_its_own_bandwidth_delay_product(tmp_path):
    sc = load_scenario(str(EXAMPLE / "ecn-tuner.toml"))
    run_sc = dilate(sc, 8000.0, "set")
    fabric = build_fabric(run_sc.fabric)
    spec = importlib.util.spec_from_file_location("ecn_tuner", EXAMPLE / "ecn_tuner.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    app = mod.EcnTuner(testbed=AppSettings(fabric=fabric, scenario=run_sc, events=EventLog(str(tmp_path / "e"))))
    assert app.base_rtt_s == pytest.approx(5e-6)   # leaf-spine-leaf: 3 links, 2 switches, 500 ns each
    by_rate = {round(l.bw_mbps * 8000.0): app.thresholds[(sw, p)] for sw, ports in fabric.ports.items()
               for p, (_, _, l) in ports.items()}
    assert by_rate == {100000: (62500, 250000), 400000: (250000, 1000000)}
    # every threshold is one the QoS app takes
    pol = qos.policy(run_sc, fabric, compute_routes(fabric, run_sc.controller.routing))
    names = [c.name for c in run_sc.classes]
    settings = {qos.queue_key(fabric.intf_name(sw, p), names.index("roce")):
                {"ecn_kmin_bytes": k, "ecn_kmax_bytes": m} for (sw, p), (k, m) in app.thresholds.items()}
    qos.with_port_settings(pol, settings)
    assert dataclasses.is_dataclass(app.testbed)
