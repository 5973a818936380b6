"""API keys, flexible versions, header versions and the served version table."""

from __future__ import annotations

import importlib
import pkgutil

import kafka.protocol as kp
import pytest
from kafka.protocol.api_message import ApiMessage

from sundial.protocol.api_keys import (
    FLEXIBLE_FROM,
    SUPPORTED_VERSIONS,
    ApiKey,
    is_flexible,
    request_header_version,
    response_header_version,
)


def _kafka_python_messages():
    found = {}
    for sub in ("metadata", "consumer", "producer", "admin"):
        pkg = importlib.import_module(f"kafka.protocol.{sub}")
        for info in pkgutil.iter_modules(pkg.__path__):
            module = importlib.import_module(f"kafka.protocol.{sub}.{info.name}")
            for obj in vars(module).values():
                if isinstance(obj, type) and issubclass(obj, ApiMessage) and obj is not ApiMessage \
                        and obj.__module__ == module.__name__:
                    found[obj.__name__] = obj
    sasl = importlib.import_module("kafka.protocol.sasl")
    for name in ("SaslHandshakeRequest", "SaslAuthenticateRequest"):
        found[name] = getattr(sasl, name)
    return sorted(found.values(), key=lambda c: c.__name__)


MESSAGES = _kafka_python_messages()
assert kp  # the package itself is only imported for its schemas


@pytest.mark.parametrize("cls", MESSAGES, ids=[c.__name__ for c in MESSAGES])
def test_flexible_versions_match_kafka_json(cls):
    for version in range(0, cls.max_version + 3):
        assert is_flexible(cls.API_KEY, version) == bool(cls.flexible_version_q(version)), version


def test_every_key_has_a_flexible_rule_and_a_name():
    assert set(FLEXIBLE_FROM) == {int(k) for k in ApiKey}
    assert ApiKey(60).name == "DESCRIBE_CLUSTER" and ApiKey.GET_TELEMETRY_SUBSCRIPTIONS == 71


def test_header_versions():
    assert request_header_version(ApiKey.PRODUCE, 8) == 1
    assert request_header_version(ApiKey.PRODUCE, 9) == 2
    assert request_header_version(ApiKey.CONTROLLED_SHUTDOWN, 0) == 0
    assert request_header_version(ApiKey.SASL_HANDSHAKE, 1) == 1
    assert response_header_version(ApiKey.FETCH, 12) == 1
    assert response_header_version(ApiKey.FETCH, 11) == 0
    for v in range(5):
        assert response_header_version(ApiKey.API_VERSIONS, v) == 0
    assert request_header_version(ApiKey.API_VERSIONS, 3) == 2


#: What this package promises (the brief's list; Produce/Fetch/ListOffsets hand-written).
EXPECTED = {
    "PRODUCE": (0, 9), "FETCH": (0, 12), "LIST_OFFSETS": (0, 9), "METADATA": (0, 12),
    "OFFSET_COMMIT": (0, 10), "OFFSET_FETCH": (0, 10), "FIND_COORDINATOR": (0, 6), "JOIN_GROUP": (0, 9),
    "HEARTBEAT": (0, 4), "LEAVE_GROUP": (0, 5), "SYNC_GROUP": (0, 5), "DESCRIBE_GROUPS": (0, 6),
    "LIST_GROUPS": (0, 5), "SASL_HANDSHAKE": (0, 1), "API_VERSIONS": (0, 3), "CREATE_TOPICS": (0, 7),
    "DELETE_TOPICS": (0, 6), "DELETE_RECORDS": (0, 2), "INIT_PRODUCER_ID": (0, 4),
    "OFFSET_FOR_LEADER_EPOCH": (0, 4), "DESCRIBE_CONFIGS": (0, 4), "ALTER_CONFIGS": (0, 2),
    "SASL_AUTHENTICATE": (0, 2), "CREATE_PARTITIONS": (0, 3), "DELETE_GROUPS": (0, 2),
    "INCREMENTAL_ALTER_CONFIGS": (0, 1), "OFFSET_DELETE": (0, 0), "DESCRIBE_CLUSTER": (0, 1),
    "DESCRIBE_ACLS": (0, 3), "CREATE_ACLS": (0, 3), "DELETE_ACLS": (0, 3),
    "DESCRIBE_USER_SCRAM_CREDENTIALS": (0, 0), "ALTER_USER_SCRAM_CREDENTIALS": (0, 0),
    "DESCRIBE_CLIENT_QUOTAS": (0, 1), "ALTER_CLIENT_QUOTAS": (0, 1),
    "ADD_PARTITIONS_TO_TXN": (0, 3), "ADD_OFFSETS_TO_TXN": (0, 3), "END_TXN": (0, 3),
    "TXN_OFFSET_COMMIT": (0, 3), "DESCRIBE_PRODUCERS": (0, 0), "DESCRIBE_TRANSACTIONS": (0, 0),
    "LIST_TRANSACTIONS": (0, 1), "WRITE_TXN_MARKERS": (1, 2),
    # Kafka 4 group protocols (KIP-848, KIP-932), as Kafka 4.2 serves them
    "CONSUMER_GROUP_HEARTBEAT": (0, 1), "CONSUMER_GROUP_DESCRIBE": (0, 1), "SHARE_GROUP_HEARTBEAT": (1, 1),
    "SHARE_GROUP_DESCRIBE": (1, 1), "SHARE_FETCH": (1, 2), "SHARE_ACKNOWLEDGE": (1, 2),
    "DESCRIBE_SHARE_GROUP_OFFSETS": (0, 1), "ALTER_SHARE_GROUP_OFFSETS": (0, 0), "DELETE_SHARE_GROUP_OFFSETS": (0, 0),
    # Log dirs and topic partitions: Kafka 4.0-4.2's DescribeLogDirs (plus v0), KIP-966
    "DESCRIBE_LOG_DIRS": (0, 4), "DESCRIBE_TOPIC_PARTITIONS": (0, 0), "ALTER_REPLICA_LOG_DIRS": (1, 2),
}


def test_supported_versions_table():
    assert {k.name: v for k, v in SUPPORTED_VERSIONS.items()} == EXPECTED
    assert ApiKey.GET_TELEMETRY_SUBSCRIPTIONS not in SUPPORTED_VERSIONS


#: (client, api, version it sent against Tansu) from client-matrix.md; the client then
#: uses min(its max, our max), which must be at least the client's minimum.
CLIENT_MINIMUMS = {  # api: the lowest version any client in the matrix needs
    "PRODUCE": 3, "FETCH": 4, "LIST_OFFSETS": 1, "METADATA": 1, "API_VERSIONS": 0,
}
CLIENT_SENT = {
    "kafka-python": {"METADATA": 12, "PRODUCE": 9, "FETCH": 12, "LIST_OFFSETS": 9, "FIND_COORDINATOR": 6,
                     "JOIN_GROUP": 7, "SYNC_GROUP": 5, "LEAVE_GROUP": 5, "OFFSET_COMMIT": 8,
                     "OFFSET_FETCH": 8, "CREATE_TOPICS": 7, "DESCRIBE_CONFIGS": 4, "INIT_PRODUCER_ID": 4},
    "aiokafka": {"API_VERSIONS": 0, "METADATA": 5, "PRODUCE": 7, "FETCH": 11, "LIST_OFFSETS": 3,
                 "FIND_COORDINATOR": 1, "JOIN_GROUP": 5, "SYNC_GROUP": 3, "OFFSET_COMMIT": 3,
                 "OFFSET_FETCH": 3, "CREATE_TOPICS": 3, "DESCRIBE_CONFIGS": 2},
    "confluent-kafka": {"API_VERSIONS": 3, "METADATA": 12, "LIST_OFFSETS": 7, "FIND_COORDINATOR": 2,
                        "JOIN_GROUP": 5, "HEARTBEAT": 3, "LEAVE_GROUP": 1, "SYNC_GROUP": 3,
                        "OFFSET_COMMIT": 9, "OFFSET_FETCH": 9, "CREATE_TOPICS": 4, "DESCRIBE_CONFIGS": 1},
    "kcat": {"API_VERSIONS": 3, "METADATA": 4, "PRODUCE": 7, "FETCH": 11, "LIST_OFFSETS": 2,
             "FIND_COORDINATOR": 2, "JOIN_GROUP": 5, "HEARTBEAT": 3, "LEAVE_GROUP": 1, "SYNC_GROUP": 3,
             "OFFSET_COMMIT": 7},
    "kafkajs": {"API_VERSIONS": 2, "METADATA": 6, "PRODUCE": 7, "FETCH": 11, "LIST_OFFSETS": 3,
                "FIND_COORDINATOR": 2, "JOIN_GROUP": 5, "HEARTBEAT": 3, "LEAVE_GROUP": 3, "SYNC_GROUP": 3,
                "OFFSET_COMMIT": 5, "OFFSET_FETCH": 4, "CREATE_TOPICS": 3, "DESCRIBE_CONFIGS": 2},
}


@pytest.mark.parametrize("client", sorted(CLIENT_SENT))
def test_every_version_the_clients_sent_is_served(client):
    for api, version in CLIENT_SENT[client].items():
        lo, hi = SUPPORTED_VERSIONS[ApiKey[api]]
        # librdkafka sends Produce v10 / Fetch v16 against Tansu; it negotiates down to our max.
        assert lo <= version <= hi, (client, api, version)


def test_negotiated_versions_meet_client_minimums():
    for api, minimum in CLIENT_MINIMUMS.items():
        assert SUPPORTED_VERSIONS[ApiKey[api]][1] >= minimum
