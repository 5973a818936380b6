"""``sundial failover`` between two daemons (seed 001: resume on cluster B at T − X).

Cluster A and cluster B hold the same records with the same CreateTimes, but at other
offsets (B also holds records A never had, and one of B's partitions lags behind A). A
kafka-python group consumes part of A and commits. The failover must commit, for each
partition, the offset a brute-force search of B gives: the lowest offset whose
timestamp is at or after T − X, where T is the timestamp of the last record the group
consumed on A (B's log end offset when no record of B is that recent; B's log start when
the group consumed nothing). A kafka-python consumer of the group on B must then start
exactly there. With A stopped, ``--at`` gives T.
"""

from __future__ import annotations

import random
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

PARTITIONS = 3
SAFETY_MS = 5 * 60_000


def committed(bootstrap: str, group: str) -> dict[int, int]:
    client = admin(bootstrap)
    try:
        return {tp.partition: oam.offset for tp, oam in client.list_group_offsets(group).get(group, {}).items()}
    finally:
        client.close()


def brute_force(records: list[tuple[int, int]], target_ms: int) -> int:
    hits = [o for o, ts in records if ts >= target_ms]
    return min(hits) if hits else len(records)


def first_positions(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="latest", session_timeout_ms=6000, heartbeat_interval_ms=500)
    return first_delivered(c, partitions)


def test_failover_puts_the_group_at_t_minus_x(broker_factory):
    a = broker_factory(**FAST_GROUPS).start()
    b = broker_factory(**FAST_GROUPS).start()
    topic = unique_topic("tools-fo")
    group = unique_topic("fo-group")
    create_topic(a.bootstrap, topic, PARTITIONS)
    create_topic(b.bootstrap, topic, PARTITIONS)
    rng = random.Random(3)
    now = int(time.time() * 1000)
    base = now - 4 * 3_600_000
    a_rows, b_rows = [], []
    for p in range(PARTITIONS):
        times = [base + i * 60_000 + rng.randint(-40_000, 40_000) for i in range(60)]
        a_rows += [(p, ts, f"{p}-{i}".encode(), f"v{i}".encode(), None) for i, ts in enumerate(times)]
        # B: the same records, plus records of its own, in an order of its own; partition 2 lags behind.
        copy = [(ts, f"{p}-{i}".encode()) for i, ts in enumerate(times)]
        if p == 2:
            copy = copy[:25]
        copy += [(base + rng.randint(0, 20 * 60_000), f"b-only-{p}-{j}".encode()) for j in range(15)]
        copy.sort(key=lambda r: r[0] + rng.randint(-20_000, 20_000))
        b_rows += [(p, ts, k, b"x", None) for ts, k in copy]
    a_meta = produce_records(a.bootstrap, topic, a_rows)
    b_meta = produce_records(b.bootstrap, topic, b_rows)
    on_a = {p: [] for p in range(PARTITIONS)}
    on_b = {p: [] for p in range(PARTITIONS)}
    for (p, ts, *_), md in zip(a_rows, a_meta):
        on_a[p].append((md.offset, ts))
    for (p, ts, *_), md in zip(b_rows, b_meta):
        on_b[p].append((md.offset, ts))

    # The group consumed on A: partition 0 up to 40, partition 1 nothing, partition 2 up to 50.
    consumed = {0: 40, 1: 0, 2: 50}
    c = KafkaConsumer(bootstrap_servers=a.bootstrap, group_id=group, enable_auto_commit=False)
    c.commit({TopicPartition(topic, p): OffsetAndMetadata(off, "", -1) for p, off in consumed.items()})
    c.close(autocommit=False)

    expected = {}
    for p, off in consumed.items():
        if off == 0:
            expected[p] = 0
        else:
            t = dict(on_a[p])[off - 1]                       # the last record the group consumed on A
            expected[p] = brute_force(on_b[p], t - SAFETY_MS)
    assert expected[2] == len(on_b[2]), "partition 2 of B lags: nothing there is as recent as T - X"

    plan = sundial("failover", "--source-bootstrap", a.bootstrap, "--target-bootstrap", b.bootstrap,
                   "--group", group, "--safety", "5m")
    assert plan.lines[0].startswith(f"Failover plan for group {group}: {a.bootstrap} -> {b.bootstrap}")
    rows = table(type(plan)(0, "\n".join(plan.lines[1:]), ""))
    assert {int(r["PARTITION"]): int(r["TARGET-OFFSET"]) for r in rows} == expected
    assert {int(r["PARTITION"]): int(r["SOURCE-OFFSET"]) for r in rows} == consumed
    t0 = dict(on_a[0])[consumed[0] - 1]
    assert rows[0]["LAST-CONSUMED-TIME"] == format_ms(t0)
    assert rows[0]["SEEK-TIME"] == format_ms(t0 - SAFETY_MS)
    assert committed(b.bootstrap, group) == {}, "a dry run commits nothing"

    sundial("failover", "--source-bootstrap", a.bootstrap, "--target-bootstrap", b.bootstrap, "--group", group,
            "--safety", "PT5M", "--execute")
    assert committed(b.bootstrap, group) == expected
    # The real group resumes on B exactly there (partition 2 is at its end: nothing to deliver).
    got = first_positions(b.bootstrap, group, topic, 2)
    assert got == {p: off for p, off in expected.items() if off < len(on_b[p])}

    # A is down: T comes from --at, for every partition of the named topics.
    assert a.stop() == 0
    at = base + 30 * 60_000 + 123
    target_group = group + "-at"
    out = sundial("failover", "--target-bootstrap", b.bootstrap, "--group", group, "--target-group", target_group,
                  "--topics", topic, "--at", format_ms(at), "--safety", "300s", "--execute").out
    assert f"Committed {PARTITIONS} offset(s) for group {target_group}" in out
    assert committed(b.bootstrap, target_group) == {p: brute_force(on_b[p], at - SAFETY_MS)
                                                    for p in range(PARTITIONS)}
    # Without --at, an unreachable A is a one-line error.
    failed = sundial("failover", "--source-bootstrap", a.bootstrap, "--target-bootstrap", b.bootstrap,
                     "--group", group, "--safety", "5m", "--timeout-ms", "1500", check=False)
    assert_one_line_error(failed, "cannot connect to", a.bootstrap)


def test_failover_refuses_an_active_group_on_b(broker_factory):
    a = broker_factory(**FAST_GROUPS).start()
    b = broker_factory(**FAST_GROUPS).start()
    topic = unique_topic("tools-fo-live")
    group = unique_topic("fo-live")
    for node in (a, b):
        create_topic(node.bootstrap, topic, 1)
        produce_records(node.bootstrap, topic, [(0, int(time.time() * 1000) - 1000, None, b"x", None)])
    c = KafkaConsumer(bootstrap_servers=a.bootstrap, group_id=group, enable_auto_commit=False)
    c.commit({TopicPartition(topic, 0): OffsetAndMetadata(1, "", -1)})
    c.close(autocommit=False)
    member = KafkaConsumer(topic, bootstrap_servers=b.bootstrap, group_id=group, enable_auto_commit=False,
                           session_timeout_ms=6000, heartbeat_interval_ms=500)
    try:
        wait_for(lambda: member.poll(timeout_ms=200) is not None and member.assignment(), 30, "an assignment")
        result = sundial("failover", "--source-bootstrap", a.bootstrap, "--target-bootstrap", b.bootstrap,
                         "--group", group, "--safety", "1m", "--execute", check=False)
        assert result.code == 1
        assert "Failover plan" in result.out             # the plan is printed first
        assert_one_line_error(result, "inactive")
    finally:
        member.close(autocommit=False)
