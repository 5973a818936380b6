"""The GROUP config resource (type 32) through real admin clients against the daemon.

confluent-kafka's AdminClient (librdkafka maps ``ResourceType.GROUP`` to config resource 32)
and kafka-python's admin (``ConfigResourceType.GROUP``) set, describe, reset and replace a
group's keys; an out-of-range value is refused with the broker's message; the values survive a
clean restart and a kill -9; with the ACL authorizer on, DESCRIBE_CONFIGS / ALTER_CONFIGS on
the GROUP resource decide, as in Kafka.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from confluent_kafka.admin import ResourceType as RdResourceType
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType

from sundial.broker.authorizer import AclRule, AclStore

from .conftest import DAEMONS_UNAVAILABLE

TIMEOUT_S = 30


def group_id(prefix: str = "g") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def rd_admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def rd_describe(admin: AdminClient, group: str) -> dict[str, tuple[str, ConfigSource]]:
    [future] = admin.describe_configs([ConfigResource(RdResourceType.GROUP, group)],
                                      request_timeout=TIMEOUT_S).values()
    return {name: (entry.value, ConfigSource(entry.source)) for name, entry in future.result(TIMEOUT_S).items()}


def rd_incremental(admin: AdminClient, group: str, **ops) -> None:
    """ops: key_with_underscores=(AlterConfigOpType, value)."""
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=op) for k, (op, v) in ops.items()]
    [future] = admin.incremental_alter_configs([ConfigResource(RdResourceType.GROUP, group,
                                                               incremental_configs=entries)],
                                               request_timeout=TIMEOUT_S).values()
    future.result(TIMEOUT_S)


SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE


def test_confluent_admin_sets_describes_and_resets_group_configs(broker):
    admin, group = rd_admin(broker.bootstrap), group_id()
    before = rd_describe(admin, group)
    assert len(before) == 11
    assert before["consumer.session.timeout.ms"] == ("45000", ConfigSource.DEFAULT_CONFIG)
    assert before["share.auto.offset.reset"] == ("latest", ConfigSource.DEFAULT_CONFIG)
    rd_incremental(admin, group, consumer_session_timeout_ms=(SET, "50000"), share_auto_offset_reset=(SET, "earliest"),
                   share_isolation_level=(SET, "read_committed"))
    after = rd_describe(admin, group)
    assert after["consumer.session.timeout.ms"] == ("50000", ConfigSource.GROUP_CONFIG)
    assert after["share.auto.offset.reset"] == ("earliest", ConfigSource.GROUP_CONFIG)
    assert after["share.isolation.level"] == ("read_committed", ConfigSource.GROUP_CONFIG)
    assert after["consumer.heartbeat.interval.ms"] == ("5000", ConfigSource.DEFAULT_CONFIG)
    rd_incremental(admin, group, share_auto_offset_reset=(SET, "by_duration:PT15M"),
                   consumer_session_timeout_ms=(DELETE, None))
    after = rd_describe(admin, group)
    assert after["share.auto.offset.reset"] == ("by_duration:PT15M", ConfigSource.GROUP_CONFIG)
    assert after["consumer.session.timeout.ms"] == ("45000", ConfigSource.DEFAULT_CONFIG)
    assert rd_describe(admin, group_id()) == before       # other groups keep the defaults


@pytest.mark.parametrize("key,value,message", [
    ("consumer.session.timeout.ms", "30000",
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ("consumer.heartbeat.interval.ms", "20000",
     "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
    ("share.auto.offset.reset", "by_duration:-PT1H", "The value must be either 'earliest', 'latest' or of the format"),
    ("share.delivery.count.limit", "3", "Unknown group config name: share.delivery.count.limit"),
])
def test_out_of_range_values_are_refused_with_the_brokers_message(broker, key, value, message):
    admin, group = rd_admin(broker.bootstrap), group_id()
    with pytest.raises(KafkaException) as info:
        rd_incremental(admin, group, **{key.replace(".", "_"): (SET, value)})
    error = info.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert message in error.str()
    assert all(source == ConfigSource.DEFAULT_CONFIG for _, source in rd_describe(admin, group).values())


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_confluent_alter_configs_replaces_the_set(broker):
    admin, group = rd_admin(broker.bootstrap), group_id()
    rd_incremental(admin, group, consumer_session_timeout_ms=(SET, "50000"))
    [future] = admin.alter_configs([ConfigResource(RdResourceType.GROUP, group,
                                                   set_config={"consumer.heartbeat.interval.ms": "6000"})],
                                   request_timeout=TIMEOUT_S).values()
    future.result(TIMEOUT_S)
    described = rd_describe(admin, group)
    assert described["consumer.heartbeat.interval.ms"] == ("6000", ConfigSource.GROUP_CONFIG)
    assert described["consumer.session.timeout.ms"] == ("45000", ConfigSource.DEFAULT_CONFIG)
    [future] = admin.incremental_alter_configs(
        [ConfigResource(RdResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("consumer.session.timeout.ms", "55000", incremental_operation=SET)])],
        validate_only=True, request_timeout=TIMEOUT_S).values()
    future.result(TIMEOUT_S)
    assert rd_describe(admin, group)["consumer.session.timeout.ms"] == ("45000", ConfigSource.DEFAULT_CONFIG)


def test_kafka_python_admin_supports_group_resources(broker):
    group = group_id()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        result = admin.alter_configs([KpConfigResource(ConfigResourceType.GROUP, group,
                                                       configs={"share.session.timeout.ms": "50000"})],
                                     incremental=True)
        assert result == {"group": {group: "OK"}}
        described = admin.describe_configs([KpConfigResource(ConfigResourceType.GROUP, group)], config_filter="all")
        configs = described["group"][group]
        assert (configs["share.session.timeout.ms"]["value"], configs["share.session.timeout.ms"]["config_source"]) \
            == ("50000", "DYNAMIC_GROUP_CONFIG")
        assert configs["share.heartbeat.interval.ms"]["config_source"] == "DEFAULT_CONFIG"
        modified = admin.describe_configs([KpConfigResource(ConfigResourceType.GROUP, group)])["group"][group]
        assert list(modified) == ["share.session.timeout.ms"]
        refused = admin.alter_configs([KpConfigResource(ConfigResourceType.GROUP, group,
                                                        configs={"share.session.timeout.ms": "1"})], incremental=True)
        assert "InvalidConfigurationError" in refused["group"][group]
        admin.reset_configs([KpConfigResource(ConfigResourceType.GROUP, group, configs=["share.session.timeout.ms"])],
                            incremental=True)
        assert admin.describe_configs([KpConfigResource(ConfigResourceType.GROUP, group)])["group"][group] == {}
    finally:
        admin.close()


@pytest.mark.skipif(DAEMONS_UNAVAILABLE is not None, reason=DAEMONS_UNAVAILABLE or "")
def test_group_configs_survive_a_restart_and_a_kill(broker_factory):
    node = broker_factory(**{"group.consumer.heartbeat.interval.ms": "6000"}).start()
    group = group_id()
    rd_incremental(rd_admin(node.bootstrap), group, consumer_session_timeout_ms=(SET, "50000"))
    node.restart()
    described = rd_describe(rd_admin(node.bootstrap), group)
    assert described["consumer.session.timeout.ms"] == ("50000", ConfigSource.GROUP_CONFIG)
    assert described["consumer.heartbeat.interval.ms"] == ("6000", ConfigSource.DEFAULT_CONFIG)
    rd_incremental(rd_admin(node.bootstrap), group, share_isolation_level=(SET, "read_committed"))
    node.kill()                                     # answered means durable: nothing may be lost
    node.start()
    described = rd_describe(rd_admin(node.bootstrap), group)
    assert described["consumer.session.timeout.ms"] == ("50000", ConfigSource.GROUP_CONFIG)
    assert described["share.isolation.level"] == ("read_committed", ConfigSource.GROUP_CONFIG)
    assert any(e.get("event") == "group_configs_loaded" for e in node.log_lines())


@pytest.mark.skipif(DAEMONS_UNAVAILABLE is not None, reason=DAEMONS_UNAVAILABLE or "")
def test_group_acls_decide_describe_and_alter(broker_factory):
    node = broker_factory(**{"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})
    AclStore(f"{node.data_dir}/acls.json").add([
        AclRule.make("User:ANONYMOUS", "GROUP", "readable", "DESCRIBE_CONFIGS"),
        AclRule.make("User:ANONYMOUS", "GROUP", "tunable", "ALTER_CONFIGS")])
    node.start()
    admin = rd_admin(node.bootstrap)
    assert rd_describe(admin, "readable")["consumer.session.timeout.ms"][0] == "45000"
    for denied in (lambda: rd_describe(admin, "secret"),
                   lambda: rd_incremental(admin, "readable", consumer_session_timeout_ms=(SET, "50000"))):
        with pytest.raises(KafkaException) as info:
            denied()
        assert info.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    rd_incremental(admin, "tunable", consumer_session_timeout_ms=(SET, "50000"))
    assert rd_describe(admin, "tunable")["consumer.session.timeout.ms"] == ("50000", ConfigSource.GROUP_CONFIG)


def test_streams_keys_set_on_the_broker_are_warned_as_without_effect(broker_factory):
    d = broker_factory(**{"group.share.record.lock.duration.ms": "20000",
                          "group.streams.session.timeout.ms": "45000",
                          "share.coordinator.threads": "2",
                          "share.coordinator.snapshot.update.records.per.snapshot": "100"}).start()
    warned = sorted(e["key"] for e in d.log_lines() if e.get("event") == "config_key_without_effect")
    # share groups are served; one node's share coordinator has no threads to set
    assert warned == ["group.streams.session.timeout.ms", "share.coordinator.threads"]
