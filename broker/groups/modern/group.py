"""One consumer-protocol group: what it is (Kafka ``ConsumerGroup`` / ``ModernGroup``).

State, all of it rebuilt from records (see :mod:`.replay`, the only writer):

* ``group_epoch`` (record type 3, with ``metadata_hash``): bumped on every change of
  membership, subscriptions or subscribed topic metadata;
* ``assignment_epoch`` (type 6) and ``targets`` (type 7): the target assignment, computed
  for that group epoch; 0 for a new group, -1 once its record was deleted;
* ``members`` (types 5 and 8), ``resolved_regexes`` (type 16);
* derived and kept in step by :meth:`set_member`/:meth:`remove_member`: the epoch at which
  each partition is held (Kafka ``currentPartitionEpoch``: the epoch of the member holding
  it, in its assignment or pending revocation) and the static members by instance id.

The group's state (:attr:`state`) follows from those: Empty without members, Assigning while
the group epoch is ahead of the assignment epoch, Reconciling while a member is not yet
STABLE at the assignment epoch, else Stable.

The what-if queries (:meth:`subscribed_topic_counts`, :meth:`is_homogeneous`,
:meth:`preferred_assignor`) take ``replacing``: members to substitute (or drop, with None)
before counting, so the manager can ask about the group as a heartbeat would leave it before
writing any record.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

import structlog

from .assignment import EMPTY, Assignment, TopicId, pairs
from .member import ConsumerGroupMember, MemberState
from .topics import TopicImage

log = structlog.get_logger(__name__)

#: The protocol type every consumer-protocol group reports (Kafka ``ConsumerProtocol.PROTOCOL_TYPE``).
PROTOCOL_TYPE = "consumer"
#: The group type in ListGroups v5 / DescribeGroups (Kafka ``Group.GroupType.CONSUMER``).
GROUP_TYPE = "consumer"


class ConsumerGroupState(Enum):
    """Kafka ``ConsumerGroup.ConsumerGroupState``; the value is the name Kafka reports."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class ResolvedRegex:
    """A regular expression resolved against the topics (record type 16)."""

    topics: frozenset[str]
    version: int
    timestamp_ms: int


#: A member substitution for the what-if queries: member id → new member, or None to drop it.
Replacing = Mapping[str, ConsumerGroupMember | None]


def _names_of(member: ConsumerGroupMember) -> Iterable[str]:
    """The topic names a member subscribes to by name."""
    return member.subscribed_topic_names


def _regex_of(member: ConsumerGroupMember) -> Iterable[str]:
    """The member's subscribed regular expression, if any."""
    return (member.regex,) if member.regex else ()


def _assignor_of(member: ConsumerGroupMember) -> Iterable[str]:
    """The server assignor the member asked for, if any."""
    return (member.server_assignor,) if member.server_assignor else ()


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.metadata_hash = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.targets: dict[str, Assignment] = {}
        self.resolved_regexes: dict[str, ResolvedRegex] = {}
        #: A Kafka 4.0 subscription-metadata record (type 4) is live: the next epoch bump deletes it.
        self.has_legacy_partition_metadata = False
        self._partition_epochs: dict[tuple[TopicId, int], int] = {}
        self._static_members: dict[str, str] = {}
        # Counts over the members, kept in step by set_member/remove_member (Kafka keeps the same).
        self._name_counts: Counter[str] = Counter()
        self._regex_counts: Counter[str] = Counter()
        self._assignor_counts: Counter[str] = Counter()
        #: Members using the classic protocol, and how many of them support each classic protocol name.
        self._classic_members = 0
        self._classic_protocol_counts: Counter[str] = Counter()

    # -- what the group is ----------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self._static_members.get(instance_id)

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        member_id = self.static_member_id(instance_id)
        return None if member_id is None else self.members.get(member_id)

    @property
    def static_members(self) -> Mapping[str, str]:
        return self._static_members

    def target_of(self, member_id: str) -> Assignment:
        return self.targets.get(member_id, EMPTY)

    def target_for(self, member_id: str, instance_id: str | None) -> Assignment:
        """The target of the member, or of the static member it replaces (Kafka
        ``ConsumerGroup.targetAssignment(memberId, instanceId)``)."""
        if instance_id is None:
            return self.target_of(member_id)
        previous = self.static_member_id(instance_id)
        return self.target_of(previous) if previous is not None else EMPTY

    def partition_epoch(self, topic_id: TopicId, partition: int) -> int:
        """The epoch of the member holding the partition, or -1 when none holds it."""
        return self._partition_epochs.get((topic_id, partition), -1)

    def holders(self) -> dict[tuple[TopicId, int], list[str]]:
        """Every held partition with the members holding it (one, unless something is wrong)."""
        held: dict[tuple[TopicId, int], list[str]] = {}
        for m in self.members.values():
            for tp in pairs(m.assigned):
                held.setdefault(tp, []).append(m.member_id)
            for tp in pairs(m.pending_revocation):
                held.setdefault(tp, []).append(m.member_id)
        return held

    # -- classic members (online migration, Kafka ``ConsumerGroup`` classic-member counts) ------

    @property
    def classic_member_count(self) -> int:
        return self._classic_members

    def supports_classic_protocols(self, protocol_type: str, protocol_names: Iterable[str]) -> bool:
        """Whether a classic member with these protocols may join: the protocol type is "consumer"
        and, unless the group is empty, one of its protocols is supported by every classic member
        (Kafka ``supportsClassicProtocols``)."""
        names = list(protocol_names)
        if protocol_type != "consumer":
            return False
        if not self.members:
            return bool(names)
        return any(self._classic_protocol_counts.get(name, 0) == self._classic_members for name in names)

    def all_classic_except(self, member_id: str) -> bool:
        """Whether every member but ``member_id`` uses the classic protocol and ``member_id`` does not
        (Kafka ``allMembersUseClassicProtocolExcept``)."""
        member = self.members.get(member_id)
        return (member is not None and not member.uses_classic_protocol
                and self._classic_members == len(self.members) - 1)

    def waiting_on_unreleased_partition(self, member: ConsumerGroupMember) -> bool:
        """Whether a member in UNRELEASED_PARTITIONS still waits for a partition of its target that
        another member holds (Kafka ``waitingOnUnreleasedPartition``)."""
        if member.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        for topic_id, partitions in self.target_of(member.member_id).items():
            mine = member.assigned.get(topic_id, frozenset())
            if any(p not in mine and self.partition_epoch(topic_id, p) != -1 for p in partitions):
                return True
        return False

    def persisted_state(self) -> tuple:
        """Everything the records hold of the group, as one comparable value: replaying the
        records a group was built from gives a group with the same value."""
        return (self.group_id, self.group_epoch, self.metadata_hash, self.assignment_epoch,
                self.has_legacy_partition_metadata, dict(self.members), dict(self.targets),
                dict(self.resolved_regexes), dict(self._partition_epochs), dict(self._static_members),
                dict(self._name_counts), dict(self._regex_counts), dict(self._assignor_counts))

    # -- what-if queries ------------------------------------------------------------------------

    def members_after(self, replacing: Replacing) -> dict[str, ConsumerGroupMember]:
        after = dict(self.members)
        for member_id, member in replacing.items():
            if member is None:
                after.pop(member_id, None)
            else:
                after[member_id] = member
        return after

    def _counts_after(self, counts: Counter[str], keys_of: Callable[[ConsumerGroupMember], Iterable[str]],
                      replacing: Replacing) -> Counter[str]:
        """``counts`` (how many members give each key of ``keys_of``) as they would be with ``replacing``
        applied; keys nobody gives any more are dropped. ``counts`` itself when nothing is replaced."""
        if not replacing:
            return counts
        after = Counter(counts)
        for member_id, member in replacing.items():
            old = self.members.get(member_id)
            if old is not None:
                after.subtract(keys_of(old))
            if member is not None:
                after.update(keys_of(member))
        return +after

    def member_count(self, replacing: Replacing = {}) -> int:
        return len(self.members) + sum((m is not None) - (mid in self.members) for mid, m in replacing.items())

    def regex_subscribers(self, replacing: Replacing = {}) -> Counter[str]:
        """Regular expression → number of members subscribed to it (Kafka ``subscribedRegularExpressions``)."""
        return self._counts_after(self._regex_counts, _regex_of, replacing)

    def subscribed_topic_counts(self, replacing: Replacing = {},
                                resolved: Mapping[str, ResolvedRegex] | None = None) -> dict[str, tuple[int, int]]:
        """Topic name → (members subscribing by name, subscribed regexes matching it)
        (Kafka ``subscribedTopicNames`` / ``SubscriptionCount``)."""
        resolved = self.resolved_regexes if resolved is None else resolved
        by_name = self._counts_after(self._name_counts, _names_of, replacing)
        live = self.regex_subscribers(replacing)
        by_regex: Counter[str] = Counter()
        for regex, resolution in resolved.items():
            if regex in live:
                by_regex.update(resolution.topics)
        return {name: (by_name[name], by_regex[name]) for name in by_name.keys() | by_regex.keys()}

    def is_homogeneous(self, replacing: Replacing = {}, resolved: Mapping[str, ResolvedRegex] | None = None) -> bool:
        """Whether every member subscribes to the same topics (Kafka ``ConsumerGroup.subscriptionType``)."""
        n = self.member_count(replacing)
        regexes = self.regex_subscribers(replacing)
        counts = self.subscribed_topic_counts(replacing, resolved)
        if not regexes:
            return all(by_name == n for by_name, _ in counts.values())
        if len(regexes) == 1 and next(iter(regexes.values())) == n:
            return all(by_regex == 1 and by_name == 0 for by_name, by_regex in counts.values())
        return False

    def preferred_assignor(self, replacing: Replacing = {}) -> str | None:
        """The server assignor most members asked for (ties: the first name in order); None
        when no member named one (Kafka ``computePreferredServerAssignor``)."""
        counts = self._counts_after(self._assignor_counts, _assignor_of, replacing)
        if not counts:
            return None
        return min(counts, key=lambda name: (-counts[name], name))

    def subscribed_topic_ids(self, member: ConsumerGroupMember, image: TopicImage,
                             resolved: Mapping[str, ResolvedRegex] | None = None) -> frozenset[TopicId]:
        """Ids of the existing topics a member subscribes to, by name or through its regex
        (an unresolved regex matches nothing)."""
        resolved = self.resolved_regexes if resolved is None else resolved
        names: frozenset[str] = member.subscribed_topic_names
        if member.regex and member.regex in resolved:
            names = names | resolved[member.regex].topics
        return image.ids(names)

    # -- changes (made by replaying records only) ------------------------------------------------

    def set_member(self, member: ConsumerGroupMember) -> None:
        old = self.members.get(member.member_id)
        self.members[member.member_id] = member
        if old is not None:
            self._release(old)
            self._count(old, -1)
        self._hold(member)
        self._count(member, 1)
        if member.instance_id is not None:
            self._static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is None:
            return
        self._release(old)
        self._count(old, -1)
        if old.instance_id is not None and self._static_members.get(old.instance_id) == member_id:
            del self._static_members[old.instance_id]

    def set_target(self, member_id: str, assignment: Assignment) -> None:
        self.targets[member_id] = assignment

    def remove_target(self, member_id: str) -> None:
        self.targets.pop(member_id, None)

    def _count(self, member: ConsumerGroupMember, sign: int) -> None:
        if member.classic is not None:
            self._classic_members += sign
            for proto in {p.name for p in member.classic.supported_protocols}:
                self._classic_protocol_counts[proto] += sign
                if self._classic_protocol_counts[proto] <= 0:
                    del self._classic_protocol_counts[proto]
        for counts, keys_of in ((self._name_counts, _names_of), (self._regex_counts, _regex_of),
                                (self._assignor_counts, _assignor_of)):
            for key in keys_of(member):
                counts[key] += sign
                if counts[key] <= 0:
                    del counts[key]

    def _release(self, member: ConsumerGroupMember) -> None:
        for tp in (*pairs(member.assigned), *pairs(member.pending_revocation)):
            if self._partition_epochs.get(tp) == member.member_epoch:
                del self._partition_epochs[tp]

    def _hold(self, member: ConsumerGroupMember) -> None:
        for tp in (*pairs(member.assigned), *pairs(member.pending_revocation)):
            previous = self._partition_epochs.get(tp)
            if previous is not None and previous >= member.member_epoch:
                # Kafka raises IllegalStateException here: two members would hold it.
                log.error("consumer group partition held twice", group_id=self.group_id, topic_id=str(tp[0]),
                          partition=tp[1], epoch=member.member_epoch, held_at_epoch=previous,
                          member_id=member.member_id)
            self._partition_epochs[tp] = member.member_epoch
