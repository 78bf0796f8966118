import subprocess
import sys

import pytest

from testbed.errors import InputError
from testbed.scenario import list_scenarios, load_document, load_scenario, parse_override
from testbed.units import parse_bytes


def test_every_shipped_scenario_loads():
    assert "allreduce-torus" in list_scenarios()
    for name in list_scenarios():
        load_scenario(name)


def test_defaults_of_allreduce_torus():
    sc = load_scenario("allreduce-torus")
    assert sc.fabric.dims == (4, 4) and sc.workload.bytes_per_rank == 4 << 20


def test_set_overrides_any_field():
    sc = load_scenario("allreduce-torus", ["workload.bytes_per_rank=1MiB", "fabric.dims=[2, 2]",
                                           "fabric.bw_gbps=50", "controller.routing=shortest_path"])
    assert sc.workload.bytes_per_rank == 1 << 20 and sc.fabric.dims == (2, 2)
    assert sc.fabric.bw_mbps == 50e3 and sc.controller.routing == "shortest_path"


@pytest.mark.parametrize("doc,field", [
    ({"fabric": {"bw_mbsp": 10}}, "fabric.bw_mbsp"),
    ({"fabric": {"bw_mbps": "fast"}}, "fabric.bw_mbps"),
    ({"fabric": {"bw_mbps": 0}}, "fabric.bw_mbps"),
    ({"fabric": {"dims": [4]}}, "fabric.dims"),
    ({"fabric": {"dims": [4, "x"]}}, "fabric.dims"),
    ({"workload": {"iterations": 1.5}}, "workload.iterations"),
    ({"workload": {"bytes_per_rank": "4 parsecs"}}, "workload.bytes_per_rank"),
    ({"workload": {"payload_bytes": 8900}, "fabric": {"mtu_bytes": 1500}}, "workload.payload_bytes"),
    ({"controller": {"routing": "magic"}}, "controller.routing"),
    ({"run": []}, "run"),
    ({"extra": 1}, "extra"),
    ({"transport": {"cc": "dcqcn"}, "qos": {"ecn": False}}, "transport.cc"),
    ({"transport": {"cc": "timely"}}, "transport.cc"),
    ({"dcqcn": {"g": 2}}, "dcqcn.g"),
    ({"workload": {"type": "halving_doubling"}, "fabric": {"dims": [3, 3]}}, "workload.type"),
    ({"workload": {"type": "torus2d_allreduce", "grid_x": 3}}, "workload.grid_x"),
    ({"workload": {"placement": "diagonal"}}, "workload.placement"),
    ({"run": {"capture_snaplen_bytes": 10}}, "run.capture_snaplen_bytes"),
    ({"tolerance": [{"metric": "packets.sent", "abs": 5}]}, "tolerance[0].metric"),
    ({"tolerance": [{"metric": "status", "abs": 5}]}, "tolerance[0].metric"),
    ({"tolerance": [{"metric": "packets.lost", "abs": -1}]}, "tolerance[0].abs"),
    ({"tolerance": [{"metric": "packets.lost", "ab": 1}]}, "tolerance[0].ab"),
    ({"tolerance": {"metric": "packets.lost"}}, "tolerance"),
    # a run's status is derived from its checks: an expectation names the check
    ({"expect": [{"metric": "status", "op": "==", "value": "ok"}]}, "expect[0].metric"),
    ({"expect": [{"metric": "packets.lost", "op": "==", "value": 0},
                 {"metric": "qos.pfc.pauses", "op": "!=", "than": "status"}]}, "expect[1].metric"),
    # a path no summary can hold is refused before anything runs, not after a whole run
    ({"expect": [{"metric": "qos.ecn.markd", "op": ">", "value": 0}]}, "expect[0].metric"),
    ({"expect": [{"metric": "packets.lost", "op": "<=", "than": "packets.lost_on_faild_links"}]}, "expect[0].than"),
    ({"expect": [{"metric": "faults.first.reroute_ms", "op": "<", "value": 1}]}, "expect[0].metric"),
    # bit errors on a link that does not exist, or at a rate past what a link could carry anything at
    ({"faults": [{"action": "corrupt", "link": "s0_0-s9_9", "frame_error_rate": 1e-4}]}, "faults[0].link"),
    ({"faults": [{"action": "corrupt", "link": "*", "frame_error_rate": 0.6}]}, "faults[0].frame_error_rate"),
])
def test_bad_documents_name_the_file_and_field(doc, field):
    with pytest.raises(InputError) as e:
        load_document("x", doc, "scenarios/x.toml")
    assert e.value.where == "scenarios/x.toml" and e.value.field == field
    assert str(e.value).startswith(f"scenarios/x.toml: {field}: ")


@pytest.mark.parametrize("override", ["nodot=1", "fabric.bw_mbps", "bogus.field=1", "fabric.nope=3",
                                      "fabric.bw_mbps=-1"])
def test_bad_overrides_name_set(override):
    with pytest.raises(InputError) as e:
        load_scenario("allreduce-torus", [override])
    assert e.value.where == "--set"


@pytest.mark.parametrize("name", ["../etc/passwd", "no-such-scenario", "a/b", "$(reboot)", ""])
def test_names_must_be_files_in_scenarios(name):
    with pytest.raises(InputError):
        load_scenario(name)


def test_cli_bad_input_exits_2_before_starting_anything():
    out = subprocess.run([sys.executable, "-m", "testbed", "run", "allreduce-torus", "--set", "fabric.bw_mbps=x"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert "--set: fabric.bw_mbps" in out.stdout
    out = subprocess.run([sys.executable, "-m", "testbed", "run", "../../x"], capture_output=True, text=True)
    assert out.returncode == 2


def test_sizes():
    assert parse_bytes("4MiB") == 4 << 20 and parse_bytes("1.5KB") == 1500 and parse_bytes(7) == 7
    for bad in ("", "x", "1.5B", True, -0.5):
        with pytest.raises(ValueError):
            parse_bytes(bad)


def test_override_values_are_typed():
    assert parse_override("fabric.dims=[2,2]") == ("fabric.dims", [2, 2])
    assert parse_override("workload.bytes_per_rank=4MiB") == ("workload.bytes_per_rank", "4MiB")


def test_every_link_of_a_built_fabric_has_its_rate():
    # resolved once, where the fabric is built: nothing downstream fills in a default
    from testbed.scenario import build_fabric
    sc = load_scenario("incast-pfc", ["fabric.bw_gbps=50"])
    rates = sorted({link.bw_mbps for link in build_fabric(sc.fabric).links})
    assert rates == [50e3, 400e3]
    # a version 2 file's hardware rate, as the hardware view (D = 1) every planner reads
    assert all(link.bw_mbps == 100e3 for link in build_fabric(load_scenario("allreduce-torus").fabric).links)


def test_a_corrupt_fault_turns_the_receivers_icrc_check_on():
    # a damaged frame must be dropped by the receiver's ICRC check, as a NIC drops it, or it would
    # be taken as good data
    plain = load_scenario("allreduce-torus")
    assert plain.transport.verify_icrc is False
    sc = load_document("x", {"faults": [{"action": "corrupt", "at_s": 0.0, "link": "*", "frame_error_rate": 1e-4},
                                        {"action": "corrupt", "at_s": 1e-4, "link": "s0_0-s0_1",
                                         "frame_error_rate": 0.0}]}, "scenarios/x.toml")
    assert sc.transport.verify_icrc is True
    assert [(f.link, f.frame_error_rate) for f in sc.faults] == [("*", 1e-4), ("s0_0-s0_1", 0.0)]
