"""The share-partition manager: the asyncio shell around the share-partition engines (Kafka 4.2
``SharePartitionManager`` with ``DelayedShareFetch`` and the acquisition-lock timer).

It owns one :class:`~.partition.SharePartition` per (group, topic, partition), created on first
use:

* **Start.** The persisted state (the share-state store's :meth:`load`) when there is one, then
  the log's start offset applied; otherwise the group's ``share.auto.offset.reset`` resolved
  against the log as ListOffsets would (``latest``: the high watermark; ``earliest``: the log
  start offset; ``by_duration:<ISO-8601>``: the first offset whose timestamp is at or after now
  minus the duration, through the time index, or the high watermark when no record is that
  recent), written as the partition's initial state (:meth:`initialize`) before it is used.
* **Fetch.** Reads the log from the engine's next fetch offset, up to the high watermark or,
  with ``share.isolation.level=read_committed``, the last stable offset (an open transaction
  stops the group there), hands the engine the record batches read (base and last offset of
  each, from their headers) and, for read_committed, the offset ranges of aborted transactional
  batches; answers with the acquired ranges and the log bytes of the batches that hold them (a
  slice of the segment file, sent with ``sendfile`` like a Fetch's). Nothing is read on a
  partition whose in-flight window is full (``group.share.partition.max.record.locks``).
* **Long poll.** A fetch that acquired nothing waits, up to ``MaxWaitMs``, for an append to one
  of its partitions (the fetch purgatory that Produce and transaction markers wake) or for
  records made available again in its share-partitions (acknowledged RELEASE, lock expiry,
  member departure), then tries again. ``MinBytes`` is compared with the bytes the fetch could
  read before acquiring, as Kafka's ``DelayedShareFetch.tryComplete`` does.
* **Acquisition locks.** One timer per share-partition, set to the engine's next lock deadline;
  it calls :meth:`~.partition.SharePartition.poll` with the broker clock, so a record is never
  released before its deadline.
* **Durability.** Every :class:`~.state_batch.StateChange` (acknowledgements, lock expiry, member
  release) is written through the store, in the order the engine made them, and an
  acknowledgement is answered only once its write returned. A failed write drops the engine, so
  the next use reloads what the store has (Kafka rolls the transition back instead).
* **Departures.** :meth:`release_member` gives back what a member holds in every partition of its
  group: when it leaves or is fenced (the share-group coordinator's departure listener), when its
  share session closes, and when the connection of its share session drops (Kafka >= 4.1).

The settings are read anew for each call through a ``settings(group_id)`` function returning an
object with ``record_lock_duration_ms``, ``delivery_count_limit``, ``partition_max_record_locks``,
``auto_offset_reset`` and ``isolation_level`` (the share-group coordinator's ``settings``; see
:func:`settings_from_configs` for the equivalent built from the GROUP configs and the broker's
``group.share.*`` keys). The delivery-count limit and the in-flight cap are fixed when a
share-partition is loaded, as in Kafka.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Protocol, Sequence

import structlog

import sundial.storage.errors as se
from sundial.config.group import BY_DURATION, EARLIEST, LATEST, READ_COMMITTED, ShareAutoOffsetReset
from sundial.protocol.errors import ErrorCode
from sundial.records.framing import NotInPageCache, walk_headers
from sundial.records.layout import CONTROL_FLAG_MASK, MAGIC_V2, TRANSACTIONAL_FLAG_MASK
from sundial.records.timestamps import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from sundial.storage.files import FileSlice

from .. import page_cache
from ..errors import error_code_for
from .acknowledgement import AcknowledgementBatch
from .acquisition import AcquiredRecords, AcquireMode, FetchedBatch
from .errors import ShareError
from .partition import SharePartition
from .sessions import ShareSessionCache
from .state_batch import RecordState, ShareStateSnapshot, StateBatch, StateChange, coalesce

logger = structlog.get_logger(__name__)

Key = tuple[str, str, int]          # (group id, topic, partition)
TopicPartition = tuple[str, int]


class ShareStateStore(Protocol):
    """The share coordinator's persistence, as the manager uses it."""

    async def load(self, group_id: str, topic: str, partition: int) -> ShareStateSnapshot | None: ...
    async def write(self, group_id: str, topic: str, partition: int, change: StateChange) -> None: ...
    async def initialize(self, group_id: str, topic: str, partition: int, start_offset: int) -> None: ...


@dataclass(frozen=True, slots=True)
class FetchSettings:
    """What the manager reads of a share group's settings."""

    record_lock_duration_ms: int
    delivery_count_limit: int
    partition_max_record_locks: int
    auto_offset_reset: ShareAutoOffsetReset
    isolation_level: str


def settings_from_configs(group_configs, share_config) -> Callable[[str], FetchSettings]:
    """A group's settings from its GROUP configs (``share.record.lock.duration.ms``,
    ``share.auto.offset.reset``, ``share.isolation.level``) over the broker's ``group.share.*``
    keys (``share_config``: :class:`config.group_coordinator.ShareGroupConfig`)."""

    def settings(group_id: str) -> FetchSettings:
        return FetchSettings(group_configs.share_record_lock_duration_ms(group_id),
                             share_config.delivery_count_limit, share_config.partition_max_record_locks,
                             group_configs.share_auto_offset_reset(group_id),
                             group_configs.share_isolation_level(group_id))

    return settings


def list_offsets_timestamp(reset: ShareAutoOffsetReset, now_ms: int) -> int:
    """The ListOffsets timestamp of a ``share.auto.offset.reset`` value: EARLIEST_TIMESTAMP (-2),
    LATEST_TIMESTAMP (-1), or for by_duration :meth:`ShareAutoOffsetReset.start_ms`."""
    if reset.strategy == EARLIEST:
        return EARLIEST_TIMESTAMP
    if reset.strategy == LATEST:
        return LATEST_TIMESTAMP
    if reset.strategy == BY_DURATION:
        return reset.start_ms(now_ms)
    raise ValueError(f"unknown share.auto.offset.reset {reset!r}")


class MemoryShareStateStore:
    """A share-state store that keeps the state in memory only (tests; a broker without the
    durable store loses the state at restart). Writes merge as the durable store's replay does."""

    def __init__(self) -> None:
        self.states: dict[Key, ShareStateSnapshot] = {}
        self.writes = 0

    async def load(self, group_id: str, topic: str, partition: int) -> ShareStateSnapshot | None:
        return self.states.get((group_id, topic, partition))

    async def initialize(self, group_id: str, topic: str, partition: int, start_offset: int) -> None:
        self.states[(group_id, topic, partition)] = ShareStateSnapshot(0, start_offset)

    async def write(self, group_id: str, topic: str, partition: int, change: StateChange) -> None:
        key = (group_id, topic, partition)
        self.writes += 1
        old = self.states.get(key) or ShareStateSnapshot(0, change.start_offset)
        self.states[key] = merge_state(old, change)

    async def delete(self, group_id: str, topic: str, partition: int) -> None:
        self.states.pop((group_id, topic, partition), None)

    def start_offsets(self, topic: str, partition: int) -> dict[str, int]:
        return {g: s.start_offset for (g, t, p), s in self.states.items() if (t, p) == (topic, partition)}


def merge_state(snapshot: ShareStateSnapshot, change: StateChange) -> ShareStateSnapshot:
    """``snapshot`` with ``change`` applied: its batches replace the offsets they name, then
    everything before the new start offset goes."""
    start = max(change.start_offset, 0) if change.start_offset >= 0 else snapshot.start_offset
    batches: list[StateBatch] = list(snapshot.state_batches)
    for new in change.state_batches:
        kept: list[StateBatch] = []
        for b in batches:
            if b.last_offset < new.first_offset or b.first_offset > new.last_offset:
                kept.append(b)
                continue
            if b.first_offset < new.first_offset:
                kept.append(replace(b, last_offset=new.first_offset - 1))
            if b.last_offset > new.last_offset:
                kept.append(replace(b, first_offset=new.last_offset + 1))
        kept.append(new)
        batches = kept
    trimmed = []
    for b in batches:
        if b.last_offset < start:
            continue
        trimmed.append(replace(b, first_offset=start) if b.first_offset < start else b)
    return ShareStateSnapshot(snapshot.state_epoch, start, coalesce(trimmed))


class ShareStateWriteError(Exception):
    """The store refused or failed a write; the engine was dropped."""


@dataclass(slots=True)
class PartitionFetch:
    """One partition of a ShareFetch answer."""

    error_code: int = ErrorCode.NONE
    records: Any = None                      # None, bytes or a FileSlice
    acquired: tuple[AcquiredRecords, ...] = ()
    size_bytes: int = 0


@dataclass(slots=True)
class _Entry:
    key: Key
    engine: SharePartition
    topic_id: bytes | None
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    timer: asyncio.TimerHandle | None = None
    timer_deadline_ms: int | None = None


@dataclass(slots=True)
class _Read:
    """A log read of one share-partition, before acquisition."""

    entry: _Entry
    fetch_offset: int
    bound: int
    slice: FileSlice
    headers: list
    aborted: list[tuple[int, int]]


class ShareFetchStats:
    """Counters of one share group's fetch path (read by the metrics at scrape time)."""

    __slots__ = ("acquired_records", "redelivered_records", "lock_expired_records", "released_records",
                 "acknowledged_records", "archived_records")

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def count_change(self, change: StateChange, available_as: str = "released_records") -> None:
        """Count the records a change moved: acknowledged, archived, or made available again
        (counted under ``available_as``)."""
        for b in change.state_batches:
            state = b.delivery_state
            if state is RecordState.ACKNOWLEDGED:
                self.acknowledged_records += b.record_count
            elif state is RecordState.ARCHIVED:
                self.archived_records += b.record_count
            elif state is RecordState.AVAILABLE and available_as:
                setattr(self, available_as, getattr(self, available_as) + b.record_count)


class SharePartitionManager:
    """Every share-partition of the broker (see the module docstring)."""

    def __init__(self, *, replica_manager, store: ShareStateStore, settings: Callable[[str], Any],
                 now_ms: Callable[[], int], max_sessions: int = 2000) -> None:
        self._rm = replica_manager
        self._store = store
        self._settings = settings
        self._now_ms = now_ms
        self._entries: dict[Key, _Entry] = {}
        self._loading: dict[Key, asyncio.Future] = {}
        self._release_waiters: dict[Key, set] = {}
        self._waiter_keys: dict[Any, list[Key]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self.sessions = ShareSessionCache(max_sessions)
        #: Counters per share group.
        self.stats: dict[str, ShareFetchStats] = {}
        self.header_warms = 0   # share fetches whose header walk met a range not in the page cache

    @classmethod
    def for_broker(cls, config, *, replica_manager, store: ShareStateStore, groups, group_configs,
                   now_ms: Callable[[], int]) -> SharePartitionManager:
        """The broker's manager: settings from the share-group coordinator (``groups.share``) when
        it is there, else from the GROUP configs and ``group.share.*``; it listens for members
        leaving (their records are released) and groups deleted (their engines dropped)."""
        share_config = config.group_coordinator.share
        shell = getattr(groups, "share", None)
        settings = getattr(shell, "settings", None) or settings_from_configs(group_configs, share_config)
        manager = cls(replica_manager=replica_manager, store=store, settings=settings, now_ms=now_ms,
                      max_sessions=share_config.max_share_sessions)
        if shell is not None:
            shell.add_departure_listener(manager.on_member_departed)
            if hasattr(shell, "add_deletion_listener"):
                shell.add_deletion_listener(manager.forget_group)
        return manager

    # --- views for describe, metrics and the store ----------------------------------------------

    def settings(self, group_id: str):
        """The group's settings as the manager reads them now."""
        return self._settings(group_id)

    def start_offset(self, group_id: str, topic: str, partition: int) -> int | None:
        """The SPSO of a loaded share-partition, None when it is not loaded."""
        entry = self._entries.get((group_id, topic, partition))
        return None if entry is None else entry.engine.start_offset

    def lag(self, group_id: str, topic: str, partition: int) -> int | None:
        """Records not yet delivered to completion (KIP-1226): the high watermark less the SPSO less
        the in-flight records acknowledged or archived; None when not loaded or no log."""
        entry = self._entries.get((group_id, topic, partition))
        log = self._rm.log_for(topic, partition)
        if entry is None or log is None:
            return None
        engine = entry.engine
        return max(0, log.high_watermark - engine.start_offset - engine.delivery_complete_count())

    def group_stats(self, group_id: str) -> ShareFetchStats:
        stats = self.stats.get(group_id)
        if stats is None:
            stats = self.stats[group_id] = ShareFetchStats()
        return stats

    def in_flight_records(self, group_id: str | None = None) -> int:
        return sum(e.engine.in_flight_record_count() for k, e in self._entries.items()
                   if group_id is None or k[0] == group_id)

    def loaded(self) -> list[Key]:
        return list(self._entries)

    def forget(self, group_id: str, topic: str, partition: int) -> None:
        """Drop the engine so the next use reloads from the store (after the share-group offsets
        were altered or deleted). Records acquired in it are delivered again."""
        entry = self._entries.pop((group_id, topic, partition), None)
        if entry is not None:
            self._cancel_timer(entry)
            self._wake((group_id, topic, partition))

    def forget_group(self, group_id: str) -> None:
        """The group was deleted: drop its engines and sessions."""
        for key in [k for k in self._entries if k[0] == group_id]:
            self.forget(*key)
        for session in self.sessions.sessions():
            if session.group_id == group_id:
                self.sessions.remove(group_id, session.member_id)

    # --- loading --------------------------------------------------------------------------------

    async def _entry(self, group_id: str, topic: str, partition: int) -> _Entry | None:
        """The loaded share-partition, loading it first; None when the partition has no log."""
        key = (group_id, topic, partition)
        entry = self._entries.get(key)
        topic_id = self._topic_id(topic)
        if entry is not None:
            if entry.topic_id == topic_id:
                return entry
            self.forget(*key)         # the topic was deleted and made again: a new share-partition
        if topic_id is None or self._rm.log_for(topic, partition) is None:
            return None
        pending = self._loading.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._loading[key] = pending
            try:
                entry = await self._load(key)
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()  # retrieved: waiters get it through await
                raise
            finally:
                self._loading.pop(key, None)
            self._entries[key] = entry
            pending.set_result(entry)
            return entry
        return await asyncio.shield(pending)

    async def _open_logs(self, partitions) -> None:
        """Have the replica manager open the partitions' logs off the loop when it can (no
        suspension when they are open)."""
        opener = getattr(self._rm, "open_logs", None)
        pending = opener(list(partitions)) if opener is not None else None
        if pending is not None:
            await pending

    def _topic_id(self, topic: str) -> bytes | None:
        meta = self._rm.logs.topic(topic)
        return None if meta is None else bytes(meta.topic_id)

    async def _load(self, key: Key) -> _Entry:
        group_id, topic, partition = key
        settings = self._settings(group_id)
        snapshot = await self._store.load(group_id, topic, partition)
        log = self._rm.log_for(topic, partition)
        if log is None:
            raise se.StorageError(f"{topic}-{partition} is gone")
        if snapshot is None or snapshot.start_offset < 0:
            start = self._initial_offset(topic, partition, settings)
            await self._store.initialize(group_id, topic, partition, start)
            engine = SharePartition(start, max_in_flight_records=settings.partition_max_record_locks,
                                    max_delivery_count=settings.delivery_count_limit,
                                    state_epoch=0 if snapshot is None else snapshot.state_epoch)
            logger.info("share_partition_initialized", group=group_id, topic=topic, partition=partition,
                        start_offset=start, auto_offset_reset=str(settings.auto_offset_reset))
        else:
            engine = SharePartition.from_snapshot(snapshot,
                                                  max_in_flight_records=settings.partition_max_record_locks,
                                                  max_delivery_count=settings.delivery_count_limit)
        log = self._rm.log_for(topic, partition)
        if log is not None and log.log_start_offset > engine.start_offset:
            engine.on_log_start_offset(log.log_start_offset)
        return _Entry(key, engine, self._topic_id(topic))

    def _initial_offset(self, topic: str, partition: int, settings) -> int:
        """``share.auto.offset.reset`` resolved against the log (Kafka
        ``SharePartition.startOffsetDuringInitialization``)."""
        log = self._rm.log_for(topic, partition)
        timestamp = list_offsets_timestamp(settings.auto_offset_reset, self._now_ms())
        if timestamp == -2:
            return log.log_start_offset
        if timestamp == -1:
            return log.high_watermark
        answer = self._rm.list_offset(topic, partition, timestamp, api_version=9)
        if answer.error_code != ErrorCode.NONE or answer.offset < 0:
            return log.high_watermark  # no record that recent: from the end
        return answer.offset

    # --- fetch ----------------------------------------------------------------------------------

    async def fetch(self, group_id: str, member_id: str, partitions: Sequence[TopicPartition], *,
                    max_wait_ms: int, min_bytes: int, max_bytes: int, max_records: int, batch_size: int,
                    mode: AcquireMode = AcquireMode.BATCH_OPTIMIZED) -> dict[TopicPartition, PartitionFetch]:
        """Acquire records for ``member_id`` in ``partitions`` (in the order given), waiting up to
        ``max_wait_ms`` for some; one :class:`PartitionFetch` per partition."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, max_wait_ms) / 1000
        await self._open_logs(partitions)
        max_records = max_records if max_records > 0 else 500
        batch_size = batch_size if batch_size > 0 else max_records
        warmed = headers_warmed = False
        while True:
            out: dict[TopicPartition, PartitionFetch] = {}
            entries: list[_Entry] = []
            for topic, partition in partitions:
                try:
                    entry = await self._entry(group_id, topic, partition)
                except ShareStateWriteError:
                    out[(topic, partition)] = PartitionFetch(ErrorCode.UNKNOWN_SERVER_ERROR)
                    continue
                except Exception:
                    logger.exception("share_partition_load_failed", group=group_id, topic=topic,
                                     partition=partition)
                    out[(topic, partition)] = PartitionFetch(ErrorCode.UNKNOWN_SERVER_ERROR)
                    continue
                if entry is None:
                    out[(topic, partition)] = PartitionFetch(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    continue
                entries.append(entry)
            # From here to the answer nothing awaits: the file slices stay valid.
            settings = self._settings(group_id)
            cold = [] if not headers_warmed and self._scheduler() is not None else None
            reads, readable = self._read_all(entries, settings, max_bytes, out, cold)
            if cold:
                # a header walk met a range not in the page cache: read it in off the loop, then
                # read again (a second miss reads as it is, as a Fetch does)
                headers_warmed = True
                self.header_warms += 1
                await self._scheduler().run(page_cache.warm, page_cache.own(cold))
                continue
            if reads and not warmed and await self._warm(reads):
                warmed = True
                continue      # read again: the slices read before the await may be stale
            last_try = loop.time() >= deadline or self._closed
            if reads and (readable >= min_bytes or last_try):
                acquired = self._acquire_all(member_id, reads, settings, max_records, batch_size, mode, out)
                if acquired or last_try:
                    return self._complete(partitions, out)
            elif last_try or not entries:
                return self._complete(partitions, out)
            waiter = self._park(group_id, entries)
            try:
                await waiter.wait(max(0.0, deadline - loop.time()))
            finally:
                self._unpark(waiter)

    @staticmethod
    def _complete(partitions, out) -> dict[TopicPartition, PartitionFetch]:
        for tp in partitions:
            out.setdefault(tp, PartitionFetch())
        return out

    def _read_all(self, entries: list[_Entry], settings, max_bytes: int, out: dict,
                  cold: list[tuple[int, int, int]] | None = None) -> tuple[list[_Read], int]:
        """The reads of ``entries`` within ``max_bytes``. With ``cold`` (a list), their header walks
        probe the page cache, and a partition whose walk met a range not resident is skipped, the
        range appended to ``cold`` (for :func:`page_cache.warm`)."""
        reads: list[_Read] = []
        budget = max_bytes
        total = 0
        read_committed = settings.isolation_level == READ_COMMITTED
        for entry in entries:
            if budget <= 0 and reads:
                break
            try:
                read = self._read(entry, budget, not reads, read_committed, cold)
            except se.StorageError as exc:
                out[entry.key[1:]] = PartitionFetch(error_code_for(exc))
                continue
            if read is None:
                continue
            reads.append(read)
            total += read.slice.size
            budget -= read.slice.size
        return reads, total

    def _scheduler(self):
        return getattr(self._rm, "scheduler", None)

    async def _warm(self, reads: list[_Read]) -> bool:
        """Before anything is acquired: when the bytes read are not all in the page cache, read
        them in on the replica manager's scheduler, so that ``sendfile`` on the loop does not wait
        on the disk (as a Fetch does, :mod:`broker.page_cache`). True when it awaited."""
        scheduler = self._scheduler()
        if scheduler is None:
            return False
        cold = [(r.slice.fd, r.slice.position, r.slice.size) for r in reads
                if not page_cache.cached(r.slice.fd, r.slice.position, r.slice.size)]
        if not cold:
            return False
        await scheduler.run(page_cache.warm, page_cache.own(cold))
        return True

    def _read(self, entry: _Entry, max_bytes: int, min_one: bool, read_committed: bool,
              cold: list[tuple[int, int, int]] | None = None) -> _Read | None:
        _, topic, partition = entry.key
        log = self._rm.log_for(topic, partition)
        if log is None:
            raise se.StorageError(f"{topic}-{partition} is gone")
        engine = entry.engine
        if log.log_start_offset > engine.start_offset:
            engine.on_log_start_offset(log.log_start_offset)
        if not engine.can_acquire_records():
            return None
        offset = engine.next_fetch_offset()
        bound = log.last_stable_offset if read_committed else log.high_watermark
        if offset >= bound:
            return None
        probe = page_cache.cached if cold is not None else None
        try:
            info = log.read(offset, max(max_bytes, 0), min_one_message=min_one, read_committed=read_committed,
                            probe=probe)
        except se.OffsetOutOfRangeError:
            return None
        except NotInPageCache as miss:   # the walk to the fetch offset
            cold.append((miss.fd, miss.position, max(miss.size, page_cache.HEADER_WARM_BYTES)))  # type: ignore
            return None
        size = sum(s.size for s in info.slices)
        if size == 0 or len(info.slices) != 1:
            return None
        piece = info.slices[0]
        end = piece.position + piece.size
        try:
            headers = [h for h in walk_headers(piece.fd, piece.position, end, with_producer=read_committed,
                                               probe=probe)]
        except NotInPageCache as miss:   # the answer's own headers: read the rest of the answer in
            cold.append((miss.fd, miss.position, max(miss.size, end - miss.position)))  # type: ignore
            return None
        if not headers:
            return None
        aborted = _aborted_ranges(headers, info.aborted_transactions or ()) if read_committed else []
        return _Read(entry, offset, bound, piece, headers, aborted)

    def _acquire_all(self, member_id: str, reads: list[_Read], settings, max_records: int, batch_size: int,
                     mode: AcquireMode, out: dict) -> int:
        now = self._now_ms()
        acquired_total = 0
        for read in reads:
            remaining = max_records - acquired_total
            if remaining <= 0:
                break
            engine = read.entry.engine
            fetched = [FetchedBatch(h.first_field, h.last_offset) for h in read.headers]
            try:
                result = engine.acquire(member_id, fetched, fetch_offset=read.fetch_offset, max_records=remaining,
                                        batch_size=batch_size, lock_duration_ms=settings.record_lock_duration_ms,
                                        now_ms=now, mode=mode, aborted=read.aborted,
                                        read_bound_offset=read.bound)
            except ValueError:
                logger.exception("share_acquire_refused_read", key=read.entry.key)
                continue
            if not result.records:
                continue
            acquired_total += result.count
            stats = self.group_stats(read.entry.key[0])
            stats.acquired_records += result.count
            stats.redelivered_records += sum(r.record_count for r in result.records if r.delivery_count > 1)
            self._schedule(read.entry)
            first = result.records[0].first_offset
            last = result.records[-1].last_offset
            start_pos = end_pos = None
            for h in read.headers:
                if h.last_offset < first:
                    continue
                if h.first_field > last:
                    break
                if start_pos is None:
                    start_pos = h.position
                end_pos = h.position + h.size_bytes
            records = FileSlice(read.slice.fd, start_pos, end_pos - start_pos) if start_pos is not None else b""
            size = 0 if start_pos is None else end_pos - start_pos
            out[read.entry.key[1:]] = PartitionFetch(ErrorCode.NONE, records, result.records, size)
        return acquired_total

    # --- acknowledge ----------------------------------------------------------------------------

    async def acknowledge(self, group_id: str, member_id: str, topic: str, partition: int,
                          batches: Sequence[AcknowledgementBatch]) -> int:
        """Apply a member's acknowledgements of one partition and make them durable; the
        partition's error code."""
        try:
            await self._open_logs([(topic, partition)])
            entry = await self._entry(group_id, topic, partition)
        except Exception:
            logger.exception("share_partition_load_failed", group=group_id, topic=topic, partition=partition)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        if entry is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        settings = self._settings(group_id)
        engine = entry.engine
        try:
            change = engine.acknowledge(member_id, batches, now_ms=self._now_ms(),
                                        lock_duration_ms=settings.record_lock_duration_ms)
        except ShareError as exc:
            logger.info("share_acknowledge_refused", group=group_id, member=member_id, topic=topic,
                        partition=partition, error=exc.error_code.name, reason=exc.message)
            return exc.error_code
        self.group_stats(group_id).count_change(change)
        self._after_change(entry, change)
        try:
            await self._write(entry, change)
        except ShareStateWriteError:
            return ErrorCode.UNKNOWN_SERVER_ERROR
        return ErrorCode.NONE

    # --- releases -------------------------------------------------------------------------------

    def release_member(self, group_id: str, member_id: str) -> asyncio.Task | None:
        """Give back everything ``member_id`` holds in its group's share-partitions (departure,
        session close, connection drop); the writes run in a task, returned."""
        now = self._now_ms()
        changes = []
        for key, entry in list(self._entries.items()):
            if key[0] != group_id:
                continue
            change = entry.engine.release_member(member_id, now)
            if change.state_batches:
                self.group_stats(group_id).count_change(change)
                self._after_change(entry, change)
                changes.append((entry, change))
        if not changes:
            return None
        return self._spawn(self._write_all(changes))

    def on_member_departed(self, group_id: str, member_id: str) -> None:
        """The share-group coordinator's departure listener: the member left or was fenced.

        A member with a share session keeps it: a leaving client sends its last acknowledgements
        in the request that closes the session, which may arrive after its leave heartbeat (as
        librdkafka sends them), and the close or the connection drop releases what is left; a
        fenced member's records go back when their locks run out, as in Kafka, where the share
        coordinator does not tell the share-partition leaders of departures. A member without a
        session can acknowledge nothing any more: its records are released at once."""
        if self.sessions.get(group_id, member_id) is None:
            self.release_member(group_id, member_id)

    def connection_closed(self, connection_id: str) -> None:
        """A client connection closed: the share sessions it opened end and their members' records
        are released (Kafka >= 4.1)."""
        for session in self.sessions.close_connection(connection_id):
            logger.info("share_session_connection_closed", group=session.group_id, member=session.member_id)
            self.release_member(session.group_id, session.member_id)

    async def _write_all(self, changes) -> None:
        for entry, change in changes:
            try:
                await self._write(entry, change)
            except ShareStateWriteError:
                pass

    # --- lock timers ------------------------------------------------------------------------------

    def _schedule(self, entry: _Entry) -> None:
        deadline = entry.engine.next_deadline_ms()
        if deadline == entry.timer_deadline_ms and (deadline is None or entry.timer is not None):
            return
        self._cancel_timer(entry)
        if deadline is None or self._closed:
            return
        delay_s = max(0, deadline - self._now_ms()) / 1000
        entry.timer = asyncio.get_running_loop().call_later(delay_s, self._on_timer, entry)
        entry.timer_deadline_ms = deadline

    @staticmethod
    def _cancel_timer(entry: _Entry) -> None:
        if entry.timer is not None:
            entry.timer.cancel()
        entry.timer = None
        entry.timer_deadline_ms = None

    def _on_timer(self, entry: _Entry) -> None:
        entry.timer = None
        entry.timer_deadline_ms = None
        if self._entries.get(entry.key) is not entry:
            return
        if self._topic_id(entry.key[1]) != entry.topic_id:
            self.forget(*entry.key)       # the topic is gone (or made again): nothing to release or write
            return
        result = entry.engine.poll(self._now_ms())
        if result.expired_records:
            stats = self.group_stats(entry.key[0])
            stats.lock_expired_records += result.expired_records
            stats.count_change(result.change, available_as="")
            logger.debug("share_locks_expired", key=entry.key, records=result.expired_records)
        self._after_change(entry, result.change)
        if result.change.state_batches:
            self._spawn(self._write_all([(entry, result.change)]))

    def _after_change(self, entry: _Entry, change: StateChange) -> None:
        """Reset the timer to the next deadline and wake fetches that may now acquire."""
        self._schedule(entry)
        if change.state_batches:
            self._wake(entry.key)

    # --- durability -------------------------------------------------------------------------------

    async def _write(self, entry: _Entry, change: StateChange) -> None:
        async with entry.write_lock:
            if self._topic_id(entry.key[1]) != entry.topic_id:
                # The store finds a share-partition by topic name: a topic deleted and made again
                # must not receive the old one's state.
                if self._entries.get(entry.key) is entry:
                    self.forget(*entry.key)
                raise ShareStateWriteError(f"{entry.key[1]} was deleted")
            try:
                await self._store.write(*entry.key, change)
            except Exception as exc:
                logger.error("share_state_write_failed", key=entry.key, error=repr(exc))
                if self._entries.get(entry.key) is entry:
                    self.forget(*entry.key)
                raise ShareStateWriteError(str(exc)) from exc

    # --- long poll --------------------------------------------------------------------------------

    def _park(self, group_id: str, entries: Iterable[_Entry]):
        entries = list(entries)
        waiter = self._rm.purgatory.park((e.key[1], e.key[2]) for e in entries)
        keys = [e.key for e in entries]
        for key in keys:
            self._release_waiters.setdefault(key, set()).add(waiter)
        self._waiter_keys[waiter] = keys
        return waiter

    def _unpark(self, waiter) -> None:
        self._rm.purgatory.unpark(waiter)
        for key in self._waiter_keys.pop(waiter, ()):
            bucket = self._release_waiters.get(key)
            if bucket is not None:
                bucket.discard(waiter)
                if not bucket:
                    del self._release_waiters[key]

    def _wake(self, key: Key) -> None:
        for waiter in self._release_waiters.get(key, ()):
            waiter.wake()

    # --- life -------------------------------------------------------------------------------------

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        """Stop the timers and let pending state writes finish."""
        self._closed = True
        for entry in self._entries.values():
            self._cancel_timer(entry)
        for waiters in list(self._release_waiters.values()):
            for waiter in list(waiters):
                waiter.end()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _aborted_ranges(headers, aborted_transactions) -> list[tuple[int, int]]:
    """The offset ranges of the aborted transactional data batches among ``headers`` (Kafka's
    walk in ``SharePartition.filterAbortedTransactionalAcquiredRecords``): an aborted transaction
    counts from the batch holding its first offset until its producer's next control batch."""
    pending = sorted(aborted_transactions, key=lambda t: t[1])
    i = 0
    aborting: set[int] = set()
    out: list[tuple[int, int]] = []
    for h in headers:
        while i < len(pending) and pending[i][1] <= h.last_offset:
            aborting.add(pending[i][0])
            i += 1
        if h.magic != MAGIC_V2:
            continue
        if h.attributes & CONTROL_FLAG_MASK:
            aborting.discard(h.producer_id)
            continue
        if h.attributes & TRANSACTIONAL_FLAG_MASK and h.producer_id in aborting:
            out.append((h.first_field, h.last_offset))
    return out
