"""Hardware time on real runs (root): the flagship at two dilation factors agrees in hardware
time, and the receiving NIC's delay line adds each path's latency, dilated (docs/dilation.md)."""
import json
import subprocess
import sys

import pandas as pd
import pytest

from helpers import ROOT, assert_ran, run_dirs, run_testbed, summary_of
from testbed.fabric.agent import INPUT_SAMPLE_NS
from testbed.run.calibrate import run_again

pytestmark = pytest.mark.root

ONE = ["--set", "workload.iterations=1", "--set", "workload.bytes_per_rank=2MiB", "--set", "run.report=false"]
# how far apart faithful runs of the flagship land in hardware time (docs/dilation.md, "A frame's
# time on the wire"): 10 valid runs of this configuration at D = 25000, 31500 and 50000 (2026-12-03,
# steal 2-28%) spread over 1.16% in iteration time (395.8-400.4 us) and 0.0112 in bound / measured
# (0.9731-0.9843); each tolerance is 1.5 x that range. The 1% before it held while the host NIC's
# burst let each ring step end up to two frames early, which hid the emulator's own latency by an
# amount that varied with the machine; in CI two faithful runs came 1.05% apart. A wrong dilation
# moves far more: a rate left undilated by D's own factor, the path latency left undilated (a fifth
# of this bound) by a tenth of the iteration at 2D.
ITERATION_REL = 0.0175
BOUND_RATIO_ABS = 0.0175


def judged_run(tmp_path_factory, name, *sets):
    """One flagship run that reached a verdict: a run the machine could not keep up with
    (inconclusive: on a VM whose CPU is stolen, the data plane was off it for 45 ms) is run again by
    make regress's rule (testbed.run.calibrate.run_again), and a last inconclusive one fails the test
    that needs it."""
    runs = 0
    while True:
        folder = tmp_path_factory.mktemp(name)
        assert_ran(run_testbed(folder, "run", "allreduce-torus", *ONE, *sets, timeout=600))
        (run_dir,) = run_dirs(folder)
        s = summary_of(run_dir)
        runs += 1
        if s["status"] != "inconclusive" or not run_again(runs, s):
            return run_dir, s


@pytest.fixture(scope="module")
def two_factors(tmp_path_factory):
    """The flagship at auto D, then at 2D."""
    out = {1: judged_run(tmp_path_factory, "auto")}
    factor = out[1][1]["dilation"]["factor"] * 2
    out[2] = judged_run(tmp_path_factory, "double", "--set", f"run.dilation={factor:g}")
    return out


def test_auto_dilation_is_recorded_with_its_calibration(two_factors):
    d1, s1 = two_factors[1]
    d = s1["dilation"]
    assert d["chosen_by"] == "auto" and d["factor"] > 1 and d["calibration"]["faithful_mbps"] > 0
    assert d["emulated"]["link_mbps"] == pytest.approx(d["hardware"]["link_gbps"] * 1e3 / d["factor"])
    manifest = json.loads((d1 / "manifest.json").read_text())
    assert manifest["scenario"]["dilation"]["factor"] == d["factor"]
    assert manifest["scenario"]["version"] == 2
    s2 = two_factors[2][1]
    assert s2["dilation"]["chosen_by"] == "set" and s2["dilation"]["factor"] == 2 * d["factor"]


def test_the_flagship_agrees_in_hardware_time_at_two_factors(two_factors):
    (_, a), (_, b) = two_factors[1], two_factors[2]
    assert a["status"] == b["status"] == "ok", (a["problems"], b["problems"], a["fidelity"]["notes"],
                                                b["fidelity"]["notes"])
    ta = a["dilation"]["metrics"]["iteration_s"]["hardware_s"]
    tb = b["dilation"]["metrics"]["iteration_s"]["hardware_s"]
    assert tb == pytest.approx(ta, rel=ITERATION_REL)
    # the emulated times are D apart, the hardware ones are not
    assert b["collective"]["mean_time_s"] == pytest.approx(2 * a["collective"]["mean_time_s"], rel=ITERATION_REL)
    assert b["collective"]["bound_ratio"] == pytest.approx(a["collective"]["bound_ratio"], abs=BOUND_RATIO_ABS)
    assert a["collective"]["bound_ratio"] >= 0.95


def test_the_delay_line_adds_each_paths_latency(two_factors):
    d1, s = two_factors[1]
    factor = s["dilation"]["factor"]
    plan = json.loads((d1 / "raw" / "plan.json").read_text())
    # ring neighbours on the snake: host, switch, switch, host: 3 x 500 ns + 2 x 500 ns, dilated
    assert {f["delay_ns"] for f in plan["flows"]} == {round(2500 * factor)}
    pkts = pd.read_parquet(d1 / "packets.parquet")
    bw = {h["name"]: h["bw_bps"] for h in plan["hosts"]}
    dst = {f["id"]: f["dst"] for f in plan["flows"]}
    pkts["dst"] = pkts["flow"].map(dst)
    # each frame's own time on the wire, at line rate (its last bit is in a frame time after its
    # first), less the nanosecond the engine's integer times may round away
    pkts["wire_ns"] = pkts["bytes"] * 8e9 / pkts["dst"].map(bw) - 1
    one_way = (pkts["rx_ns"] - pkts["depart_ns"]).astype(float)
    assert (one_way >= 2500 * factor + pkts["wire_ns"]).all()
    got = pkts[pkts["rx_ns"].notna()]
    assert (got["link_ns"].astype(float) >= got["wire_ns"]).all()
    # each frame's last bit comes a frame time after the last bit of its queue pair's frame before
    # it: however the host NIC's shaper bursts, no queue pair arrives faster than line rate
    for _, g in pkts[pkts["rx_ns"].notna()].sort_values("rx_ns").groupby("flow"):
        assert (g["rx_ns"].diff().iloc[1:].astype(float) >= g["wire_ns"].iloc[1:]).all()
    engine = json.loads((d1 / "raw" / "engine.json").read_text())
    assert engine["delayed_frames"] >= len(pkts)   # every data frame, and the ACKs back
    e = s["dilation"]["emulator_latency"]
    assert e["judged"] and e["ok"] and e["share"] < e["max_share"]
    # the hardware one-way latency is the configured path and what the fabric added
    assert s["dilation"]["metrics"]["one_way_latency_p50"]["hardware_us"] >= 2.5


RUNG = """
import json, sys
from pathlib import Path
from testbed.run.calibrate import calibration_scenario, run_and_analyze
from testbed.scenario import load_scenario
sc = calibration_scenario(load_scenario("allreduce-torus", ["fabric.dims=[2, 2]"]), float(sys.argv[1]))
s = run_and_analyze(sc, Path(sys.argv[2]), log=print)
print(json.dumps({"traffic_s": sc.workload.bytes_per_rank * 8 / (sc.fabric.bw_mbps * 1e6)}))
"""


def test_a_calibration_rung_far_above_the_machine_stops_once_no_verdict_could_pass_it(tmp_path):
    # The 2x2 torus at 400 Mb/s a link, ten times the ladder's top: Open vSwitch falls behind at
    # once. The rung's switch agent says so as soon as its backlog is in more samples than the
    # verdict allows of all the rung could still take, and the runner stops the traffic there,
    # long before the rung's own line-rate time; the verdict is the one the whole rung would have
    # had (2026-12-05, before: a 40 Mb/s rung of the 4x4 torus ran 33.8 s, now 13.5 s)
    out = subprocess.run([sys.executable, "-c", RUNG, "400", str(tmp_path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    traffic_s = json.loads(out.stdout.strip().splitlines()[-1])["traffic_s"]
    (run_dir,) = run_dirs(tmp_path)
    s = summary_of(run_dir)
    assert s["fidelity"]["verdict"] == "could_not_keep_up"
    assert any(n.endswith("the calibration rung was stopped once no verdict could pass it")
               for n in s["fidelity"]["notes"]), s["fidelity"]["notes"]
    behind = json.loads((run_dir / "raw" / "behind.json").read_text())
    engine = json.loads((run_dir / "raw" / "engine.json").read_text())
    # stopped before even a faithful rung could have sent it all, at line rate
    assert engine["reason"] == "terminated" and (engine["end_ns"] - engine["start_ns"]) / 1e9 < traffic_s
    # sound: the samples the agent went on to take stayed within the bound it stopped on, and its
    # backlog then was past the verdict's share of them all
    backlog = json.loads((run_dir / "raw" / "agent.json").read_text())["ovs_input_backlog"]
    bound = behind["samples"] + behind["give_up_after_s"] * 1e9 / INPUT_SAMPLE_NS + 1
    assert backlog["stopped_the_run"] and backlog["samples"] <= bound
    assert backlog["busy_samples"] / backlog["samples"] >= behind["busy_samples"] / bound > 0.05
