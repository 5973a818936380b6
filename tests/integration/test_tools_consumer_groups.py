"""``sundial consumer-groups`` with a real kafka-python group: list, describe (lag in
offsets and in time), reset-offsets (dry run, --execute, the scenarios) and delete.

Ground truth: the offsets and CreateTimes the test produced. ``--to-datetime`` must
move the group to the first offset whose timestamp is at or after the time (brute
force; the log end offset when none is), and a kafka-python consumer of the group must
then start exactly there.
"""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from sundial.tools.timeparse import format_ms

from support.waiting import wait_for

from .clients import admin, create_topic
from .conftest import unique_topic
from .groups_support import FAST_GROUPS, first_delivered
from .test_tools_cli import assert_one_line_error, produce_records, sundial, table

pytestmark = pytest.mark.integration

PARTITIONS = 2


def committed(bootstrap: str, group: str) -> dict[int, int]:
    client = admin(bootstrap)
    try:
        offsets = client.list_group_offsets(group).get(group, {})
        return {tp.partition: oam.offset for tp, oam in offsets.items()}
    finally:
        client.close()


def first_at_or_after(records: dict[int, list[tuple[int, int]]], p: int, target: int) -> int:
    hits = [o for o, ts in records[p] if ts >= target]
    return min(hits) if hits else len(records[p])


def group_consumer(bootstrap: str, group: str, topic: str) -> KafkaConsumer:
    """A kafka-python member that subscribes once its metadata holds the topic (see groups_support:
    kafka-python 3.0.12 can lose the rejoin a leader makes when the partitions arrive later)."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500,
                      request_timeout_ms=15000)
    wait_for(lambda: c.partitions_for_topic(topic), 30, f"metadata for {topic}")
    c.subscribe([topic])
    return c


def first_positions(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """Join the group and return the offset of the first record delivered per partition."""
    return first_delivered(group_consumer(bootstrap, group, topic), PARTITIONS)


@pytest.fixture
def groups_broker(broker_factory):
    return broker_factory(**FAST_GROUPS).start()


def test_describe_reset_and_delete_a_real_group(groups_broker):
    b = groups_broker.bootstrap
    topic = unique_topic("tools-cg")
    group = unique_topic("billing")
    create_topic(b, topic, PARTITIONS)
    now = int(time.time() * 1000)
    rows = [(i % PARTITIONS, now - 3_000_000 + i * 60_000, f"k{i}".encode(), f"v{i}".encode(), None)
            for i in range(40)]
    metas = produce_records(b, topic, rows)
    records: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    for (p, ts, *_), md in zip(rows, metas):
        records[p].append((md.offset, ts))
    ends = {p: len(records[p]) for p in range(PARTITIONS)}

    # A real kafka-python group consumes and commits offsets 5 and 12.
    c = group_consumer(b, group, topic)
    try:
        wait_for(lambda: c.poll(timeout_ms=1000) is not None and c.assignment(), 30, "an assignment")
        c.commit({TopicPartition(topic, 0): OffsetAndMetadata(5, "", -1),
                  TopicPartition(topic, 1): OffsetAndMetadata(12, "", -1)})
        # While it is a member, describe shows it and --execute refuses to reset.
        rows_live = table(sundial("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group))
        assert {r["CONSUMER-ID"] for r in rows_live} != {"-"}
        assert {r["CLIENT-ID"] for r in rows_live} == {"kafka-python-3.0.12"}
        members = table(sundial("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group,
                                "--members"))
        assert members[0]["#PARTITIONS"] == str(PARTITIONS)
        state = table(sundial("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group, "--state"))
        assert state[0]["STATE"] == "Stable"
        refused = sundial("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group,
                          "--topic", topic, "--to-earliest", "--execute", check=False)
        assert_one_line_error(refused, "inactive", "Stable")
    finally:
        c.close(autocommit=False)
    wait_for(lambda: "Empty" in sundial("consumer-groups", "--bootstrap-server", b, "--list", "--state").out,
             30, "the group to become Empty")
    assert group in sundial("consumer-groups", "--bootstrap-server", b, "--list").lines

    before = time.time() * 1000
    described = table(sundial("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group))
    after = time.time() * 1000
    by_partition = {int(r["PARTITION"]): r for r in described}
    for p, current in ((0, 5), (1, 12)):
        r = by_partition[p]
        assert (r["GROUP"], r["TOPIC"]) == (group, topic)
        assert int(r["CURRENT-OFFSET"]) == current
        assert int(r["LOG-END-OFFSET"]) == ends[p]
        assert int(r["LAG"]) == ends[p] - current
        ts = dict(records[p])[current]                   # the oldest record not consumed
        assert before - ts - 1 <= int(r["TIME-LAG-MS"]) <= after - ts + 1

    # --to-datetime: dry run prints the plan and commits nothing.
    target = now - 3_000_000 + 17 * 60_000 + 1
    expected = {p: first_at_or_after(records, p, target) for p in range(PARTITIONS)}
    plan = table(sundial("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group,
                         "--topic", topic, "--to-datetime", format_ms(target)))
    assert {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in plan} == expected
    assert {int(r["PARTITION"]): int(r["PREVIOUS-OFFSET"]) for r in plan} == {0: 5, 1: 12}
    assert committed(b, group) == {0: 5, 1: 12}
    # --execute commits, and the real group resumes exactly there.
    sundial("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group, "--topic", topic,
            "--to-datetime", str(target), "--execute")
    assert committed(b, group) == expected
    assert first_positions(b, group, topic) == expected
    wait_for(lambda: "Empty" in sundial("consumer-groups", "--bootstrap-server", b, "--list", "--state").out,
             30, "the group to become Empty again")

    # A time after every record: the log end offset (Kafka's rule).
    sundial("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group, "--all-topics",
            "--to-datetime", "now", "--execute")
    assert committed(b, group) == ends
    # --by-duration 30m: now − 30 min, brute force again.
    moment = time.time() * 1000
    plan = table(sundial("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group,
                         "--all-topics", "--by-duration", "PT30M", "--execute"))
    got = {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in plan}
    assert got in ({p: first_at_or_after(records, p, int(moment - 1_800_000) + d) for p in range(PARTITIONS)}
                   for d in (-2000, 0, 2000))
    # --to-earliest, --to-offset (clamped), --shift-by (clamped), --to-latest on one partition.
    sundial("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group, "--topic", topic,
            "--to-earliest", "--execute")
    assert committed(b, group) == {0: 0, 1: 0}
    sundial("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group, "--topic", topic,
            "--to-offset", "1000", "--execute")
    assert committed(b, group) == ends
    sundial("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group, "--topic",
            f"{topic}:1", "--shift-by", "-3", "--execute")
    assert committed(b, group) == {0: ends[0], 1: ends[1] - 3}

    # delete
    out = sundial("consumer-groups", "--bootstrap-server", b, "--delete", "--group", group).out
    assert out.strip() == f"Deletion of requested consumer groups ('{group}') was successful."
    assert_one_line_error(sundial("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group,
                                  check=False), "does not exist")


# -- Kafka 4 consumer groups (KIP-848) ---------------------------------------------------------------------

#: Consumer-protocol members heartbeat every 500 ms and a silent one is fenced after 6 s.
CONSUMER_PROTOCOL = {**FAST_GROUPS,
                     "group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "500",
                     "group.consumer.session.timeout.ms": "6000", "group.consumer.min.session.timeout.ms": "6000"}
KIP848_PARTITIONS = 3


def kip848_consumer(bootstrap: str, group: str, topic: str, client_id: str, instance_id: str | None = None):
    from confluent_kafka import Consumer

    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "client.id": client_id, "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "log_level": 3}
    if instance_id is not None:
        conf["group.instance.id"] = instance_id
    c = Consumer(conf)
    c.subscribe([topic])
    return c


def pump(consumers, seen: dict | None = None) -> None:
    """Poll every member once (the application's part: assignment changes are served in poll)."""
    for c in consumers:
        msg = c.poll(0.1)
        if msg is not None and not msg.error() and seen is not None:
            seen.setdefault(msg.partition(), msg.offset())


def owned(c) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in c.assignment()}


def cell_pairs(text: str) -> set[tuple[str, int]]:
    """``topic:0,1;other:2`` → {(topic, 0), (topic, 1), (other, 2)}; ``-`` → set()."""
    if text == "-":
        return set()
    return {(t, int(p)) for part in text.split(";") for t, ps in [part.split(":")] for p in ps.split(",")}


def group_state(b: str, group: str) -> dict:
    return table(sundial("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group, "--state",
                         "--verbose"))[0]


def settled(b: str, group: str, consumers) -> dict | None:
    """The --state --verbose row once the group is Stable at one epoch and every member's current
    assignment (as the tool shows it) is what the client itself owns; None before."""
    pump(consumers)
    state = group_state(b, group)
    if state["STATE"] != "Stable" or state["GROUP-EPOCH"] != state["TARGET-ASSIGNMENT-EPOCH"]:
        return None
    members = {r["CONSUMER-ID"]: r for r in table(sundial(
        "consumer-groups", "--bootstrap-server", b, "--describe", "--group", group, "--members", "--verbose"))}
    for c in consumers:
        row = members.get(c.memberid())
        if row is None or cell_pairs(row["CURRENT-ASSIGNMENT"]) != owned(c) or not owned(c):
            return None
    return state


def test_a_consumer_protocol_group_listed_described_reset_and_deleted(broker_factory):
    from confluent_kafka.admin import AdminClient

    node = broker_factory(**CONSUMER_PROTOCOL).start()
    b = node.bootstrap
    topic, group, classic = unique_topic("tools-kip848"), unique_topic("kip848"), unique_topic("classic")
    create_topic(b, topic, KIP848_PARTITIONS)
    now = int(time.time() * 1000)
    rows = [(i % KIP848_PARTITIONS, now - 2_000_000 + i * 60_000, f"k{i}".encode(), b"v", None) for i in range(30)]
    records: dict[int, list[tuple[int, int]]] = {p: [] for p in range(KIP848_PARTITIONS)}
    for (p, ts, *_), md in zip(rows, produce_records(b, topic, rows)):
        records[p].append((md.offset, ts))
    every = {(topic, p) for p in range(KIP848_PARTITIONS)}
    # A classic group next to it (offsets only, committed by kafka-python outside any generation).
    kp = admin(b)
    try:
        kp.alter_group_offsets(classic, {TopicPartition(topic, 0): OffsetAndMetadata(1, "", -1)})
    finally:
        kp.close()

    first = kip848_consumer(b, group, topic, "cg-static", instance_id="inst-1")
    members = [first]
    try:
        one = wait_for(lambda: settled(b, group, members), 60, "the first member to own every partition")
        assert owned(first) == every
        second = kip848_consumer(b, group, topic, "cg-dynamic")
        members.append(second)
        two = wait_for(lambda: settled(b, group, members), 60, "two members sharing the partitions")
        # Group epoch and target-assignment epoch: a second member is a new epoch; one assignor.
        assert int(two["GROUP-EPOCH"]) > int(one["GROUP-EPOCH"]) >= 1
        assert two["#MEMBERS"] == "2" and two["ASSIGNMENT-STRATEGY"] == "uniform"
        assert owned(first) | owned(second) == every and not owned(first) & owned(second)

        verbose = table(sundial("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group,
                                "--members", "--verbose"))
        by_id = {r["CONSUMER-ID"]: r for r in verbose}
        assert set(by_id) == {first.memberid(), second.memberid()}
        for c, client_id, instance in ((first, "cg-static", "inst-1"), (second, "cg-dynamic", "-")):
            r = by_id[c.memberid()]
            assert (r["GROUP"], r["CLIENT-ID"], r["GROUP-INSTANCE-ID"], r["HOST"]) == \
                (group, client_id, instance, "/127.0.0.1")
            assert int(r["#PARTITIONS"]) == len(owned(c))
            assert cell_pairs(r["CURRENT-ASSIGNMENT"]) == cell_pairs(r["TARGET-ASSIGNMENT"]) == owned(c)
            assert r["CURRENT-EPOCH"] == r["TARGET-EPOCH"] == two["GROUP-EPOCH"]
        # An independent reader: librdkafka's admin client (ConsumerGroupDescribe) agrees.
        rd_admin = AdminClient({"bootstrap.servers": b})       # kept referenced until its future is done
        desc = rd_admin.describe_consumer_groups([group], request_timeout=20)[group].result(30)
        assert str(desc.type).endswith("CONSUMER") and desc.partition_assignor == "uniform"
        assert {m.member_id: {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
                for m in desc.members} == {c.memberid(): owned(c) for c in members}

        # --list: types and states, filtered by the broker (ListGroups v5).
        listed = {r["GROUP"]: r for r in table(sundial("consumer-groups", "--bootstrap-server", b, "--list",
                                                         "--type", "--state"))}
        assert (listed[group]["TYPE"], listed[group]["STATE"]) == ("consumer", "Stable")
        assert (listed[classic]["TYPE"], listed[classic]["STATE"]) == ("classic", "Empty")
        only_consumer = [r["GROUP"] for r in table(sundial("consumer-groups", "--bootstrap-server", b, "--list",
                                                           "--type", "CONSUMER"))]
        assert group in only_consumer and classic not in only_consumer
        only_classic = [r["GROUP"] for r in table(sundial("consumer-groups", "--bootstrap-server", b, "--list",
                                                          "--type", "classic", "--state", "empty"))]
        assert classic in only_classic and group not in only_classic
        assert group in sundial("consumer-groups", "--bootstrap-server", b, "--list").lines

        # Each member commits (with its member epoch) inside what it owns; --describe shows the lag
        # in offsets and in time, and who owns each partition.
        commit_at = {0: 3, 1: 6, 2: 9}
        from confluent_kafka import TopicPartition as RdTopicPartition
        for c in members:
            c.commit(offsets=[RdTopicPartition(t, p, commit_at[p]) for t, p in sorted(owned(c))], asynchronous=False)
        owner = {p: c for c in members for _, p in owned(c)}
        before = time.time() * 1000
        described_rows = table(sundial("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group))
        after = time.time() * 1000
        assert {int(r["PARTITION"]) for r in described_rows} == set(commit_at)
        for r in described_rows:
            p = int(r["PARTITION"])
            assert (r["TOPIC"], int(r["CURRENT-OFFSET"]), int(r["LOG-END-OFFSET"])) == (topic, commit_at[p], 10)
            assert int(r["LAG"]) == 10 - commit_at[p]
            ts = dict(records[p])[commit_at[p]]                      # the oldest record not consumed
            assert before - ts - 1 <= int(r["TIME-LAG-MS"]) <= after - ts + 1
            assert (r["CONSUMER-ID"], r["CLIENT-ID"]) == (owner[p].memberid(),
                                                          "cg-static" if owner[p] is first else "cg-dynamic")
        refused = sundial("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group,
                          "--topic", topic, "--to-earliest", "--execute", check=False)
        assert_one_line_error(refused, "inactive", "Stable")
    finally:
        for c in members:
            c.close()
    # The dynamic member left; the static one is kept for its session timeout (6 s), then fenced.
    wait_for(lambda: group_state(b, group)["STATE"] == "Empty", 60, "the group to become Empty")
    empty = sundial("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group, "--members")
    assert empty.code == 0 and "has no active members" in empty.err

    # --reset-offsets --to-datetime on the consumer group: brute force, then a new member resumes there.
    target = now - 2_000_000 + 13 * 60_000 + 1
    expected = {p: first_at_or_after(records, p, target) for p in range(KIP848_PARTITIONS)}
    plan = table(sundial("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group,
                         "--all-topics", "--to-datetime", str(target), "--execute"))
    assert {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in plan} == expected
    assert {int(r["PARTITION"]): int(r["PREVIOUS-OFFSET"]) for r in plan} == commit_at
    assert committed(b, group) == expected
    resumed = kip848_consumer(b, group, topic, "cg-resume")
    seen: dict[int, int] = {}
    try:
        wait_for(lambda: pump([resumed], seen) or len(seen) == KIP848_PARTITIONS, 60, "the resumed member")
    finally:
        resumed.close()
    assert seen == expected
    wait_for(lambda: group_state(b, group)["STATE"] == "Empty", 30, "the group to become Empty again")

    out = sundial("consumer-groups", "--bootstrap-server", b, "--delete", "--group", group).out
    assert out.strip() == f"Deletion of requested consumer groups ('{group}') was successful."
    for view in ((), ("--members",), ("--state",)):
        assert_one_line_error(sundial("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group,
                                      *view, check=False), "does not exist")
    assert group not in sundial("consumer-groups", "--bootstrap-server", b, "--list").lines
