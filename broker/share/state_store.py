"""The durable state of share-partitions: the share coordinator's persistence (Kafka
``ShareCoordinatorShard`` over ``__share_group_state``).

What is stored
--------------
For each share-partition (group, topic, partition) the state the engine persists
(:class:`~.state_batch.ShareStateSnapshot`: state epoch, start offset (SPSO), state batches) plus
what Kafka keeps beside it: the snapshot epoch, the leader epoch, the creation and last snapshot
times and the delivery-complete count (KIP-1226: the in-flight records from the SPSO on that are
acknowledged or archived, the input of the share lag).

Records
-------
Partition 0 of the internal topic ``__share_group_state`` holds Kafka's records of the share
coordinator, byte for byte (:mod:`.state_records`): a ``ShareSnapshot`` (the whole state of a
share-partition), a ``ShareUpdate`` (the batches one write changed), a tombstone (the state is
deleted). The key names the topic by id, so a topic deleted and created again under the same name
never inherits the old state, and the keys are compaction-friendly (one snapshot key per
share-partition).

Writes and snapshots
--------------------
:meth:`ShareStateStore.write` merges a :class:`~.state_batch.StateChange` into the state as Kafka's
``PersisterStateBatchCombiner`` does (:func:`combine_state_batches`): batches before the new start
offset are dropped, and where batches overlap each offset keeps the batch with the higher delivery
count, then the higher state. The change is written as a ``ShareUpdate`` holding only the changed
batches, or, once ``share.coordinator.snapshot.update.records.per.snapshot`` updates have followed
the share-partition's last snapshot, as a new ``ShareSnapshot`` of the whole merged state (snapshot
epoch + 1). :meth:`~ShareStateStore.initialize` (first use, AlterShareGroupOffsets) always writes a
snapshot with a new state epoch, and drops everything before.

Every write appends synchronously on the event loop (so writes land in call order), applies the
change in memory, then waits for the fsync through the log's group-commit flusher
(``acks=all``): the caller answers its client only when the call returns. A write that is not
durable within ``share.coordinator.write.timeout.ms`` raises :class:`ShareStateWriteError`.

Replay and pruning
------------------
:meth:`~ShareStateStore.start` replays the log on a worker thread (the event loop never waits on
the disk) before the listeners open: a snapshot replaces the share-partition's state, an update is
merged into it as above, a tombstone drops it. Undecodable records are skipped with a warning.

The log is pruned like Kafka's share coordinator (``share.coordinator.state.topic.prune.interval.ms``):
every record before the oldest live share-partition's last snapshot is redundant, and
``delete_records`` moves the log start offset there. A share-partition whose last snapshot is older
than ``share.coordinator.cold.partition.snapshot.interval.ms`` while records follow it gets a new
snapshot (Kafka's cold-partition snapshots), so an idle share-partition does not pin the log.
State of a topic that no longer exists is deleted (tombstones) by the same pass.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Callable, Protocol

import structlog

from sundial.config.share import ShareCoordinatorConfig

from ..coordinator_schema import SchemaError
from ..flusher import PartitionFlushers
from ..groups.offsets import OffsetsLog, PartitionOffsetsLog
from .state_batch import ShareStateSnapshot, StateBatch, StateChange
from .state_records import (NO_LEADER_EPOCH, SHARE_SNAPSHOT_RECORD_TYPE, SHARE_STATE_TOPIC, SHARE_UPDATE_RECORD_TYPE,
                            UNCHANGED_START_OFFSET, ShareSnapshotValue, ShareStateKey, ShareUpdateValue,
                            combine_state_batches, decode_key, decode_value, delivery_complete_count, encode_key,
                            encode_snapshot_value, encode_update_value)

logger = structlog.get_logger(__name__)


class ShareStateWriteError(Exception):
    """A state write failed or was not durable in time (the caller refuses its request)."""


# --- the state of one share-partition ---------------------------------------------------------

@dataclass(slots=True)
class _PartitionState:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]
    create_timestamp_ms: int
    write_timestamp_ms: int
    #: ShareUpdate records since the last ShareSnapshot of this share-partition.
    updates_since_snapshot: int = 0
    #: Log offset of the last ShareSnapshot (pruning keeps everything from the oldest one on).
    snapshot_log_offset: int = -1

    def snapshot(self) -> ShareStateSnapshot:
        return ShareStateSnapshot(self.state_epoch, self.start_offset, self.batches)

    def snapshot_value(self) -> ShareSnapshotValue:
        return ShareSnapshotValue(self.snapshot_epoch, self.state_epoch, self.leader_epoch, self.start_offset,
                                  self.create_timestamp_ms, self.write_timestamp_ms, self.batches,
                                  delivery_complete_count(self.batches))


@dataclass(frozen=True, slots=True)
class SharePartitionSummary:
    """What DescribeShareGroupOffsets reads of one share-partition (Kafka ``ReadShareGroupStateSummary``)."""

    topic_id: bytes
    partition: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int


class TopicIds(Protocol):
    """Topic name <-> id, as the logs know them now."""

    def id_of(self, topic: str) -> bytes | None: ...

    def name_of(self, topic_id: bytes) -> str | None: ...


class LogTopicIds:
    """:class:`TopicIds` over a ``LogManager``."""

    def __init__(self, logs) -> None:
        self._logs = logs

    def id_of(self, topic: str) -> bytes | None:
        meta = self._logs.topic(topic)
        return None if meta is None else meta.topic_id

    def name_of(self, topic_id: bytes) -> str | None:
        meta = self._logs.topic_by_id(topic_id)
        return None if meta is None else meta.name


_Key = tuple[str, bytes, int]  # (group, topic id, partition)


class ShareStateStore:
    """The persisted state of every share-partition, over a log of ``__share_group_state`` records
    (see the module docstring). The share-partition manager reads it when it creates an engine and
    writes every state change through it; the share-offsets admin APIs and consumed-log retention
    read the start offsets."""

    def __init__(self, log: OffsetsLog, topic_ids: TopicIds, *, now_ms: Callable[[], int],
                 settings: ShareCoordinatorConfig = ShareCoordinatorConfig()) -> None:
        self.log = log
        self.topic_ids = topic_ids
        self.now_ms = now_ms
        self.settings = settings
        self._states: dict[_Key, _PartitionState] = {}
        #: (topic id, partition) -> the groups with state for it (what consumed retention asks, per partition).
        self._readers: dict[tuple[bytes, int], set[str]] = {}
        self._loaded = asyncio.Event()
        self._is_loaded = False
        self._maintenance: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()
        #: Bumped on every change (a cache key for readers such as consumed retention).
        self.version = 0
        self.snapshots_written = 0

    # -- construction over Sundial's storage ----------------------------------------------------
    @staticmethod
    def topic_overrides(settings: ShareCoordinatorConfig) -> dict[str, str]:
        """Kafka's ``shareGroupStateTopicConfigs``: delete policy, kept for ever (pruned by this store)."""
        return {
            "cleanup.policy": "delete",
            "retention.ms": "-1",
            "retention.bytes": "-1",
            "segment.bytes": str(settings.state_topic_segment_bytes),
            "message.timestamp.type": "CreateTime",
            "message.format.version": "3.0-IV1",
        }

    @classmethod
    def open(cls, logs, config, *, now_ms: Callable[[], int], flushers: PartitionFlushers | None = None
             ) -> ShareStateStore:
        """The store over partition 0 of ``__share_group_state`` (created when missing); ``flushers``:
        the broker's one flusher per partition (:class:`PartitionOffsetsLog`)."""
        settings = config.share_coordinator
        if logs.topic(SHARE_STATE_TOPIC) is None:
            logs.create_topic(SHARE_STATE_TOPIC, 1, cls.topic_overrides(settings))
            logger.info("share_state_topic_created", topic=SHARE_STATE_TOPIC, partitions=1)
        log = PartitionOffsetsLog(logs, now_ms=now_ms, topic=SHARE_STATE_TOPIC, flushers=flushers)
        return cls(log, LogTopicIds(logs), now_ms=now_ms, settings=settings)

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Replay the log on a worker thread, then prune it periodically."""
        await asyncio.to_thread(self.replay)
        self.mark_loaded()
        if self._maintenance is None and self.settings.state_topic_prune_interval_ms > 0:
            self._maintenance = asyncio.get_running_loop().create_task(self._maintain_forever())

    async def stop(self) -> None:
        if self._background:
            await asyncio.wait(list(self._background), timeout=self.settings.write_timeout_ms / 1000)
        task, self._maintenance = self._maintenance, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def mark_loaded(self) -> None:
        """Serve reads and writes (after :meth:`replay`; :meth:`start` calls both)."""
        self._is_loaded = True
        self._loaded.set()

    async def _wait_loaded(self) -> None:
        if not self._is_loaded:
            await self._loaded.wait()

    def replay(self) -> None:
        """Rebuild the state from the log (runs on a worker thread at start; nothing else uses the
        log meanwhile)."""
        states: dict[_Key, _PartitionState] = {}
        count = skipped = 0
        for rec in self.log.replay():
            if rec.key is None:
                continue  # a control record
            count += 1
            try:
                key = decode_key(rec.key)
                k = (key.group_id, key.topic_id, key.partition)
                if rec.value is None:
                    states.pop(k, None)
                    continue
                value = decode_value(key.record_type, rec.value)
            except SchemaError as exc:
                skipped += 1
                logger.warning("share_state_record_skipped", topic=SHARE_STATE_TOPIC, offset=rec.offset,
                               reason=str(exc))
                continue
            if isinstance(value, ShareSnapshotValue):
                states[k] = _PartitionState(value.snapshot_epoch, value.state_epoch, value.leader_epoch,
                                            value.start_offset, combine_state_batches((), value.state_batches,
                                                                                      value.start_offset),
                                            value.create_timestamp_ms, value.write_timestamp_ms, 0, rec.offset)
            else:
                state = states.get(k)
                if state is None:
                    skipped += 1  # an update without a snapshot before it (Kafka refuses such writes)
                    logger.warning("share_state_update_without_snapshot", topic=SHARE_STATE_TOPIC,
                                   offset=rec.offset, group=key.group_id, partition=key.partition)
                    continue
                _apply_update(state, value)
        self._states = {}
        self._readers = {}
        for key, state in states.items():
            self._put(key, state)
        self.version += 1
        logger.info("share_state_loaded", topic=SHARE_STATE_TOPIC, records=count, skipped=skipped,
                    share_partitions=len(states))

    # -- reads -----------------------------------------------------------------------------------
    def _key(self, group_id: str, topic: str, partition: int) -> _Key | None:
        topic_id = self.topic_ids.id_of(topic)
        return None if topic_id is None else (group_id, topic_id, partition)

    async def load(self, group_id: str, topic: str, partition: int) -> ShareStateSnapshot | None:
        """The persisted state of the share-partition, None when it has none (never initialized,
        deleted, or its topic is gone)."""
        await self._wait_loaded()
        return self.get(group_id, topic, partition)

    def get(self, group_id: str, topic: str, partition: int) -> ShareStateSnapshot | None:
        key = self._key(group_id, topic, partition)
        state = None if key is None else self._states.get(key)
        return None if state is None else state.snapshot()

    def start_offsets(self, topic: str, partition: int) -> dict[str, int]:
        """group -> SPSO of every share group with state for the partition."""
        topic_id = self.topic_ids.id_of(topic)
        if topic_id is None:
            return {}
        groups = self._readers.get((topic_id, partition), ())
        return {g: self._states[(g, topic_id, partition)].start_offset for g in groups}

    def _put(self, key: _Key, state: _PartitionState) -> None:
        self._states[key] = state
        self._readers.setdefault((key[1], key[2]), set()).add(key[0])

    def _drop(self, key: _Key) -> None:
        if self._states.pop(key, None) is not None:
            readers = self._readers.get((key[1], key[2]))
            if readers is not None:
                readers.discard(key[0])
                if not readers:
                    del self._readers[(key[1], key[2])]

    def summaries(self, group_id: str) -> list[SharePartitionSummary]:
        """Every share-partition of the group with state, in (topic id, partition) order."""
        out = [SharePartitionSummary(t, p, s.state_epoch, s.leader_epoch, s.start_offset,
                                     delivery_complete_count(s.batches))
               for (g, t, p), s in self._states.items() if g == group_id]
        return sorted(out, key=lambda s: (s.topic_id, s.partition))

    def summary(self, group_id: str, topic: str, partition: int) -> SharePartitionSummary | None:
        key = self._key(group_id, topic, partition)
        state = None if key is None else self._states.get(key)
        if state is None:
            return None
        return SharePartitionSummary(key[1], partition, state.state_epoch, state.leader_epoch, state.start_offset,
                                     delivery_complete_count(state.batches))

    def group_ids(self) -> set[str]:
        return {g for g, _, _ in self._states}

    def share_partition_count(self) -> int:
        return len(self._states)

    # -- writes ------------------------------------------------------------------------------------
    async def write(self, group_id: str, topic: str, partition: int, change: StateChange, *,
                    leader_epoch: int = 0) -> None:
        """Merge ``change`` into the share-partition's state and make it durable (returns once it
        is). A share-partition without state is initialized with the change's start offset first.
        Raises :class:`ShareStateWriteError` (unknown topic, storage failure, write timeout)."""
        await self._wait_loaded()
        key = self._require_key(group_id, topic, partition)
        now = self.now_ms()
        state = self._states.get(key)
        if state is None:
            state = _PartitionState(0, 0, leader_epoch, change.start_offset, (), now, now)
            batches = combine_state_batches((), change.state_batches, change.start_offset)
            new = replace(state, batches=batches)
            await self._write_snapshot(key, new)
            return
        new_start = change.start_offset
        batches = combine_state_batches(state.batches, change.state_batches, new_start)
        epoch = leader_epoch if leader_epoch != NO_LEADER_EPOCH else state.leader_epoch
        if state.updates_since_snapshot >= self.settings.snapshot_update_records_per_snapshot:
            new = replace(state, snapshot_epoch=state.snapshot_epoch + 1, leader_epoch=epoch, start_offset=new_start,
                          batches=batches, create_timestamp_ms=now, write_timestamp_ms=now)
            await self._write_snapshot(key, new)
            return
        update = ShareUpdateValue(state.snapshot_epoch, epoch, new_start,
                                  combine_state_batches((), change.state_batches, new_start),
                                  delivery_complete_count(batches))
        new = replace(state, leader_epoch=epoch, start_offset=new_start, batches=batches,
                      updates_since_snapshot=state.updates_since_snapshot + 1)
        record = (encode_key(ShareStateKey(SHARE_UPDATE_RECORD_TYPE, *key)), encode_update_value(update))
        last = self._append([record], now)
        self._put(key, new)
        self.version += 1
        await self._durable(last)

    async def initialize(self, group_id: str, topic: str, partition: int, start_offset: int) -> None:
        """Start the share-partition afresh at ``start_offset`` (Kafka ``InitializeShareGroupState``:
        first use, AlterShareGroupOffsets): a snapshot with the next state epoch and no batches."""
        await self._wait_loaded()
        if start_offset < 0:
            raise ValueError("a start offset is not negative")
        key = self._require_key(group_id, topic, partition)
        now = self.now_ms()
        old = self._states.get(key)
        new = _PartitionState(0 if old is None else old.snapshot_epoch + 1,
                              0 if old is None else old.state_epoch + 1,
                              NO_LEADER_EPOCH, start_offset, (), now, now)
        await self._write_snapshot(key, new)

    async def delete(self, group_id: str, topic: str, partition: int) -> bool:
        """Delete the share-partition's state (a tombstone); False when it had none."""
        await self._wait_loaded()
        key = self._key(group_id, topic, partition)
        if key is None or key not in self._states:
            return False
        await self._delete_keys([key])
        return True

    async def delete_group(self, group_id: str) -> int:
        """Delete the state of every share-partition of the group (DeleteGroups); how many."""
        await self._wait_loaded()
        keys = [k for k in self._states if k[0] == group_id]
        if keys:
            await self._delete_keys(keys)
        return len(keys)

    def on_group_deleted(self, group_id: str) -> None:
        """A share group was deleted (DeleteGroups): delete its state in the background (a deletion
        listener of the share groups; failures are logged, the state then stays until retried)."""
        if not any(k[0] == group_id for k in self._states):
            return
        task = asyncio.get_running_loop().create_task(self.delete_group(group_id))
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("share_state_delete_failed", topic=SHARE_STATE_TOPIC, error=str(task.exception()))

    def _require_key(self, group_id: str, topic: str, partition: int) -> _Key:
        key = self._key(group_id, topic, partition)
        if key is None:
            raise ShareStateWriteError(f"topic {topic!r} does not exist")
        return key

    async def _delete_keys(self, keys: list[_Key]) -> None:
        records = [(encode_key(ShareStateKey(SHARE_SNAPSHOT_RECORD_TYPE, *k)), None) for k in keys]
        last = self._append(records, self.now_ms())
        for k in keys:
            self._drop(k)
        self.version += 1
        await self._durable(last)

    async def _write_snapshot(self, key: _Key, state: _PartitionState) -> None:
        record = (encode_key(ShareStateKey(SHARE_SNAPSHOT_RECORD_TYPE, *key)), encode_snapshot_value(state.snapshot_value()))
        last = self._append([record], self.now_ms())
        state.updates_since_snapshot = 0
        state.snapshot_log_offset = last
        self._put(key, state)
        self.version += 1
        self.snapshots_written += 1
        await self._durable(last)

    def _append(self, records: list[tuple[bytes, bytes | None]], now_ms: int) -> int:
        try:
            return self.log.append(records, now_ms)
        except Exception as exc:
            logger.error("share_state_append_failed", topic=SHARE_STATE_TOPIC, error=str(exc))
            raise ShareStateWriteError(f"cannot append to {SHARE_STATE_TOPIC}: {exc}") from exc

    async def _durable(self, last_offset: int) -> None:
        timeout_s = self.settings.write_timeout_ms / 1000
        try:
            await asyncio.wait_for(asyncio.shield(self.log.wait_durable(last_offset)), timeout_s)
        except asyncio.TimeoutError:
            logger.error("share_state_write_timeout", topic=SHARE_STATE_TOPIC, offset=last_offset,
                         timeout_ms=self.settings.write_timeout_ms)
            raise ShareStateWriteError(f"{SHARE_STATE_TOPIC} not durable within "
                                       f"share.coordinator.write.timeout.ms={self.settings.write_timeout_ms}") from None
        except ShareStateWriteError:
            raise
        except Exception as exc:
            logger.error("share_state_flush_failed", topic=SHARE_STATE_TOPIC, error=str(exc))
            raise ShareStateWriteError(f"cannot flush {SHARE_STATE_TOPIC}: {exc}") from exc

    # -- pruning ---------------------------------------------------------------------------------
    async def _maintain_forever(self) -> None:
        interval_s = self.settings.state_topic_prune_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.maintain()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.error("share_state_prune_failed", topic=SHARE_STATE_TOPIC, error=str(exc))

    async def maintain(self) -> int | None:
        """One pruning pass (see the module docstring): tombstones for the state of deleted topics,
        snapshots of cold share-partitions, then the log start moved to the oldest snapshot still
        needed. Returns the new log start offset, None when it did not move."""
        await self._wait_loaded()
        gone = [k for k in self._states if self.topic_ids.name_of(k[1]) is None]
        if gone:
            await self._delete_keys(gone)
            logger.info("share_state_of_deleted_topics_removed", share_partitions=len(gone))
        now = self.now_ms()
        end = self.log.log_end_offset
        cold_ms = self.settings.cold_partition_snapshot_interval_ms
        for key in list(self._states):
            state = self._states.get(key)  # read anew: a write may have come during the last await
            if state is not None and now - state.write_timestamp_ms >= cold_ms and state.snapshot_log_offset < end - 1:
                await self._write_snapshot(key, replace(state, snapshot_epoch=state.snapshot_epoch + 1,
                                                        write_timestamp_ms=now))
        return self.prune()

    def prune(self) -> int | None:
        """Move the log start to the first record still needed: the oldest last snapshot of a live
        share-partition (the log end when none is live)."""
        needed = min((s.snapshot_log_offset for s in self._states.values()), default=self.log.log_end_offset)
        if needed < 0 or needed <= self._log_start_offset():
            return None
        self.log.delete_records_before(needed)
        logger.info("share_state_pruned", topic=SHARE_STATE_TOPIC, log_start_offset=needed,
                    share_partitions=len(self._states))
        return needed

    def _log_start_offset(self) -> int:
        return self.log.log_end_offset - self.log.record_count()


def _apply_update(state: _PartitionState, value: ShareUpdateValue) -> None:
    """Replay of a ShareUpdate (Kafka ``ShareCoordinatorShard.merge``)."""
    start = state.start_offset if value.start_offset == UNCHANGED_START_OFFSET else value.start_offset
    state.batches = combine_state_batches(state.batches, value.state_batches, start)
    state.start_offset = start
    if value.leader_epoch != NO_LEADER_EPOCH:
        state.leader_epoch = value.leader_epoch
    state.updates_since_snapshot += 1


__all__ = [
    "SHARE_STATE_TOPIC", "LogTopicIds", "SharePartitionSummary",
    "ShareStateStore", "ShareStateWriteError", "TopicIds",
]
