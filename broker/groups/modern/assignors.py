"""Kafka's server-side consumer-group assignors, ``uniform`` and ``range`` (KIP-848).

The coordinator computes a group's target assignment with one of these whenever the group
epoch moves past the assignment epoch. The input is every member's subscription and
current *target* assignment, and the partition count of every topic; the output is the
new target assignment of every member. Pure functions of their input: no I/O, no clock,
no randomness, and the same output for the same content whatever the mapping order.

``uniform`` (Kafka ``UniformAssignor``, the default) spreads the partitions of all the
subscribed topics over the members, balance first, stickiness second:

* when every member subscribes to the same topics (homogeneous group) it follows Kafka's
  ``UniformHomogeneousAssignmentBuilder`` as fixed by KAFKA-18688 (Kafka 4.1): with
  ``P`` partitions and ``M`` members every member gets ``P // M`` partitions and
  ``P % M`` of them one more; a member keeps its current partitions up to that quota
  (the lowest partition numbers of the topics in topic-id order), and the members that
  already hold ``P // M + 1`` keep their extra partition while extra slots remain, so an
  assignment that is already balanced comes back unchanged. Freed and unowned partitions
  go, in topic then partition order, to the members below their quota;
* otherwise it follows Kafka's ``UniformHeterogeneousAssignmentBuilder``: members keep
  every partition they own of a topic they still subscribe to, the unowned partitions of
  each topic go round robin to its least loaded subscribers (topics with the most
  partitions per subscriber first), then partitions move from the most to the least
  loaded subscribers of each topic until no topic can improve (at most 16 passes, as
  Kafka). Sizes are then within one among the subscribers of a topic that share the same
  subscription; overlapping subscriptions can leave a larger spread, as in Kafka.

``range`` (Kafka ``RangeAssignor``) gives every subscriber of a topic a contiguous range:
``P // S`` partitions each and one more to the first ``P % S`` subscribers, the
subscribers ordered with static members first (by instance id) and then the others (by
member id). Topics with the same partition count and the same subscribers are therefore
co-partitioned: partition ``i`` of each goes to the same member. Since Kafka 3.9
(KAFKA-16944) this assignor ignores the current assignment: it is stable (the same group
always gets the same answer, and a static member that rejoins with a new member id gets
its old range back) but not sticky across joins and leaves.

Where Kafka iterates a Java ``HashMap``/``HashSet`` (member ids in the uniform builders,
topic ids in the homogeneous builder), the order is an accident of hashing; here members
are taken in member-id order and topics in topic-id order, compared as Kafka compares
them (``String.compareTo``: UTF-16 code units; ``Uuid.compareTo``: the two halves as
signed 64-bit integers). Kafka's own tests pin the member order the same way.

Invalid current assignments are cleaned before use (Kafka's coordinator never hands its
assignors one): partitions beyond the partition count, of missing topics or of topics the
member no longer subscribes to are dropped, and a partition held by two members stays
with the first in member-id order. Topics that a member subscribes to but that are not in
``topics`` are ignored (Kafka raises; the coordinator here resolves subscriptions against
the topic view it passes, so a missing id can only be a topic deleted meanwhile).

Racks: with a single broker every partition has the same replica racks, and Kafka's
rack-aware placement only acts when partitions have replicas on different sets of racks,
so ``rack_id`` and ``TopicSpec.partition_racks`` never change the outcome and are not read.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Mapping, Protocol

TopicId = uuid.UUID
Assignment = dict[TopicId, frozenset[int]]

UNIFORM_ASSIGNOR_NAME = "uniform"
RANGE_ASSIGNOR_NAME = "range"

# Kafka ``UniformHeterogeneousAssignmentBuilder.MAX_ITERATION_COUNT``: passes over the
# topics in the final balancing phase. Each pass roughly halves the imbalance when
# subscriptions overlap; identical subscriptions converge in one pass.
_MAX_BALANCE_PASSES = 16


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows of one member.

    ``assigned`` is the member's current *target* assignment (the stickiness input). For
    a static member that replaces a departed one (same instance id, new member id), the
    coordinator passes the departed member's target assignment, as Kafka's
    ``TargetAssignmentBuilder`` does.
    """

    subscribed_topic_ids: frozenset[TopicId]
    rack_id: str | None
    assigned: Mapping[TopicId, frozenset[int]]
    instance_id: str | None = None


@dataclass(frozen=True)
class TopicSpec:
    """A topic as the assignors see it: its partition count (and replica racks)."""

    partitions: int
    partition_racks: Mapping[int, frozenset[str]] = field(default_factory=dict)


class ServerAssignor(Protocol):
    """A server-side assignor, chosen by name (``group.consumer.assignors``)."""

    name: str

    def assign(
        self,
        members: Mapping[str, MemberSpec],
        topics: Mapping[TopicId, TopicSpec],
        *,
        homogeneous: bool | None = None,
    ) -> dict[str, Assignment]:
        """The new target assignment of every member in ``members``.

        ``homogeneous`` is Kafka's group subscription type (every subscribed topic name
        is subscribed by every member); ``None`` derives it from the members' topic ids.
        A claim of homogeneity that the topic ids contradict is ignored.
        """
        ...


def java_string_key(value: str) -> bytes:
    """Sort key giving Java's ``String.compareTo`` order (UTF-16 code units)."""
    return value.encode("utf-16-be", "surrogatepass")


def kafka_uuid_key(topic_id: TopicId) -> tuple[int, int]:
    """Sort key giving Kafka's ``Uuid.compareTo`` order (signed 64-bit halves)."""
    value = topic_id.int
    msb, lsb = value >> 64, value & 0xFFFF_FFFF_FFFF_FFFF
    if msb >= 1 << 63:
        msb -= 1 << 64
    if lsb >= 1 << 63:
        lsb -= 1 << 64
    return msb, lsb


def _partition_count(topics: Mapping[TopicId, TopicSpec], topic_id: TopicId) -> int:
    return max(0, topics[topic_id].partitions)


def _subscriptions(
    member_ids: list[str], members: Mapping[str, MemberSpec], topics: Mapping[TopicId, TopicSpec]
) -> list[list[TopicId]]:
    """Per member (in ``member_ids`` order): its subscribed topics that exist, in Kafka's order.

    Members with equal subscriptions share one list (computed once per distinct set).
    """
    by_set: dict[frozenset[TopicId], list[TopicId]] = {}
    result = []
    for member_id in member_ids:
        subscribed = members[member_id].subscribed_topic_ids
        resolved = by_set.get(subscribed)
        if resolved is None:
            resolved = by_set[subscribed] = sorted(
                (t for t in subscribed if t in topics), key=kafka_uuid_key
            )
        result.append(resolved)
    return result


def _is_homogeneous(member_ids: list[str], members: Mapping[str, MemberSpec]) -> bool:
    first = members[member_ids[0]].subscribed_topic_ids
    return all(members[m].subscribed_topic_ids == first for m in member_ids[1:])


def _owned_partitions(
    member_ids: list[str],
    members: Mapping[str, MemberSpec],
    topics: Mapping[TopicId, TopicSpec],
) -> tuple[list[dict[TopicId, list[int]]], dict[TopicId, bytearray]]:
    """The valid part of every member's current assignment, and which partitions are owned.

    Per member: topics it subscribes to that exist, in topic-id order; partitions that
    exist, ascending; a partition claimed by an earlier member (member-id order) dropped.
    """
    owned_flags: dict[TopicId, bytearray] = {}
    owned: list[dict[TopicId, list[int]]] = []
    for member_id in member_ids:
        spec = members[member_id]
        kept: dict[TopicId, list[int]] = {}
        current = [
            t for t, parts in spec.assigned.items()
            if parts and t in topics and t in spec.subscribed_topic_ids
        ]
        for topic_id in sorted(current, key=kafka_uuid_key):
            partitions = spec.assigned[topic_id]
            count = _partition_count(topics, topic_id)
            flags = owned_flags.get(topic_id)
            if flags is None:
                flags = owned_flags[topic_id] = bytearray(count)
            valid = []
            for partition in sorted(partitions):
                if 0 <= partition < count and not flags[partition]:
                    flags[partition] = 1
                    valid.append(partition)
            if valid:
                kept[topic_id] = valid
        owned.append(kept)
    return owned, owned_flags


def _frozen(assignment: Mapping[TopicId, list[int] | set[int]]) -> Assignment:
    return {topic_id: frozenset(parts) for topic_id, parts in assignment.items() if parts}


# --------------------------------------------------------------------------------------
# uniform, homogeneous group


def build_uniform_homogeneous(
    members: Mapping[str, MemberSpec], topics: Mapping[TopicId, TopicSpec]
) -> dict[str, Assignment]:
    """Kafka's ``UniformHomogeneousAssignmentBuilder`` (KAFKA-18688 version).

    Every member must subscribe to the same topics.
    """
    member_ids = sorted(members, key=java_string_key)
    if not member_ids:
        return {}
    subscriptions = _subscriptions(member_ids, members, topics)
    subscribed = subscriptions[0]
    if not subscribed:
        return {member_id: {} for member_id in member_ids}
    owned, owned_flags = _owned_partitions(member_ids, members, topics)

    # Unowned partitions first, topic then partition order; revoked ones are appended.
    unassigned: list[tuple[TopicId, int]] = []
    total = 0
    for topic_id in subscribed:
        count = _partition_count(topics, topic_id)
        total += count
        flags = owned_flags.get(topic_id)
        if flags is None:
            unassigned.extend((topic_id, p) for p in range(count))
        else:
            unassigned.extend((topic_id, p) for p in range(count) if not flags[p])

    minimum_quota, extra_slots = divmod(total, len(member_ids))

    result: dict[str, dict[TopicId, list[int]]] = {}
    # [member id, partitions still to take]
    unfilled: list[list] = []
    for member_id, current in zip(member_ids, owned):
        quota = minimum_quota
        may_take_extra = extra_slots > 0
        if may_take_extra:
            quota += 1
        kept: dict[TopicId, list[int]] = {}
        for topic_id, partitions in current.items():
            if len(partitions) <= quota:
                quota -= len(partitions)
                kept[topic_id] = partitions
            else:
                if quota:
                    kept[topic_id] = partitions[:quota]
                unassigned.extend((topic_id, p) for p in partitions[quota:])
                quota = 0
        if quota > 0 and may_take_extra:
            # Below the minimum even with the extra slot: leave the slot to others.
            quota -= 1
            may_take_extra = False
        if quota == 0 and may_take_extra:
            # Keeps minimum + 1 partitions: claims one of the extra slots.
            extra_slots -= 1
        if quota > 0 or (extra_slots > 0 and not may_take_extra):
            unfilled.append([member_id, quota])
        result[member_id] = kept

    # The extra slots nobody claimed go to the last unfilled members.
    for entry in reversed(unfilled):
        if extra_slots <= 0:
            break
        extra_slots -= 1
        entry[1] += 1

    next_index = 0
    for member_id, quota in unfilled:
        if quota <= 0:
            continue
        assignment = result[member_id]
        for topic_id, partition in unassigned[next_index:next_index + quota]:
            assignment.setdefault(topic_id, []).append(partition)
        next_index += quota
    if next_index < len(unassigned):
        raise AssertionError("uniform assignor left partitions unassigned")

    return {member_id: _frozen(result[member_id]) for member_id in member_ids}


# --------------------------------------------------------------------------------------
# uniform, heterogeneous group


class _MemberBalancer:
    """Kafka's ``MemberAssignmentBalancer``: two ranges over members sorted by size.

    The least loaded range ``[0, least_end)`` grows rightwards and hands out partitions
    round robin, one level at a time; the most loaded range ``[most_start, most_end)``
    grows leftwards and gives partitions up, one level at a time. Balanced once the two
    levels differ by one or less.
    """

    def __init__(self, sizes: list[int]) -> None:
        self._sizes = sizes
        self._sorted: list[int] = []
        self._least_end = 0
        self._least_level = -1
        self._next_least = 0
        self._most_start = 0
        self._most_end = 0
        self._most_level = 1
        self._next_most = -1

    def initialize(self, member_indexes: list[int]) -> int:
        """Reset for these members; returns the spread of their sizes."""
        sizes = self._sizes
        self._sorted = sorted(member_indexes, key=lambda m: (sizes[m], m))
        count = len(self._sorted)
        self._least_end = 0
        self._least_level = sizes[self._sorted[0]] - 1
        self._next_least = 0
        self._most_start = count
        self._most_end = count
        self._most_level = sizes[self._sorted[-1]] + 1
        self._next_most = count - 1
        return sizes[self._sorted[-1]] - sizes[self._sorted[0]]

    def next_least_loaded(self) -> int:
        """The member to receive the next partition (assumed given to it)."""
        order, sizes = self._sorted, self._sizes
        if self._next_least >= self._least_end:
            self._least_level += 1
            while self._least_end < len(order) and sizes[order[self._least_end]] == self._least_level:
                self._least_end += 1
            self._next_least = 0
        member = order[self._next_least]
        self._next_least += 1
        return member

    def next_most_loaded(self) -> int:
        """The member to give up the next partition (assumed taken), or -1 if none is left."""
        order, sizes = self._sorted, self._sizes
        if self._next_most < self._most_start:
            if self._most_end <= self._most_start and self._most_start > 0:
                # Emptied by exclusions: restart the level from the next member down.
                self._most_level = sizes[order[self._most_start - 1]]
            else:
                self._most_level -= 1
            while self._most_start > 0 and sizes[order[self._most_start - 1]] == self._most_level:
                self._most_start -= 1
            self._next_most = self._most_end - 1
        if self._next_most < 0:
            return -1
        member = order[self._next_most]
        self._next_most -= 1
        return member

    def exclude_most_loaded(self) -> None:
        """Drop the member last returned by next_most_loaded from the most loaded range."""
        order = self._sorted
        position = self._next_most + 1
        order[position], order[self._most_end - 1] = order[self._most_end - 1], order[position]
        self._most_end -= 1

    def is_balanced(self) -> bool:
        return self._most_level - self._least_level <= 1


class _HeterogeneousBuilder:
    """Kafka's ``UniformHeterogeneousAssignmentBuilder``."""

    def __init__(self, members: Mapping[str, MemberSpec], topics: Mapping[TopicId, TopicSpec]) -> None:
        self._topics = topics
        self._member_ids = sorted(members, key=java_string_key)
        subscriptions = _subscriptions(self._member_ids, members, topics)
        self._subscribers: dict[TopicId, list[int]] = {}
        for index, subscribed in enumerate(subscriptions):
            for topic_id in subscribed:
                self._subscribers.setdefault(topic_id, []).append(index)
        self._sizes = [0] * len(self._member_ids)
        self._owners: dict[TopicId, list[int]] = {
            topic_id: [-1] * _partition_count(topics, topic_id) for topic_id in self._subscribers
        }
        owned, _ = _owned_partitions(self._member_ids, members, topics)
        self._assignment: list[dict[TopicId, set[int]]] = []
        for index, current in enumerate(owned):
            kept: dict[TopicId, set[int]] = {}
            for topic_id, partitions in current.items():
                kept[topic_id] = set(partitions)
                self._sizes[index] += len(partitions)
                owners = self._owners[topic_id]
                for partition in partitions:
                    owners[partition] = index
            self._assignment.append(kept)

    def _topic_order_key(self, topic_id: TopicId) -> tuple:
        # Partitions per subscriber descending, then subscriber count, then topic id.
        count = _partition_count(self._topics, topic_id)
        subscriber_count = len(self._subscribers[topic_id])
        return (-(count / subscriber_count), subscriber_count, kafka_uuid_key(topic_id))

    def _assign_partition(self, topic_id: TopicId, partition: int, member: int) -> None:
        owners = self._owners[topic_id]
        previous = owners[partition]
        if previous != -1:
            parts = self._assignment[previous][topic_id]
            parts.discard(partition)
            if not parts:
                del self._assignment[previous][topic_id]
            self._sizes[previous] -= 1
        self._assignment[member].setdefault(topic_id, set()).add(partition)
        owners[partition] = member
        self._sizes[member] += 1

    def build(self) -> dict[str, Assignment]:
        if self._subscribers:
            self._assign_unowned()
            balanced_topics = [t for t, subs in self._subscribers.items() if len(subs) >= 2]
            if balanced_topics:
                self._balance(sorted(balanced_topics, key=self._topic_order_key))
        return {
            member_id: _frozen(self._assignment[index])
            for index, member_id in enumerate(self._member_ids)
        }

    def _assign_unowned(self) -> None:
        unowned: dict[TopicId, list[int]] = {}
        for topic_id, owners in self._owners.items():
            free = [p for p, owner in enumerate(owners) if owner == -1]
            if free:
                unowned[topic_id] = free
        balancer = _MemberBalancer(self._sizes)
        for topic_id in sorted(unowned, key=self._topic_order_key):
            balancer.initialize(self._subscribers[topic_id])
            for partition in unowned[topic_id]:
                self._assign_partition(topic_id, partition, balancer.next_least_loaded())

    def _balance(self, topic_ids: list[TopicId]) -> None:
        balancer = _MemberBalancer(self._sizes)
        last_rebalanced = -1
        for _ in range(_MAX_BALANCE_PASSES):
            for index, topic_id in enumerate(topic_ids):
                if index == last_rebalanced:
                    # A full pass since the last move: nothing left to improve.
                    return
                moved = self._balance_topic(topic_id, balancer)
                if moved > 0 or last_rebalanced == -1:
                    last_rebalanced = index

    def _balance_topic(self, topic_id: TopicId, balancer: _MemberBalancer) -> int:
        if balancer.initialize(self._subscribers[topic_id]) <= 1:
            return 0
        owners = self._owners[topic_id]
        # Partitions grouped by owner; each owner's run gives up its highest partitions first.
        partitions = sorted(range(len(owners)), key=lambda p: (owners[p], p))
        run_start: dict[int, int] = {}
        run_end: dict[int, int] = {}
        for position, partition in enumerate(partitions):
            owner = owners[partition]
            run_start.setdefault(owner, position)
            run_end[owner] = position + 1
        moved = 0
        while not balancer.is_balanced():
            while True:
                donor = balancer.next_most_loaded()
                if donor == -1:
                    break
                if run_end.get(donor, 0) - run_start.get(donor, 0) <= 0:
                    balancer.exclude_most_loaded()
                    continue
                break
            if donor == -1:
                break
            run_end[donor] -= 1
            partition = partitions[run_end[donor]]
            receiver = balancer.next_least_loaded()
            if balancer.is_balanced():
                break
            self._assign_partition(topic_id, partition, receiver)
            moved += 1
        return moved


def build_uniform_heterogeneous(
    members: Mapping[str, MemberSpec], topics: Mapping[TopicId, TopicSpec]
) -> dict[str, Assignment]:
    """Kafka's ``UniformHeterogeneousAssignmentBuilder`` (any subscriptions)."""
    return _HeterogeneousBuilder(members, topics).build()


# --------------------------------------------------------------------------------------
# the assignors


class UniformAssignor:
    """Kafka's ``UniformAssignor`` (name ``uniform``): balance, then stickiness."""

    name = UNIFORM_ASSIGNOR_NAME

    def assign(
        self,
        members: Mapping[str, MemberSpec],
        topics: Mapping[TopicId, TopicSpec],
        *,
        homogeneous: bool | None = None,
    ) -> dict[str, Assignment]:
        if not members:
            return {}
        ids_homogeneous = _is_homogeneous(list(members), members)
        if homogeneous is None:
            homogeneous = ids_homogeneous
        if homogeneous and ids_homogeneous:
            return build_uniform_homogeneous(members, topics)
        return build_uniform_heterogeneous(members, topics)


class RangeAssignor:
    """Kafka's ``RangeAssignor`` (name ``range``): contiguous, co-partitioned ranges."""

    name = RANGE_ASSIGNOR_NAME

    def assign(
        self,
        members: Mapping[str, MemberSpec],
        topics: Mapping[TopicId, TopicSpec],
        *,
        homogeneous: bool | None = None,
    ) -> dict[str, Assignment]:
        # Homogeneous or not, every topic is split over its own subscribers in the same
        # member order, so one rule serves both of Kafka's cases.
        def order_key(member_id: str) -> tuple:
            instance_id = members[member_id].instance_id
            if instance_id is not None:
                return (0, java_string_key(instance_id), java_string_key(member_id))
            return (1, java_string_key(member_id))

        member_ids = sorted(members, key=order_key)
        result: dict[str, Assignment] = {member_id: {} for member_id in member_ids}
        # Members grouped by subscription (a group of one in a homogeneous group), so
        # the cost is one pass per distinct subscription, not per member and topic.
        cohorts: dict[frozenset[TopicId], list[int]] = {}
        for position, member_id in enumerate(member_ids):
            cohorts.setdefault(members[member_id].subscribed_topic_ids, []).append(position)
        topic_cohorts: dict[TopicId, list[list[int]]] = {}
        for subscribed, positions in cohorts.items():
            for topic_id in subscribed:
                if topic_id in topics:
                    topic_cohorts.setdefault(topic_id, []).append(positions)
        for topic_id, groups in topic_cohorts.items():
            positions = groups[0] if len(groups) == 1 else sorted(p for g in groups for p in g)
            topic_members = [member_ids[p] for p in positions]
            count = _partition_count(topics, topic_id)
            minimum_quota, extra = divmod(count, len(topic_members))
            start = 0
            for position, member_id in enumerate(topic_members):
                if start >= count:
                    break
                end = start + minimum_quota + (1 if position < extra else 0)
                if start < end:
                    result[member_id][topic_id] = frozenset(range(start, end))
                start = end
        return result


UNIFORM = UniformAssignor()
RANGE = RangeAssignor()

ASSIGNORS: dict[str, ServerAssignor] = {UNIFORM.name: UNIFORM, RANGE.name: RANGE}
