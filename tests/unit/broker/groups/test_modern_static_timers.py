"""Static members and the two deadlines (session, rebalance), after Kafka's ``GroupMetadataManagerTest``
(testStaticMemberGetsBackAssignmentUponRejoin, testNoGroupEpochBumpWhenStaticMemberTemporarilyLeaves,
testShouldThrownUnreleasedInstanceIdException..., testSessionTimeoutExpiration,
testSessionTimeoutExpirationStaticMember, testRebalanceTimeoutExpiration, ...)."""

from __future__ import annotations

import pytest

from support.modern_support import REBALANCE_MS, SESSION_MS, Harness
from sundial.broker.groups.modern import record_helpers as rec
from sundial.broker.groups.modern.group import ConsumerGroupState
from sundial.broker.groups.modern.member import MemberState
from sundial.protocol.errors import ErrorCode as E


@pytest.fixture
def h():
    harness = Harness({"foo": 6, "bar": 3})
    yield harness
    assert harness.replayed().persisted_state() == harness.manager.persisted_state()


def two_static_members(h):
    h.join("g", "m1", ["foo", "bar"], instance_id="i1", assignor="range")
    h.join("g", "m2", ["foo", "bar"], instance_id="i2", assignor="range")
    a1 = h.named(h.manager.group("g").target_of("m1"))
    h.hb("g", "m1", 1, instance_id="i1", owned={"foo": range(6), "bar": range(3)})
    h.hb("g", "m1", 1, instance_id="i1", owned=a1)
    h.hb("g", "m2", 2, instance_id="i2", owned={})
    assert h.manager.group("g").state is ConsumerGroupState.STABLE
    return a1, h.named(h.member("g", "m2").assigned)


def test_static_member_leaves_temporarily_and_its_replacement_gets_the_assignment_back(h):
    _, a2 = two_static_members(h)
    epoch = h.manager.group("g").group_epoch
    old = h.member("g", "m2")
    r = h.hb("g", "m2", -2, instance_id="i2")
    assert (r.member_id, r.member_epoch, r.heartbeat_interval_ms) == ("m2", -2, 0)
    assert h.last_records == [rec.current_assignment("g", old.replace(member_epoch=-2))]
    assert h.manager.group("g").group_epoch == epoch                    # no rebalance
    assert h.manager.group("g").partition_epoch(h.id("foo"), min(a2["foo"])) == -2   # still held

    r = h.join("g", "m2-again", ["foo", "bar"], instance_id="i2", assignor="range")
    assert (r.member_id, r.member_epoch) == ("m2-again", epoch)
    assert h.named(r.assignment) == a2
    copied = old.replace(member_id="m2-again", member_epoch=0, previous_member_epoch=0)
    assert h.last_records == [
        *rec.remove_member("g", "m2"),
        rec.member_subscription("g", copied),
        rec.target_assignment("g", "m2-again", h.manager.group("g").target_of("m2-again")),
        rec.current_assignment("g", copied),
        rec.current_assignment("g", copied.replace(member_epoch=epoch)),
    ]
    assert "m2" not in h.manager.group("g").members
    assert h.manager.group("g").static_member_id("i2") == "m2-again"


def test_new_member_with_an_instance_id_in_use_is_refused(h):
    two_static_members(h)
    e = h.refused(E.UNRELEASED_INSTANCE_ID, h.join, "g", "intruder", ["foo"], instance_id="i1")
    assert e.message == ("Static member intruder with instance id i1 cannot join the group because the instance id "
                         "is owned by m1 member.")


def test_static_member_checks_on_heartbeat_and_leave(h):
    two_static_members(h)
    e = h.refused(E.UNKNOWN_MEMBER_ID, h.hb, "g", "m1", 2, instance_id="unknown")
    assert e.message == "Instance id unknown is unknown."
    e = h.refused(E.FENCED_INSTANCE_ID, h.hb, "g", "other", 2, instance_id="i1")
    assert e.message == "Static member other with instance id i1 was fenced by member m1."
    h.refused(E.UNKNOWN_MEMBER_ID, h.hb, "g", "m1", -2, instance_id="unknown")
    h.refused(E.FENCED_INSTANCE_ID, h.hb, "g", "other", -1, instance_id="i1")


def test_static_member_leaving_for_good_bumps_the_epoch(h):
    two_static_members(h)
    epoch = h.manager.group("g").group_epoch
    r = h.hb("g", "m2", -1, instance_id="i2")
    assert r.member_epoch == -1
    assert h.manager.group("g").group_epoch == epoch + 1
    assert h.manager.group("g").static_member_id("i2") is None


def test_static_member_rejoining_under_its_own_id_is_not_refused(h):
    # Kafka 4.2 answers UNRELEASED_INSTANCE_ID here (apache/kafka PR #23542 fixes it).
    a1, _ = two_static_members(h)
    r = h.join("g", "m1", ["foo", "bar"], instance_id="i1", assignor="range")
    assert r.member_epoch == h.manager.group("g").group_epoch and h.named(r.assignment) == a1
    h.hb("g", "m1", r.member_epoch, instance_id="i1", owned=a1)
    h.hb("g", "m1", -2, instance_id="i1")
    r = h.join("g", "m1", ["foo", "bar"], instance_id="i1", assignor="range")
    assert r.member_epoch == h.manager.group("g").group_epoch and h.named(r.assignment) == a1
    assert h.member("g", "m1").state is MemberState.STABLE


def test_session_timeout_fences_a_silent_member(h):
    h.join("g", "m1", ["foo"])
    h.join("g", "m2", ["foo"])
    assert h.manager.next_deadline_ms() == SESSION_MS
    for _ in range(9):                                      # m2 keeps heartbeating, m1 does not
        assert h.advance(SESSION_MS // 10) == []
        h.hb("g", "m2", 2, owned={})
    records = h.advance(SESSION_MS // 10)
    assert records[:3] == rec.remove_member("g", "m1")
    assert "m1" not in h.manager.group("g").members
    r = h.hb("g", "m2", 2, owned={})
    assert r.member_epoch == 3 and h.named(r.assignment) == {"foo": set(range(6))}


def test_heartbeats_push_the_session_deadline(h):
    h.join("g", "m1", ["foo"])
    for _ in range(5):
        assert h.advance(SESSION_MS - 1) == []
        h.hb("g", "m1", 1, owned={"foo": range(6)})
    assert h.manager.next_deadline_ms() == h.now + SESSION_MS
    records = h.advance(SESSION_MS)
    assert records[:3] == rec.remove_member("g", "m1")
    assert h.manager.group("g").state is ConsumerGroupState.EMPTY
    h.refused(E.UNKNOWN_MEMBER_ID, h.hb, "g", "m1", 1, owned={})


def test_static_member_gone_with_minus_two_is_fenced_at_its_session_timeout(h):
    two_static_members(h)
    h.hb("g", "m2", -2, instance_id="i2")
    h.hb("g", "m1", h.member("g", "m1").member_epoch, instance_id="i1", owned=h.named(h.member("g", "m1").assigned))
    h.advance(SESSION_MS // 2)
    h.hb("g", "m1", h.member("g", "m1").member_epoch, instance_id="i1", owned=h.named(h.member("g", "m1").assigned))
    assert "m2" in h.manager.group("g").members
    h.advance(SESSION_MS // 2)
    assert "m2" not in h.manager.group("g").members
    assert h.manager.group("g").static_member_id("i2") is None


def test_rebalance_timeout_fences_a_member_that_does_not_revoke(h):
    h.join("g", "m1", ["foo"])
    h.join("g", "m2", ["foo"])
    h.hb("g", "m1", 1, owned={"foo": range(6)})             # must revoke now; deadline armed
    assert h.member("g", "m1").state is MemberState.UNREVOKED_PARTITIONS
    assert h.manager.next_deadline_ms() == h.now + REBALANCE_MS
    h.advance(REBALANCE_MS - 1)
    h.hb("g", "m1", 1, owned={"foo": range(6)})             # still owns them: the deadline stays
    assert h.advance(1)[:3] == rec.remove_member("g", "m1")
    e = h.refused(E.UNKNOWN_MEMBER_ID, h.hb, "g", "m1", 1, owned={"foo": range(6)})
    assert "m1" in e.message


def test_rebalance_deadline_is_disarmed_once_revoked(h):
    h.join("g", "m1", ["foo"])
    h.join("g", "m2", ["foo"])
    h.hb("g", "m1", 1, owned={"foo": range(6)})
    kept = h.named(h.member("g", "m1").assigned)
    h.advance(REBALANCE_MS - 1)
    h.hb("g", "m1", 1, owned=kept)
    assert h.member("g", "m1").state is MemberState.STABLE
    assert h.advance(2) == []
    assert "m1" in h.manager.group("g").members


def test_loaded_manager_restarts_the_deadlines(h):
    h.join("g", "m1", ["foo"])
    h.join("g", "m2", ["foo"])
    h.hb("g", "m1", 1, owned={"foo": range(6)})
    fresh = h.replayed()
    assert fresh.next_deadline_ms() is None
    fresh.loaded(1_000)
    assert fresh.next_deadline_ms() == 1_000                  # the check against the topics
    assert fresh.poll(1_000) == []                            # nothing changed meanwhile
    assert fresh.next_deadline_ms() == 1_000 + REBALANCE_MS
    records = fresh.poll(1_000 + REBALANCE_MS)
    assert records[:3] == rec.remove_member("g", "m1")
