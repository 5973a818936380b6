"""A member of a consumer-protocol group (Kafka ``ConsumerGroupMember`` and ``MemberState``).

A member is an immutable value: every change makes a new one (``dataclasses.replace``), as
Kafka's builder does, so the manager can compare the member before and after a heartbeat and
write a record only for what changed. Two halves, each persisted by its own record:

* the subscription (record type 5, ``ConsumerGroupMemberMetadataValue``): instance id, rack
  id, client id and host, subscribed topic names and regular expression, server assignor,
  rebalance timeout, and for a member using the classic protocol its classic session timeout
  and JoinGroup protocols (:mod:`.classic`);
* the current assignment (record type 8, ``ConsumerGroupCurrentMemberAssignmentValue``):
  member epoch, previous member epoch, reconciliation state, assigned partitions and the
  partitions pending revocation.

``subscribed_topic_regex`` is ``""`` for a member that never sent one, as in Kafka (and a
member replayed from a record that stored null keeps ``None``): :attr:`ConsumerGroupMember.regex`
is None for both, which is how Kafka ignores an empty regex.

The states (``MemberState``, stored as a byte in record type 8; its home is :mod:`.records`):
STABLE, the member owns exactly its part of the target assignment of its epoch;
UNREVOKED_PARTITIONS, it must first give up ``pending_revocation`` and stays at its epoch
until a heartbeat reports them gone; UNRELEASED_PARTITIONS, it reached the target epoch but
waits for partitions another member still holds; UNKNOWN, a state written by a newer version.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .assignment import EMPTY, Assignment
from .records import ClassicMemberMetadata, MemberState

#: ConsumerGroupHeartbeat member epochs with a meaning of their own (Kafka
#: ``ConsumerGroupHeartbeatRequest``): join, leave, and a static member's temporary leave.
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


def member_state(value: int) -> MemberState:
    """The state stored as ``value`` (Kafka ``MemberState.fromValue``): a value this version
    does not know, written by a newer one, is UNKNOWN, and such a member is fenced on its next
    heartbeat (see :mod:`.reconcile`)."""
    try:
        return MemberState(value)
    except ValueError:
        return MemberState.UNKNOWN


@dataclass(frozen=True)
class ConsumerGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = ""
    server_assignor: str | None = None
    assigned: Assignment = field(default_factory=lambda: EMPTY)
    pending_revocation: Assignment = field(default_factory=lambda: EMPTY)
    #: A member using the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside the group: its
    #: session timeout and the protocols of its last JoinGroup (record type 5's
    #: ClassicMemberMetadata); None for a consumer-protocol member.
    classic: ClassicMemberMetadata | None = None

    def replace(self, **changes) -> ConsumerGroupMember:
        return dataclasses.replace(self, **changes)

    def with_next_epoch(self, member_epoch: int, **changes) -> ConsumerGroupMember:
        """Move to ``member_epoch``, remembering the current one as the previous epoch
        (Kafka ``Builder.updateMemberEpoch``)."""
        return dataclasses.replace(self, member_epoch=member_epoch,
                                   previous_member_epoch=self.member_epoch, **changes)

    def is_reconciled_to(self, target_assignment_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_assignment_epoch

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    @property
    def regex(self) -> str | None:
        """The member's regular expression, or None when it has none (or an empty one)."""
        return self.subscribed_topic_regex or None

    def subscription_equals(self, other: ConsumerGroupMember) -> bool:
        """Whether the record-type-5 half of two members is the same."""
        return (self.instance_id, self.rack_id, self.rebalance_timeout_ms, self.client_id, self.client_host,
                self.subscribed_topic_names, self.subscribed_topic_regex, self.server_assignor, self.classic) == (
            other.instance_id, other.rack_id, other.rebalance_timeout_ms, other.client_id, other.client_host,
            other.subscribed_topic_names, other.subscribed_topic_regex, other.server_assignor, other.classic)

    def assignment_equals(self, other: ConsumerGroupMember) -> bool:
        """Whether the record-type-8 half of two members is the same."""
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned,
                self.pending_revocation) == (other.member_epoch, other.previous_member_epoch, other.state,
                                             other.assigned, other.pending_revocation)
