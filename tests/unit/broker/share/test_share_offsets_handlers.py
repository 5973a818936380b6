"""DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets through the real
codec both ways (request encoded and decoded as the broker decodes it, response encoded and decoded
with the protocol package's reader), over the in-memory share-state store, with Kafka's answers:
error codes, ACLs, -1 for share-partitions without state, the v1 lag (the latest offset asked of a
real ReplicaManager over stand-in logs)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from sundial.broker.authorizer import AclOperation, ResourceType
from sundial.broker.groups.modern.errors import GroupError
from sundial.broker.handlers.share_offsets import (
    handle_alter_share_group_offsets,
    handle_delete_share_group_offsets,
    handle_describe_share_group_offsets,
)
from sundial.broker.share.state_batch import RecordState, StateBatch, StateChange
from sundial.broker.groups.offsets import MemoryOffsetsLog
from sundial.broker.replica_manager import ReplicaManager
from sundial.broker.share.state_store import ShareStateStore
from sundial.config import BrokerConfig
from sundial.protocol.api_keys import ApiKey
from sundial.protocol.codec import decode_request, decode_response, encode_request, encode_response
from sundial.protocol.errors import ErrorCode as E
from sundial.protocol.header import parse_request_header

from support.state_support import FixedTopicIds

T_ID = uuid.UUID(int=0x1111).bytes
U_ID = uuid.UUID(int=0x2222).bytes


@dataclass
class Topic:
    name: str
    topic_id: bytes
    partitions: int


@dataclass
class Log:
    high_watermark: int


class Logs:
    def __init__(self) -> None:
        self.topics = {"t": Topic("t", T_ID, 2), "u": Topic("u", U_ID, 1)}
        self.hw = {("t", 0): 100, ("t", 1): 10, ("u", 0): 7}

    def topic(self, name):
        return self.topics.get(name)

    def get_log(self, topic, partition):
        hw = self.hw.get((topic, partition))
        return None if hw is None else Log(hw)


class ShareGroupsShell:
    def __init__(self) -> None:
        self.members: dict[str, list[str]] = {}

    async def ensure_group(self, group_id):
        if group_id in Groups.OTHERS:
            raise GroupError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        self.members.setdefault(group_id, [])

    def is_share_group(self, group_id):
        return group_id in self.members

    def is_empty(self, group_id):
        return not self.members.get(group_id)


class Groups:
    OTHERS = {"classic-group"}

    def __init__(self) -> None:
        self.share = ShareGroupsShell()
        self.others = set(self.OTHERS)

    def group_ids(self):
        return sorted(self.others | set(self.share.members))


class Manager:
    def __init__(self) -> None:
        self.forgotten: list[tuple] = []

    def forget(self, group_id, topic, partition):
        self.forgotten.append((group_id, topic, partition))


class Authorizer:
    def __init__(self, denied: set[tuple]) -> None:
        self.denied = denied

    def authorize(self, principal, host, operation, resource_type, name, log_denied=True):
        return (operation, resource_type, name) not in self.denied


def enabled_config(enable: bool = True):
    return SimpleNamespace(group_coordinator=SimpleNamespace(share=SimpleNamespace(enable=enable),
                                                             consumer_protocol_enabled=True))


@dataclass
class Broker:
    config: SimpleNamespace = field(default_factory=enabled_config)
    logs: Logs = field(default_factory=Logs)
    groups: Groups = field(default_factory=Groups)
    share_partitions: Manager = field(default_factory=Manager)
    authorizer: Authorizer | None = None
    share_state: ShareStateStore | None = None
    replica_manager: ReplicaManager | None = None


@dataclass
class Ctx:
    broker: Broker
    api_version: int
    principal: str = "User:alice"
    client_host: str = "127.0.0.1"


HANDLERS = {ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: handle_describe_share_group_offsets,
            ApiKey.ALTER_SHARE_GROUP_OFFSETS: handle_alter_share_group_offsets,
            ApiKey.DELETE_SHARE_GROUP_OFFSETS: handle_delete_share_group_offsets}


def new_broker() -> Broker:
    broker = Broker()
    store = ShareStateStore(MemoryOffsetsLog(), FixedTopicIds({"t": T_ID, "u": U_ID}), now_ms=lambda: 1000)
    store.mark_loaded()
    broker.share_state = store
    broker.replica_manager = ReplicaManager(BrokerConfig({}), broker.logs, purgatory=None, metrics=None, now_ms=lambda: 1000)
    return broker


async def call(broker, api_key, version, request: dict):
    frame = encode_request(api_key, version, 42, "client-1", request)
    body = memoryview(frame)[4:]
    header = parse_request_header(body)
    decoded = decode_request(header, body)
    response = await HANDLERS[api_key](Ctx(broker, version), decoded)
    wire = b"".join(bytes(b) for b in encode_response(header, response))
    correlation_id, obj = decode_response(api_key, version, wire)
    assert correlation_id == 42
    return obj


def describe_req(group="g", topics=None):
    return {"groups": [{"group_id": group, "topics": topics}]}


def parts(resp_topic):
    return {p.partition_index: (p.start_offset, p.error_code) for p in resp_topic.partitions}


def alter(broker, group, offsets: dict):
    req = {"group_id": group, "topics": [{"topic_name": t, "partitions": [
        {"partition_index": p, "start_offset": o} for p, o in ps.items()]} for t, ps in offsets.items()]}
    return call(broker, ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, req)


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("version", [0, 1])
def test_alter_then_describe(version):
    async def go():
        broker = new_broker()
        resp = await alter(broker, "g", {"t": {0: 40, 1: 3, 5: 1}, "nope": {0: 1}})
        assert resp.error_code == 0
        by_topic = {t.topic_name: t for t in resp.responses}
        assert parts_err(by_topic["t"]) == {0: 0, 1: 0, 5: E.UNKNOWN_TOPIC_OR_PARTITION}
        assert uuid_of(by_topic["t"].topic_id) == uuid.UUID(bytes=T_ID)
        assert uuid_of(by_topic["nope"].topic_id) == uuid.UUID(int=0)
        assert parts_err(by_topic["nope"]) == {0: E.UNKNOWN_TOPIC_OR_PARTITION}
        assert sorted(broker.share_partitions.forgotten) == [("g", "t", 0), ("g", "t", 1)]
        # Some records of t-0 acknowledged: the lag counts them out.
        await broker.share_state.write("g", "t", 0, StateChange(40, (StateBatch(41, 44, RecordState.ACKNOWLEDGED, 1),)))

        resp = await call(broker, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, version, describe_req())
        (group,) = resp.groups
        assert group.error_code == 0
        (topic,) = group.topics
        assert topic.topic_name == "t"
        assert parts(topic) == {0: (40, 0), 1: (3, 0)}
        if version >= 1:
            assert {p.partition_index: p.lag for p in topic.partitions} == {0: 100 - 40 - 4, 1: 10 - 3}

        resp = await call(broker, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, version,
                          describe_req(topics=[{"topic_name": "t", "partitions": [0, 1]},
                                               {"topic_name": "u", "partitions": [0]},
                                               {"topic_name": "gone", "partitions": [2]}]))
        topics = {t.topic_name: t for t in resp.groups[0].topics}
        assert parts(topics["t"]) == {0: (40, 0), 1: (3, 0)}
        assert parts(topics["u"]) == {0: (-1, 0)}  # no state: -1, no error
        assert parts(topics["gone"]) == {2: (-1, 0)}
        if version >= 1:
            assert topics["u"].partitions[0].lag == -1

        resp = await call(broker, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, version, describe_req(group="other"))
        assert resp.groups[0].error_code == 0 and resp.groups[0].topics == []
    run(go())


def uuid_of(value) -> uuid.UUID:
    if value is None:  # the reader gives the zero UUID as None
        return uuid.UUID(int=0)
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def parts_err(resp_topic):
    return {p.partition_index: p.error_code for p in resp_topic.partitions}


def test_alter_refused_for_members_and_other_group_types():
    async def go():
        broker = new_broker()
        broker.groups.share.members["busy"] = ["m1"]
        resp = await alter(broker, "busy", {"t": {0: 1}})
        assert resp.error_code == E.NON_EMPTY_GROUP and resp.responses == []
        resp = await alter(broker, "classic-group", {"t": {0: 1}})
        assert resp.error_code == E.GROUP_ID_NOT_FOUND
        assert broker.share_state.group_ids() == set()
        resp = await alter(broker, "g", {"t": {0: -5}})
        assert parts_err(resp.responses[0]) == {0: E.INVALID_REQUEST}
    run(go())


def test_delete():
    async def go():
        broker = new_broker()
        resp = await call(broker, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": "g", "topics": [{"topic_name": "t"}]})
        assert resp.error_code == E.GROUP_ID_NOT_FOUND
        await alter(broker, "g", {"t": {0: 4, 1: 5}})
        broker.groups.share.members["g"] = ["m"]
        resp = await call(broker, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": "g", "topics": [{"topic_name": "t"}]})
        assert resp.error_code == E.NON_EMPTY_GROUP
        broker.groups.share.members["g"] = []
        broker.share_partitions.forgotten.clear()
        resp = await call(broker, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": "g", "topics": [
            {"topic_name": "t"}, {"topic_name": "u"}, {"topic_name": "gone"}]})
        assert resp.error_code == 0
        assert {t.topic_name: t.error_code for t in resp.responses} == {
            "t": 0, "u": E.UNKNOWN_TOPIC_OR_PARTITION, "gone": E.UNKNOWN_TOPIC_OR_PARTITION}
        assert broker.share_state.start_offsets("t", 0) == {} and broker.share_state.start_offsets("t", 1) == {}
        assert sorted(broker.share_partitions.forgotten) == [("g", "t", 0), ("g", "t", 1)]
    run(go())


def test_acls():
    async def go():
        broker = new_broker()
        await alter(broker, "g", {"t": {0: 1}, "u": {0: 2}})
        broker.authorizer = Authorizer({(AclOperation.DESCRIBE, ResourceType.TOPIC, "u"),
                                        (AclOperation.READ, ResourceType.TOPIC, "u")})
        resp = await call(broker, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, describe_req())
        assert [t.topic_name for t in resp.groups[0].topics] == ["t"]  # u left out
        resp = await call(broker, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1,
                          describe_req(topics=[{"topic_name": "u", "partitions": [0]}]))
        assert parts(resp.groups[0].topics[0]) == {0: (-1, E.TOPIC_AUTHORIZATION_FAILED)}
        resp = await alter(broker, "g", {"u": {0: 9}})
        assert parts_err(resp.responses[0]) == {0: E.TOPIC_AUTHORIZATION_FAILED}
        assert broker.share_state.start_offsets("u", 0) == {"g": 2}
        resp = await call(broker, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": "g", "topics": [{"topic_name": "u"}]})
        assert resp.responses[0].error_code == E.TOPIC_AUTHORIZATION_FAILED

        broker.authorizer = Authorizer({(AclOperation.DESCRIBE, ResourceType.GROUP, "g"),
                                        (AclOperation.READ, ResourceType.GROUP, "g"),
                                        (AclOperation.DELETE, ResourceType.GROUP, "g")})
        resp = await call(broker, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, describe_req())
        assert resp.groups[0].error_code == E.GROUP_AUTHORIZATION_FAILED
        assert (await alter(broker, "g", {"t": {0: 1}})).error_code == E.GROUP_AUTHORIZATION_FAILED
        resp = await call(broker, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": "g", "topics": [{"topic_name": "t"}]})
        assert resp.error_code == E.GROUP_AUTHORIZATION_FAILED
    run(go())


def test_created_empty_by_alter_and_refused_while_share_groups_are_off():
    async def go():
        broker = new_broker()
        assert (await alter(broker, "fresh", {"t": {0: 1}})).error_code == 0
        assert broker.groups.share.is_share_group("fresh") and broker.groups.share.is_empty("fresh")
        broker.config = enabled_config(False)
        assert (await alter(broker, "fresh", {"t": {0: 1}})).error_code == E.UNSUPPORTED_VERSION
        resp = await call(broker, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, describe_req("fresh"))
        assert resp.groups[0].error_code == E.UNSUPPORTED_VERSION
        resp = await call(broker, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": "fresh", "topics": []})
        assert resp.error_code == E.UNSUPPORTED_VERSION
    run(go())
