"""Reconciliation: one step of a member towards its target assignment (Kafka ``CurrentAssignmentBuilder``).

Given a member, the group's target assignment epoch, the member's part of the target
assignment, what the member reported owning and which member holds each partition now,
:func:`reconcile` returns the member's next state, or the member itself when it cannot move.

Revoke before assign. The transitions, as Kafka's:

* STABLE: a new target epoch starts a step (:func:`_next_assignment`); at the same epoch only
  a changed subscription is applied (:func:`_drop_unsubscribed`).
* UNREVOKED_PARTITIONS: the member stays put while it still reports owning any partition
  pending revocation (or reports nothing); once they are gone it steps towards the target.
* UNRELEASED_PARTITIONS: it steps again, picking up the partitions released meanwhile.
* UNKNOWN: it is fenced unless it reports owning nothing, then starts over at the target epoch.

One step: the partitions kept are current ∩ target; the rest of current is pending
revocation. If the member still owns any of those it moves to UNREVOKED_PARTITIONS at its own
epoch. Otherwise it moves to the target epoch and receives the target partitions that no other
member holds (``partition_epoch`` answers -1 for a free partition); if some are still held
elsewhere it is UNRELEASED_PARTITIONS, else STABLE. A partition is therefore never handed to a
member while another member may still own it.
"""

from __future__ import annotations

from collections.abc import Callable, Set

from sundial.protocol.errors import ErrorCode

from .assignment import EMPTY, Assignment, TopicId, freeze, owns_any, union
from .errors import GroupError
from .member import ConsumerGroupMember, MemberState

#: (topic id, partition) → epoch of the member holding it, or -1 when no member holds it.
PartitionEpoch = Callable[[TopicId, int], int]


def reconcile(member: ConsumerGroupMember, *, target_epoch: int, target: Assignment,
              subscribed_topic_ids: Set[TopicId], partition_epoch: PartitionEpoch,
              owned: Assignment | None, subscription_changed: bool = False) -> ConsumerGroupMember:
    """The member's next state (or ``member`` itself when nothing can change).

    ``subscribed_topic_ids``: ids of the existing topics the member subscribes to (names and
    resolved regex); a topic outside them counts as absent from the target. ``owned``: the
    partitions the heartbeat reported (None when the request left them out).
    """
    step = _Step(member, target_epoch, target, subscribed_topic_ids, partition_epoch, owned)
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return step.next_assignment(member.member_epoch, member.assigned)
        if subscription_changed:
            return step.drop_unsubscribed()
        return member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return step.drop_unsubscribed() if subscription_changed else member
        return step.next_assignment(member.member_epoch, member.assigned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return step.next_assignment(member.member_epoch, member.assigned)
    # UNKNOWN: written by a newer version; start over from nothing.
    if owned is None or owned:
        raise GroupError(ErrorCode.FENCED_MEMBER_EPOCH, "The consumer group member is in a unknown state. "
                         "The member must abandon all its partitions and rejoin.")
    return step.next_assignment(target_epoch, member.assigned)


class _Step:
    def __init__(self, member: ConsumerGroupMember, target_epoch: int, target: Assignment,
                 subscribed: Set[TopicId], partition_epoch: PartitionEpoch, owned: Assignment | None) -> None:
        self.member = member
        self.target_epoch = target_epoch
        self.target = target
        self.subscribed = subscribed
        self.partition_epoch = partition_epoch
        self.owned = owned

    def drop_unsubscribed(self) -> ConsumerGroupMember:
        """Keep the epoch and state; move the partitions of topics no longer subscribed to
        pending revocation (Kafka ``updateCurrentAssignment``)."""
        member = self.member
        removed = {topic_id: parts for topic_id, parts in member.assigned.items() if topic_id not in self.subscribed}
        if not removed:
            return member
        kept = freeze({topic_id: parts for topic_id, parts in member.assigned.items() if topic_id in self.subscribed})
        pending = union(member.pending_revocation, freeze(removed))
        if owns_any(self.owned, pending):
            return member.replace(state=MemberState.UNREVOKED_PARTITIONS, assigned=kept, pending_revocation=pending)
        # Already given up by the member: only the assignment shrinks.
        return member.replace(assigned=kept)

    def next_assignment(self, member_epoch: int, current: Assignment) -> ConsumerGroupMember:
        """One step towards the target (Kafka ``computeNextAssignment``)."""
        member = self.member
        kept: dict[TopicId, frozenset[int]] = {}
        revoking: dict[TopicId, frozenset[int]] = {}
        granted: dict[TopicId, frozenset[int]] = {}
        unreleased = False
        for topic_id in set(self.target) | set(current):
            target = self.target.get(topic_id, frozenset()) if topic_id in self.subscribed else frozenset()
            mine = current.get(topic_id, frozenset())
            keep = mine & target
            being_revoked_by_me = member.pending_revocation.get(topic_id, frozenset())
            free: set[int] = set()
            for partition in target - keep:
                # A partition this member is itself revoking is not someone else's.
                if self.partition_epoch(topic_id, partition) != -1 and partition not in being_revoked_by_me:
                    unreleased = True
                else:
                    free.add(partition)
            kept[topic_id] = keep
            revoking[topic_id] = mine - keep
            granted[topic_id] = frozenset(free)
        pending = freeze(revoking)
        if pending and owns_any(self.owned, pending):
            return member.with_next_epoch(member_epoch, state=MemberState.UNREVOKED_PARTITIONS,
                                          assigned=freeze(kept), pending_revocation=pending)
        state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        return member.with_next_epoch(self.target_epoch, state=state, assigned=union(freeze(kept), freeze(granted)),
                                      pending_revocation=EMPTY)
