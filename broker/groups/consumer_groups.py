"""Kafka 4's consumer-protocol groups (KIP-848) on the event loop (Kafka ``GroupCoordinatorService``
over the consumer half of ``GroupMetadataManager``).

:class:`~broker.groups.modern.manager.ConsumerGroupManager` is the pure state machine: it takes
``now_ms``, returns the ``__consumer_offsets`` records each change wrote, and says when its next
deadline is. :class:`ConsumerGroups` gives it what it needs of the daemon:

* **Durability.** Every record list goes to the offsets store
  (:meth:`OffsetStore.append_coordinator_records`) in the order the manager decided it, and
  the request that caused it is answered once those records are on disk, as an OffsetCommit
  is: a member never sees an epoch or an assignment that a restart would take back. The store
  replays the records at start (``replay_modern``) and rewrites the live ones in its snapshots.
* **Time.** One task sleeps until the manager's next deadline (session and rebalance timeouts,
  the periodic regex refresh), then polls it; the records a poll writes (fenced members) are
  appended like any other.
* **Topics.** The manager reads the topic view (name → topic id, partitions) on demand;
  :meth:`topics_changed` is called when a topic is created, deleted or given partitions, so a
  regex or a subscription that moved bumps the group epoch at once.
* **Settings.** The per-group session timeout and heartbeat interval come from the GROUP config
  resource (:class:`~broker.group_configs.GroupConfigStore`) over the broker's defaults.

A storage failure while appending answers COORDINATOR_NOT_AVAILABLE and is logged. The manager
has applied the change already (it has no undo), so memory is then ahead of the disk until the
next restart replays what the disk holds; Kafka reverts its in-memory state instead (timeline
snapshots). A disk that fails writes stops the partition's log anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import structlog

from sundial.protocol.errors import ErrorCode
from sundial.records.timestamps import wall_clock_ms

from .group_log import GroupRecordLog
from .modern.classic import ClassicJoinRequest, ClassicJoinResult
from .modern.errors import GroupError
from .modern.manager import ConsumerGroupManager
from .modern.migration import ClassicGroupImage
from .modern.records import ConsumerGroupMemberMetadataKey, ConsumerGroupMetadataKey, CoordinatorRecord, encode_record
from .modern.replay import ReplayError
from .modern.requests import HeartbeatRequest, HeartbeatResult
from .modern.settings import ConsumerGroupSettings
from .modern.views import GroupDescription, ListedGroup
from .offset_manager import GroupMetadataManager

logger = structlog.get_logger(__name__)

GROUP_TYPE_CONSUMER = "consumer"


class ConsumerGroups:
    """The consumer-protocol groups of this broker: the manager, its timer and its records."""

    def __init__(self, settings: ConsumerGroupSettings, offsets: GroupMetadataManager, *,
                 topics: Callable[[], Mapping], group_settings: Callable[[str], tuple[int, int]],
                 is_classic_group: Callable[[str], bool], now_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.now_ms = now_ms
        self.manager = ConsumerGroupManager(settings, topics, group_settings, is_classic_group=is_classic_group)
        #: Called with (classic group image, start a rebalance) for each consumer group that turned
        #: back into a classic group (online downgrade), once its tombstones are appended: the
        #: coordinator creates the classic group and appends its metadata record after them.
        self.on_downgrade: Callable[[ClassicGroupImage, bool], None] | None = None
        #: The records' writer and timer; its ``version`` is bumped whenever records are written, its
        #: ``rebalances`` and ``fenced_members`` (session or rebalance timeout) are read by
        #: ``broker.metrics.group_rows``.
        self.record_log = GroupRecordLog(
            "consumer_group", offsets, encode_record, now_ms, manager=self.manager,
            epoch_key=ConsumerGroupMetadataKey, member_key=ConsumerGroupMemberMetadataKey,
            after_append=self._announce_downgrades, on_appended=offsets.forget_consumed)
        self.replay_errors = 0

    # -- lifecycle ------------------------------------------------------------------------------
    def replay(self, record: CoordinatorRecord) -> None:
        """The offsets store's ``replay_modern`` hook: one record read from the log at start."""
        try:
            self.manager.replay(record)
        except ReplayError as exc:
            self.replay_errors += 1
            logger.warning("consumer_group_record_skipped", group=record.key.group_id, reason=str(exc))

    def loaded(self) -> None:
        """The log is replayed: members get their session deadlines from now (Kafka ``onLoaded``)."""
        self.manager.loaded(self.now_ms())
        logger.info("consumer_groups_loaded", groups=len(self.manager.group_ids()),
                    skipped_records=self.replay_errors)

    def start_timers(self) -> None:
        self.record_log.start_timers()

    async def stop(self) -> None:
        await self.record_log.stop()

    # -- requests -------------------------------------------------------------------------------
    async def heartbeat(self, request: HeartbeatRequest, *, client_id: str, client_host: str,
                        classic: ClassicGroupImage | None = None, before_append: Callable[[], None] | None = None
                        ) -> HeartbeatResult:
        """ConsumerGroupHeartbeat; raises :class:`GroupError` (Kafka's code and message) to refuse it.
        ``classic``: the classic group with members this join may upgrade; ``before_append`` runs once
        the manager accepted the request, before its records are appended (the classic group's
        tombstone goes first)."""
        result, records = self.manager.heartbeat(request, self.now_ms(), client_id=client_id,
                                                 client_host=client_host, classic=classic)
        if before_append is not None:
            before_append()
        await self.record_log.persist(records)
        return result

    # -- classic members inside consumer groups (online migration) -------------------------------
    async def classic_join(self, request: ClassicJoinRequest, *, client_id: str,
                           client_host: str) -> ClassicJoinResult:
        result, records = self.manager.classic_join(request, self.now_ms(), client_id=client_id,
                                                    client_host=client_host)
        await self.record_log.persist(records)
        return result

    def classic_sync(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                     protocol_type: str | None, protocol_name: str | None) -> bytes:
        return self.manager.classic_sync(group_id, member_id, instance_id, generation_id, protocol_type,
                                         protocol_name, self.now_ms())

    def classic_heartbeat(self, group_id: str, member_id: str, instance_id: str | None,
                          generation_id: int) -> ErrorCode:
        return self.manager.classic_heartbeat(group_id, member_id, instance_id, generation_id, self.now_ms())

    def classic_leave(self, group_id: str, members) -> list[tuple[str, str | None, ErrorCode]]:
        """LeaveGroup of classic members: the records are appended at once and made durable in the
        background, as the classic groups' LeaveGroup does (the member is gone either way)."""
        answers, records = self.manager.classic_leave(group_id, members, self.now_ms())
        self.record_log.append_in_background(records)
        return answers

    def describe(self, group_id: str) -> GroupDescription:
        return self.manager.describe(group_id)

    def list_groups(self, states=()) -> list[ListedGroup]:
        return self.manager.list_groups(states)

    def is_consumer_group(self, group_id: str) -> bool:
        return self.manager.group_type(group_id) == GROUP_TYPE_CONSUMER

    def is_empty(self, group_id: str) -> bool:
        return not self.manager.group(group_id).members

    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int, *,
                               instance_id: str | None = None, transactional: bool = False,
                               api_version: int = 9) -> ErrorCode:
        try:
            self.manager.validate_offset_commit(group_id, member_id, member_epoch, instance_id=instance_id,
                                                transactional=transactional, api_version=api_version)
        except GroupError as exc:
            return exc.error_code
        return ErrorCode.NONE

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        try:
            self.manager.validate_offset_fetch(group_id, member_id, member_epoch)
        except GroupError as exc:
            return exc.error_code
        return ErrorCode.NONE

    async def delete_group(self, group_id: str) -> None:
        """Tombstones for the group's records (the caller deletes its offsets); raises GroupError."""
        await self.record_log.persist(self.manager.delete_group(group_id))

    def subscribed_groups(self) -> dict[str, frozenset[str]]:
        """group id → topic names its members consume (consumed-log retention counts them)."""
        return {g: self.manager.subscribed_topics(g) for g in self.manager.group_ids()}

    def topics_changed(self) -> None:
        """A topic was created, deleted or given partitions: the records are appended at once,
        their durability awaited in the background (as a fencing by the timer)."""
        self.record_log.append_in_background(self.manager.topics_changed(self.now_ms()))

    # -- plumbing -------------------------------------------------------------------------------
    def _announce_downgrades(self) -> None:
        for image, rebalance in self.manager.take_downgrades():
            if self.on_downgrade is not None:
                self.on_downgrade(image, rebalance)

    def fire_timers(self, now_ms: int | None = None) -> list[CoordinatorRecord]:
        """Poll the manager (tests call this with their own clock); returns the records written."""
        return self.record_log.fire_timers(now_ms)
