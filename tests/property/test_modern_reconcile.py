"""Hypothesis: a KIP-848 group under random joins, leaves, crashes, lost answers, subscription and
topic changes and passing time, driven by simulated clients that behave as a correct KIP-848
consumer does.

The clients (:class:`Client`): join with epoch 0 and nothing owned; take partitions as soon as an
answer assigns them (the coordinator only assigns free ones); revoke what an answer takes away
after a delay shorter than their rebalance timeout; report what they own on every heartbeat
(or leave it out); after a lost answer send a full request; after FENCED_MEMBER_EPOCH or
UNKNOWN_MEMBER_ID drop everything and rejoin with epoch 0. A crash is a process death: the
client owns nothing from then on and never heartbeats again. Static clients may leave with
epoch -2 and come back as a new process (new member id, same instance id).

Invariants after every step:

* no partition is owned by two live clients, and the coordinator never has a partition in two
  members' assignments (assigned or pending revocation);
* what a live member owns is within what the coordinator believes it holds;
* replaying every record written so far (through Kafka's byte format) into a fresh manager gives
  the same state.

At the end (once quiet: the crashed members' sessions expired, every live client heartbeated
until nothing moved): the group is Stable (or Empty), every member owns exactly its target, and
the target is valid: disjoint, within each member's subscription, covering every partition of
every subscribed topic.
"""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sundial.broker.groups.modern.assignment import freeze
from sundial.broker.groups.modern.errors import GroupError
from sundial.broker.groups.modern.group import ConsumerGroupState
from sundial.broker.groups.modern.manager import ConsumerGroupManager
from sundial.broker.groups.modern.records import decode_record, encode_record
from sundial.broker.groups.modern.regex import compile_topic_regex
from sundial.broker.groups.modern.requests import HeartbeatRequest
from sundial.broker.groups.modern.settings import ConsumerGroupSettings
from sundial.protocol.errors import ErrorCode as E

GROUP = "g"
SESSION_MS = 30_000
INTERVAL_MS = 3_000
REBALANCE_MS = 10_000
MAX_REVOKE_DELAY_MS = 2_000
STEP_MS = 1_000
TOPIC_NAMES = ("t0", "t1", "t2", "t3")
REGEXES = ("t[01]", "t.*", "t3", "")
INSTANCES = ("i0", "i1", "i2")

subscriptions = st.one_of(
    st.tuples(st.lists(st.sampled_from(TOPIC_NAMES), max_size=3, unique=True).map(tuple), st.none()),
    st.tuples(st.none(), st.sampled_from(REGEXES)),
    st.tuples(st.lists(st.sampled_from(TOPIC_NAMES), max_size=2, unique=True).map(tuple), st.sampled_from(REGEXES)),
)


class Client:
    """One consumer process."""

    def __init__(self, member_id: str, names, regex, instance_id: str | None, now_ms: int) -> None:
        self.member_id = member_id
        self.instance_id = instance_id
        self.names, self.regex = names, regex
        self.epoch = 0
        self.owned: dict[uuid.UUID, set[int]] = {}
        self.desired: dict[uuid.UUID, frozenset[int]] | None = None
        self.revoke_due_ms: int | None = None
        self.last_heartbeat_ms = now_ms - INTERVAL_MS
        self.subscription_dirty = True
        self.needs_full = True
        self.alive = True

    def owned_frozen(self):
        return freeze(self.owned)

    def request(self, send_owned: bool) -> HeartbeatRequest:
        full = self.epoch == 0 or self.needs_full
        sub = full or self.subscription_dirty
        return HeartbeatRequest(
            GROUP, self.member_id, self.epoch, instance_id=self.instance_id,
            rebalance_timeout_ms=REBALANCE_MS if full else -1,
            subscribed_topic_names=(list(self.names or ()) if (sub and (self.names is not None or self.regex is None))
                                    else None),
            subscribed_topic_regex=self.regex if sub else None,
            topic_partitions=({t: sorted(p) for t, p in self.owned.items()} if (full or send_owned) else None))

    def lose_everything(self) -> None:
        self.owned, self.desired, self.revoke_due_ms = {}, None, None
        self.epoch = 0

    def on_answer(self, result, now_ms: int, revoke_delay_ms: int) -> None:
        self.epoch = result.member_epoch
        self.needs_full = False
        self.subscription_dirty = False
        if result.assignment is not None:
            self.desired = {t: frozenset(p) for t, p in result.assignment.items()}
            for topic_id, parts in self.desired.items():
                self.owned.setdefault(topic_id, set()).update(parts)
            if self._to_revoke():
                self.revoke_due_ms = now_ms + revoke_delay_ms
            else:
                self.revoke_due_ms = None

    def _to_revoke(self) -> bool:
        desired = self.desired or {}
        return any(parts - desired.get(t, frozenset()) for t, parts in self.owned.items())

    def finish_revocation(self) -> None:
        desired = self.desired or {}
        self.owned = {t: parts & desired.get(t, frozenset()) for t, parts in self.owned.items()}
        self.owned = {t: parts for t, parts in self.owned.items() if parts}
        self.revoke_due_ms = None


class GroupUnderChurn(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.topics: dict[str, tuple[uuid.UUID, int]] = {}
        self.next_topic_id = 1
        self.log = []
        self.manager = self._new_manager()
        self.clients: list[Client] = []
        self.next_member = 0
        self.create_topic_named("t0", 4)
        self.create_topic_named("t1", 3)

    def _new_manager(self) -> ConsumerGroupManager:
        return ConsumerGroupManager(ConsumerGroupSettings(regex_refresh_interval_ms=25_000), lambda: self.topics,
                                    lambda group_id: (SESSION_MS, INTERVAL_MS))

    # -- helpers -------------------------------------------------------------------------------

    def live(self) -> list[Client]:
        return [c for c in self.clients if c.alive]

    def create_topic_named(self, name: str, partitions: int) -> None:
        self.topics[name] = (uuid.UUID(int=self.next_topic_id), partitions)
        self.next_topic_id += 1
        self.log += self.manager.topics_changed(self.now)

    def heartbeat(self, client: Client, *, send_owned: bool = True, lose_answer: bool = False,
                  revoke_delay_ms: int = MAX_REVOKE_DELAY_MS) -> None:
        request = client.request(send_owned)
        client.last_heartbeat_ms = self.now
        try:
            result, records = self.manager.heartbeat(request, self.now, client_id="c", client_host="/h")
        except GroupError as e:
            if e.error_code in (E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID):
                client.lose_everything()
                client.needs_full = True
                return
            if e.error_code == E.UNRELEASED_INSTANCE_ID:
                client.alive = False            # fatal for the client, as for the Java consumer
                client.lose_everything()
                return
            raise
        self.log += records
        if lose_answer:
            client.needs_full = True
            return
        client.on_answer(result, self.now, revoke_delay_ms)

    def tick(self) -> None:
        """One step of time: clients finish due revocations and heartbeat when due, then timers fire."""
        self.now += STEP_MS
        for client in self.live():
            if client.revoke_due_ms is not None and client.revoke_due_ms <= self.now:
                client.finish_revocation()
            if self.now - client.last_heartbeat_ms >= INTERVAL_MS and client.alive:
                self.heartbeat(client)
        self.log += self.manager.poll(self.now)

    # -- rules -----------------------------------------------------------------------------------

    @precondition(lambda self: len(self.live()) < 5)
    @rule(sub=subscriptions, static=st.sampled_from((None,) + INSTANCES))
    def join(self, sub, static):
        names, regex = sub
        if names is None and regex is None:
            names = ()
        member_id = f"m{self.next_member}"
        self.next_member += 1
        client = Client(member_id, names, regex, static, self.now)
        self.clients.append(client)
        self.heartbeat(client)

    @precondition(lambda self: self.live())
    @rule(data=st.data(), send_owned=st.booleans(), lose=st.booleans(), delay=st.integers(0, MAX_REVOKE_DELAY_MS))
    def heartbeat_now(self, data, send_owned, lose, delay):
        client = data.draw(st.sampled_from(self.live()))
        self.heartbeat(client, send_owned=send_owned, lose_answer=lose, revoke_delay_ms=delay)

    @precondition(lambda self: any(c.revoke_due_ms is not None for c in self.live()))
    @rule(data=st.data())
    def revoke_now(self, data):
        client = data.draw(st.sampled_from([c for c in self.live() if c.revoke_due_ms is not None]))
        client.finish_revocation()

    @precondition(lambda self: self.live())
    @rule(data=st.data(), sub=subscriptions)
    def change_subscription(self, data, sub):
        client = data.draw(st.sampled_from(self.live()))
        names, regex = sub
        client.names = names if names is not None else (None if regex is not None else ())
        client.regex = regex
        client.subscription_dirty = True
        self.heartbeat(client)

    @precondition(lambda self: any(c.epoch > 0 for c in self.live()))
    @rule(data=st.data(), temporarily=st.booleans())
    def leave(self, data, temporarily):
        client = data.draw(st.sampled_from([c for c in self.live() if c.epoch > 0]))
        client.alive = False
        client.lose_everything()                # it stops consuming before it leaves
        epoch = -2 if (temporarily and client.instance_id is not None) else -1
        request = HeartbeatRequest(GROUP, client.member_id, epoch, instance_id=client.instance_id)
        try:
            _, records = self.manager.heartbeat(request, self.now, client_id="c", client_host="/h")
            self.log += records
        except GroupError as e:
            assert e.error_code in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID), e

    @precondition(lambda self: self.live())
    @rule(data=st.data())
    def crash(self, data):
        client = data.draw(st.sampled_from(self.live()))
        client.alive = False
        client.lose_everything()

    @rule(name=st.sampled_from(TOPIC_NAMES), partitions=st.integers(1, 4))
    def create_or_grow_topic(self, name, partitions):
        if name in self.topics:
            topic_id, current = self.topics[name]
            self.topics[name] = (topic_id, max(current, partitions))
            self.log += self.manager.topics_changed(self.now)
        else:
            self.create_topic_named(name, partitions)

    @precondition(lambda self: self.topics)
    @rule(data=st.data())
    def delete_topic(self, data):
        del self.topics[data.draw(st.sampled_from(sorted(self.topics)))]
        self.log += self.manager.topics_changed(self.now)

    @rule(steps=st.integers(1, 40))
    def time_passes(self, steps):
        for _ in range(steps):
            self.tick()

    # -- invariants -----------------------------------------------------------------------------------

    @invariant()
    def no_partition_owned_twice(self):
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for client in self.live():
            for topic_id, parts in client.owned.items():
                for p in parts:
                    assert (topic_id, p) not in seen, f"{topic_id}-{p} owned by {seen[(topic_id, p)]} and " \
                                                      f"{client.member_id}"
                    seen[(topic_id, p)] = client.member_id
        if GROUP in self.manager.group_ids():
            holders = self.manager.group(GROUP).holders()
            assert all(len(members) == 1 for members in holders.values()), holders

    @invariant()
    def clients_own_only_what_the_coordinator_gave_them(self):
        if GROUP not in self.manager.group_ids():
            return
        members = self.manager.group(GROUP).members
        for client in self.live():
            member = members.get(client.member_id)
            if member is None:
                assert not client.owned
                continue
            held = {(t, p) for a in (member.assigned, member.pending_revocation) for t, ps in a.items() for p in ps}
            owned = {(t, p) for t, ps in client.owned.items() for p in ps}
            assert owned <= held, (client.member_id, owned - held)

    @invariant()
    def replay_gives_the_same_state(self):
        fresh = self._new_manager()
        for record in self.log:
            fresh.replay(decode_record(*encode_record(record)))
        assert fresh.persisted_state() == self.manager.persisted_state()

    def teardown(self):
        # Quiet: sessions of the dead expire while the living keep heartbeating; then converge.
        for _ in range(SESSION_MS // STEP_MS + 1):
            self.tick()
        for _ in range(40):
            for client in self.live():
                client.finish_revocation()
                self.heartbeat(client)
            if self._converged():
                break
        self.replay_gives_the_same_state()
        assert self._converged(), self._describe()
        self._target_is_valid()

    def _converged(self) -> bool:
        if GROUP not in self.manager.group_ids():
            return not self.live()
        group = self.manager.group(GROUP)
        if not group.members:
            return group.state is ConsumerGroupState.EMPTY
        if group.state is not ConsumerGroupState.STABLE:
            return False
        by_id = {c.member_id: c for c in self.live()}
        for member in group.members.values():
            if member.assigned != group.target_of(member.member_id):
                return False
            client = by_id.get(member.member_id)
            if client is None or client.owned_frozen() != member.assigned or client.epoch != member.member_epoch:
                return False
        return True

    def _target_is_valid(self) -> None:
        if GROUP not in self.manager.group_ids():
            return
        group = self.manager.group(GROUP)
        by_id = {tid: (name, n) for name, (tid, n) in self.topics.items()}
        assigned: dict[tuple[uuid.UUID, int], str] = {}
        wanted: set[tuple[uuid.UUID, int]] = set()
        for member in group.members.values():
            names = set(member.subscribed_topic_names)
            if member.regex:
                pattern = compile_topic_regex(member.regex)
                names |= {n for n in self.topics if pattern.fullmatch(n)}
            subscribed = {self.topics[n][0] for n in names if n in self.topics}
            wanted |= {(t, p) for t in subscribed for p in range(by_id[t][1])}
            for topic_id, parts in group.target_of(member.member_id).items():
                assert topic_id in subscribed, (member.member_id, topic_id)
                for p in parts:
                    assert p < by_id[topic_id][1]
                    assert (topic_id, p) not in assigned
                    assigned[(topic_id, p)] = member.member_id
        assert set(assigned) == wanted

    def _describe(self) -> str:
        group = self.manager.group(GROUP)
        return f"state={group.state} epochs={group.group_epoch}/{group.assignment_epoch} members=" + str(
            {m.member_id: (m.member_epoch, m.state.name, dict(m.assigned)) for m in group.members.values()})


GroupUnderChurn.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None,
                                             suppress_health_check=[HealthCheck.too_slow])
TestGroupUnderChurn = GroupUnderChurn.TestCase
