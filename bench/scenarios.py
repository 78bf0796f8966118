"""Running a benchmark's scenario: the bench's own scenario files (bench/scenarios/), the same
runner and analysis as `testbed run`, results under results/bench/."""
from __future__ import annotations

import tomllib
from pathlib import Path

from testbed.analysis import summary as analysis
from testbed.run import runner
from testbed.run.calibrate import resolve
from testbed.scenario import Scenario, load_document, load_scenario

HERE = Path(__file__).resolve().parent
RESULTS = runner.RESULTS_DIR / "bench"


def load(name: str, overrides: list[str]) -> Scenario:
    path = HERE / "scenarios" / f"{name}.toml"
    return load_document(name, tomllib.loads(path.read_text()), f"bench/scenarios/{path.name}", overrides)


def run(name: str, overrides: list[str], log) -> tuple[Path, dict]:
    """One real run and its analysis, at the scenario's dilation (auto: calibrated here)."""
    sc = resolve(load(name, overrides), log=log)
    run_dir = runner.run(sc, log=log, results_dir=RESULTS)
    return run_dir, analysis.analyze(run_dir)


def run_named(name: str, overrides: list[str], log) -> tuple[Path, dict]:
    """A scenario of scenarios/, with the bench's overrides; results under results/bench/ too."""
    run_dir = runner.run(resolve(load_scenario(name, overrides), log=log), log=log, results_dir=RESULTS)
    return run_dir, analysis.analyze(run_dir)
