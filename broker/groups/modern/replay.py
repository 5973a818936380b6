"""Replay: how each consumer-group record changes the state (Kafka ``GroupMetadataManager.replay``).

This is the only code that changes a :class:`~.group.ConsumerGroup`. The manager applies every
change it decides by replaying the records it writes, and rebuilds the state at start by
replaying what ``__consumer_offsets`` holds, so both paths share one set of rules:

* a value record creates its group (and member) when missing; a tombstone for a group or
  member that does not exist is ignored;
* type 8's tombstone leaves the member in place with epoch -1 and no partitions; type 5's
  tombstone then removes it, and is refused unless type 8's and type 7's came first;
* type 6's tombstone sets the assignment epoch to -1 and needs the targets gone; type 3's
  tombstone deletes the group and needs it empty with that -1;
* type 4 (Kafka 4.0's subscription metadata) only marks that a record is live, so that the
  next epoch bump writes its tombstone, as Kafka 4.1+ does.

A tombstone that breaks those orders raises :class:`ReplayError` before changing anything
(Kafka raises ``IllegalStateException``); a log Sundial wrote never does.
"""

from __future__ import annotations

from collections.abc import MutableMapping

from .assignment import EMPTY, freeze
from .group import ConsumerGroup, ResolvedRegex
from .member import LEAVE_GROUP_MEMBER_EPOCH, ConsumerGroupMember, member_state
from .records import (
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    CoordinatorRecord,
)

Groups = MutableMapping[str, ConsumerGroup]


class ReplayError(ValueError):
    """A record that cannot follow the records replayed before it."""


def replay(groups: Groups, record: CoordinatorRecord) -> None:
    key, value = record.key, record.value
    handler = _HANDLERS.get(type(key))
    if handler is None:
        raise ReplayError(f"not a consumer group record: {type(key).__name__}")
    group = groups.get(key.group_id)
    if group is None:
        if value is None:
            return      # a tombstone of a group that does not exist
        group = groups[key.group_id] = ConsumerGroup(key.group_id)
    handler(groups, group, key, value)


def _metadata(groups: Groups, group: ConsumerGroup, key, value) -> None:
    if value is not None:
        group.group_epoch = value.epoch
        group.metadata_hash = value.metadata_hash
        return
    if group.members:
        raise ReplayError(f"tombstone of group {key.group_id} while it has {len(group.members)} members")
    if group.targets:
        raise ReplayError(f"tombstone of group {key.group_id} while its target assignment has "
                          f"{len(group.targets)} members")
    if group.assignment_epoch != -1:
        raise ReplayError(f"tombstone of group {key.group_id} before its target assignment epoch's tombstone")
    del groups[key.group_id]


def _partition_metadata(groups: Groups, group: ConsumerGroup, key, value) -> None:
    group.has_legacy_partition_metadata = value is not None


def _member_metadata(groups: Groups, group: ConsumerGroup, key, value) -> None:
    old = group.members.get(key.member_id)
    if value is not None:
        base = old if old is not None else ConsumerGroupMember(key.member_id)
        group.set_member(base.replace(
            instance_id=value.instance_id, rack_id=value.rack_id, client_id=value.client_id,
            client_host=value.client_host, subscribed_topic_names=frozenset(value.subscribed_topic_names),
            subscribed_topic_regex=value.subscribed_topic_regex, rebalance_timeout_ms=value.rebalance_timeout_ms,
            server_assignor=value.server_assignor, classic=_classic(value.classic_member_metadata)))
        return
    if old is None:
        return
    if old.member_epoch != LEAVE_GROUP_MEMBER_EPOCH:
        raise ReplayError(f"tombstone of member {key.member_id} before its current assignment's tombstone")
    if key.member_id in group.targets:
        raise ReplayError(f"tombstone of member {key.member_id} before its target assignment's tombstone")
    group.remove_member(key.member_id)


def _classic(metadata: ClassicMemberMetadata | None) -> ClassicMemberMetadata | None:
    """A member uses the classic protocol when its record carries classic metadata; the empty
    struct (what an absent tag reads as) is a consumer-protocol member."""
    if metadata is None or metadata == ClassicMemberMetadata(0, ()):
        return None
    return metadata


def _target_member(groups: Groups, group: ConsumerGroup, key, value) -> None:
    if value is not None:
        group.set_target(key.member_id, freeze(value.topic_partitions))
    else:
        group.remove_target(key.member_id)


def _target_metadata(groups: Groups, group: ConsumerGroup, key, value) -> None:
    if value is not None:
        group.assignment_epoch = value.assignment_epoch
        return
    if group.targets:
        raise ReplayError(f"tombstone of the target assignment epoch of {key.group_id} while "
                          f"{len(group.targets)} members have a target")
    group.assignment_epoch = -1


def _current_assignment(groups: Groups, group: ConsumerGroup, key, value) -> None:
    old = group.members.get(key.member_id)
    if value is not None:
        base = old if old is not None else ConsumerGroupMember(key.member_id)
        group.set_member(base.replace(
            member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
            state=member_state(value.state), assigned=freeze(value.assigned_partitions),
            pending_revocation=freeze(value.partitions_pending_revocation)))
    elif old is not None:
        group.set_member(old.replace(member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                     previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                     assigned=EMPTY, pending_revocation=EMPTY))


def _regular_expression(groups: Groups, group: ConsumerGroup, key, value) -> None:
    if value is not None:
        group.resolved_regexes[key.regular_expression] = ResolvedRegex(
            frozenset(value.topics), value.version, value.timestamp_ms)
    else:
        group.resolved_regexes.pop(key.regular_expression, None)


_HANDLERS = {
    ConsumerGroupMetadataKey: _metadata,
    ConsumerGroupPartitionMetadataKey: _partition_metadata,
    ConsumerGroupMemberMetadataKey: _member_metadata,
    ConsumerGroupTargetAssignmentMemberKey: _target_member,
    ConsumerGroupTargetAssignmentMetadataKey: _target_metadata,
    ConsumerGroupCurrentMemberAssignmentKey: _current_assignment,
    ConsumerGroupRegularExpressionKey: _regular_expression,
}
