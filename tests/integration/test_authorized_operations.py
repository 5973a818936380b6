"""Authorized operations (KIP-430) in DescribeCluster, Metadata, DescribeGroups and ConsumerGroupDescribe.

confluent-kafka's AdminClient asks for them with ``include_authorized_operations=True``
(confluent-kafka-python's own ``test_describe_operations`` does exactly what is done here).
The daemon has the ACL authorizer with ``allow.everyone.if.no.acl.found=true``, a PLAINTEXT
listener whose ``User:ANONYMOUS`` is the super user that manages the rules, and a SASL_PLAINTEXT
listener (PLAIN) where ``User:alice``, the subject of every check, logs in. The expected
sets are Kafka's ``AclEntry.supportedOperations`` for the resource type, cut down by hand to
what the rules in force allow:

* no rule on the resource: every supported operation (allow.everyone.if.no.acl.found);
* one ALLOW rule for alice: that operation and the ones it implies (READ and ALTER imply
  DESCRIBE), nothing else, since the resource now has an ACL;
* without ``include_authorized_operations`` the field is absent (None);
* without an authorizer: every supported operation.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, TopicCollection, TopicPartition
from confluent_kafka.admin import AclBinding, AclBindingFilter, AclOperation as Op, AclPermissionType
from confluent_kafka.admin import AdminClient, NewTopic, ResourcePatternType, ResourceType

from .acl_support import acl_daemon
from .conftest import SundialProcess

ALICE, ALICE_PW = "alice", "alice-pw"

TOPIC_OPS = {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
             Op.ALTER_CONFIGS}
GROUP_OPS = {Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
CLUSTER_OPS = {Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
               Op.ALTER, Op.DESCRIBE}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    proc = acl_daemon(tmp_path_factory.mktemp("authorized-ops") / "broker", {ALICE: ALICE_PW}, {
        "allow.everyone.if.no.acl.found": "true",
        "group.initial.rebalance.delay.ms": "0",
    }).start()
    yield proc
    assert proc.stop() == 0, proc.log_text()[-3000:]


@pytest.fixture(scope="module")
def plain_node(tmp_path_factory):
    proc = SundialProcess(tmp_path_factory.mktemp("no-authorizer") / "broker").start()
    yield proc
    assert proc.stop() == 0, proc.log_text()[-3000:]


def alice_conf(node) -> dict:
    return {"bootstrap.servers": node.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": ALICE, "sasl.password": ALICE_PW}


def _ops(describe, *args, include: bool):
    futures = describe(*args, include_authorized_operations=include, request_timeout=30)
    result = futures.result() if hasattr(futures, "result") else next(iter(futures.values())).result()
    return None if result.authorized_operations is None else set(result.authorized_operations)


def _with_rule(admin, binding: AclBinding):
    for f in admin.create_acls([binding]).values():
        f.result()
    return AclBindingFilter(binding.restype, binding.name, ResourcePatternType.ANY, None, None, Op.ANY,
                            AclPermissionType.ANY)


def _drop(admin, acl_filter) -> None:
    for f in admin.delete_acls([acl_filter]).values():
        f.result()


def _consumed_group(conf: dict, topic: str, protocol: str) -> str:
    """A group that has committed once and is empty again (described, not dead)."""
    group = f"ops-{protocol}-{uuid.uuid4().hex[:8]}"
    c = Consumer({**conf, "group.id": group, "group.protocol": protocol, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    deadline = time.monotonic() + 60
    while not c.assignment():
        assert time.monotonic() < deadline, "no assignment"
        c.poll(0.2)
    c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    c.close()
    return group


def test_cluster_operations(node):
    alice = AdminClient(alice_conf(node))
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    assert _ops(alice.describe_cluster, include=False) is None
    assert _ops(alice.describe_cluster, include=True) == CLUSTER_OPS
    rule = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, f"User:{ALICE}", "*",
                      Op.ALTER, AclPermissionType.ALLOW)
    flt = _with_rule(admin, rule)
    try:
        assert _ops(alice.describe_cluster, include=True) == {Op.ALTER, Op.DESCRIBE}
    finally:
        _drop(admin, flt)
    assert _ops(alice.describe_cluster, include=True) == CLUSTER_OPS


def test_topic_operations(node):
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    alice = AdminClient(alice_conf(node))
    topic = f"ops-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    names = TopicCollection([topic])
    assert _ops(alice.describe_topics, names, include=False) is None
    assert _ops(alice.describe_topics, names, include=True) == TOPIC_OPS
    flt = _with_rule(admin, AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{ALICE}",
                                       "*", Op.READ, AclPermissionType.ALLOW))
    try:
        assert _ops(alice.describe_topics, names, include=True) == {Op.READ, Op.DESCRIBE}
    finally:
        _drop(admin, flt)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_operations(node, protocol):
    """DescribeGroups (classic) and ConsumerGroupDescribe (consumer) answer the same sets."""
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    alice = AdminClient(alice_conf(node))
    topic = f"ops-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    group = _consumed_group(alice_conf(node), topic, protocol)
    desc = alice.describe_consumer_groups([group], include_authorized_operations=True,
                                          request_timeout=30)[group].result()
    assert desc.state == ConsumerGroupState.EMPTY
    assert set(desc.authorized_operations) == GROUP_OPS
    assert _ops(alice.describe_consumer_groups, [group], include=False) is None
    flt = _with_rule(admin, AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, f"User:{ALICE}",
                                       "*", Op.READ, AclPermissionType.ALLOW))
    try:
        assert _ops(alice.describe_consumer_groups, [group], include=True) == {Op.READ, Op.DESCRIBE}
    finally:
        _drop(admin, flt)


def test_without_authorizer_every_supported_operation(plain_node):
    admin = AdminClient({"bootstrap.servers": plain_node.bootstrap})
    topic = f"ops-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    assert _ops(admin.describe_cluster, include=True) == CLUSTER_OPS
    assert _ops(admin.describe_topics, TopicCollection([topic]), include=True) == TOPIC_OPS
