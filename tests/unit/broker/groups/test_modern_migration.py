"""Online migration between the classic and the consumer protocol, on the state machine: Kafka's
``GroupMetadataManagerTest`` scenarios (upgrade on a ConsumerGroupHeartbeat join, classic members
joining, syncing, heartbeating and leaving a consumer group, downgrade when the last
consumer-protocol member leaves or is fenced, the migration policy)."""

from __future__ import annotations

import struct

import pytest

from sundial.broker.groups.consumer_protocol import decode_assignment, encode_assignment
from sundial.broker.groups.modern.classic import ClassicJoinRequest
from sundial.broker.groups.modern.member import MemberState
from sundial.broker.groups.modern.migration import ClassicGroupImage, ClassicMember
from sundial.broker.groups.modern.requests import HeartbeatRequest
from sundial.broker.groups.modern.settings import ConsumerGroupSettings
from sundial.protocol.errors import ErrorCode as E

from support.modern_support import Harness

CLASSIC_SESSION_MS = 10_000
CLASSIC_REBALANCE_MS = 30_000


def subscription(topics, owned=None, version=1) -> bytes:
    """A ConsumerProtocolSubscription (v0: topics and user data; v1 adds owned partitions)."""
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">i", -1)
    if version >= 1:
        owned = owned or {}
        out += struct.pack(">i", len(owned))
        for t, parts in owned.items():
            out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(parts))
            out += b"".join(struct.pack(">i", p) for p in parts)
    return out


def classic_image(group_id="g", generation=10, members=(("c1", {"foo": [0, 1, 2]}), ("c2", {"foo": [3, 4, 5]})),
                  protocol_type="consumer", protocol="range") -> ClassicGroupImage:
    return ClassicGroupImage(group_id, generation, protocol_type, protocol, tuple(
        ClassicMember(mid, None, "client", "/127.0.0.1", CLASSIC_REBALANCE_MS, CLASSIC_SESSION_MS,
                      ((protocol, subscription(["foo"])),), encode_assignment(parts))
        for mid, parts in members))


def join_classic(h: Harness, member_id, owned=None, *, group_id="g", protocols=("range",), instance_id=None,
                 protocol_type="consumer", version=1):
    request = ClassicJoinRequest(group_id, member_id, instance_id, CLASSIC_SESSION_MS, CLASSIC_REBALANCE_MS,
                                 protocol_type, [(p, subscription(["foo"], owned, version)) for p in protocols])
    result, records = h.manager.classic_join(request, h.now, client_id="client", client_host="/127.0.0.1")
    h.log += records
    return result


def sync(h: Harness, member_id, generation, group_id="g"):
    return decode_assignment(h.manager.classic_sync(group_id, member_id, None, generation, "consumer", None, h.now))


def held(h: Harness, group_id="g") -> dict:
    """Partition → members holding it (assigned or pending revocation)."""
    return h.manager.group(group_id).holders()


def upgraded(settings=None) -> Harness:
    h = Harness({"foo": 6}, settings=settings)
    result, records = h.manager.heartbeat(
        HeartbeatRequest("g", "new", 0, rebalance_timeout_ms=5000, subscribed_topic_names=["foo"], topic_partitions={}),
        h.now, client_id="client", client_host="/127.0.0.1", classic=classic_image())
    h.log += records
    h.new_result = result
    return h


def test_upgrade_converts_classic_members_then_the_new_member_joins():
    h = upgraded()
    group = h.manager.group("g")
    assert set(group.members) == {"c1", "c2", "new"}
    c1 = group.members["c1"]
    assert c1.uses_classic_protocol and c1.classic.session_timeout_ms == CLASSIC_SESSION_MS
    assert c1.member_epoch == 10 and h.named(c1.assigned) == {"foo": {0, 1, 2}}
    assert h.named(group.members["c2"].assigned) == {"foo": {3, 4, 5}}
    # The new member's join bumped the epoch; everything is still held by the classic members.
    assert group.group_epoch == 11 and h.new_result.member_epoch == 11
    assert h.named(h.new_result.assignment) == {}
    # Records: the conversion (member subscriptions, epoch 10, targets, target epoch, assignments) first.
    assert h.log[0].key.member_id == "c1" and h.log[0].value.classic_member_metadata is not None
    assert h.replayed().persisted_state() == h.manager.persisted_state()
    assert all(len(owners) == 1 for owners in held(h).values())
    types = {m.member_id: m.member_type for m in h.manager.describe("g").members}
    assert types == {"c1": 0, "c2": 0, "new": 1}          # ConsumerGroupDescribe v1 MemberType


def test_classic_members_rejoin_and_the_partitions_move_without_double_ownership():
    h = upgraded()
    assert h.manager.classic_heartbeat("g", "c1", None, 10, h.now) == E.REBALANCE_IN_PROGRESS
    # An eager member (range) gave up everything before rejoining.
    r1 = join_classic(h, "c1", owned={})
    assert r1.error == E.NONE and r1.generation_id == 11 and r1.protocol_name == "range"
    r2 = join_classic(h, "c2", owned={})
    for mid, r in (("c1", r1), ("c2", r2)):
        assigned = sync(h, mid, r.generation_id)
        assert sum(len(p) for p in assigned.values()) == 2
        assert h.manager.classic_heartbeat("g", mid, None, r.generation_id, h.now) == E.NONE
    new = h.hb("g", "new", 11, owned={})
    assert sum(len(p) for p in h.named(new.assignment).values()) == 2
    owners = held(h)
    assert len(owners) == 6 and all(len(o) == 1 for o in owners.values())
    assert h.replayed().persisted_state() == h.manager.persisted_state()


def test_cooperative_classic_member_revokes_through_a_rejoin():
    h = upgraded()
    r1 = join_classic(h, "c1", owned={"foo": [0, 1, 2]}, protocols=("cooperative-sticky", "range"))
    member = h.member("g", "c1")
    assert member.state is MemberState.UNREVOKED_PARTITIONS and r1.generation_id == 10
    kept = sync(h, "c1", 10)
    assert sum(len(p) for p in kept.values()) == 2       # told to revoke one partition
    assert h.manager.classic_heartbeat("g", "c1", None, 10, h.now) == E.REBALANCE_IN_PROGRESS
    r1 = join_classic(h, "c1", owned=kept, protocols=("cooperative-sticky", "range"))
    assert r1.generation_id == 11 and h.member("g", "c1").state is not MemberState.UNREVOKED_PARTITIONS


def test_classic_requests_checked_as_kafka_checks_them():
    h = upgraded()
    assert join_classic(h, "").error == E.MEMBER_ID_REQUIRED
    h.refused(E.INCONSISTENT_GROUP_PROTOCOL, join_classic, h, "x", protocols=("roundrobin",))
    h.refused(E.INCONSISTENT_GROUP_PROTOCOL, join_classic, h, "x", protocol_type="connect")
    h.refused(E.ILLEGAL_GENERATION, h.manager.classic_heartbeat, "g", "c1", None, 9, h.now)
    h.refused(E.UNKNOWN_MEMBER_ID, h.manager.classic_heartbeat, "g", "nobody", None, 10, h.now)
    h.refused(E.UNKNOWN_MEMBER_ID, h.manager.classic_heartbeat, "g", "new", None, 11, h.now)  # consumer protocol
    h.refused(E.REBALANCE_IN_PROGRESS, h.manager.classic_sync, "g", "c1", None, 10, "consumer", "range", h.now)
    h.refused(E.INCONSISTENT_GROUP_PROTOCOL, h.manager.classic_sync, "g", "c1", None, 10, "consumer", "other", h.now)
    # A classic member commits with its generation, whatever the OffsetCommit version.
    h.manager.validate_offset_commit("g", "c1", 10, api_version=2)
    h.refused(E.ILLEGAL_GENERATION, h.manager.validate_offset_commit, "g", "c1", 9, api_version=2)


def test_classic_sessions_and_join_deadlines_fence_classic_members():
    h = upgraded()
    h.hb("g", "new", 11, owned={})
    assert h.manager.classic_heartbeat("g", "c1", None, 10, h.now) == E.REBALANCE_IN_PROGRESS
    h.advance(CLASSIC_SESSION_MS - 1)
    h.manager.classic_heartbeat("g", "c1", None, 10, h.now)
    h.hb("g", "new", 11, owned={})
    h.advance(2)
    assert "c2" not in h.manager.group("g").members       # its classic session (10 s) passed
    assert "c1" in h.manager.group("g").members
    h.advance(CLASSIC_REBALANCE_MS)                       # c1 never rejoined within its rebalance timeout
    assert "c1" not in h.manager.group("g").members


def test_classic_leave_bumps_the_epoch():
    h = upgraded()
    answers, records = h.manager.classic_leave("g", [("c1", None), ("new", None), ("zzz", None)], h.now)
    h.log += records
    assert [a[2] for a in answers] == [E.NONE, E.UNKNOWN_MEMBER_ID, E.UNKNOWN_MEMBER_ID]
    assert set(h.manager.group("g").members) == {"c2", "new"} and h.manager.group("g").group_epoch == 12


@pytest.mark.parametrize("how", ["leave", "session"])
def test_downgrade_when_the_last_consumer_protocol_member_goes(how):
    h = upgraded()
    for mid in ("c1", "c2"):
        r = join_classic(h, mid, owned={})
        sync(h, mid, r.generation_id)
    if how == "leave":
        h.hb("g", "new", -1)
    else:
        while h.manager.group_type("g") is not None:
            for mid in ("c1", "c2"):
                h.manager.classic_heartbeat("g", mid, None, 11, h.now)
            h.advance(5_000)
    assert h.manager.group_type("g") is None
    ((image, rebalance),) = h.manager.take_downgrades()
    assert rebalance and image.protocol_type == "consumer" and image.protocol_name == "range"
    assert image.generation_id == 11 and {m.member_id for m in image.members} == {"c1", "c2"}
    parts = [p for m in image.members for p in decode_assignment(m.assignment).get("foo", [])]
    # Each member's target assignment, as in Kafka; the rebalance that follows hands out the rest.
    assert len(parts) == len(set(parts)) == 4
    assert h.replayed().group_ids() == []


@pytest.mark.parametrize("settings,upgrade,downgrade", [
    (ConsumerGroupSettings(upgrade_enabled=False, downgrade_enabled=False), False, False),
    (ConsumerGroupSettings(upgrade_enabled=False), False, True),
    (ConsumerGroupSettings(downgrade_enabled=False), True, False),
    (ConsumerGroupSettings(classic_max_size=1), True, False),
])
def test_migration_policy(settings, upgrade, downgrade):
    if not upgrade:
        h = Harness({"foo": 6}, settings=settings)
        h.refused(E.GROUP_ID_NOT_FOUND, h.manager.heartbeat, HeartbeatRequest(
            "g", "new", 0, rebalance_timeout_ms=5000, subscribed_topic_names=["foo"], topic_partitions={}),
            h.now, client_id="c", client_host="h", classic=classic_image())
        return
    h = upgraded(settings)
    h.hb("g", "new", -1)
    assert (h.manager.group_type("g") is None) == downgrade
    assert bool(h.manager.take_downgrades()) == downgrade


def test_upgrade_refused_for_another_protocol_type_or_too_many_members():
    request = HeartbeatRequest("g", "new", 0, rebalance_timeout_ms=5000, subscribed_topic_names=["foo"],
                               topic_partitions={})
    h = Harness({"foo": 6})
    h.refused(E.GROUP_ID_NOT_FOUND, h.manager.heartbeat, request, 0, client_id="c", client_host="h",
              classic=classic_image(protocol_type="connect"))
    h = Harness({"foo": 6}, settings=ConsumerGroupSettings(max_size=1))
    h.refused(E.GROUP_ID_NOT_FOUND, h.manager.heartbeat, request, 0, client_id="c", client_host="h",
              classic=classic_image())
    h = Harness({"foo": 6})
    h.refused(E.GROUP_ID_NOT_FOUND, h.manager.heartbeat, HeartbeatRequest("g", "new", 3), 0, client_id="c",
              client_host="h", classic=classic_image())


# -- through the GroupCoordinator: routing, the classic group's records, restarts ---------------------

def _coordinator(log=None):
    import itertools
    import uuid as _uuid

    from sundial.broker.groups.coordinator import GroupCoordinator
    from sundial.broker.groups.offsets import MemoryOffsetsLog, OffsetStore
    from sundial.config import BrokerConfig

    config = BrokerConfig({"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "100"})
    log = log or MemoryOffsetsLog()
    clock = [1_700_000_000_000]
    ids = itertools.count(1)
    topics = {"foo": (_uuid.uuid5(_uuid.NAMESPACE_DNS, "foo"), 4)}
    coord = GroupCoordinator(config, None, now_ms=lambda: clock[0], store=OffsetStore(log), run_timers=False,
                             topic_partitions=lambda t: 4 if t == "foo" else None, topic_view=lambda: topics,
                             new_member_id=lambda client, inst: f"{inst or client}-{next(ids)}")
    return coord, log


async def _classic_group(coord):
    """A Stable classic group of two range consumers of foo: c0 has 0-1, c1 has 2-3."""
    import asyncio

    def join(member_id, client):
        return coord.join_group(group_id="g", member_id=member_id, group_instance_id=None, client_id=client,
                                client_host="/127.0.0.1", session_timeout_ms=10_000, rebalance_timeout_ms=30_000,
                                protocol_type="consumer", protocols=[("range", subscription(["foo"]))],
                                require_known_member_id=True)
    ids = [(await join("", f"c{i}")).member_id for i in range(2)]
    joins = [asyncio.ensure_future(join(m, "c")) for m in ids]
    await asyncio.sleep(0)
    coord.fire_timers()
    replies = await asyncio.gather(*joins)
    gen, leader = replies[0].generation_id, replies[0].leader_id
    assignments = [(ids[0], encode_assignment({"foo": [0, 1]})), (ids[1], encode_assignment({"foo": [2, 3]}))]
    syncs = await asyncio.gather(*(coord.sync_group(group_id="g", generation_id=gen, member_id=m,
                                                    group_instance_id=None, protocol_type="consumer",
                                                    protocol_name="range",
                                                    assignments=assignments if m == leader else [])
                                   for m in ids))
    assert all(s.error == E.NONE for s in syncs)
    return ids, gen


@pytest.mark.asyncio
async def test_coordinator_upgrade_classic_requests_restart_and_downgrade():
    coord, log = _coordinator()
    await coord.start()
    (c0, c1), gen = await _classic_group(coord)
    joined = await coord.consumer_heartbeat(HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=5000,
                                                             subscribed_topic_names=["foo"], topic_partitions={}),
                                            client_id="m", client_host="/127.0.0.1")
    assert joined.member_epoch == gen + 1
    assert "g" not in coord.groups and coord.consumer.is_consumer_group("g")
    assert "g" not in coord.store.group_values                  # the classic group's record is tombstoned
    assert coord.heartbeat(group_id="g", member_id=c0, group_instance_id=None, generation_id=gen) \
        == E.REBALANCE_IN_PROGRESS
    await coord.stop()

    # a restart finds the consumer group with its classic members (their classic metadata replayed)
    coord, log = _coordinator(log)
    await coord.start()
    assert coord.consumer.is_consumer_group("g") and "g" not in coord.groups
    r = await coord.join_group(group_id="g", member_id=c0, group_instance_id=None, client_id="c",
                               client_host="/127.0.0.1", session_timeout_ms=10_000, rebalance_timeout_ms=30_000,
                               protocol_type="consumer", protocols=[("range", subscription(["foo"]))],
                               require_known_member_id=True)
    assert (r.error, r.generation_id, r.leader_id, r.protocol_name) == (E.NONE, gen + 1, "", "range")
    s = await coord.sync_group(group_id="g", generation_id=r.generation_id, member_id=c0, group_instance_id=None,
                               protocol_type="consumer", protocol_name="range", assignments=[])
    assert s.error == E.NONE and decode_assignment(s.assignment)
    assert await coord.commit_offsets(group_id="g", member_id=c0, group_instance_id=None, generation_id=gen + 1,
                                      offsets=[], api_version=2) == []

    # the consumer-protocol member leaves: the group is a classic group again, rebalancing
    await coord.consumer_heartbeat(HeartbeatRequest("g", "m", -1), client_id="m", client_host="/127.0.0.1")
    assert not coord.consumer.is_consumer_group("g")
    group = coord.groups["g"]
    assert set(group.members) == {c0, c1} and group.state.value == "PreparingRebalance"
    assert coord.store.group_values["g"].generation == gen + 1
    await coord.stop()
    coord, log = _coordinator(log)
    await coord.start()
    assert set(coord.groups["g"].members) == {c0, c1} and not coord.consumer.is_consumer_group("g")
    await coord.stop()
