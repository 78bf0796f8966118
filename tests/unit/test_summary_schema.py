"""summary.json's contract: the committed JSON Schema (docs/summary.schema.json) is what the Summary
types say (`make docs` writes it), a record of those types passes it, and one that breaks it fails:
a section missing, a field the schema does not know, a count that is not an integer, a status no
reader knows. The root tests validate every real run's summary.json against the same file."""
import json
from pathlib import Path

import jsonschema
import pytest

from testbed.analysis.summary import SCHEMA_PATH, SUMMARY_VERSION, Summary, json_schema, status_of
from testbed.reference import summary_schema_text


DATA = Path(__file__).with_name("data")
# real runs' summaries (2026-12-05, commit 1f97665): two jobs of two tenants, with their isolation
# probes and PFC; a 3D torus with a link that fails and returns; both carried to summary_version 5 by
# its counters of bit errors, packets.icrc_drops, corrupted_frames and lost_to_bit_errors, 0 in both
# (neither scenario checks ICRCs or has a corrupt fault)
REAL = ("summary-two-jobs-fattree.json", "summary-linkfail-torus3d.json")


def a_summary(name: str = REAL[0]) -> Summary:
    return Summary.from_json(json.loads((DATA / name).read_text()))


def test_the_committed_schema_is_current():
    assert SCHEMA_PATH.read_text() == summary_schema_text(), "docs/summary.schema.json is stale: run make docs"


@pytest.mark.parametrize("name", REAL)
def test_a_summary_passes_and_survives_a_round_trip(name):
    s = a_summary(name)
    doc = json.loads(json.dumps(s.to_json()))
    jsonschema.validate(doc, json_schema())
    assert Summary.from_json(doc) == s


@pytest.mark.parametrize("break_it", [
    lambda d: d.pop("packets"),
    lambda d: d["packets"].pop("unaccounted"),
    lambda d: d["fidelity"].update(kept_up=True),
    lambda d: d["packets"].update(lost=1.5),
    lambda d: d.update(status="valid"),
    lambda d: d["fidelity"].update(verdict="valid"),
    # the sections below the top level (testbed/analysis/shapes.py)
    lambda d: d["collective"].pop("bound_ratio"),
    lambda d: d["qos"]["ecn"].update(markd=1),
    lambda d: d["jobs"]["train"].update(slowdown="slow"),
    lambda d: d["faults"].append({"t_ns": 1}),
    lambda d: d["latency_by_dscp_us"]["26"].update(p5=1.0),
    lambda d: d["transport"].update(steady_state={"jain_index": 1.0}),
])
def test_a_summary_that_breaks_the_contract_fails(break_it):
    doc = a_summary().to_json()
    break_it(doc)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, json_schema())


def test_another_version_is_refused():
    doc = a_summary().to_json() | {"summary_version": SUMMARY_VERSION + 1}
    with pytest.raises(ValueError, match="summary_version"):
        Summary.from_json(doc)


def test_one_status_by_precedence():
    assert status_of([], None, 0, []) == "ok"
    assert status_of([], None, 0, [{"ok": False}]) == "regressed"
    assert status_of(["lost"], None, 0, [{"ok": False}]) == "failed"
    assert status_of(["lost"], {"cycle": []}, 0, []) == "deadlock"
    assert status_of([], {"cycle": []}, 2, []) == "failed"


def test_every_kind_of_fault_record_passes():
    # what testbed.run.faults writes for each action, with what testbed.analysis.tables.fault_table
    # adds: a corrupt fault's rate and ports too (a CI run found them missing from the schema)
    reaction = {"reroute_ms": None, "lost_packets_around": 0, "traffic_affected_ms": None, "traffic_recovered_ms": None}
    doc = a_summary().to_json()
    doc["faults"] = [
        {"t_ns": 1, "at_s": 0.0, "action": "link_down", "link": "s0-s1", "links": ["s0-s1"], **reaction},
        {"t_ns": 2, "at_s": 0.1, "action": "switch_up", "switch": "s0", "links": ["s0-s1"], **reaction},
        {"t_ns": 3, "at_s": 0.2, "action": "controller_kill", **reaction},
        {"t_ns": 4, "at_s": 0.0, "action": "corrupt", "link": "*", "frame_error_rate": 1e-4,
         "ports": ["s0-eth1", "s0-eth2"], **reaction}]
    jsonschema.validate(doc, json_schema())
