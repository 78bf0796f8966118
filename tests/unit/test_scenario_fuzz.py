"""Malformed scenario documents get an InputError naming where, and nothing else escapes."""
import dataclasses
import math
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.errors import InputError
from testbed.scenario import SECTIONS, load_document

keys = st.one_of(st.sampled_from(sorted({f for cls in SECTIONS.values() for f in cls.__dataclass_fields__}
                                        | set(SECTIONS) | {"faults", "description", "scenario_version"})),
                 st.text(string.ascii_letters + "_.-$;`|&", min_size=1, max_size=12))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
                    st.sampled_from(["4MiB", "1e9", "-1", "$(reboot)", "; rm -rf /", "torus", "ecmp"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(keys, inner, max_size=4)), max_leaves=12)
documents = st.dictionaries(keys, values, max_size=6)
section_docs = st.fixed_dictionaries({}, optional={s: st.dictionaries(keys, values, max_size=5) for s in SECTIONS})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(documents, section_docs))
def test_loader_accepts_or_names_the_field(doc):
    try:
        sc = load_document("fuzz", doc, "scenarios/fuzz.toml")
    except InputError as e:
        assert e.where == "scenarios/fuzz.toml"
        assert str(e).startswith("scenarios/fuzz.toml: ")
        return
    # what is accepted is within the schema's ranges
    for section in SECTIONS:
        obj = getattr(sc, section)
        for f in dataclasses.fields(obj):
            v, lo, hi = getattr(obj, f.name), f.metadata["lo"], f.metadata["hi"]
            if f.metadata["kind"] in ("int", "float", "bytes"):
                assert math.isfinite(v) and (lo is None or v >= lo) and (hi is None or v <= hi), (f.name, v)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=30), max_size=3))
def test_overrides_accept_or_name_set(overrides):
    try:
        load_document("fuzz", {}, "scenarios/fuzz.toml", overrides)
    except InputError as e:
        assert e.where in ("--set", "scenarios/fuzz.toml")
