"""Online migration between the classic and the consumer protocol (Kafka ``GroupMetadataManager``
``convertToConsumerGroup`` / ``convertToClassicGroup``, ``ConsumerGroup.fromClassicGroup``,
``ClassicGroup.fromConsumerGroup``).

The classic groups are not this package's: the coordinator owns them. They cross the boundary
as a :class:`ClassicGroupImage`, a plain value:

* **upgrade**: the coordinator hands the image of a classic group with members to the first
  ConsumerGroupHeartbeat join; :func:`upgrade_refusal` says whether the migration policy, the
  group's protocol type and ``group.consumer.max.size`` allow it, and :func:`upgrade_records`
  writes the consumer group it becomes. Every classic member becomes a member using the
  classic protocol inside the consumer group, STABLE at its generation as member epoch, owning
  the partitions of its last classic assignment (decoded with the consumer protocol), which is
  also its target; the group epoch and the assignment epoch are the generation. The joining
  member then bumps the group epoch, and the classic members are told to rejoin.
* **downgrade**: when the last consumer-protocol member leaves, is fenced or is replaced and
  :func:`downgrade_allowed` (policy, ``group.max.size``), :func:`downgrade` writes the consumer
  group's tombstones and returns the image of the classic group it becomes: the remaining
  members with their JoinGroup protocols, the protocol every one supports, and each member's
  target assignment serialized in the consumer protocol as its assignment; the coordinator
  builds the classic group from it, writes its metadata record and (unless a joining static
  member triggered it) starts a rebalance so the members rejoin.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from sundial.protocol.errors import ErrorCode

from ..consumer_protocol import SubscriptionError, decode_assignment, decode_subscription, encode_assignment, metadata_version

from . import record_helpers as rec
from .assignment import Assignment, freeze
from .errors import GroupError
from .group import ConsumerGroup
from .member import ConsumerGroupMember, MemberState
from .records import ClassicMemberMetadata, ClassicProtocol, CoordinatorRecord
from .settings import ConsumerGroupSettings
from .topics import TopicImage

CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True)
class ClassicMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    #: (name, metadata) in the member's order of preference, as its JoinGroup sent them.
    protocols: tuple[tuple[str, bytes], ...]
    #: Its assignment of the current generation (ConsumerProtocolAssignment bytes; b"" for none).
    assignment: bytes = b""

    def metadata(self, protocol_name: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        return self.protocols[0][1] if self.protocols else b""


@dataclass(frozen=True)
class ClassicGroupImage:
    group_id: str
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    members: tuple[ClassicMember, ...]


# -- upgrade ----------------------------------------------------------------------------------------


def upgrade_refusal(settings: ConsumerGroupSettings, classic: ClassicGroupImage) -> str | None:
    """Why a classic group with members may not become a consumer group (Kafka
    ``validateOnlineUpgrade``), or None when it may."""
    if not settings.upgrade_enabled:
        return "the online upgrade is disabled"
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return "the group does not use the consumer embedded protocol"
    if len(classic.members) > settings.max_size:
        return "the group size exceeds the consumer group maximum size"
    return None


def _to_ids(partitions: Mapping[str, list[int]], image: TopicImage) -> Assignment:
    """Named partitions to topic ids; topics that no longer exist are dropped (Kafka
    ``toTopicPartitionMap``)."""
    out: dict = {}
    for name, parts in partitions.items():
        entry = image.by_name.get(name)
        if entry is not None:
            out.setdefault(entry[0], set()).update(parts)
    return freeze(out)


def owned_partitions(metadata: bytes, image: TopicImage) -> Assignment:
    """The partitions a classic member's JoinGroup subscription says it owns (v1+; none before)."""
    return _to_ids(decode_subscription(metadata).owned_partitions, image)


def classic_metadata(session_timeout_ms: int, protocols) -> ClassicMemberMetadata:
    return ClassicMemberMetadata(session_timeout_ms, tuple(ClassicProtocol(name, bytes(meta)) for name, meta in protocols))


def upgrade_records(classic: ClassicGroupImage, image: TopicImage) -> list[CoordinatorRecord]:
    """The records creating the consumer group a classic group becomes (Kafka
    ``ConsumerGroup.fromClassicGroup`` then ``createConsumerGroupRecords``); GROUP_ID_NOT_FOUND
    when a member's embedded protocol cannot be read."""
    group_id, epoch = classic.group_id, classic.generation_id
    members: list[ConsumerGroupMember] = []
    try:
        for m in classic.members:
            subscription = decode_subscription(m.metadata(classic.protocol_name))
            assigned = _to_ids(decode_assignment(m.assignment), image)
            members.append(ConsumerGroupMember(
                m.member_id, member_epoch=epoch, previous_member_epoch=epoch, state=MemberState.STABLE,
                instance_id=m.instance_id, rack_id=subscription.rack_id, rebalance_timeout_ms=m.rebalance_timeout_ms,
                client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=frozenset(subscription.topics), subscribed_topic_regex="",
                assigned=assigned, classic=classic_metadata(m.session_timeout_ms, m.protocols)))
    except SubscriptionError as exc:
        raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Cannot upgrade the classic group {group_id} to consumer "
                         f"group because the embedded consumer protocol is malformed: {exc}.") from None
    topics = set().union(*(m.subscribed_topic_names for m in members)) if members else set()
    records = [rec.member_subscription(group_id, m) for m in members]
    records.append(rec.group_epoch(group_id, epoch, image.metadata_hash(topics)))
    records += [rec.target_assignment(group_id, m.member_id, m.assigned) for m in members]
    records.append(rec.target_assignment_epoch(group_id, epoch))
    records += [rec.current_assignment(group_id, m) for m in members]
    return records


# -- downgrade --------------------------------------------------------------------------------------


def downgrade_allowed(settings: ConsumerGroupSettings, group: ConsumerGroup, leaving_member_id: str, *,
                      replaced: bool = False) -> bool:
    """Kafka ``validateOnlineDowngradeWithFencedMember`` (``replaced=False``: the member leaves)
    and ``validateOnlineDowngradeWithReplacedMemberId`` (a joining classic static member takes
    its place)."""
    if not group.all_classic_except(leaving_member_id):
        return False
    remaining = len(group.members) - (0 if replaced else 1)
    if not replaced and len(group.members) <= 1:
        return False
    if not settings.downgrade_enabled:
        return False
    return remaining <= settings.classic_max_size


def _select_protocol(members: list[ClassicMember]) -> str:
    """The protocol every member supports that most members prefer (Kafka ``ClassicGroup.selectProtocol``;
    ties go to the first member's preference)."""
    common = set.intersection(*({name for name, _ in m.protocols} for m in members))
    votes: Counter[str] = Counter()
    for m in members:
        votes[next(name for name, _ in m.protocols if name in common)] += 1
    first = [name for name, _ in members[0].protocols if name in common]
    return max(first, key=lambda name: votes[name])


def _as_classic(member: ConsumerGroupMember) -> ClassicMember:
    classic = member.classic
    assert classic is not None
    return ClassicMember(member.member_id, member.instance_id, member.client_id, member.client_host,
                         member.rebalance_timeout_ms, classic.session_timeout_ms,
                         tuple((p.name, p.metadata) for p in classic.supported_protocols))


def downgrade(group: ConsumerGroup, leaving_member_id: str | None,
              image: TopicImage) -> tuple[list[CoordinatorRecord], ClassicGroupImage]:
    """The consumer group's tombstones and the classic group it becomes (Kafka
    ``convertToClassicGroup``): every member but ``leaving_member_id`` (None after a classic
    static member replaced the last consumer-protocol one: the group holds the newcomer, with
    the replaced member's target assignment) becomes a classic member."""
    group_id = group.group_id
    records: list[CoordinatorRecord] = []
    for member_id in group.members:
        records.extend(rec.remove_member(group_id, member_id))
    for member_id in group.targets:
        if member_id not in group.members:
            records.append(rec.target_assignment_tombstone(group_id, member_id))
    records.append(rec.target_assignment_epoch_tombstone(group_id))
    records.extend(rec.regular_expression_tombstone(group_id, regex) for regex in group.resolved_regexes)
    records.append(rec.partition_metadata_tombstone(group_id))
    records.append(rec.group_epoch_tombstone(group_id))

    members = [_as_classic(m) for mid, m in group.members.items() if mid != leaving_member_id]
    protocol_name = _select_protocol(members)
    converted = []
    for m in members:
        try:
            version = metadata_version(m.metadata(protocol_name))
        except SubscriptionError as exc:
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Cannot downgrade the classic group {group_id}: {exc}.") \
                from None
        named = {image.name(tid): sorted(parts) for tid, parts in group.target_of(m.member_id).items()
                 if image.name(tid) is not None}
        converted.append(ClassicMember(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                       m.session_timeout_ms, m.protocols, encode_assignment(named, min(version, 3))))
    return records, ClassicGroupImage(group_id, group.group_epoch, CONSUMER_PROTOCOL_TYPE, protocol_name,
                                      tuple(converted))
