"""ECN tuning in the loop on a real run (root): the suite's ecn-tuning-incast, where the tuning
starts from a profile that lets the queue overshoot its budget. Its moves go through the QoS app
like any app's, reach the switch agent, and the switches run the last one; the summary's account
of them is the event log's."""
import json

import pytest

from testbed.runfolder import read_jsonl

pytestmark = pytest.mark.root

NAME = "ecn-tuning-incast"


def test_the_switches_end_on_the_profile_the_tuning_last_set(suite_runs):
    run = suite_runs.get(NAME)
    tuning = run.summary["qos"]["ecn_tuning"]
    roce = tuning["classes"]["roce"]
    assert roce["changes"] > 0 and roce["end"] != roce["start"]
    agent = json.loads((run.run_dir / "raw" / "agent.json").read_text())
    ran = {(q["profile"]["kmin_bytes"], q["profile"]["kmax_bytes"], q["profile"]["pmax"])
           for q in agent["queues"] if q["class_name"] == "roce"}
    assert ran == {(roce["end"]["kmin_bytes"], roce["end"]["kmax_bytes"], roce["end"]["pmax"])}


def test_every_move_is_one_request_the_qos_app_took_and_the_agent_applied(suite_runs):
    run = suite_runs.get(NAME)
    events = read_jsonl(run.run_dir / "raw" / "controller_events.jsonl")
    moves = [e for e in events if e["event"] == "ecn_tuning_change"]
    taken = [e for e in events if e["event"] == "qos_app_request" and e["app"] == "EcnTuning"]
    assert len(moves) == len(taken) == run.summary["qos"]["ecn_tuning"]["changes"] > 0
    # Kmin, Kmax and Pmax in one request each time: the agent never ran half a move
    assert all(set(e["fields"]) == {"ecn_kmin_bytes", "ecn_kmax_bytes", "ecn_pmax"} for e in taken)
    assert [e["fields"]["ecn_kmin_bytes"] for e in taken] == [m["after"]["kmin_bytes"] for m in moves]
    applied = [e for e in events if e["event"] == "qos_applied"]
    assert applied and applied[-1]["t_ns"] >= taken[-1]["t_ns"]
    assert not [e for e in events if e["event"] in ("ecn_tuning_refused", "app_error")]
