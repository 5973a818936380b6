"""Per-record walks over the records section of one v2 batch, and the C accelerator's glue.

Three walks need every record of a batch and nothing else of it, so they are written
twice: here in Python (the reference) and in ``records/_speedups.c`` (the fast path,
which must give identical answers; tests/property/test_records_property.py checks it).
Both read records through their language's one tokenizer (:func:`records.tokenizer.record_spans`,
``parse_record`` in ``records/_record.h``), which decides every refusal; a walk only keeps
what it needs of each record:

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
from .tokenizer import DELTAS, FULL, record_spans
from .varint import wrap64


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


def _scan_v2_py(b, pos: int, end: int, count: int, base_ts: int, *, wrap: bool = False) -> V2RecordScan:
    """Reference implementation of :func:`records.v2.scan_v2_records` (full structural parse).

    Timestamps are ``base_ts + delta`` wrapped to 64 bits like Java's ``long``; -1 is
    left out of min/max. Reads never look past ``end``.
    """
    exempt_delta = wrap64(NO_TIMESTAMP - base_ts)
    lo = hi = None
    sequential = True
    first_null_key = -1
    for index, (_a, _o, _e, ts_delta, offset_delta, _ka, key_len, _va, _vl, _h) in enumerate(
            record_spans(b, pos, end, count, FULL, to_end=True)):
        if offset_delta != index:
            sequential = False
        if key_len < 0 and first_null_key < 0:
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
    if lo is None:
        return V2RecordScan(None, None, sequential, first_null_key)
    if wrap:
        return V2RecordScan(lo, hi, sequential, first_null_key)
    if base_ts + lo < INT64_MIN or base_ts + hi > INT64_MAX:
        # Some timestamp overflowed 64 bits: order changes after wrapping, walk again.
        return _scan_v2_py(b, pos, end, count, base_ts, wrap=True)
    return V2RecordScan(base_ts + lo, base_ts + hi, sequential, first_null_key)


def first_record_header(b, pos: int, end: int) -> tuple[int, int]:
    """(timestamp delta, offset delta) of the record at ``pos``."""
    for span in record_spans(b, pos, end, 1, DELTAS):
        return span[3], span[4]
    raise AssertionError("unreachable: one record was asked for")  # pragma: no cover


def _find_v2_py(b, pos: int, end: int, count: int, base_ts: int, target: int,
                min_offset_delta: int, exact: bool):
    """Reference walk: first record (in order) with offset delta >= ``min_offset_delta``
    and timestamp >= ``target`` (``== target`` when ``exact``); returns
    (offset_delta, timestamp) or None. Reads only length, timestamp and offset deltas,
    and never looks past ``end``."""
    for span in record_spans(b, pos, end, count, DELTAS):
        offset_delta = span[4]
        if offset_delta >= min_offset_delta:
            ts_delta = span[3]
            ts = base_ts + ts_delta
            if ts > INT64_MAX or ts < INT64_MIN:
                ts = wrap64(ts)
            if (ts == target) if exact else (ts >= target):
                return offset_delta, ts
    return None


def _index_v2_py(b, pos: int, end: int, count: int, base_ts: int):
    """Reference for the C ``index_v2``: (offset deltas, running max timestamps) as int64 arrays."""
    offsets = array("q")
    maxima = array("q")
    running = INT64_MIN
    for span in record_spans(b, pos, end, count, DELTAS):
        ts = wrap64(base_ts + span[3])
        if ts > running:
            running = ts
        offsets.append(span[4])
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


__all__ = ["V2RecordScan", "first_record_header", "IMPLEMENTATION", "crc32c_extend"]
