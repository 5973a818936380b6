"""config/: Kafka names, defaults, synonyms, the three timestamp-bound spellings, and refusals."""

import pytest

from sundial.config import (
    BrokerConfig,
    ConfigError,
    ConfigSource,
    LONG_MAX,
    describe_topic_config,
    load_broker_config,
    parse_properties,
    record_version_for,
    resolve_topic_config,
)


def test_kafka_topic_defaults():
    t = resolve_topic_config()
    assert t.segment_bytes == 1_073_741_824
    assert t.segment_ms == 604_800_000
    assert t.segment_index_bytes == 10_485_760
    assert t.index_interval_bytes == 4096
    assert t.retention_ms == 604_800_000
    assert t.retention_bytes == -1
    assert t.max_message_bytes == 1_048_588
    assert t.file_delete_delay_ms == 60_000
    assert t.message_timestamp_type == "CreateTime"
    assert t.message_timestamp_before_max_ms == LONG_MAX
    assert t.message_timestamp_after_max_ms == 3_600_000
    assert t.record_version == 2
    assert t.flush_messages == LONG_MAX and t.flush_ms == LONG_MAX


def test_broker_synonyms_first_set_wins_with_unit_conversion():
    b = BrokerConfig({"log.retention.hours": "2", "log.retention.minutes": "30"})
    assert b.topic_defaults().retention_ms == 30 * 60_000
    b = BrokerConfig({"log.retention.hours": "2"})
    assert b.topic_defaults().retention_ms == 2 * 3_600_000
    b = BrokerConfig({"log.roll.hours": "1", "log.segment.bytes": "1000"})
    assert b.topic_defaults().segment_ms == 3_600_000
    assert b.topic_defaults().segment_bytes == 1000
    b = BrokerConfig({"log.retention.ms": "-5"})
    assert b.topic_defaults().retention_ms == -5 or b.topic_defaults().retention_ms < 0


@pytest.mark.parametrize("key", ["message.timestamp.difference.max.ms", "max.message.time.difference.ms"])
def test_symmetric_bound_spellings(key):
    t = resolve_topic_config({key: "60000"})
    assert (t.message_timestamp_before_max_ms, t.message_timestamp_after_max_ms) == (60_000, 60_000)
    assert t.timestamp_bounded


def test_kip937_keys_win_within_a_scope():
    t = resolve_topic_config({"message.timestamp.difference.max.ms": "60000",
                              "message.timestamp.before.max.ms": "1000"})
    assert t.message_timestamp_before_max_ms == 1000
    assert t.message_timestamp_after_max_ms == 60_000


def test_topic_scope_beats_broker_scope():
    broker = {"log.message.timestamp.before.max.ms": 5}
    t = resolve_topic_config({"message.timestamp.difference.max.ms": "70"}, broker)
    assert t.message_timestamp_before_max_ms == 70
    b = BrokerConfig({"max.message.time.difference.ms": "1234"})
    t = b.topic_defaults()
    assert (t.message_timestamp_before_max_ms, t.message_timestamp_after_max_ms) == (1234, 1234)


def test_unbounded_when_both_bounds_are_long_max():
    t = resolve_topic_config({"message.timestamp.after.max.ms": str(LONG_MAX)})
    assert not t.timestamp_bounded


@pytest.mark.parametrize("overrides,fragment", [
    ({"no.such.key": "1"}, "unknown topic config"),
    ({"segment.bytes": "13"}, "at least 14"),
    ({"segment.bytes": "abc"}, "integer"),
    ({"message.timestamp.type": "WallClock"}, "must be one of"),
    ({"cleanup.policy": "delete,shred"}, "not one of"),
    ({"message.format.version": "banana"}, "version"),
    ({"retention.ms": "1000", "retention.commitoffset.ms": "2000"}, "cannot be longer"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "between 0 and 1"),
    ({"min.compaction.lag.ms": "-1"}, "at least 0"),
    ({"max.compaction.lag.ms": "0"}, "at least 1"),
    ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "conflict topic config setting"),
])
def test_bad_values_are_refused_with_the_key_named(overrides, fragment):
    with pytest.raises(ConfigError) as info:
        resolve_topic_config(overrides)
    assert fragment in str(info.value)


def test_message_format_versions():
    assert [record_version_for(v) for v in ("0.8.2", "0.9.0", "0.10.0-IV1", "0.10.2", "0.11.0", "2.8", "3.0-IV1")] \
        == [0, 0, 1, 1, 2, 2, 2]
    assert [record_version_for(v) for v in ("v0", "v1", "v2")] == [0, 1, 2]


def test_consumed_retention_defaults_and_clamp():
    t = resolve_topic_config({"retention.ms": "1000"})
    assert t.retention_commitoffset_ms == 1000  # default clamped to forced retention
    t = resolve_topic_config({"retention.commitoffset.minutes": "2"})
    assert t.retention_commitoffset_ms == 120_000
    b = BrokerConfig({"log.retention.commitoffset.enable": "true", "log.retention.commitoffset.ms": "500"})
    assert b.topic_defaults().consumed_retention_enabled and b.topic_defaults().retention_commitoffset_ms == 500
    with pytest.raises(ConfigError) as info:
        BrokerConfig({"log.retention.hours": "1", "log.retention.commitoffset.hours": "2"})
    assert info.value.name == "log.retention.commitoffset.ms"   # the broker's keys, not the topic's
    assert "log.retention.ms|minutes|hours (3600000 ms)" in str(info.value)


def test_describe_reports_sources():
    rows = {r.name: r for r in describe_topic_config({"segment.bytes": "2000"}, {"log.retention.hours": 1})}
    assert rows["segment.bytes"].value == "2000" and rows["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert rows["retention.ms"].value == "3600000" and rows["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG
    assert rows["index.interval.bytes"].source == ConfigSource.DEFAULT_CONFIG


def test_properties_parsing():
    text = "# comment\n! also\nlisteners = PLAINTEXT://127.0.0.1:19092\nlog.dirs:/a,/b\nnum.partitions 3\n" \
           "long.value=one\\\n  two\nkey\\=with=eq\n"
    pairs = dict(parse_properties(text))
    assert pairs["listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert pairs["log.dirs"] == "/a,/b"
    assert pairs["num.partitions"] == "3"
    assert pairs["long.value"] == "onetwo"
    assert pairs["key=with"] == "eq"


def test_loader_overrides_and_unknown_keys(tmp_path):
    p = tmp_path / "server.properties"
    p.write_text("num.partitions=2\nzookeeper.connect=zk:2181\nlog.dir=/x\n")
    cfg, unknown = load_broker_config(p, ["num.partitions=4", "log.dirs=/d1,/d2"])
    assert cfg["num.partitions"] == 4
    assert cfg.log_dirs == ["/d1", "/d2"]
    assert "zookeeper.connect" in unknown
    with pytest.raises(ConfigError):
        load_broker_config(None, ["num.partitions=zero"])
    with pytest.raises(ConfigError):
        load_broker_config(None, ["listeners=PLAINTEXT://127.0.0.1"])
    with pytest.raises(ConfigError):
        load_broker_config(tmp_path / "missing.properties")


def test_listeners():
    cfg = BrokerConfig({"listeners": "PLAINTEXT://:9092,SSL://0.0.0.0:9093",
                        "advertised.listeners": "PLAINTEXT://kafka:9092,SSL://kafka:9093"})
    assert [(l.name, l.host, l.port, l.security_protocol) for l in cfg.listeners] == \
        [("PLAINTEXT", "", 9092, "PLAINTEXT"), ("SSL", "0.0.0.0", 9093, "SSL")]
    assert cfg.advertised_listeners[0].host == "kafka"


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:9404", ("127.0.0.1", 9404)),
    ("0.0.0.0:0", ("0.0.0.0", 0)),
    (":9404", ("127.0.0.1", 9404)),
    ("[::1]:9404", ("::1", 9404)),
    ("metrics.example.com:9404", ("metrics.example.com", 9404)),
    ("http://127.0.0.1:9404/", ("127.0.0.1", 9404)),
    ("", None),
])
def test_metrics_listener_is_parsed_in_config(text, expected):
    assert BrokerConfig({"sundial.metrics.listener": text}).metrics_listener == expected


@pytest.mark.parametrize("text, fragment", [
    ("garbage", "expected host:port"),
    ("127.0.0.1:65536", "above 65535"),
    ("127.0.0.1:99999999999999999999", "above 65535"),
    ("127.0.0.1:", "port is missing"),
    ("127.0.0.1:http", "not a number"),
    ("127.0.0.1:-1", "not a number"),
    ("::1:9404", "[::1]:9404"),
    ("[::1]9404", "expected host:port"),
    ("bad host:9404", "not a host name"),
])
def test_bad_metrics_listener_is_a_configuration_error(text, fragment):
    with pytest.raises(ConfigError) as info:
        load_broker_config(None, [f"sundial.metrics.listener={text}"])
    assert info.value.name == "sundial.metrics.listener"
    assert fragment in str(info.value)


def test_config_docs_say_what_a_setting_does():
    from sundial.config import BROKER_CONFIGS, TOPIC_CONFIGS

    for d in list(BROKER_CONFIGS) + list(TOPIC_CONFIGS):
        assert d.doc.strip(), d.name
        assert "seed 0" not in d.doc.lower(), (d.name, d.doc)   # DescribeConfigs shows these to users


def test_compaction_settings_have_kafkas_names_defaults_and_synonyms():
    t = resolve_topic_config({})
    assert (t.cleanup_policy, t.min_cleanable_dirty_ratio, t.min_compaction_lag_ms, t.max_compaction_lag_ms,
            t.delete_retention_ms, t.segment_ms) == (("delete",), 0.5, 0, LONG_MAX, 86_400_000, 604_800_000)
    b = BrokerConfig({"log.cleaner.min.cleanable.ratio": "0.25", "log.cleaner.min.compaction.lag.ms": "7",
                      "log.cleaner.delete.retention.ms": "9", "log.cleanup.policy": "compact,delete"})
    t = b.topic_defaults()
    assert (t.min_cleanable_dirty_ratio, t.min_compaction_lag_ms, t.delete_retention_ms) == (0.25, 7, 9)
    assert t.compact and t.delete
    t = b.topic_config({"min.cleanable.dirty.ratio": "0.75", "cleanup.policy": "compact"})
    assert t.min_cleanable_dirty_ratio == 0.75 and t.compact and not t.delete


def test_cleaner_broker_settings_have_kafkas_defaults():
    c = BrokerConfig({}).cleaner
    assert (c.enable, c.threads, c.dedupe_buffer_size, c.dedupe_buffer_load_factor, c.io_buffer_size,
            c.max_io_bytes_per_second, c.backoff_ms) == (True, 1, 134_217_728, 0.9, 524_288,
                                                         1.7976931348623157e308, 15_000)
    c = BrokerConfig({"log.cleaner.threads": "2", "log.cleaner.dedupe.buffer.size": str(8 << 20)}).cleaner
    assert c.dedupe_buffer_per_thread == 4 << 20
    for bad in ({"log.cleaner.dedupe.buffer.size": str(1 << 20)},
                {"log.cleaner.threads": "0"},
                {"log.cleaner.threads": "3", "log.cleaner.dedupe.buffer.size": str(3 << 20)}):
        with pytest.raises(ConfigError, match="at least 1MB per cleaner thread"):
            BrokerConfig(bad)
