"""The consumer-protocol group coordinator as a pure state machine (Kafka ``GroupMetadataManager``,
the consumer-group half).

:class:`ConsumerGroupManager` owns every consumer-protocol (KIP-848) group of the broker. It
does no I/O, starts no task and reads no clock: every operation takes ``now_ms`` and returns
the ``__consumer_offsets`` records it wrote, which the caller persists (records type 3-8 and
16, :mod:`.records`). Rules of this package:

1. Every change is a list of records, and the state changes only by replaying them
   (:mod:`.replay`), the same code that loads the log at start (:meth:`~ConsumerGroupManager.replay`
   for each record, then :meth:`~ConsumerGroupManager.loaded`): what was written is what the
   state is. An operation that is refused (:class:`GroupError`) writes and changes nothing.
2. Time is a deadline: ``poll(now_ms)`` fires the session and rebalance deadlines that passed
   and the periodic regex refresh; ``next_deadline_ms()`` says when to call it next.
3. The broker is injected: its topics (``topics()`` → name → (topic id, partitions)), the
   per-group session timeout and heartbeat interval (``group_settings(group_id)``, the GROUP
   config resource over the broker defaults), and whether an id names a classic group
   (``is_classic_group``; such a group id gets GROUP_ID_NOT_FOUND unless the caller hands the
   classic group over for an online upgrade, :mod:`.migration`).
4. Online migration (``group.consumer.migration.policy``): a join may carry the image of a
   classic group with members, which becomes this consumer group first (upgrade); classic
   members then use JoinGroup/SyncGroup/Heartbeat/LeaveGroup through the ``classic_*`` methods
   (:mod:`.classic`); when the last consumer-protocol member goes, the group may turn back into a
   classic group (downgrade): its tombstones are among the records returned, and the image of
   the classic group to create waits in :meth:`ConsumerGroupManager.take_downgrades`.

The heartbeat itself is :mod:`.heartbeat`; reconciliation :mod:`.reconcile`; the target
assignment :mod:`.target`; regexes :mod:`.regex`; topic changes :mod:`.refresh`; what
describe and the offset APIs see :mod:`.views`.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterable, Mapping

import structlog

from sundial.protocol.errors import ErrorCode

from . import record_helpers as rec
from .assignors import ASSIGNORS, ServerAssignor
from .deadlines import Deadlines, TimerKind
from .errors import GroupError, heartbeat_group
from .group import ConsumerGroup, ConsumerGroupState
from . import classic as cl
from .heartbeat import Change, Context, fence, member_heartbeat, member_leave, sends_assignment
from .member import LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH, MemberState
from .migration import ClassicGroupImage, classic_metadata, downgrade, downgrade_allowed, upgrade_records, upgrade_refusal
from .records import CoordinatorRecord
from .refresh import refresh_group, regex_refresh_due_ms
from .replay import replay
from .requests import HeartbeatRequest, HeartbeatResult, validate
from .settings import ConsumerGroupSettings
from .topics import TopicImage
from .views import GroupDescription, ListedGroup, describe, listed, validate_offset_commit, validate_offset_fetch

log = structlog.get_logger(__name__)

TopicsView = Callable[[], Mapping[str, tuple[uuid.UUID, int]]]
#: group id → (session timeout ms, heartbeat interval ms) in force for that group.
GroupSettings = Callable[[str], tuple[int, int]]


def random_member_id() -> str:
    """A member id as Kafka generates one (``Uuid.randomUuid().toString()``: URL-safe base64 of
    16 random bytes, never starting with '-')."""
    while True:
        member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not member_id.startswith("-"):
            return member_id


class ConsumerGroupManager:
    def __init__(self, settings: ConsumerGroupSettings, topics: TopicsView, group_settings: GroupSettings, *,
                 is_classic_group: Callable[[str], bool] = lambda group_id: False,
                 assignors: Mapping[str, ServerAssignor] | None = None,
                 new_member_id: Callable[[], str] = random_member_id) -> None:
        available = ASSIGNORS if assignors is None else assignors
        missing = [name for name in settings.assignors if name not in available]
        if not settings.assignors or missing:
            raise ValueError(f"group.consumer.assignors names unknown assignors: {missing or '(none given)'}")
        self._settings = settings
        self._assignors = {name: available[name] for name in settings.assignors}
        self._topics = topics
        self._group_settings = group_settings
        self._is_classic_group = is_classic_group
        self._new_member_id = new_member_id
        self._groups: dict[str, ConsumerGroup] = {}
        self._deadlines = Deadlines()
        self._topics_version = 0
        #: Groups loaded from the log and not yet checked against the topics (see loaded()).
        self._check_after_load: set[str] = set()
        self._loaded_ms = 0
        #: Consumer groups turned back into classic groups, for the caller: (image, rebalance).
        self._downgrades: list[tuple[ClassicGroupImage, bool]] = []

    # -- ConsumerGroupHeartbeat ---------------------------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest, now_ms: int, *, client_id: str, client_host: str,
                  classic: ClassicGroupImage | None = None) -> tuple[HeartbeatResult, list[CoordinatorRecord]]:
        """Serve one ConsumerGroupHeartbeat; raises :class:`GroupError` to refuse it. ``classic``:
        the classic group with members the id names now, which a join upgrades when allowed."""
        validate(request, self._settings.assignors)
        ctx = self._context(now_ms)
        group_id = request.group_id
        if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            group = self._existing_group(group_id)
            member, change = member_leave(ctx, group, request)
            if request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                records = self._maybe_downgrade(ctx, group, member.member_id, now_ms)
                if records is not None:
                    return HeartbeatResult(member.member_id if request.instance_id is not None else request.member_id,
                                           request.member_epoch, 0), records
            self._apply(group_id, change, now_ms)
            member_id = member.member_id if request.instance_id is not None else request.member_id
            log.info("consumer group member left", group_id=group_id, member_id=member_id,
                     member_epoch=request.member_epoch)
            return HeartbeatResult(member_id, request.member_epoch, 0), change.records

        joining = request.member_epoch == 0
        upgrade: list[CoordinatorRecord] = []
        if classic is not None:
            group, upgrade = self._upgraded(ctx, classic, joining)
        else:
            # a new group is materialised by replaying the change
            group = heartbeat_group(self._groups, group_id, kind="consumer", joining=joining,
                                    other_type=self._is_classic_group(group_id), new=ConsumerGroup)
        member_id = request.member_id or self._new_member_id()
        is_new = member_id not in group.members
        before, change, after = member_heartbeat(ctx, group, request, member_id, client_id, client_host)
        if upgrade:
            for record in upgrade:
                replay(self._groups, record)
            for member in self._groups[group_id].members.values():
                self._schedule_session(group_id, member.member_id, now_ms)
            log.info("classic group upgraded to a consumer group", group_id=group_id,
                     members=len(classic.members) if classic else 0, group_epoch=classic.generation_id if classic else 0)
            change.records[:0] = upgrade
            for record in change.records[len(upgrade):]:
                replay(self._groups, record)
            self._apply(group_id, change, now_ms, replayed=True)
        else:
            self._apply(group_id, change, now_ms)
        if is_new:
            log.info("consumer group member joined", group_id=group_id, member_id=member_id,
                     instance_id=request.instance_id)
        _, heartbeat_interval_ms = self._group_settings(group_id)
        assignment = after.assigned if sends_assignment(request, before, after) else None
        return HeartbeatResult(after.member_id, after.member_epoch, heartbeat_interval_ms, assignment), change.records

    # -- timers and topics --------------------------------------------------------------------------

    def poll(self, now_ms: int) -> list[CoordinatorRecord]:
        """Check the groups just loaded against the topics, fence the members whose session or
        rebalance deadline passed, refresh the regexes due."""
        records: list[CoordinatorRecord] = []
        ctx = self._context(now_ms)
        records += self._refresh(ctx, self._check_after_load, rewrite_regexes=False)
        self._check_after_load = set()
        while (expired := self._deadlines.pop_expired(now_ms)) is not None:
            group = self._groups.get(expired.group_id)
            member = group.members.get(expired.member_id) if group is not None else None
            if member is None:
                continue
            if expired.kind is TimerKind.REBALANCE and member.member_epoch != expired.member_epoch:
                continue
            reason = {TimerKind.SESSION: "the member session expired",
                      TimerKind.JOIN: "the classic member failed to join within the rebalance timeout",
                      TimerKind.SYNC: "the classic member failed to sync within the rebalance timeout",
                      }.get(expired.kind, f"it failed to transition from epoch {expired.member_epoch} "
                                          "within its rebalance timeout")
            log.info("consumer group member fenced", group_id=group.group_id, member_id=member.member_id,
                     reason=reason)
            downgraded = self._maybe_downgrade(ctx, group, member.member_id, now_ms)
            if downgraded is not None:
                records += downgraded
                continue
            change = fence(ctx, group, [member])
            self._apply(group.group_id, change, now_ms)
            records += change.records
        interval_ms = self._settings.regex_refresh_interval_ms
        for group in list(self._groups.values()):
            due_ms = regex_refresh_due_ms(group, interval_ms)
            if due_ms is not None and due_ms <= now_ms:
                change = refresh_group(ctx, group, rewrite_regexes=True)
                self._apply(group.group_id, change, now_ms)
                records += change.records
        return records

    def next_deadline_ms(self) -> int | None:
        """When :meth:`poll` has something to do next (None: nothing scheduled)."""
        candidates = [self._deadlines.next_deadline_ms(), self._loaded_ms if self._check_after_load else None]
        interval_ms = self._settings.regex_refresh_interval_ms
        candidates += [regex_refresh_due_ms(group, interval_ms) for group in self._groups.values()]
        due = [c for c in candidates if c is not None]
        return min(due) if due else None

    def topics_changed(self, now_ms: int) -> list[CoordinatorRecord]:
        """Topics were created, deleted or given partitions: re-resolve every group's regexes and
        re-hash its subscribed topics; a group that moved gets a new group epoch."""
        self._topics_version += 1
        self._check_after_load = set()
        return self._refresh(self._context(now_ms), list(self._groups), rewrite_regexes=False)

    # -- the log --------------------------------------------------------------------------------------

    def replay(self, record: CoordinatorRecord) -> None:
        """Apply a record read from ``__consumer_offsets`` (at load); raises :class:`.replay.ReplayError`
        for a record that cannot follow the ones before it."""
        replay(self._groups, record)
        version = getattr(record.value, "version", None)
        if version is not None:
            self._topics_version = max(self._topics_version, version)

    def loaded(self, now_ms: int) -> None:
        """The log is replayed: give every member a session deadline, and a rebalance deadline to
        each member that must still revoke (Kafka ``onLoaded``). The topics may have changed while
        the broker was down: every group is checked against them by the next :meth:`poll`
        (:meth:`next_deadline_ms` answers ``now_ms`` until then), whose records the caller
        persists as any other (Kafka: a loaded group's metadata counts as expired, and its next
        heartbeat checks it)."""
        self._check_after_load = {group_id for group_id, group in self._groups.items() if group.members}
        self._loaded_ms = now_ms
        for group in self._groups.values():
            for member in group.members.values():
                self._schedule_session(group.group_id, member.member_id, now_ms)
                if member.state is MemberState.UNREVOKED_PARTITIONS and not member.uses_classic_protocol:
                    self._deadlines.schedule(group.group_id, member.member_id, TimerKind.REBALANCE,
                                             now_ms + member.rebalance_timeout_ms, member.member_epoch)

    # -- reads ----------------------------------------------------------------------------------------

    def group_type(self, group_id: str) -> str | None:
        """"consumer" for a consumer-protocol group, None when this manager has no such group."""
        return "consumer" if group_id in self._groups else None

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    def group(self, group_id: str) -> ConsumerGroup:
        """The group itself, read-only by convention (tests and tools); GROUP_ID_NOT_FOUND if absent."""
        return self._existing_group(group_id)

    def describe(self, group_id: str) -> GroupDescription:
        """ConsumerGroupDescribe of one group; GROUP_ID_NOT_FOUND for no such consumer group."""
        return describe(self._existing_group(group_id), TopicImage(self._topics()), self._settings.assignors[0])

    def list_groups(self, states: Iterable[str] = ()) -> list[ListedGroup]:
        """ListGroups: every group, or those in one of ``states`` (case-insensitive, as Kafka)."""
        wanted = {s.strip().lower() for s in states}
        return [listed(g) for g in self._groups.values() if not wanted or g.state.value.lower() in wanted]

    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int, *,
                               instance_id: str | None = None, transactional: bool = False,
                               api_version: int = 9) -> None:
        """Raise :class:`GroupError` unless an (Txn)OffsetCommit to this group may go ahead (see
        :func:`.views.validate_offset_commit`); GROUP_ID_NOT_FOUND when it is not a consumer group."""
        validate_offset_commit(self._existing_group(group_id), member_id, member_epoch, instance_id=instance_id,
                               transactional=transactional, api_version=api_version)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> None:
        validate_offset_fetch(self._existing_group(group_id), member_id, member_epoch)

    def subscribed_topics(self, group_id: str) -> frozenset[str]:
        """The topic names a group consumes (by name or through a regex): for consumed-log retention."""
        group = self._groups.get(group_id)
        return frozenset(group.subscribed_topic_counts()) if group is not None else frozenset()

    def groups_subscribed_to(self, topic_name: str) -> frozenset[str]:
        return frozenset(g.group_id for g in self._groups.values() if topic_name in g.subscribed_topic_counts())

    # -- DeleteGroups -----------------------------------------------------------------------------------

    def delete_group(self, group_id: str) -> list[CoordinatorRecord]:
        """The tombstones deleting an empty group (Kafka ``ConsumerGroup.createGroupTombstoneRecords``);
        NON_EMPTY_GROUP while it has members (a static member gone with epoch -2 counts)."""
        group = self._existing_group(group_id)
        if group.state is not ConsumerGroupState.EMPTY:
            raise GroupError(ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
        records: list[CoordinatorRecord] = []
        for member_id in group.targets:
            records.append(rec.target_assignment_tombstone(group_id, member_id))
        records.append(rec.target_assignment_epoch_tombstone(group_id))
        records.extend(rec.regular_expression_tombstone(group_id, regex) for regex in group.resolved_regexes)
        records.append(rec.partition_metadata_tombstone(group_id))
        records.append(rec.group_epoch_tombstone(group_id))
        for record in records:
            replay(self._groups, record)
        self._deadlines.cancel_group(group_id)
        log.info("consumer group deleted", group_id=group_id)
        return records

    # -- internals --------------------------------------------------------------------------------------

    def _context(self, now_ms: int) -> Context:
        return Context(TopicImage(self._topics()), self._settings, self._assignors, now_ms, self._topics_version)

    def _existing_group(self, group_id: str) -> ConsumerGroup:
        if self._is_classic_group(group_id):
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        group = self._groups.get(group_id)
        if group is None:
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        return group

    def _refresh(self, ctx: Context, group_ids: Iterable[str], *, rewrite_regexes: bool) -> list[CoordinatorRecord]:
        records: list[CoordinatorRecord] = []
        for group_id in sorted(group_ids):
            group = self._groups.get(group_id)
            if group is not None and group.members:
                change = refresh_group(ctx, group, rewrite_regexes=rewrite_regexes)
                self._apply(group_id, change, ctx.now_ms)
                records += change.records
        return records

    def _apply(self, group_id: str, change: Change, now_ms: int, *, replayed: bool = False) -> None:
        if not replayed:
            for record in change.records:
                replay(self._groups, record)
        deadlines = self._deadlines
        for member_id in change.removed:
            deadlines.cancel(group_id, member_id)
        if change.session is not None:
            self._schedule_session(group_id, change.session, now_ms)
        if change.arm_rebalance is not None:
            member_id, member_epoch, timeout_ms = change.arm_rebalance
            deadlines.schedule(group_id, member_id, TimerKind.REBALANCE, now_ms + timeout_ms, member_epoch)
        if change.disarm_rebalance is not None:
            deadlines.cancel(group_id, change.disarm_rebalance, TimerKind.REBALANCE)

    def _schedule_session(self, group_id: str, member_id: str, now_ms: int) -> None:
        """(Re)start a member's session: the group's session timeout, or a classic member's own."""
        group = self._groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is not None and member.classic is not None:
            timeout_ms = member.classic.session_timeout_ms
        else:
            timeout_ms, _ = self._group_settings(group_id)
        self._deadlines.schedule(group_id, member_id, TimerKind.SESSION, now_ms + timeout_ms)

    def _upgraded(self, ctx: Context, classic: ClassicGroupImage, joining: bool
                  ) -> tuple[ConsumerGroup, list[CoordinatorRecord]]:
        """The consumer group a classic group with members becomes, not yet applied, and its records;
        GROUP_ID_NOT_FOUND when the policy or the group does not allow it (Kafka
        ``getOrMaybeCreateConsumerGroup``)."""
        group_id = classic.group_id
        refusal = upgrade_refusal(self._settings, classic) if joining else "the member is not joining"
        if refusal is not None:
            log.info("classic group not upgraded", group_id=group_id, reason=refusal)
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        records = upgrade_records(classic, ctx.image)
        scratch: dict[str, ConsumerGroup] = {}
        for record in records:
            replay(scratch, record)
        return scratch[group_id], records

    def _maybe_downgrade(self, ctx: Context, group: ConsumerGroup, leaving_member_id: str | None, now_ms: int, *,
                         rebalance: bool = True) -> list[CoordinatorRecord] | None:
        """When ``leaving_member_id`` is the last consumer-protocol member and the policy allows it,
        the consumer group's tombstones (applied), its classic image queued for the caller."""
        if leaving_member_id is not None and not downgrade_allowed(self._settings, group, leaving_member_id):
            return None
        records, image = downgrade(group, leaving_member_id, ctx.image)
        for record in records:
            replay(self._groups, record)
        self._deadlines.cancel_group(group.group_id)
        self._downgrades.append((image, rebalance))
        log.info("consumer group downgraded to a classic group", group_id=group.group_id,
                 members=len(image.members), generation_id=image.generation_id, protocol=image.protocol_name)
        return records

    def take_downgrades(self) -> list[tuple[ClassicGroupImage, bool]]:
        """The consumer groups that became classic groups since the last call: each image, and
        whether the classic group must start a rebalance (not when a joining classic static member
        replaced the last consumer-protocol member). The caller creates them."""
        out, self._downgrades = self._downgrades, []
        return out

    # -- classic members inside a consumer group -------------------------------------------------------

    def classic_join(self, request: cl.ClassicJoinRequest, now_ms: int, *, client_id: str, client_host: str
                     ) -> tuple[cl.ClassicJoinResult, list[CoordinatorRecord]]:
        """JoinGroup of a classic member into this (non-empty) consumer group."""
        ctx = self._context(now_ms)
        group_id = request.group_id
        group = self._existing_group(group_id)
        member_id = request.member_id or self._new_member_id()
        cl.check_join(group, request, member_id, self._settings.max_size)
        if not request.member_id and request.instance_id is None and request.require_known_member_id:
            log.info("classic member asked for its member id", group_id=group_id, member_id=member_id)
            return cl.ClassicJoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id), []
        heartbeat = cl.join_as_heartbeat(request, member_id, ctx.image)
        replaced = group.static_member_id(request.instance_id)
        downgrading = (replaced is not None and replaced != member_id
                       and downgrade_allowed(self._settings, group, replaced, replaced=True))
        is_new = member_id not in group.members
        _, change, after = member_heartbeat(ctx, group, heartbeat, member_id, client_id, client_host,
                                            classic=classic_metadata(request.session_timeout_ms, request.protocols))
        self._apply(group_id, change, now_ms)
        if is_new:
            log.info("classic member joined the consumer group", group_id=group_id, member_id=member_id,
                     instance_id=request.instance_id)
        records = list(change.records)
        if downgrading:
            records += self._maybe_downgrade(ctx, self._groups[group_id], None, now_ms, rebalance=False) or []
        else:
            self._deadlines.cancel(group_id, member_id, TimerKind.JOIN)
            self._deadlines.schedule(group_id, member_id, TimerKind.SYNC, now_ms + request.rebalance_timeout_ms)
        return cl.ClassicJoinResult(ErrorCode.NONE, after.member_id, after.member_epoch, "consumer",
                                    cl.protocol_name(after)), records

    def classic_sync(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                     protocol_type: str | None, protocol_name: str | None, now_ms: int) -> bytes:
        """SyncGroup of a classic member: its assignment (ConsumerProtocolAssignment bytes)."""
        group = self._existing_group(group_id)
        member = cl.member_of(group, member_id, instance_id)
        cl.check_generation(member, generation_id)
        cl.check_protocol(member, protocol_type, protocol_name)
        if cl.must_rejoin_before_sync(group, member):
            self._deadlines.schedule_if_absent(group_id, member.member_id, TimerKind.JOIN,
                                               now_ms + member.rebalance_timeout_ms)
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS, f"A new rebalance is triggered in group {group_id} "
                             f"and member {member.member_id} should rejoin to catch up.")
        self._deadlines.cancel(group_id, member.member_id, TimerKind.SYNC)
        self._schedule_session(group_id, member.member_id, now_ms)
        return cl.assignment_bytes(member, TopicImage(self._topics()))

    def classic_heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                          now_ms: int) -> ErrorCode:
        """Heartbeat of a classic member: NONE, or REBALANCE_IN_PROGRESS when it must rejoin;
        raises :class:`GroupError` for an unknown or fenced member or a wrong generation."""
        group = self._existing_group(group_id)
        member = cl.member_of(group, member_id, instance_id)
        cl.check_generation(member, generation_id)
        self._schedule_session(group_id, member.member_id, now_ms)
        if cl.must_rejoin(group, member):
            self._deadlines.schedule_if_absent(group_id, member.member_id, TimerKind.JOIN,
                                               now_ms + member.rebalance_timeout_ms)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def classic_leave(self, group_id: str, members: Iterable[tuple[str, str | None]], now_ms: int
                      ) -> tuple[list[tuple[str, str | None, ErrorCode]], list[CoordinatorRecord]]:
        """LeaveGroup of classic members: (member id, instance id, error) per entry, and the records."""
        group = self._existing_group(group_id)
        answers: list[tuple[str, str | None, ErrorCode]] = []
        leaving = {}
        for member_id, instance_id in members:
            try:
                if instance_id is None:
                    member = group.members.get(member_id)
                    if member is None:
                        raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
                else:
                    member = group.static_member(instance_id)
                    if member is None:
                        raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
                    if member_id and member.member_id != member_id:
                        raise GroupError(ErrorCode.FENCED_INSTANCE_ID)
                cl.require_classic(member)
            except GroupError as exc:
                answers.append((member_id, instance_id, exc.error_code))
                continue
            leaving[member.member_id] = member
            answers.append((member.member_id, instance_id, ErrorCode.NONE))
            log.info("classic member left the consumer group", group_id=group_id, member_id=member.member_id,
                     instance_id=instance_id)
        change = fence(self._context(now_ms), group, leaving.values())
        self._apply(group_id, change, now_ms)
        return answers, change.records

    def persisted_state(self) -> dict[str, tuple]:
        """Every group's :meth:`ConsumerGroup.persisted_state`: equal for two managers that
        replayed the same records."""
        return {group_id: group.persisted_state() for group_id, group in sorted(self._groups.items())}
