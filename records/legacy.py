"""Legacy message sets (magic 0 and 1): key/value access and the inner messages of a wrapper.

Kafka's ``LegacyRecord`` and ``AbstractLegacyRecordBatch``. Layouts are in
:mod:`records.layout`; a :class:`~records.batch.BatchView` describes one message (or
compressed wrapper) and the functions here read its key, value and, for a wrapper,
the inner messages with **absolute** offsets (v1 inner offsets are relative to the
wrapper: absolute = wrapper offset - last inner + inner; a wrapper offset 0 means base 0).
"""

from __future__ import annotations

import struct
import zlib
from typing import Iterator, NamedTuple

from . import codecs
from .errors import CorruptRecordError, InvalidRecordError
from .layout import (
    INT32,
    INT64,
    LEGACY_ATTRIBUTES_OFFSET,
    LEGACY_CRC_OFFSET,
    LEGACY_KEY_LENGTH_OFFSET_V0,
    LEGACY_KEY_LENGTH_OFFSET_V1,
    LEGACY_TIMESTAMP_OFFSET,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V0,
    MAGIC_V1,
    NO_TIMESTAMP,
    NO_TIMESTAMP_TYPE,
    OFFSET_SIZE,
    RECORD_OVERHEAD_V0,
    RECORD_OVERHEAD_V1,
    UINT32,
)
from .record import Record

class LegacyMessage(NamedTuple):
    """One inner message of a legacy compressed wrapper, as stored (offset not yet absolute)."""

    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    crc_valid: bool


def legacy_key_value(buf, start: int, size_bytes: int, magic: int):
    """(key bytes | None, value view | None) of the legacy message at ``buf[start:start + size_bytes]``."""
    end = start + size_bytes
    pos = start + (LEGACY_KEY_LENGTH_OFFSET_V1 if magic == MAGIC_V1 else LEGACY_KEY_LENGTH_OFFSET_V0)
    try:
        key, pos = _sized_field(buf, pos, end, "key")
        value, pos = _sized_field(buf, pos, end, "value")
    except struct.error:
        raise CorruptRecordError("legacy message is truncated") from None
    if pos != end:
        raise CorruptRecordError(f"legacy message has {end - pos} bytes after its value")
    return (None if key is None else bytes(key)), value


def _sized_field(buf, pos: int, end: int, what: str):
    """(view | None, position after) of the int32-length-prefixed field ``what`` at ``pos``."""
    (length,) = INT32.unpack_from(buf, pos)
    pos += 4
    if length < 0:
        return None, pos
    if pos + length > end:
        raise CorruptRecordError(f"legacy message {what} runs past the end of the message")
    return buf[pos:pos + length], pos + length


def legacy_inner_messages(view, max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES
                          ) -> list[LegacyMessage]:
    """Inner messages of a compressed v0/v1 wrapper with **absolute** offsets.

    Raises :class:`InvalidRecordError` for a null or empty wrapper or a wrapper offset
    below the last inner offset, :class:`CorruptRecordError` for undecodable data.
    Inner CRCs are reported, not enforced (``crc_valid``).
    """
    payload = view.records_payload(max_bytes)
    if payload is None:
        raise InvalidRecordError("found invalid compressed record set with null value")
    mv = memoryview(payload)
    inner: list[LegacyMessage] = []
    pos = 0
    n = len(mv)
    while n - pos >= LOG_OVERHEAD:
        offset, size = OFFSET_SIZE.unpack_from(mv, pos)
        if size < RECORD_OVERHEAD_V0:
            raise CorruptRecordError(f"inner message size {size} is smaller than the minimum record overhead")
        end = pos + LOG_OVERHEAD + size
        if end > n:
            raise CorruptRecordError("inner message runs past the end of the compressed message set")
        magic = mv[pos + MAGIC_OFFSET]
        (crc,) = UINT32.unpack_from(mv, pos + LEGACY_CRC_OFFSET)
        attributes = mv[pos + LEGACY_ATTRIBUTES_OFFSET]
        if magic == MAGIC_V1:
            if size < RECORD_OVERHEAD_V1:
                raise CorruptRecordError(f"inner v1 message size {size} is below the minimum")
            (timestamp,) = INT64.unpack_from(mv, pos + LEGACY_TIMESTAMP_OFFSET)
        elif magic == MAGIC_V0:
            timestamp = NO_TIMESTAMP
        else:
            raise CorruptRecordError(f"invalid magic byte {magic} in an inner message")
        key, value = legacy_key_value(mv, pos, LOG_OVERHEAD + size, magic)
        inner.append(LegacyMessage(offset, magic, attributes, timestamp, key,
                                   None if value is None else bytes(value),
                                   zlib.crc32(mv[pos + MAGIC_OFFSET:end]) == crc))
        pos = end
    if pos != n:
        raise CorruptRecordError(f"compressed message set has {n - pos} trailing bytes")
    if not inner:
        raise InvalidRecordError("found invalid compressed record set with no inner records")
    if view.magic == MAGIC_V1:
        wrapper_offset = view.last_offset
        last_inner = inner[-1].offset
        if wrapper_offset == 0:
            base = 0
        else:
            base = wrapper_offset - last_inner
            if base < 0:
                raise InvalidRecordError(
                    f"found invalid compressed record set: wrapper offset {wrapper_offset} is below "
                    f"the last inner offset {last_inner}")
        inner = [m._replace(offset=base + m.offset) for m in inner]
    return inner


def iter_legacy_records(view, max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES) -> Iterator[Record]:
    """Records of one legacy message or wrapper with reader semantics (:mod:`records.record`)."""
    if view.compression == codecs.NONE:
        key, value = legacy_key_value(view.buf, view.start, view.size_bytes, view.magic)
        yield Record(view.last_offset, view.max_timestamp, view.timestamp_type, key,
                     None if value is None else bytes(value), ())
        return
    wrapper_type = view.timestamp_type
    wrapper_ts = view.max_timestamp
    for m in legacy_inner_messages(view, max_bytes):
        if m.magic == MAGIC_V0:
            ts, ts_type = NO_TIMESTAMP, NO_TIMESTAMP_TYPE
        elif wrapper_type == LOG_APPEND_TIME:
            ts, ts_type = wrapper_ts, LOG_APPEND_TIME
        else:
            ts, ts_type = m.timestamp, wrapper_type
        yield Record(m.offset, ts, ts_type, m.key, m.value, ())


__all__ = ["LegacyMessage", "legacy_key_value", "legacy_inner_messages", "iter_legacy_records"]
