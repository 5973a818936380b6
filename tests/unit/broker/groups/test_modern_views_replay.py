"""Offset commit/fetch fencing, describe, list, delete, and replay of the records (Kafka's
ConsumerGroupTest.testValidateOffsetCommit/Fetch, testConsumerGroupDelete,
testReplayConsumerGroup*)."""

from __future__ import annotations

import pytest

from support.modern_support import Harness, topic_id
from sundial.broker.groups.modern import record_helpers as rec
from sundial.broker.groups.modern.records import (
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    CoordinatorRecord,
    TopicMetadata,
)
from sundial.broker.groups.modern.replay import ReplayError
from sundial.broker.groups.modern.requests import HeartbeatRequest
from sundial.protocol.errors import ErrorCode as E


@pytest.fixture
def h():
    return Harness({"foo": 4})


def test_offset_commit_fencing(h):
    m = h.manager
    h.join("g", "m1", ["foo"])
    h.join("g", "m2", ["foo"])                      # m2 at epoch 2, m1 still at 1
    m.validate_offset_commit("g", "m1", 1)
    m.validate_offset_commit("g", "m2", 2)
    e = h.refused(E.STALE_MEMBER_EPOCH, m.validate_offset_commit, "g", "m1", 2)
    assert e.message == "The received member epoch 2 does not match the expected member epoch 1."
    h.refused(E.STALE_MEMBER_EPOCH, m.validate_offset_commit, "g", "m2", 1)    # 4.2: no KIP-1251 window
    h.refused(E.UNKNOWN_MEMBER_ID, m.validate_offset_commit, "g", "nobody", 1)
    h.refused(E.UNKNOWN_MEMBER_ID, m.validate_offset_commit, "g", "nobody", -1)  # members present
    h.refused(E.STALE_MEMBER_EPOCH, m.validate_offset_commit, "g", "m1", -1)
    h.refused(E.UNSUPPORTED_VERSION, m.validate_offset_commit, "g", "m1", 1, api_version=8)
    h.refused(E.ILLEGAL_GENERATION, m.validate_offset_commit, "g", "m1", 7, transactional=True)
    m.validate_offset_commit("g", "", -1, transactional=True)                   # names no member
    m.validate_offset_commit("g", "m1", 1, transactional=True, api_version=3)
    h.refused(E.GROUP_ID_NOT_FOUND, m.validate_offset_commit, "other", "m1", 1)


def test_commit_with_negative_epoch_to_an_empty_group_is_accepted_whatever_the_member_id(h):
    h.join("g", "m1", ["foo"])
    h.hb("g", "m1", -1)
    h.manager.validate_offset_commit("g", "pre-generated-id", -1)
    h.manager.validate_offset_commit("g", "", -1)


def test_offset_fetch_fencing(h):
    m = h.manager
    h.join("g", "m1", ["foo"])
    m.validate_offset_fetch("g", None, -1)
    m.validate_offset_fetch("g", "m1", 1)
    h.refused(E.STALE_MEMBER_EPOCH, m.validate_offset_fetch, "g", "m1", 0)
    h.refused(E.UNKNOWN_MEMBER_ID, m.validate_offset_fetch, "g", "nobody", 1)
    h.refused(E.UNKNOWN_MEMBER_ID, m.validate_offset_fetch, "g", None, 1)


def test_describe_and_list(h):
    h.join("g", "m1", ["foo", "gone"], instance_id="i1", assignor="range")
    h.join("g", "m2", None, regex="fo.")
    d = h.manager.describe("g")
    assert (d.group_id, d.state, d.group_epoch, d.assignment_epoch, d.assignor_name) == ("g", "Reconciling", 2, 2,
                                                                                        "range")
    m1, m2 = sorted(d.members, key=lambda m: m.member_id)
    assert (m1.instance_id, m1.member_epoch, m1.client_id, m1.subscribed_topic_names, m1.member_type) == (
        "i1", 1, "client", ("foo", "gone"), 1)
    assert [(tp.topic_name, tp.partitions) for tp in m1.assignment] == [("foo", (0, 1, 2, 3))]
    assert (m2.subscribed_topic_regex, m2.assignment) == ("fo.", ())
    assert sum(len(tp.partitions) for m in d.members for tp in m.target_assignment) == 4
    assert [(g.group_id, g.protocol_type, g.state, g.group_type) for g in h.manager.list_groups()] == [
        ("g", "consumer", "Reconciling", "consumer")]
    assert h.manager.list_groups(["STABLE "]) == [] and len(h.manager.list_groups(["reconciling"])) == 1
    h.refused(E.GROUP_ID_NOT_FOUND, h.manager.describe, "other")
    assert h.manager.group_type("g") == "consumer" and h.manager.group_type("other") is None


def test_delete_group(h):
    h.join("g", "m1", None, regex="fo.")
    h.refused(E.NON_EMPTY_GROUP, h.manager.delete_group, "g")
    h.hb("g", "m1", -1)                             # leaves: the regex goes with it
    records = h.manager.delete_group("g")
    assert records == [rec.target_assignment_epoch_tombstone("g"), rec.partition_metadata_tombstone("g"),
                       rec.group_epoch_tombstone("g")]
    h.log += records
    assert h.manager.group_type("g") is None
    h.refused(E.GROUP_ID_NOT_FOUND, h.manager.delete_group, "g")
    assert h.replayed().persisted_state() == {}


def test_static_member_gone_with_minus_two_keeps_the_group_non_empty(h):
    h.join("g", "m1", ["foo"], instance_id="i1")
    h.hb("g", "m1", -2, instance_id="i1")
    h.refused(E.NON_EMPTY_GROUP, h.manager.delete_group, "g")


def test_replay_through_bytes_rebuilds_every_field(h):
    h.join("g", "m1", ["foo"], instance_id="i1", assignor="uniform")
    h.join("g", "m2", None, regex="f.*")
    h.hb("g", "m1", 1, instance_id="i1", owned={"foo": range(4)})
    h.create_topic("fresh", 2)
    fresh = h.replayed()
    assert fresh.persisted_state() == h.manager.persisted_state()
    assert fresh.group("g").state is h.manager.group("g").state


def test_loading_checks_the_groups_against_the_topics_as_they_are_now(h):
    h.join("g", "m1", ["foo"])
    h.join("g2", "m1", None, regex="fo.*")
    h.topics["foo"] = (topic_id("foo"), 8)          # grew while the broker was down
    h.topics["four"] = (topic_id("four"), 1)        # created meanwhile
    fresh = h.replayed()
    fresh.loaded(0)
    assert fresh.next_deadline_ms() == 0                # the check is due at once
    records = fresh.poll(0)
    assert [(type(r.key).__name__, r.key.group_id) for r in records] == [
        ("ConsumerGroupMetadataKey", "g"), ("ConsumerGroupRegularExpressionKey", "g2"),
        ("ConsumerGroupMetadataKey", "g2")]
    assert fresh.poll(0) == [] and fresh.next_deadline_ms() > 0
    result, records = fresh.heartbeat(h_request("g", "m1", 1, {topic_id("foo"): range(4)}), 0, client_id="client",
                                      client_host="/127.0.0.1")
    assert result.member_epoch == 2 and set(result.assignment[topic_id("foo")]) == set(range(8))


def h_request(group_id, member_id, epoch, owned):
    return HeartbeatRequest(group_id, member_id, epoch, topic_partitions=owned)


def test_a_legacy_partition_metadata_record_is_deleted_at_the_next_epoch_bump(h):
    legacy = CoordinatorRecord(ConsumerGroupPartitionMetadataKey("g"), ConsumerGroupPartitionMetadataValue(
        (TopicMetadata(topic_id("foo"), "foo", 4),)))
    h.join("g", "m1", ["foo"])
    h.manager.replay(legacy)
    h.log.append(legacy)
    assert h.manager.group("g").has_legacy_partition_metadata
    h.join("g", "m2", ["foo"])
    assert rec.partition_metadata_tombstone("g") in h.last_records
    assert not h.manager.group("g").has_legacy_partition_metadata
    assert h.replayed().persisted_state() == h.manager.persisted_state()


def test_out_of_order_tombstones_are_refused_without_change(h):
    h.join("g", "m1", ["foo"])
    before = h.manager.persisted_state()
    with pytest.raises(ReplayError):
        h.manager.replay(rec.member_subscription_tombstone("g", "m1"))
    with pytest.raises(ReplayError):
        h.manager.replay(rec.group_epoch_tombstone("g"))
    with pytest.raises(ReplayError):
        h.manager.replay(rec.target_assignment_epoch_tombstone("g"))
    assert h.manager.persisted_state() == before
    h.manager.replay(rec.current_assignment_tombstone("g", "unknown-member"))     # ignored
    h.manager.replay(rec.group_epoch_tombstone("unknown-group"))                 # ignored
    assert h.manager.persisted_state() == before
