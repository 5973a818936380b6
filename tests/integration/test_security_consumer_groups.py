"""ACLs on Kafka 4's consumer group protocol (KIP-848): the GROUP resource guards the new APIs as Kafka's
``GroupCoordinatorService`` does: ConsumerGroupHeartbeat needs READ on the group, ConsumerGroupDescribe
DESCRIBE (which READ implies); otherwise GROUP_AUTHORIZATION_FAILED (30).

One daemon with the ACL authorizer on: a PLAINTEXT listener whose ``User:ANONYMOUS`` is a super user
(the test's own set-up: topics, records) and a SASL_PLAINTEXT listener where ``User:alice`` may read
and describe the topics prefixed ``acl-`` and starts with no group rule. Rules are added with
``sundial acls`` while the daemon runs (it re-reads them at most once a second, on use, so the test
retries until they apply). Checked on the raw wire (exact codes, nothing stored for a refused join),
with confluent-kafka's consumer in ``group.protocol=consumer`` mode, and with ``sundial
consumer-groups`` (one error line, exit 1).
"""

from __future__ import annotations

import time
import uuid

import pytest

from sundial.protocol.api_keys import ApiKey
from sundial.protocol.errors import ErrorCode

from support.waiting import wait_for

from .acl_support import acl_daemon, sundial_cli
from .clients import RawConnection, create_topic
from .conftest import DAEMONS_UNAVAILABLE
from .test_tools_cli import assert_one_line_error, produce_records, sundial, table

pytestmark = pytest.mark.skipif(DAEMONS_UNAVAILABLE is not None, reason=DAEMONS_UNAVAILABLE or "")

PASSWORD = "alice-pw"
GROUP_AUTHORIZATION_FAILED = ErrorCode.GROUP_AUTHORIZATION_FAILED


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    base = tmp_path_factory.mktemp("kip848-acls")
    proc = acl_daemon(base / "broker", {"alice": PASSWORD}, {
        "group.initial.rebalance.delay.ms": "0",
        "group.consumer.heartbeat.interval.ms": "500",
        "group.consumer.min.heartbeat.interval.ms": "500",
    })
    sundial_cli(proc.data_dir, "acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
                "--operation", "Describe", "--topic", "acl-", "--resource-pattern-type", "prefixed")
    proc.start()
    command_config = base / "alice.properties"
    command_config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                              f"sasl.username=alice\nsasl.password={PASSWORD}\n")
    proc.alice_properties = str(command_config)
    yield proc
    assert proc.stop() == 0, proc.log_text()[-3000:]


class Alice(RawConnection):
    """A raw SASL_PLAINTEXT connection of User:alice (SaslHandshake v1, PLAIN)."""

    def __init__(self, node) -> None:
        host, port = node.sasl_bootstrap.rsplit(":", 1)
        super().__init__(host, int(port), "acl-test", timeout_s=15)
        assert self.authenticate_plain("alice", PASSWORD).error_code == 0

    def join(self, group: str, member_id: str, topic: str):
        return self.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
            "group_id": group, "member_id": member_id, "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": 30_000, "subscribed_topic_names": [topic], "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": []})

    def leave(self, group: str, member_id: str):
        return self.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
            "group_id": group, "member_id": member_id, "member_epoch": -1, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": -1, "subscribed_topic_names": None, "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": None})

    def describe(self, group: str):
        (g,) = self.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [group],
                                                             "include_authorized_operations": True}).groups
        return g


def _names() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"acl-topic-{suffix}", f"acl-group-{suffix}"


def _allow(node, operation: str, group: str) -> None:
    sundial_cli(node.data_dir, "acls", "add", "--allow-principal", "User:alice", "--operation", operation,
                "--group", group)


def test_heartbeat_needs_read_and_describe_needs_describe_on_the_group(node):
    topic, group = _names()
    create_topic(node.bootstrap, topic, 2)
    alice = Alice(node)
    try:
        member_id = uuid.uuid4().hex
        refused = alice.join(group, member_id, topic)
        assert (refused.error_code, refused.member_epoch, refused.assignment) == (GROUP_AUTHORIZATION_FAILED, 0, None)
        assert alice.describe(group).error_code == GROUP_AUTHORIZATION_FAILED
        # Nothing was created by the refused join: the super user sees no such group.
        listed = table(sundial("consumer-groups", "--bootstrap-server", node.bootstrap, "--list", "--type"))
        assert group not in {r["GROUP"] for r in listed}

        # DESCRIBE alone: describe passes authorization (the group does not exist yet), a join does not.
        _allow(node, "Describe", group)
        wait_for(lambda: alice.describe(group).error_code == ErrorCode.GROUP_ID_NOT_FOUND, 30,
                 "the DESCRIBE rule to apply", interval_s=0.2)
        assert alice.join(group, member_id, topic).error_code == GROUP_AUTHORIZATION_FAILED

        # READ: the member joins, gets every partition, and describe shows it.
        _allow(node, "Read", group)
        joined = wait_for(lambda: (lambda r: r if r.error_code == 0 else None)(alice.join(group, member_id, topic)),
                          30, "the READ rule to apply", interval_s=0.2)
        assert joined.member_id == member_id and joined.member_epoch >= 1
        assert sorted(p for tp in joined.assignment.topic_partitions for p in tp.partitions) == [0, 1]
        described = alice.describe(group)
        assert described.error_code == 0 and [m.member_id for m in described.members] == [member_id]
        assert alice.leave(group, member_id).error_code == 0
    finally:
        alice.close()


def test_a_consumer_protocol_consumer_is_refused_then_consumes_once_allowed(node):
    from confluent_kafka import Consumer, KafkaError

    topic, group = _names()
    create_topic(node.bootstrap, topic, 2)
    now = int(time.time() * 1000)
    produced = {(md.partition, md.offset) for md in produce_records(
        node.bootstrap, topic, [(i % 2, now + i, None, f"v{i}".encode(), None) for i in range(20)])}
    conf = {"bootstrap.servers": node.sasl_bootstrap, "security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN",
            "sasl.username": "alice", "sasl.password": PASSWORD, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0}

    refused = Consumer(conf)
    errors = []
    try:
        refused.subscribe([topic])

        def group_error():
            msg = refused.poll(0.2)
            if msg is not None and msg.error():
                errors.append(msg.error())
            return any(e.code() == KafkaError.GROUP_AUTHORIZATION_FAILED for e in errors)

        wait_for(group_error, 60, "GROUP_AUTHORIZATION_FAILED from the consumer")
        assert not refused.assignment()
    finally:
        refused.close()
    # The tool as alice: the same refusal, as one error line.
    as_alice = sundial("consumer-groups", "--bootstrap-server", node.sasl_bootstrap, "--command-config",
                       node.alice_properties, "--describe", "--group", group, check=False)
    assert_one_line_error(as_alice, f"not authorized (Describe on group '{group}')")
    assert as_alice.code == 1

    _allow(node, "Read", group)      # in force at the daemon's next re-read; the consumer retries until then
    allowed = Consumer(conf)
    got = set()
    try:
        allowed.subscribe([topic])

        def consumed_everything():
            msg = allowed.poll(0.2)
            if msg is not None and not msg.error():
                got.add((msg.partition(), msg.offset()))
            return got == produced

        wait_for(consumed_everything, 60, "every record through the consumer protocol")
        allowed.commit(asynchronous=False)
        # READ implies DESCRIBE: the tool as alice now describes the group, with alice's member.
        members = table(sundial("consumer-groups", "--bootstrap-server", node.sasl_bootstrap, "--command-config",
                                node.alice_properties, "--describe", "--group", group, "--members", "--verbose"))
        assert [r["CONSUMER-ID"] for r in members] == [allowed.memberid()]
        assert members[0]["CURRENT-ASSIGNMENT"] == f"{topic}:0,1"
    finally:
        allowed.close()
