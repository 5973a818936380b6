"""One reconciliation step (Kafka ``CurrentAssignmentBuilder``), case by case.

The cases are the scenarios of Kafka's ``CurrentAssignmentBuilderTest`` (4.2): a member in a
given state, a target assignment, who holds each partition now and what the member reported
owning, and the member state Kafka expects after the step.
"""

from __future__ import annotations

import uuid

import pytest

from sundial.broker.groups.modern.assignment import freeze
from sundial.broker.groups.modern.errors import GroupError
from sundial.broker.groups.modern.member import ConsumerGroupMember, MemberState, member_state
from sundial.broker.groups.modern.reconcile import reconcile
from sundial.protocol.errors import ErrorCode

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
BOTH = frozenset({T1, T2})

STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS


def a(t1=(), t2=()):
    return freeze({T1: t1, T2: t2})


def member(state, epoch, previous, assigned, pending=(), *, topics=("topic1", "topic2"), regex=""):
    return ConsumerGroupMember("member", member_epoch=epoch, previous_member_epoch=previous, state=state,
                               subscribed_topic_names=frozenset(topics), subscribed_topic_regex=regex,
                               assigned=assigned, pending_revocation=a(*pending) if pending else freeze({}))


def held(epoch, only=None):
    """partition_epoch answering ``epoch`` for every partition (of topic ``only`` if given), else -1."""
    return lambda topic_id, partition: epoch if only is None or topic_id == only else -1


def step(m, target_epoch, target, partition_epoch, owned=None, subscribed=BOTH, changed=False):
    return reconcile(m, target_epoch=target_epoch, target=target, subscribed_topic_ids=subscribed,
                     partition_epoch=partition_epoch, owned=owned, subscription_changed=changed)


def test_stable_to_stable():
    m = member(STABLE, 10, 10, a((1, 2, 3), (4, 5, 6)))
    assert step(m, 11, a((1, 2, 3), (4, 5, 6)), held(10)) == member(STABLE, 11, 10, a((1, 2, 3), (4, 5, 6)))


def test_stable_to_stable_with_new_partitions():
    m = member(STABLE, 10, 10, a((1, 2, 3), (4, 5, 6)))
    got = step(m, 11, a((1, 2, 3, 4), (4, 5, 6, 7)), held(-1))
    assert got == member(STABLE, 11, 10, a((1, 2, 3, 4), (4, 5, 6, 7)))


def test_stable_to_unrevoked_partitions():
    m = member(STABLE, 10, 10, a((1, 2, 3), (4, 5, 6)))
    got = step(m, 11, a((2, 3, 4), (5, 6, 7)), held(-1))
    assert got == member(UNREVOKED, 10, 10, a((2, 3), (5, 6)), pending=((1,), (4,)))


def test_stable_to_unreleased_partitions():
    m = member(STABLE, 10, 10, a((1, 2, 3), (4, 5, 6)))
    got = step(m, 11, a((1, 2, 3, 4), (4, 5, 6, 7)), held(10))
    assert got == member(UNRELEASED, 11, 10, a((1, 2, 3), (4, 5, 6)))


def test_stable_to_unreleased_when_revoked_partitions_are_already_gone():
    # Partition 6 of topic2 leaves the member, which no longer reports it: no revocation round;
    # 7 is still held by another member.
    m = member(STABLE, 10, 10, a((1, 2, 3), (4, 5, 6)))
    got = step(m, 11, a((1, 2, 3), (4, 5, 7)), held(10, only=T2), owned=freeze({}))
    assert got == member(UNRELEASED, 11, 10, a((1, 2, 3), (4, 5)))


def test_unrevoked_to_stable_once_revoked():
    m = member(UNREVOKED, 10, 10, a((2, 3), (5, 6)), pending=((1,), (4,)))
    got = step(m, 11, a((2, 3), (5, 6)), held(-1), owned=a((2, 3), (5, 6)))
    assert got == member(STABLE, 11, 10, a((2, 3), (5, 6)))


@pytest.mark.parametrize("owned", [None, a((1, 2, 3), (5, 6)), a((2, 3), (4, 5, 6))])
def test_remains_unrevoked_while_a_revoked_partition_is_reported(owned):
    m = member(UNREVOKED, 10, 10, a((2, 3), (5, 6)), pending=((1,), (4,)))
    assert step(m, 12, a((3,), (6,)), held(-1), owned=owned) is m


def test_unrevoked_to_unrevoked_for_a_newer_target():
    m = member(UNREVOKED, 10, 10, a((2, 3), (5, 6)), pending=((1,), (4,)))
    got = step(m, 12, a((3,), (6,)), held(-1), owned=a((2, 3), (5, 6)))
    assert got == member(UNREVOKED, 10, 10, a((3,), (6,)), pending=((2,), (5,)))


def test_unrevoked_to_unreleased():
    m = member(UNREVOKED, 11, 10, a((2, 3), (5, 6)))
    got = step(m, 11, a((2, 3, 4), (5, 6, 7)), held(10), owned=a((2, 3), (5, 6)))
    assert got == member(UNRELEASED, 11, 11, a((2, 3), (5, 6)))


def test_partition_pending_revocation_by_the_member_itself_comes_back():
    m = member(UNREVOKED, 10, 10, a((2, 3), (5, 6)), pending=((4,), ()))

    def epochs(topic_id, partition):
        mine = {T1: {2, 3, 4}, T2: {5, 6}}[topic_id]
        return 10 if partition in mine else -1

    got = step(m, 12, a((2, 3, 4), (5, 6, 7)), epochs, owned=a((2, 3), (5, 6)))
    assert got == member(STABLE, 12, 10, a((2, 3, 4), (5, 6, 7)))


def test_unreleased_to_stable():
    m = member(UNRELEASED, 11, 11, a((2, 3), (5, 6)))
    assert step(m, 12, a((2, 3), (5, 6)), held(10)) == member(STABLE, 12, 11, a((2, 3), (5, 6)))


def test_unreleased_to_stable_with_released_partitions():
    m = member(UNRELEASED, 11, 11, a((2, 3), (5, 6)))
    assert step(m, 11, a((2, 3, 4), (5, 6, 7)), held(-1)) == member(STABLE, 11, 11, a((2, 3, 4), (5, 6, 7)))


def test_unreleased_stays_unreleased():
    m = member(UNRELEASED, 11, 11, a((2, 3), (5, 6)))
    assert step(m, 11, a((2, 3, 4), (5, 6, 7)), held(10)) == m


def test_unreleased_to_unrevoked():
    m = member(UNRELEASED, 11, 11, a((2, 3), (5, 6)))
    got = step(m, 12, a((3,), (6,)), held(10))
    assert got == member(UNREVOKED, 11, 11, a((3,), (6,)), pending=((2,), (5,)))


def test_unknown_state_fences_then_starts_over_from_nothing():
    m = member(MemberState.UNKNOWN, 11, 11, a((3,), (6,)), pending=((2,), (5,)))
    with pytest.raises(GroupError) as e:
        step(m, 12, a((3,), (6,)), held(10))
    assert e.value.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    got = step(m, 12, a((3,), (6,)), held(11), owned=freeze({}))
    assert got == member(STABLE, 12, 11, a((3,), (6,)))


def test_a_state_written_by_a_newer_version_is_unknown():
    assert member_state(3) is MemberState.UNKNOWN
    assert member_state(1) is UNREVOKED


@pytest.mark.parametrize("epoch,target_epoch,expected_epoch,changed",
                         [(10, 11, 11, False), (10, 11, 11, True), (10, 10, 10, True)])
def test_topics_no_longer_subscribed_leave_without_revocation_when_not_owned(epoch, target_epoch, expected_epoch,
                                                                               changed):
    m = member(STABLE, epoch, epoch, a((1, 2, 3), (4, 5, 6)), topics=("topic2",))
    got = step(m, target_epoch, a((1, 2, 3), (4, 5, 6)), held(-1), owned=a((), (4, 5, 6)),
               subscribed=frozenset({T2}), changed=changed)
    assert got == member(STABLE, expected_epoch, epoch, a((), (4, 5, 6)), topics=("topic2",))


@pytest.mark.parametrize("epoch,target_epoch,changed", [(10, 11, False), (10, 11, True), (10, 10, True)])
def test_topics_no_longer_subscribed_are_revoked_when_owned(epoch, target_epoch, changed):
    m = member(STABLE, epoch, epoch, a((1, 2, 3), (4, 5, 6)), topics=("topic2",))
    got = step(m, target_epoch, a((1, 2, 3), (4, 5, 6)), held(-1), owned=a((1, 2, 3), (4, 5, 6)),
               subscribed=frozenset({T2}), changed=changed)
    assert got == member(UNREVOKED, epoch, epoch, a((), (4, 5, 6)), pending=((1, 2, 3), ()), topics=("topic2",))


def test_unrevoked_member_revokes_more_when_its_subscription_shrinks():
    m = member(UNREVOKED, 10, 10, a((2, 3), (5, 6)), pending=((1,), (4,)), topics=("topic2",))
    got = step(m, 12, a((1, 3, 4), (6, 7)), held(-1), owned=a((1, 2, 3), (4, 5, 6)),
               subscribed=frozenset({T2}), changed=True)
    assert got == member(UNREVOKED, 10, 10, a((), (5, 6)), pending=((1, 2, 3), (4,)), topics=("topic2",))


def test_unresolved_regex_counts_as_no_topic():
    # Names "topic1" only; the regex matched nothing (yet): topic2 is revoked.
    m = member(STABLE, 10, 10, a((1, 2, 3), (4, 5, 6)), topics=("topic1",), regex="bar*")
    got = step(m, 10, a((1, 2, 3), (4, 5, 6)), held(-1), owned=a((1, 2, 3), (4, 5, 6)),
               subscribed=frozenset({T1}), changed=True)
    assert got == member(UNREVOKED, 10, 10, a((1, 2, 3)), pending=((), (4, 5, 6)), topics=("topic1",), regex="bar*")


def test_nothing_subscribed_revokes_everything():
    m = member(STABLE, 10, 10, a((1, 2, 3), (4, 5, 6)), topics=(), regex="bar*")
    got = step(m, 10, a((1, 2, 3), (4, 5, 6)), held(-1), owned=a((1, 2, 3), (4, 5, 6)),
               subscribed=frozenset(), changed=True)
    assert got == member(UNREVOKED, 10, 10, freeze({}), pending=((1, 2, 3), (4, 5, 6)), topics=(), regex="bar*")


def test_resolved_regex_keeps_its_topics():
    m = member(STABLE, 10, 10, a((1, 2, 3), (4, 5, 6)), topics=("topic1",), regex="bar*")
    assert step(m, 10, a((1, 2, 3), (4, 5, 6)), held(-1), owned=a((1, 2, 3), (4, 5, 6)), changed=True) is m
