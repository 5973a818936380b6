"""Consumer-protocol (KIP-848) members that fail: a member stalled past its session timeout, and
the broker killed with SIGKILL in the middle of a group's life, with confluent-kafka
(``group.protocol=consumer``) against the real daemon.

librdkafka heartbeats from a background thread, so a member cannot be stalled from inside this
process: the stalled member runs in a child process that the test stops with SIGSTOP (every
thread stops, the connection stays open, nothing more is said to the broker) and resumes with
SIGCONT. The child reports its callbacks, deliveries and commits as JSON lines with
``time.monotonic_ns()`` stamps, which merge with the in-process members' timeline.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import uuid
from collections import Counter

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from support.waiting import wait_for

from .consumer_protocol_support import (  # noqa: F401  (fast_broker is a fixture)
    FAST_CONSUMER_GROUPS,
    TIMEOUT_S,
    Member,
    ProducerThread,
    Timeline,
    all_partitions,
    assert_no_loss,
    committed_offsets,
    create_topics,
    end_offsets,
    exclusive_ownership_violations,
    fast_broker,
    raw,
    rd_admin,
    wait_delivered,
    wait_settled,
)
from .conftest import unique_topic

_CHILD_MEMBER = textwrap.dedent("""
    import json, signal, sys, time
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    bootstrap, group, topic, name = sys.argv[1:5]
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))

    def say(**fields):
        print(json.dumps({"when": time.monotonic_ns(), **fields}), flush=True)

    def callback(kind):
        return lambda consumer, partitions: say(event=kind, partitions=[[tp.topic, tp.partition]
                                                                        for tp in partitions])

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                  "client.id": name, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "fetch.wait.max.ms": 100, "reconnect.backoff.max.ms": 500})
    c.subscribe([topic], on_assign=callback("assign"), on_revoke=callback("revoke"), on_lost=callback("lost"))
    said_id = False
    while not stopping:
        msgs = c.consume(500, 0.2)
        if not said_id and c.memberid():
            say(event="member_id", member_id=c.memberid())
            said_id = True
        got, upto = [], {}
        for m in msgs:
            if m.error() is not None:
                continue
            got.append([m.topic(), m.partition(), m.offset(), m.value().decode()])
            upto[(m.topic(), m.partition())] = m.offset() + 1
        if got:
            say(event="delivered", records=got)
            try:
                c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in upto.items()], asynchronous=False)
            except KafkaException as exc:
                say(event="commit_failed", error=exc.args[0].name())
            else:
                say(event="committed", records=[r[:3] for r in got])
    c.close()
    say(event="closed")
""")


class ChildMember:
    """A member in a child process, read back from its JSON lines (the interface of ``Member``
    that the checks use)."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, out_path) -> None:
        self.name, self.out_path = name, out_path
        self.error = None
        with open(out_path, "w") as out, open(f"{out_path}.stderr", "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", _CHILD_MEMBER, bootstrap, group, topic, name],
                                         stdout=out, stderr=err)

    def events(self) -> list[dict]:
        with open(self.out_path) as fh:
            lines = fh.read().splitlines()
        return [json.loads(x) for x in lines if x.startswith("{") and x.endswith("}")]

    @property
    def member_id(self) -> str | None:
        return next((e["member_id"] for e in self.events() if e["event"] == "member_id"), None)

    def owned_now(self) -> frozenset:
        owned: set = set()
        for e in self.events():
            parts = {tuple(p) for p in e.get("partitions", [])}
            if e["event"] == "assign":
                owned |= parts
            elif e["event"] in ("revoke", "lost"):
                owned -= parts
        return frozenset(owned)

    @property
    def deliveries(self) -> Counter:
        return Counter(tuple(r[:3]) for e in self.events() if e["event"] == "delivered" for r in e["records"])

    @property
    def values(self) -> dict:
        return {tuple(r[:3]): r[3].encode() for e in self.events() if e["event"] == "delivered" for r in e["records"]}

    @property
    def committed(self) -> Counter:
        return Counter(tuple(r) for e in self.events() if e["event"] == "committed" for r in e["records"])

    outside_assignment: list = []

    def callbacks(self) -> list[tuple[int, str, str, frozenset]]:
        return [(e["when"], self.name, e["event"], frozenset(tuple(p) for p in e["partitions"]))
                for e in self.events() if e["event"] in ("assign", "revoke", "lost")]

    def signal(self, sig) -> None:
        self.proc.send_signal(sig)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(TIMEOUT_S) == 0, f"{self.name} exited with {self.proc.returncode}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _set_session_timeout(bootstrap: str, group: str, ms: int) -> None:
    """The group's own ``consumer.session.timeout.ms`` (the GROUP config resource)."""
    entry = ConfigEntry("consumer.session.timeout.ms", str(ms), incremental_operation=AlterConfigOpType.SET)
    admin = rd_admin(bootstrap)     # kept referenced until the answer: its handle ends with it
    [future] = admin.incremental_alter_configs(
        [ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])], request_timeout=TIMEOUT_S).values()
    future.result(TIMEOUT_S)


def test_a_member_stalled_past_its_session_timeout_is_fenced_and_its_partitions_move(fast_broker, tmp_path):
    bootstrap = fast_broker.bootstrap
    topic = unique_topic("stall")
    topics = {topic: 6}
    parts = all_partitions(topics)
    create_topics(bootstrap, topics)
    group, timeline, admin = f"stall-{uuid.uuid4().hex[:8]}", Timeline(), rd_admin(bootstrap)
    _set_session_timeout(bootstrap, group, 5000)
    producer = ProducerThread(bootstrap, topics)
    producer.start()
    stalled = ChildMember(bootstrap, group, topic, "stalled", tmp_path / "stalled.jsonl")
    live: list[Member] = []
    try:
        wait_settled(admin, group, [stalled], parts, "the child member holding every partition")
        live = [Member(bootstrap, group, name, timeline, topics=[topic]) for name in ("a", "b")]
        for m in live:
            m.start()
        three = wait_settled(admin, group, [stalled, *live], parts, "three members with two partitions each")
        assert sorted(len(p) for p in three.values()) == [2, 2, 2]
        producer.wait_batches(3)

        stalled.signal(signal.SIGSTOP)          # no more heartbeats, no more polls
        two = wait_settled(admin, group, live, parts, "the live members to take over the stalled one's partitions")
        assert two["a"] | two["b"] >= three["stalled"]
        producer.wait_batches(3)
        wait_delivered(live, producer.produced(), "the records produced while the member was stalled",
                       extra=lambda: stalled.deliveries)

        stalled.signal(signal.SIGCONT)          # it learns it was fenced, and joins again
        wait_for(lambda: any(e["event"] == "lost" for e in stalled.events()), TIMEOUT_S,
                 "the resumed member to learn that it lost its partitions")
        wait_settled(admin, group, [stalled, *live], parts, "the resumed member to be given partitions again")
        producer.wait_batches(3)
    finally:
        truth = producer.stop()
    try:
        wait_delivered(live, truth, "every produced record", extra=lambda: stalled.deliveries)
        wait_for(lambda: committed_offsets(bootstrap, group, parts) == end_offsets(truth, parts), TIMEOUT_S,
                 "the group's commits to reach the log end")
    finally:
        for m in live:
            m.stop()
        stalled.stop()
    assert_no_loss(truth, [*live, stalled])
    for when, name, kind, p in stalled.callbacks():
        timeline.add(when, name, kind, p)
    events = timeline.snapshot()
    assert not exclusive_ownership_violations(events), exclusive_ownership_violations(events)
    lost = [e for e in events if e[2] == "lost"]
    assert lost and {e[1] for e in lost} == {"stalled"} and set().union(*(e[3] for e in lost)) == three["stalled"]
    assert committed_offsets(bootstrap, group, parts) == end_offsets(truth, parts)


def test_kill_9_in_the_middle_of_a_rebalance_keeps_the_group_its_epochs_and_its_offsets(broker_factory):
    broker = broker_factory(**FAST_CONSUMER_GROUPS).start()
    bootstrap = broker.bootstrap
    topics = {unique_topic("k9-a"): 4, unique_topic("k9-b"): 4}
    parts = all_partitions(topics)
    create_topics(bootstrap, topics)
    group, timeline, admin = f"k9-{uuid.uuid4().hex[:8]}", Timeline(), rd_admin(bootstrap)
    producer = ProducerThread(bootstrap, topics)
    producer.start()
    members = [Member(bootstrap, group, name, timeline, topics=list(topics)) for name in ("a", "b")]
    try:
        for m in members:
            m.start()
        wait_settled(admin, group, members, parts, "two members sharing the partitions")
        producer.wait_batches(3)
        wire = raw(broker)
        try:
            # every member has acknowledged this state, so it is on disk
            before = wire.describe_group(group)
            assert before.error_code == 0 and before.group_state == "Stable"
            members.append(Member(bootstrap, group, "c", timeline, topics=list(topics)))
            members[-1].start()
            wait_for(lambda: len(wire.describe_group(group).members) == 3, TIMEOUT_S, "c to join")
        finally:
            wire.close()
    finally:
        truth = producer.stop()
    acknowledged = Counter()
    for m in members:
        with m.lock:
            acknowledged.update(m.committed)
    broker.kill()                               # SIGKILL while the group moves partitions to c
    broker.start()

    wire = raw(broker)
    try:
        after = wire.describe_group(group)
    finally:
        wire.close()
    assert after.error_code == 0
    assert after.group_epoch >= before.group_epoch and after.assignment_epoch >= before.assignment_epoch
    assert {m.member_id for m in before.members} <= {m.member_id for m in after.members}
    committed = committed_offsets(bootstrap, group, parts)
    for (t, p, o) in acknowledged:
        assert committed[(t, p)] > o, f"the acknowledged commit of {(t, p, o)} was lost: {committed[(t, p)]}"

    # a fresh admin client: the one from before the kill may still wait out a request it sent
    # to the killed process before it reconnects
    admin = rd_admin(bootstrap)
    settled = wait_settled(admin, group, members, parts, "the three members after the restart")
    assert all(settled.values()), settled
    wire = raw(broker)
    try:
        final = wire.describe_group(group)
    finally:
        wire.close()
    assert final.group_epoch >= after.group_epoch
    assert {m.member_id for m in final.members} == {m.member_id for m in members}, "a member had to join anew"
    more = ProducerThread(bootstrap, topics)
    more.start()
    more.wait_batches(3)
    truth.update(more.stop())
    wait_delivered(members, truth, "every produced record")
    wait_for(lambda: committed_offsets(bootstrap, group, parts) == end_offsets(truth, parts), TIMEOUT_S,
             "the group's commits to reach the log end")
    for m in members:
        m.stop()
    assert_no_loss(truth, members)
    events = timeline.snapshot()
    assert not exclusive_ownership_violations(events), exclusive_ownership_violations(events)
    assert not [e for e in events if e[2] == "lost"], "a member was fenced by the restart"
    replayed = [e for e in broker.log_lines() if e.get("event") == "consumer_groups_loaded"]
    assert replayed and replayed[-1]["groups"] >= 1 and replayed[-1]["skipped_records"] == 0


def test_a_static_member_that_comes_back_gets_its_partitions_and_nobody_else_moves(fast_broker):
    bootstrap = fast_broker.bootstrap
    topics = {unique_topic("static"): 6}
    parts = all_partitions(topics)
    create_topics(bootstrap, topics)
    group, timeline, admin = f"static-{uuid.uuid4().hex[:8]}", Timeline(), rd_admin(bootstrap)
    producer = ProducerThread(bootstrap, topics)
    producer.start()
    a = Member(bootstrap, group, "a", timeline, topics=list(topics), **{"group.instance.id": "instance-a"})
    b = Member(bootstrap, group, "b", timeline, topics=list(topics), **{"group.instance.id": "instance-b"})
    members = [a, b]
    try:
        for m in members:
            m.start()
        before = wait_settled(admin, group, [a, b], parts, "two static members")
        producer.wait_batches(3)
        a_events = len([e for e in timeline.snapshot() if e[1] == "a"])

        b.stop()        # a static member's leave (epoch -2): its partitions wait for it
        wire = raw(fast_broker)
        try:
            away = wire.describe_group(group)
        finally:
            wire.close()
        assert {(m.instance_id, m.member_epoch) for m in away.members} >= {("instance-b", -2)}, away
        producer.wait_batches(3)
        back = Member(bootstrap, group, "b-again", timeline, topics=list(topics), **{"group.instance.id": "instance-b"})
        members.append(back)
        back.start()
        after = wait_settled(admin, group, [a, back], parts, "the static member back with its partitions")
        assert (after["a"], after["b-again"]) == (before["a"], before["b"])
        assert len([e for e in timeline.snapshot() if e[1] == "a"]) == a_events, "a's partitions moved"
        assert back.member_id != b.member_id

        # gone for longer than the session timeout: its partitions move to a
        _set_session_timeout(bootstrap, group, 2000)
        producer.wait_batches(3)
        back.stop()
        alone = wait_settled(admin, group, [a], parts, "a holding every partition after b's session expired")
        assert alone["a"] == frozenset(parts)
        producer.wait_batches(3)
    finally:
        truth = producer.stop()
    wait_delivered([a], truth, "every produced record", extra=lambda: set(b.deliveries) | set(back.deliveries))
    wait_for(lambda: committed_offsets(bootstrap, group, parts) == end_offsets(truth, parts), TIMEOUT_S,
             "the group's commits to reach the log end")
    a.stop()
    assert_no_loss(truth, members)
    events = timeline.snapshot()
    assert not exclusive_ownership_violations(events), exclusive_ownership_violations(events)
    assert not [e for e in events if e[2] == "lost"]
