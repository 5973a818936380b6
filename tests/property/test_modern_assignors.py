"""Hypothesis: the server-side consumer-group assignors ``uniform`` and ``range``.

Random groups (members with random subscriptions among random topics, some of them
missing from the topic view; random current assignments including invalid ones:
partitions past the partition count, partitions of missing or unsubscribed topics,
partitions held by two members) are checked against what the test computes itself:

* validity: every partition of a subscribed topic goes to exactly one of its subscribers,
  nothing else is assigned, every member is in the answer, and the answer depends on the
  content only (not on mapping order);
* uniform: sizes within one in a homogeneous group; no partition could move to a
  subscriber of its topic with two partitions fewer (heterogeneous); an assignment that is
  already valid and balanced comes back unchanged; after a member leaves the others keep
  everything, after one joins they keep at least their new minimum quota;
* range: per topic, contiguous ranges of ``P // S`` or one more, the extra ones to the
  first subscribers in Kafka's order (static members by instance id, then member ids);
  co-partitioned topics get the same partitions per member; the current assignment is
  ignored (Kafka's range assignor is stable, not sticky);
* a state machine of joins, leaves, subscription changes, partition count increases and
  topic deletions never hands a partition to two members.

The example tests reproduce outputs of Kafka's own unit tests (``RangeAssignorTest``,
``UniformHeterogeneousAssignmentBuilderTest``, ``UniformHomogeneousAssignmentBuilderTest``).
"""

from __future__ import annotations

import base64
import random
import uuid
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sundial.broker.groups.modern.assignors import (
    ASSIGNORS,
    RANGE,
    UNIFORM,
    MemberSpec,
    TopicSpec,
    build_uniform_heterogeneous,
    build_uniform_homogeneous,
    java_string_key,
    kafka_uuid_key,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------------------
# strategies

topic_ids = st.integers(min_value=0, max_value=2**128 - 1).map(lambda i: uuid.UUID(int=i))
member_names = st.text(alphabet="abcAB-é\U0001f600", min_size=1, max_size=3)


@st.composite
def groups(draw, *, homogeneous: bool | None = None, valid_assigned: bool = False, min_members: int = 1):
    """(members, topics): random members over random topics, some subscriptions to missing topics."""
    existing = draw(st.lists(topic_ids, min_size=1, max_size=5, unique=True))
    missing = draw(st.lists(topic_ids.filter(lambda t: t not in existing), max_size=2, unique=True))
    topics = {t: TopicSpec(draw(st.integers(min_value=0, max_value=12))) for t in existing}
    universe = existing + missing
    ids = draw(st.lists(member_names, min_size=min_members, max_size=7, unique=True))
    if homogeneous:
        common = frozenset(draw(st.lists(st.sampled_from(universe), min_size=1, unique=True)))
    members = {}
    for member_id in ids:
        subscribed = common if homogeneous else frozenset(
            draw(st.lists(st.sampled_from(universe), unique=True))
        )
        assigned = {}
        if not valid_assigned:
            for topic_id in draw(st.lists(st.sampled_from(universe), unique=True)):
                limit = topics[topic_id].partitions if topic_id in topics else 3
                assigned[topic_id] = frozenset(
                    draw(st.lists(st.integers(min_value=-1, max_value=limit + 2), max_size=8))
                )
        instance_id = draw(st.one_of(st.none(), st.sampled_from(["i1", "i2", "i3", "I", "é"])))
        members[member_id] = MemberSpec(subscribed, None, assigned, instance_id)
    if homogeneous is False and len({m.subscribed_topic_ids for m in members.values()}) == 1:
        # Force a genuinely heterogeneous group: one more member with another subscription.
        other = frozenset(universe) - members[ids[0]].subscribed_topic_ids
        members["zz-extra"] = MemberSpec(other, None, {}, None)
    return members, topics


def with_assigned(members, assignment):
    return {m: MemberSpec(s.subscribed_topic_ids, s.rack_id, assignment.get(m, {}), s.instance_id)
            for m, s in members.items()}


def is_homogeneous(members):
    return len({m.subscribed_topic_ids for m in members.values()}) <= 1


# ----------------------------------------------------------------------------------------
# oracles


def check_valid(members, topics, result):
    """Every partition of a subscribed topic to exactly one subscriber; nothing else."""
    assert set(result) == set(members)
    owners: dict[tuple[uuid.UUID, int], str] = {}
    for member_id, assignment in result.items():
        for topic_id, partitions in assignment.items():
            assert partitions, f"empty partition set for {member_id}"
            assert isinstance(partitions, frozenset)
            assert topic_id in topics, "assigned a missing topic"
            assert topic_id in members[member_id].subscribed_topic_ids, "assigned an unsubscribed topic"
            for partition in partitions:
                assert 0 <= partition < topics[topic_id].partitions
                key = (topic_id, partition)
                assert key not in owners, f"{key} owned by {owners.get(key)} and {member_id}"
                owners[key] = member_id
    subscribed = {t for m in members.values() for t in m.subscribed_topic_ids if t in topics}
    expected = {(t, p) for t in subscribed for p in range(topics[t].partitions)}
    assert set(owners) == expected


def valid_assignment(assignor, members, topics, **kwargs):
    """``assignor``'s assignment of ``topics`` to ``members``, after :func:`check_valid` of it."""
    result = assignor.assign(members, topics, **kwargs)
    check_valid(members, topics, result)
    return result


def sizes(result):
    return {m: sum(len(p) for p in a.values()) for m, a in result.items()}


def no_improving_move(members, topics, result):
    """Kafka's heterogeneous balance: no partition could go to a subscriber of its topic with 2+ fewer."""
    size = sizes(result)
    for topic_id in topics:
        subscribers = [m for m, s in members.items() if topic_id in s.subscribed_topic_ids]
        if len(subscribers) < 2:
            continue
        smallest = min(size[m] for m in subscribers)
        for member_id in subscribers:
            if result[member_id].get(topic_id):
                assert size[member_id] - smallest <= 1, (topic_id, member_id, size)


def shuffled(members, seed):
    """The same group, with every mapping in another order."""
    rnd = random.Random(seed)
    ids = list(members)
    rnd.shuffle(ids)
    out = {}
    for member_id in ids:
        spec = members[member_id]
        items = list(spec.assigned.items())
        rnd.shuffle(items)
        out[member_id] = MemberSpec(spec.subscribed_topic_ids, spec.rack_id, dict(items), spec.instance_id)
    return out


def range_order(members):
    def key(member_id):
        instance_id = members[member_id].instance_id
        if instance_id is not None:
            return (0, java_string_key(instance_id), java_string_key(member_id))
        return (1, java_string_key(member_id))
    return sorted(members, key=key)


def random_balanced_homogeneous(members, topics, rnd):
    """A valid assignment with sizes within one: partitions dealt at random."""
    subscribed = next(iter(members.values())).subscribed_topic_ids
    partitions = [(t, p) for t in topics if t in subscribed for p in range(topics[t].partitions)]
    rnd.shuffle(partitions)
    ids = list(members)
    rnd.shuffle(ids)
    quota, extra = divmod(len(partitions), len(ids))
    out, start = {}, 0
    for position, member_id in enumerate(ids):
        count = quota + (1 if position < extra else 0)
        assignment: dict[uuid.UUID, set[int]] = {}
        for topic_id, partition in partitions[start:start + count]:
            assignment.setdefault(topic_id, set()).add(partition)
        out[member_id] = {t: frozenset(p) for t, p in assignment.items()}
        start += count
    return out


# ----------------------------------------------------------------------------------------
# both assignors


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
@SETTINGS
@given(group=groups(), seed=st.integers(min_value=0, max_value=2**32))
def test_valid_and_order_independent(name, group, seed):
    members, topics = group
    assignor = ASSIGNORS[name]
    result = valid_assignment(assignor, members, topics)
    assert assignor.assign(shuffled(members, seed), dict(reversed(list(topics.items())))) == result


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
@SETTINGS
@given(group=groups())
def test_stable_when_run_again(name, group):
    """Kafka's CommonAssignorTests: once computed, running the assignor again changes nothing."""
    members, topics = group
    assignor = ASSIGNORS[name]
    first = assignor.assign(members, topics)
    assert assignor.assign(with_assigned(members, first), topics) == first


def test_lookup_by_name():
    assert set(ASSIGNORS) == {"uniform", "range"}
    assert ASSIGNORS["uniform"] is UNIFORM and UNIFORM.name == "uniform"
    assert ASSIGNORS["range"] is RANGE and RANGE.name == "range"
    assert ASSIGNORS.get("sticky") is None  # the caller answers UNSUPPORTED_ASSIGNOR


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_empty_and_unsubscribed(name):
    assignor = ASSIGNORS[name]
    topic = uuid.uuid4()
    assert assignor.assign({}, {topic: TopicSpec(3)}) == {}
    members = {"a": MemberSpec(frozenset(), None, {}), "b": MemberSpec(frozenset({uuid.uuid4()}), None, {})}
    assert assignor.assign(members, {topic: TopicSpec(3)}) == {"a": {}, "b": {}}


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_large_group(name):
    """1,000 members over 10,000 partitions (and 50 over 100), joined, then one leaves."""
    rnd = random.Random(7)
    for member_count, topic_count, partition_count in ((50, 4, 25), (1000, 20, 500), (1000, 1, 10_000)):
        topics = {uuid.UUID(int=rnd.getrandbits(128)): TopicSpec(partition_count) for _ in range(topic_count)}
        subscribed = frozenset(topics)
        members = {f"member-{i}": MemberSpec(subscribed, None, {}) for i in range(member_count)}
        first = valid_assignment(ASSIGNORS[name], members, topics)
        remaining = with_assigned(members, first)
        del remaining["member-17"]
        second = valid_assignment(ASSIGNORS[name], remaining, topics)
        if name == "uniform":
            for member_id in remaining:
                for topic_id, partitions in first[member_id].items():
                    assert partitions <= second[member_id][topic_id]


# ----------------------------------------------------------------------------------------
# uniform


@SETTINGS
@given(group=groups(homogeneous=True))
def test_uniform_homogeneous_balance(group):
    members, topics = group
    result = valid_assignment(UNIFORM, members, topics)
    counts = sizes(result).values()
    assert max(counts) - min(counts) <= 1
    assert result == build_uniform_homogeneous(members, topics)


@SETTINGS
@given(group=groups(homogeneous=False))
def test_uniform_heterogeneous_balance(group):
    members, topics = group
    result = valid_assignment(UNIFORM, members, topics)
    no_improving_move(members, topics, result)
    assert result == build_uniform_heterogeneous(members, topics)


@SETTINGS
@given(group=groups(homogeneous=True, valid_assigned=True), seed=st.integers(min_value=0, max_value=2**32))
def test_uniform_keeps_a_balanced_assignment(group, seed):
    members, topics = group
    current = random_balanced_homogeneous(members, topics, random.Random(seed))
    assert UNIFORM.assign(with_assigned(members, current), topics) == current


@SETTINGS
@given(group=groups(homogeneous=True, valid_assigned=True, min_members=2),
       seed=st.integers(min_value=0, max_value=2**32))
def test_uniform_member_leaves_others_keep_everything(group, seed):
    members, topics = group
    rnd = random.Random(seed)
    current = random_balanced_homogeneous(members, topics, rnd)
    leaving = rnd.choice(sorted(members))
    remaining = with_assigned({m: s for m, s in members.items() if m != leaving}, current)
    result = valid_assignment(UNIFORM, remaining, topics)
    for member_id in remaining:
        for topic_id, partitions in current[member_id].items():
            assert partitions <= result[member_id].get(topic_id, frozenset())


@SETTINGS
@given(group=groups(homogeneous=True, valid_assigned=True), seed=st.integers(min_value=0, max_value=2**32))
def test_uniform_member_joins_others_keep_their_quota(group, seed):
    members, topics = group
    current = random_balanced_homogeneous(members, topics, random.Random(seed))
    subscribed = next(iter(members.values())).subscribed_topic_ids
    joined = dict(with_assigned(members, current))
    joined["new-member"] = MemberSpec(subscribed, None, {})
    result = valid_assignment(UNIFORM, joined, topics)
    total = sum(topics[t].partitions for t in subscribed if t in topics)
    quota = total // len(joined)
    for member_id, assignment in current.items():
        old = {(t, p) for t, parts in assignment.items() for p in parts}
        new = {(t, p) for t, parts in result[member_id].items() for p in parts}
        assert len(old & new) >= min(len(old), quota)


@SETTINGS
@given(group=groups(homogeneous=False))
def test_uniform_heterogeneous_with_identical_ids_still_valid(group):
    """Kafka may pick the heterogeneous builder for equal id sets (subscribed names differ)."""
    members, topics = group
    same = next(iter(members.values())).subscribed_topic_ids
    members = {m: MemberSpec(same, None, s.assigned) for m, s in members.items()}
    result = valid_assignment(UNIFORM, members, topics, homogeneous=False)
    no_improving_move(members, topics, result)
    counts = sizes(result).values()
    assert max(counts) - min(counts) <= 1


# ----------------------------------------------------------------------------------------
# range


@SETTINGS
@given(group=groups())
def test_range_counts_order_and_co_partitioning(group):
    members, topics = group
    result = valid_assignment(RANGE, members, topics)
    order = range_order(members)
    for topic_id, spec in topics.items():
        subscribers = [m for m in order if topic_id in members[m].subscribed_topic_ids]
        if not subscribers:
            continue
        quota, extra = divmod(spec.partitions, len(subscribers))
        start = 0
        for position, member_id in enumerate(subscribers):
            count = quota + (1 if position < extra else 0)
            assert result[member_id].get(topic_id, frozenset()) == frozenset(range(start, start + count))
            start += count
    # Co-partitioning: same partition count and same subscribers, same partitions per member.
    for t1 in topics:
        for t2 in topics:
            subs1 = {m for m, s in members.items() if t1 in s.subscribed_topic_ids}
            subs2 = {m for m, s in members.items() if t2 in s.subscribed_topic_ids}
            if t1 != t2 and subs1 == subs2 and topics[t1].partitions == topics[t2].partitions:
                for member_id in subs1:
                    assert result[member_id].get(t1) == result[member_id].get(t2)


@SETTINGS
@given(group=groups(), other=groups())
def test_range_ignores_the_current_assignment(group, other):
    members, topics = group
    noise = {m: s.assigned for m, s in other[0].items()}
    rewritten = {m: MemberSpec(s.subscribed_topic_ids, s.rack_id, noise.get(m, {}), s.instance_id)
                 for m, s in members.items()}
    assert RANGE.assign(rewritten, topics) == RANGE.assign(members, topics)


@SETTINGS
@given(group=groups(), seed=st.integers(min_value=0, max_value=2**32))
def test_range_static_member_rejoins_with_new_id(group, seed):
    members, topics = group
    static = sorted(m for m, s in members.items() if s.instance_id is not None)
    instance_ids = [members[m].instance_id for m in static]
    if not static or len(set(instance_ids)) != len(instance_ids):
        return
    before = RANGE.assign(members, topics)
    leaving = random.Random(seed).choice(static)
    replaced = {m: s for m, s in members.items() if m != leaving}
    replaced["~rejoined"] = members[leaving]
    after = RANGE.assign(replaced, topics)
    assert after["~rejoined"] == before[leaving]
    assert all(after[m] == before[m] for m in members if m != leaving)


# ----------------------------------------------------------------------------------------
# sequences of changes


class GroupChanges(RuleBasedStateMachine):
    """Joins, leaves, subscription changes, topic creation, deletion and growth; each step
    recomputes the target assignment from the previous one, as the coordinator does."""

    assignor = UNIFORM

    def __init__(self):
        super().__init__()
        self.topics: dict[uuid.UUID, TopicSpec] = {}
        self.subscriptions: dict[str, frozenset[uuid.UUID]] = {}
        self.instance_ids: dict[str, str | None] = {}
        self.target: dict[str, dict] = {}
        self.next_member = 0
        self.known_topics: list[uuid.UUID] = []

    def members(self):
        return {m: MemberSpec(s, None, self.target.get(m, {}), self.instance_ids[m])
                for m, s in self.subscriptions.items()}

    def reassign(self):
        members = self.members()
        self.target = valid_assignment(self.assignor, members, self.topics)
        if self.assignor is UNIFORM and is_homogeneous(members) and members:
            counts = sizes(self.target).values()
            assert max(counts) - min(counts) <= 1

    @rule(partitions=st.integers(min_value=0, max_value=9), topic=topic_ids)
    def create_topic(self, partitions, topic):
        if topic in self.topics:
            return
        self.topics[topic] = TopicSpec(partitions)
        self.known_topics.append(topic)
        self.reassign()

    @precondition(lambda self: self.topics)
    @rule(data=st.data())
    def delete_topic(self, data):
        topic = data.draw(st.sampled_from(sorted(self.topics, key=kafka_uuid_key)))
        del self.topics[topic]
        self.reassign()

    @precondition(lambda self: self.topics)
    @rule(data=st.data(), more=st.integers(min_value=1, max_value=5))
    def add_partitions(self, data, more):
        topic = data.draw(st.sampled_from(sorted(self.topics, key=kafka_uuid_key)))
        self.topics[topic] = TopicSpec(self.topics[topic].partitions + more)
        self.reassign()

    @precondition(lambda self: len(self.subscriptions) < 8)
    @rule(data=st.data(), static=st.booleans())
    def join(self, data, static):
        member_id = f"m{self.next_member}"
        self.next_member += 1
        pool = sorted(set(self.known_topics), key=kafka_uuid_key)
        self.subscriptions[member_id] = frozenset(
            data.draw(st.lists(st.sampled_from(pool), unique=True)) if pool else []
        )
        self.instance_ids[member_id] = f"i{self.next_member}" if static else None
        self.reassign()

    @precondition(lambda self: self.subscriptions)
    @rule(data=st.data())
    def leave(self, data):
        member_id = data.draw(st.sampled_from(sorted(self.subscriptions)))
        del self.subscriptions[member_id]
        del self.instance_ids[member_id]
        self.target.pop(member_id, None)
        self.reassign()

    @precondition(lambda self: self.subscriptions and self.known_topics)
    @rule(data=st.data())
    def change_subscription(self, data):
        member_id = data.draw(st.sampled_from(sorted(self.subscriptions)))
        pool = sorted(set(self.known_topics), key=kafka_uuid_key)
        self.subscriptions[member_id] = frozenset(data.draw(st.lists(st.sampled_from(pool), unique=True)))
        self.reassign()

    @precondition(lambda self: self.subscriptions and self.known_topics)
    @rule()
    def everyone_subscribes_to_everything(self):
        everything = frozenset(self.known_topics)
        for member_id in self.subscriptions:
            self.subscriptions[member_id] = everything
        self.reassign()

    @invariant()
    def every_member_has_an_answer(self):
        assert set(self.target) == set(self.subscriptions)


class RangeGroupChanges(GroupChanges):
    assignor = RANGE


GroupChanges.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
RangeGroupChanges.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
TestUniformGroupChanges = GroupChanges.TestCase
TestRangeGroupChanges = RangeGroupChanges.TestCase


# ----------------------------------------------------------------------------------------
# Kafka's own examples


def kafka_uuid(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``: URL-safe base64 of the 16 bytes, unpadded."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


T1 = kafka_uuid("T1-A4s3VTwiI5CTbEp6POw")
T2 = kafka_uuid("T2-B4s3VTwiI5YHbPp6YUe")
T3 = kafka_uuid("T3-CU8fVTLCz5YMkLoDQsa")
T4 = kafka_uuid("T4-Tw9fVTLCz5HbPp6YQsa")


def spec(*topics, assigned=None, instance_id=None):
    return MemberSpec(frozenset(topics), None, {t: frozenset(p) for t, p in (assigned or {}).items()}, instance_id)


def expect(**members):
    return {m: {t: frozenset(p) for t, p in a.items()} for m, a in members.items()}


def test_kafka_uuid_order_is_signed():
    low = uuid.UUID(int=(0x7FFF_FFFF_FFFF_FFFF << 64))
    high = uuid.UUID(int=(0x8000_0000_0000_0000 << 64))  # negative most significant half
    assert kafka_uuid_key(high) < kafka_uuid_key(low)
    assert sorted([T4, T2, T3, T1], key=kafka_uuid_key) == [T1, T2, T3, T4]


def test_java_string_order_is_utf16():
    # U+FFFF sorts after U+10000 in UTF-16 code units (surrogate 0xD800), unlike code points.
    assert sorted(["\U00010000", "\uffff"], key=java_string_key) == ["\U00010000", "\uffff"]


def test_range_kafka_first_assignment_same_subscriptions():
    topics = {T1: TopicSpec(3), T3: TopicSpec(2)}
    members = {"A": spec(T1, T3), "B": spec(T1, T3)}
    assert RANGE.assign(members, topics) == expect(A={T1: [0, 1], T3: [0]}, B={T1: [2], T3: [1]})


def test_range_kafka_first_assignment_different_subscriptions():
    topics = {T1: TopicSpec(3), T2: TopicSpec(3), T3: TopicSpec(2)}
    members = {"A": spec(T1, T2), "B": spec(T3), "C": spec(T2, T3)}
    assert RANGE.assign(members, topics) == expect(
        A={T1: [0, 1, 2], T2: [0, 1]}, B={T3: [0]}, C={T2: [2], T3: [1]}
    )


def test_range_kafka_more_members_than_partitions():
    topics = {T1: TopicSpec(3), T3: TopicSpec(2)}
    members = {"A": spec(T1, T3), "B": spec(T1, T3), "C": spec(T1, T3)}
    assert RANGE.assign(members, topics) == expect(
        A={T1: [0], T3: [0]}, B={T1: [1], T3: [1]}, C={T1: [2]}
    )


def test_range_kafka_member_added_is_not_sticky():
    topics = {T1: TopicSpec(3), T2: TopicSpec(3)}
    members = {
        "A": spec(T1, T2, assigned={T1: [0, 1], T2: [0, 1]}),
        "B": spec(T1, T2, assigned={T1: [2], T2: [2]}),
        "C": spec(T1, T2),
    }
    assert RANGE.assign(members, topics) == expect(
        A={T1: [0], T2: [0]}, B={T1: [1], T2: [1]}, C={T1: [2], T2: [2]}
    )


def test_range_kafka_member_added_and_partition_added():
    topics = {T1: TopicSpec(4), T2: TopicSpec(3)}
    members = {
        "A": spec(T1, T2, assigned={T1: [0, 1], T2: [0, 1]}),
        "B": spec(T1, T2, assigned={T1: [2], T2: [2]}),
        "C": spec(T1),
    }
    assert RANGE.assign(members, topics) == expect(
        A={T1: [0, 1], T2: [0, 1]}, B={T1: [2], T2: [2]}, C={T1: [3]}
    )


def test_range_kafka_subscriptions_changed():
    topics = {T1: TopicSpec(3), T2: TopicSpec(3), T3: TopicSpec(2)}
    members = {
        "A": spec(T1, assigned={T1: [0, 1, 2], T2: [0]}),
        "B": spec(T1, T2, T3, assigned={T2: [1]}),
        "C": spec(T2, assigned={T2: [2], T3: [0, 1]}),
    }
    assert RANGE.assign(members, topics) == expect(
        A={T1: [0, 1]}, B={T1: [2], T2: [0, 1], T3: [0, 1]}, C={T2: [2]}
    )


def test_range_kafka_mixed_static_membership():
    topics = {T1: TopicSpec(5)}
    members = {"A": spec(T1, instance_id="instanceA"), "C": spec(T1, instance_id="instanceC"), "B": spec(T1)}
    before = RANGE.assign(members, topics)
    # Static members first by instance id, then the dynamic ones.
    assert before == expect(A={T1: [0, 1]}, C={T1: [2, 3]}, B={T1: [4]})
    del members["A"]
    members["memberA1"] = spec(T1, instance_id="instanceA")
    after = RANGE.assign(members, topics)
    assert after["memberA1"] == before["A"] and after["B"] == before["B"] and after["C"] == before["C"]


def test_uniform_kafka_heterogeneous_first_assignment():
    topics = {T1: TopicSpec(3), T3: TopicSpec(6)}
    members = {"A": spec(T1, T3), "B": spec(T3)}
    assert UNIFORM.assign(members, topics) == expect(A={T1: [0, 1, 2], T3: [4]}, B={T3: [0, 1, 2, 3, 5]})


def test_uniform_kafka_heterogeneous_more_members_than_partitions():
    topics = {T3: TopicSpec(1), T1: TopicSpec(2)}
    members = {"A": spec(T3), "B": spec(T3), "C": spec(T1)}
    assert UNIFORM.assign(members, topics) == expect(A={T3: [0]}, B={}, C={T1: [0, 1]})


def test_uniform_kafka_heterogeneous_unbalanced_previous_assignment():
    topics = {T1: TopicSpec(6), T2: TopicSpec(4), T3: TopicSpec(4)}
    members = {
        "A": spec(T1, assigned={T1: [0, 1, 2]}),
        "B": spec(T1, T2, assigned={T1: [3], T2: [0]}),
        "C": spec(T1, T2, T3, assigned={T1: [4, 5], T2: [1, 2, 3], T3: [0, 1, 2, 3]}),
    }
    assert UNIFORM.assign(members, topics) == expect(
        A={T1: [0, 1, 2, 5]}, B={T1: [3], T2: [0, 1, 2, 3]}, C={T1: [4], T3: [0, 1, 2, 3]}
    )


def test_uniform_kafka_heterogeneous_partitions_added():
    topics = {T1: TopicSpec(6), T2: TopicSpec(5), T3: TopicSpec(3), T4: TopicSpec(3)}
    members = {
        "A": spec(T1, T3, assigned={T1: [0, 1, 2, 3], T3: [0, 1]}),
        "B": spec(T1, T2, T3, T4, assigned={T2: [0, 1, 2], T4: [0, 1, 2]}),
    }
    assert UNIFORM.assign(members, topics) == expect(
        A={T1: [0, 1, 2, 3, 4, 5], T3: [0, 1, 2]}, B={T2: [0, 1, 2, 3, 4], T4: [0, 1, 2]}
    )


def test_uniform_kafka_heterogeneous_member_and_partitions_added():
    topics = {T1: TopicSpec(6), T2: TopicSpec(7)}
    members = {
        "A": spec(T1, assigned={T1: [0, 2], T2: [0]}),
        "B": spec(T1, T2, assigned={T1: [1], T2: [1, 2]}),
        "C": spec(T1, T2),
    }
    assert UNIFORM.assign(members, topics) == expect(
        A={T1: [0, 2, 3, 4, 5]}, B={T1: [1], T2: [1, 2, 6]}, C={T2: [0, 3, 4, 5]}
    )


def test_uniform_kafka_heterogeneous_member_removed():
    topics = {T1: TopicSpec(3), T2: TopicSpec(8), T3: TopicSpec(3)}
    members = {
        "A": spec(T1, T3, assigned={T1: [0, 1, 2], T3: [0, 1]}),
        "B": spec(T2, assigned={T2: [3, 4, 5, 6]}),
    }
    assert UNIFORM.assign(members, topics) == expect(
        A={T1: [0, 1, 2], T3: [0, 1, 2]}, B={T2: list(range(8))}
    )


def test_uniform_kafka_heterogeneous_partitions_run_out():
    # Kafka runs this with the heterogeneous builder although the subscriptions are equal.
    topics = {T1: TopicSpec(2), T2: TopicSpec(2), T3: TopicSpec(2)}
    members = {"A": spec(T1, T2, T3, assigned={T1: [0, 1], T2: [0, 1], T3: [0, 1]}), "B": spec(T1, T2, T3)}
    assert UNIFORM.assign(members, topics, homogeneous=False) == expect(
        A={T2: [0], T3: [0, 1]}, B={T1: [0, 1], T2: [1]}
    )


# Kafka's homogeneous builder walks the subscribed topics in Java HashSet order, which for
# the topic ids of its test (T1..T4 above) is T2, T4, T3, T1. Here topics are walked in
# topic-id order, so the homogeneous examples use ids ordered like that hash order.
H2, H4, H3, H1 = (uuid.UUID(int=(i << 64) | 1) for i in (1, 2, 3, 4))


def test_uniform_kafka_homogeneous_first_assignment():
    topics = {H1: TopicSpec(3), H3: TopicSpec(2)}
    members = {"A": spec(H1, H3), "B": spec(H1, H3)}
    assert UNIFORM.assign(members, topics) == expect(A={H3: [0, 1]}, B={H1: [0, 1, 2]})


def test_uniform_kafka_homogeneous_more_members_than_partitions():
    topics = {H3: TopicSpec(2)}
    members = {"A": spec(H3), "B": spec(H3), "C": spec(H3)}
    assert UNIFORM.assign(members, topics) == expect(A={}, B={H3: [0]}, C={H3: [1]})


def test_uniform_kafka_homogeneous_partitions_added():
    topics = {H1: TopicSpec(6), H2: TopicSpec(5)}
    members = {
        "A": spec(H1, H2, assigned={H1: [0, 2], H2: [0]}),
        "B": spec(H1, H2, assigned={H1: [1], H2: [1, 2]}),
    }
    assert UNIFORM.assign(members, topics) == expect(
        A={H1: [0, 2], H2: [0, 3, 4]}, B={H1: [1, 3, 4, 5], H2: [1, 2]}
    )


def test_uniform_kafka_homogeneous_member_removed():
    topics = {H1: TopicSpec(3), H2: TopicSpec(3)}
    members = {
        "A": spec(H1, H2, assigned={H1: [0], H2: [0]}),
        "B": spec(H1, H2, assigned={H1: [1], H2: [1]}),
    }
    assert UNIFORM.assign(members, topics) == expect(
        A={H1: [0], H2: [0, 2]}, B={H1: [1, 2], H2: [1]}
    )


def test_uniform_kafka_homogeneous_subscription_removed():
    topics = {H1: TopicSpec(2), H2: TopicSpec(2)}
    members = {
        "A": spec(H2, assigned={H1: [0], H2: [0]}),
        "B": spec(H2, assigned={H1: [1], H2: [1]}),
    }
    assert UNIFORM.assign(members, topics) == expect(A={H2: [0]}, B={H2: [1]})


def test_uniform_homogeneous_keeps_the_extra_partition_where_it_is():
    """KAFKA-18688: a member already at the maximum keeps it instead of the first member."""
    topics = {H1: TopicSpec(4)}
    members = {"A": spec(H1, assigned={H1: [0]}), "B": spec(H1, assigned={H1: [1]}),
               "C": spec(H1, assigned={H1: [2, 3]})}
    assert UNIFORM.assign(members, topics) == expect(A={H1: [0]}, B={H1: [1]}, C={H1: [2, 3]})


def test_invalid_current_assignment_is_cleaned():
    topics = {H1: TopicSpec(3)}
    members = {
        "A": spec(H1, assigned={H1: [0, 1, 7, -1], H2: [0]}),  # 7, -1 and missing H2 dropped
        "B": spec(H1, assigned={H1: [1]}),                     # 1 stays with A (first by id)
    }
    result = UNIFORM.assign(members, topics)
    assert result == expect(A={H1: [0, 1]}, B={H1: [2]})
    assert Counter(p for a in result.values() for ps in a.values() for p in ps) == Counter([0, 1, 2])
