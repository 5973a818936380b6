"""Committed offsets and group metadata, kept in memory and made durable in ``__consumer_offsets``.

Storage
-------
Every change is a record of the internal topic ``__consumer_offsets`` (one partition,
created through the ``LogManager`` at start-up when missing, flagged internal in
Metadata) in Kafka's own key/value schemas (:mod:`broker.groups.schema`):
an OffsetCommit key + value per committed partition, a GroupMetadata key + value per
stored generation, and a null value (tombstone) for a deleted offset or group. The
topic uses ``cleanup.policy=delete`` with ``retention.ms=-1`` and
``retention.bytes=-1``: nothing is ever removed by age or size, only by snapshots.

Invariants
----------
* **Acknowledged means durable.** :meth:`OffsetStore.commit` appends synchronously
  (so concurrent commits land in log order) and applies the change to the in-memory
  map at once; the caller then awaits :meth:`OffsetStore.durable` (fsync through the
  group-commit flusher) before it answers the client. A commit is therefore visible
  to OffsetFetch a few milliseconds before it is acknowledged, never after; Kafka
  shows it after the (unsynced) append, so this is strictly stronger.
* **Replay rebuilds the state.** :meth:`OffsetStore.load` reads the log from its log
  start offset to its end; the last value per key wins and a tombstone removes the
  key. An undecodable record is skipped with a warning (it cannot be a commit that
  was acknowledged: those were written by this module).
* **Bounded.** After an append, when the log holds more than
  ``max(snapshot_min_records, 2 x live records)`` records, the whole live state is
  appended again (a snapshot) and, once that is durable, ``delete_records`` moves the
  log start offset to the snapshot's first offset; retention then deletes the
  segments below it. Replaying from the new start sees the snapshot first, then
  every later change, so the rebuilt state is the same. A crash between the snapshot
  and the ``delete_records`` only leaves redundant records.
* **Consumer-group records are kept as bytes.** Record types 3-8 and 16 (KIP-848 groups,
  :mod:`broker.groups.modern.records`) are appended by :meth:`OffsetStore.append_coordinator_records`,
  decoded on load and handed, in log order, to the ``replay_modern`` hook (none: ignored);
  share-group records (types 9-15, :mod:`broker.groups.share.records`) likewise, to ``replay_share``.
  The store keeps the live ones (the latest value per key, a tombstone drops it) as bytes,
  so that a snapshot writes them again: their meaning is the group coordinator's, the
  duty not to lose them is this store's. A snapshot writes values only, and a value
  record creates its group and member when missing, so any order of them replays.

Transactional offsets (TxnOffsetCommit, KIP-98/KIP-447)
--------------------------------------------------------
A transactional commit is written as Kafka writes it: the same OffsetCommit records in
a *transactional* batch carrying the producer id and epoch (base sequence -1, appended
with ``AppendOrigin.COORDINATOR`` as every write of this store, so the partition's
producer state checks the epoch: an older one is INVALID_PRODUCER_EPOCH). Its offsets stay
**pending** (per producer id, then group) and are neither fetched nor counted by consumed retention until the
transaction coordinator writes the COMMIT marker into this partition
(:meth:`OffsetStore.complete_txn`): then each pending offset replaces the committed
one unless a newer record (a higher log offset) already did, as Kafka's
``GroupMetadata.completePendingTxnOffsetCommit``; an ABORT marker drops them. Replay
does the same from the log: records of a transactional batch are pending until a
control batch of their producer id decides them. No snapshot is written while a
transactional commit is undecided (so a snapshot's copies never look newer than a
pending commit on replay), and none trims the log past a pending record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, NamedTuple, Protocol

import structlog

from sundial.records.builder import SimpleRecord, build_batch
from sundial.records.control import read_end_txn_marker
from sundial.records.framing import iter_records
from sundial.records.layout import CONTROL_TYPE_COMMIT, LOG_OVERHEAD, MAGIC_V2, RECORD_BATCH_OVERHEAD
from sundial.storage.origin import AppendOrigin

from ..flusher import PartitionFlushers
from ..topics import OFFSETS_TOPIC
from .modern.records import CoordinatorRecord, decode_record, is_consumer_group_key
from .share.records import ShareRecord, decode_record as decode_share_record, is_share_group_key
from .schema import (
    GroupValue,
    OffsetKey,
    OffsetValue,
    SchemaError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)

logger = structlog.get_logger(__name__)

#: Records per appended batch when writing a snapshot (batches are also cut by size).
SNAPSHOT_BATCH_RECORDS = 500
#: Bytes a v2 batch adds around its records, and a bound on one record's own framing.
BATCH_OVERHEAD_BYTES = RECORD_BATCH_OVERHEAD + LOG_OVERHEAD
RECORD_OVERHEAD_BYTES = 24
DEFAULT_SNAPSHOT_MIN_RECORDS = 10_000

TopicPartition = tuple[str, int]

#: What a replayed record is: plain, in a transactional batch, or a COMMIT/ABORT marker.
PLAIN, TXN_DATA, TXN_COMMIT, TXN_ABORT = 0, 1, 2, 3


class ReplayRecord(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None
    producer_id: int = -1
    kind: int = PLAIN


@dataclass(slots=True)
class CommittedOffset:
    """One committed offset (Kafka ``OffsetAndMetadata`` + commit record metadata)."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int = -1  # -1: none; set only by OffsetCommit v2-v4 retention_time_ms

    def to_value(self) -> OffsetValue:
        return OffsetValue(self.offset, self.leader_epoch, self.metadata, self.commit_timestamp_ms,
                           self.expire_timestamp_ms)

    @classmethod
    def from_value(cls, v: OffsetValue) -> "CommittedOffset":
        return cls(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp_ms, v.expire_timestamp_ms)


class OffsetsLog(Protocol):
    """What the store needs of the log under it."""

    def replay(self) -> Iterator[ReplayRecord]:
        """Every record from the log start offset to the end, in offset order."""

    def append(self, records: list[tuple[bytes, bytes | None]], now_ms: int,
               producer: tuple[int, int] | None = None) -> int:
        """Append one batch synchronously (transactional for ``producer=(id, epoch)``); returns its
        last offset (raises on failure)."""

    async def wait_durable(self, last_offset: int) -> None:
        """Return once every offset <= last_offset is on disk."""

    def record_count(self) -> int:
        """Log end offset minus log start offset."""

    def delete_records_before(self, offset: int) -> None:
        """Move the log start offset up to ``offset``."""

    def max_batch_bytes(self) -> int:
        """Largest batch one append may carry (max.message.bytes and segment.bytes)."""

    @property
    def log_end_offset(self) -> int: ...


class MemoryOffsetsLog:
    """An in-memory OffsetsLog (unit tests and the coordinator micro-benchmark).

    ``durable_offset`` models the fsync point: :meth:`crash` drops everything above it.
    """

    def __init__(self) -> None:
        self.entries: list[ReplayRecord] = []
        self.log_start_offset = 0
        self._next = 0
        self.durable_upto = 0  # offsets below are durable
        self.fail_next_append: Exception | None = None

    @property
    def log_end_offset(self) -> int:
        return self._next

    def replay(self):
        for rec in self.entries:
            if rec.offset >= self.log_start_offset:
                yield rec

    def append(self, records, now_ms, producer=None):
        if self.fail_next_append is not None:
            exc, self.fail_next_append = self.fail_next_append, None
            raise exc
        pid, kind = (producer[0], TXN_DATA) if producer is not None else (-1, PLAIN)
        for key, value in records:
            self.entries.append(ReplayRecord(self._next, key, value, pid, kind))
            self._next += 1
        return self._next - 1

    def append_marker(self, producer_id: int, commit: bool) -> None:
        """A COMMIT/ABORT marker (what the transaction coordinator writes)."""
        self.entries.append(ReplayRecord(self._next, None, None, producer_id, TXN_COMMIT if commit else TXN_ABORT))
        self._next += 1

    async def wait_durable(self, last_offset):
        self.durable_upto = max(self.durable_upto, last_offset + 1)

    def record_count(self):
        return self._next - self.log_start_offset

    def delete_records_before(self, offset):
        self.log_start_offset = max(self.log_start_offset, offset)
        self.entries = [e for e in self.entries if e.offset >= self.log_start_offset]

    def max_batch_bytes(self):
        return 1 << 30

    def crash(self) -> None:
        """Lose whatever was not made durable (kill -9 before the fsync)."""
        self.entries = [e for e in self.entries if e[0] < self.durable_upto]
        self._next = max(self.durable_upto, self.log_start_offset)


class PartitionOffsetsLog:
    """OffsetsLog over partition 0 of ``__consumer_offsets`` in Sundial's storage (or of another
    internal topic of coordinator records: ``topic``, e.g. ``__share_group_state``).

    ``flushers`` is the broker's one flusher per partition (:class:`broker.flusher.PartitionFlushers`,
    the ReplicaManager's), so this log's writes and the transaction markers written to it share
    one durability path; None: flushers of its own on one fsync thread (a store used without a
    ReplicaManager, whose writes wait for their fsync one at a time).
    """

    def __init__(self, logs, *, now_ms: Callable[[], int], read_chunk_bytes: int = 4 * 1024 * 1024,
                 topic: str = OFFSETS_TOPIC, flushers: PartitionFlushers | None = None) -> None:
        self._logs = logs
        self._now_ms = now_ms
        self._read_chunk_bytes = read_chunk_bytes
        self._topic = topic
        self._flushers = flushers if flushers is not None else PartitionFlushers()

    @staticmethod
    def topic_overrides(config) -> dict[str, str]:
        return {
            "cleanup.policy": "delete",
            "retention.ms": "-1",
            "retention.bytes": "-1",
            "segment.bytes": str(config.offsets.topic_segment_bytes),
            "message.timestamp.type": "CreateTime",
            "message.format.version": "3.0-IV1",  # record batches (v2) whatever the broker default
        }

    @classmethod
    def open(cls, logs, config, *, now_ms: Callable[[], int],
             flushers: PartitionFlushers | None = None) -> "PartitionOffsetsLog":
        if logs.topic(OFFSETS_TOPIC) is None:
            logs.create_topic(OFFSETS_TOPIC, 1, cls.topic_overrides(config))
            logger.info("offsets_topic_created", topic=OFFSETS_TOPIC, partitions=1)
        return cls(logs, now_ms=now_ms, flushers=flushers)

    @property
    def log(self):
        log = self._logs.get_log(self._topic, 0)
        if log is None:
            raise RuntimeError(f"{self._topic}-0 is missing")
        return log

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def record_count(self) -> int:
        log = self.log
        return log.log_end_offset - log.log_start_offset

    def replay(self):
        log = self.log
        start = log.log_start_offset
        for view, batch in log.batches_from(start, self._read_chunk_bytes):
            if view.magic >= 2 and view.is_control:
                marker = read_end_txn_marker(view)
                if marker is not None:
                    kind = TXN_COMMIT if marker.control_type == CONTROL_TYPE_COMMIT else TXN_ABORT
                    yield ReplayRecord(view.base_offset, None, None, view.producer_id, kind)
                continue
            txn = view.magic >= 2 and view.is_transactional
            for rec in iter_records(batch):
                if rec.offset >= start:
                    yield ReplayRecord(rec.offset, rec.key, rec.value, view.producer_id if txn else -1,
                                       TXN_DATA if txn else PLAIN)

    def append(self, records, now_ms, producer=None):
        simple = [SimpleRecord(now_ms, key, value) for key, value in records]
        if producer is None:
            batch = build_batch(MAGIC_V2, simple)
        else:
            batch = build_batch(MAGIC_V2, simple, producer_id=producer[0], producer_epoch=producer[1],
                                is_transactional=True)
        return self.log.append(batch, now_ms=now_ms, origin=AppendOrigin.COORDINATOR).last_offset

    async def wait_durable(self, last_offset):
        await self._flushers.wait_flushed(self._topic, 0, self.log, last_offset)

    def delete_records_before(self, offset):
        self.log.delete_records(offset)

    def max_batch_bytes(self):
        config = self.log.config
        return min(config.max_message_bytes, config.segment_bytes)


class OffsetStore:
    """Committed offsets per group, and the last metadata record per group, over an OffsetsLog."""

    def __init__(self, log: OffsetsLog, *, snapshot_min_records: int = DEFAULT_SNAPSHOT_MIN_RECORDS,
                 replay_modern: Callable[[CoordinatorRecord], None] | None = None,
                 replay_share: Callable[[ShareRecord], None] | None = None) -> None:
        self.log = log
        self.snapshot_min_records = snapshot_min_records
        #: Called by :meth:`load` with each consumer-group record (types 3-8, 16); None ignores them.
        self.replay_modern = replay_modern
        #: Called by :meth:`load` with each share-group record (types 9-15); None ignores them.
        self.replay_share = replay_share
        #: The live consumer-group records: key bytes -> value bytes (tombstoned keys removed).
        self.coordinator_records: dict[bytes, bytes] = {}
        self.offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self.group_values: dict[str, GroupValue] = {}
        #: Log offset of the record each committed offset came from (for pending-commit ordering).
        self.applied_at: dict[tuple[str, TopicPartition], int] = {}
        #: Transactional commits not decided yet: producer id -> group -> partition -> (offset, log offset).
        self.pending_txn: dict[int, dict[str, dict[TopicPartition, tuple[CommittedOffset, int]]]] = {}
        #: First log offset of each producer's undecided records (snapshots never trim past it).
        self.pending_first_offset: dict[int, int] = {}
        self._snapshot_running = False
        self.snapshots = 0
        self.version = 0  # bumped on every change (cache key for consumed-retention answers)

    # -- queries -----------------------------------------------------------------------------
    def offsets_of(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        return self.offsets.get(group_id, {})

    def has_offsets(self, group_id: str) -> bool:
        return bool(self.offsets.get(group_id))

    def live_records(self) -> int:
        return sum(len(v) for v in self.offsets.values()) + len(self.group_values) + len(self.coordinator_records)

    # -- load --------------------------------------------------------------------------------
    def load(self, progress: Callable[[int], None] | None = None) -> None:
        self.offsets.clear()
        self.group_values.clear()
        self.coordinator_records.clear()
        self.applied_at.clear()
        self.pending_txn.clear()
        self.pending_first_offset.clear()
        count = skipped = modern = 0
        # The record families of the consumer-protocol and share groups: (is its key, decode, replay hook).
        families = ((is_consumer_group_key, decode_record, self.replay_modern),
                    (is_share_group_key, decode_share_record, self.replay_share))
        for rec in self.log.replay():
            count += 1
            if progress is not None and count % 100_000 == 0:
                progress(count)
            if rec.kind in (TXN_COMMIT, TXN_ABORT):
                self.complete_txn(rec.producer_id, rec.kind == TXN_COMMIT)
                continue
            key_bytes, value_bytes = rec.key, rec.value
            try:
                family = next((f for f in families if f[0](key_bytes)), None)
                if family is not None:
                    _, decode, replay = family
                    modern += 1
                    record = decode(key_bytes, value_bytes)
                    self._keep_coordinator_record(bytes(key_bytes), value_bytes)
                    if replay is not None:
                        replay(record)
                    continue
                key = decode_key(key_bytes)
                if isinstance(key, OffsetKey):
                    tp = (key.topic, key.partition)
                    if rec.kind == TXN_DATA:
                        if value_bytes is not None:
                            value = CommittedOffset.from_value(decode_offset_value(value_bytes))
                            self._add_pending(rec.producer_id, key.group, {tp: value}, rec.offset)
                    elif value_bytes is None:
                        group = self.offsets.get(key.group)
                        if group is not None:
                            group.pop(tp, None)
                            if not group:
                                del self.offsets[key.group]
                        self.applied_at.pop((key.group, tp), None)
                    else:
                        value = decode_offset_value(value_bytes)
                        self.offsets.setdefault(key.group, {})[tp] = CommittedOffset.from_value(value)
                        self.applied_at[(key.group, tp)] = rec.offset
                else:
                    if value_bytes is None:
                        self.group_values.pop(key.group, None)
                    else:
                        self.group_values[key.group] = decode_group_value(value_bytes)
            except SchemaError as exc:
                skipped += 1
                logger.warning("offsets_record_skipped", topic=OFFSETS_TOPIC, reason=str(exc))
        self.version += 1
        logger.info("offsets_loaded", topic=OFFSETS_TOPIC, records=count, skipped=skipped,
                    consumer_group_records=modern, groups=len(set(self.offsets) | set(self.group_values)),
                    offsets=sum(len(v) for v in self.offsets.values()))

    # -- changes (each appends synchronously and returns the last log offset) -------------------
    def append_coordinator_records(self, records: list[tuple[bytes, bytes | None]], now_ms: int) -> int:
        """Append consumer-group records (encoded keys and values, None a tombstone), in order."""
        last = self.log.append(records, now_ms)
        for key, value in records:
            self._keep_coordinator_record(key, value)
        self.version += 1
        return last

    def _keep_coordinator_record(self, key: bytes, value) -> None:
        if value is None:
            self.coordinator_records.pop(key, None)
        else:
            self.coordinator_records[key] = bytes(value)

    def commit(self, group_id: str, entries: dict[TopicPartition, CommittedOffset], now_ms: int) -> int:
        records = [(encode_offset_key(group_id, t, p), encode_offset_value(c.to_value()))
                   for (t, p), c in entries.items()]
        last = self.log.append(records, now_ms)
        self.offsets.setdefault(group_id, {}).update(entries)
        for tp in entries:
            self.applied_at[(group_id, tp)] = last
        self.version += 1
        return last

    # -- transactional offsets ------------------------------------------------------------------
    def _add_pending(self, producer_id: int, group_id: str, entries: dict[TopicPartition, CommittedOffset],
                     log_offset: int) -> None:
        group = self.pending_txn.setdefault(producer_id, {}).setdefault(group_id, {})
        for tp, c in entries.items():
            group[tp] = (c, log_offset)
        self.pending_first_offset.setdefault(producer_id, log_offset)

    def commit_transactional(self, group_id: str, entries: dict[TopicPartition, CommittedOffset],
                             producer_id: int, producer_epoch: int, now_ms: int) -> int:
        """TxnOffsetCommit: append a transactional batch; the offsets stay pending (see the module doc)."""
        records = [(encode_offset_key(group_id, t, p), encode_offset_value(c.to_value()))
                   for (t, p), c in entries.items()]
        last = self.log.append(records, now_ms, producer=(producer_id, producer_epoch))
        self._add_pending(producer_id, group_id, entries, last)
        return last

    def complete_txn(self, producer_id: int, commit: bool) -> int:
        """A COMMIT/ABORT marker for ``producer_id``: materialise or drop its pending offsets; how many."""
        groups = self.pending_txn.pop(producer_id, None)
        self.pending_first_offset.pop(producer_id, None)
        if not groups or not commit:
            return 0
        applied = 0
        for group_id, entries in groups.items():
            for tp, (c, log_offset) in entries.items():
                if self.applied_at.get((group_id, tp), -1) < log_offset:
                    self.offsets.setdefault(group_id, {})[tp] = c
                    self.applied_at[(group_id, tp)] = log_offset
                    applied += 1
        self.version += 1
        return applied

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions of the group with an undecided transactional commit (OffsetFetch require_stable)."""
        out: set[TopicPartition] = set()
        for groups in self.pending_txn.values():
            out.update(groups.get(group_id, ()))
        return out

    def has_pending(self, group_id: str) -> bool:
        return any(group_id in groups for groups in self.pending_txn.values())

    def store_group(self, group_id: str, value: GroupValue, now_ms: int) -> int:
        last = self.log.append([(encode_group_key(group_id), encode_group_value(value))], now_ms)
        self.group_values[group_id] = value
        self.version += 1
        return last

    def delete_group_metadata(self, group_id: str, now_ms: int) -> int:
        """A tombstone for the group's classic metadata record only (its offsets stay)."""
        last = self.log.append([(encode_group_key(group_id), None)], now_ms)
        self.group_values.pop(group_id, None)
        self.version += 1
        return last

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition], now_ms: int) -> int | None:
        """Tombstones for ``partitions`` of the group that have a committed offset."""
        group = self.offsets.get(group_id, {})
        present = [tp for tp in partitions if tp in group]
        if not present:
            return None
        last = self.log.append([(encode_offset_key(group_id, t, p), None) for t, p in present], now_ms)
        for tp in present:
            group.pop(tp, None)
            self.applied_at.pop((group_id, tp), None)
        if not group:
            self.offsets.pop(group_id, None)
        self.version += 1
        return last

    def delete_group(self, group_id: str, now_ms: int) -> int | None:
        """Tombstones for every offset of the group and for its metadata record."""
        records = [(encode_offset_key(group_id, t, p), None) for t, p in self.offsets.get(group_id, {})]
        if group_id in self.group_values:
            records.append((encode_group_key(group_id), None))
        if not records:
            return None
        last = self.log.append(records, now_ms)
        for tp in self.offsets.pop(group_id, {}):
            self.applied_at.pop((group_id, tp), None)
        self.group_values.pop(group_id, None)
        self.version += 1
        return last

    async def durable(self, last_offset: int | None) -> None:
        if last_offset is not None and last_offset >= 0:
            await self.log.wait_durable(last_offset)

    # -- snapshots ----------------------------------------------------------------------------
    def snapshot_due(self) -> bool:
        if self._snapshot_running or self.pending_txn:
            return False  # a snapshot waits until no transactional commit is undecided (see the module doc)
        return self.log.record_count() > max(self.snapshot_min_records, 2 * self.live_records())

    def write_snapshot(self, now_ms: int) -> tuple[int, int]:
        """Append the live state; returns (first offset of the snapshot, last offset written)."""
        start = self.log.log_end_offset
        budget = self.log.max_batch_bytes() - BATCH_OVERHEAD_BYTES
        batch: list[tuple[bytes, bytes | None]] = []
        batch_bytes = 0
        last = start - 1

        def records():
            yield from self.coordinator_records.items()
            for group_id, value in self.group_values.items():
                yield encode_group_key(group_id), encode_group_value(value)
            for group_id, offsets in self.offsets.items():
                for (t, p), c in offsets.items():
                    yield encode_offset_key(group_id, t, p), encode_offset_value(c.to_value())

        for key, value in records():
            size = len(key) + len(value) + RECORD_OVERHEAD_BYTES
            if batch and (len(batch) >= SNAPSHOT_BATCH_RECORDS or batch_bytes + size > budget):
                last = self.log.append(batch, now_ms)
                batch, batch_bytes = [], 0
            batch.append((key, value))
            batch_bytes += size
        if batch:
            last = self.log.append(batch, now_ms)
        return start, last

    async def maybe_snapshot(self, now_ms: int) -> bool:
        """Snapshot and trim when due. Safe to call after every append."""
        if not self.snapshot_due():
            return False
        self._snapshot_running = True
        try:
            before = self.log.record_count()
            start, last = self.write_snapshot(now_ms)
            await self.durable(last)
            trim_to = min([start, *self.pending_first_offset.values()])
            self.log.delete_records_before(trim_to)
            self.snapshots += 1
            logger.info("offsets_snapshot_written", topic=OFFSETS_TOPIC, partition=0, offset=start,
                        records_before=before, live_records=self.live_records())
            return True
        finally:
            self._snapshot_running = False
