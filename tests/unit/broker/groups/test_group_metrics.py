"""Group metrics per type (``broker.metrics.group_rows`` and its collector) over a real coordinator.

The coordinator runs on an in-memory offsets log with a fake clock; the test drives a classic
group (JoinGroup/SyncGroup), an offsets-only group and a consumer-protocol group
(ConsumerGroupHeartbeat), lets session timeouts expire, and checks the series against what
it made happen: groups per type and state, classic generations completed, consumer group
epochs (every bump is a rebalance: the epoch the group reports equals the counter) and the
members each timer removed.
"""

from __future__ import annotations

import uuid

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sundial.broker.groups.coordinator import GroupCoordinator
from sundial.broker.groups.modern.requests import HeartbeatRequest
from sundial.broker.groups.offsets import MemoryOffsetsLog, OffsetStore
from sundial.broker.metrics import GROUP_TYPE_STATES, BrokerMetrics, group_rows
from sundial.config import BrokerConfig
from support.unit_helpers import ManualClock
from test_group_coordinator import TOPICS, commit, stable_group

pytestmark = pytest.mark.asyncio

T1 = uuid.uuid5(uuid.NAMESPACE_DNS, "t1")
CONSUMER_SESSION_MS = 6000


async def started_coordinator() -> tuple[GroupCoordinator, ManualClock]:
    config = BrokerConfig({"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "100",
                           "group.consumer.session.timeout.ms": str(CONSUMER_SESSION_MS),
                           "group.consumer.min.session.timeout.ms": str(CONSUMER_SESSION_MS)})
    clock = ManualClock()
    coord = GroupCoordinator(config, None, now_ms=clock, store=OffsetStore(MemoryOffsetsLog()), run_timers=False,
                             topic_partitions=TOPICS.get, topic_view=lambda: {"t1": (T1, TOPICS["t1"])})
    await coord.start()
    return coord, clock


def join(coord, group: str, member_id: str):
    return coord.consumer_heartbeat(HeartbeatRequest(group, member_id, 0, rebalance_timeout_ms=30_000,
                                                     subscribed_topic_names=["t1"], topic_partitions={}),
                                    client_id="c", client_host="/127.0.0.1")


def heartbeat(coord, group: str, member_id: str, epoch: int, owned):
    return coord.consumer_heartbeat(HeartbeatRequest(group, member_id, epoch, topic_partitions=owned),
                                    client_id="c", client_host="/127.0.0.1")


def as_dict(rows) -> dict:
    return {(family, tuple(sorted(labels.items()))): n for family, labels, n in rows}


def counts(rows) -> dict:
    """{(type, state): groups} of the non-zero ``groups`` rows."""
    return {(dict(labels)["type"], dict(labels)["state"]): n for (family, labels), n in as_dict(rows).items()
            if family == "groups" and n}


def counter(rows, family: str, group_type: str) -> int:
    return as_dict(rows)[(family, (("type", group_type),))]


async def test_group_rows_follow_both_group_types():
    coord, clock = await started_coordinator()
    rows = group_rows(coord)
    # Every state of both types is reported, at 0, before any group exists.
    assert {k for k in as_dict(rows) if k[0] == "groups"} == {
        ("groups", (("state", s), ("type", t))) for t, states in GROUP_TYPE_STATES.items() for s in states}
    assert counts(rows) == {} and all(n == 0 for _, _, n in rows)

    (a, b), _ = await stable_group(coord, group="classic")                 # one generation completed
    assert await commit(coord, "offsets-only", [("t1", 0, 5)]) == [0]     # an Empty classic group
    first = await join(coord, "modern", "m-1")
    second = await join(coord, "modern", "m-2")
    rows = group_rows(coord)
    assert counts(rows)[("classic", "Stable")] == 1 and counts(rows)[("classic", "Empty")] == 1
    assert sum(n for (t, _), n in counts(rows).items() if t == "consumer") == 1
    assert counter(rows, "rebalances", "classic") == 1
    assert counter(rows, "rebalances", "consumer") == coord.consumer_describe("modern").group_epoch == 2

    # m-2 stops heartbeating: past its session it is fenced (one more epoch bump); m-1 keeps going.
    clock.now += CONSUMER_SESSION_MS - 2000
    result = await heartbeat(coord, "modern", "m-1", first.member_epoch, first.assignment or {})
    owned = result.assignment if result.assignment is not None else first.assignment
    clock.now += 2001
    fenced = coord.consumer.fire_timers()
    assert fenced, "m-2 was not fenced"
    rows = group_rows(coord)
    assert counter(rows, "fenced_members", "consumer") == 1
    assert counter(rows, "rebalances", "consumer") == coord.consumer_describe("modern").group_epoch == 3
    assert [m.member_id for m in coord.consumer_describe("modern").members] == ["m-1"]
    # m-1 catches up to the new target (every partition): the group is Stable again.
    for _ in range(3):
        result = await heartbeat(coord, "modern", "m-1", result.member_epoch, owned)
        owned = result.assignment if result.assignment is not None else owned
    assert owned == {T1: frozenset(range(TOPICS["t1"]))}
    assert counts(group_rows(coord))[("consumer", "Stable")] == 1
    assert second.member_id == "m-2"

    # The classic members never heartbeat: both expire, the group empties.
    clock.now += 10_001
    coord.fire_timers()
    rows = group_rows(coord)
    assert counter(rows, "fenced_members", "classic") == 2
    assert counts(rows) == {("classic", "Empty"): 2, ("consumer", "Stable"): 1}
    assert coord.describe_group("classic")[1]["group_state"] == "Empty"
    assert {a, b}.isdisjoint(m["member_id"] for m in coord.describe_group("classic")[1]["members"])
    await coord.stop()


async def test_the_collector_exports_the_rows_as_prometheus_series():
    coord, _ = await started_coordinator()
    await join(coord, "modern", "m-1")
    assert await commit(coord, "offsets-only", [("t1", 0, 5)]) == [0]
    metrics = BrokerMetrics()
    metrics.install_group_collector(lambda: group_rows(coord))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(generate_latest(metrics.registry).decode()) for s in f.samples}
    assert samples[("sundial_groups", (("state", "Empty"), ("type", "classic")))] == 1
    assert samples[("sundial_groups", (("state", "Stable"), ("type", "consumer")))] == 1
    assert samples[("sundial_groups", (("state", "Assigning"), ("type", "consumer")))] == 0
    assert samples[("sundial_group_rebalances_total", (("type", "consumer"),))] == 1
    assert samples[("sundial_group_rebalances_total", (("type", "classic"),))] == 0
    assert samples[("sundial_group_fenced_members_total", (("type", "consumer"),))] == 0
    assert not [name for name, _ in samples if name.endswith("_created")]
    await coord.stop()
