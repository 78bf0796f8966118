"""summary.json's contract: the committed JSON Schema (docs/summary.schema.json) is what the Summary
types say (`make docs` writes it), a record of those types passes it, and one that breaks it fails:
a section missing, a field the schema does not know, a count that is not an integer, a status no
reader knows. The root tests validate every real run's summary.json against the same file."""
import dataclasses
import json

import jsonschema
import pytest

from testbed.analysis.summary import SCHEMA_PATH, SUMMARY_VERSION, Fidelity, Packets, Summary, json_schema, status_of
from testbed.reference import summary_schema_text


def a_summary() -> Summary:
    packets = Packets(**{f.name: 0 for f in dataclasses.fields(Packets)}
                      | {"ovs_drop_counters": {}, "resent_without_loss": False})
    fidelity = Fidelity(verdict="kept_up", notes=[], hosts={}, engine_late_wakeups={}, machine_busy_fraction=0.5,
                        machine_steal_fraction=None, cores_used={"engine": 0.4}, cpus=2, links={},
                        machine_cpu_idle_fraction=0.5, valid=True)
    return Summary(summary_version=SUMMARY_VERSION, run_id="r", scenario="s", status="ok", problems=[],
                   mechanisms={}, timings_s={}, collective={}, training=None, jobs=None, isolation=None, latency_us={},
                   nic_queueing={}, goodput={},
                   packets=packets, fidelity=fidelity, faults=[], qos=None, latency_by_dscp_us={}, background=[],
                   switch_tx_packets={}, transport={}, time_dilation=None, dilation={}, latency_by_class_us={},
                   fct_slowdown=None,
                   links={}, git_commit=None, expectations=[])


def test_the_committed_schema_is_current():
    assert SCHEMA_PATH.read_text() == summary_schema_text(), "docs/summary.schema.json is stale: run make docs"


def test_a_summary_passes_and_survives_a_round_trip():
    s = a_summary()
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
