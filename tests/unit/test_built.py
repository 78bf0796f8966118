"""A compiled file is used only if it was built from the source beside it (testbed/built.py)."""
import shutil

from testbed.built import built_from, source_sha256, stale_build
from testbed.fabric import bpfmaps
from testbed.traffic import nic


def test_make_setups_builds_carry_their_sources_hash():
    # what `make setup` built is what the loaders accept, and carries exactly its source's hash
    assert built_from(nic.LIBRARY) == source_sha256(nic.SOURCE)
    assert built_from(bpfmaps.OBJECT) == source_sha256(bpfmaps.SOURCE)
    assert stale_build(nic.LIBRARY, nic.SOURCE, "nic") is None
    assert stale_build(bpfmaps.OBJECT, bpfmaps.SOURCE, "bpf") is None


def test_a_build_of_another_source_is_refused_even_when_newer(tmp_path):
    # the hazard that make's file times miss: the real library beside a source that changed after
    # it was built, the library copied in later (newer than the source)
    source = tmp_path / "nicdp.c"
    source.write_bytes(nic.SOURCE.read_bytes() + b"\n/* changed */\n")
    lib = tmp_path / "libnicdp.so"
    shutil.copy(nic.LIBRARY, lib)
    assert lib.stat().st_mtime >= source.stat().st_mtime
    why = stale_build(lib, source, "nic")
    assert why and "built from another nicdp.c" in why and "make nic" in why


def test_a_missing_or_unmarked_build_is_refused(tmp_path):
    assert "is missing" in stale_build(tmp_path / "libnicdp.so", nic.SOURCE, "nic")
    unmarked = tmp_path / "port_qos.bpf.o"
    unmarked.write_bytes(b"\x7fELF" + bytes(64))
    assert "carries no source hash" in stale_build(unmarked, bpfmaps.SOURCE, "bpf")


def test_the_port_programs_sizes_are_the_ones_python_uses():
    # one definition each in Python; the C program's #defines must match it, or a scenario of
    # MAX_CLASSES classes would index queues the port program does not have
    import re
    from testbed.scenario import MAX_CLASSES
    defines = dict(re.findall(r"^#define (\w+) (\d+)\b", bpfmaps.SOURCE.read_text(), re.M))
    assert int(defines["MAX_CLASSES"]) == MAX_CLASSES == bpfmaps.MAX_CLASSES
    assert int(defines["MAX_QUEUES"]) == bpfmaps.MAX_QUEUES
    assert int(defines["HIST_BUCKETS"]) == bpfmaps.HIST_BUCKETS
    assert int(defines["NON_IP_KEY"]) == bpfmaps.NON_IP_KEY
