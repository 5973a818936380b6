"""Kafka 4 consumer groups (KIP-848) against the real daemon: confluent-kafka 2.16 members with
``group.protocol=consumer`` and both server-side assignors, and the raw wire.

The first test is the regression confluent-kafka-python's suite found in its KIP-848
mode: librdkafka carries a member id it generated itself before it joins, and commits
with it (generation -1) into a group that is still empty. Kafka accepts such a commit
(``ClassicGroup.validateOffsetCommit``: generation < 0 on an Empty group returns before
any member check); Sundial refused it with UNKNOWN_MEMBER_ID.

The member tests compare with ground truth the test holds: the records it produced (every
one delivered with its value, none delivered again after a commit covered it, the group's
committed offsets at the log end), the members' rebalance callbacks in the order they ran (a
partition is assigned to a member only after its previous owner's revoke callback finished),
and Kafka's assignor rules (``uniform`` balanced and sticky, ``range`` co-partitioned). Members
that fail (a stalled member, a static member away, the broker killed) are in
``test_groups_consumer_protocol_members.py``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupType
from confluent_kafka.admin import NewPartitions

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey

from support.waiting import wait_for

from .clients import connect_raw, create_topic, read_frame
from .conftest import unique_topic
from .consumer_protocol_support import (  # noqa: F401  (fast_broker is a fixture)
    FAST_CONSUMER_GROUPS,
    TIMEOUT_S,
    Member,
    ProducerThread,
    Timeline,
    all_partitions,
    assert_no_loss,
    assignment_of,
    committed_offsets,
    create_topics,
    delete_topics,
    describe,
    end_offsets,
    exclusive_ownership_violations,
    fast_broker,
    produce,
    raw,
    rd_admin,
    target_of,
    wait_delivered,
    wait_settled,
)


def _ask(sock, api_key, version, body, correlation_id=7):
    sock.sendall(encode_request(api_key, version, correlation_id, "raw-client", body))
    corr, response = decode_response(api_key, version, read_frame(sock))
    assert corr == correlation_id
    return response


def test_a_commit_with_generation_minus_one_and_a_member_id_into_an_empty_group_is_accepted(broker):
    topic = unique_topic("commit-empty")
    create_topic(broker.bootstrap, topic, partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    member_id = f"rdkafka-{uuid.uuid4()}"   # pre-generated, never joined
    sock = connect_raw(broker.host, broker.port)
    try:
        committed = _ask(sock, ApiKey.OFFSET_COMMIT, 9, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": member_id,
            "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                 "committed_metadata": "m"},
                {"partition_index": 1, "committed_offset": 9, "committed_leader_epoch": -1,
                 "committed_metadata": None}]}]})
        assert [p.error_code for t in committed.topics for p in t.partitions] == [0, 0]
        fetched = _ask(sock, ApiKey.OFFSET_FETCH, 8, {
            "groups": [{"group_id": group, "topics": [{"name": topic, "partition_indexes": [0, 1]}]}],
            "require_stable": False})
        (g,) = fetched.groups
        assert g.error_code == 0
        assert {(p.partition_index, p.committed_offset) for t in g.topics for p in t.partitions} == {(0, 5), (1, 9)}
        # a generation >= 0 from a member the group does not know is still refused
        refused = _ask(sock, ApiKey.OFFSET_COMMIT, 9, {
            "group_id": group, "generation_id_or_member_epoch": 1, "member_id": member_id,
            "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": 6, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
        assert [p.error_code for t in refused.topics for p in t.partitions] == [25]  # UNKNOWN_MEMBER_ID
    finally:
        sock.close()


# -- confluent-kafka members of the consumer protocol ---------------------------------------------------
HEARTBEAT_INTERVAL_S = int(FAST_CONSUMER_GROUPS["group.consumer.heartbeat.interval.ms"]) / 1000


def _group(prefix: str = "cg") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _assignor_holds(assignor: str, assignment: dict[str, frozenset], topics: dict[str, int]) -> None:
    """Kafka's rules for a group whose members all subscribe to the same topics: ``uniform``
    balances the whole assignment to within one partition; ``range`` gives each member the same
    partition numbers of every (co-partitioned) topic, balanced per topic."""
    sizes = [len(parts) for parts in assignment.values()]
    if assignor == "uniform":
        assert max(sizes) - min(sizes) <= 1, assignment
        return
    for name, parts in assignment.items():
        numbers = [frozenset(p for t, p in parts if t == topic) for topic in topics]
        assert all(n == numbers[0] for n in numbers), f"{name} is not co-partitioned: {sorted(parts)}"
    for topic in topics:
        per_topic = [sum(1 for t, _ in parts if t == topic) for parts in assignment.values()]
        assert max(per_topic) - min(per_topic) <= 1, (topic, assignment)


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_join_consume_commit_close_and_resume_from_the_committed_offsets(fast_broker, assignor):
    bootstrap = fast_broker.bootstrap
    topics = {unique_topic("resume-a"): 3, unique_topic("resume-b"): 2}
    parts = all_partitions(topics)
    create_topics(bootstrap, topics)
    first_truth = produce(bootstrap, topics, 15, tag="first-")
    group, timeline, admin = _group(), Timeline(), rd_admin(bootstrap)

    first = Member(bootstrap, group, "first", timeline, topics=list(topics), assignor=assignor)
    first.start()
    wait_delivered([first], first_truth, "the first member to consume everything")
    wait_for(lambda: set(first.committed) >= set(first_truth), TIMEOUT_S, "the first member's commits")
    held = wait_settled(admin, group, [first], parts, "one member holding every partition")
    assert held == {"first": frozenset(parts)}
    desc = describe(admin, group)
    assert (desc.type, desc.partition_assignor, desc.is_simple_consumer_group) == \
        (ConsumerGroupType.CONSUMER, assignor, False)
    first.stop()        # close() leaves the group
    assert_no_loss(first_truth, [first])
    assert first.deliveries == Counter(list(first_truth)), "a record was delivered twice to a lone member"
    assert committed_offsets(bootstrap, group, parts) == end_offsets(first_truth, parts)
    wait_for(lambda: describe(admin, group).state == ConsumerGroupState.EMPTY, TIMEOUT_S,
             "the group to be empty after the member closed")
    # assigned everything (in one callback or more), gave everything back when it closed
    kinds = [(kind, p) for _, _, kind, p in timeline.snapshot() if p]
    assigns = [p for kind, p in kinds if kind == "assign"]
    assert kinds == [("assign", p) for p in assigns] + [("revoke", p) for kind, p in kinds if kind != "assign"]
    assert frozenset().union(*assigns) == frozenset(parts) == \
        frozenset().union(*(p for kind, p in kinds if kind == "revoke"))

    # a new consumer of the group starts where the first one committed: only the new records
    second_truth = produce(bootstrap, topics, 10, tag="second-")
    second = Member(bootstrap, group, "second", timeline, topics=list(topics), assignor=assignor)
    second.start()
    wait_delivered([second], second_truth, "the second member to consume the new records")
    wait_for(lambda: set(second.committed) >= set(second_truth), TIMEOUT_S, "the second member's commits")
    second.stop()
    assert second.deliveries == Counter(list(second_truth)), "the second member did not resume at the committed offsets"
    assert_no_loss({**first_truth, **second_truth}, [first, second])
    assert committed_offsets(bootstrap, group, parts) == end_offsets({**first_truth, **second_truth}, parts)
    assert not exclusive_ownership_violations(timeline.snapshot())


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_one_then_three_then_two_members_never_share_a_partition_and_lose_nothing(fast_broker, assignor):
    bootstrap = fast_broker.bootstrap
    topics = {unique_topic("grow-a"): 5, unique_topic("grow-b"): 5}
    parts = all_partitions(topics)
    create_topics(bootstrap, topics)
    group, timeline, admin = _group(), Timeline(), rd_admin(bootstrap)
    producer = ProducerThread(bootstrap, topics)
    producer.start()
    members = {}
    try:
        producer.wait_batches(2)
        members["a"] = Member(bootstrap, group, "a", timeline, topics=list(topics), assignor=assignor)
        members["a"].start()
        wait_settled(admin, group, [members["a"]], parts, "one member holding every partition")
        producer.wait_batches(3)

        for name in ("b", "c"):
            members[name] = Member(bootstrap, group, name, timeline, topics=list(topics), assignor=assignor)
            members[name].start()
        three = wait_settled(admin, group, list(members.values()), parts, "three members sharing the partitions")
        assert all(three.values()), three
        _assignor_holds(assignor, three, topics)
        producer.wait_batches(3)

        members["c"].stop()     # leaves the group; a and b take over its partitions
        two = wait_settled(admin, group, [members["a"], members["b"]], parts, "two members after c left")
        _assignor_holds(assignor, two, topics)
        if assignor == "uniform":   # sticky: the members that stayed keep what they had
            assert two["a"] >= three["a"] and two["b"] >= three["b"], (three, two)
        producer.wait_batches(3)
    finally:
        truth = producer.stop()
    live = [members["a"], members["b"]]
    wait_delivered(live, truth, "every produced record to be delivered", extra=lambda: members["c"].deliveries)
    wait_for(lambda: committed_offsets(bootstrap, group, parts) == end_offsets(truth, parts), TIMEOUT_S,
             "the group's commits to reach the log end")
    for m in live:
        m.stop()
    assert_no_loss(truth, list(members.values()))
    events = timeline.snapshot()
    assert not exclusive_ownership_violations(events), exclusive_ownership_violations(events)
    assert not [e for e in events if e[2] == "lost"], "a member lost partitions without being fenced"
    for m in members.values():
        assert m.owned_now() == set(), f"{m.name} still owns partitions after closing"
    assert committed_offsets(bootstrap, group, parts) == end_offsets(truth, parts)


def test_a_partition_moves_only_once_its_owner_has_revoked_it(fast_broker):
    """Revoke before assign with a slow application: while the old owner is still inside its
    revoke callback (it keeps heartbeating, but does not report the partitions released), the
    new member is at the new epoch with those partitions pending, not assigned."""
    bootstrap = fast_broker.bootstrap
    topics = {unique_topic("slow"): 4}
    parts = all_partitions(topics)
    create_topics(bootstrap, topics)
    truth = produce(bootstrap, topics, 10)
    group, timeline, admin = _group(), Timeline(), rd_admin(bootstrap)
    a = Member(bootstrap, group, "a", timeline, topics=list(topics))
    a.start()
    gate = threading.Event()
    b = None
    try:
        wait_settled(admin, group, [a], parts, "a holding every partition")
        a.revoke_gate = gate
        b = Member(bootstrap, group, "b", timeline, topics=list(topics))
        b.start()
        wait_for(a.revoking.is_set, TIMEOUT_S, "a to be asked to give partitions up")
        wire = raw(fast_broker)
        try:
            def b_waits_for_them():
                g = wire.describe_group(group)
                members = {m.member_id: m for m in g.members}
                mb = members.get(b.member_id)
                return (mb is not None and mb.member_epoch == g.group_epoch and
                        sum(len(t.partitions) for t in mb.target_assignment.topic_partitions) == 2 and
                        not mb.assignment.topic_partitions and not b.owned_now())
            wait_for(b_waits_for_them, TIMEOUT_S, "b at the new epoch with its partitions pending")
            # a window of ten heartbeat intervals in which nothing may change: b keeps heartbeating
            # while a holds the partitions, and stays without them
            window_end = time.monotonic() + 10 * HEARTBEAT_INTERVAL_S
            while time.monotonic() < window_end:
                assert b_waits_for_them(), "b was given partitions that a had not released"
                time.sleep(0.1)
        finally:
            wire.close()
        gate.set()
        held = wait_settled(admin, group, [a, b], parts, "b given the partitions a released")
        assert sorted(len(p) for p in held.values()) == [2, 2]
        wait_delivered([a, b], truth, "every record")
    finally:
        gate.set()
        for m in (a, b):
            if m is not None:
                m.stop()
    assert_no_loss(truth, [a, b])
    events = timeline.snapshot()
    assert not exclusive_ownership_violations(events), exclusive_ownership_violations(events)


def test_a_regex_subscription_picks_up_a_topic_created_later(fast_broker):
    bootstrap = fast_broker.bootstrap
    prefix = unique_topic("rx")
    early, later, other = f"{prefix}-early", f"{prefix}-later", f"x{prefix}-other"
    create_topics(bootstrap, {early: 3})
    truth = produce(bootstrap, {early: 3}, 10)
    group, timeline, admin = _group(), Timeline(), rd_admin(bootstrap)
    member = Member(bootstrap, group, "rx", timeline, pattern=f"^{prefix}-.*")
    member.start()
    try:
        wait_delivered([member], truth, "the records of the topic that matched at the start")
        create_topics(bootstrap, {later: 2, other: 2})    # only the first one matches (full match)
        later_truth = produce(bootstrap, {later: 2}, 10)
        produce(bootstrap, {other: 2}, 5)
        wait_delivered([member], later_truth, "the records of the topic created later")
        wait_settled(admin, group, [member], all_partitions({early: 3, later: 2}),
                     "the member holding both matching topics")
        wait_for(lambda: set(member.committed) >= set(truth) | set(later_truth), TIMEOUT_S, "the commits")
        # a matching topic deleted leaves the assignment: revoked, not lost
        delete_topics(bootstrap, [early])
        wait_settled(admin, group, [member], all_partitions({later: 2}), "the member holding the remaining topic")
    finally:
        member.stop()
    assert_no_loss({**truth, **later_truth}, [member])
    events = timeline.snapshot()
    touched = {t for _, _, _, parts in events for t, _ in parts}
    assert touched == {early, later}, touched
    assert [p for _, _, kind, p in events if kind == "revoke" and p][0] == frozenset(all_partitions({early: 3}))
    assert not [e for e in events if e[2] == "lost"]
    assert not exclusive_ownership_violations(events)


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_partitions_added_to_a_subscribed_topic_are_assigned_and_consumed(fast_broker, assignor):
    bootstrap = fast_broker.bootstrap
    topic = unique_topic("grown")
    create_topics(bootstrap, {topic: 2})
    truth = produce(bootstrap, {topic: 2}, 10)
    group, timeline, admin = _group(), Timeline(), rd_admin(bootstrap)
    members = [Member(bootstrap, group, name, timeline, topics=[topic], assignor=assignor) for name in ("a", "b")]
    for m in members:
        m.start()
    try:
        wait_settled(admin, group, members, all_partitions({topic: 2}), "one partition each")
        [future] = admin.create_partitions([NewPartitions(topic, 5)], request_timeout=TIMEOUT_S).values()
        future.result(TIMEOUT_S)
        truth.update(produce(bootstrap, {topic: 5}, 6, tag="grown-"))
        held = wait_settled(admin, group, members, all_partitions({topic: 5}), "the new partitions assigned")
        assert sorted(len(p) for p in held.values()) == [2, 3]
        wait_delivered(members, truth, "the records of the new partitions too")
        wait_for(lambda: committed_offsets(bootstrap, group, all_partitions({topic: 5})) ==
                 end_offsets(truth, all_partitions({topic: 5})), TIMEOUT_S, "the commits")
    finally:
        for m in members:
            m.stop()
    assert_no_loss(truth, members)
    events = timeline.snapshot()
    assert not exclusive_ownership_violations(events), exclusive_ownership_violations(events)


def test_admin_describes_and_lists_groups_by_type(fast_broker):
    bootstrap = fast_broker.bootstrap
    topic = unique_topic("types")
    create_topics(bootstrap, {topic: 4})
    produce(bootstrap, {topic: 4}, 3)
    modern, classic = _group("modern"), _group("classic")
    admin, timeline = rd_admin(bootstrap), Timeline()
    member = Member(bootstrap, modern, "modern-member", timeline, topics=[topic], assignor="range")
    member.start()
    # a classic member (JoinGroup/SyncGroup) from confluent-kafka: kafka-python 3.0.12 can lose a
    # rejoin and leave its group in CompletingRebalance (tests/integration/groups_support.py)
    old = Member(bootstrap, classic, "classic-member", timeline, topics=[topic], assignor=None,
                 **{"group.protocol": "classic", "partition.assignment.strategy": "range"})
    old.start()
    try:
        wait_settled(admin, modern, [member], all_partitions({topic: 4}), "the consumer group to settle")
        wait_for(lambda: len(old.owned_now()) == 4, TIMEOUT_S, "the classic member's assignment")
        wait_for(lambda: describe(admin, classic).state == ConsumerGroupState.STABLE, TIMEOUT_S,
                 "the classic group to be stable")
        futures = admin.describe_consumer_groups([modern, classic], request_timeout=TIMEOUT_S)
        m, c = futures[modern].result(TIMEOUT_S), futures[classic].result(TIMEOUT_S)
        assert (m.type, m.state, m.partition_assignor, m.is_simple_consumer_group) == \
            (ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE, "range", False)
        [md] = m.members
        assert (md.member_id, md.client_id, md.group_instance_id) == (member.member_id, "modern-member", None)
        assert assignment_of(md) == target_of(md) == all_partitions({topic: 4})
        assert (c.type, c.state, c.partition_assignor) == \
            (ConsumerGroupType.CLASSIC, ConsumerGroupState.STABLE, "range")
        [cd] = c.members
        assert cd.client_id == "classic-member"
        assert {tp.partition for tp in cd.assignment.topic_partitions} == set(range(4))

        def listed(**kwargs) -> dict[str, tuple]:
            result = admin.list_consumer_groups(request_timeout=TIMEOUT_S, **kwargs).result(TIMEOUT_S)
            assert not result.errors, result.errors
            return {g.group_id: (g.type, g.state) for g in result.valid if g.group_id in (modern, classic)}

        assert listed() == {modern: (ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE),
                            classic: (ConsumerGroupType.CLASSIC, ConsumerGroupState.STABLE)}
        assert listed(types={ConsumerGroupType.CONSUMER}) == \
            {modern: (ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE)}
        assert listed(types={ConsumerGroupType.CLASSIC}) == \
            {classic: (ConsumerGroupType.CLASSIC, ConsumerGroupState.STABLE)}
        assert listed(types={ConsumerGroupType.CONSUMER}, states={ConsumerGroupState.EMPTY}) == {}

        # DescribeGroups (the classic API) answers a consumer group with GROUP_ID_NOT_FOUND from v6 on
        wire = raw(fast_broker)
        try:
            by_id = {g.group_id: g for g in wire.call(ApiKey.DESCRIBE_GROUPS, 6, {
                "groups": [modern, classic], "include_authorized_operations": False}).groups}
            assert by_id[modern].error_code == 69     # GROUP_ID_NOT_FOUND
            assert by_id[modern].error_message == f"Group {modern} is not a classic group."
            assert (by_id[classic].error_code, by_id[classic].group_state, by_id[classic].protocol_type) == \
                (0, "Stable", "consumer")
            (v5,) = wire.call(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [modern],
                                                         "include_authorized_operations": False}).groups
            assert (v5.error_code, v5.group_state) == (0, "Dead")
        finally:
            wire.close()
    finally:
        member.stop()
        old.stop()
    wait_for(lambda: describe(admin, modern).state == ConsumerGroupState.EMPTY, TIMEOUT_S,
             "the consumer group to be empty")
    assert listed(types={ConsumerGroupType.CONSUMER}, states={ConsumerGroupState.EMPTY}) == \
        {modern: (ConsumerGroupType.CONSUMER, ConsumerGroupState.EMPTY)}


# -- fencing of offset commits and deletion, on the raw wire -------------------------------------------------
STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, UNSUPPORTED_VERSION = 113, 25, 68, 69, 35


def _commit(wire, group, member_id, epoch, topic, offsets: dict[int, int], version: int = 9) -> list[int]:
    response = wire.call(ApiKey.OFFSET_COMMIT, version, {
        "group_id": group, "generation_id_or_member_epoch": epoch, "member_id": member_id,
        "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": ""}
            for p, o in sorted(offsets.items())]}]})
    return [p.error_code for t in response.topics for p in t.partitions]


def _fetch(wire, group, topic, partitions) -> dict[int, int]:
    (g,) = wire.call(ApiKey.OFFSET_FETCH, 8, {
        "groups": [{"group_id": group, "topics": [{"name": topic, "partition_indexes": partitions}]}],
        "require_stable": False}).groups
    assert g.error_code == 0
    return {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions}


def _member_fetch(wire, group, member_id, epoch, topic, partitions) -> tuple[int, dict[int, int]]:
    """OffsetFetch v9 as a consumer-protocol member sends it (its member id and epoch)."""
    (g,) = wire.call(ApiKey.OFFSET_FETCH, 9, {
        "groups": [{"group_id": group, "member_id": member_id, "member_epoch": epoch,
                    "topics": [{"name": topic, "partition_indexes": partitions}]}],
        "require_stable": True}).groups
    return g.error_code, {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions}


def _owned(assignment) -> list[dict]:
    return [{"topic_id": tp.topic_id, "partitions": list(tp.partitions)} for tp in assignment.topic_partitions]


def test_a_stale_member_epoch_is_refused_and_only_an_empty_group_is_deleted(broker):
    first, second = unique_topic("fence-a"), unique_topic("fence-b")
    create_topic(broker.bootstrap, first, partitions=2)
    create_topic(broker.bootstrap, second, partitions=2)
    group, member_id = _group("fence"), str(uuid.uuid4())
    wire = raw(broker)
    try:
        joined = wire.heartbeat(group, member_id, 0, topics=[first], owned=[])
        assert joined.error_code == 0 and joined.member_id == member_id
        old_epoch = joined.member_epoch
        # the subscription grows: a new group epoch, which the member reaches at once (nothing to revoke)
        grown = wire.heartbeat(group, member_id, old_epoch, topics=[first, second], owned=_owned(joined.assignment))
        assert grown.error_code == 0 and grown.member_epoch > old_epoch
        epoch = grown.member_epoch
        assert wire.describe_group(group).members[0].member_epoch == epoch

        assert _commit(wire, group, member_id, old_epoch, first, {0: 3, 1: 4}) == [STALE_MEMBER_EPOCH] * 2
        assert _commit(wire, group, "someone-else", epoch, first, {0: 3}) == [UNKNOWN_MEMBER_ID]
        assert _fetch(wire, group, first, [0, 1]) == {0: -1, 1: -1}
        # a member of the consumer protocol commits with v9 or later (Kafka: UNSUPPORTED_VERSION)
        assert _commit(wire, group, member_id, epoch, first, {0: 3}, version=8) == [UNSUPPORTED_VERSION]
        assert _commit(wire, group, member_id, epoch, first, {0: 3, 1: 4}) == [0, 0]
        assert _fetch(wire, group, first, [0, 1]) == {0: 3, 1: 4}
        assert _member_fetch(wire, group, member_id, epoch, first, [0, 1]) == (0, {0: 3, 1: 4})
        assert _member_fetch(wire, group, member_id, old_epoch, first, [0, 1])[0] == STALE_MEMBER_EPOCH
        assert _member_fetch(wire, group, "someone-else", epoch, first, [0, 1])[0] == UNKNOWN_MEMBER_ID

        (deleted,) = wire.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": [group]}).results
        assert (deleted.group_id, deleted.error_code) == (group, NON_EMPTY_GROUP)
        left = wire.heartbeat(group, member_id, -1)
        assert (left.error_code, left.member_epoch) == (0, -1)
        assert wire.describe_group(group).group_state == "Empty"
        (deleted,) = wire.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": [group]}).results
        assert (deleted.group_id, deleted.error_code) == (group, 0)
        assert _fetch(wire, group, first, [0, 1]) == {0: -1, 1: -1}
        assert wire.describe_group(group).error_code == GROUP_ID_NOT_FOUND
        listed = wire.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []}).groups
        assert group not in {g.group_id for g in listed}
    finally:
        wire.close()
