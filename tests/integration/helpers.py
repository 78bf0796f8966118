"""Helpers for tests that run real emulations (root, Open vSwitch, Mininet)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
from pyroute2 import IPRoute

ROOT = Path(__file__).resolve().parents[2]
SUMMARY_SCHEMA = json.loads((ROOT / "docs" / "summary.schema.json").read_text())
# 1 MiB a rank: each ring step's 256 KiB keeps a host busy for more than a fidelity window of 20
# frames, though every step waits its path's latency (a 64 KiB step, at 16 frames, is never judged)
SMALL = ["--set", "fabric.dims=[2, 2]", "--set", "workload.bytes_per_rank=1MiB",
         "--set", "workload.iterations=2"]


def cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "testbed", *args]


def env_with_results(results: Path) -> dict:
    return {**os.environ, "TESTBED_RESULTS_DIR": str(results)}


def run_testbed(results: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cli_argv(*args), cwd=ROOT, env=env_with_results(results),
                          capture_output=True, text=True, timeout=timeout)


def bridges() -> set[str]:
    return set(subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True, check=True).stdout.split())


def fabric_interfaces() -> set[str]:
    """Root-namespace interfaces named like the testbed's switch ports."""
    with IPRoute() as ipr:
        names = {l.get_attr("IFLA_IFNAME") for l in ipr.get_links()}
    return {n for n in names if n.startswith("s") and "-eth" in n}


def run_dirs(results: Path) -> list[Path]:
    return sorted(p.parent for p in results.glob("*/*/manifest.json"))


def summary_of(run_dir: Path) -> dict:
    """A run's summary.json, held to its published schema (docs/summary.schema.json) on the way."""
    s = json.loads((run_dir / "summary.json").read_text())
    jsonschema.validate(s, SUMMARY_SCHEMA)
    return s


# a run's status when nothing failed: ok, or inconclusive when the emulation did not run the fabric
# faithfully (or too little was busy to judge it); the tests of mechanisms take either, the tests
# of results (bounds, fairness, the dilation sweep) judge only faithful runs
NOTHING_FAILED = ("ok", "inconclusive")


def assert_ran(out: subprocess.CompletedProcess) -> None:
    """A run or analysis in which nothing failed: exit 0 and OK when the emulation ran the fabric
    faithfully, exit 4 and INCONCLUSIVE when it did not (or too little was busy to judge), as on a
    loaded 2-core machine; never OK then."""
    assert out.returncode in (0, 4), out.stdout[-8000:] + out.stderr[-4000:]
    assert ("\nOK\n" in out.stdout) == (out.returncode == 0), out.stdout[-8000:]
    assert out.returncode == 0 or "INCONCLUSIVE: nothing failed" in out.stdout, out.stdout[-8000:]


def deep_incast(tmp_path, buffer="4MiB", folder="scenarios"):
    """lossy-fabric's 4:1 incast at 40 Mb/s (its 100 Gb/s at D = 2500) into a buffer deep enough to lose nothing: a scenario
    this 2-core machine runs faithfully with a link busy throughout (valid in 2 of 3 runs measured,
    bound ratio 0.996 in each; at 100 Mb/s and at 20 Mb/s the host-side rule failed it in every run,
    and dateline-torus, which PFC pauses, has no link backlogged long enough to be judged)."""
    text = (ROOT / "scenarios" / "lossy-fabric.toml").read_text()
    # without lossy-fabric's expectations, which are of a port that drops (this one must not)
    head, sep, _ = text.partition("\n[[expect]]")
    assert sep, "lossy-fabric.toml has expectations to leave out"
    text = head.rsplit("\n# Go-back-N's outcome", 1)[0] + "\n"
    for a, b in (('buffer_bytes = "64KiB"', f'buffer_bytes = "{buffer}"'), ("\nrto_ms = 0.025", "\nrto_ms = 0.8"),
                 ('\ndilation = "auto"', "\ndilation = 2500"), ('bytes_per_rank = "1MiB"', 'bytes_per_rank = "512KiB"')):
        assert a in text, a
        text = text.replace(a, b)
    d = tmp_path / folder
    d.mkdir()
    (d / "deep-incast.toml").write_text(text)
    return d


class SuiteRun:
    """One `testbed regress NAME`: its process, its machine-readable verdict line, and the run it kept."""

    def __init__(self, name: str, out: subprocess.CompletedProcess):
        self.name, self.out = name, out
        lines = [l for l in out.stdout.splitlines() if l.startswith('{"verdicts"')]
        self.result = json.loads(lines[-1]) if lines else None
        self.run_dir = Path(self.result["runs"][name]) if self.result else None

    @property
    def log(self) -> str:
        return self.out.stdout[-6000:] + self.out.stderr[-3000:]

    @property
    def summary(self) -> dict:
        assert self.run_dir is not None, f"regress {self.name} kept no run:\n{self.log}"
        return summary_of(self.run_dir)


class SuiteRuns:
    """The session's suite runs by scenario name, each made on first use."""

    def __init__(self, root: Path):
        self.root, self.runs = root, {}

    def get(self, name: str) -> SuiteRun:
        if name not in self.runs:
            out = subprocess.run(cli_argv("regress", name), cwd=ROOT, env=env_with_results(self.root / name),
                                 capture_output=True, text=True, timeout=1800)
            self.runs[name] = SuiteRun(name, out)
        return self.runs[name]
