"""docs/scenario-reference.md is what `make docs` writes from the field declarations: a field added,
renamed or re-documented in testbed/scenario/schema.py without regenerating it fails here."""
import dataclasses

from testbed import scenario as S
from testbed.reference import ARRAYS, REFERENCE_PATH, reference_markdown


def test_the_committed_scenario_reference_is_current():
    assert REFERENCE_PATH.read_text() == reference_markdown(), "docs/scenario-reference.md is stale: run make docs"


def test_the_reference_names_every_field_of_every_table_with_its_default():
    text = reference_markdown()
    for name, cls in {**S.SECTIONS, **ARRAYS}.items():
        assert f"## [{name}]" in text or f"## [[{name}]]" in text
        for f in dataclasses.fields(cls):
            if "kind" in f.metadata:
                assert f"| `{f.name}` | {f.metadata['kind']} |" in text, (name, f.name)
    # a bytes default reads as a size too
    assert "| `queue_limit_bytes` | bytes | 262144 (256 KiB) |" in text
