"""Cleaning one log: the offset map of its dirty section, then the rewrite of its segments.

Kafka's ``Cleaner`` (``doClean``, ``buildOffsetMap``, ``groupSegmentsBySize``,
``cleanSegments``, ``cleanInto``). A pass over one log, given a :class:`CleaningJob`
(prepared on the log's owner thread by :meth:`storage.log_cleaning.LogCleaning.cleaning_job`):

1. **Offset map** of the dirty section ``[first dirty, first uncleanable)``: for every
   segment holding part of it, from the offset-index position of the first dirty offset,
   every keyed record at or after the first dirty offset is put (key hash -> offset), and
   the map's latest offset follows each batch's last offset and, after each segment, the
   next segment's base offset - 1. Once the map holds ``slots x load factor`` entries it is
   full: mapping stops at that record, and this pass cleans only up to the latest offset
   mapped (the rest stays dirty for the next pass). ``end offset = latest offset + 1``.
2. **Groups**: the segments below the end offset — clean ones included: every pass
   recopies the log from its first segment — are grouped oldest first; a group takes the
   next segment while the total ``.log`` size stays <= ``segment.bytes``, each index size
   <= ``segment.index.bytes`` and the next segment's last offset (its successor's base - 1,
   or the first uncleanable offset - 1) stays within 2^31-1 of the group's base
   (an empty segment skips that test).
3. **Rewrite** of each group into one ``.cleaned`` segment with the group's first base
   offset (:mod:`storage.cleaned_segment`), batch by batch through
   :func:`storage.cleaner_batches.filter_batch`; segments are read in chunks of the I/O
   buffer, output is written per chunk; the legacy tombstone rule uses each source
   segment's mtime. Transactions (:mod:`storage.cleaner_txn`): the aborted transactions
   of each segment's range (from the log's ``.txnindex`` entries, taken with the job)
   decide which batches are aborted — their keys are not mapped in step 1 and their
   records go in step 3 — and which markers may go; the aborted transactions whose
   ABORT marker stays are written to the cleaned segment's ``.txnindex``. The finished segment is handed to ``swap`` (the log's owner thread
   swaps it in: :meth:`~storage.log_cleaning.LogCleaning.replace_segments`); a refused
   swap aborts the pass (:class:`CleaningAborted`) and its files are deleted.

The pass returns ``(end offset, stats)``; the caller checkpoints the end offset as the
log's next first dirty offset (``cleaner-offset-checkpoint``, :mod:`storage.cleaner_manager`).

Threads: a :class:`Cleaner` and its job run on one cleaner thread. They touch no
:class:`~storage.log.PartitionLog` or :class:`~storage.segment.LogSegment` state: the job
carries duplicated descriptors and plain numbers, and the segment objects only as opaque
tokens for the swap. Time: ``now_ms`` comes with the job; the throttle and the stats'
durations use the ``clock``/``sleep`` functions the caller passes (monotonic seconds).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

import structlog

from sundial.records.framing import iter_file_batches
from sundial.records.layout import INT32_MAX

from .cleaned_segment import CleanedSegment, CleanedSegmentWriter
from .cleaner_batches import FilterContext, filter_batch, map_batch
from .cleaner_txn import CleanedTransactionMetadata, collect
from .errors import StorageError
from .log_flush import close_fds
from .offset_map import SkimpyOffsetMap

logger = structlog.get_logger(__name__)


class CleaningAborted(StorageError):
    """The pass stopped before its end (shutdown, topic deletion, a log changed under it)."""


@dataclass(slots=True)
class SegmentSource:
    """What the cleaner thread knows of one segment (snapshot taken on the owner thread)."""

    segment: object                  # the LogSegment: an identity token for the swap, never called
    base_offset: int
    fd: int                          # a duplicated descriptor of the .log, owned by the job
    size_bytes: int
    offset_index_bytes: int
    time_index_bytes: int
    last_modified_ms: int
    map_start_position: int = 0      # offset-index position of the first dirty offset in this segment


@dataclass(slots=True)
class CleaningJob:
    """One log's pass: its segments below the first uncleanable offset and the facts the rules need."""

    topic: str
    partition: int
    dir: str
    sources: list[SegmentSource]
    first_dirty_offset: int
    first_uncleanable_offset: int
    now_ms: int
    segment_bytes: int
    segment_index_bytes: int
    index_interval_bytes: int
    delete_retention_ms: int
    legacy_delete_horizon_ms: int
    active_producers: dict[int, tuple[int, int]] = field(default_factory=dict)   # pid -> (last data offset, epoch)
    aborted_txns: list = field(default_factory=list)   # every .txnindex entry of the log (AbortedTxn)
    log_generation: int = 0          # the log's segment-list version when the snapshot was taken
    aborted: bool = False

    def abort(self) -> None:
        """Ask the pass to stop at its next batch (any thread)."""
        self.aborted = True

    def close(self) -> None:
        """Close the duplicated descriptors (after the pass, on any thread)."""
        close_fds([src.fd for src in self.sources if src.fd >= 0])
        for src in self.sources:
            src.fd = -1


@dataclass(slots=True)
class CleanerStats:
    """Kafka ``CleanerStats``: what one pass read and wrote, and how long it took."""

    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages: int = 0
    buffer_utilization: float = 0.0
    segments_replaced: int = 0
    start_s: float = 0.0
    map_done_s: float = 0.0
    end_s: float = 0.0

    @property
    def elapsed_s(self) -> float:
        return max(self.end_s - self.start_s, 1e-9)

    @property
    def elapsed_map_s(self) -> float:
        return max(self.map_done_s - self.start_s, 0.0)


class Throttler:
    """Kafka ``Throttler``: keeps the observed rate below ``rate`` by sleeping, checked every 300 ms.

    Shared by all cleaner threads (the rate is the broker's total): like Kafka's, the check
    and the sleep run under one lock, so while one thread sleeps the others wait too.
    """

    def __init__(self, rate_per_second: float, clock: Callable[[], float], sleep: Callable[[float], None],
                 check_interval_s: float = 0.3) -> None:
        self.rate = rate_per_second
        self._clock = clock
        self._sleep = sleep
        self._interval = check_interval_s
        self._period_start = clock()
        self._observed = 0.0
        self._lock = threading.Lock()

    def maybe_throttle(self, observed: int) -> None:
        if self.rate >= 1e300:
            return
        with self._lock:
            self._throttle(observed)

    def _throttle(self, observed: int) -> None:
        self._observed += observed
        now = self._clock()
        elapsed = now - self._period_start
        if elapsed > self._interval and self._observed > 0:
            if self._observed / elapsed > self.rate:
                wait = self._observed / self.rate - elapsed
                if wait > 0:
                    self._sleep(wait)
                    now = self._clock()
            self._period_start = now
            self._observed = 0.0


def group_segments_by_size(sources: list[SegmentSource], max_size: int, max_index_size: int,
                           first_uncleanable_offset: int) -> list[list[SegmentSource]]:
    """Kafka ``groupSegmentsBySize`` (see the module doc, step 2)."""
    grouped = []
    i, n = 0, len(sources)
    while i < n:
        group = [sources[i]]
        log_size = sources[i].size_bytes
        index_size = sources[i].offset_index_bytes
        time_index_size = sources[i].time_index_bytes
        i += 1
        while i < n:
            nxt = sources[i]
            last_of_next = sources[i + 1].base_offset - 1 if i + 1 < n else first_uncleanable_offset - 1
            if not (log_size + nxt.size_bytes <= max_size
                    and index_size + nxt.offset_index_bytes <= max_index_size
                    and time_index_size + nxt.time_index_bytes <= max_index_size
                    and (nxt.size_bytes == 0 or last_of_next - group[-1].base_offset <= INT32_MAX)):
                break
            group.append(nxt)
            log_size += nxt.size_bytes
            index_size += nxt.offset_index_bytes
            time_index_size += nxt.time_index_bytes
            i += 1
        grouped.append(group)
    return grouped


class Cleaner:
    """Cleans one log at a time with its own offset map (see the module doc)."""

    def __init__(self, offset_map: SkimpyOffsetMap, *, io_buffer_bytes: int = 256 * 1024,
                 load_factor: float = 0.9, throttler: Throttler | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        if offset_map.slots * load_factor <= 1:
            raise ValueError("offset map is too small to fit in even a single message, so log cleaning will never "
                             "make progress; increase log.cleaner.dedupe.buffer.size or decrease log.cleaner.threads")
        self.offset_map = offset_map
        self.io_buffer_bytes = max(io_buffer_bytes, 1024)
        self.load_factor = load_factor
        self.throttler = throttler
        self._clock = clock or (lambda: 0.0)

    def _check(self, job: CleaningJob) -> None:
        if job.aborted:
            raise CleaningAborted(f"cleaning of {job.topic}-{job.partition} was aborted")

    def _throttle(self, n: int) -> None:
        if self.throttler is not None:
            self.throttler.maybe_throttle(n)

    # -- the pass ------------------------------------------------------------------------------------------
    def clean(self, job: CleaningJob, swap: Callable[[CleanedSegment], bool]) -> tuple[int, CleanerStats]:
        """Clean ``job``'s log; ``swap(cleaned)`` swaps each group in (False: refused)."""
        stats = CleanerStats(start_s=self._clock())
        logger.info("cleaner_offset_map_building", topic=job.topic, partition=job.partition,
                    first_dirty_offset=job.first_dirty_offset, first_uncleanable_offset=job.first_uncleanable_offset)
        self.build_offset_map(job, stats)
        end_offset = self.offset_map.latest_offset + 1
        stats.map_done_s = self._clock()
        ctx = FilterContext(self.offset_map, job.now_ms, job.delete_retention_ms, job.first_uncleanable_offset,
                            job.active_producers)
        below = [s for s in job.sources if s.base_offset < end_offset]
        for group in group_segments_by_size(below, job.segment_bytes, job.segment_index_bytes,
                                            job.first_uncleanable_offset):
            cleaned = self.clean_segments(job, group, ctx, stats)
            self._check(job)
            if not swap(cleaned):
                cleaned.delete_files()
                raise CleaningAborted(f"the swap of the cleaned segment {cleaned.base_offset} of "
                                      f"{job.topic}-{job.partition} was refused (the log changed)")
            stats.segments_replaced += len(group)
        stats.buffer_utilization = self.offset_map.utilization
        stats.end_s = self._clock()
        return end_offset, stats

    # -- step 1: the offset map ---------------------------------------------------------------------------
    def build_offset_map(self, job: CleaningJob, stats: CleanerStats) -> None:
        m = self.offset_map
        m.clear()
        start, end = job.first_dirty_offset, job.first_uncleanable_offset
        dirty = [] if start >= end else [       # Kafka logSegments(start, end)
            s for i, s in enumerate(job.sources)
            if s.base_offset < end and (i + 1 >= len(job.sources) or job.sources[i + 1].base_offset > start)]
        max_entries = int(m.slots * self.load_factor)
        txn = CleanedTransactionMetadata()
        txn.add_aborted(collect(job.aborted_txns, start, end))
        for i, seg in enumerate(dirty):
            self._check(job)
            next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
            if self._map_segment(job, seg, start, next_start, max_entries, stats, txn):
                logger.debug("cleaner_offset_map_full", topic=job.topic, partition=job.partition,
                             segments_mapped=i, base_offset=seg.base_offset)
                break

    def _map_segment(self, job: CleaningJob, seg: SegmentSource, start: int, next_start: int, max_entries: int,
                     stats: CleanerStats, txn: CleanedTransactionMetadata) -> bool:
        m = self.offset_map
        position = seg.map_start_position if 0 <= seg.map_start_position <= seg.size_bytes else 0
        since = 0
        for view in iter_file_batches(seg.fd, position, seg.size_bytes, chunk_bytes=self.io_buffer_bytes):
            if job.aborted:
                self._check(job)
            if view.magic >= 2 and view.is_control:
                txn.on_control_batch_read(view)
                full, read = False, 1
            elif view.magic >= 2 and txn.on_batch_read(view):
                full, read = False, view.record_count      # aborted: its keys are not mapped
            else:
                full, read = map_batch(view, m, start, max_entries)
            stats.map_messages_read += read
            if full:
                return True
            if view.last_offset >= start:
                m.update_latest_offset(view.last_offset)
            stats.map_bytes_read += view.size_bytes
            since += view.size_bytes
            if since >= self.io_buffer_bytes:
                self._throttle(since)
                since = 0
        self._throttle(since)
        m.update_latest_offset(next_start - 1)
        return False

    # -- step 3: the rewrite ----------------------------------------------------------------------------
    def clean_segments(self, job: CleaningJob, group: list[SegmentSource], ctx: FilterContext,
                       stats: CleanerStats) -> CleanedSegment:
        """Rewrite ``group`` into one ``.cleaned`` segment (Kafka ``cleanSegments`` up to the swap)."""
        writer = CleanedSegmentWriter(job.dir, group[0].base_offset, job.index_interval_bytes)
        txn = CleanedTransactionMetadata(track_index=True)
        bases = [s.base_offset for s in job.sources]
        try:
            for seg in group:
                retain_legacy_deletes = seg.last_modified_ms > job.legacy_delete_horizon_ms
                i = bases.index(seg.base_offset)
                upper = bases[i + 1] if i + 1 < len(bases) else job.first_uncleanable_offset
                txn.add_aborted(collect(job.aborted_txns, seg.base_offset, upper))
                self._clean_into(job, seg, writer, ctx, retain_legacy_deletes, stats, txn)
            writer.txn_entries = txn.cleaned_index
            writer.finish(group[-1].last_modified_ms)
        except BaseException:
            writer.abandon()
            raise
        cleaned = writer.result()
        cleaned.replaces = [s.segment for s in group]
        cleaned.log_generation = job.log_generation
        cleaned.replaced_bases = [s.base_offset for s in group]
        cleaned.replaced_bytes = sum(s.size_bytes for s in group)
        logger.info("cleaner_segment_cleaned", topic=job.topic, partition=job.partition,
                    base_offset=cleaned.base_offset, replaced_bases=cleaned.replaced_bases,
                    bytes_before=cleaned.replaced_bytes, bytes_after=cleaned.size_bytes)
        return cleaned

    def _clean_into(self, job: CleaningJob, seg: SegmentSource, writer: CleanedSegmentWriter, ctx: FilterContext,
                    retain_legacy_deletes: bool, stats: CleanerStats, txn: CleanedTransactionMetadata) -> None:
        read_since = 0
        for view in iter_file_batches(seg.fd, 0, seg.size_bytes, chunk_bytes=self.io_buffer_bytes):
            if job.aborted:
                self._check(job)
            size = view.size_bytes
            stats.bytes_read += size
            read_since += size
            kept = filter_batch(view, ctx, retain_legacy_deletes, stats, txn)
            if kept is not None:
                writer.append(kept.data, kept.last_offset, kept.max_timestamp)
                stats.bytes_written += len(kept.data)
            if read_since >= self.io_buffer_bytes:
                self._throttle(read_since + writer.write_pending())
                read_since = 0
        self._throttle(read_since + writer.write_pending())


__all__ = ["Cleaner", "CleaningJob", "CleaningAborted", "CleanerStats", "SegmentSource", "Throttler",
           "group_segments_by_size"]
