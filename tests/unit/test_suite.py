"""What `make regress` runs and what `make sabotage` breaks, over the shipped scenario files: every
scenario is in the suite or says why not, every one in it guards a policy, and every sabotage
breaks a suite scenario by a --set that changes it."""
import dataclasses

import pytest

from testbed.errors import InputError
from testbed.metrics import metric_class
from testbed.regress.baselines import judges_something, left_out, suite
from testbed.regress.sabotage import SABOTAGES, by_name
from testbed.scenario import list_scenarios, load_document, load_scenario

SUITE = suite()


def test_every_shipped_scenario_is_in_the_suite_or_says_why_not():
    out = left_out()
    assert sorted(SUITE + list(out)) == sorted(list_scenarios())
    assert not set(SUITE) & set(out)
    assert all(len(why) > 40 for why in out.values()), out


@pytest.mark.parametrize("name", SUITE)
def test_a_suite_scenario_judges_a_policy_on_every_run(name):
    # a performance expectation is not judged on a run that could not keep up: each scenario needs
    # at least one policy expectation, which is
    sc = load_scenario(name)
    assert judges_something(name)
    policy = [e.metric for e in sc.expect if metric_class(e.metric) == "policy"]
    assert policy, f"{name}: no policy expectation among {[e.metric for e in sc.expect]}"


def test_regress_skip_must_say_why():
    with pytest.raises(InputError) as e:
        load_document("x", {"regress_skip": " "}, "scenarios/x.toml")
    assert e.value.field == "regress_skip"
    with pytest.raises(InputError):
        load_document("x", {"regress_skip": 1}, "scenarios/x.toml")


@pytest.mark.parametrize("sab", SABOTAGES, ids=lambda s: s.name)
def test_a_sabotage_changes_a_suite_scenario(sab):
    assert sab.scenario in SUITE
    plain, broken = load_scenario(sab.scenario), load_scenario(sab.scenario, list(sab.sets))
    for text in sab.sets:
        key = text.split("=", 1)[0]
        section, field = key.split(".")
        assert getattr(getattr(plain, section), field) != getattr(getattr(broken, section), field), text
    assert dataclasses.replace(broken, path=plain.path) != plain


def test_the_issue_s_seven_sabotages_ecmp_off_and_the_ecn_tuning_s_are_there():
    assert {s.name for s in SABOTAGES} == {"ecn-off", "dcqcn-off", "pfc-off", "priorities-swapped",
                                            "route-into-failed-link", "isolation-off", "watchdog-off", "ecmp-off",
                                            "ecn-tuning-off", "ecn-tuning-pinned"}
    assert [s.name for s in by_name(["pfc-off", "ecn-off"])] == ["pfc-off", "ecn-off"]
    with pytest.raises(InputError):
        by_name(["no-such"])


def test_an_unknown_sabotage_is_bad_input_and_starts_nothing():
    import subprocess
    import sys
    from testbed.paths import PROJECT_ROOT
    out = subprocess.run([sys.executable, "-m", "testbed", "regress", "--sabotage", "ecn-off,no-such"],
                         cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "no-such" in out.stdout and "no such sabotage" in out.stdout, out.stdout
