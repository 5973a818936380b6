"""The pure group state machine: transition tables, request outcomes per state, timers.

Time is a plain integer the tests advance; ``Group.poll(now)`` fires deadlines.
"""

from __future__ import annotations

import itertools

import pytest

from sundial.broker.groups.consumer_protocol import encode_subscription
from sundial.broker.groups.group import (
    COMPLETING,
    DEAD,
    EMPTY,
    PREPARING,
    STABLE,
    VALID_PREVIOUS_STATES,
    GroupSettings,
    GroupState,
    IllegalStateTransition,
    JoinReply,
    Note,
    StoreGroup,
    SyncReply,
)
from sundial.broker.groups.state import COMMIT_OUTCOME, HEARTBEAT_OUTCOME, SYNC_OUTCOME, Group
from sundial.protocol.errors import ErrorCode as E

SESSION = 10_000
REBALANCE = 30_000


class W:
    """A waiter token; the effects name it when the request is answered."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"W({self.name})"


class Harness:
    def __init__(self, delay_ms: int = 0, max_size: int = 2**31 - 1) -> None:
        self.now = 1_000_000
        ids = itertools.count(1)
        self.g = Group("g", self.now, GroupSettings(min_session_timeout_ms=1, initial_rebalance_delay_ms=delay_ms,
                                                    max_size=max_size),
                       new_member_id=lambda client, inst: f"{inst or client}-{next(ids)}")
        self.replies: dict[W, object] = {}
        self.stores: list[StoreGroup] = []
        self.notes: list[Note] = []

    def apply(self, effects):
        for e in effects:
            if isinstance(e, (JoinReply, SyncReply)):
                assert e.waiter not in self.replies, f"{e.waiter} answered twice"
                self.replies[e.waiter] = e
            elif isinstance(e, StoreGroup):
                self.stores.append(e)
                if e.sync_generation is not None:
                    self.apply(self.g.on_sync_stored(e.sync_generation, e.assignment, E.NONE, self.now))
            else:
                self.notes.append(e)
        return effects

    def join(self, member_id="", *, client="c", instance=None, protocols=(("range", b"m"),), ptype="consumer",
             v4=True, session=SESSION, rebalance=REBALANCE) -> W:
        w = W(f"join-{member_id or client}")
        self.apply(self.g.join(member_id=member_id, group_instance_id=instance, client_id=client,
                               client_host="/127.0.0.1", session_timeout_ms=session, rebalance_timeout_ms=rebalance,
                               protocol_type=ptype, protocols=list(protocols),
                               require_known_member_id=v4 and instance is None, now_ms=self.now, waiter=w))
        return w

    def sync(self, member_id, generation, assignments=(), instance=None, ptype=None, pname=None) -> W:
        w = W(f"sync-{member_id}")
        self.apply(self.g.sync(member_id=member_id, group_instance_id=instance, generation_id=generation,
                               protocol_type=ptype, protocol_name=pname, assignments=list(assignments),
                               now_ms=self.now, waiter=w))
        return w

    def tick(self, ms: int):
        self.now += ms
        return self.apply(self.g.poll(self.now))

    def full_join(self, client="c", **kw) -> str:
        """KIP-394 round trip: MEMBER_ID_REQUIRED, then join with the id. Returns the member id."""
        w = self.join(client=client, **kw)
        r = self.replies[w]
        assert r.error == E.MEMBER_ID_REQUIRED
        return r.member_id

    def stable_group(self, n: int) -> list[str]:
        ids = [self.full_join(client=f"c{i}") for i in range(n)]
        waiters = [self.join(mid) for mid in ids]
        self.tick(0)
        gen = self.g.generation_id
        leader = self.g.leader_id
        assert self.g.state is COMPLETING
        for mid in ids:
            if mid != leader:
                self.sync(mid, gen)
        self.sync(leader, gen, [(mid, f"a-{mid}".encode()) for mid in ids])
        assert self.g.state is STABLE
        for w in waiters:
            assert self.replies[w].error == E.NONE
        return ids


def events(h: Harness) -> list[str]:
    return [n.event for n in h.notes]


def advance(h: Harness, total_ms: int, heartbeaters=(), step_ms: int = 2000) -> None:
    """Move time forward ``total_ms`` while ``heartbeaters`` (member, instance) keep their sessions."""
    left = total_ms
    while left > 0:
        step = min(step_ms, left)
        left -= step
        h.now += step
        for member, instance in heartbeaters:
            if h.g.has(member):
                h.g.heartbeat(member_id=member, group_instance_id=instance, generation_id=h.g.generation_id,
                              now_ms=h.now)
        h.apply(h.g.poll(h.now))


# --- transition table ---------------------------------------------------------------------

def test_transition_table_is_kafkas():
    assert VALID_PREVIOUS_STATES[PREPARING] == {STABLE, COMPLETING, EMPTY}
    assert VALID_PREVIOUS_STATES[COMPLETING] == {PREPARING}
    assert VALID_PREVIOUS_STATES[STABLE] == {COMPLETING}
    assert VALID_PREVIOUS_STATES[EMPTY] == {PREPARING}
    assert VALID_PREVIOUS_STATES[DEAD] == set(GroupState)


@pytest.mark.parametrize("source", list(GroupState))
@pytest.mark.parametrize("target", list(GroupState))
def test_every_transition_obeys_the_table(source, target):
    g = Group("g", 0)
    g.state = source
    if source in VALID_PREVIOUS_STATES[target]:
        g._transition(target, 5)
        assert g.state is target and g.state_timestamp_ms == 5
    else:
        with pytest.raises(IllegalStateTransition):
            g._transition(target, 5)


# --- join ---------------------------------------------------------------------------------

def test_kip394_member_id_required_then_join_completes():
    h = Harness()
    w = h.join(client="alice")
    r = h.replies[w]
    assert r.error == E.MEMBER_ID_REQUIRED and r.member_id == "alice-1"
    assert h.g.state is EMPTY and "alice-1" in h.g.pending_members
    w2 = h.join("alice-1")
    assert h.g.state is PREPARING
    h.tick(0)  # initial delay 0
    r2 = h.replies[w2]
    assert r2.error == E.NONE and r2.generation_id == 1 and r2.leader_id == "alice-1"
    assert r2.protocol_name == "range" and r2.protocol_type == "consumer"
    assert [m.member_id for m in r2.members] == ["alice-1"]
    assert h.g.state is COMPLETING


def test_old_join_version_gets_an_id_directly():
    h = Harness()
    w = h.join(client="old", v4=False)
    assert w not in h.replies and h.g.has("old-1") and h.g.state is PREPARING
    h.tick(0)
    assert h.replies[w].error == E.NONE and h.replies[w].member_id == "old-1"


def test_pending_member_expires_after_session_timeout():
    h = Harness()
    mid = h.full_join()
    h.tick(SESSION - 1)
    assert mid in h.g.pending_members
    h.tick(1)
    assert mid not in h.g.pending_members
    w = h.join(mid)
    assert h.replies[w].error == E.UNKNOWN_MEMBER_ID


def test_full_rebalance_leader_gets_members_followers_do_not():
    h = Harness()
    a, b = h.full_join(client="a"), h.full_join(client="b")
    wa, wb = h.join(a), h.join(b)
    h.tick(0)
    ra, rb = h.replies[wa], h.replies[wb]
    assert ra.generation_id == rb.generation_id == 1
    assert ra.leader_id == rb.leader_id == a
    assert {m.member_id for m in ra.members} == {a, b} and rb.members == ()
    sb = h.sync(b, 1)
    assert sb not in h.replies  # waits for the leader
    sa = h.sync(a, 1, [(a, b"A"), (b, b"B")])
    assert h.replies[sa].assignment == b"A" and h.replies[sb].assignment == b"B"
    assert h.replies[sb].protocol_name == "range"
    assert h.g.state is STABLE
    assert len(h.stores) == 1 and h.stores[0].assignment == {a: b"A", b: b"B"}


def test_join_completes_as_soon_as_all_members_rejoined():
    h = Harness()
    a, b = h.stable_group(2)
    wa = h.join(a)  # leader rejoin forces a rebalance
    assert h.g.state is PREPARING and wa not in h.replies
    wb = h.join(b)
    assert h.replies[wa].generation_id == 2 and h.replies[wb].generation_id == 2
    assert h.g.state is COMPLETING


def test_members_that_do_not_rejoin_are_removed_at_rebalance_timeout():
    h = Harness()
    a, b = h.stable_group(2)
    wa = h.join(a)
    # b keeps heartbeating (REBALANCE_IN_PROGRESS each time), but never rejoins
    assert h.g.heartbeat(member_id=b, group_instance_id=None, generation_id=1, now_ms=h.now) == \
        E.REBALANCE_IN_PROGRESS
    advance(h, REBALANCE - 1, [(b, None)])
    assert wa not in h.replies and h.g.has(b)
    h.tick(1)
    assert h.replies[wa].error == E.NONE and h.replies[wa].members[0].member_id == a
    assert not h.g.has(b) and h.g.size == 1


def test_protocol_selection_by_votes_among_common_protocols():
    h = Harness()
    a = h.full_join(client="a")
    b = h.full_join(client="b")
    c = h.full_join(client="c")
    h.join(a, protocols=[("roundrobin", b"1"), ("range", b"1"), ("sticky", b"1")])
    h.join(b, protocols=[("range", b"2"), ("roundrobin", b"2")])
    wc = h.join(c, protocols=[("range", b"3"), ("roundrobin", b"3")])
    h.tick(0)
    assert h.replies[wc].protocol_name == "range"


def test_inconsistent_protocol_type_and_protocols_refused():
    h = Harness()
    h.stable_group(1)
    w = h.join(client="x", ptype="connect", v4=False)
    assert h.replies[w].error == E.INCONSISTENT_GROUP_PROTOCOL
    w = h.join(client="y", protocols=[("other", b"")], v4=False)
    assert h.replies[w].error == E.INCONSISTENT_GROUP_PROTOCOL
    h2 = Harness()
    w = h2.join(client="z", protocols=[], v4=False)
    assert h2.replies[w].error == E.INCONSISTENT_GROUP_PROTOCOL
    w = h2.join(client="z", ptype="", v4=False)
    assert h2.replies[w].error == E.INCONSISTENT_GROUP_PROTOCOL


def test_known_member_join_per_state():
    h = Harness()
    a, b = h.stable_group(2)
    # Stable follower with unchanged metadata: current generation, no rebalance.
    w = h.join(b)
    r = h.replies[w]
    assert r.error == E.NONE and r.generation_id == 1 and r.members == () and h.g.state is STABLE
    # Stable follower with new metadata: rebalance.
    w = h.join(b, protocols=[("range", b"new")])
    assert w not in h.replies and h.g.state is PREPARING
    wa = h.join(a)
    assert h.g.state is COMPLETING
    # CompletingRebalance, same metadata: current generation again (leader gets members).
    h.replies.pop(wa)
    w = h.join(a)
    assert h.replies[w].generation_id == 2 and len(h.replies[w].members) == 2
    # CompletingRebalance, changed metadata: back to PreparingRebalance.
    w = h.join(a, protocols=[("range", b"changed")])
    assert h.g.state is PREPARING and w not in h.replies


def test_unknown_member_and_empty_group_join():
    h = Harness()
    w = h.join("ghost")
    assert h.replies[w].error == E.UNKNOWN_MEMBER_ID


def test_group_max_size():
    h = Harness(max_size=2)
    ids = [h.full_join(client=f"c{i}") for i in range(3)]
    w0, w1 = h.join(ids[0]), h.join(ids[1])
    w2 = h.join(ids[2])
    assert h.replies[w2].error == E.GROUP_MAX_SIZE_REACHED
    h.tick(0)
    assert h.replies[w0].error == E.NONE and h.g.size == 2
    # Stable: a new member beyond the limit is refused at once.
    w3 = h.join(client="late", v4=False)
    assert h.replies[w3].error == E.GROUP_MAX_SIZE_REACHED


def test_initial_rebalance_delay_extends_while_members_arrive():
    h = Harness(delay_ms=3000)
    a = h.full_join(client="a")
    wa = h.join(a)
    assert h.g.state is PREPARING
    h.tick(2000)
    b = h.full_join(client="b")
    wb = h.join(b)
    h.tick(1000)  # first delay expired, but a member arrived: wait another delay
    assert wa not in h.replies
    h.tick(2999)
    assert wa not in h.replies
    h.tick(1)
    assert h.replies[wa].generation_id == 1 and h.replies[wb].generation_id == 1
    assert len(h.replies[wa].members) == 2


def test_initial_delay_does_not_complete_early_even_when_all_joined():
    h = Harness(delay_ms=500)
    a = h.full_join()
    w = h.join(a)
    h.tick(499)
    assert w not in h.replies
    h.tick(1)
    assert h.replies[w].error == E.NONE


# --- heartbeat / sync tables --------------------------------------------------------------

def _group_in(state: GroupState) -> tuple[Harness, list[str]]:
    h = Harness()
    if state is EMPTY:
        return h, []
    if state is PREPARING:
        ids = h.stable_group(2)
        h.join(ids[0])
        assert h.g.state is PREPARING
        return h, ids
    if state is COMPLETING:
        ids = h.stable_group(2)
        h.join(ids[0])
        h.join(ids[1])
        assert h.g.state is COMPLETING
        return h, ids
    ids = h.stable_group(2)
    return h, ids


@pytest.mark.parametrize("state", [PREPARING, COMPLETING, STABLE])
def test_heartbeat_outcome_table(state):
    h, ids = _group_in(state)
    member = ids[1]
    assert h.g.heartbeat(member_id=member, group_instance_id=None, generation_id=h.g.generation_id,
                         now_ms=h.now) == HEARTBEAT_OUTCOME[state]
    assert h.g.heartbeat(member_id=member, group_instance_id=None, generation_id=h.g.generation_id + 7,
                         now_ms=h.now) == E.ILLEGAL_GENERATION
    assert h.g.heartbeat(member_id="nobody", group_instance_id=None, generation_id=h.g.generation_id,
                         now_ms=h.now) == E.UNKNOWN_MEMBER_ID


def test_heartbeat_on_dead_and_empty():
    h = Harness()
    assert h.g.heartbeat(member_id="x", group_instance_id=None, generation_id=0, now_ms=0) == E.UNKNOWN_MEMBER_ID
    h.g.mark_dead(1)
    assert h.g.heartbeat(member_id="x", group_instance_id=None, generation_id=0, now_ms=0) == \
        E.COORDINATOR_NOT_AVAILABLE


@pytest.mark.parametrize("state", [PREPARING, COMPLETING, STABLE])
def test_sync_outcome_table(state):
    h, ids = _group_in(state)
    follower = ids[1]
    w = h.sync(follower, h.g.generation_id)
    expected = SYNC_OUTCOME[state]
    if isinstance(expected, E):
        assert h.replies[w].error == expected
    elif expected == "await":
        assert w not in h.replies
    else:
        assert h.replies[w].error == E.NONE and h.replies[w].assignment == f"a-{follower}".encode()
    assert h.replies[h.sync(follower, 99)].error == E.ILLEGAL_GENERATION
    assert h.replies[h.sync("nobody", h.g.generation_id)].error == E.UNKNOWN_MEMBER_ID


def test_sync_protocol_checks_v5():
    h, ids = _group_in(STABLE)
    assert h.replies[h.sync(ids[1], 1, ptype="connect")].error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.replies[h.sync(ids[1], 1, pname="roundrobin")].error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.replies[h.sync(ids[1], 1, ptype="consumer", pname="range")].error == E.NONE


def test_rebalance_while_awaiting_sync_answers_rebalance_in_progress():
    h, ids = _group_in(COMPLETING)
    w = h.sync(ids[1], 2)
    assert w not in h.replies
    h.apply(h.g.leave([(ids[0], None, "bye")], h.now)[2])
    assert h.replies[w].error == E.REBALANCE_IN_PROGRESS
    assert h.g.state is PREPARING


def test_members_that_never_sync_are_removed():
    h = Harness()
    a, b = h.full_join(client="a"), h.full_join(client="b")
    h.join(a)
    h.join(b)
    h.tick(0)
    sa = h.sync(a, 1, [(a, b"A"), (b, b"B")])  # leader syncs, b never does
    assert h.replies[sa].error == E.NONE and h.g.state is STABLE
    advance(h, REBALANCE - 1000, [(a, None), (b, None)])
    assert h.g.has(b) and h.g.state is STABLE
    advance(h, 1000, [(a, None), (b, None)])
    assert not h.g.has(b) and h.g.state is PREPARING
    assert any("no SyncGroup" in n.fields.get("reason", "") for n in h.notes)


def test_failed_assignment_store_sends_error_and_rebalances():
    h = Harness()
    a = h.full_join()
    h.join(a)
    h.tick(0)
    effects = h.g.sync(member_id=a, group_instance_id=None, generation_id=1, protocol_type=None, protocol_name=None,
                       assignments=[(a, b"A")], now_ms=h.now, waiter="sa")
    store = next(e for e in effects if isinstance(e, StoreGroup))
    out = h.g.on_sync_stored(store.sync_generation, store.assignment, E.COORDINATOR_NOT_AVAILABLE, h.now)
    reply = next(e for e in out if isinstance(e, SyncReply))
    assert reply.error == E.COORDINATOR_NOT_AVAILABLE and h.g.state is PREPARING


# --- commits ------------------------------------------------------------------------------

@pytest.mark.parametrize("state", [EMPTY, PREPARING, COMPLETING, STABLE])
def test_commit_outcome_table(state):
    h, ids = _group_in(state)
    if state is EMPTY:
        assert h.g.validate_offset_commit(member_id="", group_instance_id=None, generation_id=-1,
                                          now_ms=h.now) == E.NONE
        assert h.g.validate_offset_commit(member_id="m", group_instance_id=None, generation_id=3,
                                          now_ms=h.now) == E.UNKNOWN_MEMBER_ID
        return
    expected = COMMIT_OUTCOME[state]
    got = h.g.validate_offset_commit(member_id=ids[1], group_instance_id=None, generation_id=h.g.generation_id,
                                     now_ms=h.now)
    assert got == (expected if isinstance(expected, E) else E.NONE)
    # Simple-consumer commits are refused while the group has members.
    assert h.g.validate_offset_commit(member_id="", group_instance_id=None, generation_id=-1,
                                      now_ms=h.now) == E.UNKNOWN_MEMBER_ID
    assert h.g.validate_offset_commit(member_id=ids[1], group_instance_id=None, generation_id=99,
                                      now_ms=h.now) == E.ILLEGAL_GENERATION


def test_commit_counts_as_heartbeat():
    h, ids = _group_in(STABLE)
    for _ in range(5):
        h.now += SESSION - 1000
        assert h.g.validate_offset_commit(member_id=ids[1], group_instance_id=None, generation_id=1,
                                          now_ms=h.now) == E.NONE
        h.g.heartbeat(member_id=ids[0], group_instance_id=None, generation_id=1, now_ms=h.now)
        h.tick(0)
    assert h.g.has(ids[1]) and h.g.state is STABLE


# --- sessions -----------------------------------------------------------------------------

def test_session_timeout_removes_member_and_rebalances():
    h, (a, b) = _group_in(STABLE)
    advance(h, SESSION - 1, [(a, None)])
    assert h.g.has(b) and h.g.state is STABLE
    h.tick(1)
    assert h.g.heartbeat(member_id=a, group_instance_id=None, generation_id=1, now_ms=h.now) == \
        E.REBALANCE_IN_PROGRESS
    assert not h.g.has(b)
    assert h.g.state is PREPARING
    assert any(n.event == "member_removed" and "session timeout" in n.fields["reason"] for n in h.notes)
    wa = h.join(a)
    assert h.replies[wa].generation_id == 2 and h.g.state is COMPLETING


def test_last_member_leaving_empties_the_group_and_stores_it():
    h = Harness()
    a = h.stable_group(1)[0]
    _, errors, effects = h.g.leave([(a, None, None)], h.now)
    h.apply(effects)
    # Kafka completes the (empty) join at once: nobody is left to wait for.
    assert errors == [E.NONE] and h.g.state is EMPTY and h.g.generation_id == 2 and h.g.protocol_name is None
    assert h.stores[-1].assignment == {}
    assert "group_emptied" in events(h)


def test_new_member_waiting_for_a_long_rebalance_times_out():
    h = Harness()
    h.g.settings = GroupSettings(new_member_join_timeout_ms=50_000, initial_rebalance_delay_ms=0)
    a, b = h.stable_group(2)
    wa = h.join(a, rebalance=100_000)  # a long rebalance: b heartbeats but never rejoins
    c = h.full_join(client="new")
    wc = h.join(c)
    advance(h, 49_000, [(b, None)])
    assert wc not in h.replies
    advance(h, 1000, [(b, None)])
    assert h.replies[wc].error == E.UNKNOWN_MEMBER_ID  # the new member gave up after 50 s
    assert not h.g.has(c) and wa not in h.replies
    advance(h, 50_000, [(b, None)])
    assert h.replies[wa].error == E.NONE and h.g.size == 1


def test_awaiting_members_need_no_heartbeat():
    h, (a, b) = _group_in(STABLE)
    wa = h.join(a)
    h.tick(SESSION * 2 - 1)  # a waits in the join; b stops heartbeating and expires
    assert h.g.has(a) and not h.g.has(b)
    assert h.replies[wa].error == E.NONE  # b's expiry completed the join


# --- leave --------------------------------------------------------------------------------

def test_leave_batch_and_errors():
    h, (a, b) = _group_in(STABLE)
    top, errors, effects = h.g.leave([(a, None, "r"), ("ghost", None, None), ("", "no-such-instance", None)], h.now)
    assert top == E.NONE and errors == [E.NONE, E.UNKNOWN_MEMBER_ID, E.UNKNOWN_MEMBER_ID]
    assert h.g.leader_id == b  # leadership moved
    h.g.mark_dead(h.now)
    assert h.g.leave([(b, None, None)], h.now)[0] == E.COORDINATOR_NOT_AVAILABLE


def test_leave_of_a_pending_member():
    h = Harness()
    mid = h.full_join()
    _, errors, _ = h.g.leave([(mid, None, None)], h.now)
    assert errors == [E.NONE] and mid not in h.g.pending_members


def test_member_awaiting_join_that_is_removed_gets_unknown_member():
    h, (a, b) = _group_in(STABLE)
    wb = h.join(b, protocols=[("range", b"x")])
    h.apply(h.g.leave([(b, None, None)], h.now)[2])
    assert h.replies[wb].error == E.UNKNOWN_MEMBER_ID


# --- static membership ----------------------------------------------------------------------

def static_stable(h: Harness, instances=("i1", "i2")) -> list[str]:
    waiters = [h.join(client=f"c-{i}", instance=i) for i in instances]
    h.tick(0)
    ids = [h.replies[w].member_id for w in waiters]
    leader = h.g.leader_id
    for mid in ids:
        if mid != leader:
            h.sync(mid, h.g.generation_id, instance=None)
    h.sync(leader, h.g.generation_id, [(m, f"a-{m}".encode()) for m in ids])
    assert h.g.state is STABLE
    return ids


def test_static_member_restart_keeps_generation_and_fences_old_id():
    h = Harness()
    old1, old2 = static_stable(h)
    stores = len(h.stores)
    w = h.join(client="c-i2", instance="i2")  # i2 restarts, no member id
    r = h.replies[w]
    assert r.error == E.NONE and r.member_id != old2 and r.generation_id == 1
    assert r.leader_id == old1 and r.members == ()
    assert h.g.state is STABLE and len(h.stores) == stores + 1
    new2 = r.member_id
    # The new id syncs and gets i2's assignment; the old id is fenced.
    assert h.replies[h.sync(new2, 1, instance="i2")].assignment == f"a-{old2}".encode()
    assert h.g.heartbeat(member_id=old2, group_instance_id="i2", generation_id=1, now_ms=h.now) == \
        E.FENCED_INSTANCE_ID
    assert h.replies[h.join(old2, instance="i2")].error == E.FENCED_INSTANCE_ID


def test_static_leader_restart_returns_old_leader_id():
    h = Harness()
    old1, _ = static_stable(h)
    assert h.g.leader_id == old1
    w = h.join(client="c-i1", instance="i1")
    r = h.replies[w]
    assert r.leader_id == old1 and r.member_id != old1 and h.g.leader_id == r.member_id


def test_static_member_not_rejoining_is_kept_through_rebalance():
    h = Harness()
    m1, m2 = static_stable(h)
    w1 = h.join(m1, instance="i1")
    advance(h, REBALANCE, [(m2, "i2")])
    assert h.replies[w1].error == E.NONE and h.g.has(m2)
    assert {m.member_id for m in h.replies[w1].members} == {m1, m2}


def test_static_member_leave_by_instance_id():
    h = Harness()
    m1, m2 = static_stable(h)
    _, errors, effects = h.g.leave([("", "i2", None)], h.now)
    assert errors == [E.NONE] and not h.g.has(m2) and "i2" not in h.g.static_members
    _, errors, _ = h.g.leave([(m1, "i-wrong", None)], h.now)
    assert errors == [E.NONE]  # an unregistered instance id does not fence


def test_static_rejoin_during_completing_rebalance_restarts_it():
    h = Harness()
    m1, m2 = static_stable(h)
    h.join(m1, instance="i1")
    h.join(m2, instance="i2")
    assert h.g.state is COMPLETING
    sw = h.sync(m2, 2, instance="i2")
    w = h.join(client="c-i2", instance="i2")
    assert h.replies[sw].error == E.FENCED_INSTANCE_ID
    assert h.g.state is PREPARING and w not in h.replies


# --- describe, subscriptions, load --------------------------------------------------------------

def test_describe_hides_metadata_unless_stable():
    h, ids = _group_in(PREPARING)
    d = h.g.describe()
    assert d["group_state"] == "PreparingRebalance" and d["protocol_data"] == ""
    assert all(m["member_metadata"] == b"" for m in d["members"])
    h, ids = _group_in(STABLE)
    d = h.g.describe()
    assert d["group_state"] == "Stable" and d["protocol_data"] == "range" and d["protocol_type"] == "consumer"
    assert {m["member_assignment"] for m in d["members"]} == {f"a-{i}".encode() for i in ids}


def test_subscribed_topics_union_and_unknown():
    h = Harness()
    a = h.full_join(client="a", protocols=[("range", encode_subscription(["t1", "t2"]))])
    h.join(a, protocols=[("range", encode_subscription(["t1", "t2"]))])
    b = h.full_join(client="b", protocols=[("range", encode_subscription(["t3"]))])
    h.join(b, protocols=[("range", encode_subscription(["t3"]))])
    assert h.g.subscribed_topics() == {"t1", "t2", "t3"}
    c = h.full_join(client="c", protocols=[("range", b"\x00")])
    h.join(c, protocols=[("range", b"\x00")])
    assert h.g.subscribed_topics() is None
    other = Harness()
    m = other.full_join(ptype="connect")
    other.join(m, ptype="connect")
    assert other.g.subscribed_topics() == frozenset()


def test_load_restores_stable_group_with_fresh_sessions():
    g = Group("g", 0)
    g.load(protocol_type="consumer", generation_id=4, protocol_name="range", leader_id="m1", state_timestamp_ms=7,
           members=[{"member_id": "m1", "group_instance_id": None, "client_id": "c", "client_host": "h",
                     "rebalance_timeout_ms": 100, "session_timeout_ms": 50, "subscription": b"s", "assignment": b"a"}],
           now_ms=1000)
    assert g.state is STABLE and g.generation_id == 4 and g.leader_id == "m1"
    assert g.heartbeat(member_id="m1", group_instance_id=None, generation_id=4, now_ms=1010) == E.NONE
    assert g.poll(1059) == [] and g.has("m1")
    g.poll(1060)
    assert not g.has("m1") and g.state is EMPTY and g.generation_id == 5


def test_next_deadline_tracks_sessions_and_rebalance():
    h, (a, b) = _group_in(STABLE)
    assert h.g.next_deadline_ms() == h.now + SESSION
    h.join(a)
    # a awaits the join; b's session and the rebalance deadline remain.
    assert h.g.next_deadline_ms() == min(h.now + SESSION, h.now + REBALANCE)
