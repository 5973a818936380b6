"""Share groups (KIP-932) on the event loop: membership, assignment and settings of every share group.

:class:`~broker.groups.share.manager.ShareGroupManager` is the pure state machine: it takes
``now_ms``, returns the ``__consumer_offsets`` records (types 9-15) each change wrote, and says
when its next session deadline is. :class:`ShareGroups` gives it what it needs of the daemon, as
:class:`~broker.groups.consumer_groups.ConsumerGroups` does for the consumer protocol:

* **Durability.** Records go to the offsets store (``append_coordinator_records``) in the order
  the manager decided them, and a heartbeat is answered once they are on disk. The store
  replays them at start (its ``replay_share`` hook) and keeps the live ones in its snapshots.
* **Time.** One task sleeps until the next session deadline and polls the manager; a member
  whose session ran out is fenced and its tombstones appended.
* **Departures.** Every member that leaves (epoch -1) or is fenced is reported to the departure
  listeners, ``fn(group_id, member_id)``, once its records are appended: the fetch side releases
  the records it held. Deleted groups are reported to the deletion listeners, ``fn(group_id)``.
* **Settings.** :meth:`settings` resolves a group's GROUP configs over the broker defaults on
  each call (:func:`config.share.share_group_settings`).

A storage failure while appending answers COORDINATOR_NOT_AVAILABLE and is logged; memory is
then ahead of the disk until the next restart replays what the disk holds (as for consumer groups).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping

import structlog

from sundial.config.group import resolve_group_config
from sundial.config.share import ShareGroupSettings, share_group_settings
from sundial.protocol.errors import ErrorCode
from sundial.records.timestamps import wall_clock_ms

from .group_log import GroupRecordLog, deletion_answer
from .modern.errors import GroupError
from .share.group import ShareGroupMember
from .share.manager import ListedShareGroup, ShareGroupDescription, ShareGroupManager, ShareHeartbeatRequest, \
    ShareHeartbeatResult
from .share.records import ShareGroupMemberMetadataKey, ShareGroupMetadataKey, ShareRecord, encode_record
from .offset_manager import GroupMetadataManager

logger = structlog.get_logger(__name__)

GROUP_TYPE_SHARE = "share"


class ShareGroups:
    """The share groups of this broker: the manager, its timer, its records and its listeners."""

    def __init__(self, config, offsets: GroupMetadataManager, *, topics: Callable[[], Mapping],
                 group_configs=None, is_other_group: Callable[[str], bool] = lambda group_id: False,
                 now_ms: Callable[[], int] = wall_clock_ms,
                 availability: Callable[[], ErrorCode] = lambda: ErrorCode.NONE) -> None:
        self.now_ms = now_ms
        #: The coordinator's state: NONE, COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE.
        self._availability = availability
        self._coordinator_config = config.group_coordinator
        self._share_config = config.group_coordinator.share
        self._group_configs = group_configs
        self._topics = topics
        self.manager = ShareGroupManager(max_size=self._share_config.max_size, topics=topics,
                                         timings=self._timings, is_other_group=is_other_group)
        self._departure_listeners: list[Callable[[str, str], None]] = []
        self._deletion_listeners: list[Callable[[str], None]] = []
        #: The records' writer and timer, with its counters (members fenced by their session timeout).
        self.record_log = GroupRecordLog(
            "share_group", offsets, encode_record, now_ms, manager=self.manager, epoch_key=ShareGroupMetadataKey,
            member_key=ShareGroupMemberMetadataKey, after_append=self._announce_departures)
        self.replay_errors = 0

    @property
    def fenced_members(self) -> int:
        """Members fenced by their session timeout (for metrics)."""
        return self.record_log.fenced_members

    # -- settings -------------------------------------------------------------------------------
    def _group_config(self, group_id: str):
        if self._group_configs is not None:
            return self._group_configs.config(group_id)
        return resolve_group_config({}, self._coordinator_config)[0]

    def _timings(self, group_id: str) -> tuple[int, int]:
        config = self._group_config(group_id)
        return config.share_session_timeout_ms, config.share_heartbeat_interval_ms

    def settings(self, group_id: str) -> ShareGroupSettings:
        """The group's share settings: its GROUP configs over the broker defaults, read anew."""
        return share_group_settings(self._group_config(group_id), self._share_config)

    # -- lifecycle ------------------------------------------------------------------------------
    def replay(self, record: ShareRecord) -> None:
        """The offsets store's ``replay_share`` hook: one record read from the log at start."""
        try:
            self.manager.replay(record)
        except Exception as exc:     # a record that contradicts the state: skip it, keep loading
            self.replay_errors += 1
            logger.warning("share_group_record_skipped", group=record.key.group_id, reason=str(exc))

    def loaded(self) -> None:
        self.manager.loaded(self.now_ms())
        logger.info("share_groups_loaded", groups=len(self.manager.group_ids()), skipped_records=self.replay_errors)

    def start_timers(self) -> None:
        self.record_log.start_timers()

    async def stop(self) -> None:
        await self.record_log.stop()

    # -- listeners (the fetch side and the share coordinator's store) ---------------------------
    def add_departure_listener(self, fn: Callable[[str, str], None]) -> None:
        """``fn(group_id, member_id)`` whenever a member leaves or is fenced."""
        self._departure_listeners.append(fn)

    def add_deletion_listener(self, fn: Callable[[str], None]) -> None:
        """``fn(group_id)`` when a share group is deleted (DeleteGroups)."""
        self._deletion_listeners.append(fn)

    # -- requests -------------------------------------------------------------------------------
    async def heartbeat(self, request: ShareHeartbeatRequest, *, client_id: str,
                        client_host: str) -> ShareHeartbeatResult:
        """ShareGroupHeartbeat; raises :class:`GroupError` (Kafka's code and message) to refuse it."""
        self._check_available()
        result, records = self.manager.heartbeat(request, self.now_ms(), client_id=client_id,
                                                 client_host=client_host)
        await self.record_log.persist(records)
        return result

    def describe(self, group_id: str) -> ShareGroupDescription:
        """ShareGroupDescribe of one group; raises GroupError (GROUP_ID_NOT_FOUND ...)."""
        self._check_available()
        return self.manager.describe(group_id)

    def _check_available(self) -> None:
        error = self._availability()
        if error:
            raise GroupError(error)

    def list_groups(self, states: Iterable[str] = ()) -> list[ListedShareGroup]:
        return self.manager.list_groups(states)

    async def ensure_group(self, group_id: str) -> None:
        """Make ``group_id`` an empty share group unless it is one (durable on return); raises
        GroupError (GROUP_ID_NOT_FOUND) when it names a consumer or classic group."""
        self._check_available()
        await self.record_log.persist(self.manager.create_group(group_id))

    async def delete_group(self, group_id: str) -> None:
        """Tombstones of the group's records; raises GroupError (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND)."""
        await self.record_log.persist(self.manager.delete_group(group_id))
        for fn in self._deletion_listeners:
            try:
                fn(group_id)
            except Exception:
                logger.exception("share_group_deletion_listener_failed", group=group_id)

    async def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of one share group, its error code (logged)."""
        return await deletion_answer(self.delete_group(group_id), group_id, GROUP_TYPE_SHARE)

    # -- reads (the fetch side, describe, retention) ---------------------------------------------
    def member_assignment(self, group_id: str, member_id: str) -> frozenset[tuple[str, int]] | None:
        """The (topic name, partition) pairs the member was last given; None when no such member."""
        member = self.manager.member(group_id, member_id)
        if member is None:
            return None
        names = {tid: name for name, (tid, _) in self._topics().items()}
        return frozenset((names[tid], p) for tid, ps in member.assigned.items() if tid in names for p in ps)

    def group_ids(self) -> list[str]:
        return self.manager.group_ids()

    def is_share_group(self, group_id: str) -> bool:
        return self.manager.is_share_group(group_id)

    def subscribed_topics(self, group_id: str) -> set[str]:
        return self.manager.subscribed_topics(group_id)

    def members(self, group_id: str) -> list[ShareGroupMember]:
        """The group's members (empty for no such group)."""
        if not self.manager.is_share_group(group_id):
            return []
        return sorted(self.manager.group(group_id).members.values(), key=lambda m: m.member_id)

    def is_empty(self, group_id: str) -> bool:
        """No members (True also for a group that does not exist)."""
        return not self.members(group_id)

    def subscribed_groups(self) -> dict[str, frozenset[str]]:
        """group id → topic names its members subscribe to."""
        return {gid: frozenset(self.manager.subscribed_topics(gid)) for gid in self.manager.group_ids()}

    def topic_id(self, topic: str) -> uuid.UUID | None:
        entry = self._topics().get(topic)
        return None if entry is None else entry[0]

    # -- plumbing -------------------------------------------------------------------------------
    def _announce_departures(self) -> None:
        for group_id, member_id in self.manager.take_departures():
            for fn in self._departure_listeners:
                try:
                    fn(group_id, member_id)
                except Exception:
                    logger.exception("share_group_departure_listener_failed", group=group_id, member=member_id)

    def fire_timers(self, now_ms: int | None = None) -> list[ShareRecord]:
        """Poll the manager (tests call this with their own clock); returns the records written."""
        return self.record_log.fire_timers(now_ms)
