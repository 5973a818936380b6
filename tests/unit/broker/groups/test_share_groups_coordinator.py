"""Share groups inside the group coordinator, over an in-memory offsets log and a fake clock:
durable heartbeats, replay after a crash, the session timer, departures, ListGroups/DescribeGroups/
DeleteGroups and JoinGroup/ConsumerGroupHeartbeat on a share group id, and the settings the fetch
side reads."""

from __future__ import annotations

import uuid

import pytest
from support.unit_helpers import ManualClock

from sundial.broker.groups.coordinator import GroupCoordinator
from sundial.broker.groups.modern.errors import GroupError
from sundial.broker.groups.modern.requests import HeartbeatRequest
from sundial.broker.groups.offsets import MemoryOffsetsLog, OffsetStore
from sundial.broker.groups.share.manager import ShareHeartbeatRequest
from sundial.config import BrokerConfig
from sundial.config.group import EARLIEST, resolve_group_config
from sundial.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.asyncio

TOPICS = {"q": (uuid.uuid5(uuid.NAMESPACE_DNS, "q"), 2), "r": (uuid.uuid5(uuid.NAMESPACE_DNS, "r"), 1)}


class GroupConfigs:
    """The GROUP config resource as the coordinator reads it."""

    def __init__(self, coordinator_config) -> None:
        self.coordinator = coordinator_config
        self.overrides: dict[str, dict[str, str]] = {}

    def config(self, group_id: str):
        return resolve_group_config(self.overrides.get(group_id, {}), self.coordinator)[0]

    def consumer_settings(self, group_id: str):
        c = self.config(group_id)
        return c.consumer_session_timeout_ms, c.consumer_heartbeat_interval_ms

    consumer_session_timeout_ms = lambda self, g: self.config(g).consumer_session_timeout_ms  # noqa: E731
    consumer_heartbeat_interval_ms = lambda self, g: self.config(g).consumer_heartbeat_interval_ms  # noqa: E731


async def started(log=None, clock=None, configs=None, snapshot_min=10_000, **overrides):
    config = BrokerConfig({"group.initial.rebalance.delay.ms": "0", **overrides})
    clock = clock or ManualClock()
    log = log or MemoryOffsetsLog()
    configs = configs or GroupConfigs(config.group_coordinator)
    coord = GroupCoordinator(config, None, now_ms=clock, store=OffsetStore(log, snapshot_min_records=snapshot_min),
                             run_timers=False, topic_view=lambda: TOPICS, group_configs=configs)
    await coord.start()
    return coord, log, clock, configs


def hb(coord, member, epoch, topics=None, group="sg"):
    return coord.share.heartbeat(ShareHeartbeatRequest(group, member, epoch, None, topics),
                                 client_id="cid", client_host="/10.0.0.1")


async def test_join_is_durable_and_replayed_after_a_crash():
    coord, log, clock, configs = await started()
    r1 = await hb(coord, "m1", 0, ("q",))
    r2 = await hb(coord, "m2", 0, ("q", "r"))
    assert r1.member_epoch == 1 and r2.member_epoch == 2
    assert coord.share.member_assignment("sg", "m2") is not None
    log.crash()                                  # drops what was not made durable: nothing here
    coord2, _, _, _ = await started(log=log, clock=clock, configs=configs)
    assert coord2.share.describe("sg") == coord.share.describe("sg")
    assert coord2.share.member_assignment("sg", "m1") == coord.share.member_assignment("sg", "m1")
    r1b = await hb(coord2, "m1", 1)              # the member carries on with its epoch
    assert r1b.member_epoch == 2


async def test_member_assignment_names_topics_and_covers_every_partition():
    coord, *_ = await started()
    await hb(coord, "m1", 0, ("q", "r"))
    await hb(coord, "m2", 0, ("q", "r"))
    await hb(coord, "m1", 1)
    a1, a2 = coord.share.member_assignment("sg", "m1"), coord.share.member_assignment("sg", "m2")
    assert a1 | a2 == {("q", 0), ("q", 1), ("r", 0)}
    assert coord.share.member_assignment("sg", "nobody") is None
    assert coord.share.member_assignment("other", "m1") is None
    assert coord.share.subscribed_topics("sg") == {"q", "r"}
    assert [m.member_id for m in coord.share.members("sg")] == ["m1", "m2"]
    assert not coord.share.is_empty("sg") and coord.share.is_empty("nope")
    assert coord.share.group_ids() == ["sg"] and coord.share.is_share_group("sg")
    assert "sg" in coord.group_ids()


async def test_session_timeout_fences_and_reports_the_departure():
    coord, log, clock, _ = await started()
    gone = []
    coord.share.add_departure_listener(lambda g, m: gone.append((g, m)))
    await hb(coord, "m1", 0, ("q",))
    await hb(coord, "m2", 0, ("q",))
    clock.now += 45_000 - 1
    await hb(coord, "m2", 2)
    assert coord.share.fire_timers() == [] and gone == []
    clock.now += 1
    assert coord.share.fire_timers()
    assert gone == [("sg", "m1")] and coord.share.fenced_members == 1
    await hb(coord, "m2", 2, None)
    r = await hb(coord, "m2", 3, None)
    assert r.member_epoch == 3
    await hb(coord, "m2", -1)
    assert gone == [("sg", "m1"), ("sg", "m2")]


async def test_session_timeout_comes_from_the_group_config():
    coord, log, clock, configs = await started()
    configs.overrides["sg"] = {"share.session.timeout.ms": "50000", "share.heartbeat.interval.ms": "6000",
                               "share.auto.offset.reset": EARLIEST, "share.isolation.level": "read_committed",
                               "share.record.lock.duration.ms": "20000"}
    r = await hb(coord, "m1", 0, ("q",))
    assert r.heartbeat_interval_ms == 6000
    clock.now += 45_000
    assert coord.share.fire_timers() == []
    clock.now += 5_000
    assert coord.share.fire_timers()
    s = coord.share.settings("sg")
    assert (s.record_lock_duration_ms, s.delivery_count_limit, s.partition_max_record_locks) == (20000, 5, 2000)
    assert s.auto_offset_reset.strategy == EARLIEST and s.read_committed
    d = coord.share.settings("other")
    assert (d.record_lock_duration_ms, d.auto_offset_reset.strategy, d.isolation_level) == (30000, "latest",
                                                                                          "read_uncommitted")


async def test_broker_share_keys_take_effect():
    coord, *_ = await started(**{"group.share.delivery.count.limit": "3", "group.share.max.size": "1",
                                 "group.share.partition.max.record.locks": "150",
                                 "group.share.record.lock.duration.ms": "16000"})
    s = coord.share.settings("sg")
    assert (s.delivery_count_limit, s.partition_max_record_locks, s.record_lock_duration_ms) == (3, 150, 16000)
    await hb(coord, "m1", 0, ("q",))
    with pytest.raises(GroupError) as info:
        await hb(coord, "m2", 0, ("q",))
    assert info.value.error_code == E.GROUP_MAX_SIZE_REACHED


async def test_list_describe_and_delete_groups():
    coord, log, clock, configs = await started()
    deleted = []
    coord.share.add_deletion_listener(deleted.append)
    await hb(coord, "m1", 0, ("q",))
    error, rows = coord.list_groups()
    assert error == E.NONE and rows == [{"group_id": "sg", "protocol_type": "share", "group_state": "Stable",
                                         "group_type": "share"}]
    assert coord.list_groups(types=["classic", "consumer"])[1] == []
    assert coord.list_groups(types=["share"], states=["empty"])[1] == []
    error, described = coord.describe_group("sg")
    assert error == E.GROUP_ID_NOT_FOUND and described["error_message"] == "Group sg is not a classic group."
    assert await coord.delete_groups(["sg"]) == [E.NON_EMPTY_GROUP]
    await hb(coord, "m1", -1)
    assert coord.list_groups(types=["share"], states=["Empty"])[1][0]["group_state"] == "Empty"
    assert await coord.delete_groups(["sg"]) == [E.NONE]
    assert deleted == ["sg"] and coord.list_groups()[1] == []
    assert await coord.delete_groups(["sg"]) == [E.GROUP_ID_NOT_FOUND]
    coord2, *_ = await started(log=log, clock=clock, configs=configs)
    assert coord2.share.group_ids() == [] and coord2.list_groups()[1] == []


async def test_other_protocols_on_a_share_group_id():
    coord, *_ = await started()
    await hb(coord, "m1", 0, ("q",))
    reply = await coord.join_group(group_id="sg", member_id="", group_instance_id=None, client_id="c",
                                   client_host="/h", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                                   protocol_type="consumer", protocols=[("range", b"")],
                                   require_known_member_id=True)
    assert reply.error == E.INCONSISTENT_GROUP_PROTOCOL
    with pytest.raises(GroupError) as info:
        await coord.consumer_heartbeat(HeartbeatRequest("sg", "c1", 0, subscribed_topic_names=("q",),
                                                        rebalance_timeout_ms=10_000, topic_partitions={}, version=1),
                                       client_id="c", client_host="/h")
    assert info.value.error_code == E.GROUP_ID_NOT_FOUND
    # and a consumer group's id is not a share group's
    await coord.consumer_heartbeat(HeartbeatRequest("cg", "c1", 0, subscribed_topic_names=("q",),
                                                    rebalance_timeout_ms=10_000, topic_partitions={}, version=1),
                                   client_id="c", client_host="/h")
    with pytest.raises(GroupError) as info:
        await hb(coord, "m1", 0, ("q",), group="cg")
    assert info.value.error_code == E.GROUP_ID_NOT_FOUND and info.value.message == "Group cg is not a share group."
    with pytest.raises(GroupError) as info:
        coord.share.describe("cg")
    assert info.value.error_code == E.GROUP_ID_NOT_FOUND


async def test_not_started_coordinator_is_not_available():
    config = BrokerConfig({})
    coord = GroupCoordinator(config, None, store=OffsetStore(MemoryOffsetsLog()), run_timers=False,
                             topic_view=lambda: TOPICS)
    with pytest.raises(GroupError) as info:
        await hb(coord, "m1", 0, ("q",))
    assert info.value.error_code == E.COORDINATOR_NOT_AVAILABLE


async def test_offset_apis_on_a_share_group_id_answer_group_id_not_found():
    from sundial.broker.groups.coordinator import CommitRequest
    coord, *_ = await started()
    await hb(coord, "m1", 0, ("q",))
    commit = await coord.commit_offsets(group_id="sg", member_id="", group_instance_id=None, generation_id=-1,
                                        offsets=[CommitRequest("q", 0, 5)])
    assert commit == [E.GROUP_ID_NOT_FOUND]
    txn = await coord.txn_commit_offsets(group_id="sg", producer_id=1, producer_epoch=0, member_id="",
                                         group_instance_id=None, generation_id=-1, offsets=[CommitRequest("q", 0, 5)])
    assert txn == [E.GROUP_ID_NOT_FOUND]
    assert coord.fetch_offsets(group_id="sg", partitions=None)[0] == E.GROUP_ID_NOT_FOUND
    assert (await coord.delete_offsets(group_id="sg", partitions=[("q", 0)]))[0] == E.GROUP_ID_NOT_FOUND
    assert "sg" not in coord.groups                 # no classic group was made under the share group's id


async def test_group_metrics_count_share_groups():
    from sundial.broker.metrics import GROUP_TYPE_STATES, group_rows
    coord, log, clock, _ = await started()
    assert GROUP_TYPE_STATES["share"] == ("Empty", "Stable")
    await hb(coord, "m1", 0, ("q",))
    await hb(coord, "m2", 0, ("q",))
    clock.now += 45_000
    await hb(coord, "m2", 2)
    coord.share.fire_timers()                       # m1 fenced
    rows = {(family, tuple(sorted(labels.items()))): n for family, labels, n in group_rows(coord)}
    assert rows[("groups", (("state", "Stable"), ("type", "share")))] == 1
    assert rows[("groups", (("state", "Empty"), ("type", "share")))] == 0
    assert rows[("rebalances", (("type", "share"),))] == 3     # two joins, one fencing
    assert rows[("fenced_members", (("type", "share"),))] == 1


async def test_ensure_group_makes_an_empty_share_group_that_survives_a_restart():
    coord, log, clock, configs = await started()
    await coord.share.ensure_group("altered-first")
    await coord.share.ensure_group("altered-first")           # idempotent: nothing more written
    assert coord.share.is_share_group("altered-first") and coord.share.is_empty("altered-first")
    assert coord.list_groups(types=["share"])[1] == [{"group_id": "altered-first", "protocol_type": "share",
                                                       "group_state": "Empty", "group_type": "share"}]
    r = await hb(coord, "m1", 0, ("q",), group="altered-first")
    assert r.member_epoch == 1
    await coord.consumer_heartbeat(HeartbeatRequest("cg", "c1", 0, subscribed_topic_names=("q",),
                                                    rebalance_timeout_ms=10_000, topic_partitions={}, version=1),
                                   client_id="c", client_host="/h")
    with pytest.raises(GroupError) as info:
        await coord.share.ensure_group("cg")
    assert info.value.error_code == E.GROUP_ID_NOT_FOUND
    coord2, *_ = await started(log=log, clock=clock, configs=configs)
    assert coord2.share.describe("altered-first").group_epoch == 1


async def test_snapshots_of_the_offsets_log_keep_share_groups_whole():
    """Churn until the offsets log is snapshotted several times; a restart rebuilds the same groups."""
    import asyncio
    coord, log, clock, configs = await started(snapshot_min=50)
    epochs: dict[tuple[str, str], int] = {}
    for i in range(300):
        group, member = f"sg{i % 3}", f"m{i % 5}"
        if (group, member) in epochs and i % 7 == 0:
            await hb(coord, member, -1, group=group)
            del epochs[(group, member)]
        else:
            r = await hb(coord, member, epochs.get((group, member), 0), ("q",) if i % 2 else ("q", "r"), group=group)
            epochs[(group, member)] = r.member_epoch
        await asyncio.sleep(0)
        assert log.record_count() <= 50 + 2 * coord.store.live_records() + 10
    await asyncio.sleep(0)
    assert coord.store.snapshots >= 3 and log.log_start_offset > 0
    coord2, *_ = await started(log=log, clock=clock, configs=configs)
    for group in ("sg0", "sg1", "sg2"):
        assert coord2.share.describe(group) == coord.share.describe(group)
    assert {(g, m.member_id) for g in coord2.share.group_ids() for m in coord2.share.members(g)} == set(epochs)
