"""Per-record walks over the records section of one v2 batch, and the C accelerator's glue.

Three walks need every record of a batch and nothing else of it, so they are written
twice: here in Python (the reference) and in ``records/_speedups.c`` (the fast path,
which must give identical answers; tests/property/test_records_property.py checks it):

* ``_scan_v2`` — full structural walk: count, record lengths, varints, no trailing
  bytes; min/max timestamp, sequential offset deltas, first null key
  (:func:`records.v2.scan_v2_records`, the validator's check of every batch);
* ``_find_v2`` — first record at/after a timestamp (or equal to it), reading only the
  length, timestamp and offset deltas (the in-batch step of a timestamp search,
  :mod:`records.search`);
* ``_index_v2`` — offset deltas and running-max timestamps of every record
  (:class:`records.search.BatchTimestampIndex`).

``_scan_v2``/``_find_v2``/``_index_v2`` are the C functions when the extension is built
and ``SUNDIAL_NO_EXTENSIONS=1`` is not set, else the ``_py`` references;
``IMPLEMENTATION`` says which. Callers look them up on this module at call time, so a
test may swap them. ``crc32c_extend`` (C only, else None) patches a batch CRC after a
header change without reading the records again.
"""

from __future__ import annotations

from array import array
from typing import NamedTuple

from .errors import InvalidRecordError
from .extensions import extensions_enabled
from .layout import INT64_MAX, INT64_MIN, NO_TIMESTAMP
from .varint import read_varint, read_varlong, wrap64


class V2RecordScan(NamedTuple):
    """Summary of a structural walk over the records of one v2 batch.

    ``min_timestamp``/``max_timestamp`` cover records whose timestamp is not -1
    (``None`` when there is none); ``sequential_offsets`` says the offset deltas are
    exactly 0..count-1; ``first_null_key`` is the index of the first record without a
    key, or -1.
    """

    min_timestamp: int | None
    max_timestamp: int | None
    sequential_offsets: bool
    first_null_key: int


def v2_record_fields(b, pos: int, end: int, index: int):
    """Parse one v2 record at ``pos``; returns (next_pos, ts_delta, offset_delta, key_slice,
    value_slice, headers) with key/value as (start, length) pairs (length -1 = null)."""
    try:
        length, body = read_varint(b, pos)
        record_end = body + length
        if length < 0 or record_end > end:
            raise InvalidRecordError(
                f"record {index} declares {length} bytes but only {end - body} remain in the batch")
        p = body + 1                                         # attributes (unused)
        ts_delta, p = read_varlong(b, p)
        offset_delta, p = read_varint(b, p)
        key_len, p = read_varint(b, p)
        key_start = p
        if key_len > 0:
            p += key_len
        value_len, p = read_varint(b, p)
        value_start = p
        if value_len > 0:
            p += value_len
        header_count, p = read_varint(b, p)
        if header_count < 0:
            raise InvalidRecordError(f"record {index} has a negative header count {header_count}")
        headers = []
        for _ in range(header_count):
            hk_len, p = read_varint(b, p)
            if hk_len < 0:
                raise InvalidRecordError(f"record {index} has a header with a negative key size")
            hk_start = p
            p += hk_len
            hv_len, p = read_varint(b, p)
            hv_start = p
            if hv_len > 0:
                p += hv_len
            headers.append((hk_start, hk_len, hv_start, hv_len))
            if p > record_end:
                break
    except IndexError:
        raise InvalidRecordError(f"record {index} runs past the end of its batch") from None
    if p != record_end:
        raise InvalidRecordError(
            f"invalid record size: record {index} declares {length} bytes but its fields use {p - body}")
    return record_end, ts_delta, offset_delta, (key_start, key_len), (value_start, value_len), headers


def _scan_v2_py(b, pos: int, end: int, count: int, base_ts: int, *, wrap: bool = False) -> V2RecordScan:
    """Reference implementation of :func:`records.v2.scan_v2_records` (full structural parse).

    Timestamps are ``base_ts + delta`` wrapped to 64 bits like Java's ``long``; -1 is
    left out of min/max. Reads never look past ``end``.
    """
    mv = memoryview(b)[pos:end]
    end = len(mv)
    pos = 0
    exempt_delta = wrap64(NO_TIMESTAMP - base_ts)
    lo = hi = None
    sequential = True
    first_null_key = -1
    for index in range(count):
        if pos >= end:
            raise InvalidRecordError(f"batch declares {count} records but its data ends after {index}")
        pos, ts_delta, offset_delta, (_ks, kl), _v, _h = v2_record_fields(mv, pos, end, index)
        if offset_delta != index:
            sequential = False
        if kl < 0 and first_null_key < 0:
            first_null_key = index
        if wrap:
            value = wrap64(base_ts + ts_delta)
            if value == NO_TIMESTAMP:
                continue
        elif ts_delta == exempt_delta:
            continue
        else:
            value = ts_delta
        if lo is None:
            lo = hi = value
        elif value < lo:
            lo = value
        elif value > hi:
            hi = value
    if pos != end:
        raise InvalidRecordError(
            f"incorrect declared batch size: {end - pos} bytes remain after the {count} declared records")
    if lo is None:
        return V2RecordScan(None, None, sequential, first_null_key)
    if wrap:
        return V2RecordScan(lo, hi, sequential, first_null_key)
    if base_ts + lo < INT64_MIN or base_ts + hi > INT64_MAX:
        # Some timestamp overflowed 64 bits: order changes after wrapping, walk again.
        return _scan_v2_py(mv, 0, end, count, base_ts, wrap=True)
    return V2RecordScan(base_ts + lo, base_ts + hi, sequential, first_null_key)


def first_record_header(b, pos: int, end: int) -> tuple[int, int]:
    """(timestamp delta, offset delta) of the record at ``pos``."""
    try:
        _length, p = read_varint(b, pos)
        ts_delta, p = read_varlong(b, p + 1)
        offset_delta, p = read_varint(b, p)
    except IndexError:
        raise InvalidRecordError("first record runs past the end of its batch") from None
    return ts_delta, offset_delta


def _find_v2_py(b, pos: int, end: int, count: int, base_ts: int, target: int,
                min_offset_delta: int, exact: bool):
    """Reference walk: first record (in order) with offset delta >= ``min_offset_delta``
    and timestamp >= ``target`` (``== target`` when ``exact``); returns
    (offset_delta, timestamp) or None. Reads only length, timestamp and offset deltas,
    and never looks past ``end``. One- and two-byte varints are decoded inline."""
    b = bytes(memoryview(b)[pos:end])
    end = len(b)
    pos = 0
    for index in range(count):
        if pos >= end:
            raise InvalidRecordError(f"batch declares {count} records but its data ends after {index}")
        try:
            x = b[pos]
            if x < 0x80:
                length = (x >> 1) ^ -(x & 1)
                p = pos + 1
            else:
                length, p = read_varint(b, pos)
            record_end = p + length
            if length < 0 or record_end > end:
                raise InvalidRecordError(f"record {index} declares {length} bytes past the end of its batch")
            p += 1
            x = b[p]
            if x < 0x80:
                ts_delta = (x >> 1) ^ -(x & 1)
                p += 1
            else:
                y = b[p + 1]
                if y < 0x80:
                    u = (x & 0x7F) | (y << 7)
                    ts_delta = (u >> 1) ^ -(u & 1)
                    p += 2
                else:
                    ts_delta, p = read_varlong(b, p)
            x = b[p]
            if x < 0x80:
                offset_delta = (x >> 1) ^ -(x & 1)
            else:
                y = b[p + 1]
                if y < 0x80:
                    u = (x & 0x7F) | (y << 7)
                    offset_delta = (u >> 1) ^ -(u & 1)
                else:
                    offset_delta, _ = read_varint(b, p)
        except IndexError:
            raise InvalidRecordError(f"record {index} runs past the end of its batch") from None
        if offset_delta >= min_offset_delta:
            ts = base_ts + ts_delta
            if ts > INT64_MAX or ts < INT64_MIN:
                ts = wrap64(ts)
            if (ts == target) if exact else (ts >= target):
                return offset_delta, ts
        pos = record_end
    return None


def _index_v2_py(b, pos: int, end: int, count: int, base_ts: int):
    """Reference for the C ``index_v2``: (offset deltas, running max timestamps) as int64 arrays."""
    if count < 0:
        raise InvalidRecordError(f"batch declares a negative record count {count}")
    b = memoryview(b)[pos:end]
    end = len(b)
    pos = 0
    offsets = array("q")
    maxima = array("q")
    running = INT64_MIN
    for index in range(count):
        if pos >= end:
            raise InvalidRecordError(f"batch declares {count} records but its data ends after {index}")
        try:
            length, p = read_varint(b, pos)
            if length < 0 or p + length > end:
                raise InvalidRecordError(f"record {index} declares {length} bytes past the end of its batch")
            pos = p + length
            ts_delta, p = read_varlong(b, p + 1)
            offset_delta, p = read_varint(b, p)
        except IndexError:
            raise InvalidRecordError(f"record {index} runs past the end of its batch") from None
        ts = wrap64(base_ts + ts_delta)
        if ts > running:
            running = ts
        offsets.append(offset_delta)
        maxima.append(running)
    return offsets, maxima


_scan_v2 = _scan_v2_py
_find_v2 = _find_v2_py
_index_v2 = _index_v2_py
IMPLEMENTATION = "python"
#: Linear CRC-32C of (message || n zero bytes) from that of the message, or None without C.
crc32c_extend = None

if extensions_enabled():
    try:
        from . import _speedups  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - depends on the build
        _speedups = None
    if _speedups is not None:
        def _scan_v2(b, pos, end, count, base_ts):  # noqa: F811
            try:
                result = _speedups.scan_v2(b, pos, end, count, base_ts)
            except ValueError as exc:
                raise InvalidRecordError(str(exc)) from None
            return V2RecordScan(*result)

        def _find_v2(b, pos, end, count, base_ts, target, min_offset_delta, exact):  # noqa: F811
            try:
                return _speedups.find_v2(b, pos, end, count, base_ts, target, min_offset_delta, exact)
            except ValueError as exc:
                raise InvalidRecordError(str(exc)) from None

        def _index_v2(b, pos, end, count, base_ts):  # noqa: F811
            try:
                offsets, maxima = _speedups.index_v2(b, pos, end, count, base_ts)
            except ValueError as exc:
                raise InvalidRecordError(str(exc)) from None
            return memoryview(offsets).cast("q"), memoryview(maxima).cast("q")

        IMPLEMENTATION = "c"
        crc32c_extend = _speedups.crc32c_extend


__all__ = ["V2RecordScan", "v2_record_fields", "first_record_header", "IMPLEMENTATION", "crc32c_extend"]
