"""Parsing of sizes written by people: 4096, "4KiB", "4MiB", "1.5MB"."""
from __future__ import annotations

import re

_BYTE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
               "kib": 2**10, "mib": 2**20, "gib": 2**30}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: object) -> int:
    """An integer number of bytes from an int or a string with a unit (B, KB, KiB, MB, MiB, GB, GiB)."""
    if isinstance(value, bool):
        raise ValueError("expected a size in bytes, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        m = _SIZE_RE.match(value)
        if m and m.group(2).lower() in _BYTE_UNITS:
            n = float(m.group(1)) * _BYTE_UNITS[m.group(2).lower()]
            if n.is_integer():
                return int(n)
    raise ValueError(f"expected a size in bytes such as 4096 or \"4MiB\", got {value!r}")
