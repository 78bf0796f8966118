"""Bit errors on a real fabric (root): bit-errors-torus's corrupt fault flips a bit in 1 in 10^4 of
the RoCE data frames every switch port sends; the receivers drop them by their ICRC, go-back-N
resends, and every frame lost is one the fault damaged, counted at the port that sent it."""
import json

import pandas as pd
import pytest
from scipy.stats import poisson

pytestmark = pytest.mark.root

RATE = 1e-4
# how unlikely a count must be before the rate is called wrong: the test fails a correct port
# program once in a million runs
TAIL = 1e-6


def test_every_frame_lost_to_bit_errors_is_one_the_fault_damaged_and_the_ring_completes(suite_runs):
    run = suite_runs.get("bit-errors-torus")
    s = run.summary
    p = s["packets"]
    assert s["status"] == "ok", s["problems"]
    assert s["collective"]["iterations_complete"] == s["collective"]["iterations"]
    assert p["lost"] == p["icrc_drops"] > 0 and p["unaccounted"] == 0
    # frame by frame: each lost transmission is one a receiver's ICRC drop names
    assert p["lost_to_bit_errors"] == p["lost"]
    # a damaged frame a later queue dropped would be that queue's; this lossless ring drops none
    assert p["icrc_drops"] == p["corrupted_frames"] and p["port_buffer_drops"] == 0
    assert p["retransmitted"] >= p["icrc_drops"] and p["naks"] > 0


def test_the_damaged_frames_are_counted_at_the_ports_that_sent_them(suite_runs):
    run = suite_runs.get("bit-errors-torus")
    per_port = json.loads((run.run_dir / "raw" / "corrupted_end.json").read_text())
    ports = pd.read_parquet(run.run_dir / "ports.parquet").set_index("port")
    assert sum(per_port.values()) == run.summary["packets"]["corrupted_frames"]
    assert ports["crc_errors"].sum() == sum(per_port.values())
    assert all(ports.loc[port, "crc_errors"] == n for port, n in per_port.items())


def test_the_ports_damage_frames_at_the_scenarios_rate(suite_runs):
    # every data frame a switch port sent (ECT-marked; ACKs and CNPs are not) had a 1e-4 chance:
    # the count over all ports is Poisson, and one far outside it means the port program's
    # threshold (rate x 2^32) or its choice of frames is wrong
    run = suite_runs.get("bit-errors-torus")
    ports = pd.read_parquet(run.run_dir / "ports.parquet")
    expected = RATE * ports["ect_packets"].sum()
    lo, hi = poisson.ppf(TAIL / 2, expected), poisson.isf(TAIL / 2, expected)
    assert expected > 10
    assert lo <= run.summary["packets"]["corrupted_frames"] <= hi, (expected, lo, hi)
