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

Timestamp search (§6.2)
-----------------------
The target segment is the first (oldest) whose largest timestamp (max record
timestamp, mtime fallback) is >= T. A prefix-max array over the inactive segments'
largest timestamps makes that a ``bisect`` instead of a walk over every segment; it is
rebuilt lazily after deletions or truncation and the active segment is looked at
separately (its mtime and max move with appends). Only that segment is searched: time
index floor → offset index → forward scan of batch headers → the first record with
timestamp >= T and offset >= LSO (:func:`records.search.find_first_at_or_after`).

Flushing
--------
``prepare_flush`` (owner thread) returns a :class:`FlushJob` holding duplicated
descriptors of every ``.log`` with data between the recovery point and the target,
plus the index files of rolled segments and the directory when segments were created;
``FlushJob.run`` (any thread) fdatasyncs and closes them; ``mark_flushed`` (owner
thread) advances the recovery point. ``maybe_flush_due(now_ms)`` applies
``flush.messages`` / ``flush.ms`` and Kafka's flush-on-roll.

Not thread-safe: the broker serialises calls per partition. A ``FileSlice`` returned by
``read`` is valid until the next call on this log.
"""

from __future__ import annotations

import bisect
import os
import random
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import structlog

from config.topic import TopicConfig
from records.batch import BatchView
from records.framing import iter_batches, iter_records, walk_headers
from records.layout import CONTROL_FLAG_MASK, MAGIC_V2
from records.search import BatchTimestampIndex, find_first_at_or_after, first_record_with_timestamp

from . import files
from .errors import KafkaStorageError, OffsetOutOfRangeError
from .files import FileSlice
from .producer_state import ProducerStateManager
from .retention import (
    REASON_CONSUMED,
    REASON_LOG_START,
    REASON_SIZE,
    REASON_TIME,
    DeletedSegment,
    RetentionOutcome,
    SegmentFacts,
    consumed_rule,
    log_start_rule,
    size_rule,
    time_rule,
)
from .segment import LogSegment
from .time_index import NO_TIMESTAMP, TimestampOffset
from .validator import validate_records

logger = structlog.get_logger(__name__)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


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
    slices: list[FileSlice]
    high_watermark: int
    log_start_offset: int
    first_entry_incomplete: bool = False

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


class FlushJob:
    """fdatasync work prepared on the owning thread; :meth:`run` is safe on any thread."""

    __slots__ = ("fds", "target_offset", "generation", "segments", "_done")

    def __init__(self, fds: list[int], target_offset: int, generation: int, segments: list) -> None:
        self.fds = fds
        self.target_offset = target_offset
        self.generation = generation
        self.segments = segments      # segments whose index files are synced by this job
        self._done = False

    def run(self) -> None:
        """fdatasync every descriptor, then close them all (also on failure)."""
        if self._done:
            return
        self._done = True
        error: OSError | None = None
        try:
            for fd in self.fds:
                if error is None:
                    try:
                        os.fdatasync(fd)
                    except OSError as exc:
                        error = exc
        finally:
            for fd in self.fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
        if error is not None:
            raise KafkaStorageError.from_os_error(error, "flush failed")

    def discard(self) -> None:
        """Close the descriptors without syncing (the job will not run)."""
        if not self._done:
            self._done = True
            for fd in self.fds:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def __del__(self) -> None:  # a job dropped without run() must not leak descriptors
        self.discard()


class _SearchCache(NamedTuple):
    prefix_max_largest: list[int]     # over segments[:-1], by largest_timestamp_ms()
    prefix_max_ts: list[int]          # over segments[:-1], by max_timestamp_so_far
    prefix_argmax_ts: list[int]       # index of the first segment reaching prefix_max_ts


class _BatchIndexCache:
    """Running-max timestamp indexes of big batches, shared by every log (LRU, bounded bytes).

    A timestamp search ends with a linear walk inside one batch; with 1 MiB batches of
    small records that walk is ~10^4 records. The second time a search lands in the same
    batch, its :class:`~records.search.BatchTimestampIndex` (16 bytes per record) is
    built, and later searches there are a bisect. The first visit only walks, so a cold
    lookup never pays for building an index that may not be used again. Keys carry the
    log's cache token, which changes when the log is truncated or replaced, so an index
    can never outlive the bytes it describes.
    """

    MIN_RECORDS = 512

    def __init__(self, budget_bytes: int = 64 * 1024 * 1024) -> None:
        from collections import OrderedDict

        self.budget_bytes = budget_bytes
        self.used_bytes = 0
        self._indexes: "OrderedDict[tuple, object]" = OrderedDict()
        self._seen: "OrderedDict[tuple, None]" = OrderedDict()

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


_BATCH_INDEXES = _BatchIndexCache()
_cache_tokens = iter(range(1, 2**62))


class PartitionLog:
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
        self._cache_token = next(_cache_tokens)   # keys of _BATCH_INDEXES; renewed on truncation
        self._bases = [s.base_offset for s in segments]
        self._rng = rng or random.Random()
        self.log_start_offset = log_start_offset
        self._leo = segments[-1].next_offset
        self.recovery_point = min(recovery_point, self._leo)
        self._producers = ProducerStateManager(dir_path, producer_id_expiration_ms)
        self._producers_loaded = False
        self._search: _SearchCache | None = None
        self._active_ready = False
        self._generation = 0
        self._dir_dirty = False
        self._last_flush_ms: int | None = None
        self._pending_deletes: list[tuple[int, list[str]]] = []
        self._closed = False
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
                                roll_jitter_ms=_jitter(config, rng), created_ms=now_ms,
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
        from .recovery import load_partition

        rng = rng or random.Random()
        loaded = load_partition(dir_path, config, topic=topic, partition=partition, clean=clean,
                                log_start_offset_checkpoint=log_start_offset,
                                recovery_point_checkpoint=recovery_point, rng=rng)
        log = cls(dir_path, config, loaded.segments, topic=topic, partition=partition,
                  log_start_offset=loaded.log_start_offset, recovery_point=loaded.recovery_point,
                  producer_id_expiration_ms=producer_id_expiration_ms, rng=rng)
        log._dir_dirty = loaded.created_segment
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

    # -- producer state -----------------------------------------------------------------------------
    def _ensure_producer_state(self, now_ms: int | None) -> None:
        if self._producers_loaded:
            return
        self._producers_loaded = True
        self._load_producer_state(now_ms)

    def _load_producer_state(self, now_ms: int | None) -> None:
        from .validator import BatchInfo

        psm = self._producers
        snap = psm.load_latest_snapshot(self._leo, now_ms)
        if snap is None:
            # No snapshot (first start of an old directory): scan at most the last two segments.
            start = self._segments[max(0, len(self._segments) - 2)].base_offset
            psm.clear(start)
        else:
            start = snap
        start = max(start, self.log_start_offset)
        scanned = 0
        for seg in self._segments[self._segment_index_for(start):]:
            if seg.size_bytes == 0 or seg.next_offset <= start:
                continue
            position = seg.offset_index.lookup(start).position if start > seg.base_offset else 0
            if position > seg.size_bytes:
                position = 0
            for h in walk_headers(seg.fd, position, seg.size_bytes, with_producer=True):
                if h.last_offset < start:
                    continue
                scanned += 1
                if h.magic >= MAGIC_V2 and h.producer_id >= 0 and not (h.attributes & CONTROL_FLAG_MASK):
                    last_seq = -1 if h.base_sequence < 0 else (h.base_sequence + h.last_offset - h.first_field) % (1 << 31)
                    psm.update([BatchInfo(h.producer_id, h.producer_epoch, h.base_sequence, last_seq,
                                          h.first_field, h.last_offset, h.last_offset - h.first_field + 1, False,
                                          h.max_timestamp)])
        psm.map_end_offset = self._leo
        psm.truncate_head(self.log_start_offset)
        if now_ms is not None:
            psm.remove_expired(now_ms)
        # Drop stray snapshots (not at a segment base), keeping the newest one.
        bases = set(self._bases)
        offsets = psm.snapshot_offsets()
        for off in offsets[:-1]:
            if off not in bases:
                files.remove_quietly(files.snapshot_file(self.dir, off))
        if scanned:
            logger.info("producer_state_loaded", topic=self.topic, partition=self.partition,
                        snapshot_offset=snap, batches_scanned=scanned, producers=len(psm.producers))

    @property
    def producer_state(self) -> ProducerStateManager:
        self._ensure_producer_state(None)
        return self._producers

    def remove_expired_producers(self, now_ms: int) -> int:
        if not self._producers_loaded:
            return 0
        return self._producers.remove_expired(now_ms)

    # -- append ---------------------------------------------------------------------------------------
    def append(self, records, *, now_ms: int, leader_epoch: int = 0, origin: str = "client") -> AppendResult:
        """Validate and append one partition's records (see module doc)."""
        self._check_open()
        self._ensure_producer_state(now_ms)
        v = validate_records(records, config=self.config, next_offset=self._leo, now_ms=now_ms,
                             leader_epoch=leader_epoch, origin=origin)
        if v.record_count == 0:
            return AppendResult(-1, -1, NO_TIMESTAMP, self.log_start_offset, 0, 0)
        dup = self._producers.check(v.batches, origin=origin)
        if dup is not None:
            logger.debug("duplicate_batch_ignored", topic=self.topic, partition=self.partition,
                         first_offset=dup.first_offset, last_offset=dup.last_offset)
            return AppendResult(dup.first_offset, dup.last_offset,
                                dup.timestamp_ms if self.config.is_log_append_time else NO_TIMESTAMP,
                                self.log_start_offset, dup.last_offset - dup.first_offset + 1, 0, duplicate=True)
        return self._append_validated(v, now_ms)

    def append_as_follower(self, records, *, now_ms: int) -> AppendResult:
        """Append batches that already carry offsets (tests, tools): no validation, shallow info only."""
        from .validator import BatchInfo, ValidatedRecords

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
                                     view.is_transactional, view.max_timestamp))
        end = views[-1].end
        if views[0].base_offset < self._leo:
            raise OffsetOutOfRangeError(
                f"follower append at offset {views[0].base_offset} is below the log end offset {self._leo}")
        v = ValidatedRecords((bytes(memoryview(records)[views[0].start:end]),), views[0].base_offset,
                             views[-1].last_offset, count, max_ts, shallow, NO_TIMESTAMP, False, batches,
                             end - views[0].start)
        return self._append_validated(v, now_ms)

    def _append_validated(self, v, now_ms: int) -> AppendResult:
        chunks = v.chunks
        size = v.size_bytes or sum(len(c) for c in chunks)
        segment = self._maybe_roll(size, v.max_timestamp_ms, v.first_offset, v.last_offset, now_ms)
        segment.append(v.last_offset, v.max_timestamp_ms, v.shallow_offset_of_max_timestamp, chunks,
                       size_bytes=size)
        self._leo = v.last_offset + 1
        self._producers.update(v.batches)
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
                                max_index_size=cfg.segment_index_bytes, roll_jitter_ms=_jitter(cfg, self._rng),
                                created_ms=now_ms,
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
    def read(self, offset: int, max_bytes: int, min_one_message: bool = True) -> FetchDataInfo:
        """Bytes from the batch holding ``offset`` (Fetch). Out of [LSO, LEO] → OffsetOutOfRangeError."""
        self._check_open()
        max_bytes = max(0, max_bytes)
        lso, leo = self.log_start_offset, self._leo
        if offset < lso or offset > leo:
            raise OffsetOutOfRangeError(
                f"received request for offset {offset} for partition {self.topic}-{self.partition}, but we only "
                f"have log segments in the range {lso} to {leo}")
        if offset == leo:
            return FetchDataInfo([], leo, lso)
        i = self._segment_index_for(offset)
        while i < len(self._segments):
            seg = self._segments[i]
            found = seg.read(offset, max_bytes, seg.size_bytes, min_one_message)
            if found is not None:
                return FetchDataInfo([found.slice], leo, lso, found.first_entry_incomplete)
            i += 1
        return FetchDataInfo([], leo, lso)

    # -- timestamp search -----------------------------------------------------------------------------
    def _search_cache(self) -> _SearchCache:
        cache = self._search
        if cache is None:
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
            cache = self._search = _SearchCache(pm_largest, pm_ts, pm_arg)
        return cache

    def _target_segment(self, target_ms: int) -> LogSegment | None:
        """First segment whose largest timestamp >= target_ms (Kafka ``searchOffsetInLocalLog``)."""
        pm = self._search_cache().prefix_max_largest
        i = bisect.bisect_left(pm, target_ms)
        if i < len(pm):
            return self._segments[i]
        active = self._segments[-1]
        if active.largest_timestamp_ms() >= target_ms:
            return active
        return None

    def fetch_offset_by_timestamp(self, target_ms: int) -> TimestampOffset | None:
        """ListOffsets for one partition: first record with timestamp >= T and offset >= LSO.

        Negative targets: -2/-4 earliest (LSO), -1 latest (LEO), -3 max timestamp,
        -5 nothing tiered (None). None means "not found" (offset -1, timestamp -1).
        """
        self._check_open()
        if target_ms < 0:
            if target_ms in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                return TimestampOffset(NO_TIMESTAMP, self.log_start_offset, None)
            if target_ms == LATEST_TIMESTAMP:
                return TimestampOffset(NO_TIMESTAMP, self._leo, None)
            if target_ms == MAX_TIMESTAMP:
                return self.max_timestamp_offset()
            return None
        seg = self._target_segment(target_ms)
        if seg is None:
            return None
        token, base = self._cache_token, seg.base_offset

        def find_in_batch(data, position, t_ms, min_offset):
            return _BATCH_INDEXES.find((token, base, position), data, position, t_ms, min_offset)

        return seg.find_offset_by_timestamp(target_ms, self.log_start_offset, find_in_batch)

    def max_timestamp_offset(self) -> TimestampOffset | None:
        """ListOffsets -3 (KAFKA-16310): the first record holding the largest timestamp."""
        self._check_open()
        cache = self._search_cache()
        seg = self._segments[-1]
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

    def legacy_offsets_before(self, timestamp_ms: int, max_num_offsets: int, now_ms: int) -> list[int]:
        """ListOffsets v0: segment base offsets (Kafka ``legacyFetchOffsetsBefore``), newest first."""
        self._check_open()
        entries = [(max(s.base_offset, self.log_start_offset), s.last_modified_ms()) for s in self._segments]
        if self._segments[-1].size_bytes > 0:
            entries.append((self._leo, now_ms))
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

    def record_timestamp_at(self, offset: int) -> int | None:
        """Timestamp of the record at ``offset`` (None outside [LSO, LEO) or without one)."""
        self._check_open()
        if offset < self.log_start_offset or offset >= self._leo:
            return None
        seg = self._segments[self._segment_index_for(offset)]
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
        self._cache_token = next(_cache_tokens)
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
        self._cache_token = next(_cache_tokens)
        doomed = list(self._segments)
        cfg = self.config
        for seg in doomed:
            if seg.base_offset == offset:
                seg.rename_suffix(files.DELETED_SUFFIX)
        seg = LogSegment.create(self.dir, offset, index_interval_bytes=cfg.index_interval_bytes,
                                max_index_size=cfg.segment_index_bytes, roll_jitter_ms=_jitter(cfg, self._rng),
                                created_ms=now_ms, preallocate_bytes=cfg.segment_bytes if cfg.preallocate else 0)
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

    # -- retention ------------------------------------------------------------------------------------
    def _facts(self) -> list[SegmentFacts]:
        segs = self._segments
        out = []
        for i, seg in enumerate(segs):
            upper = segs[i + 1].base_offset if i + 1 < len(segs) else self._leo
            out.append(SegmentFacts(seg.base_offset, upper, seg.size_bytes, seg.largest_timestamp_ms(),
                                    seg.largest_timestamp_source))
        return out

    def delete_old_segments(self, now_ms: int, consumed_upto: int | None = None) -> RetentionOutcome:
        """One retention pass (reference §7, seed 004); see :mod:`storage.retention`."""
        self._check_open()
        outcome = RetentionOutcome(self.topic, self.partition)
        cfg = self.config
        hw = self.high_watermark
        rules: list[tuple[str, Callable]] = [
            (REASON_LOG_START, lambda facts: log_start_rule(facts, hw, self.log_start_offset))]
        if cfg.delete:
            if cfg.consumed_retention_enabled:
                rules.append((REASON_CONSUMED, lambda facts: consumed_rule(
                    facts, hw, consumed_upto, cfg.retention_commitoffset_ms, now_ms)))
            rules.append((REASON_SIZE, lambda facts: size_rule(facts, hw, cfg.retention_bytes)))
            rules.append((REASON_TIME, lambda facts: time_rule(facts, hw, cfg.retention_ms, now_ms)))
        for reason, rule in rules:
            facts = self._facts()
            decision = rule(facts)
            if decision.hold is not None:
                outcome.held.append(decision.hold)
                self._log_hold(decision.hold)
            if decision.count:
                self._delete_prefix(decision.count, facts, reason, now_ms, outcome)
        outcome.log_start_offset = self.log_start_offset
        return outcome

    def _log_hold(self, hold) -> None:
        if hold.reason == "future_timestamp":
            logger.warning("retention_held_by_future_timestamp", topic=self.topic, partition=self.partition,
                           base_offset=hold.base_offset, last_offset=hold.last_offset,
                           largest_timestamp_ms=hold.largest_timestamp_ms, detail=hold.detail)
        else:
            logger.info("retention_held", topic=self.topic, partition=self.partition, reason=hold.reason,
                        base_offset=hold.base_offset, last_offset=hold.last_offset, detail=hold.detail)

    def _delete_prefix(self, count: int, facts: list[SegmentFacts], reason: str, now_ms: int,
                       outcome: RetentionOutcome) -> None:
        doomed_facts = facts[:count]
        if count == len(self._segments):
            new = self.roll(now_ms, reason="retention")
            outcome.rolled = True
            if doomed_facts[-1].base_offset == new.base_offset:
                doomed_facts = doomed_facts[:-1]
                count -= 1
        if count <= 0:
            return
        doomed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        self._search = None
        new_start = self._segments[0].base_offset
        if new_start > self.log_start_offset:
            self.log_start_offset = new_start
        for f in doomed_facts:
            outcome.deleted.append(DeletedSegment(f.base_offset, f.upper_offset - 1, f.size_bytes,
                                                  f.largest_timestamp_ms, reason))
            logger.info("segment_deleted", topic=self.topic, partition=self.partition, base_offset=f.base_offset,
                        last_offset=f.upper_offset - 1, size_bytes=f.size_bytes,
                        largest_timestamp_ms=f.largest_timestamp_ms, reason=reason)
        self._schedule_delete(doomed, now_ms)
        for seg in doomed:
            files.remove_quietly(files.snapshot_file(self.dir, seg.base_offset))
        if self._producers_loaded:
            self._producers.truncate_head(self.log_start_offset)

    def _schedule_delete(self, segments: list[LogSegment], now_ms: int) -> None:
        """Rename to ``.deleted`` now; remove after ``file.delete.delay.ms``."""
        paths: list[str] = []
        for seg in segments:
            seg.close_handles()
            if not seg.log_path.endswith(files.DELETED_SUFFIX):
                paths.extend(seg.rename_suffix(files.DELETED_SUFFIX))
            else:
                paths.extend(p for p in (seg.log_path, seg.offset_index.path, seg.time_index.path)
                             if os.path.exists(p))
        if not paths:
            return
        delay = self.config.file_delete_delay_ms
        if delay <= 0:
            for p in paths:
                files.remove_quietly(p)
        else:
            self._pending_deletes.append((now_ms + delay, paths))

    def delete_expired_files(self, now_ms: int) -> int:
        """Remove ``.deleted`` files whose delay has passed; number of files removed."""
        removed = 0
        keep = []
        for due, paths in self._pending_deletes:
            if due <= now_ms:
                for p in paths:
                    removed += files.remove_quietly(p)
            else:
                keep.append((due, paths))
        self._pending_deletes = keep
        return removed

    def pending_delete_paths(self) -> list[str]:
        return [p for _, paths in self._pending_deletes for p in paths]

    # -- flushing -------------------------------------------------------------------------------------
    def prepare_flush(self, up_to_offset: int | None = None) -> FlushJob | None:
        """A :class:`FlushJob` making offsets below the target durable, or None if nothing to do."""
        self._check_open()
        target = self._leo if up_to_offset is None else min(up_to_offset, self._leo)
        pending = ([s for s in self._segments if not s.is_active and not s.indexes_durable]
                   if self._index_sync_needed else [])
        if target <= self.recovery_point and not pending:
            return None
        fds: list[int] = []
        segs: list[LogSegment] = []
        try:
            chosen = set()
            if target > self.recovery_point:
                for seg in self._segments[self._segment_index_for(self.recovery_point):]:
                    if seg.base_offset >= target and seg.base_offset > self.recovery_point:
                        break
                    with_indexes = not seg.is_active and not seg.indexes_durable
                    fds.extend(seg.flush_fds(include_indexes=with_indexes))
                    chosen.add(id(seg))
                    if with_indexes:
                        segs.append(seg)
            for seg in pending:   # rolled segments whose trimmed indexes are not on disk yet
                if id(seg) not in chosen and seg.base_offset < max(target, self.recovery_point):
                    fds.extend(seg.flush_fds(include_indexes=True))
                    segs.append(seg)
            if self._dir_dirty:
                fds.append(os.open(self.dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)))
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            raise KafkaStorageError.from_os_error(exc, f"cannot prepare flush of {self.dir}") from exc
        self._dir_dirty = False
        return FlushJob(fds, target, self._generation, segs)

    def mark_flushed(self, job: FlushJob) -> None:
        """After ``job.run()``: advance the recovery point (owning thread only)."""
        if job.generation != self._generation:
            return  # truncated meanwhile: the synced range may not match the log any more
        for seg in job.segments:
            seg.indexes_durable = True
        if self._index_sync_needed:
            self._index_sync_needed = any(not s.is_active and not s.indexes_durable for s in self._segments)
        new_point = min(job.target_offset, self._leo)
        if new_point > self.recovery_point:
            self.recovery_point = new_point

    def flush(self, up_to_offset: int | None = None) -> None:
        """Synchronous flush on the calling thread (shutdown, tests)."""
        job = self.prepare_flush(up_to_offset)
        if job is not None:
            job.run()
            self.mark_flushed(job)

    def maybe_flush_due(self, now_ms: int) -> FlushJob | None:
        """A flush job if ``flush.messages``/``flush.ms`` or a past roll asks for one."""
        if self._closed:
            return None
        if self._last_flush_ms is None:
            self._last_flush_ms = now_ms
        unflushed = self.unflushed_messages
        cfg = self.config
        due = unflushed > 0 and (unflushed >= cfg.flush_messages or now_ms - self._last_flush_ms >= cfg.flush_ms)
        if due:
            self._last_flush_ms = now_ms
            return self.prepare_flush()
        if self.recovery_point < self._segments[-1].base_offset or self._index_sync_needed:
            return self.prepare_flush(self._segments[-1].base_offset)
        return None

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
        if self._producers_loaded:
            try:
                self._producers.map_end_offset = self._leo
                self._producers.take_snapshot(self._leo)
                self._producers.retain_latest_snapshots(keep=max(2, len(self._segments) + 1))
            except OSError as exc:
                logger.warning("producer_snapshot_failed", topic=self.topic, partition=self.partition, error=str(exc))
        for seg in self._segments:
            seg.close()
        self._closed = True

    def close_handles(self) -> None:
        """Release descriptors and mappings without writing (topic deletion, failed start)."""
        for seg in self._segments:
            seg.close_handles()
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition}, log_start_offset={self.log_start_offset}, "
                f"log_end_offset={self._leo}, segments={len(self._segments)})")


def _jitter(config: TopicConfig, rng: random.Random) -> int:
    """Kafka ``randomSegmentJitter``: abs(random int) % min(segment.jitter.ms, segment.ms)."""
    if config.segment_jitter_ms <= 0:
        return 0
    return rng.randrange(0, 2**31) % min(config.segment_jitter_ms, config.segment_ms)


__all__ = ["PartitionLog", "AppendResult", "FetchDataInfo", "FlushJob", "SegmentInfo", "TimestampOffset"]
