"""The share-group membership state machine against a model (Hypothesis), and its fixed cases.

The model is what each client knows (its member epoch and the assignment it was last sent) and
when it last heartbeated; the manager must agree with it after every step, fence exactly the
members whose session ran out, report exactly the members that left, keep the group epoch
monotonic, hand each member its target at once, and rebuild the same state from its own records.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sundial.broker.groups.modern.errors import GroupError
from sundial.broker.groups.share import group as g
from sundial.broker.groups.share.assignor import assign
from sundial.broker.groups.share.manager import ShareGroupManager, ShareHeartbeatRequest
from sundial.broker.groups.share.records import decode_record, encode_record
from sundial.protocol.errors import ErrorCode as E

SESSION_MS = 45_000
INTERVAL_MS = 5_000
GROUP = "sg"
MEMBERS = [f"member-{i}" for i in range(6)]
NAMES = ["a", "b", "c", "later"]


def tid(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


class Broker:
    def __init__(self, max_size: int = 200, other=()) -> None:
        self.topics = {"a": (tid("a"), 3), "b": (tid("b"), 1), "c": (tid("c"), 2)}
        self.now = 1_000
        self.log = []
        self.other = set(other)
        self.max_size = max_size
        self.manager = self.fresh()

    def fresh(self) -> ShareGroupManager:
        return ShareGroupManager(max_size=self.max_size, topics=lambda: self.topics,
                                 timings=lambda group_id: (SESSION_MS, INTERVAL_MS),
                                 is_other_group=lambda group_id: group_id in self.other)

    def hb(self, member, epoch, topics=None, group=GROUP, rack=None):
        req = ShareHeartbeatRequest(group, member, epoch, rack, tuple(topics) if topics is not None else None)
        result, records = self.manager.heartbeat(req, self.now, client_id="cid", client_host="/127.0.0.1")
        # every record goes through its bytes, as the offsets log keeps it
        self.log += [decode_record(*encode_record(r)) for r in records]
        return result, records

    def poll(self):
        records = self.manager.poll(self.now)
        self.log += records
        return records

    def replayed(self) -> ShareGroupManager:
        m = self.fresh()
        for record in self.log:
            m.replay(record)
        return m


def snapshot(manager: ShareGroupManager):
    out = {}
    for gid in manager.group_ids():
        grp = manager.group(gid)
        out[gid] = (grp.group_epoch, grp.metadata_hash, grp.assignment_epoch,
                    {m: g.by_topic_id(a) for m, a in grp.target.items()},
                    {m.member_id: (m.member_epoch, m.previous_member_epoch, m.state, m.rack_id, m.client_id,
                                   m.subscribed_topic_names, g.by_topic_id(m.assigned))
                     for m in grp.members.values()})
    return out


class Membership(RuleBasedStateMachine):
    @initialize()
    def setup(self):
        self.b = Broker(max_size=4)
        #: member id -> [epoch, assignment it was sent, subscribed names, last heartbeat ms]
        self.clients: dict[str, list] = {}
        self.last_epoch = 0

    def _check_departures(self, expected):
        assert sorted(m for _, m in self.b.manager.take_departures()) == sorted(expected)

    @rule(member=st.sampled_from(MEMBERS), topics=st.sets(st.sampled_from(NAMES), min_size=1))
    def join(self, member, topics):
        known = member in self.clients
        try:
            result, _ = self.b.hb(member, 0, sorted(topics))
        except GroupError as exc:
            assert exc.error_code == E.GROUP_MAX_SIZE_REACHED and not known and len(self.clients) >= 4
            return
        assert result.assignment is not None and result.heartbeat_interval_ms == INTERVAL_MS
        self.clients[member] = [result.member_epoch, result.assignment, frozenset(topics), self.b.now]

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), change=st.none() | st.sets(st.sampled_from(NAMES), min_size=1))
    def heartbeat(self, data, change):
        member = data.draw(st.sampled_from(sorted(self.clients)))
        client = self.clients[member]
        result, _ = self.b.hb(member, client[0], sorted(change) if change is not None else None)
        assert result.member_epoch >= client[0]
        client[0] = result.member_epoch
        if result.assignment is not None:
            client[1] = result.assignment
        if change is not None:
            client[2] = frozenset(change)
        client[3] = self.b.now

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), delta=st.integers(1, 3))
    def stale_epoch_is_fenced(self, data, delta):
        member = data.draw(st.sampled_from(sorted(self.clients)))
        before = len(self.b.log)
        epoch = self.clients[member][0] + delta
        with pytest.raises(GroupError) as info:
            self.b.hb(member, epoch)
        assert info.value.error_code == E.FENCED_MEMBER_EPOCH and len(self.b.log) == before

    @rule(member=st.sampled_from(MEMBERS), epoch=st.integers(-1, 5).filter(lambda e: e != 0))
    def unknown_member(self, member, epoch):
        if member in self.clients:
            return
        with pytest.raises(GroupError) as info:
            self.b.hb(member, epoch)
        exists = self.b.manager.is_share_group(GROUP)
        assert info.value.error_code == (E.UNKNOWN_MEMBER_ID if exists else E.GROUP_ID_NOT_FOUND)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def leave(self, data):
        member = data.draw(st.sampled_from(sorted(self.clients)))
        result, records = self.b.hb(member, -1)
        assert result.member_epoch == -1 and records
        del self.clients[member]
        self._check_departures([member])

    @rule(ms=st.sampled_from([1_000, 20_000, SESSION_MS - 1, SESSION_MS, 60_000]))
    def time_passes(self, ms):
        self.b.now += ms
        self.b.poll()
        expired = [m for m, c in self.clients.items() if c[3] + SESSION_MS <= self.b.now]
        for m in expired:
            del self.clients[m]
        self._check_departures(expired)

    @rule(name=st.sampled_from(NAMES), more=st.integers(1, 2))
    def topic_grows_or_appears(self, name, more):
        _, n = self.b.topics.get(name, (tid(name), 0))
        self.b.topics[name] = (tid(name), n + more)

    @precondition(lambda self: self.clients)
    @rule()
    def everyone_heartbeats(self):
        """After one heartbeat each, every member holds its share of the current epoch's target."""
        for member in sorted(self.clients):
            self.heartbeat_member(member)
        grp = self.b.manager.group(GROUP)
        assert grp.assignment_epoch == grp.group_epoch
        for member in sorted(self.clients):      # the first ones heard of the target before the last joined
            self.heartbeat_member(member)
        assert all(m.member_epoch == grp.group_epoch for m in grp.members.values())
        topics = self.b.topics
        for name in {n for c in self.clients.values() for n in c[2] if n in topics}:
            t, count = topics[name]
            readers = [m for m in grp.members.values() if name in m.subscribed_topic_names]
            held = {m.member_id: {p for p in m.assigned.get(t, ())} for m in readers}
            if len({c[2] & set(topics) for c in self.clients.values()}) == 1:
                continue                          # homogeneous: balanced over all topics, checked below
            assert set().union(*held.values()) == set(range(count))
            sizes = [len(v) for v in held.values()]
            assert not sizes or max(sizes) - min(sizes) <= 1
        everything = {(t, p) for name, (t, n) in topics.items()
                      if any(name in c[2] for c in self.clients.values()) for p in range(n)}
        assert {(t, p) for m in grp.members.values() for t, ps in m.assigned.items() for p in ps} == everything

    def heartbeat_member(self, member):
        client = self.clients[member]
        result, _ = self.b.hb(member, client[0])
        client[0] = result.member_epoch
        if result.assignment is not None:
            client[1] = result.assignment
        client[3] = self.b.now

    @rule()
    def restart(self):
        self.b.manager = self.b.replayed()
        self.b.manager.loaded(self.b.now)
        for c in self.clients.values():
            c[3] = self.b.now

    @invariant()
    def agrees_with_the_clients(self):
        if not hasattr(self, "b"):
            return
        m = self.b.manager
        members = sorted(m.group(GROUP).members) if m.is_share_group(GROUP) else []
        assert members == sorted(self.clients)
        for member_id, (epoch, sent, names, _) in self.clients.items():
            mem = m.member(GROUP, member_id)
            assert mem.member_epoch == epoch and g.by_topic_id(mem.assigned) == g.by_topic_id(sent)
            assert mem.subscribed_topic_names == names

    @invariant()
    def epochs_only_grow_and_replay_is_equal(self):
        if not hasattr(self, "b"):
            return
        m = self.b.manager
        if m.is_share_group(GROUP):
            grp = m.group(GROUP)
            assert grp.group_epoch >= self.last_epoch
            self.last_epoch = grp.group_epoch
            assert grp.assignment_epoch <= grp.group_epoch
        assert snapshot(self.b.replayed()) == snapshot(m)


Membership.TestCase.settings = settings(max_examples=120, stateful_step_count=30, deadline=None)
TestMembership = Membership.TestCase


# --- fixed cases -----------------------------------------------------------------------------------

def test_members_share_a_single_partition_and_get_it_at_once():
    b = Broker()
    b.topics = {"q": (tid("q"), 1)}
    r1, _ = b.hb("m1", 0, ["q"])
    assert r1.member_epoch == 1 and r1.assignment == {tid("q"): frozenset({0})}
    r2, _ = b.hb("m2", 0, ["q"])
    assert r2.member_epoch == 2 and r2.assignment == {tid("q"): frozenset({0})}
    r1b, _ = b.hb("m1", 1)
    assert r1b.member_epoch == 2 and r1b.assignment is None     # same partitions: "unchanged"
    d = b.manager.describe(GROUP)
    assert d.state == "Stable" and d.group_epoch == 2 and d.assignment_epoch == 2 and d.assignor_name == "simple"
    assert [(m.member_id, m.member_epoch, m.assignment) for m in d.members] == [
        ("m1", 2, ((tid("q"), "q", (0,)),)), ("m2", 2, ((tid("q"), "q", (0,)),))]


def test_records_written_by_a_join_in_kafkas_order():
    b = Broker()
    _, records = b.hb("m1", 0, ["a"], rack="r1")
    kinds = [type(r.key).__name__ for r in records]
    assert kinds == ["ShareGroupMemberMetadataKey", "ShareGroupMetadataKey", "ShareGroupTargetAssignmentMemberKey",
                     "ShareGroupTargetAssignmentMetadataKey", "ShareGroupCurrentMemberAssignmentKey"]
    assert records[0].value.rack_id == "r1" and records[0].value.client_host == "/127.0.0.1"
    _, records = b.hb("m1", 1)
    assert records == []                                        # a plain heartbeat writes nothing


@pytest.mark.parametrize("req, message", [
    (ShareHeartbeatRequest("", "m", 0, None, ("a",)), "GroupId can't be empty."),
    (ShareHeartbeatRequest("g", "", 0, None, ("a",)), "MemberId can't be empty."),
    (ShareHeartbeatRequest("g", "m", 0, "", ("a",)), "RackId can't be empty."),
    (ShareHeartbeatRequest("g", "m", 0, None, None), "SubscribedTopicNames must be set in first request."),
    (ShareHeartbeatRequest("g", "m", 0, None, ()), "SubscribedTopicNames must be set in first request."),
    (ShareHeartbeatRequest("g", "m", -2, None, ("a",)), "MemberEpoch is invalid."),
])
def test_invalid_requests(req, message):
    b = Broker()
    with pytest.raises(GroupError) as info:
        b.manager.heartbeat(req, 0, client_id="c", client_host="/h")
    assert info.value.error_code == E.INVALID_REQUEST and info.value.message == message


def test_group_of_another_type_and_max_size():
    b = Broker(max_size=1, other={"classic"})
    with pytest.raises(GroupError) as info:
        b.hb("m1", 0, ["a"], group="classic")
    assert info.value.error_code == E.GROUP_ID_NOT_FOUND and "is not a share group" in info.value.message
    b.hb("m1", 0, ["a"])
    with pytest.raises(GroupError) as info:
        b.hb("m2", 0, ["a"])
    assert info.value.error_code == E.GROUP_MAX_SIZE_REACHED


def test_a_new_topic_partition_bumps_the_epoch_at_the_next_heartbeat():
    b = Broker()
    r, _ = b.hb("m1", 0, ["later"])
    assert r.assignment == {}
    b.topics["later"] = (tid("later"), 2)
    r, _ = b.hb("m1", r.member_epoch)
    assert r.member_epoch == 2 and r.assignment == {tid("later"): frozenset({0, 1})}


def test_leave_fence_and_delete():
    b = Broker()
    b.hb("m1", 0, ["a"])
    b.hb("m2", 0, ["a"])
    b.now += SESSION_MS - 1
    assert b.poll() == [] and b.manager.take_departures() == []
    b.hb("m2", 2)
    b.now += 1
    b.poll()
    assert b.manager.take_departures() == [(GROUP, "m1")]
    with pytest.raises(GroupError) as info:
        b.manager.delete_group(GROUP)
    assert info.value.error_code == E.NON_EMPTY_GROUP
    b.hb("m2", b.manager.member(GROUP, "m2").member_epoch, None)
    b.hb("m2", -1)
    assert b.manager.describe(GROUP).state == "Empty"
    assert [x.group_id for x in b.manager.list_groups(["empty"])] == [GROUP]
    assert b.manager.list_groups(["stable"]) == []
    records = b.manager.delete_group(GROUP)
    b.log += records
    assert not b.manager.is_share_group(GROUP) and snapshot(b.replayed()) == {}
    assert all(r.value is None for r in records)


def test_target_assignment_is_the_assignors():
    b = Broker()
    for i in range(5):
        b.hb(f"m{i}", 0, ["a", "c"])
    grp = b.manager.group(GROUP)
    subs = {m: frozenset({tid("a"), tid("c")}) for m in grp.members}
    # the target of the last epoch equals a fresh assignment from the previous one (it is a fixed point)
    assert assign(subs, {tid("a"): 3, tid("c"): 2}, grp.target) == {m: g.by_topic_id(a) for m, a in grp.target.items()}


def test_describe_leaves_out_a_deleted_topic():
    b = Broker()
    b.hb("m1", 0, ["a", "b"])
    del b.topics["b"]
    (m,) = b.manager.describe(GROUP).members
    assert [name for _, name, _ in m.assignment] == ["a"]
    r, _ = b.hb("m1", 1)                    # the next heartbeat sees the topic gone: a new epoch without it
    assert r.member_epoch == 2 and set(r.assignment) == {tid("a")}
