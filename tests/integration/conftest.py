import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from helpers import ROOT, cli_argv, env_with_results, run_dirs  # noqa: E402

FOREIGN_BRIDGE = "tbforeign0"


@pytest.fixture(scope="session", autouse=True)
def no_dead_runs_left():
    """A run killed before this session (an aborted test run, a scenario whose shell was killed) keeps
    its bridges until the next run removes them, by that run's own record. Tests that compare the
    fabric before and after a run would take that removal for their run's doing: start from what
    `testbed clean` leaves, which is only ever what dead testbed runs recorded."""
    if os.geteuid() != 0 or not shutil.which("ovs-vsctl"):
        return
    out = subprocess.run(cli_argv("clean"), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"testbed clean failed before the session:\n{out.stdout}{out.stderr}"


@pytest.fixture
def foreign_bridge():
    """A bridge the testbed did not create: every run and every cleanup must leave it alone."""
    subprocess.run(["ovs-vsctl", "--may-exist", "add-br", FOREIGN_BRIDGE, "--", "set", "bridge", FOREIGN_BRIDGE,
                    "datapath_type=netdev"], check=True)
    yield FOREIGN_BRIDGE
    subprocess.run(["ovs-vsctl", "--if-exists", "del-br", FOREIGN_BRIDGE], check=True)


@pytest.fixture(scope="session")
def suite_runs(tmp_path_factory):
    """Each regression-suite scenario run once a session, as `testbed regress NAME` runs it (again
    while the machine could not keep up): test_regression_suite judges its verdict, and the tests
    of the mechanisms a scenario shows read the same run instead of running it once more."""
    from helpers import SuiteRuns
    return SuiteRuns(tmp_path_factory.mktemp("suite"))


@pytest.fixture(scope="session")
def ring_without_dateline(tmp_path_factory):
    """dateline-torus with its dateline policy sabotaged, run once a session: pfc-deadlock-torus's
    fabric and traffic (tests/unit/test_qos.py holds the two files to that) under dateline-torus's
    expectations, so that test_port_qos sees the ring deadlock and test_regression sees the
    sabotage caught, from one run. (The ring with its dateline is the suite's dateline-torus.)
    The completed `testbed run` and its run folder."""
    results = tmp_path_factory.mktemp("ring-without-dateline")
    argv = cli_argv("run", "dateline-torus", "--set", "controller.dateline=false", "--set", "run.report=false")
    out = subprocess.run(argv, cwd=ROOT, env=env_with_results(results), capture_output=True, text=True, timeout=300)
    dirs = run_dirs(results)
    assert dirs, out.stdout + out.stderr
    return out, dirs[-1]
