"""Timestamp search in a partition log (ListOffsets), with the caches that keep it cheap.

:class:`TimestampSearch` is a collaborator of :class:`storage.log.PartitionLog`: it reads
the log's :class:`~storage.segments.LogSegments` and is handed the log start and end
offsets by each call. The big-batch index cache (:class:`BatchIndexCache`) is built by
whoever builds the logs and passed in, so one budget covers every log that shares it.

Timestamp search (Kafka ``fetchOffsetByTimestamp``; reference §6.2)
--------------------------------------------------------------------
The answer is the first record with timestamp >= T and offset >= LSO, exactly what a
read of the whole log would find. Kafka's two steps find it in the common case: the
first (oldest) segment whose largest timestamp is >= T, then the first record at or
after T in that segment (time index floor → offset index → forward scan of batch
headers → :func:`records.search.find_first_at_or_after`, or a cached
:class:`~records.search.BatchTimestampIndex` for a big batch searched again).

Where Kafka answers "none" although a later record matches, Sundial goes on to the next
candidate segment (KAFKA-9157 and its neighbours):

* the segments are chosen by their largest *record* timestamp (``max_timestamp_so_far``),
  never the mtime Kafka falls back to for a segment without records, so a segment that
  cleaning left empty is never the target;
* a segment whose largest timestamp comes from a batch without records (the empty batch
  cleaning keeps for a producer), or whose matching records all lie below the log start
  offset (DeleteRecords), yields nothing, and the search moves to the next segment whose
  largest record timestamp reaches T.

A prefix-max array over the inactive segments' largest record timestamps makes the first
candidate a ``bisect`` instead of a walk over every segment; it is rebuilt lazily after
any change of the segment list (it is keyed on the list's version) and the active segment
is looked at separately (its max moves with appends).

Negative targets are ListOffsets' sentinels: -2/-4 earliest (LSO), -1 latest (LEO), -3
the first record holding the largest timestamp (KAFKA-16310), -5 nothing tiered.
"""

from __future__ import annotations

import itertools

import bisect
from collections import OrderedDict
from typing import Callable, NamedTuple

from sundial.records.batch import BatchView
from sundial.records.framing import iter_records
from sundial.records.layout import MAGIC_V2
from sundial.records.search import BatchTimestampIndex, find_first_at_or_after, first_record_with_timestamp
from sundial.records.timestamps import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)

from .segments import LogSegments
from .time_index import NO_TIMESTAMP, TimestampOffset


class SearchCache(NamedTuple):
    prefix_max_largest: list[int]     # over segments[:-1], by largest_timestamp_ms()
    prefix_max_ts: list[int]          # over segments[:-1], by max_timestamp_so_far
    prefix_argmax_ts: list[int]       # index of the first segment reaching prefix_max_ts


#: Default budget of a :class:`BatchIndexCache`.
BATCH_INDEX_CACHE_BYTES = 64 * 1024 * 1024


class BatchIndexCache:
    """Running-max timestamp indexes of big batches, shared by the logs it is given to (LRU,
    bounded bytes).

    A timestamp search ends with a linear walk inside one batch; with 1 MiB batches of
    small records that walk is ~10^4 records. The second time a search lands in the same
    batch, its :class:`~records.search.BatchTimestampIndex` (16 bytes per record) is
    built, and later searches there are a bisect. The first visit only walks, so a cold
    lookup never pays for building an index that may not be used again. Keys carry the
    log's namespace (:meth:`new_namespace`) and the segment list's version of its last
    rewrite (:meth:`storage.segments.LogSegments.bytes_unchanged_since`), which changes when
    the log is truncated or a cleaned segment swapped in, so an index can never outlive the
    bytes it describes.
    """

    MIN_RECORDS = 512

    def __init__(self, budget_bytes: int = BATCH_INDEX_CACHE_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self.used_bytes = 0
        self._indexes: "OrderedDict[tuple, object]" = OrderedDict()
        self._seen: "OrderedDict[tuple, None]" = OrderedDict()
        self._namespaces = itertools.count(1)

    def new_namespace(self) -> int:
        """A key prefix of its own for one log. Logs open on several recovery threads at once:
        ``next`` on a ``count`` is one step under the interpreter lock, where ``+= 1`` is a read
        and a write that two threads could interleave into one namespace for two logs."""
        return next(self._namespaces)

    @property
    def index_count(self) -> int:
        """Indexes built and held."""
        return len(self._indexes)

    def find(self, key: tuple, data: memoryview, position: int, target_ms: int, min_offset: int):
        index = self._indexes.get(key)
        if index is not None:
            self._indexes.move_to_end(key)
        else:
            view = BatchView(data, 0, position)
            if key not in self._seen or view.magic != MAGIC_V2 or view.record_count < self.MIN_RECORDS:
                self._seen[key] = None
                if len(self._seen) > 4096:
                    self._seen.popitem(last=False)
                return find_first_at_or_after(view, target_ms, min_offset)
            index = BatchTimestampIndex(view)
            self._seen.pop(key, None)
            self._indexes[key] = index
            self.used_bytes += index.size_bytes
            while self.used_bytes > self.budget_bytes and self._indexes:
                _, old = self._indexes.popitem(last=False)
                self.used_bytes -= old.size_bytes
        if index.covers(min_offset):
            return index.lookup(target_ms)
        return find_first_at_or_after(BatchView(data, 0, position), target_ms, min_offset)


class TimestampSearch:
    """ListOffsets over one log's segments (see module doc)."""

    def __init__(self, segments: LogSegments, batch_indexes: BatchIndexCache) -> None:
        self._segments = segments
        self._batch_indexes = batch_indexes
        self._namespace = batch_indexes.new_namespace()
        self._cache: SearchCache | None = None
        self._cache_version = -1

    def forget_cache(self) -> None:
        """Rebuild the prefix arrays on the next search (after a segment's mtime was set by hand)."""
        self._cache = None

    def search_cache(self) -> SearchCache:
        cache = self._cache
        if cache is None or not self._segments.unchanged_since(self._cache_version):
            pm_largest: list[int] = []
            pm_ts: list[int] = []
            pm_arg: list[int] = []
            best_largest = best_ts = None
            arg = 0
            for i, seg in enumerate(self._segments[:-1]):
                largest = seg.largest_timestamp_ms()
                best_largest = largest if best_largest is None else max(best_largest, largest)
                pm_largest.append(best_largest)
                ts = seg.max_timestamp_so_far
                if best_ts is None or ts > best_ts:
                    best_ts, arg = ts, i
                pm_ts.append(best_ts)
                pm_arg.append(arg)
            cache = self._cache = SearchCache(pm_largest, pm_ts, pm_arg)
            self._cache_version = self._segments.version
        return cache

    def candidate_segments(self, target_ms: int):
        """Segments that may hold a record with timestamp >= target_ms, oldest first: the first
        whose largest record timestamp reaches it (a bisect), then every later one that does."""
        pm = self.search_cache().prefix_max_ts
        segments = self._segments.snapshot()
        for i in range(bisect.bisect_left(pm, target_ms), len(segments)):   # no copy of the tail
            seg = segments[i]
            if seg.max_timestamp_so_far >= target_ms:
                yield seg

    def max_timestamp_ms(self) -> int:
        """The largest record timestamp of the log (-1 without one)."""
        cache = self.search_cache()
        return max(cache.prefix_max_ts[-1] if cache.prefix_max_ts else NO_TIMESTAMP,
                   self._segments.active.max_timestamp_so_far)

    def fetch_offset_by_timestamp(self, target_ms: int, log_start_offset: int, log_end_offset: int, *,
                                  probe: Callable[[int, int, int], bool] | None = None) -> TimestampOffset | None:
        """ListOffsets for one partition: first record with timestamp >= T and offset >= LSO.

        Negative targets: -2/-4 earliest (LSO), -1 latest (LEO), -3 max timestamp,
        -5 nothing tiered (None). None means "not found" (offset -1, timestamp -1).
        ``probe``: a page-cache probe for the segment reads of a timestamp
        (:meth:`LogSegment.find_offset_by_timestamp`).
        """
        if target_ms < 0:
            if target_ms in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                return TimestampOffset(NO_TIMESTAMP, log_start_offset, None)
            if target_ms == LATEST_TIMESTAMP:
                return TimestampOffset(NO_TIMESTAMP, log_end_offset, None)
            if target_ms == MAX_TIMESTAMP:
                return self.max_timestamp_offset()
            return None
        cache_find = self._batch_indexes.find
        prefix = (self._namespace, self._segments.rewrite_version)
        for seg in self.candidate_segments(target_ms):
            base = seg.base_offset

            def find_in_batch(data, position, t_ms, min_offset, base=base):
                return cache_find((prefix, base, position), data, position, t_ms, min_offset)

            found = seg.find_offset_by_timestamp(target_ms, log_start_offset, find_in_batch, probe=probe)
            if found is not None:
                return found
        return None

    def max_timestamp_offset(self) -> TimestampOffset | None:
        """ListOffsets -3 (KAFKA-16310): the first record holding the largest timestamp."""
        cache = self.search_cache()
        seg = self._segments.active
        if cache.prefix_max_ts:
            best = cache.prefix_max_ts[-1]
            if best >= seg.max_timestamp_so_far:
                seg = self._segments[cache.prefix_argmax_ts[-1]]
        max_ts = seg.max_timestamp_so_far
        header = seg.find_max_timestamp_batch()
        if header is None or header.magic == 0:
            return None
        offset = first_record_with_timestamp(BatchView(seg.read_batch(header), 0, header.position), max_ts)
        if offset is None:
            return None
        epoch = header.leader_epoch if header.magic >= 2 and header.leader_epoch >= 0 else None
        return TimestampOffset(max_ts, offset, epoch)

    def legacy_offsets_before(self, timestamp_ms: int, max_num_offsets: int, now_ms: int, log_start_offset: int,
                              log_end_offset: int) -> list[int]:
        """ListOffsets v0: segment base offsets (Kafka ``legacyFetchOffsetsBefore``), newest first."""
        segments = self._segments
        entries = [(max(s.base_offset, log_start_offset), s.last_modified_ms()) for s in segments]
        if segments.active.size_bytes > 0:
            entries.append((log_end_offset, now_ms))
        if timestamp_ms == LATEST_TIMESTAMP:
            start = len(entries) - 1
        elif timestamp_ms == EARLIEST_TIMESTAMP:
            start = 0
        else:
            start = len(entries) - 1
            while start >= 0 and entries[start][1] > timestamp_ms:
                start -= 1
            if start < 0:
                return []
        count = min(max(max_num_offsets, 0), start + 1)
        return [entries[start - j][0] for j in range(count)]

    def record_timestamp_at(self, offset: int, log_start_offset: int, log_end_offset: int) -> int | None:
        """Timestamp of the record at ``offset`` (None outside [LSO, LEO) or without one)."""
        if offset < log_start_offset or offset >= log_end_offset:
            return None
        seg = self._segments[self._segments.index_for(offset)]
        header = seg.translate_offset(offset)
        if header is None:
            return None
        if header.magic == 0:
            return None
        if header.magic == 1 and header.first_field == header.last_offset and header.last_offset == offset:
            view = BatchView(seg.read_batch(header), 0, header.position)
            if not view.is_compressed:
                return header.max_timestamp
        data = seg.read_batch(header)
        for record in iter_records(data):
            if record.offset == offset:
                return record.timestamp if record.timestamp >= 0 else None
            if record.offset > offset:
                return None
        return None


__all__ = ["TimestampSearch", "BatchIndexCache", "SearchCache", "BATCH_INDEX_CACHE_BYTES", "LATEST_TIMESTAMP",
           "EARLIEST_TIMESTAMP", "MAX_TIMESTAMP", "EARLIEST_LOCAL_TIMESTAMP", "LATEST_TIERED_TIMESTAMP"]
