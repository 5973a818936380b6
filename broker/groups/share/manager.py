"""The share-group coordinator as a pure state machine (Kafka ``GroupMetadataManager``, its share-group half).

:class:`ShareGroupManager` owns every share group (KIP-932) of the broker. It does no I/O and
reads no clock: each operation takes ``now_ms`` and returns the ``__consumer_offsets`` records it
wrote (types 9-15, :mod:`.records`), which the caller persists; the state changes only by
replaying those records (:func:`.group.replay`), the code that also loads the log at start. A
refused operation (:class:`GroupError`) writes and changes nothing.

ShareGroupHeartbeat v1 (Kafka 4.1+), in Kafka's order:

1. Validation (INVALID_REQUEST): a group id, a member id (v1: the client generates it), a rack
   id that is not empty when given; member epoch 0 (join, which must name its subscribed
   topics), -1 (leave) or a positive epoch.
2. The group: a join creates it; any other epoch for a group that does not exist is
   GROUP_ID_NOT_FOUND, and so is a group id of another type ("Group g is not a share group.").
   A new member beyond ``group.share.max.size`` is GROUP_MAX_SIZE_REACHED.
3. The member: unknown with a non-zero epoch is UNKNOWN_MEMBER_ID; a known member must send its
   epoch (or its previous one, should the answer that moved it have been lost), else
   FENCED_MEMBER_EPOCH; epoch 0 for a known member is a rejoin and gets its assignment again.
4. A new member or a changed subscription bumps the group epoch; so does a change of the metadata
   hash of the subscribed topics (a topic created, deleted or given partitions), which is
   computed on every heartbeat.
5. When the group epoch is past the assignment epoch, the ``simple`` assignor computes a new
   target assignment for every member (the changed members' target records, then the new
   assignment epoch).
6. The member takes its target at once (share members never revoke): a new member epoch and
   assignment when either differs. Its session deadline moves to now + the group's
   ``share.session.timeout.ms``.
7. The answer carries the assignment when the member joined (epoch 0) or its assignment
   changed; otherwise null ("unchanged").

Leaving (-1) and a session that expires remove the member (tombstones of its three records) and
bump the group epoch; the other members get their new targets at their next heartbeat, as in
Kafka. Departed members are reported through :meth:`ShareGroupManager.take_departures`, so the
fetch side can release what they held.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import structlog

from sundial.protocol.errors import ErrorCode

from ..modern.deadlines import Deadlines, TimerKind
from ..modern.errors import GroupError, heartbeat_group
from ..modern.requests import HeartbeatResult
from ..modern.topics import TopicImage
from ..modern.views import GroupDescription
from . import assignor
from . import group as g
from .group import ShareGroup, ShareGroupMember
from .records import Assignment, ShareRecord

log = structlog.get_logger(__name__)

TopicsView = Callable[[], Mapping[str, tuple[uuid.UUID, int]]]
#: group id → (session timeout ms, heartbeat interval ms) in force for that group.
GroupTimings = Callable[[str], tuple[int, int]]


@dataclass(frozen=True)
class ShareHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None


#: A share member's heartbeat answer has the consumer-protocol member's form: the assignment is topic id →
#: partitions, or None when unchanged since the member's last answer.
ShareHeartbeatResult = HeartbeatResult


@dataclass(frozen=True)
class ShareMemberDescription:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    #: (topic id, topic name, sorted partitions), topics by name
    assignment: tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]


#: A share group as ShareGroupDescribe answers it.
ShareGroupDescription = GroupDescription[ShareMemberDescription]


@dataclass(frozen=True)
class ListedShareGroup:
    group_id: str
    state: str
    protocol_type: str = g.PROTOCOL_TYPE
    group_type: str = g.GROUP_TYPE


def _invalid(message: str) -> GroupError:
    return GroupError(ErrorCode.INVALID_REQUEST, message)


def validate(request: ShareHeartbeatRequest) -> None:
    """Kafka's ``throwIfShareGroupHeartbeatRequestIsInvalid`` (v1)."""
    if not request.group_id:
        raise _invalid("GroupId can't be empty.")
    if request.rack_id is not None and not request.rack_id:
        raise _invalid("RackId can't be empty.")
    if not request.member_id:
        raise _invalid("MemberId can't be empty.")
    if request.member_epoch == g.JOIN_GROUP_MEMBER_EPOCH:
        if not request.subscribed_topic_names:
            raise _invalid("SubscribedTopicNames must be set in first request.")
    elif request.member_epoch < 0 and request.member_epoch != g.LEAVE_GROUP_MEMBER_EPOCH:
        raise _invalid("MemberEpoch is invalid.")


class ShareGroupManager:
    def __init__(self, *, max_size: int, topics: TopicsView, timings: GroupTimings,
                 is_other_group: Callable[[str], bool] = lambda group_id: False) -> None:
        self._max_size = max_size
        self._topics = topics
        self._timings = timings
        self._is_other_group = is_other_group
        self._groups: dict[str, ShareGroup] = {}
        self._deadlines = Deadlines()
        self._departures: list[tuple[str, str]] = []

    # -- ShareGroupHeartbeat ------------------------------------------------------------------------

    def heartbeat(self, request: ShareHeartbeatRequest, now_ms: int, *, client_id: str, client_host: str
                  ) -> tuple[ShareHeartbeatResult, list[ShareRecord]]:
        validate(request)
        group_id, member_id = request.group_id, request.member_id
        if request.member_epoch == g.LEAVE_GROUP_MEMBER_EPOCH:
            group = self._existing_group(group_id)
            if member_id not in group.members:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {group_id}.")
            records = self._remove_member(group, member_id, now_ms)
            log.info("share group member left", group_id=group_id, member_id=member_id)
            return ShareHeartbeatResult(member_id, g.LEAVE_GROUP_MEMBER_EPOCH, 0), records

        joining = request.member_epoch == g.JOIN_GROUP_MEMBER_EPOCH
        # a new group is materialised by replaying the records
        group = heartbeat_group(self._groups, group_id, kind="share", joining=joining,
                                other_type=self._is_other_group(group_id), new=ShareGroup)
        member = group.members.get(member_id)
        if member is None:
            if not joining:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {group_id}.")
            if len(group.members) >= self._max_size:
                raise GroupError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                 f"The share group has reached its maximum capacity of {self._max_size} members.")
            member = ShareGroupMember(member_id)
            is_new = True
        else:
            is_new = False
            if not joining and request.member_epoch not in (member.member_epoch, member.previous_member_epoch):
                relation = "greater" if request.member_epoch > member.member_epoch else "smaller"
                raise GroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                                 f"The share group member has a {relation} member epoch ({request.member_epoch}) "
                                 f"than the one known by the group coordinator ({member.member_epoch}). "
                                 "The member must abandon all its partitions and rejoin.")

        updated = member.replace(client_id=client_id, client_host=client_host)
        if request.rack_id is not None:
            updated = updated.replace(rack_id=request.rack_id)
        if request.subscribed_topic_names is not None:
            updated = updated.replace(subscribed_topic_names=frozenset(request.subscribed_topic_names))

        records: list[ShareRecord] = []
        if is_new or not updated.metadata_equals(member):
            records.append(g.member_metadata(group_id, updated))
        image = TopicImage(self._topics())
        members = {**group.members, member_id: updated}
        subscribed = {n for m in members.values() for n in m.subscribed_topic_names}
        metadata_hash = image.metadata_hash(subscribed)
        epoch = group.group_epoch
        if is_new or updated.subscribed_topic_names != member.subscribed_topic_names \
                or metadata_hash != group.metadata_hash:
            epoch += 1
            records.append(g.group_epoch(group_id, epoch, metadata_hash))
            log.info("share group epoch bumped", group_id=group_id, group_epoch=epoch)

        targets = dict(group.target)
        assignment_epoch = group.assignment_epoch
        if epoch > assignment_epoch:
            targets = self._target_assignment(group, members, image, records, epoch)
            assignment_epoch = epoch
        target = targets.get(member_id, g.EMPTY_ASSIGNMENT)

        reconciled = updated
        if joining or updated.member_epoch != assignment_epoch or g.by_topic_id(updated.assigned) != g.by_topic_id(target):
            reconciled = updated.replace(member_epoch=assignment_epoch,
                                         previous_member_epoch=updated.member_epoch if not joining else 0,
                                         state=g.MEMBER_STATE_STABLE, assigned=g.by_topic_id(target))
            if is_new or not reconciled.assignment_equals(member):
                records.append(g.current_assignment(group_id, reconciled))

        self._apply(records)
        session_ms, heartbeat_ms = self._timings(group_id)
        self._deadlines.schedule(group_id, member_id, TimerKind.SESSION, now_ms + session_ms)
        if is_new:
            log.info("share group member joined", group_id=group_id, member_id=member_id,
                     member_epoch=reconciled.member_epoch)
        send = joining or g.by_topic_id(reconciled.assigned) != g.by_topic_id(member.assigned)
        return ShareHeartbeatResult(member_id, reconciled.member_epoch, heartbeat_ms,
                                    g.by_topic_id(reconciled.assigned) if send else None), records

    def _target_assignment(self, group: ShareGroup, members: Mapping[str, ShareGroupMember], image: TopicImage,
                           records: list[ShareRecord], epoch: int) -> dict[str, Assignment]:
        subscriptions = {m.member_id: image.ids(m.subscribed_topic_names) for m in members.values()}
        partitions = {tid: image.partitions(tid) for ids in subscriptions.values() for tid in ids}
        new = assignor.assign(subscriptions, partitions, group.target)
        for member_id in sorted(new):
            if member_id not in group.target or g.by_topic_id(group.target[member_id]) != g.by_topic_id(new[member_id]):
                records.append(g.target_member(group.group_id, member_id, new[member_id]))
        records.append(g.target_epoch(group.group_id, epoch))
        return new

    def _remove_member(self, group: ShareGroup, member_id: str, now_ms: int) -> list[ShareRecord]:
        """Kafka ``shareGroupFenceMember``: the member's tombstones and a new group epoch."""
        records = g.member_tombstones(group.group_id, member_id)
        remaining = {n for m in group.members.values() if m.member_id != member_id for n in m.subscribed_topic_names}
        metadata_hash = TopicImage(self._topics()).metadata_hash(remaining)
        records.append(g.group_epoch(group.group_id, group.group_epoch + 1, metadata_hash))
        self._apply(records)
        self._deadlines.cancel(group.group_id, member_id)
        self._departures.append((group.group_id, member_id))
        return records

    # -- time ---------------------------------------------------------------------------------------

    def poll(self, now_ms: int) -> list[ShareRecord]:
        """Fence every member whose session deadline passed; the records written."""
        records: list[ShareRecord] = []
        while (expired := self._deadlines.pop_expired(now_ms)) is not None:
            group = self._groups.get(expired.group_id)
            if group is None or expired.member_id not in group.members:
                continue
            log.info("share group member fenced", group_id=expired.group_id, member_id=expired.member_id,
                     reason="the member session expired")
            records += self._remove_member(group, expired.member_id, now_ms)
        return records

    def next_deadline_ms(self) -> int | None:
        return self._deadlines.next_deadline_ms()

    def take_departures(self) -> list[tuple[str, str]]:
        """(group id, member id) of every member removed since the last call."""
        out, self._departures = self._departures, []
        return out

    # -- log ------------------------------------------------------------------------------------------

    def replay(self, record: ShareRecord) -> None:
        g.replay(self._groups, record)

    def loaded(self, now_ms: int) -> None:
        """After the replay at start: every member gets a fresh session (Kafka ``onLoaded``)."""
        for group in self._groups.values():
            session_ms, _ = self._timings(group.group_id)
            for member_id in group.members:
                self._deadlines.schedule(group.group_id, member_id, TimerKind.SESSION, now_ms + session_ms)

    def _apply(self, records: Iterable[ShareRecord]) -> None:
        for record in records:
            g.replay(self._groups, record)

    # -- admin ----------------------------------------------------------------------------------------

    def _existing_group(self, group_id: str) -> ShareGroup:
        group = self._groups.get(group_id)
        if group is None:
            if self._is_other_group(group_id):
                raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        return group

    def describe(self, group_id: str) -> ShareGroupDescription:
        group = self._existing_group(group_id)
        image = TopicImage(self._topics())
        members = []
        for m in sorted(group.members.values(), key=lambda m: m.member_id):
            # a topic deleted since the assignment is left out, as Kafka leaves out ids it cannot name
            topics = sorted(((tid, image.name(tid), tuple(sorted(ps)))
                             for tid, ps in m.assigned.items() if ps and image.name(tid) is not None),
                            key=lambda t: (t[1], t[0]))
            members.append(ShareMemberDescription(m.member_id, m.rack_id, m.member_epoch, m.client_id,
                                                  m.client_host, tuple(sorted(m.subscribed_topic_names)),
                                                  tuple(topics)))
        return GroupDescription(group.group_id, group.state, group.group_epoch, group.assignment_epoch, assignor.NAME,
                                tuple(members))

    def list_groups(self, states: Iterable[str] = ()) -> list[ListedShareGroup]:
        wanted = {s.lower() for s in states}
        return [ListedShareGroup(gid, grp.state) for gid, grp in sorted(self._groups.items())
                if not wanted or grp.state.lower() in wanted]

    def create_group(self, group_id: str) -> list[ShareRecord]:
        """An empty share group under ``group_id`` (AlterShareGroupOffsets on a group not yet known,
        as Kafka's ``getOrMaybeCreatePersistedShareGroup``): its epoch record, none when it exists;
        GROUP_ID_NOT_FOUND when the id names a group of another type."""
        if group_id in self._groups:
            return []
        if not group_id or self._is_other_group(group_id):
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        records = [g.group_epoch(group_id, 0, 0)]
        self._apply(records)
        return records

    def delete_group(self, group_id: str) -> list[ShareRecord]:
        """DeleteGroups: NON_EMPTY_GROUP while it has members; the tombstones of every record."""
        group = self._existing_group(group_id)
        if group.members:
            raise GroupError(ErrorCode.NON_EMPTY_GROUP, f"Group {group_id} is not empty.")
        records = g.group_tombstones(group)
        self._apply(records)
        self._deadlines.cancel_group(group_id)
        return records

    # -- reads for the fetch side, describe and retention ------------------------------------------

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    def is_share_group(self, group_id: str) -> bool:
        return group_id in self._groups

    def group(self, group_id: str) -> ShareGroup:
        return self._existing_group(group_id)

    def member(self, group_id: str, member_id: str) -> ShareGroupMember | None:
        group = self._groups.get(group_id)
        return None if group is None else group.members.get(member_id)

    def subscribed_topics(self, group_id: str) -> set[str]:
        group = self._groups.get(group_id)
        return set() if group is None else set(group.subscribed_topic_names())
