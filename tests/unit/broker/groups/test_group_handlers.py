"""Group API handlers at every supported version, through the real codec both ways.

A request is encoded with the protocol package, decoded as the broker decodes it,
handled by ``broker.handlers.groups`` over a real coordinator (in-memory offsets log),
and the response is encoded and then decoded with kafka-python's classes; the test
reads the fields a client would read.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

import pytest
from support.unit_helpers import HandlerContext

from sundial.broker.groups.consumer_protocol import encode_subscription
from sundial.broker.groups.coordinator import GroupCoordinator
from sundial.broker.groups.offsets import MemoryOffsetsLog, OffsetStore
from sundial.broker.dispatch import Dispatcher
from sundial.config import BrokerConfig
from sundial.protocol.api_keys import ApiKey
from sundial.protocol.codec import decode_request, decode_response, encode_request, encode_response
from sundial.protocol.errors import ErrorCode as E
from sundial.protocol.header import parse_request_header

pytestmark = pytest.mark.asyncio

DISPATCH = Dispatcher()

TOPICS = {"t": 3}


@dataclass
class Endpoint:
    node_id: int
    host: str
    port: int


class FakeBroker:
    def __init__(self, coordinator) -> None:
        self.groups = coordinator

    def endpoint_for(self, listener_name):
        return Endpoint(7, "broker.example", 9999)


async def new_broker():
    ids = itertools.count(1)
    coord = GroupCoordinator(BrokerConfig({"group.initial.rebalance.delay.ms": "0",
                                           "group.min.session.timeout.ms": "10"}),
                             None, store=OffsetStore(MemoryOffsetsLog()), run_timers=False,
                             topic_partitions=TOPICS.get, new_member_id=lambda c, i: f"{i or c}-{next(ids)}")
    await coord.start()
    return FakeBroker(coord)


async def call(broker, api_key, version, request: dict):
    frame = encode_request(api_key, version, 42, "client-1", request)
    body = memoryview(frame)[4:]
    header = parse_request_header(body)
    decoded = decode_request(header, body)
    response = await DISPATCH.handlers[api_key](HandlerContext(broker, version), decoded)
    wire = b"".join(bytes(b) for b in encode_response(header, response))
    correlation_id, obj = decode_response(api_key, version, wire)
    assert correlation_id == 42
    return obj


def versions(api_key):
    lo, hi = DISPATCH.advertised[api_key]
    return range(lo, hi + 1)


def join_request(version, member_id="", topics=("t",), instance=None):
    req = {"group_id": "g", "session_timeout_ms": 6000, "rebalance_timeout_ms": 6000, "member_id": member_id,
           "protocol_type": "consumer",
           "protocols": [{"name": "range", "metadata": encode_subscription(list(topics))}]}
    if version >= 5:
        req["group_instance_id"] = instance
    return req


@pytest.mark.parametrize("version", versions(ApiKey.FIND_COORDINATOR))
async def test_find_coordinator(version):
    broker = await new_broker()
    if version >= 4:
        resp = await call(broker, ApiKey.FIND_COORDINATOR, version, {"key_type": 0, "coordinator_keys": ["a", "b"]})
        assert [(c.key, c.node_id, c.host, c.port, c.error_code) for c in resp.coordinators] == \
            [("a", 7, "broker.example", 9999, 0), ("b", 7, "broker.example", 9999, 0)]
    else:
        resp = await call(broker, ApiKey.FIND_COORDINATOR, version, {"key": "g"})
        assert (resp.error_code, resp.node_id, resp.host, resp.port) == (0, 7, "broker.example", 9999)
        if version >= 1:
            # Transaction keys go to the transaction coordinator (none in this fake broker);
            # unknown key types are refused.
            resp = await call(broker, ApiKey.FIND_COORDINATOR, version, {"key": "tx", "key_type": 1})
            assert resp.error_code == E.COORDINATOR_NOT_AVAILABLE and resp.node_id == -1
            resp = await call(broker, ApiKey.FIND_COORDINATOR, version, {"key": "x", "key_type": 5})
            assert resp.error_code == E.INVALID_REQUEST and resp.node_id == -1


@pytest.mark.parametrize("version", versions(ApiKey.JOIN_GROUP))
async def test_join_sync_heartbeat_leave(version):
    broker = await new_broker()
    pending = asyncio.ensure_future(call(broker, ApiKey.JOIN_GROUP, version, join_request(version)))
    if version >= 4:
        first = await pending
        assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id.startswith("client-1-")
        member_id = first.member_id
        pending = asyncio.ensure_future(call(broker, ApiKey.JOIN_GROUP, version, join_request(version, member_id)))
    await asyncio.sleep(0.01)
    broker.groups.fire_timers()
    joined = await pending
    assert joined.error_code == 0 and joined.generation_id == 1
    member_id = joined.member_id
    assert joined.leader == member_id and joined.protocol_name == "range"
    assert [m.member_id for m in joined.members] == [member_id]
    sync_version = min(version, 5)
    sync = {"group_id": "g", "generation_id": 1, "member_id": member_id,
            "assignments": [{"member_id": member_id, "assignment": b"\x00\x01assign"}]}
    if sync_version >= 5:
        sync.update(protocol_type="consumer", protocol_name="range")
    resp = await call(broker, ApiKey.SYNC_GROUP, sync_version, sync)
    assert resp.error_code == 0 and resp.assignment == b"\x00\x01assign"
    hb_version = min(version, 4)
    resp = await call(broker, ApiKey.HEARTBEAT, hb_version, {"group_id": "g", "generation_id": 1,
                                                              "member_id": member_id})
    assert resp.error_code == 0
    resp = await call(broker, ApiKey.HEARTBEAT, hb_version, {"group_id": "g", "generation_id": 5,
                                                              "member_id": member_id})
    assert resp.error_code == E.ILLEGAL_GENERATION
    # DescribeGroups shows the stable group with metadata and assignment.
    dg_version = min(version, max(versions(ApiKey.DESCRIBE_GROUPS)))
    resp = await call(broker, ApiKey.DESCRIBE_GROUPS, dg_version, {"groups": ["g", "nope"]})
    g, nope = resp.groups
    assert (g.group_state, g.protocol_type, g.protocol_data) == ("Stable", "consumer", "range")
    assert g.members[0].member_assignment == b"\x00\x01assign" and g.members[0].client_host == "/127.0.0.1"
    assert nope.group_state == "Dead"
    if dg_version >= 6:     # KIP-1043: an unknown group is GROUP_ID_NOT_FOUND with a message
        assert (nope.error_code, nope.error_message) == (E.GROUP_ID_NOT_FOUND, "Group nope not found.")
    else:
        assert nope.error_code == 0
    lv = min(version, 5)
    if lv >= 3:
        resp = await call(broker, ApiKey.LEAVE_GROUP, lv, {"group_id": "g", "members": [
            {"member_id": member_id}, {"member_id": "ghost"}]})
        assert resp.error_code == 0 and [m.error_code for m in resp.members] == [0, E.UNKNOWN_MEMBER_ID]
    else:
        resp = await call(broker, ApiKey.LEAVE_GROUP, lv, {"group_id": "g", "member_id": member_id})
        assert resp.error_code == 0
        resp = await call(broker, ApiKey.LEAVE_GROUP, lv, {"group_id": "g", "member_id": member_id})
        assert resp.error_code == E.UNKNOWN_MEMBER_ID
    assert broker.groups.groups["g"].state.value == "Empty"


async def test_join_errors_keep_field_shapes():
    broker = await new_broker()
    for version in versions(ApiKey.JOIN_GROUP):
        req = join_request(version, member_id="unknown")
        resp = await call(broker, ApiKey.JOIN_GROUP, version, req)
        assert resp.error_code == E.UNKNOWN_MEMBER_ID and resp.generation_id == -1 and resp.member_id == "unknown"
        req = {**join_request(version), "session_timeout_ms": 1}
        assert (await call(broker, ApiKey.JOIN_GROUP, version, req)).error_code == E.INVALID_SESSION_TIMEOUT


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_COMMIT))
async def test_offset_commit_and_fetch(version):
    broker = await new_broker()
    req = {"group_id": "s", "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 11, "committed_metadata": "meta"},
        {"partition_index": 9, "committed_offset": 1, "committed_metadata": None}]},
        {"name": "missing", "partitions": [{"partition_index": 0, "committed_offset": 1}]}]}
    if version >= 1:
        req.update(generation_id_or_member_epoch=-1, member_id="")
    if version >= 6:
        req["topics"][0]["partitions"][0]["committed_leader_epoch"] = 3
    resp = await call(broker, ApiKey.OFFSET_COMMIT, version, req)
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in resp.topics] == \
        [("t", [(0, 0), (9, E.UNKNOWN_TOPIC_OR_PARTITION)]), ("missing", [(0, E.UNKNOWN_TOPIC_OR_PARTITION)])]
    fv = min(version, max(versions(ApiKey.OFFSET_FETCH)))
    if fv >= 8:
        resp = await call(broker, ApiKey.OFFSET_FETCH, fv, {"groups": [
            {"group_id": "s", "topics": [{"name": "t", "partition_indexes": [0, 1]}]},
            {"group_id": "s", "topics": None}, {"group_id": "empty", "topics": None}]})
        g1, g2, g3 = resp.groups
        assert [(p.partition_index, p.committed_offset, p.metadata) for p in g1.topics[0].partitions] == \
            [(0, 11, "meta"), (1, -1, "")]
        assert [(t.name, [p.committed_offset for p in t.partitions]) for t in g2.topics] == [("t", [11])]
        assert g3.topics == [] and g3.error_code == 0
        if version >= 6:
            assert g1.topics[0].partitions[0].committed_leader_epoch == 3
    else:
        resp = await call(broker, ApiKey.OFFSET_FETCH, fv, {"group_id": "s", "topics": [
            {"name": "t", "partition_indexes": [0, 1]}]})
        parts = resp.topics[0].partitions
        assert [(p.partition_index, p.committed_offset, p.metadata, p.error_code) for p in parts] == \
            [(0, 11, "meta", 0), (1, -1, "", 0)]
        if fv >= 2:
            resp = await call(broker, ApiKey.OFFSET_FETCH, fv, {"group_id": "s", "topics": None})
            assert resp.error_code == 0 and [t.name for t in resp.topics] == ["t"]


async def test_offset_commit_retention_and_v1_timestamp():
    broker = await new_broker()
    coord = broker.groups
    await call(broker, ApiKey.OFFSET_COMMIT, 2, {"group_id": "s", "generation_id_or_member_epoch": -1,
                                                 "member_id": "", "retention_time_ms": 5000, "topics": [
                                                     {"name": "t", "partitions": [{"partition_index": 0,
                                                                                   "committed_offset": 3}]}]})
    c = coord.store.offsets_of("s")[("t", 0)]
    assert c.expire_timestamp_ms == c.commit_timestamp_ms + 5000
    await call(broker, ApiKey.OFFSET_COMMIT, 1, {"group_id": "s", "generation_id_or_member_epoch": -1,
                                                 "member_id": "", "topics": [
                                                     {"name": "t", "partitions": [{"partition_index": 1,
                                                                                   "committed_offset": 4,
                                                                                   "commit_timestamp": 1234}]}]})
    assert coord.store.offsets_of("s")[("t", 1)].commit_timestamp_ms == 1234


async def test_list_describe_delete_groups_and_offset_delete():
    broker = await new_broker()
    await call(broker, ApiKey.OFFSET_COMMIT, 8, {"group_id": "s", "generation_id_or_member_epoch": -1,
                                                 "member_id": "", "topics": [
                                                     {"name": "t", "partitions": [{"partition_index": 0,
                                                                                   "committed_offset": 3},
                                                                                  {"partition_index": 1,
                                                                                   "committed_offset": 4}]}]})
    for v in versions(ApiKey.LIST_GROUPS):
        resp = await call(broker, ApiKey.LIST_GROUPS, v, {})
        assert resp.error_code == 0 and [(g.group_id, g.protocol_type) for g in resp.groups] == [("s", "")]
        if v >= 4:
            assert resp.groups[0].group_state == "Empty"
            resp = await call(broker, ApiKey.LIST_GROUPS, v, {"states_filter": ["Stable"]})
            assert resp.groups == []
    resp = await call(broker, ApiKey.OFFSET_DELETE, 0, {"group_id": "s", "topics": [
        {"name": "t", "partitions": [{"partition_index": 0}, {"partition_index": 7}]}]})
    assert resp.error_code == 0
    assert [(p.partition_index, p.error_code) for p in resp.topics[0].partitions] == \
        [(0, 0), (7, E.UNKNOWN_TOPIC_OR_PARTITION)]
    resp = await call(broker, ApiKey.OFFSET_DELETE, 0, {"group_id": "zzz", "topics": []})
    assert resp.error_code == E.GROUP_ID_NOT_FOUND
    for v in versions(ApiKey.DELETE_GROUPS):
        resp = await call(broker, ApiKey.DELETE_GROUPS, v, {"groups_names": ["s", "zzz"]})
        expected = [("s", 0), ("zzz", E.GROUP_ID_NOT_FOUND)] if v == 0 else \
            [("s", E.GROUP_ID_NOT_FOUND), ("zzz", E.GROUP_ID_NOT_FOUND)]
        assert [(r.group_id, r.error_code) for r in resp.results] == expected


async def test_no_coordinator_answers_coordinator_not_available():
    broker = FakeBroker(None)
    resp = await call(broker, ApiKey.FIND_COORDINATOR, 3, {"key": "g"})
    assert resp.error_code == E.COORDINATOR_NOT_AVAILABLE
    resp = await call(broker, ApiKey.OFFSET_FETCH, 5, {"group_id": "g", "topics": None})
    assert resp.error_code == E.COORDINATOR_NOT_AVAILABLE
    resp = await call(broker, ApiKey.OFFSET_FETCH, 1, {"group_id": "g", "topics": [
        {"name": "t", "partition_indexes": [0]}]})
    assert resp.topics[0].partitions[0].error_code == E.COORDINATOR_NOT_AVAILABLE
