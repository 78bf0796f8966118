"""Is a compiled file built from the source beside it? `make` goes by file times, and a binary
newer than its source (copied in, or left from another checkout) is never rebuilt: runs would then
measure other code than the tree's. So every compiled file carries the SHA-256 of the source it was
built from (the Makefile passes it as SOURCE_SHA256), and its loader compares it with the source's."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

# what the C sources put before the hash, in a string the compiler keeps
MARK = b"testbed-source-sha256:"
_HASH = re.compile(re.escape(MARK) + rb"([0-9a-f]{64})")


def source_sha256(source: Path) -> str:
    return hashlib.sha256(source.read_bytes()).hexdigest()


def built_from(binary: Path) -> str | None:
    """The source hash a compiled file carries, or None if it carries none."""
    m = _HASH.search(binary.read_bytes())
    return m.group(1).decode() if m else None


def stale_build(binary: Path, source: Path, make_target: str) -> str | None:
    """Why binary is not a build of source as it is now (None when it is)."""
    if not binary.exists():
        return f"{binary} is missing: run `make {make_target}` (part of `make setup`)"
    carried = built_from(binary)
    if carried is None:
        return f"{binary} carries no source hash (built by hand?): run `make {make_target}`"
    current = source_sha256(source)
    if carried != current:
        return (f"{binary} was built from another {source.name} (sha256 {carried[:12]}, this tree's is "
                f"{current[:12]}): remove it and run `make {make_target}`")
    return None
