"""Authorized operations (KIP-430): the bit sets, and Metadata / DescribeCluster answers at every version.

The expected sets are written out by hand from Kafka's ``AclEntry.supportedOperations`` and the
rules in force; the answers are encoded and decoded again with the wire codec, so a field a
version does not have is checked to be absent rather than trusted.
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest

from sundial.broker.authorizer import (
    CLUSTER_NAME,
    OPERATIONS_NOT_REQUESTED,
    AclOperation as Op,
    AclRule,
    AclStore,
    Authorizer,
    ResourceType,
    authorized_operations,
)
from sundial.broker.handlers.metadata import handle_describe_cluster, handle_metadata
from sundial.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from sundial.protocol.schema_codec import decode_response_body, encode_response_body

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TOPIC_OPS = {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
GROUP_OPS = {Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
CLUSTER_OPS = {Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.ALTER,
               Op.DESCRIBE}


def bits(ops) -> int:
    return sum(1 << op for op in ops)


def ctx_for(authorizer, principal="User:alice"):
    topic = SimpleNamespace(name="orders", topic_id=uuid.uuid4().bytes, partitions=1)
    logs = SimpleNamespace(topics=lambda: [topic], topic=lambda name: topic if name == "orders" else None)
    endpoint = SimpleNamespace(node_id=1, host="127.0.0.1", port=9092)
    broker = SimpleNamespace(authorizer=authorizer, logs=logs, node_id=1, cluster_id="c1",
                             endpoint_for=lambda listener: endpoint)
    return SimpleNamespace(broker=broker, principal=principal, client_host="127.0.0.1", listener_name="PLAINTEXT",
                           api_version=0, client_id="t")


def authorizer(tmp_path, rules, **kwargs) -> Authorizer:
    store = AclStore(str(tmp_path / "acls.json"))
    if rules:
        store.add(rules)
    return Authorizer(store, **kwargs)


def allow(name, rtype, op, principal="User:alice"):
    return AclRule.make(principal, rtype, name, op, "ALLOW", "*", "LITERAL")


def test_no_authorizer_reports_every_supported_operation():
    ctx = ctx_for(None)
    assert authorized_operations(ctx, T, "orders") == bits(TOPIC_OPS)
    assert authorized_operations(ctx, G, "g") == bits(GROUP_OPS)
    assert authorized_operations(ctx, C, CLUSTER_NAME) == bits(CLUSTER_OPS)


@pytest.mark.parametrize("rtype,name,granted,expected", [
    (T, "orders", "READ", {Op.READ, Op.DESCRIBE}),
    (T, "orders", "ALTER_CONFIGS", {Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}),
    (T, "orders", "ALL", TOPIC_OPS),
    (G, "g", "READ", {Op.READ, Op.DESCRIBE}),
    (G, "g", "DELETE", {Op.DELETE, Op.DESCRIBE}),
    (C, CLUSTER_NAME, "ALTER", {Op.ALTER, Op.DESCRIBE}),
    (C, CLUSTER_NAME, "IDEMPOTENT_WRITE", {Op.IDEMPOTENT_WRITE}),
])
def test_rules_cut_the_set(tmp_path, rtype, name, granted, expected):
    ctx = ctx_for(authorizer(tmp_path, [allow(name, rtype, granted)], allow_everyone_if_no_acl_found=True))
    assert authorized_operations(ctx, rtype, name) == bits(expected)
    # a resource of the same type without rules: allow.everyone.if.no.acl.found gives everything
    other = {T: "payments", G: "h", C: None}[rtype]
    if other is not None:
        assert authorized_operations(ctx, rtype, other) == authorized_operations(ctx_for(None), rtype, other)


def test_no_rules_and_no_allow_everyone_is_empty_but_super_users_get_all(tmp_path):
    auth = authorizer(tmp_path, [], super_users="User:admin")
    assert authorized_operations(ctx_for(auth), T, "orders") == 0
    assert authorized_operations(ctx_for(auth, "User:admin"), T, "orders") == bits(TOPIC_OPS)


def _round_trip(api_key, version, response):
    return decode_response_body(api_key, version, encode_response_body(api_key, version, response))


def _field(obj, *names):
    for name in names:
        if hasattr(obj, name):
            return getattr(obj, name)
    return None


@pytest.mark.parametrize("version", range(SUPPORTED_VERSIONS[ApiKey.METADATA][0],
                                          SUPPORTED_VERSIONS[ApiKey.METADATA][1] + 1))
@pytest.mark.parametrize("include", [False, True])
def test_metadata_every_version(tmp_path, version, include):
    ctx = ctx_for(authorizer(tmp_path, [allow("orders", T, "READ")], allow_everyone_if_no_acl_found=True))
    ctx.api_version = version
    request = SimpleNamespace(topics=None, allow_auto_topic_creation=False,
                              include_topic_authorized_operations=include,
                              include_cluster_authorized_operations=include)
    decoded = _round_trip(ApiKey.METADATA, version, asyncio.run(handle_metadata(ctx, request)))
    topic_ops = _field(decoded.topics[0], "topic_authorized_operations", "authorized_operations")
    cluster_ops = _field(decoded, "cluster_authorized_operations", "authorized_operations")
    if version < 8:
        assert topic_ops is None and cluster_ops is None
        return
    assert topic_ops == ({Op.READ, Op.DESCRIBE} if include else None)
    if version <= 10:
        assert cluster_ops == (CLUSTER_OPS if include else None)
    else:
        assert cluster_ops is None


@pytest.mark.parametrize("version", range(SUPPORTED_VERSIONS[ApiKey.DESCRIBE_CLUSTER][0],
                                          SUPPORTED_VERSIONS[ApiKey.DESCRIBE_CLUSTER][1] + 1))
@pytest.mark.parametrize("include", [False, True])
def test_describe_cluster_every_version(tmp_path, version, include):
    ctx = ctx_for(authorizer(tmp_path, [allow(CLUSTER_NAME, C, "ALTER")]))
    ctx.api_version = version
    request = SimpleNamespace(include_cluster_authorized_operations=include)
    decoded = _round_trip(ApiKey.DESCRIBE_CLUSTER, version, asyncio.run(handle_describe_cluster(ctx, request)))
    assert _field(decoded, "cluster_authorized_operations", "authorized_operations") == (
        {Op.ALTER, Op.DESCRIBE} if include else None)


def test_not_requested_is_kafkas_int_min():
    assert OPERATIONS_NOT_REQUESTED == -(2**31)
