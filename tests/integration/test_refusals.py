"""Refusals an operator can see, and a created topic logged once.

The client gets Kafka's error code (or, for an API that is not advertised, the closed
connection Kafka gives); the broker logs one ``info`` line with the client id and the
reason, once per connection and kind however often the client retries. Driven on the raw
wire (so the retries are counted exactly) and with confluent-kafka's transactional
producer, whose FindCoordinator(TRANSACTION) Sundial cannot serve.
"""

from __future__ import annotations

import struct

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey

from support.waiting import wait_for

from .clients import connect_raw, read_frame
from .conftest import unique_topic

pytestmark = pytest.mark.integration


def _events(node, event: str, **match) -> list[dict]:
    return [e for e in node.log_lines()
            if e.get("event") == event and all(e.get(k) == v for k, v in match.items())]


def _ask(sock, api_key: int, version: int, body: dict, client_id: str, correlation_id: int = 1):
    sock.sendall(encode_request(api_key, version, correlation_id, client_id, body))
    return decode_response(api_key, version, read_frame(sock))[1]


@pytest.fixture
def node(broker_factory):
    return broker_factory().start()


def test_find_coordinator_for_an_unknown_key_type_is_one_line_per_connection(node):
    for attempt in range(2):
        s = connect_raw(node.host, node.port)
        for i in range(5):  # a client retrying on the same connection
            answer = _ask(s, ApiKey.FIND_COORDINATOR, 3, {"key": "tx-1", "key_type": 1}, "refusal-client", i)
            assert (answer.error_code, answer.port) == (0, node.port)  # transaction keys are served
            answer = _ask(s, ApiKey.FIND_COORDINATOR, 3, {"key": "x", "key_type": 7}, "refusal-client", i)
            assert (answer.error_code, answer.error_message) == (42, "unknown key type 7")
        s.close()
        lines = wait_for(lambda: (lambda e: e if len(e) == attempt + 1 else None)(
            _events(node, "request_refused", client_id="refusal-client")), 30, "the refusal lines")
    assert {(e["kind"], e["level"]) for e in lines} == {("find_coordinator:key_type:7", "info")}
    assert len({e["conn_id"] for e in lines}) == 2
    assert {e["reason"] for e in lines} == {"unknown key type 7"}
    assert all(e["api"] == "FIND_COORDINATOR" and e["error"] == "INVALID_REQUEST" for e in lines)


def test_config_resource_types_sundial_does_not_handle(node):
    s = connect_raw(node.host, node.port)
    for i in range(3):
        described = _ask(s, ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
            {"resource_type": 16, "resource_name": "some-subscription", "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False}, "cfg-client", i)
        assert described.results[0].error_code == 42
        altered = _ask(s, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": 4, "resource_name": "1", "configs": [
                {"name": "log.retention.ms", "config_operation": 0, "value": "1000"}]}],
            "validate_only": False}, "cfg-client", 10 + i)
        assert altered.responses[0].error_code == 42
    s.close()
    lines = wait_for(lambda: (lambda e: e if len(e) == 2 else None)(
        _events(node, "request_refused", client_id="cfg-client")), 30, "two refusal lines")
    assert {e["kind"]: e["reason"] for e in lines} == {
        "config_resource:DESCRIBE_CONFIGS:16": "resource type 16 is not supported",
        "alter_broker_config": "broker settings are static in Sundial: edit server.properties and restart"}


def test_an_api_that_is_not_advertised_closes_with_one_info_line(node):
    s = connect_raw(node.host, node.port)
    # AllocateProducerIds v0 (flexible, like the header below): a broker asks the controller, not served by a
    # single node
    header = struct.pack(">hhih", ApiKey.ALLOCATE_PRODUCER_IDS, 0, 3, len(b"txn-tool")) + b"txn-tool" + b"\x00"
    s.sendall(struct.pack(">i", len(header) + 2) + header + b"\x01\x00")
    assert s.recv(10) == b""  # closed, as Kafka closes it
    s.close()
    line = wait_for(lambda: _events(node, "request_version_unsupported", client_id="txn-tool"), 30,
                    "the refusal line")
    assert len(line) == 1 and line[0]["level"] == "info"
    assert line[0]["reason"] == "ALLOCATE_PRODUCER_IDS (67) is not served by Sundial (not in its ApiVersions answer)"


def test_a_created_topic_is_logged_once(node):
    topic = unique_topic("logged")
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, client_id="creator")
    try:
        admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "60000"})])
    finally:
        admin.close()
    created = wait_for(lambda: [e for e in node.log_lines() if e.get("event") == "topic_created"
                                and e.get("topic") == topic], 30, "topic_created")
    assert len(created) == 1, created
    assert created[0]["partitions"] == 2 and created[0]["configs"] == {"retention.ms": "60000"}
    assert created[0]["via"] == "CreateTopics" and created[0]["client_id"] == "creator"
    assert len(created[0]["topic_id"]) == 36
    auto = unique_topic("auto")
    s = connect_raw(node.host, node.port)
    _ask(s, ApiKey.METADATA, 12, {"topics": [{"topic_id": None, "name": auto}], "allow_auto_topic_creation": True,
                                  "include_topic_authorized_operations": False}, "auto-client")
    s.close()
    created = [e for e in node.log_lines() if e.get("event") == "topic_created" and e.get("topic") == auto]
    assert [(e["via"], e["client_id"]) for e in created] == [("auto-create (Metadata)", "auto-client")]
    offsets = [e for e in node.log_lines() if e.get("topic") == "__consumer_offsets"
               and e.get("event") in ("topic_created", "offsets_topic_created")]
    assert [e["event"] for e in offsets] == ["offsets_topic_created"]
