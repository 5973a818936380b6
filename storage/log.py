"""One partition's log: ordered segments, offsets, the append pipeline, reads and ListOffsets.

Kafka's ``UnifiedLog`` + ``LocalLog`` for a single node: the high watermark equals the
log end offset (LEO) and the leader epoch is whatever the broker passes.

Offsets
-------
* log start offset (LSO): first offset readable; moved by ``delete_records`` and
  retention, never backwards except by truncation below it.
* log end offset (LEO): last appended offset + 1; ``high_watermark`` == LEO.
* recovery point: offsets below it are fsynced (and segments wholly below it have
  durable indexes); an unclean start recovers from the segment that holds it.

Append pipeline (§3.1, §5)
--------------------------
validate (:func:`storage.validator.validate_records`: offsets from the LEO, CreateTime
kept or LogAppendTime stamped, bounds) → producer-state check (idempotence: a retry of
one of the last five batches returns its original offsets with ``duplicate=True``;
Kafka rolls before this check, Sundial after it, so a retry never creates an empty
segment) → maybe roll (``segment.bytes``, ``segment.ms`` − jitter measured from the
first batch's timestamp, full index, relative-offset overflow) → append to the active
segment → LEO and producer state.

Timestamp search (ListOffsets, §6.2) is :mod:`storage.log_search`, retention
:mod:`storage.log_retention`, flushing :mod:`storage.log_flush`, the log's side of
compaction :mod:`storage.log_cleaning` and producer state, markers, the last stable
offset and aborted-transaction lists :mod:`storage.log_transactions`;
:class:`PartitionLog` inherits their methods.

Not thread-safe: the broker serialises calls per partition. A ``FileSlice`` returned by
``read`` is valid until the next call on this log.
"""

from __future__ import annotations

import bisect
import os
import random
from dataclasses import dataclass
from typing import Iterator, NamedTuple

import structlog

from sundial.config.topic import TopicConfig
from sundial.records.control import read_end_txn_marker
from sundial.records.framing import iter_batches

from . import files
from .errors import KafkaStorageError, OffsetOutOfRangeError
from .files import FileSlice
from .log_cleaning import LogCleaning
from .log_flush import FlushJob, LogFlushing
from .log_retention import LogRetention
from .log_search import TimestampSearch, SearchCache, next_cache_token
from .log_transactions import AbortedTransaction, LogTransactions
from .producer_state import ProducerStateManager
from .recovery import load_partition
from .segment import LogSegment, random_segment_jitter
from .time_index import NO_TIMESTAMP, TimestampOffset
from .validator import BatchInfo, ValidatedRecords, validate_records

logger = structlog.get_logger(__name__)


class AppendResult(NamedTuple):
    """What an append did (Produce answer material). ``log_append_time_ms`` is -1 unless the
    topic uses LogAppendTime; ``duplicate`` marks an idempotent retry that appended nothing."""

    first_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_count: int
    size_bytes: int
    duplicate: bool = False
    max_timestamp_ms: int = NO_TIMESTAMP


@dataclass(slots=True)
class FetchDataInfo:
    """A read's bytes. ``aborted_transactions`` is None unless asked for (read_committed)."""

    slices: list[FileSlice]
    high_watermark: int
    log_start_offset: int
    first_entry_incomplete: bool = False
    last_stable_offset: int = -1
    aborted_transactions: list[AbortedTransaction] | None = None

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.slices)


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    base_offset: int
    last_offset: int            # base_offset - 1 when empty
    size_bytes: int
    largest_timestamp_ms: int
    largest_timestamp_source: str   # "records" or "mtime"
    max_timestamp_ms: int           # -1 when no record carries a timestamp
    log_path: str
    index_path: str
    time_index_path: str
    is_active: bool


class PartitionLog(TimestampSearch, LogRetention, LogFlushing, LogCleaning, LogTransactions):
    """The log of one partition (see module doc). Build with :meth:`open` or :meth:`create`."""

    def __init__(self, dir_path: str, config: TopicConfig, segments: list[LogSegment], *, topic: str,
                 partition: int, log_start_offset: int, recovery_point: int,
                 producer_id_expiration_ms: int = 86_400_000, rng: random.Random | None = None) -> None:
        if not segments:
            raise ValueError("a log needs at least one segment")
        self.dir = dir_path
        self.config = config
        self.topic = topic
        self.partition = partition
        self._segments = segments
        self._cache_token = next_cache_token()   # keys of the batch index cache (log_search); renewed on truncation
        self._bases = [s.base_offset for s in segments]
        self._rng = rng or random.Random()
        self.log_start_offset = log_start_offset
        self._leo = segments[-1].next_offset
        self.recovery_point = min(recovery_point, self._leo)
        self._producers = ProducerStateManager(dir_path, producer_id_expiration_ms)
        self._producers_loaded = False
        self._txn_rebuild_from: int | None = None   # .txnindex files from here on are rebuilt by the scan
        self._search: SearchCache | None = None
        self._active_ready = False
        self._generation = 0
        self._dir_dirty = False
        self._last_flush_ms: int | None = None
        self._pending_deletes: list[tuple[int, list[str]]] = []
        self._renames_owed: list = []   # LogRetention's SegmentRename jobs not yet given back
        self._future_hold_logged: int | None = None   # base offset of the future-timestamp hold last warned
        self._closed = False
        self._cleaning_job = None        # the pass in progress (LogCleaning), aborted by close
        # some rolled (or rebuilt) segment's index files are not fsynced yet
        self._index_sync_needed = False
        for seg in segments:
            seg.is_active = False
        segments[-1].is_active = True
        self._index_sync_needed = any(not s.indexes_durable for s in segments[:-1])

    # -- construction ---------------------------------------------------------------------------------
    @classmethod
    def create(cls, dir_path: str, config: TopicConfig, *, topic: str, partition: int, start_offset: int = 0,
               producer_id_expiration_ms: int = 86_400_000, rng: random.Random | None = None,
               now_ms: int | None = None) -> "PartitionLog":
        """A new, empty log in ``dir_path`` (created if missing).

        ``now_ms`` is the creation time wall-clock rolling measures from when records carry
        no timestamps; without it the first append's time is used.
        """
        os.makedirs(dir_path, exist_ok=True)
        rng = rng or random.Random()
        seg = LogSegment.create(dir_path, start_offset, index_interval_bytes=config.index_interval_bytes,
                                max_index_size=config.segment_index_bytes,
                                roll_jitter_ms=random_segment_jitter(config, rng), created_ms=now_ms,
                                preallocate_bytes=config.segment_bytes if config.preallocate else 0)
        log = cls(dir_path, config, [seg], topic=topic, partition=partition, log_start_offset=start_offset,
                  recovery_point=start_offset, producer_id_expiration_ms=producer_id_expiration_ms, rng=rng)
        log._dir_dirty = True
        log._producers_loaded = True
        log._producers.map_end_offset = start_offset
        return log

    @classmethod
    def open(cls, dir_path: str, config: TopicConfig, *, topic: str, partition: int, clean: bool = True,
             log_start_offset: int | None = None, recovery_point: int | None = None,
             producer_id_expiration_ms: int = 86_400_000, rng: random.Random | None = None) -> "PartitionLog":
        """Load an existing partition directory (recovering it after an unclean shutdown)."""
        rng = rng or random.Random()
        loaded = load_partition(dir_path, config, topic=topic, partition=partition, clean=clean,
                                log_start_offset_checkpoint=log_start_offset,
                                recovery_point_checkpoint=recovery_point, rng=rng)
        log = cls(dir_path, config, loaded.segments, topic=topic, partition=partition,
                  log_start_offset=loaded.log_start_offset, recovery_point=loaded.recovery_point,
                  producer_id_expiration_ms=producer_id_expiration_ms, rng=rng)
        log._dir_dirty = loaded.created_segment
        log._txn_rebuild_from = loaded.recovered_from
        if loaded.recovered_from is not None:
            # Rebuild producer state and the recovered segments' .txnindex now (Kafka's load does):
            # a later clean shutdown must not leave a stale or missing aborted-transaction entry.
            log._ensure_producer_state(None)
        return log

    # -- offsets ------------------------------------------------------------------------------------
    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._leo

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        """The segments, oldest first (do not mutate)."""
        return self._segments

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    @property
    def unflushed_messages(self) -> int:
        return self._leo - self.recovery_point

    def _segment_index_for(self, offset: int) -> int:
        """Index of the segment whose range holds ``offset`` (floor by base offset; 0 if below all)."""
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    # -- config -------------------------------------------------------------------------------------
    def update_config(self, config: TopicConfig) -> None:
        """Apply a new effective config (AlterConfigs); index sizes change for new segments."""
        self.config = config
        self.active_segment.index_interval_bytes = config.index_interval_bytes

    # -- append ---------------------------------------------------------------------------------------
    def append(self, records, *, now_ms: int, leader_epoch: int = 0, origin: str = "client") -> AppendResult:
        """Validate and append one partition's records (see module doc)."""
        self._check_open()
        self._ensure_producer_state(now_ms)
        v = validate_records(records, config=self.config, next_offset=self._leo, now_ms=now_ms,
                             leader_epoch=leader_epoch, origin=origin)
        if v.record_count == 0:
            return AppendResult(-1, -1, NO_TIMESTAMP, self.log_start_offset, 0, 0)
        marker = self._marker_of(records, origin) if any(b.is_control for b in v.batches) else None
        dup = self._producers.check(v.batches, origin=origin, marker=marker)
        if dup is not None:
            logger.debug("duplicate_batch_ignored", topic=self.topic, partition=self.partition,
                         first_offset=dup.first_offset, last_offset=dup.last_offset)
            return AppendResult(dup.first_offset, dup.last_offset,
                                dup.timestamp_ms if self.config.is_log_append_time else NO_TIMESTAMP,
                                self.log_start_offset, dup.last_offset - dup.first_offset + 1, 0, duplicate=True)
        return self._append_validated(v, now_ms, marker)

    def append_as_follower(self, records, *, now_ms: int) -> AppendResult:
        """Append batches that already carry offsets (tests, tools): no validation, shallow info only."""
        self._check_open()
        self._ensure_producer_state(now_ms)
        views = list(iter_batches(records))
        if not views:
            return AppendResult(-1, -1, NO_TIMESTAMP, self.log_start_offset, 0, 0)
        max_ts, shallow = NO_TIMESTAMP, -1
        batches = []
        count = 0
        for view in views:
            if view.max_timestamp > max_ts:
                max_ts, shallow = view.max_timestamp, view.last_offset
            count += view.record_count
            batches.append(BatchInfo(view.producer_id, view.producer_epoch, view.base_sequence, view.last_sequence,
                                     view.base_offset, view.last_offset, view.record_count,
                                     view.is_transactional, view.max_timestamp, view.is_control))
        end = views[-1].end
        if views[0].base_offset < self._leo:
            raise OffsetOutOfRangeError(
                f"follower append at offset {views[0].base_offset} is below the log end offset {self._leo}")
        v = ValidatedRecords((bytes(memoryview(records)[views[0].start:end]),), views[0].base_offset,
                             views[-1].last_offset, count, max_ts, shallow, NO_TIMESTAMP, False, batches,
                             end - views[0].start)
        if any(view.is_control for view in views):
            if len(views) > 1:
                raise ValueError("a follower append holding a control batch must hold one batch")
            marker = read_end_txn_marker(views[0])
            self._producers.check(batches, origin="replication", marker=marker)
            return self._append_validated(v, now_ms, marker)
        self._producers.check(batches, origin="replication")
        return self._append_validated(v, now_ms)

    def _append_validated(self, v, now_ms: int, marker=None) -> AppendResult:
        chunks = v.chunks
        size = v.size_bytes or sum(len(c) for c in chunks)
        segment = self._maybe_roll(size, v.max_timestamp_ms, v.first_offset, v.last_offset, now_ms)
        indexed = self._index_abort_before_append(v, marker, segment)
        try:
            segment.append(v.last_offset, v.max_timestamp_ms, v.shallow_offset_of_max_timestamp, chunks,
                           size_bytes=size)
        except BaseException:
            if indexed:
                segment.txn_index.truncate_to(v.first_offset)
            raise
        self._leo = v.last_offset + 1
        completed = self._producers.update(v.batches, marker=marker, now_ms=now_ms)
        if completed:
            self._index_completed(completed, segment, indexed=indexed)
        self._producers.map_end_offset = self._leo
        return AppendResult(v.first_offset, v.last_offset, v.log_append_time_ms, self.log_start_offset,
                            v.record_count, size, False, v.max_timestamp_ms)

    # -- rolling --------------------------------------------------------------------------------------
    def _maybe_roll(self, size: int, max_timestamp_ms: int, first_offset: int, last_offset: int,
                    now_ms: int) -> LogSegment:
        seg = self._segments[-1]
        if not self._active_ready:
            seg.ensure_active_capacity()
            self._active_ready = True
        reason = seg.should_roll(segment_bytes=self.config.segment_bytes, max_segment_ms=self.config.max_segment_ms,
                                 messages_size=size, max_timestamp_in_messages=max_timestamp_ms,
                                 max_offset_in_messages=last_offset, now_ms=now_ms)
        if reason is None:
            return seg
        logger.debug("segment_roll_due", topic=self.topic, partition=self.partition, base_offset=seg.base_offset,
                    reason=reason, size_bytes=seg.size_bytes, incoming_bytes=size)
        expected = first_offset if first_offset >= 0 else last_offset - 0x7FFFFFFF
        return self.roll(now_ms, expected_next_offset=expected, reason=reason)

    def roll(self, now_ms: int | None = None, *, expected_next_offset: int | None = None,
             reason: str = "requested") -> LogSegment:
        """Start a new active segment at ``max(expected_next_offset, LEO)`` (§5.4)."""
        self._check_open()
        new_base = max(expected_next_offset or 0, self._leo)
        self._finish_renames(new_base)
        active = self._segments[-1]
        if new_base in self._bases:
            if active.base_offset == new_base and active.size_bytes == 0:
                logger.warning("empty_active_segment_recreated", topic=self.topic, partition=self.partition,
                               base_offset=new_base)
                self._segments.pop()
                self._bases.pop()
                self._schedule_delete([active], now_ms or 0)
            else:
                raise KafkaStorageError(
                    f"trying to roll a new log segment for {self.topic}-{self.partition} with base offset "
                    f"{new_base} that already exists")
        elif new_base < active.base_offset:
            raise KafkaStorageError(
                f"trying to roll a new log segment with base offset {new_base} below the active segment's "
                f"{active.base_offset}")
        else:
            for suffix in (files.LOG_SUFFIX, files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX, files.TXN_INDEX_SUFFIX):
                path = files.segment_file(self.dir, new_base, suffix)
                if os.path.exists(path):
                    logger.warning("stale_segment_file_removed", path=path)
                    files.remove_quietly(path)
            active.on_become_inactive()
        cfg = self.config
        seg = LogSegment.create(self.dir, new_base, index_interval_bytes=cfg.index_interval_bytes,
                                max_index_size=cfg.segment_index_bytes,
                                roll_jitter_ms=random_segment_jitter(cfg, self._rng), created_ms=now_ms,
                                preallocate_bytes=cfg.segment_bytes if cfg.preallocate else 0)
        seg.is_active = True
        self._segments.append(seg)
        self._bases.append(new_base)
        self._search = None
        self._active_ready = True
        self._dir_dirty = True
        self._index_sync_needed = True
        if self._producers_loaded:
            self._producers.map_end_offset = self._leo
            try:
                self._producers.take_snapshot(new_base, sync=False)
            except OSError as exc:
                logger.warning("producer_snapshot_failed", topic=self.topic, partition=self.partition,
                               error=str(exc))
        logger.info("segment_rolled", topic=self.topic, partition=self.partition, base_offset=new_base,
                    reason=reason, closed_segment_bytes=active.size_bytes if active is not seg else 0)
        return seg

    # -- read -----------------------------------------------------------------------------------------
    def batches_from(self, start_offset: int, chunk_bytes: int) -> Iterator[tuple[object, bytes]]:
        """``(header view, the batch's bytes)`` of every batch with offsets at or after
        ``start_offset``, up to the log end offset at the call, read ``chunk_bytes`` at a time
        (at least one batch per read). For the replays of internal topics at load time."""
        offset, end = start_offset, self._leo
        while offset < end:
            info = self.read(offset, chunk_bytes, min_one_message=True)
            data = b"".join(s.read() for s in info.slices)
            last = offset - 1
            for view in iter_batches(data):
                last = view.last_offset
                if last >= offset:
                    yield view, data[view.position:view.position + view.size_bytes]
            if last < offset:
                return
            offset = last + 1

    def read(self, offset: int, max_bytes: int, min_one_message: bool = True, *,
             read_committed: bool = False) -> FetchDataInfo:
        """Bytes from the batch holding ``offset`` (Fetch). Out of [LSO, LEO] → OffsetOutOfRangeError.

        ``read_committed``: nothing at or past the last stable offset, and the aborted
        transactions of the range (:mod:`storage.log_transactions`).
        """
        self._check_open()
        max_bytes = max(0, max_bytes)
        lso, leo = self.log_start_offset, self._leo
        if offset < lso or offset > leo:
            raise OffsetOutOfRangeError(
                f"received request for offset {offset} for partition {self.topic}-{self.partition}, but we only "
                f"have log segments in the range {lso} to {leo}")
        stable = self.last_stable_offset
        aborted = [] if read_committed else None
        max_offset = stable if read_committed else leo
        if offset >= max_offset:
            return FetchDataInfo([], leo, lso, last_stable_offset=stable, aborted_transactions=aborted)
        i = self._segment_index_for(offset)
        while i < len(self._segments):
            seg = self._segments[i]
            limit = self._position_limit(i, max_offset) if read_committed else None
            found = seg.read(offset, max_bytes, seg.size_bytes if limit is None else limit, min_one_message)
            if found is not None:
                if read_committed:
                    upper = self._fetch_upper_bound(i, found.position, found.slice.size)
                    aborted = self.collect_aborted_transactions(offset, upper)
                return FetchDataInfo([found.slice], leo, lso, found.first_entry_incomplete, stable, aborted)
            i += 1
        return FetchDataInfo([], leo, lso, last_stable_offset=stable, aborted_transactions=aborted)

    # -- log start / truncation -------------------------------------------------------------------------
    def delete_records(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset to ``offset`` (-1 = high watermark); new LSO."""
        self._check_open()
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot increment the log start offset to {offset} of partition {self.topic}-{self.partition} "
                f"since it is outside [0, high watermark {self.high_watermark}]")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            logger.info("log_start_offset_incremented", topic=self.topic, partition=self.partition,
                        log_start_offset=offset, reason="delete_records")
            if self._producers_loaded:
                self._producers.truncate_head(offset)
        return self.log_start_offset

    def truncate_to(self, offset: int, *, now_ms: int | None = None) -> bool:
        """Remove every record at or above ``offset`` (§8.4); False when nothing changed."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate partition {self.topic}-{self.partition} to a negative offset")
        if offset >= self._leo:
            return False
        self._cache_token = next_cache_token()
        self._generation += 1
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset, now_ms=now_ms)
            return True
        keep = bisect.bisect_right(self._bases, offset)
        doomed = self._segments[keep:]
        del self._segments[keep:]
        del self._bases[keep:]
        self._schedule_delete(doomed, now_ms or 0)
        active = self._segments[-1]
        active.truncate_to(offset)
        active.is_active = True
        self._active_ready = True
        self._leo = offset
        self.log_start_offset = min(offset, self.log_start_offset)
        self.recovery_point = min(self.recovery_point, offset)
        self._search = None
        self._producers.delete_snapshots_above(offset)
        if self._producers_loaded:
            self._load_producer_state(now_ms)
        logger.info("log_truncated", topic=self.topic, partition=self.partition, offset=offset,
                    segments_removed=len(doomed))
        return True

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int | None = None) -> None:
        """Delete every segment and start empty at ``offset``."""
        self._check_open()
        self._generation += 1
        self._cache_token = next_cache_token()
        doomed = list(self._segments)
        cfg = self.config
        self._finish_renames(offset)
        for seg in doomed:
            if seg.base_offset == offset:
                seg.rename_suffix(files.DELETED_SUFFIX)
        seg = LogSegment.create(self.dir, offset, index_interval_bytes=cfg.index_interval_bytes,
                                max_index_size=cfg.segment_index_bytes,
                                roll_jitter_ms=random_segment_jitter(cfg, self._rng), created_ms=now_ms,
                                preallocate_bytes=cfg.segment_bytes if cfg.preallocate else 0)
        self._schedule_delete(doomed, now_ms or 0)
        seg.is_active = True
        self._segments = [seg]
        self._bases = [offset]
        self._leo = offset
        self.log_start_offset = offset
        self.recovery_point = offset
        self._search = None
        self._active_ready = True
        self._dir_dirty = True
        self._producers.delete_snapshots_above(-1)
        self._producers.clear(offset)
        self._producers_loaded = True

    # -- info -----------------------------------------------------------------------------------------
    def segments_info(self) -> list[SegmentInfo]:
        out = []
        for seg in self._segments:
            out.append(SegmentInfo(seg.base_offset, seg.next_offset - 1, seg.size_bytes, seg.largest_timestamp_ms(),
                                   seg.largest_timestamp_source, seg.max_timestamp_so_far, seg.log_path,
                                   seg.offset_index.path, seg.time_index.path, seg.is_active))
        return out

    def summary(self) -> dict:
        """Gauges for metrics: offsets, segment count, size and the largest record timestamp."""
        cache = self._search_cache()
        max_ts = max(cache.prefix_max_ts[-1] if cache.prefix_max_ts else NO_TIMESTAMP,
                     self._segments[-1].max_timestamp_so_far)
        return {"log_start_offset": self.log_start_offset, "log_end_offset": self._leo,
                "segment_count": len(self._segments), "size_bytes": self.size_bytes,
                "max_timestamp_ms": max_ts, "recovery_point": self.recovery_point}

    # -- life cycle -------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")

    def close(self, *, flush: bool = True) -> None:
        """Flush (optional), write the producer snapshot at the LEO and close every segment."""
        if self._closed:
            return
        if flush:
            self.flush()
        self._finish_renames()
        if self._producers_loaded:
            try:
                self._producers.map_end_offset = self._leo
                self._producers.take_snapshot(self._leo)
                self._producers.retain_latest_snapshots(keep=max(2, len(self._segments) + 1))
            except OSError as exc:
                logger.warning("producer_snapshot_failed", topic=self.topic, partition=self.partition, error=str(exc))
        self._abort_cleaning()
        for seg in self._segments:
            seg.close()
        self._closed = True

    def close_handles(self) -> None:
        """Release descriptors and mappings without writing (topic deletion, failed start)."""
        self._abort_cleaning()
        for seg in self._segments:
            seg.close_handles()
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition}, log_start_offset={self.log_start_offset}, "
                f"log_end_offset={self._leo}, segments={len(self._segments)})")


__all__ = ["PartitionLog", "AppendResult", "FetchDataInfo", "FlushJob", "SegmentInfo", "TimestampOffset"]
