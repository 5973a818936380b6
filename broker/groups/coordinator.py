"""The group coordinator: groups' membership and their timers (Kafka ``GroupCoordinator``).

This broker coordinates every group (FindCoordinator always answers with this node).
:class:`GroupCoordinator` owns one :class:`~broker.groups.state.Group` per group id
and hands everything about committed offsets to the offset manager,
:class:`~broker.groups.offset_manager.GroupMetadataManager` (``self.offsets``); the
wire handlers (``broker/handlers/groups.py``) call its methods and turn the results
into responses. The offset requests come here first for the membership checks
(generation, member id, group state), then go to the manager, as in Kafka.

Timers: the state machine is pure and reports, per group, the next time it has work
(session expiry, rebalance or initial-delay deadline, sync deadline). The coordinator
keeps a heap of (deadline, group) and one asyncio task sleeps until the earliest
entry and calls ``Group.poll(now)``. The clock is injectable (``now_ms``) and
``run_timers=False`` leaves the task out, so unit tests drive time with
:meth:`GroupCoordinator.fire_timers`. A second task runs the manager's offset expiry
every ``offsets.retention.check.interval.ms``.

Durability: OffsetCommit answers after the commit record is fsynced; the leader's
SyncGroup answers (to every member) after the generation's metadata record is.
Group metadata is reloaded at start-up: a group with members comes back Stable and
its members keep their ids and generation, so a broker restart does not force a
rebalance if the clients come back within their session timeout.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
import uuid
from typing import Callable, Iterable

import structlog

from sundial.protocol.errors import ErrorCode
from sundial.records.timestamps import wall_clock_ms

import sundial.storage.errors as se

from .consumer_groups import GROUP_TYPE_CONSUMER, ConsumerGroups
from .group import COMPLETING, DEAD, EMPTY, GroupSettings, Note, default_member_id
from .group_log import deletion_answer
from .lag import LagRow
from .modern.classic import ClassicJoinRequest
from .modern.errors import GroupError
from .modern.migration import ClassicGroupImage, ClassicMember
from .modern.requests import HeartbeatRequest, HeartbeatResult
from .modern.settings import ConsumerGroupSettings
from .offset_manager import CommitRequest, ConsumedUpto, FetchedOffset, GroupMetadataManager, storage_error_code
from .offsets import OFFSETS_TOPIC, OffsetStore
from .share_groups import GROUP_TYPE_SHARE, ShareGroups
from .schema import GroupValue, MemberRecord
from .state import Group, JoinReply, StoreGroup, SyncReply

logger = structlog.get_logger(__name__)

GROUP_TYPE_CLASSIC = "classic"


class GroupCoordinator:
    """Membership of every group (Kafka ``GroupCoordinator``); offsets go to :attr:`offsets`.

    ``logs`` and ``store`` go to the offset manager (``store`` replaces the one it would
    open over ``__consumer_offsets``); ``topic_partitions`` answers a topic's partition
    count (default: from ``logs``); ``now_ms`` is the clock; ``run_timers=False`` leaves
    the timer and expiry tasks out (tests call :meth:`fire_timers`).

    The consumer-protocol groups (KIP-848) are :attr:`consumer`; a group id names one group of
    either type. ``group_configs`` gives their per-group settings (the GROUP config resource);
    ``topic_view`` names each topic's id and partition count (default: from ``logs``).
    """

    def __init__(self, config, logs, *, now_ms: Callable[[], int] = wall_clock_ms, store: OffsetStore | None = None,
                 run_timers: bool = True, new_member_id: Callable[[str, str | None], str] = default_member_id,
                 topic_partitions: Callable[[str], int | None] | None = None, group_configs=None,
                 topic_view: Callable[[], dict] | None = None, flushers=None) -> None:
        self.now_ms = now_ms
        classic = config.classic_groups
        self.settings = GroupSettings(min_session_timeout_ms=classic.min_session_timeout_ms,
                                      max_session_timeout_ms=classic.max_session_timeout_ms,
                                      initial_rebalance_delay_ms=classic.initial_rebalance_delay_ms,
                                      max_size=classic.max_size)
        self.offsets = GroupMetadataManager(config, logs, now_ms=now_ms, store=store,
                                            topic_partitions=topic_partitions, flushers=flushers)
        self._run_timers = run_timers
        self._new_member_id = new_member_id
        self.groups: dict[str, Group] = {}
        self.active = False
        self.loading = False
        self._heap: list[tuple[int, int, str]] = []
        self._scheduled: dict[str, int] = {}
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._membership_version = 0
        #: For the metrics endpoint (``broker.metrics.group_rows``): classic generations whose assignment
        #: was stored (Kafka's group-completed-rebalance-count) and members a timer removed.
        self.completed_rebalances = 0
        self.expired_members = 0
        consumer = config.group_coordinator.consumer
        self._consumer_defaults = (consumer.session_timeout_ms, consumer.heartbeat_interval_ms)
        self._group_configs = group_configs
        self._logs = logs
        self.consumer = ConsumerGroups(
            ConsumerGroupSettings(max_size=consumer.max_size, assignors=tuple(consumer.assignors),
                                  regex_refresh_interval_ms=consumer.regex_refresh_interval_ms,
                                  upgrade_enabled=consumer.upgrade_enabled, downgrade_enabled=consumer.downgrade_enabled,
                                  classic_max_size=self.settings.max_size),
            self.offsets, topics=topic_view or self._topic_view, group_settings=self._consumer_group_settings,
            is_classic_group=self._is_live_classic_group, now_ms=now_ms)
        self.consumer.on_downgrade = self._classic_from_consumer
        #: The share groups (KIP-932); an id naming a consumer or classic group is not theirs.
        self.share = ShareGroups(config, self.offsets, topics=topic_view or self._topic_view,
                                 group_configs=group_configs, now_ms=now_ms, availability=self._coordinator_error,
                                 is_other_group=lambda g: self.consumer.is_consumer_group(g) or g in self.groups)

    @property
    def store(self) -> OffsetStore:
        """The offset manager's store (committed offsets and group records in memory)."""
        return self.offsets.store

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Replay ``__consumer_offsets`` (the offset manager), rebuild every group, start the timers."""
        self.loading = True
        now = self.now_ms()
        t0 = time.monotonic()
        self.store.replay_modern = self.consumer.replay
        self.store.replay_share = self.share.replay
        self.offsets.load()
        self._rebuild_groups(now)
        self.consumer.loaded()
        self.share.loaded()
        self.loading = False
        self.active = True
        logger.info("group_coordinator_started", groups=len(self.groups),
                    seconds=round(time.monotonic() - t0, 3))
        if self._run_timers:
            loop = asyncio.get_running_loop()
            self._tasks.append(loop.create_task(self._timer_loop(), name="group-timers"))
            self._tasks.append(loop.create_task(self._expiry_loop(), name="offsets-expiry"))
            self.consumer.start_timers()
            self.share.start_timers()

    def _rebuild_groups(self, now: int) -> None:
        self.groups.clear()
        for group_id, value in self.store.group_values.items():
            group = self._make_group(group_id, now)
            group.load(protocol_type=value.protocol_type, generation_id=value.generation,
                       protocol_name=value.protocol, leader_id=value.leader,
                       state_timestamp_ms=value.current_state_timestamp_ms,
                       members=[m.as_dict() for m in value.members], now_ms=now)
            self.groups[group_id] = group
            self._schedule(group)
        for group_id in self.store.offsets:
            if group_id not in self.groups and not self.consumer.is_consumer_group(group_id):
                group = self._make_group(group_id, now)
                group.state_timestamp_ms = None
                self.groups[group_id] = group

    def begin_shutdown(self) -> None:
        """Answer every parked JoinGroup/SyncGroup with NOT_COORDINATOR so connections can finish."""
        self.active = False
        for group in self.groups.values():
            for m in group.members.values():
                if m.awaiting_join:
                    self._resolve(m.join_waiter, JoinReply(m.join_waiter, ErrorCode.NOT_COORDINATOR,
                                                           member_id=m.member_id))
                if m.awaiting_sync:
                    self._resolve(m.sync_waiter, SyncReply(m.sync_waiter, ErrorCode.NOT_COORDINATOR))

    async def stop(self) -> None:
        self.begin_shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.consumer.stop()
        await self.share.stop()
        await self.offsets.drain(timeout_s=5)
        logger.info("group_coordinator_stopped", groups=len(self.groups))

    # -- plumbing -------------------------------------------------------------------------------
    def _topic_view(self) -> dict:
        if self._logs is None:
            return {}
        return {t.name: (uuid.UUID(bytes=bytes(t.topic_id)), t.partitions) for t in self._logs.topics()}

    def _consumer_group_settings(self, group_id: str) -> tuple[int, int]:
        if self._group_configs is None:
            return self._consumer_defaults
        return (self._group_configs.consumer_session_timeout_ms(group_id),
                self._group_configs.consumer_heartbeat_interval_ms(group_id))

    def _offsets_error(self, group_id: str) -> ErrorCode:
        """The coordinator's state, else GROUP_ID_NOT_FOUND for a share group (``ShareGroup.validateOffset*``)."""
        share = ErrorCode.GROUP_ID_NOT_FOUND if self.share.is_share_group(group_id) else ErrorCode.NONE
        return self._coordinator_error() or share

    def _is_live_classic_group(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and group.state not in (EMPTY, DEAD)

    def _make_group(self, group_id: str, now: int) -> Group:
        return Group(group_id, now, self.settings, new_member_id=self._new_member_id)

    def _coordinator_error(self) -> ErrorCode:
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    @staticmethod
    def _resolve(waiter, reply) -> None:
        if isinstance(waiter, asyncio.Future) and not waiter.done():
            waiter.set_result(reply)

    def _schedule(self, group: Group) -> None:
        deadline = group.next_deadline_ms()
        if deadline is None:
            return
        current = self._scheduled.get(group.group_id)
        if current is not None and current <= deadline:
            return
        self._scheduled[group.group_id] = deadline
        heapq.heappush(self._heap, (deadline, next(self._seq), group.group_id))
        if self._heap[0][2] == group.group_id:
            self._wake.set()

    def _apply(self, group: Group, effects: list) -> None:
        """Carry out a state-machine step's effects, then re-arm the group's timer."""
        for effect in effects:
            if isinstance(effect, (JoinReply, SyncReply)):
                self._resolve(effect.waiter, effect)
            elif isinstance(effect, StoreGroup):
                self._store_group(group, effect)
            elif isinstance(effect, Note):
                logger.info(effect.event, **effect.fields)
        self._membership_version += 1
        self._schedule(group)

    def _group_value(self, group: Group, assignment: dict[str, bytes] | None) -> GroupValue:
        members = tuple(
            MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                         m.session_timeout_ms, m.metadata(group.protocol_name),
                         assignment.get(m.member_id, b"") if assignment is not None else m.assignment)
            for m in group.members.values())
        return GroupValue(group.protocol_type or "", group.generation_id, group.protocol_name, group.leader_id,
                          group.state_timestamp_ms if group.state_timestamp_ms is not None else -1, members)

    def _store_group(self, group: Group, effect: StoreGroup) -> None:
        now = self.now_ms()
        try:
            last = self.offsets.store_group(group.group_id, self._group_value(group, effect.assignment), now)
            error = ErrorCode.NONE
        except (se.StorageError, OSError, RuntimeError) as exc:
            logger.error("group_metadata_store_failed", group=group.group_id, error=str(exc))
            last, error = None, storage_error_code(exc)
        if effect.sync_generation is None:
            return
        gen, assignment = effect.sync_generation, effect.assignment or {}

        async def finish(error=error):
            if error == ErrorCode.NONE:
                try:
                    await self.offsets.durable(last)
                except Exception as exc:  # fsync failure
                    logger.error("group_metadata_flush_failed", group=group.group_id, error=str(exc))
                    error = ErrorCode.COORDINATOR_NOT_AVAILABLE
            completes = error == ErrorCode.NONE and group.state is COMPLETING and group.generation_id == gen
            self._apply(group, group.on_sync_stored(gen, assignment, error, self.now_ms()))
            self.completed_rebalances += completes
            await self.offsets.maybe_snapshot()

        self.offsets.spawn(finish())

    def fire_timers(self, now_ms: int | None = None) -> None:
        """Poll every group whose deadline has passed."""
        now = self.now_ms() if now_ms is None else now_ms
        while self._heap and self._heap[0][0] <= now:
            deadline, _, group_id = heapq.heappop(self._heap)
            if self._scheduled.get(group_id) != deadline:
                continue  # superseded by an earlier entry
            del self._scheduled[group_id]
            group = self.groups.get(group_id)
            if group is not None:
                effects = group.poll(now)
                self.expired_members += sum(isinstance(e, Note) and e.event == "member_removed" for e in effects)
                self._apply(group, effects)

    async def _timer_loop(self) -> None:
        while True:
            try:
                self.fire_timers()
            except Exception:
                logger.exception("group_timer_failed")
            now = self.now_ms()
            timeout = 1.0
            if self._heap:
                timeout = min(max(self._heap[0][0] - now, 0) / 1000, 1.0)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    async def _expiry_loop(self) -> None:
        while True:
            await asyncio.sleep(self.offsets.retention_check_interval_ms / 1000)
            try:
                await self.expire_offsets()
            except Exception:
                logger.exception("offsets_expiry_failed")

    def _valid_group_id(self, group_id: str | None, allow_empty: bool) -> bool:
        return group_id is not None and (allow_empty or group_id != "")

    # -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup --------------------------------------------
    async def join_group(self, *, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                         client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                         protocols: list[tuple[str, bytes]], require_known_member_id: bool,
                         reason: str | None = None) -> JoinReply:
        member_id = member_id or ""
        if not self._valid_group_id(group_id, allow_empty=False):
            return JoinReply(None, ErrorCode.INVALID_GROUP_ID, member_id=member_id)
        if not self.settings.min_session_timeout_ms <= session_timeout_ms <= self.settings.max_session_timeout_ms:
            return JoinReply(None, ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id)
        error = self._coordinator_error()
        if error:
            return JoinReply(None, error, member_id=member_id)
        if self.share.is_share_group(group_id):
            return JoinReply(None, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id="")
        if self.consumer.is_consumer_group(group_id):
            if not self.consumer.is_empty(group_id):
                return await self._classic_join_consumer_group(
                    ClassicJoinRequest(group_id, member_id, group_instance_id, session_timeout_ms, rebalance_timeout_ms,
                                       protocol_type or "", list(protocols), require_known_member_id),
                    client_id=client_id or "", client_host=client_host or "")
            error = await self._drop_empty_consumer_group(group_id)
            if error:
                return JoinReply(None, error, member_id=member_id)
        group = self.groups.get(group_id)
        now = self.now_ms()
        if group is None:
            if member_id:
                return JoinReply(None, ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
            group = self.groups[group_id] = self._make_group(group_id, now)
        waiter = asyncio.get_running_loop().create_future()
        effects = group.join(member_id=member_id, group_instance_id=group_instance_id, client_id=client_id or "",
                             client_host=client_host or "", session_timeout_ms=session_timeout_ms,
                             rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type or "",
                             protocols=protocols, require_known_member_id=require_known_member_id, now_ms=now,
                             waiter=waiter, reason=reason)
        self._apply(group, effects)
        return await waiter

    async def sync_group(self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: list[tuple[str, bytes]]) -> SyncReply:
        if not self._valid_group_id(group_id, allow_empty=False):
            return SyncReply(None, ErrorCode.INVALID_GROUP_ID)
        error = self._coordinator_error()
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return SyncReply(None, ErrorCode.REBALANCE_IN_PROGRESS)  # Kafka: rejoin after the load
        if error:
            return SyncReply(None, error)
        if self.consumer.is_consumer_group(group_id):
            try:
                assignment = self.consumer.classic_sync(group_id, member_id, group_instance_id, generation_id,
                                                        protocol_type, protocol_name)
            except GroupError as exc:
                return SyncReply(None, exc.error_code)
            return SyncReply(None, ErrorCode.NONE, protocol_type=protocol_type, protocol_name=protocol_name,
                             assignment=assignment)
        group = self.groups.get(group_id)
        if group is None:
            return SyncReply(None, ErrorCode.UNKNOWN_MEMBER_ID)
        waiter = asyncio.get_running_loop().create_future()
        effects = group.sync(member_id=member_id, group_instance_id=group_instance_id, generation_id=generation_id,
                             protocol_type=protocol_type, protocol_name=protocol_name, assignments=assignments,
                             now_ms=self.now_ms(), waiter=waiter)
        self._apply(group, effects)
        return await waiter

    def heartbeat(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                  generation_id: int) -> ErrorCode:
        if not self._valid_group_id(group_id, allow_empty=False):
            return ErrorCode.INVALID_GROUP_ID
        error = self._coordinator_error()
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return ErrorCode.NONE  # Kafka answers blindly while loading
        if error:
            return error
        if self.consumer.is_consumer_group(group_id):
            try:
                return self.consumer.classic_heartbeat(group_id, member_id, group_instance_id, generation_id)
            except GroupError as exc:
                return exc.error_code
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        code = group.heartbeat(member_id=member_id, group_instance_id=group_instance_id, generation_id=generation_id,
                               now_ms=self.now_ms())
        return code

    def leave_group(self, *, group_id: str, members: list[tuple[str, str | None, str | None]]
                    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """LeaveGroup for (member_id, group_instance_id, reason) entries."""
        if not self._valid_group_id(group_id, allow_empty=False):
            return ErrorCode.INVALID_GROUP_ID, []
        error = self._coordinator_error()
        if error:
            return error, []
        if self.consumer.is_consumer_group(group_id):
            try:
                answers = self.consumer.classic_leave(group_id, [(m, i) for m, i, _ in members])
            except GroupError as exc:
                return exc.error_code, []
            return ErrorCode.NONE, [code for _, _, code in answers]
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(members)
        top, errors, effects = group.leave(members, self.now_ms())
        self._apply(group, effects)
        return top, errors

    # -- ConsumerGroupHeartbeat (KIP-848) ------------------------------------------------------------
    async def consumer_heartbeat(self, request: HeartbeatRequest, *, client_id: str,
                                 client_host: str) -> HeartbeatResult:
        """ConsumerGroupHeartbeat; raises :class:`GroupError` to refuse it. An empty classic group
        (or one that only holds committed offsets) becomes a consumer group on the first join, as
        in Kafka (``maybeDeleteEmptyClassicGroup``); its offsets stay."""
        error = self._coordinator_error()
        if error:
            raise GroupError(error)
        if self.share.is_share_group(request.group_id):
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {request.group_id} is not a consumer group.")
        group = self.groups.get(request.group_id)
        if group is not None and group.state not in (EMPTY, DEAD):
            return await self._upgrade_classic_group(group, request, client_id=client_id, client_host=client_host)
        if group is not None and group.state in (EMPTY, DEAD) and request.member_epoch == 0:
            now = self.now_ms()
            last = None
            if request.group_id in self.store.group_values:
                last = self.store.delete_group_metadata(request.group_id, now)
            group.mark_dead(now)
            del self.groups[request.group_id]
            logger.info("classic_group_converted", group=request.group_id, to=GROUP_TYPE_CONSUMER)
            await self.offsets.durable(last)
        return await self.consumer.heartbeat(request, client_id=client_id, client_host=client_host)

    def consumer_describe(self, group_id: str):
        """ConsumerGroupDescribe of one group; raises :class:`GroupError` (GROUP_ID_NOT_FOUND ...)."""
        error = self._coordinator_error()
        if error:
            raise GroupError(error)
        return self.consumer.describe(group_id)

    # -- online migration (group.consumer.migration.policy) ------------------------------------------
    async def _upgrade_classic_group(self, group: Group, request: HeartbeatRequest, *, client_id: str,
                                     client_host: str) -> HeartbeatResult:
        """A ConsumerGroupHeartbeat for a classic group with members: the consumer groups decide
        whether it upgrades (GROUP_ID_NOT_FOUND if not); when it does, the classic group's parked
        JoinGroup/SyncGroup answers get REBALANCE_IN_PROGRESS, its metadata is tombstoned before the
        consumer group's records, and it is gone from the classic groups."""
        image = ClassicGroupImage(
            group.group_id, group.generation_id, group.protocol_type, group.protocol_name,
            tuple(ClassicMember(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                m.session_timeout_ms, tuple((n, bytes(md)) for n, md in m.protocols), m.assignment)
                  for m in group.members.values()))
        tombstone: list[int | None] = []

        def drop_classic_group() -> None:
            now = self.now_ms()
            for m in group.members.values():
                if m.awaiting_join:
                    self._resolve(m.join_waiter, JoinReply(m.join_waiter, ErrorCode.REBALANCE_IN_PROGRESS,
                                                           member_id=m.member_id))
                if m.awaiting_sync:
                    self._resolve(m.sync_waiter, SyncReply(m.sync_waiter, ErrorCode.REBALANCE_IN_PROGRESS))
            if group.group_id in self.store.group_values:
                tombstone.append(self.store.delete_group_metadata(group.group_id, now))
            del self.groups[group.group_id]
            self._membership_version += 1
            logger.info("classic_group_converted", group=group.group_id, to=GROUP_TYPE_CONSUMER,
                        members=len(image.members), generation_id=group.generation_id)

        result = await self.consumer.heartbeat(request, client_id=client_id, client_host=client_host, classic=image,
                                               before_append=drop_classic_group)
        if tombstone:
            await self.offsets.durable(tombstone[0])
        return result

    async def _classic_join_consumer_group(self, request: ClassicJoinRequest, *, client_id: str,
                                           client_host: str) -> JoinReply:
        try:
            result = await self.consumer.classic_join(request, client_id=client_id, client_host=client_host)
        except GroupError as exc:
            return JoinReply(None, exc.error_code, member_id=request.member_id)
        return JoinReply(None, result.error, member_id=result.member_id, generation_id=result.generation_id,
                         protocol_type=result.protocol_type, protocol_name=result.protocol_name)

    def _classic_from_consumer(self, image: ClassicGroupImage, rebalance: bool) -> None:
        """A consumer group turned back into a classic group (its tombstones are appended): build the
        classic group, append its metadata record, and start a rebalance so its members rejoin."""
        now = self.now_ms()
        group = self._make_group(image.group_id, now)
        group.load(protocol_type=image.protocol_type, generation_id=image.generation_id,
                   protocol_name=image.protocol_name, leader_id=None, state_timestamp_ms=now,
                   members=[{"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                             "client_host": m.client_host, "rebalance_timeout_ms": m.rebalance_timeout_ms,
                             "session_timeout_ms": m.session_timeout_ms, "protocols": list(m.protocols),
                             "subscription": m.metadata(image.protocol_name), "assignment": m.assignment}
                            for m in image.members], now_ms=now)
        self.groups[image.group_id] = group
        self._store_group(group, StoreGroup())
        logger.info("consumer_group_converted", group=image.group_id, to=GROUP_TYPE_CLASSIC,
                    members=len(image.members), generation_id=image.generation_id)
        if rebalance:
            self._apply(group, group.rebalance(f"Downgrade group {image.group_id} from consumer to classic.", now))
        else:
            self._apply(group, [])

    async def _drop_empty_consumer_group(self, group_id: str) -> ErrorCode:
        """A classic JoinGroup names an empty consumer group: it is deleted (its offsets stay) and the
        id becomes a classic group, as in Kafka whatever the migration policy."""
        try:
            await self.consumer.delete_group(group_id)
        except GroupError as exc:
            return exc.error_code
        return ErrorCode.NONE

    # -- offsets ---------------------------------------------------------------------------------
    async def commit_offsets(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                             generation_id: int, offsets: list[CommitRequest], retention_time_ms: int = -1,
                             api_version: int = 9) -> list[ErrorCode]:
        """OffsetCommit: one error per entry of ``offsets``, answered once the commit is durable."""
        member_id = member_id or ""
        error = self._commit_refusal(group_id, member_id, generation_id, group_instance_id, allow_empty=True,
                                     api_version=api_version)
        if error:
            return [error] * len(offsets)
        now = self.now_ms()
        if self.consumer.is_consumer_group(group_id):
            return await self.offsets.store_offsets(group_id, offsets, retention_time_ms, now)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return [ErrorCode.ILLEGAL_GENERATION] * len(offsets)
            group = self.groups[group_id] = self._make_group(group_id, now)  # a simple consumer's group
        error = group.validate_offset_commit(member_id=member_id, group_instance_id=group_instance_id,
                                             generation_id=generation_id, now_ms=now)
        if error:
            return [error] * len(offsets)
        return await self.offsets.store_offsets(group_id, offsets, retention_time_ms, now)

    def _commit_refusal(self, group_id: str, member_id: str, generation_id: int, instance_id: str | None, *,
                        allow_empty: bool, **validation) -> ErrorCode:
        """What refuses a whole (transactional) offset commit before its group is looked at: an invalid
        group id, the coordinator's state, or a consumer group's refusal of the member and epoch."""
        if not self._valid_group_id(group_id, allow_empty=allow_empty):
            return ErrorCode.INVALID_GROUP_ID
        error = self._offsets_error(group_id)
        if not error and self.consumer.is_consumer_group(group_id):
            error = self.consumer.validate_offset_commit(group_id, member_id, generation_id, instance_id=instance_id,
                                                         **validation)
        return error

    async def txn_commit_offsets(self, *, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                                 group_instance_id: str | None, generation_id: int,
                                 offsets: list[CommitRequest]) -> list[ErrorCode]:
        """TxnOffsetCommit (Kafka ``handleTxnCommitOffsets``): validated like a commit, except that a
        producer-only commit (no member, generation -1) is accepted whatever the group's state; the
        offsets stay pending until the transaction's marker reaches ``__consumer_offsets``."""
        member_id = member_id or ""
        error = self._commit_refusal(group_id, member_id, generation_id, group_instance_id, allow_empty=False,
                                     transactional=True)
        if error:
            return [error] * len(offsets)
        now = self.now_ms()
        if self.consumer.is_consumer_group(group_id):
            return await self.offsets.store_offsets(group_id, offsets, -1, now,
                                                    producer=(producer_id, producer_epoch))
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = self._make_group(group_id, now)
        if group.state is DEAD:
            return [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(offsets)
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = group._validate_member(member_id, group_instance_id)
            if not error and generation_id != group.generation_id:
                error = ErrorCode.ILLEGAL_GENERATION
            if error:
                return [error] * len(offsets)
        return await self.offsets.store_offsets(group_id, offsets, -1, now, producer=(producer_id, producer_epoch))

    def offsets_partition_for(self, group_id: str) -> tuple[str, int]:
        """The ``__consumer_offsets`` partition holding the group (AddOffsetsToTxn adds it)."""
        return OFFSETS_TOPIC, 0

    def complete_txn_offsets(self, producer_id: int, commit: bool, partition: int) -> None:
        """A COMMIT/ABORT marker for ``producer_id`` is durable in ``__consumer_offsets-<partition>``."""
        self.offsets.complete_txn(producer_id, commit)

    def fetch_offsets(self, *, group_id: str, partitions: list[tuple[str, int]] | None,
                      require_stable: bool = False, member_id: str | None = None,
                      member_epoch: int = -1) -> tuple[ErrorCode, list[FetchedOffset]]:
        """OffsetFetch: ``partitions=None`` means every committed partition of the group; a
        consumer-protocol member (v9+) names itself and its epoch, which must be current."""
        if not self._valid_group_id(group_id, allow_empty=True):
            return ErrorCode.INVALID_GROUP_ID, []
        error = self._offsets_error(group_id)
        if not error and self.consumer.is_consumer_group(group_id) and (member_id is not None or member_epoch >= 0):
            error = self.consumer.validate_offset_fetch(group_id, member_id, member_epoch)
        if error:
            return error, [FetchedOffset(t, p, None) for t, p in (partitions or [])]
        return ErrorCode.NONE, self.offsets.fetch_offsets(group_id, partitions, require_stable)

    async def delete_offsets(self, *, group_id: str, partitions: list[tuple[str, int]]
                             ) -> tuple[ErrorCode, list[ErrorCode]]:
        """OffsetDelete (KIP-496): one error per partition, or a request-level error."""
        if not self._valid_group_id(group_id, allow_empty=True):
            return ErrorCode.INVALID_GROUP_ID, []
        error = self._offsets_error(group_id)
        if error:
            return error, []
        group = self.groups.get(group_id)
        subscribed: frozenset[str] | None = frozenset()
        if self.consumer.is_consumer_group(group_id):
            # Kafka's ConsumerGroup: any state; a topic its members subscribe to is refused per partition
            subscribed = self.consumer.manager.subscribed_topics(group_id)
        elif group is None or group.state is DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        elif group.state is not EMPTY:
            if not group.is_consumer_group():
                return ErrorCode.NON_EMPTY_GROUP, []
            subscribed = group.subscribed_topics()
        errors: list[ErrorCode] = []
        eligible: list[tuple[str, int]] = []
        for topic, partition in partitions:
            count = self.offsets.partitions_of(topic)
            if count is None or not 0 <= partition < count:
                errors.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif subscribed is None or topic in subscribed:
                errors.append(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
            else:
                eligible.append((topic, partition))
                errors.append(ErrorCode.NONE)
        if eligible:
            try:
                await self.offsets.delete_offsets(group_id, eligible)
            except Exception as exc:
                logger.error("offset_delete_failed", group=group_id, error=str(exc))
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
            logger.info("offsets_deleted", group=group_id, partitions=len(eligible))
        return ErrorCode.NONE, errors

    # -- groups ------------------------------------------------------------------------------------
    def describe_group(self, group_id: str | None) -> tuple[ErrorCode, dict]:
        """DescribeGroups (the classic view): an unknown group, or a consumer-protocol one, is
        GROUP_ID_NOT_FOUND with Kafka's message (v6 answers it; older versions a Dead group)."""
        dead = {"group_state": DEAD.value, "protocol_type": "", "protocol_data": "", "members": []}
        if not self._valid_group_id(group_id, allow_empty=True):
            return ErrorCode.INVALID_GROUP_ID, dead
        error = self._coordinator_error()
        if error:
            return error, dead
        if self.consumer.is_consumer_group(group_id) or self.share.is_share_group(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND, {**dead, "error_message": f"Group {group_id} is not a classic group."}
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, {**dead, "error_message": f"Group {group_id} not found."}
        return ErrorCode.NONE, group.describe()

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()
                    ) -> tuple[ErrorCode, list[dict]]:
        error = self._coordinator_error()
        if error:
            return error, []
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        rows = []
        if not wanted_types or GROUP_TYPE_CLASSIC in wanted_types:
            for group_id, group in self.groups.items():
                if group.state is DEAD:
                    continue
                if wanted_states and group.state.value.lower() not in wanted_states:
                    continue
                rows.append({"group_id": group_id, "protocol_type": group.protocol_type or "",
                             "group_state": group.state.value, "group_type": GROUP_TYPE_CLASSIC})
        for kind, listed in ((GROUP_TYPE_CONSUMER, self.consumer.list_groups),
                             (GROUP_TYPE_SHARE, self.share.list_groups)):
            if not wanted_types or kind in wanted_types:
                rows += [{"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state,
                          "group_type": g.group_type} for g in listed(wanted_states)]
        return ErrorCode.NONE, sorted(rows, key=lambda r: r["group_id"])

    async def delete_groups(self, group_ids: list[str | None]) -> list[ErrorCode]:
        error = self._coordinator_error()
        if error:
            return [error] * len(group_ids)
        results: list[ErrorCode] = []
        last = None
        now = self.now_ms()
        for group_id in group_ids:
            if not self._valid_group_id(group_id, allow_empty=True):
                results.append(ErrorCode.INVALID_GROUP_ID)
                continue
            if self.consumer.is_consumer_group(group_id):
                results.append(await self._delete_consumer_group(group_id, now))
                continue
            if self.share.is_share_group(group_id):
                results.append(await self.share.delete(group_id))
                continue
            group = self.groups.get(group_id)
            if group is None or group.state is DEAD:
                results.append(ErrorCode.GROUP_ID_NOT_FOUND)
            elif group.state is not EMPTY:
                results.append(ErrorCode.NON_EMPTY_GROUP)
            else:
                try:
                    written = self.offsets.delete_group(group_id, now)
                except Exception as exc:
                    logger.error("group_delete_failed", group=group_id, error=str(exc))
                    results.append(ErrorCode.COORDINATOR_NOT_AVAILABLE)
                    continue
                last = written if written is not None else last
                group.mark_dead(now)
                del self.groups[group_id]
                logger.info("group_deleted", group=group_id)
                results.append(ErrorCode.NONE)
        if last is not None:
            try:
                await self.offsets.durable(last)
            except Exception as exc:
                logger.error("group_delete_flush_failed", error=str(exc))
        return results

    async def _delete_consumer_group(self, group_id: str, now: int) -> ErrorCode:
        async def deletion() -> None:
            await self.consumer.delete_group(group_id)
            await self.offsets.durable(self.offsets.delete_group(group_id, now))
        return await deletion_answer(deletion(), group_id, GROUP_TYPE_CONSUMER)

    async def expire_offsets(self, now_ms: int | None = None) -> int:
        """One pass of Kafka's ``cleanupGroupMetadata``; returns how many offsets expired.

        The manager expires offsets and deletes the records of Empty groups left
        without any; those groups are marked Dead here in the same step.
        """
        if not self.active:
            return 0
        now = self.now_ms() if now_ms is None else now_ms
        expired_total, last, dead = self.offsets.expire_pass(self.groups, now)
        for group_id in dead:
            group = self.groups.pop(group_id)
            group.mark_dead(now)
            logger.info("group_expired", group=group_id, generation_id=group.generation_id)
        if last is not None:
            await self.offsets.durable(last)
        await self.offsets.maybe_snapshot()
        return expired_total

    def remove_offsets_of_topic(self, topic: str) -> int:
        """Forget every committed offset of a deleted topic (Kafka ``onPartitionsDeleted``)."""
        return self.offsets.remove_offsets_of_topic(topic)

    # -- consumed retention and lag ---------------------------------------------------------------------
    def consumed_upto(self, topic: str, partition: int, log_start_offset: int) -> ConsumedUpto:
        """Input of the two-level retention: see :meth:`GroupMetadataManager.consumed_upto`.

        ``offset=None`` also when the coordinator is not running.
        """
        if not self.active:
            return ConsumedUpto(None, None)
        return self.offsets.consumed_upto(topic, partition, log_start_offset, self.groups,
                                          (self._membership_version, self.consumer.record_log.version),
                                          self.consumer.subscribed_groups)

    def lag(self, group_id: str, now_ms: int | None = None) -> list[LagRow]:
        """Per committed partition: committed offset, log end offset, offset lag and time lag."""
        return self.offsets.lag(group_id, now_ms)

    def group_ids(self) -> list[str]:
        return sorted(set(self.groups) | set(self.consumer.manager.group_ids()) | set(self.share.group_ids()))

    def topics_changed(self) -> None:
        """A topic was created, deleted or given partitions (consumer groups re-resolve)."""
        if self.active:
            try:
                self.consumer.topics_changed()
            except GroupError:
                pass  # logged by the consumer groups
