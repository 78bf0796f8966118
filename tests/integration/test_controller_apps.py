"""A controller app of the user's own (docs/controller-apps.md), run as the tutorial runs it: the
example app from a folder outside the project, its decisions in the run, a baseline recorded from
that run, and the app broken on purpose caught by `regress` (issue 27, items 1-2)."""
import json
import shutil
import subprocess

import pytest

from helpers import ROOT, cli_argv, env_with_results, run_dirs, summary_of
from testbed.run.calibrate import run_again, slower_after

pytestmark = pytest.mark.root


def cli(tmp_path, *args, results: str = "results"):
    env = {**env_with_results(tmp_path / results), "TESTBED_BASELINE_DIR": str(tmp_path / "baselines")}
    return subprocess.run(cli_argv(*args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_the_tutorial_app_runs_is_baselined_and_its_regression_is_caught(tmp_path):
    # 1. the app, in a folder of the user's own
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "examples" / "ecn-tuner", policies)
    scenario = str(policies / "ecn-tuner.toml")
    # 2-3. run it: the app set every switch port's thresholds before traffic, and the run waited for it.
    # A run the machine could not keep up with is run again by make regress's rule
    # (testbed.run.calibrate.run_again; a CI run on 2026-12-06 had one slow window of 74 on the
    # bottleneck, 98.6% where 99% is needed); a last one that could not fails below
    runs, slower, auto_d = 0, [], None
    while True:
        out = cli(tmp_path, "run", scenario, *slower, results=f"results{runs}")
        assert out.returncode in (0, 4), out.stdout[-6000:] + out.stderr[-3000:]
        (run_dir,) = run_dirs(tmp_path / f"results{runs}")
        runs += 1
        last = summary_of(run_dir)
        auto_d = auto_d or last["dilation"]["factor"]
        if out.returncode == 0 or not run_again(runs, last):
            break
        # at a multiple of auto's D, as regress runs it again (testbed.run.calibrate.slower_after)
        slower = ["--set", f"run.dilation={auto_d * slower_after(runs):g}"]
    events = [json.loads(l) for l in (run_dir / "raw" / "controller_events.jsonl").read_text().splitlines()]
    (loaded,) = [e for e in events if e["event"] == "plugin_apps"]
    assert loaded["apps"] == [{"app": "EcnTuner", "file": str(policies / "ecn_tuner.py")}]
    requests = [e for e in events if e["event"] == "qos_app_request"]
    # the leaf's 5 host ports and 1 uplink, and the spine's 1 port: Kmax and Kmin each, before traffic
    assert len(requests) == 2 * 7 and not any(e["sent_now"] for e in requests), requests
    (tuned,) = [e for e in events if e["event"] == "ecn_tuner_set"]
    ready_at = next(e["t_ns"] for e in events if e["event"] == "app_ready")
    assert all(e["t_ns"] < ready_at for e in requests)
    # a round trip over leaf-spine-leaf (3 links, 2 switches, 500 ns each) is 5 us: 62.5 KB at a host
    # port's 100 Gb/s, 250 KB at an uplink's 400 Gb/s
    assert tuned["base_rtt_us"] == pytest.approx(5.0) and tuned["kmin_bytes"] == [62500, 250000], tuned
    s = summary_of(run_dir)
    marked = s["qos"]["ecn"]["marked"]
    assert marked > 0 and s["packets"]["lost"] == 0
    # the thresholds the agent ran the bottleneck port with are the app's, not the file's 100 KB
    (profile,) = [p for p in s["qos"]["ecn"]["profiles"] if p["class"] == "roce" and p["port"] == "leaf0-eth1"]
    assert profile["kmin_bytes"] == min(tuned["kmin_bytes"]) != 100000, profile
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [a["file"] for a in manifest["mechanisms"]["controller_apps"]] == [str(policies / "ecn_tuner.py")]
    if out.returncode == 4:
        pytest.fail(f"the run could not keep up: no baseline from it ({s['fidelity']['notes']})")
    out = cli(tmp_path, "baseline", scenario, "--run", str(run_dir))
    assert out.returncode == 0, out.stdout + out.stderr
    base = json.loads((tmp_path / "baselines" / "ecn-tuner.json").read_text())
    assert base["run_id"] == s["run_id"] and base["metrics"]["packets.lost"] == 0
    # the app marks most of the 1536 ECT packets (1304 in a run on 2026-12-05): the default band of
    # +-50% reaches past all of them, so the baseline leaves marks to the expectation, and says so
    if "qos.ecn.marked" not in base["metrics"]:
        # as words: the console folds its lines at 140 columns, so where they break moves with the
        # length of pytest's temporary path (pytest-8 put the break inside "could never fail")
        said = " ".join(out.stdout.split())
        assert "qos.ecn.marked" in said and "could never fail" in said, out.stdout
    # 4. break it on purpose: thresholds forty round trips deep (2.5 MB at a host port, above its
    # 2 MiB buffer) mark nothing
    app = policies / "ecn_tuner.py"
    app.write_text(app.read_text().replace("LAMBDA = 1.0 ", "LAMBDA = 40.0 "))
    out = cli(tmp_path, "regress", scenario)
    assert out.returncode == 1, out.stdout[-6000:] + out.stderr[-3000:]
    result = json.loads([l for l in out.stdout.splitlines() if l.startswith('{"verdicts"')][-1])
    assert result["verdicts"] == {scenario: "regressed"}
    # caught by its expectation (marks > 0, a policy metric: on any run), and by the baseline where it keeps marks
    assert result["failed"][scenario].count("qos.ecn.marked") == 1 + ("qos.ecn.marked" in base["metrics"]), result
