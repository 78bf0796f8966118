"""`testbed check`: what a run would build and do, from the same planning a run uses, without root
and starting nothing; bad input exits 2 naming the field."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.analysis.bounds import planned_bound
from testbed.fabric import qos
from testbed.fabric.routing import compute_routes
from testbed.scenario import build_fabric, load_scenario
from testbed.scenario.dilation import dilate
from testbed.traffic.collectives import Message

ROOT = Path(__file__).resolve().parents[2]


def check(*args):
    return subprocess.run([sys.executable, "-m", "testbed", "check", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_check_describes_the_fabric_traffic_bound_and_policy_of_a_run():
    out = check("incast-pfc", "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    f, tr, q = d["fabric"], d["traffic"], d["qos"]
    # 4 leaves x 5 hosts and 2 spines: 20 host links at 100 Gb/s, 8 uplinks at 400 Gb/s
    assert (f["switches"], f["hosts"], f["links"]) == (6, 20, 28)
    assert f["links_by_rate_mbps"] == {"100000": 20, "400000": 8}   # the hardware's (D = 1)
    # 15 senders of 512 KiB into one receiver, and the victim's 1 MiB
    assert tr["transfers_by_tag"] == {"collective": 15, "victim": 1}
    assert tr["bytes"] == 15 * (512 << 10) + (1 << 20) and tr["compute_steps"] == 0
    # the incast's bound: every byte through the receiver's 100 Gb/s link, in hardware time
    assert d["bound"]["per_iteration_s"] == pytest.approx(15 * (512 << 10) * 8 / 100e9)
    # the lossless class on every switch port, per ingress: 4 leaves of 7 ports and 2 spines of 4
    assert q["pfc_rule"] == "ingress" and q["lossless_queues"] == 4 * 7 + 2 * 4
    assert q["xon_bytes"][1] < q["xoff_bytes"][1]
    assert d["machine"]["datapath"].startswith("ovs-")
    # the thresholds a run at D = 16000 gets, which are the hardware's (its 1.5 us of headroom
    # time), whatever D the machine would choose
    sc = dilate(load_scenario("incast-pfc"), 16000, "set")
    fabric = build_fabric(sc.fabric)
    pol = qos.policy(sc, fabric, compute_routes(fabric, sc.controller.routing))
    xoff = [t.xoff_bytes for t in pol.ingress.values()]
    assert q["xoff_bytes"] == [min(xoff), max(xoff)] and q["headroom_covers_us_hardware"] == pytest.approx(1.5)
    d = json.loads(check("incast-pfc", "--set", "run.dilation=16000", "--json").stdout)
    assert d["qos"]["xoff_bytes"] == q["xoff_bytes"] and d["qos"]["reaction_allowance_ms"] == pytest.approx(24)


def test_check_of_a_pipeline_uses_the_dag_bound_and_counts_compute():
    d = json.loads(check("pipeline-fattree", "--set", "workload.iterations=1", "--json").stdout)
    assert d["bound"]["terms"]["binding"] == "critical_path"
    assert d["traffic"]["compute_steps"] == 2 * 16 * 8 * 2  # forward and backward, per micro-batch, stage, replica
    assert d["traffic"]["bytes"] == d["traffic"]["bytes_first_iteration"]


def test_check_refuses_bad_input_with_the_field_and_exit_2():
    out = check("incast-pfc", "--set", "qos.pfc_accounting=routes")
    assert out.returncode == 2
    assert "qos.pfc_accounting" in out.stdout + out.stderr


def test_a_trace_is_bound_by_its_busiest_nic_without_its_compute():
    msgs = [Message(0, 0, 0, "a", "b", 1_000_000, ()), Message(1, 0, 0, "a", "c", 500_000, ()),
            Message(2, 0, 0, "b", "a", 800_000, ()),
            Message(3, 0, 0, "a", "a", 0, (), op="compute", tag="compute", duration_ns=10**9)]
    bound, formula, terms = planned_bound("chakra", 3, 0, 1e6, msgs)
    assert bound == 1_500_000 * 8 / 1e6 and terms is None and "busiest NIC" in formula


def test_check_shows_what_a_run_asserts_faults_expectations_profiles_and_baseline():
    out = check("linkfail-torus3d", "--json")
    assert out.returncode == 0, out.stderr
    a = json.loads(out.stdout)["asserts"]
    assert [(f["action"], f["link"], f["at_s"]) for f in a["faults"]] == [
        ("link_down", "s0_0_1-s0_0_2", 0.00025), ("link_up", "s0_0_1-s0_0_2", 0.0012)]
    assert {"metric": "packets.lost", "op": "<=", "than": "packets.lost_on_failed_links"} in a["expectations"]
    stored = json.loads((ROOT / "baselines" / "linkfail-torus3d.json").read_text())
    assert a["baseline"]["run_id"] == stored["run_id"] and a["baseline"]["metrics"] == len(stored["metrics"])
    assert a["in_regression_suite"] and a["regress_skip"] is None
    # each class's profile as the run would apply it, --set included
    out = check("incast-ecn", "--json", "--set", "classes.roce.ecn_kmin_bytes=50KB")
    profiles = {c["name"]: c for c in json.loads(out.stdout)["qos"]["profiles"]}
    assert profiles["roce"]["ecn"] == {"ecn_kmin_bytes": 50000, "ecn_kmax_bytes": 400000, "ecn_pmax": 0.2}
    assert profiles["bulk"]["ecn"] is None and profiles["bulk"]["default"]
    # and the table says the same in words
    out = check("incast-ecn", "--set", "classes.roce.ecn_kmin_bytes=50KB")
    text = " ".join(out.stdout.split())
    assert "ECN Kmin 50000 B, Kmax 400000 B, Pmax 0.2" in text and "expects │ qos.ecn.marked > 0" in text, text
