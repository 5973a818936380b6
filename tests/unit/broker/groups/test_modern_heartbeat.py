"""ConsumerGroupHeartbeat flows, after Kafka's ``GroupMetadataManagerTest`` scenarios (4.2).

Each test drives a ConsumerGroupManager as real members would and checks the answers, the
records written and the group's state; every test ends with the log replayed into a fresh
manager giving the same state.
"""

from __future__ import annotations

import pytest

from support.modern_support import REBALANCE_MS, Harness
from sundial.broker.groups.modern import record_helpers as rec
from sundial.broker.groups.modern.group import ConsumerGroupState
from sundial.broker.groups.modern.member import ConsumerGroupMember, MemberState
from sundial.broker.groups.modern.requests import HeartbeatRequest
from sundial.broker.groups.modern.settings import ConsumerGroupSettings
from sundial.protocol.errors import ErrorCode as E

FOO_BAR = {"foo": 6, "bar": 3}
ALL = {"foo": range(6), "bar": range(3)}


@pytest.fixture
def h():
    harness = Harness(FOO_BAR)
    yield harness
    assert harness.replayed().persisted_state() == harness.manager.persisted_state()


def state(h, group_id="g"):
    return h.manager.group(group_id).state


def test_member_joins_empty_group(h):
    r = h.join("g", "m1", ["foo", "bar"], assignor="range")
    assert (r.member_id, r.member_epoch, r.heartbeat_interval_ms) == ("m1", 1, 5000)
    assert h.named(r.assignment) == {"foo": set(range(6)), "bar": set(range(3))}
    member = ConsumerGroupMember(
        "m1", member_epoch=1, previous_member_epoch=0, state=MemberState.STABLE, rebalance_timeout_ms=REBALANCE_MS,
        client_id="client", client_host="/127.0.0.1", subscribed_topic_names=frozenset({"foo", "bar"}),
        server_assignor="range", assigned=r.assignment)
    assert h.member("g", "m1") == member
    group_hash = h.manager.group("g").metadata_hash
    assert group_hash != 0
    assert h.last_records == [
        rec.member_subscription("g", member.replace(member_epoch=0, previous_member_epoch=-1)),
        rec.group_epoch("g", 1, group_hash),
        rec.target_assignment("g", "m1", r.assignment),
        rec.target_assignment_epoch("g", 1),
        rec.current_assignment("g", member),
    ]
    assert state(h) is ConsumerGroupState.STABLE


def test_v0_join_gets_a_generated_member_id_and_v1_must_bring_one(h):
    r = h.join("g", "", ["foo"], version=0)
    assert r.member_id == "generated-1" and r.member_epoch == 1
    e = h.refused(E.INVALID_REQUEST, h.join, "g", "", ["foo"], version=1)
    assert e.message == "MemberId can't be empty."
    e = h.refused(E.INVALID_REQUEST, h.hb, "g", "  ", 1, version=0)
    assert e.message == "MemberId can't be empty."


@pytest.mark.parametrize("fields,message", [
    (dict(member_epoch=0, group_id=" "), "GroupId can't be empty."),
    (dict(member_epoch=0, instance_id=""), "InstanceId can't be empty."),
    (dict(member_epoch=0, rack_id="\t"), "RackId can't be empty."),
    (dict(member_epoch=0, rebalance_timeout_ms=-1), "RebalanceTimeoutMs must be provided in first request."),
    (dict(member_epoch=0, topic_partitions=None), "TopicPartitions must be empty when (re-)joining."),
    (dict(member_epoch=0, subscribed_topic_names=None),
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    (dict(member_epoch=-2), "InstanceId can't be null."),
    (dict(member_epoch=-3), "MemberEpoch is invalid."),
])
def test_invalid_requests_as_kafka_refuses_them(h, fields, message):
    base = dict(group_id="g", member_id="m1", member_epoch=0, rebalance_timeout_ms=5000,
                subscribed_topic_names=["foo"], topic_partitions={})
    base.update(fields)
    e = h.refused(E.INVALID_REQUEST, h.manager.heartbeat, HeartbeatRequest(**base), 0, client_id="c", client_host="h")
    assert e.message == message


def test_join_with_an_empty_owned_topic_entry_is_not_an_empty_list(h):
    request = HeartbeatRequest("g", "m1", 0, rebalance_timeout_ms=5000, subscribed_topic_names=["foo"],
                               topic_partitions={h.id("foo"): []})
    h.refused(E.INVALID_REQUEST, h.manager.heartbeat, request, 0, client_id="c", client_host="h")


def test_unknown_assignor_is_refused(h):
    e = h.refused(E.UNSUPPORTED_ASSIGNOR, h.join, "g", "m1", ["foo"], assignor="sticky")
    assert e.message == "ServerAssignor sticky is not supported. Supported assignors: uniform, range."


def test_unknown_group_unknown_member_and_classic_group():
    h = Harness(FOO_BAR, classic=("classic-g",))
    h.refused(E.GROUP_ID_NOT_FOUND, h.hb, "g", "m1", 100, rebalance_timeout_ms=5000, owned={})
    h.join("g", "m1", ["foo"])
    e = h.refused(E.UNKNOWN_MEMBER_ID, h.hb, "g", "m2", 1, owned={})
    assert e.message == "Member m2 is not a member of group g."
    e = h.refused(E.GROUP_ID_NOT_FOUND, h.join, "classic-g", "m1", ["foo"])
    assert e.message == "Group classic-g is not a consumer group."
    h.refused(E.GROUP_ID_NOT_FOUND, h.hb, "classic-g", "m1", -1)


def test_member_epoch_validation_and_previous_epoch_tolerance(h):
    h.join("g", "m1", ["foo"])
    h.join("g", "m2", ["foo"])                      # epoch 2: m1 must give up foo-3..5
    h.hb("g", "m1", 1, owned={"foo": range(6)})     # m1 UNREVOKED at epoch 1
    h.hb("g", "m1", 1, owned={"foo": range(3)})     # revoked: m1 moves to epoch 2
    m1 = h.member("g", "m1")
    assert (m1.member_epoch, m1.previous_member_epoch, m1.state) == (2, 1, MemberState.STABLE)
    h.refused(E.FENCED_MEMBER_EPOCH, h.hb, "g", "m1", 3, owned={"foo": range(3)})
    h.refused(E.FENCED_MEMBER_EPOCH, h.hb, "g", "m1", 1, owned=None)     # previous epoch, owned unknown
    h.refused(E.FENCED_MEMBER_EPOCH, h.hb, "g", "m1", 1, owned={"foo": range(4)})  # owns more than assigned
    # The answer that carried epoch 2 was lost: the previous epoch with a subset is accepted.
    r = h.hb("g", "m1", 1, owned={"foo": [0, 1]})
    assert r.member_epoch == 2


def test_second_member_join_waits_for_revocation(h):
    h.join("g", "m1", ["foo", "bar"])
    r2 = h.join("g", "m2", ["foo", "bar"])
    assert r2.member_epoch == 2 and h.named(r2.assignment) == {}
    assert h.member("g", "m2").state is MemberState.UNRELEASED_PARTITIONS
    target2 = h.named(h.manager.group("g").target_of("m2"))
    assert state(h) is ConsumerGroupState.RECONCILING

    r1 = h.hb("g", "m1", 1, owned=ALL)
    m1 = h.member("g", "m1")
    assert r1.member_epoch == 1 and m1.state is MemberState.UNREVOKED_PARTITIONS
    assert h.named(m1.pending_revocation) == {k: v for k, v in target2.items() if v}
    kept = h.named(r1.assignment)

    r2 = h.hb("g", "m2", 2, owned={})
    assert r2.assignment is None and h.member("g", "m2").assigned == {}      # still held by m1

    r1 = h.hb("g", "m1", 1, owned=kept)             # revocation done
    assert r1.member_epoch == 2 and r1.assignment is None and h.member("g", "m1").state is MemberState.STABLE

    r2 = h.hb("g", "m2", 2, owned={})
    assert {k: v for k, v in h.named(r2.assignment).items() if v} == {k: v for k, v in target2.items() if v}
    assert state(h) is ConsumerGroupState.STABLE


def test_assignment_is_sent_on_join_full_request_or_change_only(h):
    h.join("g", "m1", ["foo"])
    assert h.hb("g", "m1", 1, owned={"foo": range(6)}).assignment is None
    full = h.hb("g", "m1", 1, owned={"foo": range(6)}, rebalance_timeout_ms=5000, subscribed_topic_names=["foo"])
    assert h.named(full.assignment) == {"foo": set(range(6))}
    assert h.last_records == []


def test_rejoin_with_epoch_zero_keeps_the_assignment(h):
    h.join("g", "m1", ["foo"])
    r = h.join("g", "m1", ["foo"])
    assert r.member_epoch == 1 and h.named(r.assignment) == {"foo": set(range(6))}
    assert h.last_records == []


def test_group_max_size():
    h = Harness(FOO_BAR, settings=ConsumerGroupSettings(max_size=1))
    h.join("g", "m1", ["foo"])
    e = h.refused(E.GROUP_MAX_SIZE_REACHED, h.join, "g", "m2", ["foo"])
    assert e.message == "The consumer group has reached its maximum capacity of 1 members."
    assert h.hb("g", "m1", 1, owned={"foo": range(6)}).member_epoch == 1


def test_leave_bumps_the_group_epoch_and_frees_partitions(h):
    h.join("g", "m1", ["foo"])
    h.join("g", "m2", ["foo"])
    h.hb("g", "m1", 1, owned={"foo": range(6)})
    r = h.hb("g", "m1", -1)
    assert (r.member_id, r.member_epoch, r.assignment) == ("m1", -1, None)
    group_hash = h.manager.group("g").metadata_hash
    assert h.last_records == [*rec.remove_member("g", "m1"), rec.group_epoch("g", 3, group_hash)]
    r2 = h.hb("g", "m2", 2, owned={})
    assert r2.member_epoch == 3 and h.named(r2.assignment) == {"foo": set(range(6))}
    h.refused(E.UNKNOWN_MEMBER_ID, h.hb, "g", "m1", -1)
    h.refused(E.GROUP_ID_NOT_FOUND, h.hb, "other", "m1", -1)
    h.hb("g", "m2", -1)
    assert state(h) is ConsumerGroupState.EMPTY and h.manager.group("g").group_epoch == 4


def test_subscription_change_revokes_the_dropped_topic(h):
    h.join("g", "m1", ["foo", "bar"])
    r = h.hb("g", "m1", 1, owned=ALL, subscribed_topic_names=["foo"])
    m1 = h.member("g", "m1")
    assert r.member_epoch == 1 and m1.state is MemberState.UNREVOKED_PARTITIONS
    assert h.named(m1.pending_revocation) == {"bar": {0, 1, 2}}
    r = h.hb("g", "m1", 1, owned={"foo": range(6)})
    assert r.member_epoch == 2 and r.assignment is None      # what it owns did not change
    assert h.named(h.member("g", "m1").assigned) == {"foo": set(range(6))}


def test_topic_created_deleted_grown_bump_the_epoch(h):
    h.join("g", "m1", ["foo", "later"])
    assert h.create_topic("unrelated", 2) == []
    records = h.create_topic("later", 2)
    assert [type(r.key).__name__ for r in records] == ["ConsumerGroupMetadataKey"]
    assert state(h) is ConsumerGroupState.ASSIGNING
    r = h.hb("g", "m1", 1, owned={"foo": range(6)})
    assert r.member_epoch == 2 and h.named(r.assignment) == {"foo": set(range(6)), "later": {0, 1}}
    h.grow_topic("later", 3)
    r = h.hb("g", "m1", 2, owned={"foo": range(6), "later": [0, 1]})
    assert r.member_epoch == 3 and h.named(r.assignment)["later"] == {0, 1, 2}
    h.delete_topic("later")
    r = h.hb("g", "m1", 3, owned={"foo": range(6)})
    assert r.member_epoch == 4 and h.named(r.assignment) == {"foo": set(range(6))}


def test_preferred_assignor_is_the_one_most_members_name(h):
    h.join("g", "m1", ["foo"], assignor="range")
    h.join("g", "m2", ["foo"], assignor="range")
    h.join("g", "m3", ["foo"], assignor="uniform")
    assert h.manager.describe("g").assignor_name == "range"
    # range: contiguous blocks in member order
    targets = {m: h.named(h.manager.group("g").target_of(m))["foo"] for m in ("m1", "m2", "m3")}
    assert sorted(map(sorted, targets.values())) == [[0, 1], [2, 3], [4, 5]]
