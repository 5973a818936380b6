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

Composition
-----------
:class:`PartitionLog` owns the offsets (log start, log end, recovery point), the config and
the append pipeline, and composes one collaborator per concern, each given only what it
uses:

* :class:`~storage.segments.LogSegments`: the segment list, its base offsets and its
  version, the one owner of the list (every change goes through it);
  :class:`~storage.segments.SegmentFactory` creates and opens every segment;
* :class:`~storage.log_search.TimestampSearch`: ListOffsets (§6.2) and its caches, with a
  :class:`~storage.log_search.BatchIndexCache` passed in by whoever builds the logs;
* :class:`~storage.log_retention.LogRetention` and
  :class:`~storage.log_retention.SegmentDeleter`: retention passes and the delayed removal
  of every segment that leaves the log;
* :class:`~storage.log_flush.LogFlushing`: what flushes must sync;
* :class:`~storage.log_cleaning.LogCleaning`: the cleaning job's snapshot and the swap;
* :class:`~storage.log_transactions.LogTransactions`: producer state (its
  :class:`~storage.producer_state.ProducerStateManager` alone names and deletes snapshot
  files), markers, the last stable offset and aborted-transaction lists.

The public methods of the log delegate to them.

Not thread-safe: the broker serialises calls per partition. A ``FileSlice`` returned by
``read`` is valid until the next call on this log.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple

import structlog

from sundial.config.topic import TopicConfig
from sundial.records.control import build_end_txn_marker, read_end_txn_marker
from sundial.records.framing import NotInPageCache, iter_batches, iter_records
from sundial.records.layout import INT32_MAX

from . import files
from .errors import KafkaStorageError, OffsetOutOfRangeError
from .files import FileSlice
from .index import MappedIndexes
from .log_cleaning import LogCleaning
from .log_flush import FlushJob, LogFlushing
from .log_retention import LogRetention, SegmentDeleter, SegmentRename
from .log_search import BatchIndexCache, TimestampSearch
from .log_transactions import AbortedTransaction, LogTransactions, ProducerDescription
from .origin import AppendOrigin
from .producer_state import OngoingTxn, ProducerStateManager
from .recovery import load_partition
from .retention import RetentionOutcome
from .segment import LogSegment
from .segments import LogSegments, SegmentFactory
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


@dataclass(slots=True, eq=False)
class PendingAppend:
    """An append whose bytes are still to be written: :meth:`PartitionLog.begin_append` made it,
    :meth:`PartitionLog.finish_append` ends it. Between the two the log's state is as before
    the append (readers see nothing of it) and the log takes no other append, roll or
    truncation. Whoever writes the bytes calls :meth:`write` (on any thread) or takes the
    parts with :meth:`hand_over` to write them elsewhere."""

    validated: ValidatedRecords
    marker: object
    segment: LogSegment
    position: int
    size_bytes: int
    indexed: bool
    now_ms: int

    @property
    def chunks(self) -> tuple:
        return tuple(self.validated.chunks)

    def hand_over(self) -> tuple[int, int, tuple]:
        """``(fd, position, chunks)`` for a writer elsewhere: ``fd`` is a duplicate of the segment's
        descriptor that the writer owns and closes, so closing the log meanwhile cannot make
        the write land in another file. ``OSError`` when the descriptor cannot be duplicated."""
        return os.dup(self.segment.fd), self.position, self.chunks

    def write(self) -> None:
        """Write the bytes at their position through the segment's descriptor; ``OSError`` escapes."""
        files.pwritev_all(self.segment.fd, self.chunks, self.position, self.size_bytes)


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


class PartitionLog:
    """The log of one partition (see module doc). Build with :meth:`open` or :meth:`create`.

    ``batch_indexes`` is the big-batch index cache of the timestamp search, shared by the logs
    of whoever builds them (a new one of the default budget when not given). Likewise
    ``mapped_indexes`` bounds the mapped index files of its segments and of the other logs
    built with the same one (a private one with the default limit when not given).
    """

    def __init__(self, dir_path: str, config: TopicConfig, segments: list[LogSegment], *, topic: str,
                 partition: int, log_start_offset: int, recovery_point: int,
                 producer_id_expiration_ms: int = 86_400_000, rng: random.Random | None = None,
                 batch_indexes: BatchIndexCache | None = None, dir_dirty: bool = False,
                 txn_rebuild_from: int | None = None, mapped_indexes: MappedIndexes | None = None) -> None:
        if not segments:
            raise ValueError("a log needs at least one segment")
        self.dir = dir_path
        self.config = config
        self.topic = topic
        self.partition = partition
        self._rng = rng or random.Random()
        self._segments = LogSegments(segments)
        self._factory = SegmentFactory(dir_path, self._rng, mapped_indexes)
        self.log_start_offset = log_start_offset
        self._leo = segments[-1].next_offset
        self.recovery_point = min(recovery_point, self._leo)
        self._producers = ProducerStateManager(dir_path, producer_id_expiration_ms)
        self._txn = LogTransactions(dir_path, topic, partition, self._segments, self._producers,
                                    rebuild_from=txn_rebuild_from)
        self._search = TimestampSearch(self._segments, BatchIndexCache() if batch_indexes is None else batch_indexes)
        self._deleter = SegmentDeleter()
        self._retention = LogRetention(topic, partition, self._segments, self._deleter,
                                       self._producers.mark_snapshots_deleted)
        self._flushing = LogFlushing(dir_path, self._segments, dir_dirty=dir_dirty)
        self._cleaning = LogCleaning(dir_path, topic, partition, self._segments, self._factory, self._deleter,
                                     self._producers)
        self._active_ready = False
        # oldest_record_timestamp: (segment-list version, log start offset, log end offset, answer)
        self._oldest_cache: tuple[int, int, int, int | None] | None = None
        self._in_flight: PendingAppend | None = None   # begun, not finished (see begin_append)
        self._closed = False

    # -- construction ---------------------------------------------------------------------------------
    @classmethod
    def create(cls, dir_path: str, config: TopicConfig, *, topic: str, partition: int, start_offset: int = 0,
               producer_id_expiration_ms: int = 86_400_000, rng: random.Random | None = None,
               now_ms: int | None = None, batch_indexes: BatchIndexCache | None = None,
               mapped_indexes: MappedIndexes | None = None) -> "PartitionLog":
        """A new, empty log in ``dir_path`` (created if missing).

        ``now_ms`` is the creation time wall-clock rolling measures from when records carry
        no timestamps; without it the first append's time is used.
        """
        os.makedirs(dir_path, exist_ok=True)
        rng = rng or random.Random()
        factory = SegmentFactory(dir_path, rng, mapped_indexes)
        seg = factory.create(config, start_offset, created_ms=now_ms)
        log = cls(dir_path, config, [seg], topic=topic, partition=partition, log_start_offset=start_offset,
                  recovery_point=start_offset, producer_id_expiration_ms=producer_id_expiration_ms, rng=rng,
                  batch_indexes=batch_indexes, dir_dirty=True, mapped_indexes=factory.mapped_indexes)
        log._txn.start_empty(start_offset)
        return log

    @classmethod
    def open(cls, dir_path: str, config: TopicConfig, *, topic: str, partition: int, clean: bool = True,
             log_start_offset: int | None = None, recovery_point: int | None = None,
             producer_id_expiration_ms: int = 86_400_000, rng: random.Random | None = None,
             batch_indexes: BatchIndexCache | None = None,
             mapped_indexes: MappedIndexes | None = None) -> "PartitionLog":
        """Load an existing partition directory (recovering it after an unclean shutdown)."""
        rng = rng or random.Random()
        if mapped_indexes is None:   # one private set for the loaded segments and the later ones
            mapped_indexes = MappedIndexes()
        loaded = load_partition(dir_path, config, topic=topic, partition=partition, clean=clean,
                                log_start_offset_checkpoint=log_start_offset,
                                recovery_point_checkpoint=recovery_point, rng=rng, mapped_indexes=mapped_indexes)
        log = cls(dir_path, config, loaded.segments, topic=topic, partition=partition,
                  log_start_offset=loaded.log_start_offset, recovery_point=loaded.recovery_point,
                  producer_id_expiration_ms=producer_id_expiration_ms, rng=rng, batch_indexes=batch_indexes,
                  dir_dirty=loaded.created_segment, txn_rebuild_from=loaded.recovered_from,
                  mapped_indexes=mapped_indexes)
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
        return self._segments.active

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """The segments, oldest first, as they are now (a tuple later changes do not touch)."""
        return self._segments.snapshot()

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    @property
    def unflushed_messages(self) -> int:
        return self._leo - self.recovery_point

    def _advance_log_start(self, offset: int) -> int:
        """Raise the log start offset to ``offset`` (never lowers it); producers below it are forgotten."""
        if offset > self.log_start_offset:
            self.log_start_offset = offset
        self._txn.truncate_head(self.log_start_offset)
        return self.log_start_offset

    # -- config -------------------------------------------------------------------------------------
    def update_config(self, config: TopicConfig) -> None:
        """Apply a new effective config (AlterConfigs); index sizes change for new segments."""
        self.config = config
        self.active_segment.index_interval_bytes = config.index_interval_bytes

    # -- append ---------------------------------------------------------------------------------------
    def append(self, records, *, now_ms: int, leader_epoch: int = 0,
               origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendResult:
        """Validate and append one partition's records (see module doc), writing on this thread:
        :meth:`begin_append`, the write, :meth:`finish_append`."""
        return self._write_now(self.begin_append(records, now_ms=now_ms, leader_epoch=leader_epoch, origin=origin))

    def begin_append(self, records, *, now_ms: int, leader_epoch: int = 0,
                     origin: AppendOrigin = AppendOrigin.CLIENT) -> "AppendResult | PendingAppend":
        """Everything of an append but the write of its bytes: an :class:`AppendResult` when
        nothing is to be written (no records, or an idempotent retry), else a
        :class:`PendingAppend` to write and then end with :meth:`finish_append`. Raises what
        ``append`` raises, and ``KafkaStorageError`` while another append is in flight."""
        self._check_open()
        self._check_no_append_in_flight()
        self._ensure_producer_state(now_ms)
        v = validate_records(records, config=self.config, next_offset=self._leo, now_ms=now_ms,
                             leader_epoch=leader_epoch, origin=origin)
        if v.record_count == 0:
            return AppendResult(-1, -1, NO_TIMESTAMP, self.log_start_offset, 0, 0)
        marker = self._txn.marker_of(records, origin) if any(b.is_control for b in v.batches) else None
        dup = self._producers.check(v.batches, origin=origin, marker=marker)
        if dup is not None:
            logger.debug("duplicate_batch_ignored", topic=self.topic, partition=self.partition,
                         first_offset=dup.first_offset, last_offset=dup.last_offset)
            return AppendResult(dup.first_offset, dup.last_offset,
                                dup.timestamp_ms if self.config.is_log_append_time else NO_TIMESTAMP,
                                self.log_start_offset, dup.last_offset - dup.first_offset + 1, 0, duplicate=True)
        return self._begin_validated(v, now_ms, marker)

    def append_as_follower(self, records, *, now_ms: int) -> AppendResult:
        """Append batches that already carry offsets (tests, tools): no validation, shallow info only."""
        self._check_open()
        self._check_no_append_in_flight()
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
            self._producers.check(batches, origin=AppendOrigin.REPLICATION, marker=marker)
            return self._write_now(self._begin_validated(v, now_ms, marker))
        self._producers.check(batches, origin=AppendOrigin.REPLICATION)
        return self._write_now(self._begin_validated(v, now_ms))

    def append_txn_marker(self, *, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                          control_type: int, timestamp_ms: int, now_ms: int, leader_epoch: int = 0) -> AppendResult:
        """Append one COMMIT/ABORT marker as the transaction coordinator does; an AppendResult.

        Raises InvalidProducerEpochError (older producer epoch),
        TransactionCoordinatorFencedError (older coordinator epoch) or KafkaStorageError.
        """
        return self._write_now(self.begin_txn_marker(
            producer_id=producer_id, producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch,
            control_type=control_type, timestamp_ms=timestamp_ms, now_ms=now_ms, leader_epoch=leader_epoch))

    def begin_txn_marker(self, *, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                         control_type: int, timestamp_ms: int, now_ms: int,
                         leader_epoch: int = 0) -> "AppendResult | PendingAppend":
        """:meth:`append_txn_marker` without the write (as :meth:`begin_append`)."""
        batch = build_end_txn_marker(producer_id=producer_id, producer_epoch=producer_epoch,
                                     coordinator_epoch=coordinator_epoch, control_type=control_type,
                                     timestamp_ms=timestamp_ms)
        return self.begin_append(batch, now_ms=now_ms, leader_epoch=leader_epoch, origin=AppendOrigin.COORDINATOR)

    def _begin_validated(self, v, now_ms: int, marker=None) -> PendingAppend:
        size = v.size_bytes or sum(len(c) for c in v.chunks)
        segment = self._maybe_roll(size, v.max_timestamp_ms, v.first_offset, v.last_offset, now_ms)
        indexed = self._txn.index_abort_before_append(v, marker, segment) if marker is not None else False
        try:
            position = segment.begin_append(v.last_offset)
        except BaseException:
            if indexed:
                segment.txn_index.truncate_to(v.first_offset)
            raise
        pending = self._in_flight = PendingAppend(v, marker, segment, position, size, indexed, now_ms)
        return pending

    def _write_now(self, begun: "AppendResult | PendingAppend") -> AppendResult:
        if not isinstance(begun, PendingAppend):
            return begun
        try:
            begun.write()
        except OSError as exc:
            return self.finish_append(begun, exc)
        return self.finish_append(begun)

    @property
    def append_in_flight(self) -> bool:
        """An append was begun and not finished yet (:meth:`begin_append`)."""
        return self._in_flight is not None

    def _check_no_append_in_flight(self) -> None:
        if self._in_flight is not None:
            raise KafkaStorageError(f"an append to {self.topic}-{self.partition} is in flight")

    def finish_append(self, pending: PendingAppend, error: OSError | None = None) -> AppendResult:
        """End ``pending`` once its bytes are written (``error``: the write failed): the segment's
        size and indexes, the LEO and the producer state move now, together. Raises
        ``KafkaStorageError`` for a failed write (nothing of the append stays visible; the next
        append writes over the bytes) or when the log was closed meanwhile."""
        if pending is not self._in_flight:
            raise KafkaStorageError(f"no such append in flight on {self.topic}-{self.partition}")
        self._in_flight = None
        v, segment = pending.validated, pending.segment
        if error is not None or self._closed:
            if pending.indexed and not self._closed:
                segment.txn_index.truncate_to(v.first_offset)
            if error is None:
                raise KafkaStorageError(f"log {self.topic}-{self.partition} was closed during an append")
            raise KafkaStorageError.from_os_error(error, f"cannot write to segment {segment.log_path}") from error
        segment.end_append(v.last_offset, v.max_timestamp_ms, v.shallow_offset_of_max_timestamp, pending.position,
                           pending.size_bytes)
        self._leo = v.last_offset + 1
        completed = self._producers.update(v.batches, marker=pending.marker, now_ms=pending.now_ms)
        if completed:
            self._txn.index_completed(completed, segment, indexed=pending.indexed)
        self._producers.map_end_offset = self._leo
        return AppendResult(v.first_offset, v.last_offset, v.log_append_time_ms, self.log_start_offset,
                            v.record_count, pending.size_bytes, False, v.max_timestamp_ms)

    # -- rolling --------------------------------------------------------------------------------------
    def _maybe_roll(self, size: int, max_timestamp_ms: int, first_offset: int, last_offset: int,
                    now_ms: int) -> LogSegment:
        seg = self._segments.active
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
        expected = first_offset if first_offset >= 0 else last_offset - INT32_MAX
        return self.roll(now_ms, expected_next_offset=expected, reason=reason)

    def roll(self, now_ms: int | None = None, *, expected_next_offset: int | None = None,
             reason: str = "requested") -> LogSegment:
        """Start a new active segment at ``max(expected_next_offset, LEO)`` (§5.4)."""
        self._check_open()
        self._check_no_append_in_flight()
        new_base = max(expected_next_offset or 0, self._leo)
        self._deleter.finish_renames(new_base)
        segments = self._segments
        active = segments.active
        if segments.has_base(new_base):
            if active.base_offset == new_base and active.size_bytes == 0:
                logger.warning("empty_active_segment_recreated", topic=self.topic, partition=self.partition,
                               base_offset=new_base)
                segments.pop_empty_active()
                self._deleter.schedule_delete([active], now_ms or 0, self.config.file_delete_delay_ms)
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
        seg = self._factory.create(self.config, new_base, created_ms=now_ms)
        segments.add(seg)
        self._active_ready = True
        self._flushing.note_segment_rolled()
        if self._txn.loaded:
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
    def batches_from(self, start_offset: int, chunk_bytes: int, *,
                     probe: Callable[[int, int, int], bool] | None = None) -> Iterator[tuple[object, bytes]]:
        """``(header view, the batch's bytes)`` of every batch with offsets at or after
        ``start_offset``, up to the log end offset at the call, read ``chunk_bytes`` at a time
        (at least one batch per read). For the replays of internal topics at load time.
        ``probe``: as for :meth:`read`, and it covers the bytes read after the headers too."""
        offset, end = start_offset, self._leo
        while offset < end:
            info = self.read(offset, chunk_bytes, min_one_message=True, probe=probe)
            if probe is not None:
                for piece in info.slices:
                    if not probe(piece.fd, piece.position, piece.size):
                        raise NotInPageCache(piece.fd, piece.position, piece.size)
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
             read_committed: bool = False,
             probe: Callable[[int, int, int], bool] | None = None) -> FetchDataInfo:
        """Bytes from the batch holding ``offset`` (Fetch). Out of [LSO, LEO] → OffsetOutOfRangeError.

        ``read_committed``: nothing at or past the last stable offset, and the aborted
        transactions of the range (:mod:`storage.log_transactions`). ``probe(fd, position,
        size)``: a page-cache probe; a batch header it says is not resident raises
        :class:`~records.framing.NotInPageCache` instead of being read (the caller reads the
        range in on a thread and asks again).
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
        segments = self._segments
        txn = self._txn
        i = segments.index_for(offset)
        while i < len(segments):
            seg = segments[i]
            limit = txn.position_limit(i, max_offset) if read_committed else None
            found = seg.read(offset, max_bytes, seg.size_bytes if limit is None else limit, min_one_message,
                             probe=probe)
            if found is not None:
                if read_committed:
                    upper = txn.fetch_upper_bound(i, found.position, found.slice.size, leo)
                    aborted = txn.collect_aborted_transactions(offset, upper)
                return FetchDataInfo([found.slice], leo, lso, found.first_entry_incomplete, stable, aborted)
            i += 1
        return FetchDataInfo([], leo, lso, last_stable_offset=stable, aborted_transactions=aborted)

    # -- timestamp search (storage.log_search) -------------------------------------------------------------
    def fetch_offset_by_timestamp(self, target_ms: int, *,
                                  probe: Callable[[int, int, int], bool] | None = None) -> TimestampOffset | None:
        """ListOffsets for one partition: first record with timestamp >= T and offset >= LSO.

        Negative targets: -2/-4 earliest (LSO), -1 latest (LEO), -3 max timestamp,
        -5 nothing tiered (None). None means "not found" (offset -1, timestamp -1).
        ``probe``: as for :meth:`read` (a range not in the page cache raises
        :class:`~records.framing.NotInPageCache` before it is read).
        """
        self._check_open()
        return self._search.fetch_offset_by_timestamp(target_ms, self.log_start_offset, self._leo, probe=probe)

    def max_timestamp_offset(self) -> TimestampOffset | None:
        """ListOffsets -3 (KAFKA-16310): the first record holding the largest timestamp."""
        self._check_open()
        return self._search.max_timestamp_offset()

    def legacy_offsets_before(self, timestamp_ms: int, max_num_offsets: int, now_ms: int) -> list[int]:
        """ListOffsets v0: segment base offsets (Kafka ``legacyFetchOffsetsBefore``), newest first."""
        self._check_open()
        return self._search.legacy_offsets_before(timestamp_ms, max_num_offsets, now_ms, self.log_start_offset,
                                                  self._leo)

    def record_timestamp_at(self, offset: int) -> int | None:
        """Timestamp of the record at ``offset`` (None outside [LSO, LEO) or without one)."""
        self._check_open()
        return self._search.record_timestamp_at(offset, self.log_start_offset, self._leo)

    def oldest_record_timestamp(self, probe: Callable[[int, int, int], bool] | None = None) -> int | None:
        """Timestamp of the oldest retained record: the first data record at or after the log start
        offset, which compaction may have moved past it (None when there is none, or it has no
        timestamp).

        Kept while the log start offset stays and no change of the segment list rewrote or
        truncated offsets still in the log (a cleaner swap, a truncation): a roll or an append
        does not touch it, so a scrape reads nothing while only appends and rolls come. An
        answer of "none yet" is kept only until the log end offset moves.

        ``probe(fd, position, size)``: a page-cache probe, as for :meth:`read`; a range it says
        is not resident raises :class:`~records.framing.NotInPageCache` before it is read.
        """
        self._check_open()
        start, segments = self.log_start_offset, self._segments
        cached = self._oldest_cache
        if (cached is not None and cached[1] == start and segments.bytes_unchanged_since(cached[0])
                and segments.not_truncated_since(cached[0]) and (cached[3] is not None or cached[2] == self._leo)):
            return cached[3]
        found = None
        for view, data in self.batches_from(start, 64 * 1024, probe=probe):
            if view.is_control:
                continue
            record = next((r for r in iter_records(data) if r.offset >= start), None)
            if record is not None:
                found = record.timestamp if record.timestamp >= 0 else None
                break
        self._oldest_cache = (segments.version, start, self._leo, found)
        return found

    # -- transactions (storage.log_transactions) ----------------------------------------------------------
    def _ensure_producer_state(self, now_ms: int | None) -> None:
        self._txn.ensure_loaded(now_ms, self.log_start_offset, self._leo)

    def remove_expired_producers(self, now_ms: int) -> int:
        return self._txn.remove_expired_producers(now_ms)

    @property
    def first_unstable_offset(self) -> int | None:
        self._ensure_producer_state(None)
        return self._txn.first_unstable_offset(self.log_start_offset)

    @property
    def last_stable_offset(self) -> int:
        first = self.first_unstable_offset
        hwm = self.high_watermark
        return hwm if first is None else min(first, hwm)

    def ongoing_transactions(self) -> list[OngoingTxn]:
        """Open transactions (producer id, first offset, start ms), oldest first."""
        self._ensure_producer_state(None)
        return self._txn.ongoing_transactions()

    def describe_producers(self) -> list[ProducerDescription]:
        """Every producer the partition knows (Kafka ``activeProducers``), by producer id."""
        self._ensure_producer_state(None)
        return self._txn.describe_producers()

    def describe_producer(self, producer_id: int) -> ProducerDescription | None:
        """One producer of :meth:`describe_producers`, None when the partition does not know it."""
        self._ensure_producer_state(None)
        return self._txn.describe_producer(producer_id)

    def transaction_summary(self, now_ms: int) -> dict:
        """Gauges: open transactions, LSO lag in offsets and the oldest open transaction's age (ms)."""
        ongoing = self.ongoing_transactions()
        lso = self.last_stable_offset
        oldest_ms = max(0, now_ms - min(t.start_ms for t in ongoing)) if ongoing else 0
        return {"open_transactions": len(ongoing), "last_stable_offset": lso,
                "last_stable_offset_lag": self.high_watermark - lso, "oldest_open_transaction_ms": oldest_ms}

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTransaction]:
        """Kafka ``collectAbortedTransactions`` from the segment holding ``fetch_offset``."""
        return self._txn.collect_aborted_transactions(fetch_offset, upper_bound_offset)

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
            self._txn.truncate_head(offset)
        return self.log_start_offset

    def truncate_to(self, offset: int, *, now_ms: int | None = None) -> bool:
        """Remove every record at or above ``offset`` (§8.4); False when nothing changed."""
        self._check_open()
        self._check_no_append_in_flight()
        if offset < 0:
            raise ValueError(f"cannot truncate partition {self.topic}-{self.partition} to a negative offset")
        if offset >= self._leo:
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset, now_ms=now_ms)
            return True
        delay_ms = self.config.file_delete_delay_ms
        doomed = self._segments.truncate_to(
            offset, lambda gone: self._deleter.schedule_delete(gone, now_ms or 0, delay_ms))
        self._active_ready = True
        self._leo = offset
        self.log_start_offset = min(offset, self.log_start_offset)
        self.recovery_point = min(self.recovery_point, offset)
        self._producers.delete_snapshots_above(offset)
        if self._txn.loaded:
            self._txn.load(now_ms, self.log_start_offset, self._leo)
        logger.info("log_truncated", topic=self.topic, partition=self.partition, offset=offset,
                    segments_removed=len(doomed))
        return True

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int | None = None) -> None:
        """Delete every segment and start empty at ``offset``."""
        self._check_open()
        self._check_no_append_in_flight()
        doomed = list(self._segments)
        self._deleter.finish_renames(offset)
        for seg in doomed:
            if seg.base_offset == offset:
                seg.rename_suffix(files.DELETED_SUFFIX)
        seg = self._factory.create(self.config, offset, created_ms=now_ms)
        self._deleter.schedule_delete(doomed, now_ms or 0, self.config.file_delete_delay_ms)
        self._segments.reset(seg)
        self._leo = offset
        self.log_start_offset = offset
        self.recovery_point = offset
        self._active_ready = True
        self._flushing.note_dir_changed()
        self._producers.delete_snapshots_above(-1)
        self._txn.start_empty(offset)

    # -- retention (storage.log_retention) --------------------------------------------------------------
    @property
    def defer_renames(self) -> bool:
        """Retention's renames become :class:`~storage.log_retention.SegmentRename` jobs for the
        broker's scheduler (set by the log manager of a broker that has one)."""
        return self._deleter.defer_renames

    @defer_renames.setter
    def defer_renames(self, value: bool) -> None:
        self._deleter.defer_renames = value

    def _roll_for_retention(self, now_ms: int) -> LogSegment | None:
        return None if self._in_flight is not None else self.roll(now_ms, reason="retention")

    def delete_old_segments(self, now_ms: int, consumed_upto: int | None = None) -> RetentionOutcome:
        """One retention pass (reference §7, seed 004); see :mod:`storage.retention`."""
        self._check_open()
        outcome = self._retention.delete_old_segments(
            self.config, now_ms, consumed_upto, log_start_offset=self.log_start_offset,
            high_watermark=self.high_watermark, log_end_offset=lambda: self._leo,
            roll=self._roll_for_retention, advance_log_start=self._advance_log_start)
        outcome.log_start_offset = self.log_start_offset
        return outcome

    def take_rename_jobs(self) -> list[SegmentRename]:
        """The renames owed, handed over to be run on any thread and given back to :meth:`renamed`."""
        return self._deleter.take_rename_jobs()

    def renamed(self, job: SegmentRename) -> None:
        """Owner thread, after ``job.run()``: its files now wait for their unlink."""
        self._deleter.renamed(job)

    def take_expired_files(self, now_ms: int) -> list[str]:
        """Hand over the ``.deleted`` files whose delay has passed and forget them (the caller removes them)."""
        return self._deleter.take_expired_files(now_ms)

    def delete_expired_files(self, now_ms: int) -> int:
        """Remove ``.deleted`` files whose delay has passed; number of files removed."""
        return self._deleter.delete_expired_files(now_ms)

    def pending_delete_paths(self) -> list[str]:
        return self._deleter.pending_delete_paths()

    # -- flushing (storage.log_flush) -------------------------------------------------------------------
    def prepare_flush(self, up_to_offset: int | None = None) -> FlushJob | None:
        """A :class:`FlushJob` making offsets below the target durable, or None if nothing to do."""
        self._check_open()
        target = self._leo if up_to_offset is None else min(up_to_offset, self._leo)
        return self._flushing.prepare(target, self.recovery_point)

    def mark_flushed(self, job: FlushJob) -> None:
        """After ``job.run()``: advance the recovery point (owning thread only)."""
        if not self._flushing.completed(job):
            return  # truncated or swapped meanwhile: the synced range may not match the log any more
        new_point = min(job.target_offset, self._leo)
        if new_point > self.recovery_point:
            self.recovery_point = new_point

    def flush(self, up_to_offset: int | None = None) -> None:
        """Synchronous flush on the calling thread (shutdown, tests)."""
        job = self.prepare_flush(up_to_offset)
        if job is not None:
            job.run()
            self.mark_flushed(job)

    def maybe_flush_due(self, now_ms: int, *, time_check: bool = True) -> FlushJob | None:
        """A flush job if ``flush.messages``, ``flush.ms`` (checked only with ``time_check``) or a
        past roll asks for one."""
        if self._closed:
            return None
        cfg = self.config
        target = self._flushing.due_target(now_ms, time_check=time_check, unflushed=self.unflushed_messages,
                                           flush_messages=cfg.flush_messages, flush_ms=cfg.flush_ms,
                                           recovery_point=self.recovery_point)
        if target is None:
            return None
        return self.prepare_flush(None if target < 0 else target)

    # -- compaction (storage.log_cleaning) --------------------------------------------------------------
    def cleaning_job(self, first_dirty_offset: int, first_uncleanable_offset: int, now_ms: int):
        """A snapshot for one cleaning pass (owner thread); close it with ``job.close()``."""
        self._check_open()
        self._ensure_producer_state(now_ms)
        return self._cleaning.cleaning_job(self.config, first_dirty_offset, first_uncleanable_offset, now_ms)

    def replace_segments(self, cleaned, now_ms: int) -> bool:
        """Swap ``cleaned`` in for the segments it replaces (owner thread); False when refused."""
        if self._closed:
            return False
        swapped = self._cleaning.replace_segments(self.config, cleaned, now_ms)
        if swapped:
            self._flushing.note_dir_changed()
        return swapped

    # -- info -----------------------------------------------------------------------------------------
    def segments_info(self) -> list[SegmentInfo]:
        out = []
        for seg in self._segments:
            out.append(SegmentInfo(seg.base_offset, seg.next_offset - 1, seg.size_bytes, seg.largest_timestamp_ms(),
                                   seg.largest_timestamp_source, seg.max_timestamp_so_far, seg.log_path,
                                   seg.offset_index.path, seg.time_index.path, seg.is_active))
        return out

    def summary(self, probe: Callable[[int, int, int], bool] | None = None) -> dict:
        """Gauges for metrics: offsets, segment count, size, the largest record timestamp and the
        oldest retained one (:meth:`oldest_record_timestamp`, -1 when none). ``probe``: as there
        (a range not in the page cache raises :class:`~records.framing.NotInPageCache`)."""
        oldest = self.oldest_record_timestamp(probe)
        return {"log_start_offset": self.log_start_offset, "log_end_offset": self._leo,
                "segment_count": len(self._segments), "size_bytes": self.size_bytes,
                "max_timestamp_ms": self._search.max_timestamp_ms(), "recovery_point": self.recovery_point,
                "oldest_timestamp_ms": -1 if oldest is None else oldest}

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
        self._deleter.finish_renames()
        if self._txn.loaded:
            try:
                self._producers.map_end_offset = self._leo
                self._producers.take_snapshot(self._leo)
                self._producers.retain_latest_snapshots(keep=max(2, len(self._segments) + 1))
            except OSError as exc:
                logger.warning("producer_snapshot_failed", topic=self.topic, partition=self.partition, error=str(exc))
        self._cleaning.abort()
        for seg in self._segments:
            seg.close()
        self._closed = True

    def close_handles(self) -> None:
        """Release descriptors and mappings without writing (topic deletion, failed start)."""
        self._cleaning.abort()
        for seg in self._segments:
            seg.close_handles()
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition}, log_start_offset={self.log_start_offset}, "
                f"log_end_offset={self._leo}, segments={len(self._segments)})")


__all__ = ["PartitionLog", "AppendResult", "FetchDataInfo", "FlushJob", "SegmentInfo", "TimestampOffset",
           "AbortedTransaction", "ProducerDescription", "BatchIndexCache"]
