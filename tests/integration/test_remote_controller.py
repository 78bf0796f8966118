"""An external controller drives a run (issue 27, item 3): the user starts it, the scenario names it
(controller.remote), and the testbed finds the routes ready itself from the switches' flow tables.
Two: an L2 learning switch of the user's kind on a loop-free leaf-spine, and the testbed's own
routing app run as a separate process on the 4x4 torus."""
import contextlib
import json
import socket
import subprocess
import sys
import time

import pytest

from helpers import ROOT, run_dirs, run_testbed, summary_of
from testbed.run.procs import tcp_listening
from testbed.scenario import build_fabric, load_scenario

pytestmark = pytest.mark.root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def controller(tmp_path, *args):
    port = free_port()
    log = open(tmp_path / "controller.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "controllers.launcher", "--port", str(port), *args], cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not tcp_listening("127.0.0.1", port):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "controller.log").read_text()
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def judged(tmp_path, out):
    assert out.returncode in (0, 4), out.stdout[-6000:] + out.stderr[-3000:]
    (run_dir,) = run_dirs(tmp_path / "results")
    s = summary_of(run_dir)
    assert s["collective"]["iterations_complete"] == s["collective"]["iterations"]
    assert s["packets"]["lost"] == 0 and s["packets"]["unaccounted"] == 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    events = [json.loads(l)["event"] for l in (run_dir / "raw" / "controller_events.jsonl").read_text().splitlines()]
    # no switch met the testbed's own controller: only its QoS app ran, for the switch agent
    assert "switch_connected" not in events and "routes_ready" not in events and "qos_policy_sent" in events
    return s, manifest["remote"]


def test_a_learning_switch_the_user_started_drives_a_run_on_a_loop_free_fabric(tmp_path):
    with controller(tmp_path, "--app-file", str(ROOT / "examples" / "remote" / "l2_learning.py")) as port:
        out = run_testbed(tmp_path / "results", "run", "incast-ecn", "--set", f"controller.remote=127.0.0.1:{port}",
                          "--set", "fabric.leaves=2", "--set", "fabric.hosts_per_leaf=3",
                          "--set", "run.dilation=8000")   # incast-ecn's auto D here: 6300-8000
    s, remote = judged(tmp_path, out)
    # 4 senders into one receiver, both ways; each pair warmed twice before the tables were read
    assert remote["pairs"] == 8 and remote["warmup_frames"] == 2 * 8 and remote["traces"] > 0
    assert s["qos"]["ecn"]["marked"] > 0     # the QoS app's policy, on the user's routes


def test_the_routing_app_started_as_a_separate_process_drives_the_torus(tmp_path):
    sc = load_scenario("allreduce-torus")
    (tmp_path / "fabric.json").write_text(build_fabric(sc.fabric).to_json())
    (tmp_path / "scenario.json").write_text(json.dumps(sc.to_dict()))
    with controller(tmp_path, "--app", "proactive_routing", "--fabric", str(tmp_path / "fabric.json"),
                    "--scenario", str(tmp_path / "scenario.json"), "--events", str(tmp_path / "events.jsonl")) as port:
        out = run_testbed(tmp_path / "results", "run", "allreduce-torus",
                          "--set", f"controller.remote=127.0.0.1:{port}", "--set", "workload.iterations=1",
                          "--set", "run.dilation=25000")   # the flagship's auto D here: 12500-31500
    s, remote = judged(tmp_path, out)
    # a ring over 16 hosts: each to its neighbour, and the ACKs back
    assert remote["pairs"] == 2 * 16
    own = [json.loads(l)["event"] for l in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert "routes_ready" in own     # its own log says so too; the testbed did not read it


def test_no_controller_listening_is_a_setup_problem_found_before_anything_starts(tmp_path):
    out = run_testbed(tmp_path / "results", "run", "incast-ecn", "--set", f"controller.remote=127.0.0.1:{free_port()}",
                      "--set", "run.dilation=8000")
    assert out.returncode == 5 and "no controller listens" in out.stdout, out.stdout + out.stderr
    assert not (tmp_path / "results" / "incast-ecn").exists()
