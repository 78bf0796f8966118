"""The regression suite (make regress) as pytest tests, one per scenario, against the committed
baselines: `pytest -m root tests/integration/test_regression_suite.py -k incast` runs one. A
scenario that reaches no verdict (its run inconclusive, and again when regress runs it once more)
fails: with auto dilation every suite scenario should reach one, and an inconclusive run is no pass."""
import json
import subprocess

import pytest

from helpers import ROOT, cli_argv, env_with_results
from testbed.regress.baselines import suite

pytestmark = pytest.mark.root


@pytest.mark.parametrize("name", suite())
def test_regression_scenario(tmp_path, name):
    out = subprocess.run(cli_argv("regress", name), cwd=ROOT, env=env_with_results(tmp_path / "results"),
                         capture_output=True, text=True, timeout=900)
    lines = [l for l in out.stdout.splitlines() if l.startswith('{"verdicts"')]
    assert lines, out.stdout + out.stderr
    res = json.loads(lines[-1])
    assert out.returncode != 4, (f"{name} reached no verdict: inconclusive in both of regress's runs, the "
                                 f"second because {res['no_verdict'].get(name)}\n{out.stdout[-6000:]}")
    assert out.returncode == 0 and res["verdicts"] == {name: "ok"}, (
        f"{name} regressed on {res['failed'].get(name)}\n{out.stdout[-6000:]}")
