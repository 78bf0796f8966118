"""The protobuf wire format, as much of it as Chakra's execution traces use (varints,
length-delimited fields, packed repeated integers): the schema package is not on PyPI."""
from __future__ import annotations

from testbed.traffic.traces.common import TraceError


def _varint(buf: bytes, i: int, path, base: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= len(buf):
            raise TraceError(path, f"byte {base + i}", "truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, i
        if shift > 63:
            raise TraceError(path, f"byte {base + i}", "varint longer than 64 bits")


def _fields(buf: bytes, path, base: int) -> list[tuple[int, int, object, int]]:
    """(field number, wire type, value, offset) of every field of one message."""
    out, i = [], 0
    while i < len(buf):
        at = i
        key, i = _varint(buf, i, path, base)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i, path, base)
        elif wt == 2:
            n, i = _varint(buf, i, path, base)
            if i + n > len(buf):
                raise TraceError(path, f"byte {base + at}", f"field {num} runs {i + n - len(buf)} bytes past its message")
            v, i = buf[i:i + n], i + n
        elif wt in (1, 5):
            n = 8 if wt == 1 else 4
            if i + n > len(buf):
                raise TraceError(path, f"byte {base + at}", f"field {num} is truncated")
            v, i = int.from_bytes(buf[i:i + n], "little"), i + n
        else:
            raise TraceError(path, f"byte {base + at}", f"field {num} has wire type {wt}, not a valid protobuf")
        out.append((num, wt, v, base + at))
    return out


def _packed(v, wt: int, path, base: int) -> list[int]:
    if wt == 0:
        return [v]
    vals, i = [], 0
    while i < len(v):
        x, i = _varint(v, i, path, base)
        vals.append(x)
    return vals
