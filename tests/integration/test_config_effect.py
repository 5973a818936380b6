"""Settings accepted for compatibility only, and misspelled keys, against the real daemon.

* A broker key without effect set in the configuration is warned about at start-up
  (``config_key_without_effect`` with the reason); a misspelled broker key is warned as ignored with
  the key it likely stands for (``did_you_mean``).
* A topic key without effect given to CreateTopics or IncrementalAlterConfigs is accepted, warned
  about, and described read-only with a doc saying so (confluent-kafka's AdminClient).
* An unknown topic key is refused with INVALID_CONFIG, as Kafka refuses it, and the message names the
  key it likely stands for (kafka-python and confluent-kafka).
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from confluent_kafka.admin import ResourceType
from kafka import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import InvalidConfigurationError

TIMEOUT_S = 30


def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def warnings(daemon, event: str) -> list[dict]:
    return [e for e in daemon.log_lines() if e.get("event") == event]


def test_start_up_warns_of_keys_without_effect_and_of_typos(broker_factory):
    d = broker_factory(**{"min.insync.replicas": "2", "default.replication.factor": "3",
                          "log.retention.hour": "5", "zookeeper.connect": "localhost:2181"}).start()
    without = {e["key"]: e["reason"] for e in warnings(d, "config_key_without_effect")}
    assert set(without) == {"min.insync.replicas", "default.replication.factor"}
    assert all(without.values())
    ignored = {e["key"]: e.get("did_you_mean") for e in warnings(d, "config_key_ignored")}
    assert ignored == {"log.retention.hour": "log.retention.hours", "zookeeper.connect": None}


def test_topic_keys_without_effect_are_accepted_warned_and_read_only(broker):
    admin, name = AdminClient({"bootstrap.servers": broker.bootstrap}), topic_name()
    [future] = admin.create_topics([NewTopic(name, 1, 1, config={"min.insync.replicas": "2",
                                                                "retention.ms": "3600000"})],
                                   request_timeout=TIMEOUT_S).values()
    future.result(TIMEOUT_S)
    entries = [ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)]
    [future] = admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, name,
                                                               incremental_configs=entries)],
                                               request_timeout=TIMEOUT_S).values()
    future.result(TIMEOUT_S)
    warned = [(e["key"], e["topic"]) for e in warnings(broker, "config_key_without_effect") if e.get("topic") == name]
    assert warned == [("min.insync.replicas", name), ("unclean.leader.election.enable", name)]
    [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name)], request_timeout=TIMEOUT_S).values()
    rows = future.result(TIMEOUT_S)
    for key, value in (("min.insync.replicas", "2"), ("unclean.leader.election.enable", "true")):
        assert rows[key].value == value
        assert rows[key].is_read_only, key
    assert not rows["retention.ms"].is_read_only


def test_unknown_topic_key_is_refused_with_a_suggestion(broker):
    admin, name = AdminClient({"bootstrap.servers": broker.bootstrap}), topic_name()
    [future] = admin.create_topics([NewTopic(name, 1, 1, config={"retention.msec": "1000"})],
                                   request_timeout=TIMEOUT_S).values()
    with pytest.raises(KafkaException) as info:
        future.result(TIMEOUT_S)
    err = info.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG
    assert "did you mean retention.ms?" in err.str()

    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        with pytest.raises(InvalidConfigurationError) as kp_info:
            kp.create_topics([KpNewTopic(topic_name(), 1, 1, topic_configs={"cleanup.polcy": "compact"})])
        assert "did you mean cleanup.policy?" in str(kp_info.value)
    finally:
        kp.close()
