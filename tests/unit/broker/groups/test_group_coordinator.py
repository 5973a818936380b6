"""GroupCoordinator over an in-memory offsets log and a fake clock: requests, timers,
durable commits (crash + rebuild), snapshots, expiry, consumed retention input."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from support.unit_helpers import ManualClock

from sundial.broker.groups.consumer_protocol import encode_subscription
from sundial.broker.groups.coordinator import CommitRequest, GroupCoordinator
from sundial.broker.groups.offsets import MemoryOffsetsLog, OffsetStore
from sundial.config import BrokerConfig
from sundial.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.asyncio

TOPICS = {"t1": 4, "t2": 2, "other": 1}


def make(log=None, clock=None, snapshot_min=10_000, **overrides):
    settings = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "100",
                "offsets.retention.minutes": "60", **overrides}
    config = BrokerConfig(settings)
    log = log or MemoryOffsetsLog()
    clock = clock or ManualClock()
    ids = itertools.count(1)
    coord = GroupCoordinator(config, None, now_ms=clock, store=OffsetStore(log, snapshot_min_records=snapshot_min),
                             run_timers=False, topic_partitions=TOPICS.get,
                             new_member_id=lambda client, inst: f"{inst or client}-{next(ids)}")
    return coord, log, clock


async def started(*args, **kwargs):
    coord, log, clock = make(*args, **kwargs)
    await coord.start()
    return coord, log, clock


def join_kwargs(group="g", member_id="", client="c", topics=("t1",), session=10_000, instance=None, v4=True):
    return dict(group_id=group, member_id=member_id, group_instance_id=instance, client_id=client,
                client_host="/127.0.0.1", session_timeout_ms=session, rebalance_timeout_ms=30_000,
                protocol_type="consumer", protocols=[("range", encode_subscription(list(topics)))],
                require_known_member_id=v4 and instance is None)


async def stable_group(coord, n=2, group="g", topics=("t1",)):
    ids = []
    for i in range(n):
        r = await coord.join_group(**join_kwargs(group=group, client=f"c{i}", topics=topics))
        assert r.error == E.MEMBER_ID_REQUIRED
        ids.append(r.member_id)
    joins = [asyncio.ensure_future(coord.join_group(**join_kwargs(group=group, member_id=m, topics=topics)))
             for m in ids]
    await asyncio.sleep(0)
    coord.fire_timers()
    replies = await asyncio.gather(*joins)
    gen = replies[0].generation_id
    leader = replies[0].leader_id
    syncs = [asyncio.ensure_future(coord.sync_group(group_id=group, generation_id=gen, member_id=m,
                                                    group_instance_id=None, protocol_type="consumer",
                                                    protocol_name="range",
                                                    assignments=[(x, x.encode()) for x in ids] if m == leader else []))
             for m in ids]
    sync_replies = await asyncio.gather(*syncs)
    assert all(r.error == E.NONE for r in sync_replies)
    assert [r.assignment for r in sync_replies] == [m.encode() for m in ids]
    return ids, gen


def commit(coord, group, items, member="", gen=-1, **kw):
    return coord.commit_offsets(group_id=group, member_id=member, group_instance_id=None, generation_id=gen,
                                offsets=[CommitRequest(t, p, o) for t, p, o in items], **kw)


def fetched(coord, group, parts=None):
    error, rows = coord.fetch_offsets(group_id=group, partitions=parts)
    assert error == E.NONE
    return {(r.topic, r.partition): (r.committed.offset if r.committed else -1) for r in rows}


# --- request validation ---------------------------------------------------------------------

async def test_join_validation_errors():
    coord, _, _ = await started()
    assert (await coord.join_group(**{**join_kwargs(), "group_id": ""})).error == E.INVALID_GROUP_ID
    assert (await coord.join_group(**join_kwargs(session=50))).error == E.INVALID_SESSION_TIMEOUT
    assert (await coord.join_group(**join_kwargs(session=1_800_001))).error == E.INVALID_SESSION_TIMEOUT
    assert (await coord.join_group(**join_kwargs(member_id="nobody"))).error == E.UNKNOWN_MEMBER_ID
    assert "g" not in coord.groups


async def test_not_started_coordinator_is_not_available():
    coord, _, _ = make()
    assert (await coord.join_group(**join_kwargs())).error == E.COORDINATOR_NOT_AVAILABLE
    assert await commit(coord, "g", [("t1", 0, 5)]) == [E.COORDINATOR_NOT_AVAILABLE]
    assert coord.consumed_upto("t1", 0, 0).offset is None


async def test_full_group_flow_and_heartbeats():
    coord, _, clock = await started()
    (a, b), gen = await stable_group(coord)
    assert coord.heartbeat(group_id="g", member_id=a, group_instance_id=None, generation_id=gen) == E.NONE
    assert coord.heartbeat(group_id="g", member_id=a, group_instance_id=None, generation_id=gen + 1) == \
        E.ILLEGAL_GENERATION
    assert coord.heartbeat(group_id="nope", member_id=a, group_instance_id=None, generation_id=gen) == \
        E.UNKNOWN_MEMBER_ID
    error, desc = coord.describe_group("g")
    assert desc["group_state"] == "Stable" and len(desc["members"]) == 2
    _, rows = coord.list_groups()
    assert rows == [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable", "group_type": "classic"}]
    assert coord.list_groups(states=["empty"])[1] == []
    # b dies: after its session timeout the group rebalances without it.
    for _ in range(6):
        clock.now += 2000
        coord.heartbeat(group_id="g", member_id=a, group_instance_id=None, generation_id=gen)
        coord.fire_timers()
    assert coord.groups["g"].state.value == "PreparingRebalance" and not coord.groups["g"].has(b)
    r = await coord.join_group(**join_kwargs(member_id=a))
    assert r.generation_id == gen + 1 and [m.member_id for m in r.members] == [a]


async def test_leave_group_results():
    coord, _, _ = await started()
    (a, b), _ = await stable_group(coord)
    top, errors = coord.leave_group(group_id="g", members=[(a, None, "done"), ("x", None, None)])
    assert top == E.NONE and errors == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert coord.leave_group(group_id="missing", members=[(a, None, None)]) == (E.NONE, [E.UNKNOWN_MEMBER_ID])


async def test_shutdown_answers_parked_joins():
    coord, _, _ = await started()
    r = await coord.join_group(**join_kwargs())
    (a, b), gen = await stable_group(coord, group="h")
    parked = asyncio.ensure_future(coord.join_group(**join_kwargs(group="h", member_id=a)))
    await asyncio.sleep(0)
    assert not parked.done()
    await coord.stop()
    assert (await parked).error == E.NOT_COORDINATOR


# --- commits ----------------------------------------------------------------------------------

async def test_simple_consumer_commit_and_fetch():
    coord, _, _ = await started()
    assert await commit(coord, "simple", [("t1", 0, 10), ("t1", 1, 20), ("nope", 0, 1), ("t2", 5, 1)]) == \
        [E.NONE, E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_OR_PARTITION]
    assert fetched(coord, "simple", [("t1", 0), ("t1", 1), ("t1", 2), ("zzz", 0)]) == \
        {("t1", 0): 10, ("t1", 1): 20, ("t1", 2): -1, ("zzz", 0): -1}
    assert fetched(coord, "simple") == {("t1", 0): 10, ("t1", 1): 20}
    assert fetched(coord, "never") == {}
    assert await commit(coord, "other-gen", [("t1", 0, 1)], gen=3) == [E.ILLEGAL_GENERATION]


async def test_metadata_too_large_and_commit_rules_in_group():
    coord, _, _ = await started(**{"offset.metadata.max.bytes": "4"})
    errors = await coord.commit_offsets(group_id="s", member_id="", group_instance_id=None, generation_id=-1,
                                        offsets=[CommitRequest("t1", 0, 1, metadata="12345"),
                                                 CommitRequest("t1", 1, 1, metadata="1234")])
    assert errors == [E.OFFSET_METADATA_TOO_LARGE, E.NONE]
    (a, b), gen = await stable_group(coord)
    assert await commit(coord, "g", [("t1", 0, 1)]) == [E.UNKNOWN_MEMBER_ID]
    assert await commit(coord, "g", [("t1", 0, 1)], member=a, gen=gen + 1) == [E.ILLEGAL_GENERATION]
    assert await commit(coord, "g", [("t1", 0, 7)], member=a, gen=gen) == [E.NONE]
    assert fetched(coord, "g", [("t1", 0)]) == {("t1", 0): 7}


async def test_storage_failure_answers_coordinator_not_available():
    coord, log, _ = await started()
    log.fail_next_append = OSError("disk gone")
    assert await commit(coord, "s", [("t1", 0, 3)]) == [E.COORDINATOR_NOT_AVAILABLE]
    assert fetched(coord, "s") == {}


async def test_acknowledged_commits_survive_a_crash_and_groups_reload():
    coord, log, clock = await started()
    (a, b), gen = await stable_group(coord)
    truth = {}
    for i in range(50):
        p = i % 4
        assert await commit(coord, "g", [("t1", p, 100 + i)], member=a, gen=gen) == [E.NONE]
        truth[("t1", p)] = 100 + i
    assert await commit(coord, "simple", [("t2", 1, 9)]) == [E.NONE]
    # An append that was never made durable (the broker died before the fsync):
    coord.store.commit("g", {("t1", 0): type(coord.store.offsets["g"][("t1", 0)])(999_999)}, clock.now)
    log.crash()
    coord2, _, _ = await started(log=log, clock=clock)
    assert fetched(coord2, "g") == truth
    assert fetched(coord2, "simple") == {("t2", 1): 9}
    g = coord2.groups["g"]
    assert g.state.value == "Stable" and g.generation_id == gen and set(g.members) == {a, b}
    # The members carry on with the same ids and generation: no rebalance needed.
    assert coord2.heartbeat(group_id="g", member_id=b, group_instance_id=None, generation_id=gen) == E.NONE
    reply = await coord2.sync_group(group_id="g", generation_id=gen, member_id=b, group_instance_id=None,
                                    protocol_type=None, protocol_name=None, assignments=[])
    assert reply.error == E.NONE and reply.assignment == b.encode()


async def test_snapshot_keeps_the_log_bounded_and_replay_equal():
    coord, log, clock = await started(snapshot_min=200)
    truth = {}
    for i in range(3000):
        group = f"g{i % 7}"
        tp = ("t1", i % 4)
        assert await commit(coord, group, [(tp[0], tp[1], i)]) == [E.NONE]
        truth.setdefault(group, {})[tp] = i
        await asyncio.sleep(0)
        assert log.record_count() <= 200 + 2 * 28 + 1
    await asyncio.sleep(0)
    assert coord.store.snapshots >= 10
    assert log.log_start_offset > 0
    coord2, _, _ = await started(log=log, clock=clock)
    for group, offs in truth.items():
        assert fetched(coord2, group) == offs


# --- admin ----------------------------------------------------------------------------------------

async def test_delete_groups():
    coord, log, clock = await started()
    await commit(coord, "empty", [("t1", 0, 1)])
    (a, b), _ = await stable_group(coord)
    results = await coord.delete_groups(["empty", "g", "missing", None])
    assert results == [E.NONE, E.NON_EMPTY_GROUP, E.GROUP_ID_NOT_FOUND, E.INVALID_GROUP_ID]
    assert "empty" not in coord.groups and fetched(coord, "empty") == {}
    coord2, _, _ = await started(log=log, clock=clock)
    assert "empty" not in coord2.groups and "g" in coord2.groups


async def test_offset_delete_rules():
    coord, _, _ = await started()
    await commit(coord, "s", [("t1", 0, 1), ("t2", 0, 2)])
    assert await coord.delete_offsets(group_id="s", partitions=[("t1", 0), ("nope", 0)]) == \
        (E.NONE, [E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION])
    assert fetched(coord, "s") == {("t2", 0): 2}
    assert (await coord.delete_offsets(group_id="missing", partitions=[]))[0] == E.GROUP_ID_NOT_FOUND
    (a, b), gen = await stable_group(coord, topics=("t1",))
    await commit(coord, "g", [("t1", 0, 5), ("t2", 0, 6)], member=a, gen=gen)
    assert await coord.delete_offsets(group_id="g", partitions=[("t1", 0), ("t2", 0)]) == \
        (E.NONE, [E.GROUP_SUBSCRIBED_TO_TOPIC, E.NONE])
    assert fetched(coord, "g") == {("t1", 0): 5}


# --- expiry ---------------------------------------------------------------------------------------

async def test_empty_group_offsets_expire_from_when_it_became_empty():
    coord, log, clock = await started()
    (a, b), gen = await stable_group(coord)
    await commit(coord, "g", [("t1", 0, 5)], member=a, gen=gen)
    clock.now += 50 * 60_000
    coord.leave_group(group_id="g", members=[(a, None, None), (b, None, None)])
    assert coord.groups["g"].state.value == "Empty"
    clock.now += 59 * 60_000  # 109 min after the commit, 59 min after the group emptied
    assert await coord.expire_offsets() == 0
    clock.now += 60_000
    assert await coord.expire_offsets() == 1
    assert "g" not in coord.groups  # Empty without offsets: Dead
    coord2, _, _ = await started(log=log, clock=clock)
    assert "g" not in coord2.groups


async def test_simple_group_offsets_expire_per_commit_and_explicit_retention():
    coord, _, clock = await started()
    await commit(coord, "s", [("t1", 0, 1)])
    clock.now += 30 * 60_000
    await commit(coord, "s", [("t1", 1, 2)])
    await commit(coord, "s", [("t2", 0, 3)], retention_time_ms=1000)
    clock.now += 1000
    assert await coord.expire_offsets() == 1  # explicit retention
    clock.now += 30 * 60_000
    assert await coord.expire_offsets() == 1
    assert fetched(coord, "s") == {("t1", 1): 2}
    clock.now += 30 * 60_000
    assert await coord.expire_offsets() == 1 and "s" not in coord.groups


async def test_stable_consumer_group_expires_only_unsubscribed_topics():
    coord, _, clock = await started()
    (a, b), gen = await stable_group(coord, topics=("t1",))
    await commit(coord, "g", [("t1", 0, 5), ("t2", 0, 6)], member=a, gen=gen)
    for _ in range(61):
        clock.now += 60_000
        coord.heartbeat(group_id="g", member_id=a, group_instance_id=None, generation_id=gen)
        coord.heartbeat(group_id="g", member_id=b, group_instance_id=None, generation_id=gen)
        coord.fire_timers()
    assert await coord.expire_offsets() == 1
    assert fetched(coord, "g") == {("t1", 0): 5}


# --- consumed retention input ---------------------------------------------------------------------

async def test_consumed_upto_rules():
    coord, _, _ = await started()
    assert coord.consumed_upto("t1", 0, 0).offset is None  # nobody ever consumed
    await commit(coord, "fast", [("t1", 0, 500), ("t1", 1, 40)])
    await commit(coord, "slow", [("t1", 0, 120)])
    got = coord.consumed_upto("t1", 0, 0)
    assert (got.offset, got.holder_group) == (120, "slow")
    assert coord.consumed_upto("t1", 1, 0).offset == 40
    assert coord.consumed_upto("t1", 2, 0).offset is None
    # A live subscriber without a commit holds everything: it counts as the log start offset.
    await stable_group(coord, topics=("t1",))
    got = coord.consumed_upto("t1", 2, 33)
    assert (got.offset, got.holder_group) == (33, "g")
    assert coord.consumed_upto("t1", 0, 7).offset == 7
    assert coord.consumed_upto("t2", 0, 0).offset is None
    # The subscribers leave: only commits count again.
    ids = list(coord.groups["g"].members)
    coord.leave_group(group_id="g", members=[(m, None, None) for m in ids])
    assert coord.consumed_upto("t1", 2, 33).offset is None
    assert coord.consumed_upto("t1", 0, 7).offset == 120
    await commit(coord, "slow", [("t1", 0, 900)])
    got = coord.consumed_upto("t1", 0, 0)
    assert (got.offset, got.holder_group) == (500, "fast")


async def test_consumed_upto_unknown_subscription_skips():
    coord, _, _ = await started()
    await commit(coord, "s", [("t1", 0, 10)])
    r = await coord.join_group(**{**join_kwargs(group="weird"), "protocols": [("range", b"\x01")]})
    fut = asyncio.ensure_future(coord.join_group(**{**join_kwargs(group="weird", member_id=r.member_id),
                                                    "protocols": [("range", b"\x01")]}))
    await asyncio.sleep(0)
    coord.fire_timers()
    await fut
    assert coord.consumed_upto("t1", 0, 0).offset is None


async def test_offset_delete_on_a_consumer_protocol_group():
    """Kafka's ConsumerGroup rule for OffsetDelete: allowed in any state, except per partition for a
    topic its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC); an empty group deletes anything."""
    import uuid

    from sundial.broker.groups.modern.requests import HeartbeatRequest

    view = {name: (uuid.UUID(int=i + 1), n) for i, (name, n) in enumerate(sorted(TOPICS.items()))}
    clock = ManualClock()
    coord = GroupCoordinator(BrokerConfig({"group.initial.rebalance.delay.ms": "0"}), None, now_ms=clock,
                             store=OffsetStore(MemoryOffsetsLog()), run_timers=False, topic_partitions=TOPICS.get,
                             topic_view=lambda: view)
    await coord.start()
    joined = await coord.consumer_heartbeat(HeartbeatRequest(
        "cg", "m1", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=["t1"], topic_partitions={}),
        client_id="c", client_host="/h")
    assert await coord.commit_offsets(group_id="cg", member_id="m1", group_instance_id=None,
                                      generation_id=joined.member_epoch,
                                      offsets=[CommitRequest("t1", 0, 5), CommitRequest("t2", 1, 7)]) == [E.NONE] * 2
    top, errors = await coord.delete_offsets(group_id="cg", partitions=[("t1", 0), ("t2", 1)])
    assert (top, errors) == (E.NONE, [E.GROUP_SUBSCRIBED_TO_TOPIC, E.NONE])
    assert fetched(coord, "cg") == {("t1", 0): 5}
    await coord.consumer_heartbeat(HeartbeatRequest("cg", "m1", -1), client_id="c", client_host="/h")  # leaves
    assert await coord.delete_offsets(group_id="cg", partitions=[("t1", 0)]) == (E.NONE, [E.NONE])
    assert fetched(coord, "cg") == {}
    await coord.stop()
