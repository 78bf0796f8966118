"""Scenario files: the schema (testbed.scenario.schema: every field declared once) and the loader
(testbed.scenario.loader: validation, cross-checks) and `--set` overrides
(testbed.scenario.overrides).

A scenario is a TOML file, in scenarios/ or given by its path, with tables [fabric], [controller], [workload],
[transport], [dcqcn], [qos] and [run] (each optional: defaults apply), and optional arrays of
[[classes]], [[policy_changes]], [[faults]], [[expect]], [[tolerance]] and [[jobs]]
(docs/scenario-reference.md). Modules that only need the types import the schema, which imports
nothing of the testbed's model; the loader sits above the workload builders it checks with.
"""
from testbed.scenario.loader import (SCENARIO_DIR, check_class_value, list_scenarios, load_document, load_scenario,
                                     parse_endpoint, policy_field_refused, scenario_path)
from testbed.scenario.overrides import parse_override
from testbed.scenario.schema import (DCQCN_REFERENCE, DEFAULT_CLASSES, EXPECT_OPS, MAX_CLASSES, POLICY_FIELDS,
                                     SCENARIO_VERSION, SECTIONS, TOP_LEVEL, TOPOLOGY_FIELDS, ClassSpec, ControllerSpec,
                                     DcqcnSpec, Dilation, ExpectSpec, FabricSpec, FaultSpec, JobSpec, PolicyChangeSpec,
                                     QosSpec, RunSpec, Scenario, ToleranceSpec, TransportSpec, WorkloadSpec,
                                     build_fabric, dcqcn_described, dcqcn_overrides, dcqcn_reference_rates,
                                     spec)

__all__ = ["DCQCN_REFERENCE", "DEFAULT_CLASSES", "EXPECT_OPS", "MAX_CLASSES", "POLICY_FIELDS", "SCENARIO_DIR",
           "SCENARIO_VERSION", "SECTIONS", "TOP_LEVEL", "TOPOLOGY_FIELDS", "ClassSpec", "ControllerSpec", "DcqcnSpec",
           "Dilation", "ExpectSpec", "FabricSpec", "FaultSpec", "JobSpec", "PolicyChangeSpec", "QosSpec", "RunSpec",
           "Scenario", "ToleranceSpec", "TransportSpec", "WorkloadSpec", "build_fabric", "check_class_value",
           "dcqcn_described", "dcqcn_overrides", "dcqcn_reference_rates", "list_scenarios", "load_document",
           "load_scenario", "parse_endpoint", "parse_override", "policy_field_refused", "scenario_path", "spec"]
