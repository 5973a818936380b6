"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs on the GROUP config resource (type 32), as
Kafka 4.2 answers them: values and sources, Kafka's error codes and messages, validate_only, and
the GROUP ACLs (DESCRIBE_CONFIGS / ALTER_CONFIGS, GROUP_AUTHORIZATION_FAILED)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace as NS

import pytest

from sundial.broker.authorizer import AclRule, AclStore, Authorizer
from sundial.broker.group_configs import GroupConfigStore
from sundial.broker.handlers.admin import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from sundial.config import BrokerConfig
from sundial.protocol.errors import ErrorCode

GROUP = 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DEFAULT_CONFIG, DYNAMIC_GROUP_CONFIG = 5, 8
INT_TYPE, STRING_TYPE = 3, 2


@pytest.fixture
def ctx(tmp_path):
    config = BrokerConfig({"group.consumer.heartbeat.interval.ms": "6000"})
    store = GroupConfigStore.open(str(tmp_path), config.group_coordinator)
    broker = NS(config=config, group_configs=store, authorizer=None, node_id=1, logs=None)
    return NS(broker=broker, api_version=4, api_key=44, principal="User:alice", client_host="127.0.0.1",
              connection=None, client_id="test")


def describe(ctx, *names, keys=None, synonyms=False, documentation=False):
    request = NS(resources=[NS(resource_type=GROUP, resource_name=n, configuration_keys=keys) for n in names],
                 include_synonyms=synonyms, include_documentation=documentation)
    return asyncio.run(handle_describe_configs(ctx, request))["results"]


def values(result) -> dict:
    return {c["name"]: (c["value"], c["config_source"]) for c in result["configs"]}


def incremental(ctx, name, *ops, validate_only=False, resource_type=GROUP):
    request = NS(resources=[NS(resource_type=resource_type, resource_name=name,
                               configs=[NS(name=k, config_operation=op, value=v) for k, op, v in ops])],
                 validate_only=validate_only)
    return asyncio.run(handle_incremental_alter_configs(ctx, request))["responses"]


def legacy(ctx, name, configs, validate_only=False):
    request = NS(resources=[NS(resource_type=GROUP, resource_name=name,
                               configs=[NS(name=k, value=v) for k, v in configs.items()])],
                 validate_only=validate_only)
    return asyncio.run(handle_alter_configs(ctx, request))["responses"]


def outcome(responses):
    return [(r["error_code"], r["error_message"]) for r in responses]


def test_describe_a_group_without_configs_reports_every_key_with_the_broker_defaults(ctx):
    [result] = describe(ctx, "g1", synonyms=True, documentation=True)
    assert (result["error_code"], result["resource_type"], result["resource_name"]) == (0, GROUP, "g1")
    rows = {c["name"]: c for c in result["configs"]}
    assert values(result) == {
        "consumer.session.timeout.ms": ("45000", DEFAULT_CONFIG), "consumer.heartbeat.interval.ms": ("6000", DEFAULT_CONFIG),
        "share.session.timeout.ms": ("45000", DEFAULT_CONFIG), "share.heartbeat.interval.ms": ("5000", DEFAULT_CONFIG),
        "share.record.lock.duration.ms": ("30000", DEFAULT_CONFIG), "share.auto.offset.reset": ("latest", DEFAULT_CONFIG),
        "share.isolation.level": ("read_uncommitted", DEFAULT_CONFIG),
        "streams.session.timeout.ms": ("45000", DEFAULT_CONFIG), "streams.heartbeat.interval.ms": ("5000", DEFAULT_CONFIG),
        "streams.num.standby.replicas": ("0", DEFAULT_CONFIG),
        "streams.initial.rebalance.delay.ms": ("3000", DEFAULT_CONFIG)}
    row = rows["consumer.heartbeat.interval.ms"]
    assert row["synonyms"] == [{"name": "consumer.heartbeat.interval.ms", "value": "6000", "source": DEFAULT_CONFIG}]
    assert row["read_only"] is False and row["is_sensitive"] is False and row["is_default"] is True
    assert row["config_type"] == INT_TYPE and rows["share.isolation.level"]["config_type"] == STRING_TYPE
    assert row["documentation"]
    [plain] = describe(ctx, "g1")
    assert all(c["synonyms"] == [] and c["documentation"] is None for c in plain["configs"])


def test_incremental_set_and_delete_round_trip(ctx):
    assert outcome(incremental(ctx, "g1", ("consumer.session.timeout.ms", SET, "50000"),
                               ("share.auto.offset.reset", SET, "earliest"))) == [(0, None)]
    [result] = describe(ctx, "g1", keys=["consumer.session.timeout.ms", "share.auto.offset.reset"], synonyms=True)
    assert values(result) == {"consumer.session.timeout.ms": ("50000", DYNAMIC_GROUP_CONFIG),
                              "share.auto.offset.reset": ("earliest", DYNAMIC_GROUP_CONFIG)}
    assert result["configs"][0]["synonyms"] == [
        {"name": "consumer.session.timeout.ms", "value": "50000", "source": DYNAMIC_GROUP_CONFIG}]
    assert result["configs"][0]["is_default"] is False
    assert outcome(incremental(ctx, "g1", ("consumer.session.timeout.ms", DELETE, None),
                               ("no.such.key", DELETE, None))) == [(0, None)]      # deleting an unset key: no-op
    assert ctx.broker.group_configs.overrides("g1") == {"share.auto.offset.reset": "earliest"}
    [result] = describe(ctx, "g1", keys=[])                   # Kafka: an empty key list means every key
    assert len(result["configs"]) == 11


def test_refusals_carry_kafkas_codes_and_messages(ctx):
    cases = [
        ([("consumer.session.timeout.ms", SET, "1000")], ErrorCode.INVALID_CONFIG,
         "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
        ([("consumer.session.timeout.ms", SET, "abc")], ErrorCode.INVALID_CONFIG,
         "Invalid value abc for configuration consumer.session.timeout.ms: Not a number of type INT"),
        ([("share.isolation.level", SET, "serializable")], ErrorCode.INVALID_CONFIG,
         "Invalid value serializable for configuration share.isolation.level: String must be one of: "
         "read_committed, read_uncommitted"),
        ([("no.such.key", SET, "1")], ErrorCode.INVALID_CONFIG, "Unknown group config name: no.such.key"),
        ([("consumer.session.timeout.ms", APPEND, "1")], ErrorCode.INVALID_CONFIG,
         "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST."),
        ([("share.auto.offset.reset", SUBTRACT, "latest")], ErrorCode.INVALID_CONFIG,
         "Can't SUBTRACT to key share.auto.offset.reset because its type is not LIST."),
        ([("consumer.session.timeout.ms", SET, None)], ErrorCode.INVALID_REQUEST,
         "Null value not supported for : consumer.session.timeout.ms"),
        ([("consumer.session.timeout.ms", SET, "50000"), ("consumer.session.timeout.ms", DELETE, None)],
         ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys"),
    ]
    for ops, code, message in cases:
        [(got_code, got_message)] = outcome(incremental(ctx, "g1", *ops))
        assert got_code == code, ops
        assert got_message.startswith(message), (got_message, message)
    [(code, message)] = outcome(incremental(ctx, "", ("consumer.session.timeout.ms", SET, "50000")))
    assert (code, message) == (ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
    [result] = describe(ctx, "")
    assert (result["error_code"], result["error_message"]) == (ErrorCode.INVALID_REQUEST,
                                                               "Group name must not be empty")
    assert ctx.broker.group_configs.groups() == []


def test_validate_only_changes_nothing(ctx):
    assert outcome(incremental(ctx, "g1", ("consumer.session.timeout.ms", SET, "50000"), validate_only=True)) == [
        (0, None)]
    assert outcome(legacy(ctx, "g1", {"share.isolation.level": "read_committed"}, validate_only=True)) == [(0, None)]
    assert ctx.broker.group_configs.groups() == []


def test_alter_configs_replaces_the_whole_set(ctx):
    incremental(ctx, "g1", ("consumer.session.timeout.ms", SET, "50000"), ("share.isolation.level", SET,
                                                                            "read_committed"))
    assert outcome(legacy(ctx, "g1", {"consumer.heartbeat.interval.ms": "7000"})) == [(0, None)]
    assert ctx.broker.group_configs.overrides("g1") == {"consumer.heartbeat.interval.ms": "7000"}
    assert outcome(legacy(ctx, "g1", {})) == [(0, None)]
    assert ctx.broker.group_configs.groups() == []


def test_a_resource_given_twice_is_refused_both_times(ctx):
    request = NS(resources=[NS(resource_type=GROUP, resource_name="g1",
                               configs=[NS(name="consumer.session.timeout.ms", config_operation=SET, value="50000")]),
                            NS(resource_type=GROUP, resource_name="g2",
                               configs=[NS(name="consumer.session.timeout.ms", config_operation=SET, value="50000")]),
                            NS(resource_type=GROUP, resource_name="g1", configs=[])],
                 validate_only=False)
    responses = asyncio.run(handle_incremental_alter_configs(ctx, request))["responses"]
    assert outcome(responses) == [(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."), (0, None),
                                  (ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")]
    assert ctx.broker.group_configs.groups() == ["g2"]


def test_group_acls(ctx, tmp_path):
    store = AclStore(str(tmp_path / "acls.json"))
    store.add([AclRule.make("User:alice", "GROUP", "readable", "DESCRIBE_CONFIGS", "ALLOW", "*", "LITERAL"),
               AclRule.make("User:alice", "GROUP", "tunable", "ALTER_CONFIGS", "ALLOW", "*", "LITERAL")])
    ctx.broker.authorizer = Authorizer(store)
    results = describe(ctx, "readable", "tunable", "secret")
    assert [(r["resource_name"], r["error_code"]) for r in results] == [
        ("readable", 0), ("tunable", 0), ("secret", ErrorCode.GROUP_AUTHORIZATION_FAILED)]  # ALTER implies DESCRIBE
    assert results[2]["configs"] == []
    setting = ("consumer.session.timeout.ms", SET, "50000")
    assert outcome(incremental(ctx, "readable", setting))[0][0] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert outcome(legacy(ctx, "secret", {"consumer.session.timeout.ms": "50000"}))[0][0] == \
        ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert outcome(incremental(ctx, "tunable", setting)) == [(0, None)]
    assert ctx.broker.group_configs.groups() == ["tunable"]


def test_a_store_that_cannot_be_written_answers_a_storage_error_and_changes_nothing(ctx, monkeypatch):
    def full_disk(groups):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ctx.broker.group_configs, "_save", full_disk)
    [(code, message)] = outcome(incremental(ctx, "g1", ("consumer.session.timeout.ms", SET, "50000")))
    assert (code, message) == (ErrorCode.KAFKA_STORAGE_ERROR, "cannot store the group configs: No space left on device")
    assert ctx.broker.group_configs.groups() == []
    assert ctx.broker.group_configs.consumer_session_timeout_ms("g1") == 45000
