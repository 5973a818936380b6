"""The offset manager: committed offsets, their persistence and their expiry (Kafka ``GroupMetadataManager``).

:class:`GroupMetadataManager` owns the :class:`~broker.groups.offsets.OffsetStore`
(the in-memory map and its ``__consumer_offsets`` log) and answers everything about
committed offsets; :class:`~broker.groups.coordinator.GroupCoordinator` owns the
groups' membership and calls it once a request has passed the membership checks
(as Kafka's ``GroupCoordinator.handleCommitOffsets`` calls
``GroupMetadataManager.storeOffsets``). The manager never changes a group's state:
where a group must go (expiry of an Empty group without offsets) it reports the group
ids and the coordinator marks them Dead, in the same synchronous step.

Durability: OffsetCommit answers after the commit record is fsynced (:meth:`store_offsets`
awaits :meth:`durable`); group metadata records are appended by :meth:`store_group`
and awaited by the coordinator. After an append the store may write a snapshot and
trim the log (:meth:`maybe_snapshot`, see :mod:`broker.groups.offsets`).

Offset expiry (Kafka 2.1+, KIP-211, :meth:`expire_pass`): an Empty group's offsets
expire ``offsets.retention.minutes`` after the group became Empty (or after the
commit when that time is unknown); a Stable consumer group's offsets of topics it no
longer subscribes to expire that long after their commit; a group without a protocol
(simple consumers) expires each offset that long after its commit; an offset
committed with an explicit retention (OffsetCommit v2–v4) expires at its own expire
timestamp. An Empty group left without offsets becomes Dead.

Consumed retention (seed 004): :meth:`consumed_upto` is the input of the two-level
retention; see its docstring.

Room for transactions: transactional offset commits (TxnOffsetCommit, KIP-98) belong
here, as Kafka keeps them: pending offsets per producer id held apart from the
committed map until the transaction marker completes or aborts them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

import structlog

import sundial.storage.errors as se
from sundial.protocol.errors import ErrorCode

from .group import CONSUMER_PROTOCOL_TYPE, DEAD, EMPTY, STABLE, GroupMetadata
from .lag import LagRow, compute_lag
from .offsets import DEFAULT_SNAPSHOT_MIN_RECORDS, OFFSETS_TOPIC, CommittedOffset, OffsetStore, \
    PartitionOffsetsLog
from .schema import GroupValue

logger = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ConsumedUpto:
    """The smallest offset every consuming group has committed past, and which group holds it.
    ``offset=None``: no group consumes the partition, or (``unknown``) the answer cannot be known."""

    offset: int | None
    holder_group: str | None
    unknown: bool = False


@dataclass(frozen=True, slots=True)
class CommitRequest:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp_ms: int = -1  # OffsetCommit v1 only; -1 = now


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    committed: CommittedOffset | None  # None: nothing committed (offset -1 on the wire)
    #: UNSTABLE_OFFSET_COMMIT when OffsetFetch asked for stable offsets and a transactional
    #: commit of this partition is still undecided (KIP-447); the offset then reads as -1.
    error: ErrorCode = ErrorCode.NONE


def storage_error_code(exc: BaseException) -> ErrorCode:
    """Kafka ``GroupMetadataManager`` maps append failures to coordinator errors."""
    if isinstance(exc, (se.RecordTooLargeError, se.RecordBatchTooLargeError)):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


class _Unknown(Exception):
    """A live consumer group's subscription cannot be read."""


class GroupMetadataManager:
    """Committed offsets of every group, their log, their expiry and the consumed-retention input.

    Without ``store``, the store is opened over ``__consumer_offsets`` (created through
    ``logs`` when missing, so the logs are loaded first); :meth:`load` replays it.
    """

    def __init__(self, config, logs, *, now_ms: Callable[[], int], store: OffsetStore | None = None,
                 topic_partitions: Callable[[str], int | None] | None = None, flushers=None) -> None:
        self.config = config
        self.logs = logs
        self.now_ms = now_ms
        offsets = config.offsets
        self.offsets_retention_ms = offsets.offsets_retention_ms
        self.retention_check_interval_ms = offsets.retention_check_interval_ms
        self.metadata_max_bytes = offsets.metadata_max_bytes
        if store is None:
            snapshot_min = offsets.snapshot_min_records or DEFAULT_SNAPSHOT_MIN_RECORDS
            store = OffsetStore(PartitionOffsetsLog.open(logs, config, now_ms=now_ms, flushers=flushers),
                                snapshot_min_records=snapshot_min)
        self.store = store
        self._topic_partitions = topic_partitions
        self._background: set[asyncio.Task] = set()
        self._consumed_cache: tuple[int, int, dict] | None = None
        self._subscribers_cache: dict[str, set[str]] = {}

    # -- lifecycle ------------------------------------------------------------------------------
    def load(self) -> None:
        """Replay ``__consumer_offsets`` into the store."""
        self.store.load(progress=lambda n: logger.info("offsets_loading", topic=OFFSETS_TOPIC, records=n))

    def spawn(self, coro) -> None:
        """Run ``coro`` in the background (durability waits, snapshots); :meth:`drain` awaits them."""
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def drain(self, timeout_s: float) -> None:
        if self._background:
            await asyncio.wait(list(self._background), timeout=timeout_s)

    async def maybe_snapshot(self) -> None:
        try:
            await self.store.maybe_snapshot(self.now_ms())
        except Exception as exc:
            logger.error("offsets_snapshot_failed", topic=OFFSETS_TOPIC, error=str(exc))

    async def durable(self, last_offset: int | None) -> None:
        await self.store.durable(last_offset)

    def forget_consumed(self) -> None:
        """Drop the consumed-retention index (committed offsets or groups changed)."""
        self._consumed_cache = None

    def partitions_of(self, topic: str) -> int | None:
        if self._topic_partitions is not None:
            return self._topic_partitions(topic)
        if self.logs is None:
            return None
        meta = self.logs.topic(topic)
        return None if meta is None else meta.partitions

    # -- group records ------------------------------------------------------------------------------
    def store_group(self, group_id: str, value: GroupValue, now_ms: int) -> int:
        """Append the group's metadata record; returns its offset (raises on a storage failure)."""
        return self.store.store_group(group_id, value, now_ms)

    def delete_group(self, group_id: str, now_ms: int) -> int | None:
        """Tombstones for the group's offsets and metadata (raises on a storage failure)."""
        written = self.store.delete_group(group_id, now_ms)
        self._consumed_cache = None
        return written

    # -- OffsetCommit / OffsetFetch / OffsetDelete --------------------------------------------------
    async def store_offsets(self, group_id: str, offsets: list[CommitRequest], retention_time_ms: int,
                            now: int, producer: tuple[int, int] | None = None) -> list[ErrorCode]:
        """The storage half of OffsetCommit (membership already checked): one error per entry.

        With ``producer=(id, epoch)`` it is TxnOffsetCommit's: the offsets are written in a
        transactional batch and stay pending until the transaction's marker (see
        :mod:`broker.groups.offsets`)."""
        results: list[ErrorCode] = []
        to_store: dict[tuple[str, int], CommittedOffset] = {}
        for req in offsets:
            partitions = self.partitions_of(req.topic)
            metadata = req.metadata if req.metadata is not None else ""
            if partitions is None or not 0 <= req.partition < partitions:
                results.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif len(metadata.encode("utf-8")) > self.metadata_max_bytes:
                results.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
            else:
                commit_ts = req.commit_timestamp_ms if req.commit_timestamp_ms != -1 else now
                expire_ts = commit_ts + retention_time_ms if retention_time_ms != -1 else -1
                to_store[(req.topic, req.partition)] = CommittedOffset(req.offset, req.leader_epoch, metadata,
                                                                       commit_ts, expire_ts)
                results.append(ErrorCode.NONE)
        if not to_store:
            return results
        failure = ErrorCode.NONE
        try:
            if producer is None:
                last = self.store.commit(group_id, to_store, now)
            else:
                last = self.store.commit_transactional(group_id, to_store, producer[0], producer[1], now)
        except se.InvalidProducerEpochError as exc:  # an older epoch of the transactional producer
            logger.info("txn_offset_commit_fenced", group=group_id, producer_id=producer and producer[0],
                        error=str(exc))
            failure = ErrorCode.INVALID_PRODUCER_EPOCH
        except (se.StorageError, OSError, RuntimeError) as exc:
            logger.error("offset_commit_failed", group=group_id, error=str(exc))
            failure = storage_error_code(exc)
        else:
            self._consumed_cache = None
            try:
                await self.store.durable(last)
            except Exception as exc:
                logger.error("offset_commit_flush_failed", group=group_id, error=str(exc))
                failure = ErrorCode.COORDINATOR_NOT_AVAILABLE
        if failure:
            stored = set(to_store)
            results = [failure if (r.topic, r.partition) in stored and code == ErrorCode.NONE else code
                       for r, code in zip(offsets, results)]
        elif self.store.snapshot_due():
            self.spawn(self.maybe_snapshot())
        return results

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None,
                      require_stable: bool = False) -> list[FetchedOffset]:
        """Committed offsets of the group: ``partitions=None`` means every committed partition.
        Offsets of a pending transaction are never shown; with ``require_stable`` a partition that
        has one answers UNSTABLE_OFFSET_COMMIT (Kafka ``GroupMetadataManager.getOffsets``)."""
        committed = self.store.offsets_of(group_id)
        unstable = self.store.pending_partitions(group_id) if require_stable else set()
        if partitions is None:
            partitions = sorted(set(committed) | unstable)
        return [FetchedOffset(t, p, None, ErrorCode.UNSTABLE_OFFSET_COMMIT) if (t, p) in unstable
                else FetchedOffset(t, p, committed.get((t, p))) for t, p in partitions]

    def complete_txn(self, producer_id: int, commit: bool) -> None:
        """The transaction's marker is in ``__consumer_offsets``: materialise or drop its offsets."""
        applied = self.store.complete_txn(producer_id, commit)
        self._consumed_cache = None
        if applied:
            logger.debug("txn_offsets_committed", producer_id=producer_id, partitions=applied)
        if self.store.snapshot_due():
            self.spawn(self.maybe_snapshot())

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> None:
        """Tombstones for ``partitions`` of the group, durable on return (raises on failure)."""
        last = self.store.delete_offsets(group_id, partitions, self.now_ms())
        await self.store.durable(last)
        self._consumed_cache = None

    # -- expiry -------------------------------------------------------------------------------------
    def expire_pass(self, groups: Mapping[str, GroupMetadata], now: int) -> tuple[int, int | None, list[str]]:
        """One pass of Kafka's ``cleanupGroupMetadata`` over ``groups``, without waiting.

        Returns (offsets expired, last offset written or None, ids of the Empty groups
        whose records were deleted: the caller marks them Dead and drops them at once).
        """
        retention = self.offsets_retention_ms
        expired_total = 0
        last = None
        dead: list[str] = []
        for group_id, group in list(groups.items()):
            offsets = self.store.offsets_of(group_id)
            expired: list[tuple[str, int]] = []
            if offsets:
                if group.protocol_type is not None and group.state is EMPTY:
                    base = group.state_timestamp_ms
                    expired = [tp for tp, c in offsets.items()
                               if self._offset_expired(c, now, retention, base)]
                elif group.is_consumer_group() and group.state is STABLE:
                    subscribed = group.subscribed_topics()
                    if subscribed is not None:
                        expired = [tp for tp, c in offsets.items()
                                   if tp[0] not in subscribed and self._offset_expired(c, now, retention, None)]
                elif group.protocol_type is None:
                    expired = [tp for tp, c in offsets.items() if self._offset_expired(c, now, retention, None)]
            if expired:
                try:
                    last = self.store.delete_offsets(group_id, expired, now) or last
                except Exception as exc:
                    logger.error("offsets_expiry_write_failed", group=group_id, error=str(exc))
                    continue
                expired_total += len(expired)
                logger.info("offsets_expired", group=group_id, partitions=len(expired),
                            state=group.state.value)
            if group.state is EMPTY and not self.store.has_offsets(group_id):
                try:
                    written = self.store.delete_group(group_id, now)
                except Exception as exc:
                    logger.error("group_delete_failed", group=group_id, error=str(exc))
                    continue
                last = written if written is not None else last
                dead.append(group_id)
        if expired_total or last is not None:
            self._consumed_cache = None
        return expired_total, last, dead

    @staticmethod
    def _offset_expired(c: CommittedOffset, now: int, retention_ms: int, base_ms: int | None) -> bool:
        if c.expire_timestamp_ms >= 0:
            return now >= c.expire_timestamp_ms
        base = base_ms if base_ms is not None else c.commit_timestamp_ms
        return now - base >= retention_ms

    def remove_offsets_of_topic(self, topic: str) -> int:
        """Forget every committed offset of a deleted topic (Kafka ``onPartitionsDeleted``)."""
        removed = 0
        now = self.now_ms()
        for group_id in list(self.store.offsets):
            partitions = [tp for tp in self.store.offsets_of(group_id) if tp[0] == topic]
            if partitions:
                try:
                    self.store.delete_offsets(group_id, partitions, now)
                except Exception as exc:
                    logger.error("offsets_delete_failed", group=group_id, topic=topic, error=str(exc))
                    continue
                removed += len(partitions)
        if removed:
            self._consumed_cache = None
            logger.info("offsets_of_deleted_topic_removed", topic=topic, partitions=removed)
        return removed

    # -- consumed retention and lag -------------------------------------------------------------------
    def consumed_upto(self, topic: str, partition: int, log_start_offset: int,
                      groups: Mapping[str, GroupMetadata], membership_version,
                      consumer_subscriptions: Callable[[], Mapping[str, frozenset[str]]] = dict) -> ConsumedUpto:
        """Input of the two-level retention (seed 004, issue 4 item 3).

        The smallest committed offset over every group that has committed for this
        partition or has a live member subscribed to the topic; a subscribed group that
        has not committed counts as ``log_start_offset`` (nothing consumed yet).
        ``offset=None`` when no group has ever consumed the partition, or when the
        answer cannot be computed (a consumer group whose subscription cannot be read):
        the caller then skips consumed retention. ``membership_version`` changes
        whenever a group's membership may have: it keys the cached index with the
        store's version. ``consumer_subscriptions`` names the topics each consumer-protocol
        group (KIP-848) consumes; such a group counts like a classic one with live members.
        """
        try:
            holders = self._consumed_index(groups, membership_version, consumer_subscriptions)
        except _Unknown:
            return ConsumedUpto(None, None, unknown=True)
        best: tuple[int, str] | None = None
        for group_id in holders.get(topic, ()):
            committed = self.store.offsets_of(group_id).get((topic, partition))
            if committed is not None:
                candidate = committed.offset
            elif group_id in self._subscribers_cache.get(topic, ()):
                candidate = log_start_offset
            else:
                continue
            if best is None or candidate < best[0]:
                best = (candidate, group_id)
        if best is None:
            return ConsumedUpto(None, None)
        return ConsumedUpto(best[0], best[1])

    def _consumed_index(self, groups: Mapping[str, GroupMetadata], membership_version,
                        consumer_subscriptions: Callable[[], Mapping[str, frozenset[str]]] = dict
                        ) -> dict[str, list[str]]:
        """topic -> groups that committed on it or subscribe to it (cached until something changes)."""
        key = (self.store.version, membership_version)
        if self._consumed_cache is not None and self._consumed_cache[:2] == key:
            return self._consumed_cache[2]
        by_topic: dict[str, set[str]] = {}
        subscribers: dict[str, set[str]] = {}
        for group_id, offsets in self.store.offsets.items():
            for topic, _ in offsets:
                by_topic.setdefault(topic, set()).add(group_id)
        for group_id, group in groups.items():
            if group.state in (EMPTY, DEAD) or not group.members:
                continue
            if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                continue
            topics = group.subscribed_topics()
            if topics is None:
                raise _Unknown(group_id)
            for topic in topics:
                by_topic.setdefault(topic, set()).add(group_id)
                subscribers.setdefault(topic, set()).add(group_id)
        for group_id, topics in consumer_subscriptions().items():
            for topic in topics:
                by_topic.setdefault(topic, set()).add(group_id)
                subscribers.setdefault(topic, set()).add(group_id)
        index = {t: sorted(gs) for t, gs in by_topic.items()}
        self._subscribers_cache = subscribers
        self._consumed_cache = (key[0], key[1], index)
        return index

    def lag(self, group_id: str, now_ms: int | None = None) -> list[LagRow]:
        """Per committed partition: committed offset, log end offset, offset lag and time lag."""
        now = self.now_ms() if now_ms is None else now_ms
        return compute_lag(self.store.offsets_of(group_id), self.logs, now)

    def committed_group_ids(self) -> Iterable[str]:
        return self.store.offsets
