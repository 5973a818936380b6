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

from .clients import admin, create_topic
from .conftest import unique_topic
from .groups_support import FAST_GROUPS, wait_until
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
    return KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                         auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500,
                         request_timeout_ms=15000)


def first_positions(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """Join the group and return the offset of the first record delivered per partition."""
    c = group_consumer(bootstrap, group, topic)
    first: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 30
        while len(first) < PARTITIONS and time.monotonic() < deadline:
            for tp, recs in c.poll(timeout_ms=300).items():
                if recs and tp.partition not in first:
                    first[tp.partition] = recs[0].offset
    finally:
        c.close(autocommit=False)
    return first


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
        wait_until(lambda: c.poll(timeout_ms=200) is not None and c.assignment(), 30, "an assignment")
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
    wait_until(lambda: "Empty" in sundial("consumer-groups", "--bootstrap-server", b, "--list", "--state").out,
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
    wait_until(lambda: "Empty" in sundial("consumer-groups", "--bootstrap-server", b, "--list", "--state").out,
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
