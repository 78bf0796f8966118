"""The regression harness on real runs (root): baselines, the verdict table and its exit code, and
sabotaged controller policies caught by the scenarios' expectations (priority off and PFC off are
caught in test_port_qos)."""
import json
import subprocess

import pytest

from helpers import ROOT, cli_argv, env_with_results, run_dirs, summary_of

pytestmark = pytest.mark.root


def run_cli(tmp_path, *args, baselines=None):
    env = {**env_with_results(tmp_path / "results"),
           "TESTBED_BASELINE_DIR": str(baselines or tmp_path / "baselines")}
    return subprocess.run(cli_argv(*args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def result(out):
    line = [l for l in out.stdout.splitlines() if l.startswith('{"verdicts"')][-1]
    return json.loads(line)


def verdicts(out):
    return result(out)["verdicts"]


def test_baseline_then_regress_passes(tmp_path):
    # dateline-torus: a scenario this machine runs faithfully and losslessly (valid in 9 of 11 runs
    # measured; incast-ecn, judged from each message's dependency, in none, and dcqcn-incast's
    # start-up overflows its buffer in about 1 run in 10), so that the harness itself is exercised
    out = run_cli(tmp_path, "baseline", "dateline-torus")
    if out.returncode == 4:
        pytest.skip("dateline-torus: the emulation could not keep up in two runs, no baseline to compare with")
    assert out.returncode == 0, out.stdout + out.stderr
    base = json.loads((tmp_path / "baselines" / "dateline-torus.json").read_text())
    assert base["scenario"] == "dateline-torus" and base["metrics"]["qos.pfc.pauses"] > 0
    assert base["metrics"]["packets.lost"] == 0 and "collective.bound_ratio" in base["metrics"]

    out = run_cli(tmp_path, "regress", "dateline-torus")
    assert out.returncode in (0, 4), out.stdout + out.stderr   # 4: the machine could not keep up twice
    assert verdicts(out) == {"dateline-torus": "ok" if out.returncode == 0 else "inconclusive"}


def test_ecn_off_regresses_against_the_committed_baseline(tmp_path):
    # the marking policy sabotaged: its expectation and the baseline comparison both catch it, and
    # a policy metric is a regression whether or not the machine kept up
    out = run_cli(tmp_path, "regress", "incast-ecn", "--set", "qos.ecn=false", baselines=ROOT / "baselines")
    assert out.returncode == 1, out.stdout + out.stderr
    assert verdicts(out) == {"incast-ecn": "regressed"}
    assert result(out)["failed"]["incast-ecn"].count("qos.ecn.marked") == 2, out.stdout


def test_routing_without_the_dateline_is_caught(tmp_path):
    out = run_cli(tmp_path, "run", "dateline-torus", "--set", "controller.dateline=false")
    assert out.returncode == 1, out.stdout + out.stderr
    s = summary_of(run_dirs(tmp_path / "results")[-1])
    assert s["status"] == "deadlock"
    (failed,) = [e for e in s["expectations"] if not e["ok"] and e["metric"] == "status"]
    assert failed["actual"] == "deadlock"
