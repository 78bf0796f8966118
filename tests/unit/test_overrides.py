"""--set reaching array tables by name or place, scenario files from any path, and the 'did you
mean' of a misspelled name (issue 27, item 5)."""
import dataclasses
import json

import pytest

from testbed.errors import InputError
from testbed.scenario import DEFAULT_CLASSES, load_scenario


def by_name(classes):
    return {c.name: c for c in classes}


def test_a_class_is_set_by_its_name_and_nothing_else_changes():
    before = load_scenario("incast-ecn")
    after = load_scenario("incast-ecn", ["classes.roce.ecn_kmin_bytes=50KB", "classes.bulk.weight=3"])
    b, a = by_name(before.classes), by_name(after.classes)
    assert b["roce"].ecn_kmin_bytes == 100000 and a["roce"].ecn_kmin_bytes == 50000
    assert b["bulk"].weight != 3 and a["bulk"].weight == 3
    assert a["roce"] == dataclasses.replace(b["roce"], ecn_kmin_bytes=50000)
    assert a["control"] == b["control"] and [c.name for c in after.classes] == [c.name for c in before.classes]


def test_a_file_without_classes_takes_a_set_on_the_default_classes():
    sc = load_scenario("allreduce-torus", ["classes.roce.xoff_bytes=20KiB"])
    assert sc.classes == tuple(dataclasses.replace(c, xoff_bytes=20 << 10) if c.name == "roce" else c
                               for c in DEFAULT_CLASSES)


def test_a_job_and_its_workload_are_set_by_the_jobs_name():
    before = load_scenario("two-jobs-fattree")
    after = load_scenario("two-jobs-fattree", ["jobs.storage.workload.iterations=5", "jobs.train.tenant=blue"])
    b, a = {j.name: j for j in before.jobs}, {j.name: j for j in after.jobs}
    assert a["storage"].workload.iterations == 5 != b["storage"].workload.iterations
    assert a["train"].tenant == "blue" and a["train"].workload == b["train"].workload
    assert a["storage"].hosts == b["storage"].hosts


def test_faults_are_set_by_their_place_in_the_file():
    before = load_scenario("linkfail-torus3d")
    after = load_scenario("linkfail-torus3d", ["faults.1.at_s=0.002"])
    assert after.faults[1].at_s == 0.002 and after.faults[0] == before.faults[0]
    assert after.faults[1] == dataclasses.replace(before.faults[1], at_s=0.002)


@pytest.mark.parametrize("override,key,words", [
    # a misspelled class, field, section: named, with the nearest right one
    ("classes.rocee.ecn_kmin_bytes=1", "classes.rocee.ecn_kmin_bytes", "did you mean 'roce'?"),
    ("classes.roce.ecn_kmin=1", "classes.roce.ecn_kmin", "did you mean 'ecn_kmin_bytes'?"),
    ("fabirc.k=4", "fabirc.k", "did you mean 'fabric'?"),
    ("qos.enc=true", "qos.enc", "did you mean 'ecn'?"),
    # a bad value set on the command line: named as the user wrote it, not as the file's entry
    ("classes.roce.ecn_kmin_bytes=-5", "classes.roce.ecn_kmin_bytes", "bytes"),
    ("faults.3.at_s=1", "faults.3.at_s", "expected 0..1"),
    ("faults.first.at_s=1", "faults.first.at_s", "numbered from 0"),
    ("classes.roce=1", "classes.roce", "classes.<name>.<field>"),
    ("jobs.train.workload=1", "jobs.train.workload", "expected jobs.<name>.workload.<field>"),
])
def test_bad_array_overrides_name_set_and_the_key(override, key, words):
    name = "two-jobs-fattree" if override.startswith("jobs") else "linkfail-torus3d" \
        if override.startswith("faults") else "incast-ecn"
    with pytest.raises(InputError) as e:
        load_scenario(name, [override])
    assert (e.value.where, e.value.field) == ("--set", key), str(e.value)
    assert words in e.value.message, str(e.value)


def test_a_bad_job_value_set_on_the_command_line_names_set():
    with pytest.raises(InputError) as e:
        load_scenario("two-jobs-fattree", ["jobs.storage.workload.iterations=0"])
    assert (e.value.where, e.value.field) == ("--set", "jobs.storage.workload.iterations"), str(e.value)


def test_a_scenario_file_is_read_from_any_path(tmp_path):
    path = tmp_path / "my-policy.toml"
    path.write_text((load_scenario.__globals__["SCENARIO_DIR"] / "incast-ecn.toml").read_text())
    sc = load_scenario(str(path), ["classes.roce.ecn_kmin_bytes=64KB"])
    assert sc.name == "my-policy" and sc.path == str(path)
    assert by_name(sc.classes)["roce"].ecn_kmin_bytes == 64000
    # its errors name the file as given
    path.write_text(path.read_text().replace("[qos]", "[qos]\nenc = true"))
    with pytest.raises(InputError) as e:
        load_scenario(str(path))
    assert (e.value.where, e.value.field) == (str(path), "qos.enc") and "did you mean 'ecn'?" in str(e.value)


@pytest.mark.parametrize("name,words", [
    ("allreduce-torsu", "did you mean 'allreduce-torus'?"),
    ("/no/such/file.toml", "no such scenario file"),
    ("Bad Name", "neither a scenario name"),
])
def test_a_scenario_that_is_not_there_says_what_is(name, words, tmp_path):
    with pytest.raises(InputError) as e:
        load_scenario(name)
    assert words in str(e.value)


def test_a_file_whose_name_cannot_name_a_run_is_refused(tmp_path):
    path = tmp_path / "My Policy.toml"
    path.write_text("")
    with pytest.raises(InputError) as e:
        load_scenario(str(path))
    assert "names its runs" in str(e.value)


def test_a_scenario_keeps_the_sets_it_was_loaded_with_through_its_record():
    # the run's manifest and summary carry them (a spread or a baseline refuses a run whose --set
    # changed the policy): as given, in order, and none for a scenario as its file has it
    from testbed.scenario import Scenario
    sets = ["qos.ecn=false", "classes.roce.ecn_kmin_bytes=50KB"]
    sc = load_scenario("incast-ecn", sets)
    assert sc.overrides == tuple(sets) and load_scenario("incast-ecn").overrides == ()
    manifest = json.loads(json.dumps(sc.to_dict()))
    assert Scenario.from_dict(manifest) == sc and manifest["overrides"] == sets
    # a run stored before the field existed reads as one without
    d = json.loads(json.dumps(load_scenario("incast-ecn").to_dict()))
    del d["overrides"]
    assert Scenario.from_dict(d).overrides == ()
