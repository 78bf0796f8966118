"""[[expect]] paths checked against summary.json's schema, whose sections are typed below the top
level (testbed/analysis/shapes.py, issue 27 item 5): a misspelling is named with the nearest key
before anything runs; a real path into a map, a list or an open record passes."""
import pytest

from testbed.analysis.shapes import metric_path_error
from testbed.analysis.summary import json_schema
from testbed.scenario import list_scenarios, load_scenario


@pytest.mark.parametrize("path", [
    "packets.lost", "collective.bound_ratio", "qos.pfc.pauses_per_mb", "qos.ecn.marked",
    "latency_by_dscp_us.26.p50",                       # a map keyed by DSCP
    "fct_slowdown.by_tag.collective.p99",              # a map keyed by tag
    "jobs.train.slowdown", "jobs.train.collective.bound_ratio",
    "faults.0.reroute_ms",                             # a list, by index
    "transport.steady_state.bottleneck_queue.p99_bytes",
    "dilation.metrics.fct_p99.hardware_us",            # into an open record: not declared here
    "links.ecmp.members_used_share", "isolation.cross_tenant_delivered",
])
def test_a_real_path_passes(path):
    assert metric_path_error(path, json_schema()) is None


@pytest.mark.parametrize("path,words", [
    ("qos.ecn.markd", "did you mean 'marked'?"),
    ("colective.bound_ratio", "did you mean 'collective'?"),
    ("latency_by_dscp_us.26.p5", "did you mean 'p50'?"),
    ("dilation.metrics.fct_p999.hardware_us", "did you mean 'fct_p99'?"),
    ("faults.first.reroute_ms", "expected an index"),
    ("collective.bound_ratio.min", "is a number"),
])
def test_a_misspelled_path_is_named_with_the_nearest_key(path, words):
    why = metric_path_error(path, json_schema())
    assert why and words in why, why


def test_the_committed_schema_is_the_one_the_loader_checks_with():
    # the loader reads docs/summary.schema.json, the generated file (test_reference keeps it current)
    for path in ("qos.ecn.markd", "packets.lost"):
        assert metric_path_error(path) == metric_path_error(path, json_schema())


def test_every_shipped_expectation_names_a_real_path():
    for name in list_scenarios():
        for e in load_scenario(name).expect:
            assert metric_path_error(e.metric) is None and (not e.than or metric_path_error(e.than) is None), e
