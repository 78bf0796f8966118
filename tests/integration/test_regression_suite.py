"""The regression suite (make regress) as pytest tests, one per suite scenario, against its
expectations and committed baseline: `pytest -m root tests/integration/test_regression_suite.py -k
incast` runs one. Each scenario's run is the session's (the suite_runs fixture), which the tests of
its mechanisms read too. A scenario that reaches no verdict (its run inconclusive, and again when
regress runs it once more) fails: with auto dilation every suite scenario should reach one, and an
inconclusive run is no pass."""
import pytest

from testbed.regress.baselines import suite

pytestmark = pytest.mark.root


@pytest.mark.parametrize("name", suite())
def test_regression_scenario(suite_runs, name):
    r = suite_runs.get(name)
    assert r.result, r.log
    assert r.out.returncode != 4, (f"{name} reached no verdict: inconclusive in every one of regress's runs, the "
                                   f"last because {r.result['no_verdict'].get(name)}\n{r.log}")
    assert r.out.returncode == 0 and r.result["verdicts"] == {name: "ok"}, (
        f"{name} regressed on {r.result['failed'].get(name)}\n{r.log}")
