"""Classic members inside a consumer group: JoinGroup, SyncGroup, Heartbeat and LeaveGroup
answered by the consumer group (Kafka ``classicGroupJoinToConsumerGroup``,
``classicGroupSyncToConsumerGroup``, ``classicGroupHeartbeatToConsumerGroup``,
``classicGroupLeaveToConsumerGroup``).

A classic member has no assignor of its own any more: the group's server-side assignor decides.

* **JoinGroup** is a heartbeat in disguise: the subscription embedded in the member's metadata
  (topics, rack, and from version 1 the partitions the member still owns) goes through the same
  steps as a ConsumerGroupHeartbeat (:func:`.heartbeat.member_heartbeat`), so the member joins or
  updates its subscription, the target assignment is computed, and the member reconciles one step
  against what it reported owning. The answer names no leader (every classic member is a
  follower), the member epoch as generation, and the member's first protocol as protocol name.
  A member must first ask for its member id (MEMBER_ID_REQUIRED, JoinGroup v4+) as in a classic
  group; its protocols must be of type ``consumer`` and share a name with every other classic
  member (else INCONSISTENT_GROUP_PROTOCOL).
* **SyncGroup** answers the member's current assigned partitions, in the consumer protocol's
  assignment format of the member's metadata version; REBALANCE_IN_PROGRESS when the group epoch
  moved past the member and it is not busy revoking, so it rejoins.
* **Heartbeat** keeps the session (the member's classic session timeout) and answers
  REBALANCE_IN_PROGRESS when the member must rejoin: the group epoch is ahead of its epoch, it has
  partitions to revoke, or partitions it waited for are free now.
* **LeaveGroup** removes the members named and bumps the group epoch.

Revocation goes through a rejoin, as in Kafka: an eager client (``range``, ``roundrobin``) gives
up everything before it rejoins, so it reports owning nothing and moves on at once; a
cooperative client (``cooperative-sticky``) reports what it owns, is answered with the kept
partitions only (it revokes the rest itself and rejoins), and receives the new ones on the
next round once their previous owners let them go.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sundial.protocol.errors import ErrorCode

from ..consumer_protocol import SubscriptionError, decode_subscription, encode_assignment, metadata_version
from .errors import GroupError
from .group import ConsumerGroup
from .member import ConsumerGroupMember, MemberState
from .migration import CONSUMER_PROTOCOL_TYPE, owned_partitions
from .requests import HeartbeatRequest
from .topics import TopicImage


@dataclass(frozen=True)
class ClassicJoinRequest:
    group_id: str
    member_id: str
    instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Sequence[tuple[str, bytes]]
    #: JoinGroup v4+: a dynamic member without a member id is first given one (MEMBER_ID_REQUIRED).
    require_known_member_id: bool = True


@dataclass(frozen=True)
class ClassicJoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None


def check_join(group: ConsumerGroup, request: ClassicJoinRequest, member_id: str, max_size: int) -> None:
    """Kafka ``throwIfConsumerGroupIsFull`` and ``throwIfClassicProtocolIsNotSupported``."""
    if len(group.members) >= max_size and member_id not in group.members:
        raise GroupError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                         f"The consumer group has reached its maximum capacity of {max_size} members.")
    if not request.protocols or not group.supports_classic_protocols(request.protocol_type,
                                                                     [name for name, _ in request.protocols]):
        raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s protocols are not supported.")


def join_as_heartbeat(request: ClassicJoinRequest, member_id: str, image: TopicImage) -> HeartbeatRequest:
    """The JoinGroup as the heartbeat the consumer group runs (the subscription of the first protocol:
    every protocol of a consumer carries the same one)."""
    try:
        metadata = request.protocols[0][1]
        subscription = decode_subscription(metadata)
        owned = owned_partitions(metadata, image)
    except SubscriptionError as exc:
        raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                         f"Malformed embedded consumer protocol in the subscription: {exc}.") from None
    return HeartbeatRequest(
        group_id=request.group_id, member_id=member_id, member_epoch=0, instance_id=request.instance_id,
        rack_id=subscription.rack_id or None, rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=list(subscription.topics), topic_partitions=owned)


def member_of(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
    """The classic member a SyncGroup or Heartbeat names (Kafka ``validateConsumerGroupMember`` and
    ``throwIfMemberDoesNotUseClassicProtocol``)."""
    if instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Member {member_id} is not a member of group {group.group_id}.")
    else:
        member = group.static_member(instance_id)
        if member is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Member with instance id {instance_id} is not a member of group {group.group_id}.")
        if member.member_id != member_id:
            raise GroupError(ErrorCode.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                             f"{instance_id} was fenced by member {member.member_id}.")
    require_classic(member)
    return member


def require_classic(member: ConsumerGroupMember) -> None:
    if not member.uses_classic_protocol:
        raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic protocol.")


def check_generation(member: ConsumerGroupMember, generation_id: int) -> None:
    if generation_id != member.member_epoch:
        raise GroupError(ErrorCode.ILLEGAL_GENERATION, f"The request generation id {generation_id} is not equal to "
                         f"the member epoch {member.member_epoch} of member {member.member_id}.")


def protocol_name(member: ConsumerGroupMember) -> str:
    """The protocol a classic member is told it uses: its first (Kafka answers the same)."""
    assert member.classic is not None
    return member.classic.supported_protocols[0].name


def check_protocol(member: ConsumerGroupMember, protocol_type: str | None, name: str | None) -> None:
    """Kafka ``throwIfClassicProtocolUnmatched``."""
    if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
        raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"The protocol type {protocol_type} from member "
                         f"{member.member_id} request is not equal to the group protocol type consumer.")
    if name is not None and name != protocol_name(member):
        raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"The protocol name {name} from member "
                         f"{member.member_id} request is not equal to the protocol name {protocol_name(member)} "
                         "returned in the join response.")


def must_rejoin_before_sync(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """Kafka ``throwIfRebalanceInProgress``: a new epoch the member has not joined yet (a member busy
    revoking rejoins by itself once it has)."""
    return group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS


def must_rejoin(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """Heartbeat's REBALANCE_IN_PROGRESS: the group epoch moved, the member must revoke, or the
    partitions it waited for are free now."""
    return (member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
            or (member.state is MemberState.UNRELEASED_PARTITIONS and not group.waiting_on_unreleased_partition(member)))


def assignment_bytes(member: ConsumerGroupMember, image: TopicImage) -> bytes:
    """The member's assigned partitions as a ConsumerProtocolAssignment in the version of its
    metadata (Kafka ``prepareAssignment``)."""
    assert member.classic is not None
    named: dict[str, list[int]] = {}
    for topic_id, partitions in member.assigned.items():
        name = image.name(topic_id)
        if name is not None:
            named[name] = sorted(partitions)
    try:
        version = metadata_version(member.classic.supported_protocols[0].metadata)
    except SubscriptionError:
        version = 0
    return encode_assignment(named, min(version, 3))
