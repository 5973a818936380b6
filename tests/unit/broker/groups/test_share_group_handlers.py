"""ShareGroupHeartbeat (76) and ShareGroupDescribe (77) handlers through the real codec both ways,
over a real coordinator: the fields a client reads, error codes and messages, and authorization."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from support.unit_helpers import HandlerContext

from sundial.broker.authorizer import AclOperation, ResourceType
from sundial.broker.dispatch import Dispatcher
from sundial.broker.groups.coordinator import GroupCoordinator
from sundial.broker.groups.offsets import MemoryOffsetsLog, OffsetStore
from sundial.config import BrokerConfig
from sundial.protocol.api_keys import ApiKey
from sundial.protocol.codec import decode_request, decode_response, encode_request, encode_response
from sundial.protocol.errors import ErrorCode as E
from sundial.protocol.header import parse_request_header

pytestmark = pytest.mark.asyncio

DISPATCH = Dispatcher()
TOPICS = {"q": (uuid.uuid5(uuid.NAMESPACE_DNS, "q"), 2), "secret": (uuid.uuid5(uuid.NAMESPACE_DNS, "s"), 1)}


class Authorizer:
    def __init__(self, denied: set) -> None:
        self.denied = denied

    def authorize(self, principal, host, operation, resource_type, name, log_denied=True) -> bool:
        return (operation, resource_type, name) not in self.denied

    def authorize_any(self, principal, host, operation, resource_type) -> bool:
        return True


@dataclass
class FakeDispatcher:
    advertised: dict


@dataclass
class FakeBroker:
    groups: GroupCoordinator
    authorizer: Authorizer | None = None
    config: BrokerConfig = field(default_factory=lambda: BrokerConfig({"group.share.enable": "true"}))
    dispatcher: FakeDispatcher | None = None


async def new_broker(denied=None):
    coord = GroupCoordinator(BrokerConfig({}), None, store=OffsetStore(MemoryOffsetsLog()), run_timers=False,
                             topic_view=lambda: TOPICS)
    await coord.start()
    return FakeBroker(coord, Authorizer(denied) if denied is not None else None)


async def call(broker, api_key, request: dict, version=1):
    frame = encode_request(api_key, version, 42, "client-1", request)
    body = memoryview(frame)[4:]
    header = parse_request_header(body)
    response = await DISPATCH.handlers[api_key](HandlerContext(broker, version), decode_request(header, body))
    wire = b"".join(bytes(b) for b in encode_response(header, response))
    correlation_id, obj = decode_response(api_key, version, wire)
    assert correlation_id == 42
    return obj


def heartbeat(member, epoch, topics=None, group="sg"):
    return {"group_id": group, "member_id": member, "member_epoch": epoch, "rack_id": None,
            "subscribed_topic_names": topics}


async def test_only_version_1_is_advertised():
    assert DISPATCH.advertised[int(ApiKey.SHARE_GROUP_HEARTBEAT)] == (1, 1)
    assert DISPATCH.advertised[int(ApiKey.SHARE_GROUP_DESCRIBE)] == (1, 1)


async def test_heartbeat_and_describe_on_the_wire():
    broker = await new_broker()
    r = await call(broker, ApiKey.SHARE_GROUP_HEARTBEAT, heartbeat("m1", 0, ["q"]))
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (0, "m1", 1, 5000)
    assert [(tp.topic_id, sorted(tp.partitions)) for tp in r.assignment.topic_partitions] == [(TOPICS["q"][0], [0, 1])]
    again = await call(broker, ApiKey.SHARE_GROUP_HEARTBEAT, heartbeat("m1", 1))
    assert again.error_code == 0 and again.assignment is None
    d = await call(broker, ApiKey.SHARE_GROUP_DESCRIBE, {"group_ids": ["sg", "nope"],
                                                        "include_authorized_operations": True})
    sg, nope = d.groups
    assert (sg.error_code, sg.group_state, sg.group_epoch, sg.assignment_epoch, sg.assignor_name) == \
        (0, "Stable", 1, 1, "simple")
    (m,) = sg.members
    assert (m.member_id, m.member_epoch, m.client_id, m.client_host, m.subscribed_topic_names) == \
        ("m1", 1, "client-1", "/127.0.0.1", ["q"])
    assert [(tp.topic_name, tp.partitions) for tp in m.assignment.topic_partitions] == [("q", [0, 1])]
    assert sg.authorized_operations > 0
    assert nope.error_code == E.GROUP_ID_NOT_FOUND and nope.error_message == "Group nope not found."


async def test_refusals_carry_kafkas_code_and_message():
    broker = await new_broker()
    r = await call(broker, ApiKey.SHARE_GROUP_HEARTBEAT, heartbeat("", 0, ["q"]))
    assert (r.error_code, r.error_message, r.member_id) == (E.INVALID_REQUEST, "MemberId can't be empty.", None)
    r = await call(broker, ApiKey.SHARE_GROUP_HEARTBEAT, heartbeat("m1", 3))
    assert r.error_code == E.GROUP_ID_NOT_FOUND
    await call(broker, ApiKey.SHARE_GROUP_HEARTBEAT, heartbeat("m1", 0, ["q"]))
    r = await call(broker, ApiKey.SHARE_GROUP_HEARTBEAT, heartbeat("m1", 5))
    assert r.error_code == E.FENCED_MEMBER_EPOCH
    r = await call(broker, ApiKey.SHARE_GROUP_HEARTBEAT, heartbeat("m2", 1))
    assert r.error_code == E.UNKNOWN_MEMBER_ID


async def test_share_groups_are_off_unless_enabled_or_share_version_is_finalized():
    broker = await new_broker()
    broker.config = BrokerConfig({})
    broker.dispatcher = FakeDispatcher(dict(DISPATCH.advertised))
    broker.dispatcher.advertised.pop(int(ApiKey.SHARE_FETCH), None)
    r = await call(broker, ApiKey.SHARE_GROUP_HEARTBEAT, heartbeat("m1", 0, ["q"]))
    assert r.error_code == E.UNSUPPORTED_VERSION and "group.share.enable" in r.error_message
    d = await call(broker, ApiKey.SHARE_GROUP_DESCRIBE, {"group_ids": ["sg"], "include_authorized_operations": False})
    assert d.groups[0].error_code == E.UNSUPPORTED_VERSION
    # ShareFetch served: share.version is finalized at 1 and share groups are on
    broker.dispatcher.advertised[int(ApiKey.SHARE_FETCH)] = (1, 2)
    r = await call(broker, ApiKey.SHARE_GROUP_HEARTBEAT, heartbeat("m1", 0, ["q"]))
    assert r.error_code == 0


async def test_authorization():
    broker = await new_broker({(AclOperation.READ, ResourceType.GROUP, "locked"),
                               (AclOperation.DESCRIBE, ResourceType.TOPIC, "secret"),
                               (AclOperation.DESCRIBE, ResourceType.GROUP, "hidden")})
    r = await call(broker, ApiKey.SHARE_GROUP_HEARTBEAT, heartbeat("m1", 0, ["q"], group="locked"))
    assert r.error_code == E.GROUP_AUTHORIZATION_FAILED
    r = await call(broker, ApiKey.SHARE_GROUP_HEARTBEAT, heartbeat("m1", 0, ["q", "secret"]))
    assert r.error_code == E.TOPIC_AUTHORIZATION_FAILED
    assert not broker.groups.share.is_share_group("sg")           # refused before the coordinator
    r = await call(broker, ApiKey.SHARE_GROUP_HEARTBEAT, heartbeat("m1", 0, ["q"], group="hidden"))
    assert r.error_code == 0
    d = await call(broker, ApiKey.SHARE_GROUP_DESCRIBE, {"group_ids": ["hidden"],
                                                        "include_authorized_operations": False})
    assert d.groups[0].error_code == E.GROUP_AUTHORIZATION_FAILED
    # a group assigned a topic the caller may not describe
    open_broker = await new_broker()
    await call(open_broker, ApiKey.SHARE_GROUP_HEARTBEAT, heartbeat("m1", 0, ["secret"], group="g2"))
    open_broker.authorizer = Authorizer({(AclOperation.DESCRIBE, ResourceType.TOPIC, "secret")})
    d = await call(open_broker, ApiKey.SHARE_GROUP_DESCRIBE, {"group_ids": ["g2"],
                                                             "include_authorized_operations": False})
    assert d.groups[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
