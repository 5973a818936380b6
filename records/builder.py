"""Build record batches (magic 2) and legacy message sets (magic 0/1), byte-exact with Kafka.

Layouts are the ones documented in :mod:`records.layout`. The rules follow Kafka's
``MemoryRecordsBuilder``:

* Offsets are assigned consecutively from ``base_offset`` unless ``offsets`` are given
  (strictly increasing absolute offsets).
* v2: one batch. ``base_timestamp`` is the first record's timestamp, deltas are taken
  from it; ``max_timestamp`` is the largest record timestamp (-1 when none), or the
  append time for LogAppendTime (record deltas keep the original timestamps, readers
  report the batch max). ``last_offset_delta = last offset - base offset``. The whole
  records section is compressed as one stream. CRC-32C from byte 21.
* v0/v1 uncompressed: one message per record with its absolute offset. v1 LogAppendTime
  writes the append time into each message and sets attribute bit 3.
* v0/v1 compressed: one wrapper message whose value is the compressed inner message set.
  Inner offsets are relative (``offset - base_offset``) for v1 and absolute for v0; the
  wrapper's offset is the last offset, its timestamp the max inner timestamp (v1
  CreateTime) or the append time (LogAppendTime, inner messages too), its key null.
* Headers exist only in v2 (``ValueError`` otherwise); zstd only in v2
  (:class:`UnsupportedCompressionTypeError`); a timestamp below -1 is refused
  (``ValueError``, as Kafka's builder).

:func:`build_records` also reports ``max_timestamp`` and ``shallow_offset_of_max_timestamp``
exactly as ``MemoryRecordsBuilder.info()`` does (reference §3.6): LogAppendTime -> (append
time, last offset if compressed or v2 else first offset); no timestamps -> (-1, -1);
otherwise (max, last offset if compressed or v2 else the offset of the first record
reaching the max). Magic 0 stores no timestamps, so it always reports (-1, -1) (Kafka's
builder would echo the source records' timestamps, which a v0 log cannot index).
"""

from __future__ import annotations

import zlib
from typing import Iterable, NamedTuple, Sequence

from crc32c import crc32c

from . import codecs
from .layout import (
    CONTROL_FLAG_MASK,
    CREATE_TIME,
    INT32,
    LEGACY_BODY_V0,
    LEGACY_BODY_V1,
    LEGACY_OFFSET_SIZE_CRC,
    LEGACY_TIMESTAMP_TYPE_MASK,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_V0,
    MAGIC_V1,
    MAGIC_V2,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    V2_HEADER_AFTER_CRC,
    V2_HEADER_BEFORE_CRC,
)
from .varint import NULL_VARINT as _NULL
from .varint import encode_varint


class SimpleRecord(NamedTuple):
    """What a builder needs of a record (``records.Record`` also fits: it has the same names)."""

    timestamp: int = NO_TIMESTAMP
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class BuiltRecords(NamedTuple):
    buffer: bytes
    base_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int


def _append_sized(parts: list, data) -> None:
    """A record field: its varint length and bytes, or the null length -1."""
    if data is None:
        parts.append(_NULL)
    else:
        parts.append(encode_varint(len(data)))
        parts.append(data)


def encode_v2_record(offset_delta: int, timestamp_delta: int, key, value, headers=()) -> bytes:
    """One v2 record (length prefix included)."""
    parts = [b"\x00", encode_varint(timestamp_delta), encode_varint(offset_delta)]
    _append_sized(parts, key)
    _append_sized(parts, value)
    parts.append(encode_varint(len(headers)))
    for hkey, hvalue in headers:
        _append_sized(parts, hkey.encode("utf-8", "surrogateescape") if isinstance(hkey, str) else bytes(hkey))
        _append_sized(parts, hvalue)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def v2_header(*, base_offset: int, batch_bytes: int, partition_leader_epoch: int, attributes: int,
              last_offset_delta: int, base_timestamp: int, max_timestamp: int, producer_id: int,
              producer_epoch: int, base_sequence: int, record_count: int, payload) -> bytes:
    """The 61-byte v2 header for ``payload`` (the records section as stored), CRC included."""
    after_crc = V2_HEADER_AFTER_CRC.pack(attributes, last_offset_delta, base_timestamp, max_timestamp,
                                          producer_id, producer_epoch, base_sequence, record_count)
    crc = crc32c(payload, crc32c(after_crc))
    before_crc = V2_HEADER_BEFORE_CRC.pack(base_offset, batch_bytes - LOG_OVERHEAD, partition_leader_epoch, MAGIC_V2, crc)
    return before_crc + after_crc


def encode_legacy_message(magic: int, offset: int, timestamp: int, key, value, attributes: int) -> bytes:
    """One v0/v1 message with its 12-byte log overhead."""
    if magic == MAGIC_V1:
        body = LEGACY_BODY_V1.pack(MAGIC_V1, attributes, timestamp)
    else:
        body = LEGACY_BODY_V0.pack(MAGIC_V0, attributes)
    parts = [body]
    for blob in (key, value):
        if blob is None:
            parts.append(b"\xff\xff\xff\xff")
        else:
            parts.append(INT32.pack(len(blob)))
            parts.append(blob)
    rest = b"".join(parts)
    return LEGACY_OFFSET_SIZE_CRC.pack(offset, len(rest) + 4, zlib.crc32(rest)) + rest


def _check_timestamp(ts: int) -> None:
    if ts < NO_TIMESTAMP:
        raise ValueError(f"invalid negative timestamp {ts}")


def build_records(magic: int, records: Iterable, *, base_offset: int = 0, compression: int = codecs.NONE,
                  timestamp_type: int = CREATE_TIME, log_append_time_ms: int = NO_TIMESTAMP,
                  producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                  is_transactional: bool = False, is_control: bool = False, partition_leader_epoch: int = -1,
                  offsets: Sequence[int] | None = None, compression_level: int | None = None) -> BuiltRecords:
    """Encode ``records`` (objects with ``timestamp``, ``key``, ``value``, ``headers``).

    Returns the bytes and Kafka's ``RecordsInfo``; see the module docstring for rules.
    An empty ``records`` gives an empty buffer.
    """
    records = list(records)
    codecs.check_codec(compression, magic)
    if offsets is None:
        offsets = range(base_offset, base_offset + len(records))
    elif len(offsets) != len(records):
        raise ValueError("one offset per record is needed")
    if not records:
        return BuiltRecords(b"", base_offset, base_offset - 1, 0, NO_TIMESTAMP, -1)
    base_offset = offsets[0]
    last_offset = offsets[-1]
    log_append = timestamp_type == LOG_APPEND_TIME
    max_ts = NO_TIMESTAMP
    offset_of_max = -1
    for offset, record in zip(offsets, records):
        _check_timestamp(record.timestamp)
        if magic == MAGIC_V0:
            continue                      # magic 0 stores no timestamps
        ts = log_append_time_ms if (log_append and magic == MAGIC_V1) else record.timestamp
        if ts > max_ts:
            max_ts = ts
            offset_of_max = offset

    if magic == MAGIC_V2:
        buffer = _build_v2(records, offsets, compression, log_append, log_append_time_ms, max_ts, producer_id,
                           producer_epoch, base_sequence, is_transactional, is_control, partition_leader_epoch,
                           compression_level)
    else:
        if is_control or is_transactional or producer_id >= 0:
            raise ValueError(f"control batches and producer state need magic 2, not {magic}")
        for record in records:
            if record.headers:
                raise ValueError(f"magic {magic} records cannot carry headers")
        buffer = _build_legacy(magic, records, offsets, compression, log_append, log_append_time_ms, max_ts,
                               compression_level)

    if log_append:
        if magic == MAGIC_V0:
            info = (NO_TIMESTAMP, -1)
        elif compression != codecs.NONE or magic >= MAGIC_V2:
            info = (log_append_time_ms, last_offset)
        else:
            info = (log_append_time_ms, base_offset)
    elif max_ts == NO_TIMESTAMP:
        info = (NO_TIMESTAMP, -1)
    elif compression != codecs.NONE or magic >= MAGIC_V2:
        info = (max_ts, last_offset)
    else:
        info = (max_ts, offset_of_max)
    return BuiltRecords(buffer, base_offset, last_offset, len(records), info[0], info[1])


def _build_v2(records, offsets, compression, log_append, log_append_time_ms, max_ts, producer_id, producer_epoch,
              base_sequence, is_transactional, is_control, partition_leader_epoch, compression_level) -> bytes:
    base_offset = offsets[0]
    base_ts = records[0].timestamp
    encoded = b"".join(
        encode_v2_record(offset - base_offset, r.timestamp - base_ts, r.key, r.value, r.headers)
        for offset, r in zip(offsets, records))
    payload = encoded if compression == codecs.NONE else codecs.compress(
        compression, encoded, magic=MAGIC_V2, level=compression_level)
    attributes = compression
    if log_append:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    header = v2_header(
        base_offset=base_offset, batch_bytes=RECORD_BATCH_OVERHEAD + len(payload),
        partition_leader_epoch=partition_leader_epoch, attributes=attributes,
        last_offset_delta=offsets[-1] - base_offset, base_timestamp=base_ts,
        max_timestamp=log_append_time_ms if log_append else max_ts, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, record_count=len(records), payload=payload)
    return header + payload


def _build_legacy(magic, records, offsets, compression, log_append, log_append_time_ms, max_ts,
                  compression_level) -> bytes:
    type_bit = LEGACY_TIMESTAMP_TYPE_MASK if (log_append and magic == MAGIC_V1) else 0
    base_offset = offsets[0]
    inner_parts = []
    for offset, record in zip(offsets, records):
        ts = NO_TIMESTAMP if magic == MAGIC_V0 else (log_append_time_ms if log_append else record.timestamp)
        inner_offset = offset - base_offset if (compression != codecs.NONE and magic == MAGIC_V1) else offset
        inner_parts.append(encode_legacy_message(magic, inner_offset, ts, record.key, record.value, type_bit))
    inner = b"".join(inner_parts)
    if compression == codecs.NONE:
        return inner
    value = codecs.compress(compression, inner, magic=magic, level=compression_level)
    wrapper_ts = NO_TIMESTAMP if magic == MAGIC_V0 else (log_append_time_ms if log_append else max_ts)
    return encode_legacy_message(magic, offsets[-1], wrapper_ts, None, value, compression | type_bit)


def build_batch(magic: int, records: Iterable, **kwargs) -> bytes:
    """:func:`build_records` returning only the bytes."""
    return build_records(magic, records, **kwargs).buffer


__all__ = [
    "SimpleRecord", "BuiltRecords", "build_records", "build_batch", "encode_varint", "encode_v2_record",
    "encode_legacy_message", "v2_header",
]
