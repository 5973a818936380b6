"""Consumer groups with kafka-python 3.0.12 against the real daemon.

Ground truth is what the test produced. Each consumer commits synchronously after every
poll, so every record must end up in exactly one successful commit: a record that a
commit covered is never delivered again (no re-delivery beyond the last commit), and
every produced record is delivered (no loss) — across rebalances, a member leaving, a
member killed (session timeout) and a broker restart.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from support.waiting import wait_for

from .clients import admin, create_topic
from .conftest import unique_topic
from .groups_support import FAST_GROUPS, GroupConsumer, committed_offsets, end_offsets, merged, produce

PARTITIONS = 6


def _assert_exactly_once_committed(truth: dict, consumers, extra_committed=()):
    deliveries = merged(c.deliveries for c in consumers)
    missing = set(truth) - set(deliveries)
    assert not missing, f"{len(missing)} records never delivered, e.g. {sorted(missing)[:5]}"
    assert set(deliveries) == set(truth), "delivered records that were never produced"
    values = {}
    for c in consumers:
        values.update(c.values)
    assert all(values[k] == v for k, v in truth.items())
    committed = merged([*(c.committed for c in consumers), *extra_committed])
    twice = {k: n for k, n in committed.items() if n > 1}
    assert not twice, f"records re-delivered after a commit covered them: {sorted(twice)[:5]}"
    return deliveries, committed


def _assignment_is(consumers, sizes):
    parts = [c.assigned for c in consumers]
    union = frozenset().union(*parts)
    return sorted(len(p) for p in parts) == sorted(sizes) and len(union) == PARTITIONS and \
        sum(len(p) for p in parts) == PARTITIONS


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "sticky"])
def test_assignor_rebalance_restart_resume(broker_factory, assignor):
    broker = broker_factory(**FAST_GROUPS).start()
    topic, group = unique_topic("grp"), f"g-{assignor}"
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    truth = produce(broker.bootstrap, topic, 600, PARTITIONS)
    first = [GroupConsumer(broker.bootstrap, topic, group, f"{assignor}-{i}", assignor) for i in range(3)]
    for c in first:
        c.start()
    wait_for(lambda: _assignment_is(first, [2, 2, 2]) and set(merged(c.deliveries for c in first)) >= set(truth),
             60, "3 members with 2 partitions each and every record delivered")

    # One member leaves (LeaveGroup): the two others take over its partitions.
    first[2].stop()
    wait_for(lambda: _assignment_is(first[:2], [3, 3]), 60, "2 members with 3 partitions each")
    truth.update(produce(broker.bootstrap, topic, 300, PARTITIONS, start=600))
    wait_for(lambda: set(merged(c.deliveries for c in first)) >= set(truth), 30, "records after the leave")
    for c in first[:2]:
        c.stop()

    # Broker restart: the group resumes from its committed offsets.
    broker.restart()
    assert committed_offsets(broker.bootstrap, group, topic, PARTITIONS) == \
        end_offsets(broker.bootstrap, topic, PARTITIONS)
    truth.update(produce(broker.bootstrap, topic, 300, PARTITIONS, start=900))
    second = [GroupConsumer(broker.bootstrap, topic, group, f"{assignor}-r{i}", assignor) for i in range(2)]
    for c in second:
        c.start()
    wait_for(lambda: set(merged(c.deliveries for c in first + second)) >= set(truth), 60,
             "records produced after the restart")
    for c in second:
        c.stop()
    deliveries, committed = _assert_exactly_once_committed(truth, first + second)
    assert all(n == 1 for n in committed.values()) and set(committed) == set(truth)
    # After the restart only the new records were delivered.
    after_restart = merged(c.deliveries for c in second)
    assert {v for k, v in truth.items() if k in after_restart} == {f"v{i}".encode() for i in range(900, 1200)}
    assert committed_offsets(broker.bootstrap, group, topic, PARTITIONS) == \
        end_offsets(broker.bootstrap, topic, PARTITIONS)
    # The leaver was removed because it left (LeaveGroup), not when its session expired.
    removed = [e for e in broker.log_lines() if e.get("event") == "member_removed"
               and e.get("client_id") == f"{assignor}-2"]
    assert removed and all(e.get("reason", "").startswith("left the group") for e in removed), removed


_KILLED_MEMBER = textwrap.dedent("""
    import json, sys
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    bootstrap, topic, group = sys.argv[1:4]
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id="doomed",
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      partition_assignment_strategy=[RangePartitionAssignor], session_timeout_ms=3000,
                      heartbeat_interval_ms=300, max_poll_interval_ms=15000, fetch_max_wait_ms=100)
    while True:
        batch = c.poll(timeout_ms=1000)
        keys = [[m.partition, m.offset] for msgs in batch.values() for m in msgs]
        print(json.dumps({"assigned": sorted(tp.partition for tp in c.assignment()), "delivered": keys}),
              flush=True)
        if keys:
            try:
                c.commit()
            except Exception:
                continue
            print(json.dumps({"committed": keys}), flush=True)
""")


def test_member_killed_is_removed_after_session_timeout(broker_factory, tmp_path):
    broker = broker_factory(**FAST_GROUPS).start()
    topic, group = unique_topic("death"), "g-death"
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    truth = produce(broker.bootstrap, topic, 600, PARTITIONS)
    out_path = tmp_path / "doomed.jsonl"
    with open(out_path, "w") as out:
        doomed = subprocess.Popen([sys.executable, "-c", _KILLED_MEMBER, broker.bootstrap, topic, group],
                                  stdout=out, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: '"assigned": [' in out_path.read_text() and
                 any(json.loads(line)["assigned"] for line in out_path.read_text().splitlines()
                     if "assigned" in line), 30, "the doomed member to get partitions")
        live = [GroupConsumer(broker.bootstrap, topic, group, f"live-{i}") for i in range(2)]
        for c in live:
            c.start()

        def doomed_assigned():
            lines = [json.loads(x) for x in out_path.read_text().splitlines() if x.startswith("{")]
            last = [x["assigned"] for x in lines if "assigned" in x]
            return frozenset(last[-1]) if last else frozenset()

        wait_for(lambda: sorted([len(doomed_assigned()), len(live[0].assigned), len(live[1].assigned)]) == [2, 2, 2]
                 and len(doomed_assigned() | live[0].assigned | live[1].assigned) == PARTITIONS, 60,
                 "three members with two partitions each")

        def doomed_caught_up():
            # its last poll with its two partitions delivered nothing: it has consumed (and
            # committed, or failed to commit) everything it holds
            lines = [json.loads(x) for x in out_path.read_text().splitlines() if x.startswith("{")]
            polls = [x for x in lines if "assigned" in x]
            return polls and len(polls[-1]["assigned"]) == 2 and polls[-1]["delivered"] == []

        wait_for(doomed_caught_up, 60, "the doomed member to consume what it holds")
    finally:
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
    wait_for(lambda: _assignment_is(live, [3, 3]), 60, "the survivors to take over after the session timeout")
    truth.update(produce(broker.bootstrap, topic, 300, PARTITIONS, start=600))
    lines = [json.loads(x) for x in out_path.read_text().splitlines() if x.startswith("{")]
    doomed_delivered = {tuple(k) for x in lines for k in x.get("delivered", [])}
    from collections import Counter
    doomed_committed = Counter(tuple(k) for x in lines for k in x.get("committed", []))

    wait_for(lambda: set(merged(c.deliveries for c in live)) | doomed_delivered >= set(truth), 60,
               "every record delivered")
    for c in live:
        c.stop()
    committed = merged([*(c.committed for c in live), doomed_committed])
    assert not {k for k, n in committed.items() if n > 1}, "a committed record was delivered again"
    assert set(merged(c.deliveries for c in live)) | doomed_delivered == set(truth)
    assert committed_offsets(broker.bootstrap, group, topic, PARTITIONS) == \
        end_offsets(broker.bootstrap, topic, PARTITIONS)
    # The survivors took over because the doomed member's session expired (no LeaveGroup was sent).
    events = [e for e in broker.log_lines() if e.get("event") == "member_removed"]
    assert any("session timeout" in e.get("reason", "") and e.get("client_id") == "doomed" for e in events)


def test_kill9_after_acknowledged_commits_reads_them_all_back(broker_factory):
    broker = broker_factory(**FAST_GROUPS).start()
    topic = unique_topic("k9")
    create_topic(broker.bootstrap, topic, partitions=8)
    produce(broker.bootstrap, topic, 80, 8)
    acknowledged: dict[tuple[str, int], tuple[int, str]] = {}
    # A simple consumer (manual assignment: generation -1, no member id) commits 300 times.
    simple = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="simple-k9", enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(8)]
    simple.assign(tps)
    for i in range(300):
        tp = tps[i % 8]
        simple.commit({tp: OffsetAndMetadata(1000 + i, f"meta-{i}", -1)})
        acknowledged[("simple-k9", tp.partition)] = (1000 + i, f"meta-{i}")
    # A subscribed group member commits too (generation and member id checked).
    member = GroupConsumer(broker.bootstrap, topic, "member-k9", "member-k9")
    member.start()
    wait_for(lambda: len(member.assigned) == 8 and sum(member.deliveries.values()) >= 80, 30,
               "the member to consume everything")
    wait_for(lambda: sum(member.committed.values()) >= 80, 30, "the member's commits")
    ends = end_offsets(broker.bootstrap, topic, 8)
    broker.kill()
    member.stopping.set()
    broker.start()
    # Read back with OffsetFetch v8 (both groups in one request), metadata included.
    client = admin(broker.bootstrap)
    try:
        fetched = client.list_group_offsets({"simple-k9": None, "member-k9": None})
    finally:
        client.close()
    got = {("simple-k9", tp.partition): (om.offset, om.metadata) for tp, om in fetched["simple-k9"].items()}
    assert got == acknowledged
    assert {tp.partition: om.offset for tp, om in fetched["member-k9"].items()} == ends
    assert committed_offsets(broker.bootstrap, "member-k9", topic, 8) == ends
    member.join(20)
    simple.close()
    replayed = [e for e in broker.log_lines() if e.get("event") == "offsets_loaded"][-1]
    assert replayed["offsets"] >= 16


def test_broker_restart_under_live_members_needs_no_rebalance(broker_factory):
    """Group metadata is reloaded from __consumer_offsets: members keep their ids and generation."""
    broker = broker_factory(**FAST_GROUPS).start()
    topic, group = unique_topic("live"), "g-live"
    create_topic(broker.bootstrap, topic, partitions=4)
    truth = produce(broker.bootstrap, topic, 100, 4)
    members = [GroupConsumer(broker.bootstrap, topic, group, f"live-{i}") for i in range(2)]
    for c in members:
        c.start()
    wait_for(lambda: all(len(c.assigned) == 2 for c in members)
               and set(merged(c.deliveries for c in members)) >= set(truth), 60, "a stable group")

    def rebalances():
        return sum(1 for e in broker.log_lines() if e.get("event") == "group_rebalanced" and e.get("group") == group)

    # The group may still settle a last rebalance (a leader that first lacked the topic's
    # metadata rejoins once it has it, at its next metadata refresh): count only once the
    # count has held still for twice metadata_max_age_ms (5 s in GroupConsumer).
    settled = {"count": rebalances(), "since": time.monotonic()}

    def held_still():
        now = rebalances()
        if now != settled["count"] or not all(len(c.assigned) == 2 for c in members):
            settled.update(count=now, since=time.monotonic())
        return time.monotonic() - settled["since"] > 10

    wait_for(held_still, 120, "the rebalance count to hold still for 10 s", interval_s=0.5)
    before = settled["count"]
    assignment = [c.assigned for c in members]
    broker.restart()
    truth.update(produce(broker.bootstrap, topic, 100, 4, start=100))
    wait_for(lambda: set(merged(c.deliveries for c in members)) >= set(truth), 60, "records after the restart")
    assert rebalances() == before
    assert [c.assigned for c in members] == assignment
    for c in members:
        c.stop()
    _assert_exactly_once_committed(truth, members)
