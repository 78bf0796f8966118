"""The command line's exit codes and messages: a setup problem apart from a regression (1) and bad
input (2), every code listed in --help, error text printed as written (issue 27, item 5-6)."""
import subprocess
import sys
from pathlib import Path

from testbed.cli import EXIT_CODES
from testbed.errors import Busy, InputError, RunFailed, SetupError, Terminated

ROOT = Path(__file__).resolve().parents[2]


def cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "testbed", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_every_exit_code_is_distinct_and_listed_in_help():
    codes = [RunFailed.exit_code, InputError.exit_code, Busy.exit_code, SetupError.exit_code, Terminated.exit_code]
    assert len(set(codes)) == len(codes) and set(codes) <= set(EXIT_CODES)
    out = cli("--help")
    assert out.returncode == 0
    for code in EXIT_CODES:
        assert f"  {code:>3}  " in out.stdout, out.stdout


def test_too_few_runs_for_a_spread_is_a_setup_problem_not_a_regression(tmp_path):
    out = cli("spread", "incast-ecn", str(tmp_path))
    assert out.returncode == SetupError.exit_code == 5, out.stdout + out.stderr
    assert "a spread needs" in out.stdout


def _summary(run_id, t, commit="0123456789ab"):
    return {"scenario": "incast-ecn", "run_id": run_id, "git_commit": commit, "status": "ok",
            "fidelity": {"verdict": "kept_up"}, "collective": {"mean_time_s": t}}


def test_a_spread_recorded_in_its_ledger_outlives_the_run_folders_and_a_dirty_run_is_refused(tmp_path):
    import json
    import os
    env = {**os.environ, "TESTBED_BASELINE_DIR": str(tmp_path / "baselines")}

    def spread(*args):
        return subprocess.run([sys.executable, "-m", "testbed", "spread", "incast-ecn", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, env=env)
    runs = tmp_path / "runs"
    # too few yet: recorded, and said so, which is what was asked
    (runs / "r00").mkdir(parents=True)
    (runs / "r00" / "summary.json").write_text(json.dumps(_summary("r00", 1.0)))
    out = spread(str(runs), "--record")
    assert out.returncode == 0 and "1 of the 20 faithful runs a spread needs: no tables yet" in out.stdout, out.stdout
    for i in range(20):
        (runs / f"r{i:02}").mkdir(parents=True, exist_ok=True)
        (runs / f"r{i:02}" / "summary.json").write_text(json.dumps(_summary(f"r{i:02}", 1.0 + i / 100)))
    out = spread(str(runs), "--record")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "19 run(s) added to" in out.stdout and "(1 already there)" in out.stdout and 'metric = "collective.mean_time_s"' in out.stdout
    tables = out.stdout[out.stdout.index("[[tolerance]]"):]
    # the folders gone: the ledger alone gives the same tables
    empty = tmp_path / "empty"
    empty.mkdir()
    again = spread(str(empty))
    assert again.returncode == 0 and again.stdout[again.stdout.index("[[tolerance]]"):] == tables, again.stdout
    assert "20 runs (20 from its spread ledger)" in again.stdout
    # a run of a tree with uncommitted changes is refused, by name, and nothing is added
    (runs / "dirty").mkdir()
    (runs / "dirty" / "summary.json").write_text(json.dumps(_summary("dirty", 5.0, "0123456789ab-dirty")))
    out = spread(str(runs), "--record")
    assert out.returncode == SetupError.exit_code, out.stdout + out.stderr
    assert "run dirty" in out.stdout and "uncommitted" in out.stdout
    ledger = tmp_path / "baselines" / "spread" / "incast-ecn.jsonl"
    assert len(ledger.read_text().splitlines()) == 20


def test_a_spread_leaves_out_the_runs_a_set_changed_the_policy_of_and_says_which(tmp_path):
    # a sabotage's runs share results/<scenario>/ with the scenario's own: ECN off, in incast-ecn's
    # spread, would widen its marks' tolerance down to the sabotage
    import json
    import os
    env = {**os.environ, "TESTBED_BASELINE_DIR": str(tmp_path / "baselines")}
    runs = tmp_path / "runs"
    for i in range(20):
        (runs / f"r{i:02}").mkdir(parents=True)
        (runs / f"r{i:02}" / "summary.json").write_text(json.dumps(
            {**_summary(f"r{i:02}", 1.0 + i / 100), "overrides": ["run.dilation=31500"] if i % 2 else []}))

    def spread(*args):
        return subprocess.run([sys.executable, "-m", "testbed", "spread", "incast-ecn", str(runs), *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, env=env)
    clean = spread()
    assert clean.returncode == 0 and "left out" not in clean.stdout, clean.stdout + clean.stderr
    (runs / "sabotage").mkdir()
    (runs / "sabotage" / "summary.json").write_text(json.dumps(
        {**_summary("sabotage", 9.0), "overrides": ["qos.ecn=false", "controller.ecn_tuning_kmin_bytes=[1, 2]"]}))
    out = spread("--record")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 run(s) left out" in out.stdout and "sabotage (qos.ecn=false controller.ecn_tuning_kmin_bytes=[1, 2])" \
        in " ".join(out.stdout.split()), out.stdout
    assert "20 run(s) added" in out.stdout
    assert out.stdout[out.stdout.index("[[tolerance]]"):] == clean.stdout[clean.stdout.index("[[tolerance]]"):]
    assert "sabotage" not in (tmp_path / "baselines" / "spread" / "incast-ecn.jsonl").read_text()


def test_error_text_keeps_its_brackets(tmp_path):
    # rich would read "[[faults]]" as markup and print "[]"
    bad = tmp_path / "bad.toml"
    bad.write_text("faults = 1\n")
    out = cli("check", str(bad))
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"{bad}: faults: expected an array of tables [[faults]]" in " ".join(out.stdout.split()), out.stdout


def test_a_file_from_any_path_is_checked_and_a_misspelling_gets_a_suggestion(tmp_path):
    mine = tmp_path / "my-ecn.toml"
    mine.write_text((ROOT / "scenarios" / "incast-ecn.toml").read_text())
    out = cli("check", str(mine), "--set", "classes.roce.ecn_kmin_bytes=50KB", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    out = cli("check", str(mine), "--set", "classes.roce.ecn_kmn_bytes=50KB")
    assert out.returncode == 2 and "did you mean 'ecn_kmin_bytes'?" in out.stdout, out.stdout


def test_the_testbed_console_script_is_declared_and_runs_main():
    from importlib.metadata import entry_points
    (ep,) = entry_points(group="console_scripts", name="testbed")
    assert ep.value == "testbed.cli:main"
    out = subprocess.run([str(Path(sys.executable).parent / "testbed"), "check", "no-such-scenario"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "no scenario 'no-such-scenario'" in out.stdout, out.stdout + out.stderr
