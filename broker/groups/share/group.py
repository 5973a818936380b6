"""A share group and its members (Kafka ``ShareGroup``, ``ShareGroupMember``), and the state replay.

The state is what the group's ``__consumer_offsets`` records say, and changes only by
replaying them (:func:`replay`), the same code whether a record was just written or read back
at start:

* ``group_epoch`` and ``metadata_hash`` (record type 11): bumped when a member joins, leaves or
  changes its subscription, or when the subscribed topics' metadata changes;
* ``assignment_epoch`` (type 12) and ``target`` (type 13, per member): the target assignment
  the ``simple`` assignor computed for that epoch;
* per member, its metadata (type 10: rack id, client id and host, subscribed topic names) and
  its current assignment (type 14: member epoch, previous member epoch, state, partitions).

A share member never revokes anything (several members may read one partition), so a member
takes its target assignment at once: it is always STABLE, at the assignment epoch it last
heard. States of the group (Kafka ``ShareGroupState``): Empty (no member) and Stable; a group
that is deleted is gone (Dead is never listed).
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field

from . import records as r
from .records import Assignment, ShareRecord

EMPTY_ASSIGNMENT: Assignment = {}

#: ShareGroupHeartbeat member epochs with a meaning of their own: join and leave.
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1

#: ``ShareGroupCurrentMemberAssignmentValue.State`` of a share member (Kafka ``MemberState.STABLE``).
MEMBER_STATE_STABLE = 0

STATE_EMPTY = "Empty"
STATE_STABLE = "Stable"
STATES = (STATE_EMPTY, STATE_STABLE)
PROTOCOL_TYPE = "share"
GROUP_TYPE = "share"


@dataclass(frozen=True)
class ShareGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = MEMBER_STATE_STABLE
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    assigned: Assignment = field(default_factory=dict)

    def replace(self, **changes) -> "ShareGroupMember":
        return dataclasses.replace(self, **changes)

    def metadata_equals(self, other: "ShareGroupMember") -> bool:
        return (self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names) == (
            other.rack_id, other.client_id, other.client_host, other.subscribed_topic_names)

    def assignment_equals(self, other: "ShareGroupMember") -> bool:
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned) == (
            other.member_epoch, other.previous_member_epoch, other.state, other.assigned)


class ShareGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.metadata_hash = 0
        self.assignment_epoch = 0
        self.members: dict[str, ShareGroupMember] = {}
        self.target: dict[str, Assignment] = {}
        #: Keys of the records Sundial keeps as bytes (types 9 and 15), tombstoned with the group.
        self.opaque_keys: set[r.Key] = set()

    @property
    def state(self) -> str:
        return STATE_STABLE if self.members else STATE_EMPTY

    def subscribed_topic_names(self) -> frozenset[str]:
        return frozenset(n for m in self.members.values() for n in m.subscribed_topic_names)


def replay(groups: dict[str, ShareGroup], record: ShareRecord) -> None:
    """Apply one record (Kafka ``GroupMetadataManager.replay`` for the share-group types)."""
    key, value = record.key, record.value
    group_id = key.group_id
    group = groups.get(group_id)
    if isinstance(key, r.ShareGroupMetadataKey):
        if value is None:
            groups.pop(group_id, None)
            return
        group = group or groups.setdefault(group_id, ShareGroup(group_id))
        group.group_epoch, group.metadata_hash = value.epoch, value.metadata_hash
        return
    if value is None and group is None:
        return          # a tombstone for a group already gone
    group = group or groups.setdefault(group_id, ShareGroup(group_id))
    if isinstance(key, (r.ShareGroupPartitionMetadataKey, r.ShareGroupStatePartitionMetadataKey)):
        if value is None:
            group.opaque_keys.discard(key)
        else:
            group.opaque_keys.add(key)
    elif isinstance(key, r.ShareGroupMemberMetadataKey):
        if value is None:
            group.members.pop(key.member_id, None)
            return
        member = group.members.get(key.member_id) or ShareGroupMember(key.member_id)
        group.members[key.member_id] = member.replace(
            rack_id=value.rack_id, client_id=value.client_id, client_host=value.client_host,
            subscribed_topic_names=frozenset(value.subscribed_topic_names))
    elif isinstance(key, r.ShareGroupTargetAssignmentMetadataKey):
        group.assignment_epoch = 0 if value is None else value.assignment_epoch
    elif isinstance(key, r.ShareGroupTargetAssignmentMemberKey):
        if value is None:
            group.target.pop(key.member_id, None)
        else:
            group.target[key.member_id] = dict(value.topic_partitions)
    elif isinstance(key, r.ShareGroupCurrentMemberAssignmentKey):
        member = group.members.get(key.member_id)
        if value is None:
            if member is not None:
                group.members[key.member_id] = member.replace(member_epoch=0, previous_member_epoch=0,
                                                              assigned=EMPTY_ASSIGNMENT)
            return
        member = member or ShareGroupMember(key.member_id)
        group.members[key.member_id] = member.replace(
            member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
            state=value.state, assigned=dict(value.assigned_partitions))


# --- record builders ------------------------------------------------------------------------------

def member_metadata(group_id: str, m: ShareGroupMember) -> ShareRecord:
    return ShareRecord(r.ShareGroupMemberMetadataKey(group_id, m.member_id), r.ShareGroupMemberMetadataValue(
        m.rack_id, m.client_id, m.client_host, tuple(sorted(m.subscribed_topic_names))))


def group_epoch(group_id: str, epoch: int, metadata_hash: int) -> ShareRecord:
    return ShareRecord(r.ShareGroupMetadataKey(group_id), r.ShareGroupMetadataValue(epoch, metadata_hash))


def target_member(group_id: str, member_id: str, assignment: Assignment) -> ShareRecord:
    return ShareRecord(r.ShareGroupTargetAssignmentMemberKey(group_id, member_id),
                       r.ShareGroupTargetAssignmentMemberValue(dict(assignment)))


def target_epoch(group_id: str, epoch: int) -> ShareRecord:
    return ShareRecord(r.ShareGroupTargetAssignmentMetadataKey(group_id), r.ShareGroupTargetAssignmentMetadataValue(epoch))


def current_assignment(group_id: str, m: ShareGroupMember) -> ShareRecord:
    return ShareRecord(r.ShareGroupCurrentMemberAssignmentKey(group_id, m.member_id),
                       r.ShareGroupCurrentMemberAssignmentValue(m.member_epoch, m.previous_member_epoch, m.state,
                                                                dict(m.assigned)))


def member_tombstones(group_id: str, member_id: str) -> list[ShareRecord]:
    """Kafka's order: current assignment, target assignment, then the member's metadata."""
    return [ShareRecord(r.ShareGroupCurrentMemberAssignmentKey(group_id, member_id), None),
            ShareRecord(r.ShareGroupTargetAssignmentMemberKey(group_id, member_id), None),
            ShareRecord(r.ShareGroupMemberMetadataKey(group_id, member_id), None)]


def group_tombstones(group: ShareGroup) -> list[ShareRecord]:
    """Every record of an (empty) group, the group epoch last, as Kafka's ``createGroupTombstoneRecords``."""
    out: list[ShareRecord] = []
    for member_id in sorted(group.members):
        out += member_tombstones(group.group_id, member_id)
    out += [ShareRecord(key, None) for key in sorted(group.opaque_keys, key=lambda k: type(k).__name__)]
    out.append(ShareRecord(r.ShareGroupTargetAssignmentMetadataKey(group.group_id), None))
    out.append(ShareRecord(r.ShareGroupMetadataKey(group.group_id), None))
    return out


def by_topic_id(assignment: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}
