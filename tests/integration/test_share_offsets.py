"""Share-group offsets against the real daemon: ``sundial share-groups`` (AlterShareGroupOffsets,
DescribeShareGroupOffsets, DeleteShareGroupOffsets on the wire), their state kept in
``__share_group_state`` across kill -9, and consumed-log retention holding for a lagging share group.

Ground truth: the offsets and CreateTimes the test produced (``--to-datetime`` must land on the first
record at or after the time, by brute force), and the segment files of the data directory.
"""

from __future__ import annotations

import time

import pytest
from kafka import TopicPartition

from sundial.tools.share_groups import _alter, start_offsets
from sundial.tools.timeparse import format_ms

from support.waiting import wait_for

from .clients import admin, create_topic
from .conftest import unique_topic
from .groups_support import FAST_GROUPS
from .test_consumed_retention import (BROKER as RETENTION_BROKER, MINUTE, _commit, _earliest, _passes,
                                      _segment_bases, _segment_of, _topic)
from .test_tools_cli import assert_one_line_error, produce_records, sundial, table

pytestmark = pytest.mark.integration

PARTITIONS = 2


def offsets_of(b: str, group: str) -> dict[tuple[str, int], int]:
    rows = table(sundial("share-groups", "--bootstrap-server", b, "--describe", "--group", group))
    return {(r["TOPIC"], int(r["PARTITION"])): int(r["START-OFFSET"]) for r in rows}


#: Share groups on whether or not this broker serves ShareFetch yet (share.version is finalized with it).
SHARE_ON = {"group.share.enable": "true"}


def test_reset_describe_delete_and_kill_9(broker_factory):
    broker = broker_factory(**FAST_GROUPS, **SHARE_ON).start()
    b = broker.bootstrap
    topic = unique_topic("share-offsets")
    group = unique_topic("workers")
    create_topic(b, topic, PARTITIONS)
    now = int(time.time() * 1000)
    rows = [(i % PARTITIONS, now - 3_000_000 + i * 60_000, b"k", f"v{i}".encode(), None) for i in range(40)]
    metas = produce_records(b, topic, rows)
    records: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    for (p, ts, *_), md in zip(rows, metas):
        records[p].append((md.offset, ts))
    ends = {p: len(records[p]) for p in range(PARTITIONS)}

    # No state yet: the group does not exist.
    missing = sundial("share-groups", "--bootstrap-server", b, "--describe", "--group", group, check=False)
    assert_one_line_error(missing, "does not exist")

    # --to-datetime: the dry run prints the plan and changes nothing.
    target = now - 3_000_000 + 17 * 60_000 + 1
    expected = {p: min([o for o, ts in records[p] if ts >= target] or [ends[p]]) for p in range(PARTITIONS)}
    plan = table(sundial("share-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group,
                         "--topic", topic, "--to-datetime", format_ms(target)))
    assert {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in plan} == expected
    assert sundial("share-groups", "--bootstrap-server", b, "--describe", "--group", group, check=False).code != 0

    sundial("share-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group, "--topic", topic,
            "--to-datetime", str(target), "--execute")
    assert offsets_of(b, group) == {(topic, p): o for p, o in expected.items()}
    described = table(sundial("share-groups", "--bootstrap-server", b, "--describe", "--group", group, "--verbose"))
    for r in described:
        p = int(r["PARTITION"])
        assert int(r["LAG"]) == ends[p] - expected[p]  # nothing acknowledged yet
        assert r["LEADER-EPOCH"] == "-"                 # set by an alter, not by a share-partition leader

    # --to-latest on one partition, --to-earliest on the other.
    sundial("share-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group, "--topic", f"{topic}:0",
            "--to-latest", "--execute")
    sundial("share-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group, "--topic", f"{topic}:1",
            "--to-earliest", "--execute")
    assert offsets_of(b, group) == {(topic, 0): ends[0], (topic, 1): 0}

    # kill -9: the state is in __share_group_state and is replayed at start.
    broker.kill()
    broker.restart()
    assert offsets_of(b, group) == {(topic, 0): ends[0], (topic, 1): 0}
    state = table(sundial("share-groups", "--bootstrap-server", b, "--describe", "--group", group, "--state"))
    assert state[0]["STATE"] == "Empty" and state[0]["#MEMBERS"] == "0"
    assert group in sundial("share-groups", "--bootstrap-server", b, "--list").lines
    listed = {r["GROUP"]: r["STATE"] for r in table(sundial("share-groups", "--bootstrap-server", b, "--list",
                                                            "--state", "empty"))}
    assert listed.get(group) == "Empty"

    # --delete-offsets: the group's state on the topic goes; deleting it again is an error.
    out = sundial("share-groups", "--bootstrap-server", b, "--delete-offsets", "--group", group, "--topic", topic)
    assert table(out) == [{"TOPIC": topic, "STATUS": "Successful"}]
    gone = sundial("share-groups", "--bootstrap-server", b, "--describe", "--group", group)
    assert gone.out.strip() == "" and "has no offset information" in gone.err  # the group stays, empty
    bad = sundial("share-groups", "--bootstrap-server", b, "--delete-offsets", "--group", group, "--topic", topic,
                  check=False)
    assert bad.code != 0 and "no offset information to delete" in bad.out + bad.err
    # --delete: the empty group goes, with its state (another group's state stays).
    other = unique_topic("other-workers")
    for g in (group, other):
        sundial("share-groups", "--bootstrap-server", b, "--reset-offsets", "--group", g, "--topic", topic,
                "--to-latest", "--execute")
    sundial("share-groups", "--bootstrap-server", b, "--delete", "--group", group)
    assert_one_line_error(sundial("share-groups", "--bootstrap-server", b, "--describe", "--group", group,
                                  check=False), "does not exist")
    wait_for(lambda: _start_offsets(b, group) == [], 30, "the deleted group's state to go")
    assert len(_start_offsets(b, other)) == PARTITIONS


def _start_offsets(bootstrap: str, group: str) -> list:
    client = admin(bootstrap)
    try:
        return start_offsets(client, group)
    finally:
        client.close()


def test_retention_waits_for_a_lagging_share_group(broker_factory):
    broker = broker_factory(**RETENTION_BROKER, **SHARE_ON).start()
    topic, bases = _topic(broker, [30 * MINUTE] * 80)
    # A share group whose start offset is 3 holds every segment from the one holding offset 3, though a
    # consumer group has consumed everything. (The share group's offset is set first: a retention pass
    # between the two would rightly delete everything the consumer group alone has consumed.)
    target = 3
    _alter_to(broker.bootstrap, "slow-share", topic, target)
    _commit(broker.bootstrap, "fast-consumer-group", topic, 80)
    _passes(broker)
    hold = _segment_of(bases, target)
    assert _earliest(broker.bootstrap, topic) == hold
    assert _segment_bases(broker.data_dir, topic) == [b for b in bases if b >= hold]
    held = [e for e in broker.log_lines() if e.get("event") == "consumed_retention_held" and e.get("topic") == topic]
    assert held and held[-1].get("group") == "slow-share" and held[-1].get("committed_offset") == target

    # The share group moves on: the segments below its new start offset go.
    target = bases[len(bases) // 2] + 1
    expected = _segment_of(bases, target)
    _alter_to(broker.bootstrap, "slow-share", topic, target)
    wait_for(lambda: _earliest(broker.bootstrap, topic) == expected, 60, "the share group's segments to go",
             interval_s=0.05)
    _passes(broker, 2)
    assert _earliest(broker.bootstrap, topic) == expected  # the share group holds the rest


def _alter_to(bootstrap: str, group: str, topic: str, offset: int) -> None:
    """AlterShareGroupOffsets to ``offset`` (the tool has no --to-offset, as Kafka 4.2's has none)."""
    client = admin(bootstrap)
    try:
        _alter(client, group, {TopicPartition(topic, 0): offset})
    finally:
        client.close()


def test_retention_waits_for_a_real_share_consumer(broker_factory):
    """A confluent-kafka ShareConsumer accepts the first 50 records; 40 more arrive that it has not read.
    A consumer group that has read everything does not release the share group's unread segments."""
    ck = pytest.importorskip("confluent_kafka")
    ck_admin = pytest.importorskip("confluent_kafka.admin")
    broker = broker_factory(**RETENTION_BROKER, **SHARE_ON, **{"group.share.heartbeat.interval.ms": "1000",
                                                               "group.share.min.heartbeat.interval.ms": "1000"}).start()
    b = broker.bootstrap
    topic, bases = _topic(broker, [30 * MINUTE] * 50)
    group = unique_topic("share-reader")
    admin_client = ck_admin.AdminClient({"bootstrap.servers": b})
    resource = ck_admin.ConfigResource(ck_admin.ResourceType.GROUP, group, incremental_configs=[
        ck_admin.ConfigEntry("share.auto.offset.reset", "earliest",
                             incremental_operation=ck_admin.AlterConfigOpType.SET)])
    for future in admin_client.incremental_alter_configs([resource]).values():
        future.result(60)
    consumer = ck.ShareConsumer({"bootstrap.servers": b, "group.id": group})
    consumer.subscribe([topic])
    try:
        seen: set[int] = set()
        deadline = time.monotonic() + 60
        while len(seen) < 50 and time.monotonic() < deadline:
            for m in consumer.poll(0.5) or []:
                if m.error() is None:
                    seen.add(m.offset())
        assert seen == set(range(50))
        # The implicit acknowledgement of the last records goes with the next poll.
        wait_for(lambda: consumer.poll(0.2) is not None and offsets_of(b, group) == {(topic, 0): 50}, 60,
                 "the share group's start offset to reach 50")
        members = table(sundial("share-groups", "--bootstrap-server", b, "--describe", "--group", group, "--members"))
        assert [(r["#PARTITIONS"], r["ASSIGNMENT"]) for r in members] == [("1", f"{topic}:0")]
    finally:
        consumer.close()
    more = _topic_more(broker, topic, 40)
    _commit(b, "fast-consumer-group", topic, 90)
    _passes(broker)
    bases = _segment_bases(broker.data_dir, topic)
    hold = _segment_of(bases, 50)
    assert min(more) == 50
    assert _earliest(b, topic) == hold
    described = table(sundial("share-groups", "--bootstrap-server", b, "--describe", "--group", group))
    assert [(r["START-OFFSET"], r["LAG"]) for r in described] == [("50", "40")]


def _topic_more(broker, topic: str, count: int) -> list[int]:
    from .test_consumed_retention import _produce_with_ages
    return _produce_with_ages(broker.bootstrap, topic, [30 * MINUTE] * count)
