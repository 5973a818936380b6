"""config/share.py: the share.coordinator.* keys (Kafka's names, defaults, bounds) and a group's share settings."""

from __future__ import annotations

import pytest

from sundial.config import BrokerConfig
from sundial.config.defs import ConfigError
from sundial.config.group import BY_DURATION, EARLIEST, LATEST, resolve_group_config
from sundial.config.broker import BROKER_CONFIGS
from sundial.config.group import GROUP_CONFIGS
from sundial.config.share import ALL_SHARE_KEYS, SHARE_COORDINATOR_CONFIGS, SHARE_COORDINATOR_KEYS_WITHOUT_EFFECT, \
    ShareCoordinatorConfig, share_group_settings

KAFKA_DEFAULTS = {
    "share.coordinator.state.topic.num.partitions": 50,
    "share.coordinator.state.topic.segment.bytes": 104_857_600,
    "share.coordinator.state.topic.compression.codec": 0,
    "share.coordinator.threads": 1,
    "share.coordinator.snapshot.update.records.per.snapshot": 500,
    "share.coordinator.write.timeout.ms": 5000,
    "share.coordinator.load.buffer.size": 5 * 1024 * 1024,
    "share.coordinator.append.linger.ms": 10,
    "share.coordinator.state.topic.prune.interval.ms": 300_000,
    "share.coordinator.cold.partition.snapshot.interval.ms": 300_000,
}


def test_share_coordinator_keys_and_defaults():
    assert {d.name: d.default for d in SHARE_COORDINATOR_CONFIGS} == KAFKA_DEFAULTS
    config = BrokerConfig({})
    assert config.share_coordinator == ShareCoordinatorConfig()
    for key, value in KAFKA_DEFAULTS.items():
        assert config[key] == value
    assert SHARE_COORDINATOR_KEYS_WITHOUT_EFFECT < set(KAFKA_DEFAULTS)
    set_ = BrokerConfig({"share.coordinator.snapshot.update.records.per.snapshot": "0",
                         "share.coordinator.write.timeout.ms": "100"})
    assert set_.share_coordinator.snapshot_update_records_per_snapshot == 0
    assert set_.share_coordinator.write_timeout_ms == 100


@pytest.mark.parametrize("key, value", [
    ("share.coordinator.snapshot.update.records.per.snapshot", "501"),
    ("share.coordinator.snapshot.update.records.per.snapshot", "-1"),
    ("share.coordinator.state.topic.num.partitions", "0"),
    ("share.coordinator.write.timeout.ms", "0"),
    ("share.coordinator.state.topic.compression.codec", "5"),
])
def test_share_coordinator_bounds(key, value):
    with pytest.raises(ConfigError):
        BrokerConfig({key: value})


def test_share_group_settings_resolve_group_over_broker():
    broker = BrokerConfig({"group.share.delivery.count.limit": "7", "group.share.partition.max.record.locks": "300",
                           "group.share.record.lock.duration.ms": "40000"}).group_coordinator
    defaults = share_group_settings(resolve_group_config({}, broker)[0], broker.share)
    assert (defaults.record_lock_duration_ms, defaults.delivery_count_limit, defaults.partition_max_record_locks,
            defaults.auto_offset_reset.strategy, defaults.isolation_level, defaults.read_committed,
            defaults.session_timeout_ms, defaults.heartbeat_interval_ms) == \
        (40000, 7, 300, LATEST, "read_uncommitted", False, 45000, 5000)
    group = resolve_group_config({"share.record.lock.duration.ms": "20000", "share.isolation.level": "read_committed",
                                  "share.auto.offset.reset": "by_duration:PT1M30.5S"}, broker)[0]
    s = share_group_settings(group, broker.share)
    assert (s.record_lock_duration_ms, s.read_committed) == (20000, True)
    assert s.auto_offset_reset.strategy == BY_DURATION and s.auto_offset_reset.duration_ms == 90_500
    early = share_group_settings(resolve_group_config({"share.auto.offset.reset": "earliest"}, broker)[0], broker.share)
    assert early.auto_offset_reset.strategy == EARLIEST


def test_every_share_key_is_indexed():
    broker = {d.name for d in BROKER_CONFIGS if d.name.startswith(("group.share.", "share."))}
    group = {d.name for d in GROUP_CONFIGS if d.name.startswith("share.")}
    assert ALL_SHARE_KEYS == broker | group
    assert {"group.share.record.lock.duration.ms", "share.fetch.purgatory.purge.interval.requests",
            "share.coordinator.write.timeout.ms", "share.auto.offset.reset", "share.isolation.level"} <= ALL_SHARE_KEYS
