"""Runs interrupted with Ctrl-C, SIGTERM or SIGKILL leave nothing of theirs behind, and
only one run holds the machine at a time (root)."""
import signal
import subprocess
import time

import pytest

from helpers import ROOT, SMALL, bridges, env_with_results, fabric_interfaces, run_testbed, cli_argv

pytestmark = pytest.mark.root

LONG = ["--set", "fabric.dims=[2, 2]", "--set", "workload.bytes_per_rank=64MiB", "--set", "run.dilation=5000"]


def start_run(results, *extra):
    return subprocess.Popen(cli_argv("run", "allreduce-torus", *LONG, *extra), cwd=ROOT,
                            env=env_with_results(results), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def wait_for_line(proc, text, timeout=120):
    deadline = time.monotonic() + timeout
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if text in line:
            return seen
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"never saw {text!r}: {''.join(seen)}")




@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_traffic_cleans_up(tmp_path, foreign_bridge, sig):
    before_br, before_if = bridges(), fabric_interfaces()
    proc = start_run(tmp_path)
    wait_for_line(proc, "traffic:")
    time.sleep(0.5)  # let packets flow: the point is to interrupt a busy run
    proc.send_signal(sig)
    rest = proc.communicate(timeout=120)[0]
    assert proc.returncode != 0, rest
    assert bridges() == before_br and fabric_interfaces() == before_if


def test_sigkill_leftovers_are_removed_by_clean_and_foreign_bridge_survives(tmp_path, foreign_bridge):
    before_br, before_if = bridges(), fabric_interfaces()
    proc = start_run(tmp_path)
    wait_for_line(proc, "traffic:")
    proc.kill()
    proc.wait(30)
    assert bridges() - before_br, "a SIGKILLed run leaves its bridges (that is what clean is for)"
    out = run_testbed(tmp_path, "clean")
    assert out.returncode == 0, out.stdout + out.stderr
    assert bridges() == before_br and fabric_interfaces() == before_if
    assert foreign_bridge in bridges()


def test_second_concurrent_run_is_refused(tmp_path):
    before_br = bridges()
    proc = start_run(tmp_path)
    try:
        # past bring-up (a first run that fails there shows its output here)
        wait_for_line(proc, "fabric up")
        out = run_testbed(tmp_path, "run", "allreduce-torus", *SMALL, timeout=60)
        assert out.returncode == 3, (out.stdout, proc.poll())
        assert "another testbed run is in progress" in out.stdout and "allreduce-torus" in out.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    assert bridges() == before_br
