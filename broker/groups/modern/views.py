"""What ConsumerGroupDescribe, ListGroups and the offset APIs see of a group.

:func:`describe` is Kafka's ``ConsumerGroup.asDescribedGroup``: the group's state, epochs
and assignor (the one most members asked for, else the default), and per member its
subscription, current and target assignment (``member_type`` 1: the consumer protocol, 0: a
classic member inside the group, as ConsumerGroupDescribe v1 reports). Assignments list topics with their names; a topic deleted
since is left out, as Kafka leaves it out.

:func:`validate_offset_commit` and :func:`validate_offset_fetch` are Kafka 4.2's
``ConsumerGroup.validateOffsetCommit`` / ``validateOffsetFetch``: a commit must come from a
member at its current epoch (exact equality: KIP-1251's relaxed rule,
``assignmentEpoch(partition) <= epoch <= memberEpoch``, is Kafka 4.3, not 4.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from sundial.protocol.errors import ErrorCode

from .assignment import Assignment
from .errors import GroupError
from .group import GROUP_TYPE, PROTOCOL_TYPE, ConsumerGroup
from .heartbeat import unknown_member
from .topics import TopicImage

#: ConsumerGroupDescribe v1 ``MemberType``: a member using the classic protocol inside the group
#: (online migration), a consumer-protocol member (Kafka ``MemberType``).
CLASSIC_MEMBER_TYPE = 0
CONSUMER_MEMBER_TYPE = 1
#: Offset APIs' "no generation" (Kafka ``JoinGroupRequest.UNKNOWN_GENERATION_ID``) and member id.
UNKNOWN_GENERATION_ID = -1
UNKNOWN_MEMBER_ID = ""
#: First OffsetCommit version a consumer-protocol member may use (it carries the member epoch).
OFFSET_COMMIT_MIN_VERSION = 9


@dataclass(frozen=True)
class TopicPartitions:
    topic_id: object
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[TopicPartitions, ...]
    target_assignment: tuple[TopicPartitions, ...]
    member_type: int = CONSUMER_MEMBER_TYPE


#: A group type's description of one member (MemberDescription here, the share groups' their own).
M = TypeVar("M")


@dataclass(frozen=True)
class GroupDescription(Generic[M]):
    """A consumer-protocol or share group as ConsumerGroupDescribe / ShareGroupDescribe answer it."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: tuple[M, ...]


@dataclass(frozen=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str


def describe(group: ConsumerGroup, image: TopicImage, default_assignor: str) -> GroupDescription[MemberDescription]:
    members = tuple(
        MemberDescription(
            member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
            client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=tuple(sorted(m.subscribed_topic_names)),
            subscribed_topic_regex=m.subscribed_topic_regex, assignment=_named(m.assigned, image),
            target_assignment=_named(group.target_of(m.member_id), image),
            member_type=CLASSIC_MEMBER_TYPE if m.uses_classic_protocol else CONSUMER_MEMBER_TYPE)
        for m in group.members.values())
    return GroupDescription(group_id=group.group_id, state=group.state.value, group_epoch=group.group_epoch,
                            assignment_epoch=group.assignment_epoch,
                            assignor_name=group.preferred_assignor() or default_assignor, members=members)


def listed(group: ConsumerGroup) -> ListedGroup:
    return ListedGroup(group.group_id, PROTOCOL_TYPE, group.state.value, GROUP_TYPE)


def validate_offset_commit(group: ConsumerGroup, member_id: str, member_epoch: int, *, instance_id: str | None = None,
                           transactional: bool = False, api_version: int = OFFSET_COMMIT_MIN_VERSION) -> None:
    """Raise :class:`GroupError` unless the commit may go ahead.

    A commit with a negative epoch to a group without members is accepted whatever its member id
    (an admin client, or a consumer committing before it joins); a transactional commit that
    names no member, epoch or instance is accepted; else the member must exist
    (UNKNOWN_MEMBER_ID), use OffsetCommit v9+ (UNSUPPORTED_VERSION) and send its current epoch:
    STALE_MEMBER_EPOCH, which TxnOffsetCommit answers as ILLEGAL_GENERATION. A member using the
    classic protocol commits with any version and gets ILLEGAL_GENERATION (Kafka ``validateMemberEpoch``).
    """
    if member_epoch < 0 and not group.members:
        return
    if (transactional and member_epoch == UNKNOWN_GENERATION_ID and member_id == UNKNOWN_MEMBER_ID
            and instance_id is None):
        return
    member = group.members.get(member_id)
    if member is None:
        raise unknown_member(member_id, group.group_id)
    if not transactional and api_version < OFFSET_COMMIT_MIN_VERSION and not member.uses_classic_protocol:
        raise GroupError(ErrorCode.UNSUPPORTED_VERSION,
                         "OffsetCommit version 9 or above must be used by members using the modern group protocol")
    if member_epoch != member.member_epoch:
        # A classic member (online migration) commits with its generation: ILLEGAL_GENERATION, as in a classic group.
        raise GroupError(ErrorCode.ILLEGAL_GENERATION if transactional or member.uses_classic_protocol
                         else ErrorCode.STALE_MEMBER_EPOCH,
                         f"The received member epoch {member_epoch} does not match the expected member epoch "
                         f"{member.member_epoch}.")


def validate_offset_fetch(group: ConsumerGroup, member_id: str | None, member_epoch: int) -> None:
    """Raise :class:`GroupError` unless the fetch may go ahead: no member id and a negative epoch
    (an admin client, or a consumer not using the group) always may; else as a commit."""
    if member_id is None and member_epoch < 0:
        return
    member = group.members.get(member_id) if member_id is not None else None
    if member is None:
        raise unknown_member(member_id, group.group_id)
    if member_epoch != member.member_epoch:
        raise GroupError(ErrorCode.STALE_MEMBER_EPOCH, f"The received member epoch {member_epoch} does not match "
                         f"the expected member epoch {member.member_epoch}.")


def _named(assignment: Assignment, image: TopicImage) -> tuple[TopicPartitions, ...]:
    out = []
    for topic_id, partitions in assignment.items():
        name = image.name(topic_id)
        if name is not None:
            out.append(TopicPartitions(topic_id, name, tuple(sorted(partitions))))
    return tuple(sorted(out, key=lambda tp: tp.topic_name))
