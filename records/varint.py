"""Zig-zag LEB128 varints of the v2 record format (Kafka ``ByteUtils``), read and written.

A varint holds an int32 in at most 5 bytes, a varlong an int64 in at most 10; the
unsigned value ``u`` stands for ``(u >> 1) ^ -(u & 1)``. Readers take ``(buffer,
position)`` and return ``(value, next position)``; they raise
:class:`~records.errors.InvalidRecordError` for an encoding that is too long or out of
range, and let ``IndexError`` escape when the buffer ends first (callers turn it into
their own "runs past the end" error). The per-record walks (:mod:`records.walks`) and
the Spark source's column decoder decode one- and two-byte varints inline on their hot
paths and call these for the rest.
"""

from __future__ import annotations

from .errors import InvalidRecordError
from .layout import INT64_MAX, INT64_MIN


def read_uvarint(b, pos: int, max_bytes: int) -> tuple[int, int]:
    """Unsigned LEB128 of at most ``max_bytes`` bytes at ``pos`` -> (value, next position)."""
    x = b[pos]
    if x < 0x80:
        return x, pos + 1
    result = x & 0x7F
    shift = 7
    n = 1
    while True:
        x = b[pos + n]
        n += 1
        result |= (x & 0x7F) << shift
        if x < 0x80:
            return result, pos + n
        if n >= max_bytes:
            raise InvalidRecordError(f"{'varint' if max_bytes == 5 else 'varlong'} is longer than {max_bytes} bytes")
        shift += 7


def read_varint(b, pos: int) -> tuple[int, int]:
    """Zig-zag varint (int32) at ``pos`` -> (value, next position)."""
    u, pos = read_uvarint(b, pos, 5)
    if u > 0xFFFFFFFF:
        raise InvalidRecordError("varint does not fit in 32 bits")
    return (u >> 1) ^ -(u & 1), pos


def read_varlong(b, pos: int) -> tuple[int, int]:
    """Zig-zag varlong (int64) at ``pos`` -> (value, next position)."""
    u, pos = read_uvarint(b, pos, 10)
    if u > 0xFFFFFFFFFFFFFFFF:
        raise InvalidRecordError("varlong does not fit in 64 bits")
    return (u >> 1) ^ -(u & 1), pos


_SMALL_VARINTS = [bytes([(n << 1) if n >= 0 else ((-n << 1) - 1)]) for n in range(-64, 64)]
#: The encoding of -1 (a null key, value or header value).
NULL_VARINT = b"\x01"


def encode_varint(n: int) -> bytes:
    """Zig-zag LEB128 of a signed int (int32 or int64)."""
    if -64 <= n < 64:
        return _SMALL_VARINTS[n + 64]
    u = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    if u < 0x4000:
        return bytes(((u & 0x7F) | 0x80, u >> 7))
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def wrap64(x: int) -> int:
    """``x`` wrapped to a signed 64-bit value, as Java's ``long`` arithmetic does."""
    if INT64_MIN <= x <= INT64_MAX:
        return x
    return ((x + (1 << 63)) % (1 << 64)) - (1 << 63)


__all__ = ["read_uvarint", "read_varint", "read_varlong", "encode_varint", "wrap64", "NULL_VARINT"]
