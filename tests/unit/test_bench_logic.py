"""The benchmark suite's own logic (no root): the capacity search over a ladder of rates and the
target table."""
import pytest

from bench.__main__ import capacity, targets


def fake_runs(limit, calls):
    def measure(k, bw, payload):
        calls.append(bw)
        return {"bw_mbps": bw, "valid": bw <= limit, "status": "ok", "worst_link_share": None, "notes": []}
    return measure


LADDER = [10, 25, 50, 75, 100]


@pytest.mark.parametrize("limit,start,best,tried", [
    (60, 50, 50, [50, 75]),            # valid at the start, the next one up fails
    (100, 50, 100, [50, 75, 100]),     # valid to the top of the ladder
    (30, 50, 25, [50, 25]),            # invalid at the start: down until one is valid
    (5, 25, None, [25, 10]),           # nothing valid
])
def test_capacity_walks_the_ladder(limit, start, best, tried):
    calls = []
    res = capacity(4, LADDER, 4096, start, measure=fake_runs(limit, calls))
    assert res["capacity_mbps"] == best and calls == tried
    assert [r["bw_mbps"] for r in res["runs"]] == sorted(tried)


def test_a_failed_status_is_not_capacity():
    def measure(k, bw, payload):
        return {"bw_mbps": bw, "valid": True, "status": "failed" if bw > 25 else "ok", "worst_link_share": 1.0,
                "notes": []}
    assert capacity(4, LADDER, 4096, 25, measure=measure)["capacity_mbps"] == 25


def test_targets_say_met_or_not():
    res = {"capacity": {"k4_4096": {"capacity_mbps": 25}, "k8_4096": {"capacity_mbps": None}},
           "agent": {"sender_vs_scapy": 78.0, "lossless_mbps": 2000.0},
           "bringup": {"fat-tree k=4": {"routes_ready_s": 2.6, "teardown_s": 2.5}},
           "telemetry": {"k4": {"achieved_hz": 995.0, "agent_cores": 0.12},
                         "pfc_reaction_us": {"p50": 400.0, "p99": 800.0}}}
    rows = {r[0]: r for r in targets(res)}
    assert rows["k=4 fat-tree, every host across the core, full stack, fidelity valid (4 KB frames)"][3] is False
    assert rows["k=8 fat-tree, all 128 hosts (4 KB frames)"][1] == "None Mb/s"
    assert rows["data plane / Scapy sendp, packets/s per core"][3] is True
    assert rows["fat-tree k=4: start to routes ready / teardown"][3] is True
    assert rows["telemetry over every k=4 port: sweeps/s / agent cores"][3] is True
    assert rows["PFC reaction, XOFF crossing to pause in force, p50 / p99"][3] is True


def test_permutation_rows_fail_on_an_invalid_run_or_a_resend():
    def rows(valid, resent):
        res = {"permutation": {"runs": 3, "valid": valid, "resent_without_loss": resent}}
        return [r[3] for r in targets(res)]
    assert rows(3, 0) == [True, True]
    assert rows(2, 0) == [False, True]
    assert rows(3, 17) == [True, False]


def test_shipped_rows_hold_each_scenario_to_nine_of_ten():
    def sh(kept):
        return {"runs": 10, "kept_up": kept, "dilation": [6300.0], "wall_s": [20.0, 30.0]}
    rows = {r[0]: r for r in targets({"shipped": {"a": sh(10), "b": sh(9), "c": sh(8)}})}
    head = rows["shipped scenarios that kept up in 9 of 10 runs (or all of fewer) at their defaults"]
    assert head[1] == "2 of 3" and head[3] is False
    assert [rows[f"  {n} (D = 6300; 20-30 s)"][3] for n in "abc"] == [True, True, False]
    one = {"runs": 5, "kept_up": 4, "dilation": [], "wall_s": [1.0, 2.0]}   # fewer than 10: all of them
    assert targets({"shipped": {"d": one}})[0][3] is False
