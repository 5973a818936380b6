"""Turns protocol-level partition maps into storage calls (Kafka's ReplicaManager, one node).

This broker leads every partition, its leader epoch is always 0 and the high
watermark equals the log end offset. Every partition succeeds or fails on its own:
an error in one partition of a Produce, Fetch or ListOffsets never fails the rest.

* **Append** (Produce): validate and append through storage; wake parked fetches of
  the partition; for ``acks=-1`` wait until the data is fsynced (group commit,
  :mod:`broker.flusher`), bounded by the request's ``timeout_ms``
  (REQUEST_TIMED_OUT after it).
* **Fetch**: KIP-74 sizing (the first partition with data returns at least one whole
  batch unless the request version imposes a hard limit), down-conversion for
  clients that cannot read the stored format (Fetch v0–v3), long-polling through the
  purgatory until ``min_bytes`` are available or ``max_wait_ms`` passes. File slices
  are returned only from the last read, never held across an ``await``.
* **Transaction markers**: :meth:`ReplicaManager.write_txn_markers` (the coordinator's
  entry point; see its docstring).
* **ListOffsets**: earliest (-2), latest (-1), max timestamp (-3, v7+), earliest
  local (-4, v8+), latest tiered (-5, v9+: nothing tiered, so -1/-1), by timestamp
  (T >= 0: first offset whose timestamp >= T, Kafka's algorithm in storage), and the
  v0 "offsets before" answer. "Not found" is offset -1, timestamp -1.
* **Retention**: one pass over every log, with the consumed-log input from the group
  coordinator (seed 004).
* **DeleteRecords** (:meth:`ReplicaManager.delete_records`), **OffsetForLeaderEpoch**
  (:meth:`ReplicaManager.offset_for_leader_epoch`), **DescribeProducers**
  (:meth:`ReplicaManager.describe_producers`): one partition each, answered as a plain result
  with its Kafka error code.
* **Produce's request-level checks** (:meth:`ReplicaManager.produce_records_error`,
  :meth:`ReplicaManager.carries_transactional_batch`): the header fields they need are read
  by storage (:mod:`storage.batch_peek`), so no handler reads record bytes.

Handlers reach partition logs only through these methods (the seam of docs/architecture.md);
the methods call the documented ``PartitionLog`` API and turn storage exceptions into error
codes once (:func:`broker.errors.error_code_for`).

The event loop never waits on the disk for these (with a ``scheduler``,
:mod:`broker.scheduler`): a partition is opened (and its leftovers recovered) on a
scheduler thread before the first request that needs it is served (:meth:`open_logs`);
a Fetch answer whose bytes are not all in the page cache is read into it on a
scheduler thread before ``sendfile`` sends it (:mod:`broker.page_cache`), and so are the
batch headers a Fetch walks to find its first batch, before the walk (:meth:`_read_resident`); retention
renames and unlinks on the scheduler, after the log start offsets are checkpointed
(:meth:`ReplicaManager.delete_dropped_segments`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable

import structlog

import sundial.storage.errors as se
from sundial.records.codecs import ZSTD
from sundial.records.control import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT
from sundial.records.layout import INT32_MAX, MAGIC_V2
from sundial.storage.batch_peek import first_batch_is_transactional, peek_first_batch
from sundial.storage.convert import down_convert
from sundial.protocol.errors import ErrorCode
from sundial.records.timestamps import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)

from sundial.records.framing import NotInPageCache
from sundial.storage.files import FileSlice
from sundial.storage.log import PendingAppend

from . import page_cache
from .appender import AppendWriters, PartitionAppender
from .errors import NO_LOG_START_OFFSET, error_code_for
from .flusher import PartitionFlusher, PartitionFlushers
from .log_mover import LogMover
from .topics import INTERNAL_TOPICS

logger = structlog.get_logger(__name__)

LEADER_EPOCH = 0

_MIN_VERSION_FOR = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9}

# Isolation levels (Fetch v4+, ListOffsets v2+).
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
#: Times a timestamp search may meet a range not in the page cache and have it read in on the
#: scheduler before it reads as it is (each round reads 256 KiB or the batch, whichever is larger).
LOOKUP_WARM_ROUNDS = 3


class _DurabilityTimeout(Exception):
    """Set on a flusher's future whose waiter's ``timeout_ms`` passed (REQUEST_TIMED_OUT)."""


def _tv2_marker_is_stale(log, producer_id: int, producer_epoch: int) -> bool:
    """A transaction-version-2 marker (KIP-1228) carries the epoch its coordinator bumped, so it
    must be above the partition's epoch for the producer; one at that epoch is accepted only as
    the retry of a marker whose transaction is already closed (Kafka ``checkProducerEpoch``)."""
    entry = log.describe_producer(producer_id)
    if entry is None or producer_epoch > entry.producer_epoch:
        return False
    return not (producer_epoch == entry.producer_epoch and entry.current_txn_start_offset < 0)


def _append_now(begin, settle):
    """``begin``'s append written on this thread (the internal topics' way): ``settle``'s outcome."""
    log = None
    try:
        log, begun = begin()
        if isinstance(begun, PendingAppend):
            try:
                begun.write()
            except OSError as exc:
                begun = log.finish_append(begun, exc)   # raises KafkaStorageError
            else:
                begun = log.finish_append(begun)
    except Exception as exc:
        return settle(log, None, exc)
    return settle(log, begun, None)


class _UnknownPartition(Exception):
    """The partition of an append that waited in its queue is gone (topic deleted)."""


def _expire(futures) -> None:
    for fut in futures:
        if not fut.done():
            fut.set_exception(_DurabilityTimeout())


class DurableWait:
    """The fsyncs one acks=-1 request waits for, asked for when its appends were made.

    ``done()`` tells without waiting whether :meth:`finish` would return at once.
    :meth:`finish` awaits the flushers' futures one after another (cheaper per request
    than ``asyncio.wait``; :meth:`wait`), then writes the outcome into each append's
    :class:`AppendOutcome` (:meth:`settle`): REQUEST_TIMED_OUT when the timer fired first,
    KAFKA_STORAGE_ERROR when the fsync failed. :meth:`discard` drops the waiters (the
    requester went away); the appends stay in the log.
    """

    __slots__ = ("_futures", "_targets", "_timer")

    def __init__(self, futures: list, targets: list, timer) -> None:
        self._futures, self._targets, self._timer = futures, targets, timer

    def done(self) -> bool:
        for fut in self._futures:
            if not fut.done():
                return False
        return True

    def discard(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for fut in self._futures:
            fut.cancel()

    async def finish(self) -> None:
        await self.wait()
        self.settle()

    async def wait(self) -> None:
        """Return once :meth:`done` (a cancelled caller drops the waiters, as :meth:`discard`)."""
        try:
            for fut in self._futures:
                if not fut.done():
                    try:
                        await fut
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        pass  # read by settle()
        except asyncio.CancelledError:  # the requester went away: drop its waiters
            self.discard()
            raise

    def settle(self) -> None:
        """Once :meth:`done`: stop the timer and write each fsync's outcome into its append's
        :class:`AppendOutcome` (once; later calls do nothing)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        futures, self._futures = self._futures, []
        for fut, out in zip(futures, self._targets):
            exc = fut.exception()
            if exc is None:
                continue
            if isinstance(exc, _DurabilityTimeout):
                out.error_code = ErrorCode.REQUEST_TIMED_OUT
            else:
                logger.error("flush_failed_for_produce", error=str(exc))
                out.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                out.base_offset = -1
                out.log_start_offset = -1


@dataclass(slots=True)
class AppendOutcome:
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: list = field(default_factory=list)
    error_message: str | None = None
    last_offset: int = -1


@dataclass(slots=True)
class FetchPartition:
    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1


@dataclass(slots=True)
class FetchOutcome:
    topic: str
    partition: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Any = None  # None, bytes, or a storage FileSlice
    size_bytes: int = 0
    aborted_transactions: list | None = None   # read_committed: [(producer_id, first_offset)]


@dataclass(slots=True)
class OffsetAnswer:
    error_code: int = 0
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1
    old_style_offsets: list = field(default_factory=list)


@dataclass(slots=True)
class DeleteRecordsAnswer:
    """One partition of DeleteRecords: the new log start offset (``low_watermark``), -1 on error."""

    error_code: int = 0
    low_watermark: int = -1


@dataclass(slots=True)
class EpochEndOffset:
    """One partition of OffsetForLeaderEpoch: where ``leader_epoch`` ends; -1/-1 when unknown."""

    error_code: int = 0
    leader_epoch: int = -1
    end_offset: int = -1


@dataclass(slots=True)
class ProducersAnswer:
    """One partition of DescribeProducers: storage's ``ProducerDescription`` list, by producer id."""

    error_code: int = 0
    error_message: str | None = None
    producers: list = field(default_factory=list)


class ReplicaManager:
    """The data plane of one node over ``logs``; each collaborator is handed in at construction.

    ``purgatory`` parks long-polling fetches and is woken by appends; ``metrics`` counts
    appends, retention and time-index lookups; ``now_ms`` is the clock; ``groups``
    (anything with ``consumed_upto(topic, partition, log_start_offset)``, the group
    coordinator) is the consumed-retention input, None for none. ``flushers`` is the one
    flusher of each partition (:class:`broker.flusher.PartitionFlushers`), shared with the
    coordinators that write internal topics, owned by the caller; None: flushers of its own over
    ``flush_threads``, closed by :meth:`close`. ``flush_threads`` runs the fsyncs (acks=all,
    ``flush.messages``/``flush.ms``) when no ``flushers`` are given, owned by the caller; None:
    ``num.io.threads`` new ones (:func:`broker.flusher.make_flush_threads`), closed with the flushers.
    ``append_writers`` write the bytes of Produce appends and transaction markers off the loop
    (:mod:`broker.appender`), owned by the caller; None: ``num.io.threads`` new ones, closed by
    :meth:`close`.
    """

    def __init__(self, config, logs, *, purgatory, metrics, now_ms: Callable[[], int], groups=None,
                 scheduler=None, flush_threads=None, flushers: PartitionFlushers | None = None,
                 append_writers: AppendWriters | None = None) -> None:
        self.config = config
        self.logs = logs
        self.purgatory = purgatory
        self.metrics = metrics
        self.now_ms = now_ms
        self.groups = groups
        self.scheduler = scheduler   # broker.scheduler.Scheduler: blocking file work off the loop; None: inline
        self.page_cache_warms = 0    # Fetch answers read into the page cache on the scheduler first
        self.header_warms = 0        # Fetch header walks that met a range not in the page cache
        self.lookup_warms = 0        # timestamp searches that met a range not in the page cache
        self._owns_flushers = flushers is None
        io_threads = config.log_scheduling.io_threads   # num.io.threads: each pool's size
        self._flushers = flushers if flushers is not None else PartitionFlushers(flush_threads,
                                                                                 thread_count=io_threads)
        self._flush_threads = self._flushers.threads
        self._owns_writers = append_writers is None
        self._writers = append_writers if append_writers is not None else AppendWriters(io_threads)
        self._appenders: dict[tuple[str, int], PartitionAppender] = {}
        self._consumed_holds: dict[tuple[str, int], tuple[int, str | None]] = {}  # logged holds
        self.log_mover = LogMover(self, now_ms)   # AlterReplicaLogDirs moves (broker.log_mover)

    # -- helpers ----------------------------------------------------------------------------
    def log_for(self, topic: str, partition: int):
        """The partition log, or None when the topic or partition does not exist."""
        return self.logs.get_log(topic, partition)

    def _flusher(self, topic: str, partition: int, log) -> PartitionFlusher:
        return self._flushers.flusher(topic, partition, log)

    async def _run(self, fn, *args):
        if self.scheduler is None:
            return fn(*args)
        return await self.scheduler.run(fn, *args)

    def open_logs(self, partitions):
        """Open the partitions of ``partitions`` (``(topic, partition)`` pairs) not open yet, on the
        scheduler: an awaitable to await before serving them, or None when there is nothing to open
        (the common case, no suspension). Unknown partitions are skipped; an open that fails is
        reported by the request's own look-up, which retries it."""
        if self.scheduler is None:
            return None
        logs = self.logs
        pending = []
        for tp in partitions:
            if not logs.is_open(*tp):
                fut = logs.start_open(*tp)
                if fut is not None:
                    pending.append((tp, fut))
        return self._wait_opens(pending) if pending else None

    async def _wait_opens(self, pending) -> None:
        for tp, fut in pending:
            try:
                # shielded: a request that goes away leaves the open to finish and be installed later
                await asyncio.shield(asyncio.wrap_future(fut))
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - reported by the request's look-up
                pass
            try:
                self.logs.finish_open(*tp)
            except Exception as exc:  # noqa: BLE001 - reported by the request's look-up, which retries
                logger.warning("partition_open_failed", topic=tp[0], partition=tp[1], error=str(exc))

    async def _reopened(self, parts) -> None:
        """Before a read that follows an ``await``: a partition may have been taken out of service
        meanwhile (the swap of a log-dir move, :mod:`broker.log_mover`); wait for it off the loop."""
        waiting = self.open_logs((p.topic, p.partition) for p in parts)
        if waiting is not None:
            await waiting

    def forget_topic(self, topic: str) -> None:
        self._flushers.forget_topic(topic)
        for tp in [tp for tp in self._appenders if tp[0] == topic]:
            del self._appenders[tp]

    def _appender(self, topic: str, partition: int) -> PartitionAppender:
        appender = self._appenders.get((topic, partition))
        if appender is None:
            appender = self._appenders[(topic, partition)] = PartitionAppender(self._writers)
        return appender

    def appends_idle(self, topic: str, partition: int) -> bool:
        """No append of the partition is in flight or queued now."""
        appender = self._appenders.get((topic, partition))
        return appender is None or appender.idle

    async def wait_appends(self, topic: str, partition: int) -> None:
        """Return once no append of the partition is in flight or queued (appends begun after
        the return are not waited for: check :meth:`appends_idle` right before what needs it)."""
        appender = self._appenders.get((topic, partition))
        if appender is not None:
            await appender.wait_idle()

    @staticmethod
    def _check_leader_epoch(current_leader_epoch: int) -> int:
        if current_leader_epoch is None or current_leader_epoch < 0:
            return ErrorCode.NONE
        if current_leader_epoch > LEADER_EPOCH:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if current_leader_epoch < LEADER_EPOCH:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.NONE

    # -- append ------------------------------------------------------------------------------
    def append_one(self, topic: str, partition: int, records, now_ms: int) -> AppendOutcome:
        """Append on the loop thread, write included: internal topics, which no client appends to
        (their writers await durability anyway). Produce goes through :meth:`append`."""
        log = self.log_for(topic, partition)
        if log is None:
            return AppendOutcome(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            result = log.append(records, now_ms=now_ms, leader_epoch=LEADER_EPOCH)
        except Exception as exc:
            return self._appended(topic, partition, log, None, exc)
        return self._appended(topic, partition, log, result, None)

    def append(self, topic: str, partition: int, records, now_ms: int, *,
               on_done: Callable[[AppendOutcome], None] | None = None):
        """Produce's append, in arrival order per partition, its write off the loop
        (:mod:`broker.appender`): the :class:`AppendOutcome` at once when no write is needed or
        the append is refused; else :data:`broker.appender.PENDING`, and ``on_done(outcome)``
        when it ends (a Future of the outcome when ``on_done`` is None)."""
        def begin():
            log = self.log_for(topic, partition)
            if log is None:
                raise _UnknownPartition()
            return log, log.begin_append(records, now_ms=now_ms, leader_epoch=LEADER_EPOCH)

        return self._appender(topic, partition).submit(
            begin, lambda log, result, exc: self._appended(topic, partition, log, result, exc), on_done)

    def _appended(self, topic: str, partition: int, log, result, exc) -> AppendOutcome:
        """The outcome of an append that ended with ``result`` (an AppendResult) or ``exc``."""
        if exc is not None:
            if isinstance(exc, _UnknownPartition):
                return AppendOutcome(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if isinstance(exc, se.StorageError):
                code = error_code_for(exc)
                out = AppendOutcome(error_code=code)
                if code not in NO_LOG_START_OFFSET and log is not None and not log.closed:
                    out.log_start_offset = log.log_start_offset
                if isinstance(exc, se.InvalidRecordError):
                    out.record_errors = list(getattr(exc, "record_errors", None) or [])
                    out.error_message = str(exc)
                logger.info("append_rejected", topic=topic, partition=partition, error=code.name, reason=str(exc))
                return out
            if isinstance(exc, OSError):
                logger.error("append_io_error", topic=topic, partition=partition, error=str(exc))
                return AppendOutcome(error_code=ErrorCode.KAFKA_STORAGE_ERROR)
            logger.error("append_failed", topic=topic, partition=partition, error=repr(exc), exc_info=exc)
            return AppendOutcome(error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
        if not result.duplicate:
            self.purgatory.notify(topic, partition)
            self.metrics.appended(topic, result.record_count, result.size_bytes)
        return AppendOutcome(base_offset=result.first_offset, last_offset=result.last_offset,
                             log_append_time_ms=result.log_append_time_ms,
                             log_start_offset=result.log_start_offset)

    def start_durable(self, appended: list[tuple[str, int, AppendOutcome]],
                      timeout_ms: int) -> "DurableWait | None":
        """acks=-1, at append time: ask each partition's flusher for an fsync covering the
        successful appends now (so the fsync starts while the request still waits in its
        connection's line) and start the ``timeout_ms`` clock. None when everything is
        already on disk; else a :class:`DurableWait` to finish."""
        futures = []
        targets = []
        for topic, partition, out in appended:
            if out.error_code != ErrorCode.NONE or out.last_offset < 0:
                continue
            log = self.log_for(topic, partition)
            if log is None:
                continue
            fut = self._flusher(topic, partition, log).flushed_future(out.last_offset)
            if fut is not None:
                futures.append(fut)
                targets.append(out)
        if not futures:
            return None
        timer = (asyncio.get_running_loop().call_later(timeout_ms / 1000, _expire, futures)
                 if timeout_ms > 0 else None)
        return DurableWait(futures, targets, timer)

    async def wait_durable(self, appended: list[tuple[str, int, AppendOutcome]], timeout_ms: int) -> None:
        """acks=-1: return once every successful append is fsynced; REQUEST_TIMED_OUT after timeout_ms.

        Returns without suspending when everything is already on disk."""
        wait = self.start_durable(appended, timeout_ms)
        if wait is not None:
            await wait.finish()

    # -- transaction markers ----------------------------------------------------------------
    async def write_txn_markers(self, *, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                                commit: bool, partitions, timestamp_ms: int | None = None,
                                timeout_ms: int = 30_000, transaction_version: int = 0
                                ) -> dict[tuple[str, int], int]:
        """Write one COMMIT (``commit=True``) or ABORT marker to each of ``partitions`` and wait
        until every successful one is fsynced; ``{(topic, partition): error code}``.

        This is the single-node form of Kafka's WriteTxnMarkers, for the transaction
        coordinator: each marker is the control batch of
        ``MemoryRecords.withEndTransactionMarker`` (``records.control``), timestamped
        ``timestamp_ms`` (default: the broker clock), appended with origin
        ``AppendOrigin.COORDINATOR`` (``PartitionLog.append_txn_marker``). It closes the producer's open
        transaction in the partition, moves the last stable offset and, for an ABORT,
        adds the transaction to the segment's ``.txnindex``. A marker for a producer with
        no open transaction in a partition is still appended (Kafka does). Parked fetches
        of each partition are woken. The call returns once every appended marker is on
        disk (or ``timeout_ms`` passed: REQUEST_TIMED_OUT for the ones not yet durable).

        Error codes per partition: NONE (0); UNKNOWN_TOPIC_OR_PARTITION (3);
        INVALID_PRODUCER_EPOCH (47) when ``producer_epoch`` is older than the partition's
        epoch for the producer (with ``transaction_version`` 2 or more, KIP-1228, also when it
        is not above it, unless it repeats the marker of a transaction already closed at that
        epoch); TRANSACTION_COORDINATOR_FENCED (52) when
        ``coordinator_epoch`` is older than the last marker's; UNSUPPORTED_FOR_MESSAGE_FORMAT
        (43) for a topic stored below magic 2; KAFKA_STORAGE_ERROR (56); REQUEST_TIMED_OUT (7).
        The markers are appended like Produce appends: in each partition's order, their bytes
        written off the loop (:mod:`broker.appender`).
        """
        partitions = list(partitions)
        waiting = self.open_logs(partitions)
        if waiting is not None:
            await waiting
        now = self.now_ms()
        ts = now if timestamp_ms is None else timestamp_ms
        control_type = CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT
        codes: dict[tuple[str, int], int] = {}
        outcomes: list[tuple[str, int, Any]] = []
        for topic, partition in partitions:
            def begin(topic=topic, partition=partition):
                log = self.log_for(topic, partition)
                if log is None:
                    raise _UnknownPartition()
                if transaction_version >= 2 and _tv2_marker_is_stale(log, producer_id, producer_epoch):
                    raise se.InvalidProducerEpochError(
                        f"transaction version {transaction_version} marker epoch {producer_epoch} is not above "
                        f"the partition's epoch for producer {producer_id}")
                return log, log.begin_txn_marker(producer_id=producer_id, producer_epoch=producer_epoch,
                                                 coordinator_epoch=coordinator_epoch, control_type=control_type,
                                                 timestamp_ms=ts, now_ms=now, leader_epoch=LEADER_EPOCH)

            def settle(log, result, exc, topic=topic, partition=partition) -> int | AppendOutcome:
                if exc is None:
                    self.purgatory.notify(topic, partition)
                    return AppendOutcome(base_offset=result.first_offset, last_offset=result.last_offset)
                if isinstance(exc, _UnknownPartition):
                    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if isinstance(exc, se.StorageError):
                    code = error_code_for(exc)
                    logger.info("txn_marker_rejected", topic=topic, partition=partition, producer_id=producer_id,
                                error=code.name, reason=str(exc))
                    return code
                logger.error("txn_marker_io_error", topic=topic, partition=partition, error=str(exc),
                             exc_info=None if isinstance(exc, OSError) else exc)
                return ErrorCode.KAFKA_STORAGE_ERROR

            if topic in INTERNAL_TOPICS:
                # the coordinators append to their internal topics on the loop, write included; a
                # marker there does the same, so no append of theirs ever meets one in flight
                outcomes.append((topic, partition, _append_now(begin, settle)))
            else:
                outcomes.append((topic, partition, self._appender(topic, partition).submit(begin, settle)))
        appended: list[tuple[str, int, AppendOutcome]] = []
        for topic, partition, outcome in outcomes:
            if isinstance(outcome, asyncio.Future):
                outcome = await outcome
            if isinstance(outcome, AppendOutcome):
                codes[(topic, partition)] = ErrorCode.NONE
                appended.append((topic, partition, outcome))
            else:
                codes[(topic, partition)] = outcome
        if appended:
            await self.wait_durable(appended, timeout_ms)
            for topic, partition, out in appended:
                codes[(topic, partition)] = out.error_code
        return codes

    # -- fetch ---------------------------------------------------------------------------------
    def _read_all(self, parts: list[FetchPartition], *, max_bytes: int, hard_limit: bool,
                  client_max_magic: int, api_version: int, read_committed: bool = False,
                  cold: list[tuple[int, int, int]] | None = None) -> tuple[list[FetchOutcome], int, bool]:
        """One read of every partition of a Fetch. With ``cold`` (a list), a partition whose
        batch headers are not all in the page cache is left empty and the range is added to
        ``cold`` (:meth:`_read_resident` reads it in and asks again); without, reads may wait
        on the disk."""
        probe = page_cache.cached if cold is not None else None
        results: list[FetchOutcome] = []
        budget = max_bytes
        total = 0
        min_one = not hard_limit
        any_error = False
        for p in parts:
            out = FetchOutcome(p.topic, p.partition)
            results.append(out)
            log = self.log_for(p.topic, p.partition)
            if log is None:
                out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                any_error = True
                continue
            epoch_error = self._check_leader_epoch(p.current_leader_epoch)
            if epoch_error:
                out.error_code = epoch_error
                any_error = True
                continue
            out.high_watermark = log.high_watermark
            out.last_stable_offset = log.last_stable_offset
            out.log_start_offset = log.log_start_offset
            if read_committed:
                out.aborted_transactions = []
            config = log.config
            needs_conversion = config.record_version > client_max_magic
            if needs_conversion and not config.message_downconversion_enable:
                out.error_code = ErrorCode.UNSUPPORTED_VERSION
                any_error = True
                continue
            if api_version < 10 and config.compression_type == "zstd":
                out.error_code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
                any_error = True
                continue
            limit = min(p.partition_max_bytes, budget) if not hard_limit else p.partition_max_bytes
            if limit <= 0 and not min_one:
                continue
            try:
                info = log.read(p.fetch_offset, max(limit, 0), min_one_message=min_one,
                                read_committed=read_committed, probe=probe)
            except NotInPageCache as miss:   # raised only with a probe, so only when ``cold`` is a list
                cold.append((miss.fd, miss.position, max(miss.size, page_cache.HEADER_WARM_BYTES)))  # type: ignore
                continue
            except se.OffsetOutOfRangeError:
                out.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                any_error = True
                continue
            except se.StorageError as exc:
                out.error_code = error_code_for(exc)
                any_error = True
                continue
            out.aborted_transactions = info.aborted_transactions
            if info.first_entry_incomplete and not hard_limit:
                continue  # Fetch v3+: an incomplete first batch becomes empty records
            slices = info.slices
            size = sum(s.size for s in slices)
            if size == 0:
                continue
            if needs_conversion:
                try:
                    raw = b"".join(s.read() for s in slices)
                    data = down_convert(raw, client_max_magic, p.fetch_offset)
                except se.StorageError as exc:
                    out.error_code = error_code_for(exc)
                    any_error = True
                    continue
                out.records = data
                size = len(data)
            elif len(slices) == 1:
                out.records = slices[0]
            else:
                out.records = b"".join(s.read() for s in slices)
            out.size_bytes = size
            total += size
            budget = max(0, budget - size)
            min_one = False
        return results, total, any_error

    async def fetch(self, parts: list[FetchPartition], *, max_wait_ms: int, min_bytes: int, max_bytes: int,
                    api_version: int, isolation_level: int = READ_UNCOMMITTED) -> list[FetchOutcome]:
        """Read ``parts``; ``isolation_level`` READ_COMMITTED (1, Fetch v4+) stops at the last
        stable offset and reports the aborted transactions of the range."""
        read_committed = isolation_level == READ_COMMITTED and api_version >= 4
        hard_limit = api_version <= 2
        client_max_magic = 0 if api_version <= 1 else 1 if api_version <= 3 else 2
        if hard_limit:
            max_bytes = INT32_MAX
        else:
            max_bytes = min(max_bytes, self.config.fetch_max_bytes)
        waiting = self.open_logs((p.topic, p.partition) for p in parts)
        if waiting is not None:
            await waiting

        def read_now(cold=None):
            return self._read_all(parts, max_bytes=max_bytes, hard_limit=hard_limit,
                                  client_max_magic=client_max_magic, api_version=api_version,
                                  read_committed=read_committed, cold=cold)

        results, total, any_error = await self._read_resident(parts, read_now)
        if total >= min_bytes or max_wait_ms <= 0 or any_error or not parts:
            return await self._in_page_cache(parts, results, read_now)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        purgatory = self.purgatory
        waiter = purgatory.park((p.topic, p.partition) for p in parts)
        try:
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                woken = await waiter.wait(remaining)
                if not woken:
                    break
                await self._reopened(parts)
                results, total, any_error = await self._read_resident(parts, read_now)
                if total >= min_bytes or any_error:
                    return await self._in_page_cache(parts, results, read_now)
                purgatory.unpark(waiter)
                waiter = purgatory.park((p.topic, p.partition) for p in parts)
        finally:
            purgatory.unpark(waiter)
        # Deadline reached: answer with what is there now (fresh slices, nothing held across awaits).
        await self._reopened(parts)
        results, _, _ = await self._read_resident(parts, read_now)
        return await self._in_page_cache(parts, results, read_now)

    async def _read_resident(self, parts, read_now) -> tuple[list[FetchOutcome], int, bool]:
        """``read_now`` on the loop, its header walks probing the page cache: ranges they
        would have waited on the disk for are read in on the scheduler, then the read is
        done again (nothing of the first is kept across the ``await``). A second miss
        reads as it is."""
        if self.scheduler is None:
            return read_now()
        cold: list[tuple[int, int, int]] = []
        answer = read_now(cold)
        if not cold:
            return answer
        self.header_warms += 1
        await self._warm(cold, parts)
        return read_now()

    async def _warm(self, cold: list[tuple[int, int, int]], parts) -> None:
        """Read the ``cold`` ranges into the page cache on the scheduler (its own descriptors:
        storage's may close meanwhile), then wait until ``parts`` are in service again."""
        await self.scheduler.run(page_cache.warm, page_cache.own(cold))
        await self._reopened(parts)

    async def _in_page_cache(self, parts, results: list[FetchOutcome], read_now,
                             attempts: int = 1) -> list[FetchOutcome]:
        """Make sure the file slices of ``results`` are in the page cache, so that ``sendfile`` and
        ``pread`` on the loop do not wait on the disk: slices not all cached are read on the
        scheduler, then the answer is read again (slices never outlive an ``await``). After
        ``attempts`` rounds the answer goes as it is."""
        if self.scheduler is None:
            return results
        for _ in range(attempts):
            cold = [(out.records.fd, out.records.position, out.records.size) for out in results
                    if isinstance(out.records, FileSlice) and not page_cache.cached(
                        out.records.fd, out.records.position, out.records.size)]
            if not cold:
                return results
            self.page_cache_warms += 1
            await self._warm(cold, parts)
            results, _, _ = read_now()   # its headers were resident a moment ago
        return results

    # -- list offsets ------------------------------------------------------------------------
    async def list_offset_resident(self, topic: str, partition: int, timestamp: int, **kwargs) -> OffsetAnswer:
        """:meth:`list_offset` without waiting on the disk on the loop: a timestamp search is
        made with the page-cache probe; a range it refuses is read in on the scheduler and the
        search made again (up to :data:`LOOKUP_WARM_ROUNDS` times, then as it is)."""
        if self.scheduler is None:
            return self.list_offset(topic, partition, timestamp, **kwargs)
        for _ in range(LOOKUP_WARM_ROUNDS):
            try:
                return self.list_offset(topic, partition, timestamp, probe=page_cache.cached, **kwargs)
            except NotInPageCache as miss:
                self.lookup_warms += 1
                await self._warm([(miss.fd, miss.position, max(miss.size, page_cache.HEADER_WARM_BYTES))],
                                 [FetchPartition(topic, partition, 0, 0)])
        return self.list_offset(topic, partition, timestamp, **kwargs)

    def list_offset(self, topic: str, partition: int, timestamp: int, *, api_version: int,
                    current_leader_epoch: int = -1, max_num_offsets: int = 1,
                    isolation_level: int = READ_UNCOMMITTED,
                    probe: Callable[[int, int, int], bool] | None = None) -> OffsetAnswer:
        """One partition of ListOffsets (Kafka ``Partition.fetchOffsetForTimestamp``).

        The last fetchable offset is the last stable offset under READ_COMMITTED (v2+), else
        the high watermark. LATEST answers it; EARLIEST and EARLIEST_LOCAL are exempt; any
        other lookup (a timestamp, MAX_TIMESTAMP, LATEST_TIERED) whose answer is at or past
        it answers "none" (offset -1, timestamp -1). ``probe``: a page-cache probe for a
        timestamp search (:class:`~records.framing.NotInPageCache` when it refuses a range).
        """
        log = self.log_for(topic, partition)
        if log is None:
            return OffsetAnswer(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        epoch_error = self._check_leader_epoch(current_leader_epoch)
        if epoch_error:
            return OffsetAnswer(error_code=epoch_error)
        if api_version == 0:
            if timestamp < EARLIEST_TIMESTAMP:
                return OffsetAnswer(error_code=ErrorCode.UNSUPPORTED_VERSION)
            offsets = log.legacy_offsets_before(timestamp, max_num_offsets, self.now_ms())
            return OffsetAnswer(old_style_offsets=list(offsets))
        if timestamp < 0:
            needed = _MIN_VERSION_FOR.get(timestamp, 0 if timestamp in (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP)
                                          else None)
            if needed is None or api_version < needed:
                return OffsetAnswer(error_code=ErrorCode.UNSUPPORTED_VERSION)
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return OffsetAnswer(offset=log.log_start_offset, leader_epoch=LEADER_EPOCH)
        read_committed = isolation_level == READ_COMMITTED and api_version >= 2
        last_fetchable = log.last_stable_offset if read_committed else log.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            return OffsetAnswer(offset=last_fetchable, leader_epoch=LEADER_EPOCH)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return OffsetAnswer()
        self.metrics.time_index_lookup()
        if timestamp == MAX_TIMESTAMP:
            found = log.max_timestamp_offset()
        else:
            found = log.fetch_offset_by_timestamp(timestamp, probe=probe)
        if found is None or found.offset >= last_fetchable:
            return OffsetAnswer()
        epoch = found.leader_epoch if found.leader_epoch is not None and found.leader_epoch >= 0 else -1
        return OffsetAnswer(timestamp=found.timestamp_ms, offset=found.offset, leader_epoch=epoch)

    # -- DeleteRecords, OffsetForLeaderEpoch, DescribeProducers ------------------------------------
    def delete_records(self, topic: str, partition: int, offset: int) -> DeleteRecordsAnswer:
        """One partition of DeleteRecords (Kafka ``ReplicaManager.deleteRecords``): raise the log
        start offset to ``offset`` (-1: the high watermark).

        UNKNOWN_TOPIC_OR_PARTITION (3) for a partition that does not exist;
        INVALID_TOPIC_EXCEPTION (17) for an internal topic (its records are the coordinators'
        state); OFFSET_OUT_OF_RANGE (1) outside ``[0, high watermark]`` (storage's rule,
        ``PartitionLog.delete_records``); a storage error's code (a closed log).
        """
        log = self.log_for(topic, partition)
        if log is None:
            return DeleteRecordsAnswer(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if topic in INTERNAL_TOPICS:
            return DeleteRecordsAnswer(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION)
        try:
            low_watermark = log.delete_records(offset)
        except se.StorageError as exc:
            code = error_code_for(exc)
            logger.info("delete_records_rejected", topic=topic, partition=partition, offset=offset,
                        error=code.name, reason=str(exc))
            return DeleteRecordsAnswer(error_code=code)
        logger.info("records_deleted", topic=topic, partition=partition, log_start_offset=low_watermark)
        return DeleteRecordsAnswer(low_watermark=low_watermark)

    def offset_for_leader_epoch(self, topic: str, partition: int, leader_epoch: int,
                                current_leader_epoch: int = -1) -> EpochEndOffset:
        """One partition of OffsetForLeaderEpoch (Kafka ``Partition.lastOffsetForLeaderEpoch``).

        This node has led every partition at epoch 0 since its creation, so epoch 0 (or any
        earlier one asked for) ends at the log end offset, and a later epoch is UNDEFINED
        (-1, -1). The current leader epoch is checked as for Fetch and ListOffsets: a newer one
        gives UNKNOWN_LEADER_EPOCH (74).
        """
        log = self.log_for(topic, partition)
        if log is None:
            return EpochEndOffset(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        epoch_error = self._check_leader_epoch(current_leader_epoch)
        if epoch_error:
            return EpochEndOffset(error_code=epoch_error)
        if leader_epoch <= LEADER_EPOCH:
            return EpochEndOffset(leader_epoch=LEADER_EPOCH, end_offset=log.log_end_offset)
        return EpochEndOffset()

    def describe_producers(self, topic: str, partition: int) -> ProducersAnswer:
        """One partition of DescribeProducers (Kafka ``ReplicaManager.activeProducerState``): every
        producer the partition's state knows, by producer id (``PartitionLog.describe_producers``).

        UNKNOWN_TOPIC_OR_PARTITION (3); KAFKA_STORAGE_ERROR (56), with the reason as the message,
        when the producer state cannot be read.
        """
        log = self.log_for(topic, partition)
        if log is None:
            return ProducersAnswer(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            producers = log.describe_producers()
        except OSError as exc:
            logger.error("describe_producers_io_error", topic=topic, partition=partition, error=str(exc))
            return ProducersAnswer(error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(exc))
        return ProducersAnswer(producers=producers)

    # -- Produce's request-level checks ---------------------------------------------------------------
    @staticmethod
    def produce_records_error(records, api_version: int) -> tuple[int, str | None]:
        """Kafka ``ProduceRequest.validateRecords`` for one partition's ``records``: from Produce v3
        exactly one magic-2 batch holding records, else INVALID_RECORD (87); zstd only from v7,
        else UNSUPPORTED_COMPRESSION_TYPE (76). ``(error code, message)``, ``(NONE, None)`` when
        the records pass (the append validates the rest)."""
        if api_version < 3:
            return ErrorCode.NONE, None
        header = peek_first_batch(records)
        if header is None:
            return ErrorCode.INVALID_RECORD, "Produce v3+ needs one record batch of magic 2"
        if header.magic != MAGIC_V2:
            return ErrorCode.INVALID_RECORD, f"Produce v{api_version} carries magic {header.magic}; magic 2 is required"
        if header.entry_bytes != len(records):
            return ErrorCode.INVALID_RECORD, "Produce v3+ needs exactly one record batch per partition"
        if header.record_count <= 0:
            return ErrorCode.INVALID_RECORD, "the record batch holds no records"
        if header.compression == ZSTD and api_version < 7:
            return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs Produce v7 or later"
        return ErrorCode.NONE, None

    @staticmethod
    def carries_transactional_batch(partition_records, api_version: int) -> bool:
        """Kafka ``ProduceRequest.hasTransactionalRecords``: whether any of ``partition_records``
        (one records buffer per partition of a Produce, v3+: one magic-2 batch each) is a
        transactional batch. Always False before v3."""
        if api_version < 3:
            return False
        for records in partition_records:
            if first_batch_is_transactional(records):
                return True
        return False

    # -- periodic --------------------------------------------------------------------------------
    async def write_checkpoints(self, **which) -> None:
        """Checkpoint files (``recovery_points``/``log_start_offsets``): read on the loop, written on
        the scheduler."""
        logs = self.logs
        for path, entries in logs.checkpoint_contents(**which):
            await self._run(logs.write_checkpoint, path, entries)

    async def delete_dropped_segments(self) -> int:
        """Rename the segments retention dropped to ``.deleted``, on the scheduler, once the log
        start offsets they follow are checkpointed; their unlinks come after
        ``file.delete.delay.ms`` (the server's housekeeping). Number of segments renamed."""
        logs = self.logs
        jobs = logs.take_rename_jobs()
        if not jobs:
            return 0
        try:
            await self.write_checkpoints(recovery_points=False, log_start_offsets=True)
        except OSError as exc:
            logger.error("log_start_offset_checkpoint_failed", error=str(exc))
            for _tp, job in jobs:
                job.handed_over = False   # taken again by the next pass, after a checkpoint that succeeds
            return 0
        if self.scheduler is None:
            _run_renames(jobs)
        else:
            await self.scheduler.run_all(_run_renames, jobs)
        for tp, job in jobs:
            logs.renamed(tp, job)
        return sum(len(job.segments) for _tp, job in jobs)

    async def run_retention(self) -> None:
        logs = self.logs
        waiting = self.open_logs(logs.all_partitions())
        if waiting is not None:
            await waiting
        groups = self.groups
        now = self.now_ms()
        holders: dict[tuple[str, int], tuple[str | None, int | None]] = {}

        def consumed_upto(topic: str, partition: int):
            if groups is None:
                return None
            log = logs.get_log(topic, partition)
            if log is None:
                return None
            try:
                answer = groups.consumed_upto(topic, partition, log.log_start_offset)
            except Exception:
                logger.exception("consumed_upto_failed", topic=topic, partition=partition)
                return None
            holders[(topic, partition)] = (answer.holder_group, answer.offset)
            return answer.offset

        outcomes = logs.run_retention(now, consumed_upto)
        await self.delete_dropped_segments()
        held_now: set[tuple[str, int]] = set()
        for outcome in outcomes:
            self._report_retention(outcome, holders, held_now)
        # A hold is logged when it starts or changes, and once when it ends (not on every pass).
        previous = self._consumed_holds
        for key in [k for k in previous if k not in held_now]:
            base_offset, group = previous.pop(key)
            if logs.topic(key[0]) is not None:
                logger.info("consumed_retention_released", topic=key[0], partition=key[1], base_offset=base_offset,
                            group=group)

    def _report_retention(self, outcome, holders, held_now: set) -> None:
        metrics = self.metrics
        topic, partition = outcome.topic, outcome.partition
        for seg in outcome.deleted:
            metrics.retention_deleted_segments.labels(topic, str(partition), seg.reason).inc()
        previous = self._consumed_holds
        for hold in outcome.held:
            if hold.reason == "not_consumed":
                group, offset = holders.get((topic, partition), (None, None))
                metrics.consumed_retention_holds.labels(topic, str(partition), group or "?").inc()
                held_now.add((topic, partition))
                if previous.get((topic, partition)) != (hold.base_offset, group):
                    previous[(topic, partition)] = (hold.base_offset, group)
                    logger.info("consumed_retention_held", topic=topic, partition=partition,
                                base_offset=hold.base_offset, last_offset=hold.last_offset, group=group,
                                committed_offset=offset)

    async def flush_due(self, *, time_check: bool = True) -> None:
        """Flush what ``flush.messages``, a past roll or (``time_check``) ``flush.ms`` asks for."""
        now = self.now_ms()
        for topic, partition, log in self.logs.open_logs():
            job = log.maybe_flush_due(now, time_check=time_check)
            if job is not None:
                await self._flush_threads.run(job)
                log.mark_flushed(job)

    async def close(self) -> None:
        await self.log_mover.close()
        for appender in list(self._appenders.values()):
            await appender.wait_idle()
        if self._owns_writers:
            self._writers.close()
        if self._owns_flushers:
            self._flushers.close()


def _run_renames(jobs) -> None:
    """Scheduler thread: the renames of a slice of ``(partition, SegmentRename)`` jobs."""
    for _tp, job in jobs:
        job.run()
