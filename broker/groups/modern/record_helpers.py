"""The records a change writes, one function per record (Kafka ``GroupCoordinatorRecordHelpers``).

Every change of a consumer group is a list of these, in the order Kafka writes them; the
manager applies a change by replaying that list (:mod:`.replay`), so what is written is by
construction what the state becomes. Values as Kafka 4.2 writes them: subscribed topic names
and resolved regex topics sorted, the member's regex as the member holds it (``""`` when it
has none), the metadata hash in the group epoch record.
"""

from __future__ import annotations

from .assignment import Assignment
from .group import ResolvedRegex
from .member import ConsumerGroupMember
from .records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    CoordinatorRecord,
)


def member_subscription(group_id: str, member: ConsumerGroupMember) -> CoordinatorRecord:
    return CoordinatorRecord(
        ConsumerGroupMemberMetadataKey(group_id, member.member_id),
        ConsumerGroupMemberMetadataValue(
            instance_id=member.instance_id, rack_id=member.rack_id, client_id=member.client_id,
            client_host=member.client_host, subscribed_topic_names=tuple(sorted(member.subscribed_topic_names)),
            subscribed_topic_regex=member.subscribed_topic_regex, server_assignor=member.server_assignor,
            rebalance_timeout_ms=member.rebalance_timeout_ms, classic_member_metadata=member.classic))


def member_subscription_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupMemberMetadataKey(group_id, member_id), None)


def group_epoch(group_id: str, epoch: int, metadata_hash: int) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupMetadataKey(group_id), ConsumerGroupMetadataValue(epoch, metadata_hash))


def group_epoch_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupMetadataKey(group_id), None)


def partition_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    """Type 4, which Kafka 4.1+ only ever deletes (the metadata hash replaced it)."""
    return CoordinatorRecord(ConsumerGroupPartitionMetadataKey(group_id), None)


def target_assignment(group_id: str, member_id: str, assignment: Assignment) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
                             ConsumerGroupTargetAssignmentMemberValue(dict(assignment)))


def target_assignment_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None)


def target_assignment_epoch(group_id: str, assignment_epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupTargetAssignmentMetadataKey(group_id),
                             ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch))


def target_assignment_epoch_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupTargetAssignmentMetadataKey(group_id), None)


def current_assignment(group_id: str, member: ConsumerGroupMember) -> CoordinatorRecord:
    return CoordinatorRecord(
        ConsumerGroupCurrentMemberAssignmentKey(group_id, member.member_id),
        ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=member.member_epoch, previous_member_epoch=member.previous_member_epoch,
            state=int(member.state), assigned_partitions=dict(member.assigned),
            partitions_pending_revocation=dict(member.pending_revocation)))


def current_assignment_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None)


def regular_expression(group_id: str, regex: str, resolved: ResolvedRegex) -> CoordinatorRecord:
    return CoordinatorRecord(
        ConsumerGroupRegularExpressionKey(group_id, regex),
        ConsumerGroupRegularExpressionValue(tuple(sorted(resolved.topics)), resolved.version, resolved.timestamp_ms))


def regular_expression_tombstone(group_id: str, regex: str) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupRegularExpressionKey(group_id, regex), None)


def remove_member(group_id: str, member_id: str) -> list[CoordinatorRecord]:
    """A member's three tombstones, in the order replay needs them (Kafka ``removeMember``)."""
    return [current_assignment_tombstone(group_id, member_id), target_assignment_tombstone(group_id, member_id),
            member_subscription_tombstone(group_id, member_id)]
