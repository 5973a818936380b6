"""Kafka wire types written out by hand, for golden bytes built independently of the codecs.

Everything here follows the protocol guide (kafka.apache.org/protocol#protocol_types):
fixed-width big-endian integers, unsigned varints, compact (flexible-version) strings,
bytes and arrays whose length is stored plus one with 0 for null, and the tagged-field
section that ends every flexible struct (``TAGS``: no tagged fields).
"""

from __future__ import annotations

import struct
import uuid

TAGS = b"\x00"
NULL = b"\x00"


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def boolean(v: bool) -> bytes:
    return b"\x01" if v else b"\x00"


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def cstr(s: str | None) -> bytes:
    """COMPACT_(NULLABLE_)STRING."""
    if s is None:
        return NULL
    data = s.encode("utf-8")
    return uvarint(len(data) + 1) + data


def string(s: str | None) -> bytes:
    """Classic (NULLABLE_)STRING: int16 length."""
    if s is None:
        return i16(-1)
    data = s.encode("utf-8")
    return i16(len(data)) + data


def cbytes(b: bytes | None) -> bytes:
    """COMPACT_(NULLABLE_)BYTES / COMPACT_RECORDS."""
    if b is None:
        return NULL
    return uvarint(len(b) + 1) + b


def carray(items, each=None) -> bytes:
    """COMPACT_(NULLABLE_)ARRAY; ``each`` encodes one element (default: it is already bytes)."""
    if items is None:
        return NULL
    return uvarint(len(items) + 1) + b"".join(each(x) if each else x for x in items)


def uid(u: uuid.UUID | None) -> bytes:
    return bytes(16) if u is None else u.bytes


def nullable_struct(body: bytes | None) -> bytes:
    """A nullable struct field (KIP-893): int8 -1 for null, 1 then the struct."""
    return b"\xff" if body is None else b"\x01" + body


def request_header_v2(api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> bytes:
    return i16(api_key) + i16(api_version) + i32(correlation_id) + string(client_id) + TAGS


def frame(body: bytes) -> bytes:
    return i32(len(body)) + body
