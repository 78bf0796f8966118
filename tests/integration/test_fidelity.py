"""The link side of the fidelity verdict on real runs (root): a link slowed from outside while the
traffic runs is caught, and the same link left alone passes."""
import subprocess

import pytest

from helpers import ROOT, cli_argv, deep_incast, env_with_results, run_dirs, summary_of

pytestmark = pytest.mark.root

BOTTLENECK = "leaf0-eth1"      # the incast's receiver port
CLASS = "1:1"                  # the port's HTB class at the link's rate (testbed/fabric/ports.py)
SETS = ("--set", "workload.iterations=6")


def run(tmp_path, slow_to=None):
    """deep-incast (40 Mb/s, one link backlogged throughout); with slow_to, the bottleneck port's
    HTB class is changed to that share of its rate from outside once the traffic has started."""
    scenarios = deep_incast(tmp_path)
    env = {**env_with_results(tmp_path / "results"), "TESTBED_SCENARIO_DIR": str(scenarios)}
    proc = subprocess.Popen(cli_argv("run", "deep-incast", *SETS), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen, changed = [], None
    for line in proc.stdout:
        seen.append(line)
        if slow_to and changed is None and "traffic:" in line:
            rate = f"{40e6 * slow_to:.0f}bit"
            changed = subprocess.run(["tc", "class", "change", "dev", BOTTLENECK, "parent", "1:", "classid", CLASS,
                                      "htb", "rate", rate, "ceil", rate, "burst", "60k", "cburst", "60k"],
                                     capture_output=True, text=True)
    proc.wait(300)
    out = "".join(seen)
    assert proc.returncode in (0, 4), out
    if slow_to:
        assert changed is not None and changed.returncode == 0, (changed and changed.stderr, out)
    (run_dir,) = run_dirs(tmp_path / "results")
    return summary_of(run_dir), out


def test_a_link_slowed_to_93_percent_from_outside_makes_the_run_invalid(tmp_path):
    s, out = run(tmp_path, slow_to=0.93)
    fid = s["fidelity"]
    links = {c["port"]: c for c in fid["links"]["links"]}
    assert BOTTLENECK in links, fid["links"]
    c = links[BOTTLENECK]
    assert c["drain_ratio"] == pytest.approx(0.93, abs=0.02), c
    assert BOTTLENECK in fid["links"]["failing_links"] and not c["drain_ratio_ok"]
    assert not fid["valid"] and any("from their rate over all their backlogged windows" in n for n in fid["notes"])
    assert "FIDELITY INVALID" in out and "INCONCLUSIVE" in out


def test_the_same_link_left_alone_drains_at_its_rate(tmp_path):
    s, _ = run(tmp_path)
    links = {c["port"]: c for c in s["fidelity"]["links"]["links"]}
    # the verdict's drain-rate check, the one the slowed link fails; the jitter of its windows is
    # a separate check, which a loaded machine's late timers can fail on a link left alone
    assert BOTTLENECK in links and links[BOTTLENECK]["drain_ratio_ok"], links
    assert links[BOTTLENECK]["drain_ratio"] == pytest.approx(1.0, abs=0.01)
