"""Timestamp search inside one batch: the last step of Kafka's ``FileRecords.searchForTimestamp``.

A log finds the batch (time index, offset index, header walk); these functions find the
record in it, with Kafka's reader semantics (:mod:`records.record`):

* :func:`find_first_at_or_after` — ListOffsets with a timestamp: the first record with
  ``timestamp >= T`` and ``offset >= min_offset``;
* :func:`first_record_with_timestamp` — ListOffsets MAX_TIMESTAMP (-3, KAFKA-16310);
* :class:`BatchTimestampIndex` — running-max timestamps of one batch, so repeated
  searches in a big batch are a bisect.

v2 batches are walked with :mod:`records.walks` (C when built) reading only the length,
timestamp and offset deltas of each record; legacy batches through their records.
"""

from __future__ import annotations

import bisect
from array import array
from typing import TYPE_CHECKING

from . import codecs
from . import walks
from .layout import INT64_MIN, LOG_APPEND_TIME, MAGIC_V0, MAGIC_V2
from .legacy import iter_legacy_records
from .v2 import check_count, v2_payload
from .varint import wrap64
from .walks import first_record_header

if TYPE_CHECKING:
    from .batch import BatchView


def find_first_at_or_after(batch: "BatchView", target_ms: int, min_offset: int = 0,
                           *, max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES
                           ) -> tuple[int, int] | None:
    """First record of ``batch`` with ``timestamp >= target_ms`` and ``offset >= min_offset``
    as ``(offset, timestamp)``, or None: the linear-scan step of Kafka's
    ``FileRecords.searchForTimestamp``.

    A batch whose max timestamp is below the target is skipped without reading records;
    a LogAppendTime batch answers from its header; a v2 batch whose first record is
    already at or after the target answers after one record header; otherwise only the
    length/timestamp/offset deltas of the records are read.
    """
    if batch.max_timestamp < target_ms or batch.last_offset < min_offset:
        return None
    if batch.magic == MAGIC_V2:
        count = check_count(batch)
        if count == 0:
            return None
        b, pos, end = v2_payload(batch, max_bytes)
        base_offset = batch._base_offset
        min_delta = min_offset - base_offset
        if batch.timestamp_type == LOG_APPEND_TIME:
            if min_delta <= 0:
                return base_offset, batch.max_timestamp
            found = walks._find_v2(b, pos, end, count, 0, INT64_MIN, min_delta, False)
            return None if found is None else (base_offset + found[0], batch.max_timestamp)
        if min_delta <= 0:
            ts_delta, offset_delta = first_record_header(b, pos, end)
            ts = batch.base_timestamp + ts_delta
            if ts >= target_ms:
                return base_offset + offset_delta, wrap64(ts)
        found = walks._find_v2(b, pos, end, count, batch.base_timestamp, target_ms, min_delta, False)
        return None if found is None else (base_offset + found[0], found[1])
    if batch.compression == codecs.NONE:
        return batch.last_offset, batch.max_timestamp      # max_timestamp >= target and offset >= min
    for record in iter_legacy_records(batch, max_bytes):
        if record.timestamp >= target_ms and record.offset >= min_offset:
            return record.offset, record.timestamp
    return None


def first_record_with_timestamp(batch: "BatchView", timestamp_ms: int,
                                *, max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES) -> int | None:
    """Offset of the first record of ``batch`` whose timestamp equals ``timestamp_ms``, or None.

    For ListOffsets MAX_TIMESTAMP (-3): the log keeps the batch holding the max timestamp
    and this finds the record inside it (KAFKA-16310). A LogAppendTime batch reports its
    max timestamp for every record, so its first record matches.
    """
    if batch.magic == MAGIC_V0 or batch.max_timestamp < timestamp_ms:
        return None
    if batch.magic == MAGIC_V2:
        count = check_count(batch)
        if count == 0:
            return None
        if batch.timestamp_type == LOG_APPEND_TIME:
            return batch._base_offset if batch.max_timestamp == timestamp_ms else None
        b, pos, end = v2_payload(batch, max_bytes)
        found = walks._find_v2(b, pos, end, count, batch.base_timestamp, timestamp_ms, INT64_MIN, True)
        return None if found is None else batch._base_offset + found[0]
    for record in iter_legacy_records(batch, max_bytes):
        if record.timestamp == timestamp_ms:
            return record.offset
    return None


class BatchTimestampIndex:
    """Running-max timestamps of one batch, so repeated searches in it are a bisect.

    The record offsets and, for each record, the largest timestamp up to it (reader
    semantics) are taken with one walk (C when available; 16 bytes per record). The
    first record whose running max reaches a target is exactly the first record with
    ``timestamp >= target``, and its timestamp is that max. Batches in a log never
    change, so a log may cache one index per batch position. :meth:`lookup` answers
    for ``min_offset <= first_offset``; for a larger ``min_offset`` use
    :func:`find_first_at_or_after` on the batch.
    """

    __slots__ = ("base_offset", "first_offset", "last_offset", "record_count", "_offsets", "_maxima", "size_bytes")

    def __init__(self, batch: "BatchView", *, max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES) -> None:
        self.last_offset = batch.last_offset
        if batch.magic == MAGIC_V2:
            count = check_count(batch)
            base = batch._base_offset
            if batch.timestamp_type == LOG_APPEND_TIME:
                b, pos, end = v2_payload(batch, max_bytes)
                deltas, _ = walks._index_v2(b, pos, end, count, 0)
                maxima = array("q", [batch.max_timestamp]) * count
            else:
                b, pos, end = v2_payload(batch, max_bytes)
                deltas, maxima = walks._index_v2(b, pos, end, count, batch.base_timestamp)
        else:
            running = INT64_MIN
            base = batch.base_offset
            deltas, maxima = array("q"), array("q")
            for record in iter_legacy_records(batch, max_bytes):
                running = max(running, record.timestamp)
                deltas.append(record.offset - base)
                maxima.append(running)
        self._offsets = deltas
        self._maxima = maxima
        self.base_offset = base
        self.record_count = len(deltas)
        self.first_offset = base + deltas[0] if len(deltas) else batch.last_offset + 1
        self.size_bytes = 16 * len(deltas)

    def covers(self, min_offset: int) -> bool:
        return min_offset <= self.first_offset

    def lookup(self, target_ms: int, min_offset: int | None = None) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with timestamp >= ``target_ms``, or None."""
        if min_offset is not None and min_offset > self.first_offset:
            raise ValueError("BatchTimestampIndex answers only for min_offset <= first_offset")
        i = bisect.bisect_left(self._maxima, target_ms)
        if i >= self.record_count:
            return None
        return self.base_offset + self._offsets[i], self._maxima[i]


__all__ = ["find_first_at_or_after", "first_record_with_timestamp", "BatchTimestampIndex"]
