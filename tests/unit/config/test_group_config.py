"""The group protocols' broker settings and the GROUP config resource (config/group*.py) against Kafka 4.2.

Expected answers come from tables written here from Kafka 4.2's GroupCoordinatorConfig,
ShareGroupConfig and GroupConfig (defaults, static ranges, broker bounds), and from a model of
Kafka's ``GroupConfig.validate`` order computed in the test, not from the module under test.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.config import BrokerConfig, ConfigError, ConfigSource, load_broker_config
from sundial.config.defs import ConfigType
from sundial.config.group import (
    GROUP_CONFIGS,
    ShareAutoOffsetReset,
    describe_group_config,
    resolve_group_config,
    validate_group_config,
)

INT_MAX = 2**31 - 1

#: Kafka 4.2 broker defaults of the group protocols.
KAFKA_DEFAULTS = {
    "group.coordinator.rebalance.protocols": ("classic", "consumer", "streams"),
    "group.consumer.session.timeout.ms": 45000, "group.consumer.min.session.timeout.ms": 45000,
    "group.consumer.max.session.timeout.ms": 60000, "group.consumer.heartbeat.interval.ms": 5000,
    "group.consumer.min.heartbeat.interval.ms": 5000, "group.consumer.max.heartbeat.interval.ms": 15000,
    "group.consumer.max.size": INT_MAX, "group.consumer.assignors": ("uniform", "range"),
    "group.consumer.migration.policy": "bidirectional", "group.consumer.regex.refresh.interval.ms": 600000,
    "group.share.enable": False,
    "group.share.session.timeout.ms": 45000, "group.share.min.session.timeout.ms": 45000,
    "group.share.max.session.timeout.ms": 60000, "group.share.heartbeat.interval.ms": 5000,
    "group.share.min.heartbeat.interval.ms": 5000, "group.share.max.heartbeat.interval.ms": 15000,
    "group.share.max.size": 200, "group.share.assignors": ("simple",),
    "group.share.record.lock.duration.ms": 30000, "group.share.min.record.lock.duration.ms": 15000,
    "group.share.max.record.lock.duration.ms": 60000, "group.share.delivery.count.limit": 5,
    "group.share.partition.max.record.locks": 2000, "group.share.max.share.sessions": 2000,
    "share.fetch.purgatory.purge.interval.requests": 1000,
    "group.streams.session.timeout.ms": 45000, "group.streams.min.session.timeout.ms": 45000,
    "group.streams.max.session.timeout.ms": 60000, "group.streams.heartbeat.interval.ms": 5000,
    "group.streams.min.heartbeat.interval.ms": 5000, "group.streams.max.heartbeat.interval.ms": 15000,
    "group.streams.max.size": INT_MAX, "group.streams.num.standby.replicas": 0,
    "group.streams.max.standby.replicas": 2, "group.streams.initial.rebalance.delay.ms": 3000,
}

#: Kafka 4.2 static ranges of the broker keys: (lowest, highest) accepted alone.
KAFKA_RANGES = {
    "group.share.record.lock.duration.ms": (1000, 3_600_000), "group.share.min.record.lock.duration.ms": (1000, 30000),
    "group.share.max.record.lock.duration.ms": (30000, 3_600_000), "group.share.delivery.count.limit": (2, 10),
    "group.share.partition.max.record.locks": (100, 10000), "group.share.max.size": (1, 1000),
    "group.share.max.share.sessions": (1, INT_MAX), "group.consumer.regex.refresh.interval.ms": (10000, INT_MAX),
    "group.consumer.max.size": (1, INT_MAX), "group.streams.num.standby.replicas": (0, INT_MAX),
}

#: The GROUP resource of Kafka 4.2: key -> (static default, at least, default key, min key, max key).
GROUP_KEYS = {
    "consumer.session.timeout.ms": (45000, 1, "group.consumer.session.timeout.ms",
                                    "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    "consumer.heartbeat.interval.ms": (5000, 1, "group.consumer.heartbeat.interval.ms",
                                       "group.consumer.min.heartbeat.interval.ms",
                                       "group.consumer.max.heartbeat.interval.ms"),
    "share.session.timeout.ms": (45000, 1, "group.share.session.timeout.ms", "group.share.min.session.timeout.ms",
                                 "group.share.max.session.timeout.ms"),
    "share.heartbeat.interval.ms": (5000, 1, "group.share.heartbeat.interval.ms",
                                    "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": (30000, 1000, "group.share.record.lock.duration.ms",
                                      "group.share.min.record.lock.duration.ms",
                                      "group.share.max.record.lock.duration.ms"),
    "share.auto.offset.reset": ("latest", None, None, None, None),
    "share.isolation.level": ("read_uncommitted", None, None, None, None),
    "streams.session.timeout.ms": (45000, 1, "group.streams.session.timeout.ms",
                                   "group.streams.min.session.timeout.ms", "group.streams.max.session.timeout.ms"),
    "streams.heartbeat.interval.ms": (5000, 1, "group.streams.heartbeat.interval.ms",
                                      "group.streams.min.heartbeat.interval.ms",
                                      "group.streams.max.heartbeat.interval.ms"),
    "streams.num.standby.replicas": (0, 0, "group.streams.num.standby.replicas", None,
                                     "group.streams.max.standby.replicas"),
    "streams.initial.rebalance.delay.ms": (3000, 0, "group.streams.initial.rebalance.delay.ms", None, None),
}
#: Kafka's validateValues order of bound checks, then session > heartbeat per family.
BOUND_ORDER = ("consumer.heartbeat.interval.ms", "consumer.session.timeout.ms", "share.heartbeat.interval.ms",
               "share.session.timeout.ms", "share.record.lock.duration.ms", "streams.heartbeat.interval.ms",
               "streams.session.timeout.ms", "streams.num.standby.replicas")


def coordinator(**settings):
    return BrokerConfig({k: str(v) for k, v in settings.items()}).group_coordinator


# -- broker settings ------------------------------------------------------------------------------------
def test_broker_defaults_are_kafka_4_2():
    b = BrokerConfig()
    for key, value in KAFKA_DEFAULTS.items():
        assert b[key] == value, key
    c = b.group_coordinator
    assert c.consumer.session_timeout_ms == 45000 and c.consumer.default_assignor == "uniform"
    assert c.share.record_lock_duration_ms == 30000 and c.share.partition_max_record_locks == 2000
    assert c.streams.max_standby_replicas == 2 and c.consumer_protocol_enabled


def test_group_coordinator_keys_are_no_longer_ignored_as_unknown():
    _, unknown = load_broker_config(None, ["group.coordinator.rebalance.protocols=classic,consumer",
                                           "group.consumer.session.timeout.ms=50000"])
    assert unknown == {}


@pytest.mark.parametrize("key", sorted(KAFKA_RANGES))
def test_static_ranges(key):
    low, high = KAFKA_RANGES[key]
    others = _consistent_with(key, low)
    BrokerConfig({key: str(low), **others})
    with pytest.raises(ConfigError):
        BrokerConfig({key: str(low - 1), **_consistent_with(key, low - 1)})
    if high < INT_MAX:
        with pytest.raises(ConfigError):
            BrokerConfig({key: str(high + 1), **_consistent_with(key, high + 1)})


def _consistent_with(key: str, value: int) -> dict[str, str]:
    """Other keys set so that only ``key``'s own static range can refuse ``value``."""
    if key == "group.share.record.lock.duration.ms":
        return {"group.share.min.record.lock.duration.ms": "1000", "group.share.max.record.lock.duration.ms": "3600000"}
    if key == "group.share.max.size":
        return {"group.share.max.share.sessions": str(max(value, 1))}
    if key == "group.share.max.share.sessions":
        return {"group.share.max.size": "1"}
    if key == "group.streams.num.standby.replicas":
        return {"group.streams.max.standby.replicas": str(max(value, 0))}
    return {}


@pytest.mark.parametrize("family", ["consumer", "share", "streams"])
@pytest.mark.parametrize("what", ["session.timeout.ms", "heartbeat.interval.ms"])
def test_min_default_max_ordering(family, what):
    base = f"group.{family}."
    lo, default, hi = (KAFKA_DEFAULTS[base + p + what] for p in ("min.", "", "max."))
    cases = [
        ({base + "min." + what: hi + 1, base + what: hi + 1}, f"{base}max.{what} must be greater than or equal to "
                                                              f"{base}min.{what}"),
        ({base + what: lo - 1}, f"{base}{what} must be greater than or equal to {base}min.{what}"),
        ({base + what: hi + 1}, f"{base}{what} must be less than or equal to {base}max.{what}"),
    ]
    for settings_, message in cases:
        with pytest.raises(ConfigError) as info:
            coordinator(**settings_)
        assert info.value.message == message
    assert coordinator(**{base + what: default}) is not None


@pytest.mark.parametrize("family", ["consumer", "share", "streams"])
def test_heartbeat_below_session_timeout(family):
    b = f"group.{family}."
    settings_ = {b + "min.session.timeout.ms": 1000, b + "session.timeout.ms": 6000,
                 b + "max.heartbeat.interval.ms": 6000, b + "heartbeat.interval.ms": 6000}
    with pytest.raises(ConfigError) as info:
        coordinator(**settings_)
    assert info.value.message == f"{b}heartbeat.interval.ms must be less than {b}session.timeout.ms"
    coordinator(**{**settings_, b + "heartbeat.interval.ms": 5999})


def test_cross_setting_refusals_with_kafka_messages():
    refusals = [
        ({"group.coordinator.rebalance.protocols": "consumer"}, "Disabling the 'classic' protocol is not supported."),
        ({"group.share.record.lock.duration.ms": 14999},
         "group.share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
        ({"group.share.record.lock.duration.ms": 60001},
         "group.share.max.record.lock.duration.ms must be greater than or equal to group.share.record.lock.duration.ms"),
        ({"group.share.max.share.sessions": 199},
         "group.share.max.share.sessions must be greater than or equal to group.share.max.size"),
        ({"group.streams.num.standby.replicas": 3},
         "group.streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas"),
    ]
    for settings_, message in refusals:
        with pytest.raises(ConfigError) as info:
            coordinator(**settings_)
        assert info.value.message == message


@pytest.mark.parametrize("key,value", [
    ("group.coordinator.rebalance.protocols", ""), ("group.coordinator.rebalance.protocols", "classic,queue"),
    ("group.consumer.assignors", ""), ("group.consumer.assignors", "uniform,uniform"),
    ("group.consumer.assignors", "org.example.MyAssignor"), ("group.share.assignors", "uniform"),
    ("group.share.assignors", "simple,simple"), ("group.consumer.migration.policy", "sideways"),
])
def test_list_and_enum_refusals(key, value):
    with pytest.raises(ConfigError):
        BrokerConfig({key: value})


def test_enum_and_list_values_that_kafka_accepts():
    c = coordinator(**{"group.consumer.migration.policy": "UPGRADE", "group.consumer.assignors": "range, uniform",
                       "group.coordinator.rebalance.protocols": "classic,share"})
    assert c.consumer.migration_policy == "upgrade" and c.consumer.upgrade_enabled and not c.consumer.downgrade_enabled
    assert c.consumer.default_assignor == "range" and not c.consumer_protocol_enabled
    assert c.rebalance_protocols == ("classic", "share")


# -- the GROUP resource: validation ------------------------------------------------------------------
def test_group_keys_are_kafka_4_2s():
    assert [d.name for d in GROUP_CONFIGS] == list(GROUP_KEYS)
    for d in GROUP_CONFIGS:
        assert d.default == GROUP_KEYS[d.name][0]
        assert d.type == (ConfigType.STRING if isinstance(d.default, str) else ConfigType.INT)


def _model(props: dict[str, str], broker: dict[str, int]) -> str | None:
    """Kafka 4.2 GroupConfig.validate as a model: the first refusal's message prefix, or None."""
    for name in props:
        if name not in GROUP_KEYS:
            return f"Unknown group config name: {name}"
    values = {}
    for name, (default, at_least, default_key, _, _) in GROUP_KEYS.items():
        if name not in props:
            values[name] = broker[default_key] if default_key else default
            continue
        text = props[name].strip()
        if at_least is None:
            ok = (text in ("latest", "earliest") or text.startswith("by_duration:")) \
                if name == "share.auto.offset.reset" else text in ("read_committed", "read_uncommitted")
            if not ok:
                return f"Invalid value {text} for configuration {name}"
            values[name] = text
            continue
        try:
            value = int(text)
        except ValueError:
            return f"Invalid value {props[name]} for configuration {name}: Not a number of type INT"
        if not -2**31 <= value < 2**31:
            return f"Invalid value {props[name]} for configuration {name}: Not a number of type INT"
        if value < at_least:
            return f"Invalid value {value} for configuration {name}: Value must be at least {at_least}"
        values[name] = value
    for name in BOUND_ORDER:
        _, _, _, min_key, max_key = GROUP_KEYS[name]
        if min_key and values[name] < broker[min_key]:
            return f"{name} must be greater than or equal to {min_key}"
        if max_key and values[name] > broker[max_key]:
            return f"{name} must be less than or equal to {max_key}"
    for family in ("consumer", "share", "streams"):
        if values[f"{family}.session.timeout.ms"] <= values[f"{family}.heartbeat.interval.ms"]:
            return f"{family}.session.timeout.ms must be greater than {family}.heartbeat.interval.ms"
    return None


INT_GROUP_KEYS = [k for k, spec in GROUP_KEYS.items() if spec[1] is not None]
around = st.sampled_from([-1, 0, 1, 999, 1000, 4999, 5000, 5001, 14999, 15000, 15001, 44999, 45000, 45001,
                          50000, 59999, 60000, 60001, 2, 3, 2**31 - 1])
broker_settings = st.fixed_dictionaries({}, optional={
    "group.consumer.min.session.timeout.ms": st.sampled_from([6000, 45000]),
    "group.consumer.max.heartbeat.interval.ms": st.sampled_from([15000, 30000]),
    "group.share.max.session.timeout.ms": st.sampled_from([60000, 120000]),
    "group.share.min.record.lock.duration.ms": st.sampled_from([1000, 15000]),
    "group.streams.max.standby.replicas": st.sampled_from([0, 2, 5]),
})


@settings(max_examples=400, deadline=None)
@given(broker_settings, st.dictionaries(st.sampled_from(INT_GROUP_KEYS), around.map(str), max_size=4))
def test_int_keys_follow_the_kafka_model(broker, props):
    merged_broker = {**{k: v for k, v in KAFKA_DEFAULTS.items() if isinstance(v, int)}, **broker}
    c = coordinator(**broker)
    expected = _model(props, merged_broker)
    try:
        stored = validate_group_config(props, c)
    except ConfigError as exc:
        assert expected is not None, f"refused: {exc.message}"
        assert exc.message.startswith(expected), (exc.message, expected)
    else:
        assert expected is None, f"accepted, Kafka refuses: {expected}"
        assert stored == {k: str(int(v)) for k, v in props.items()}


@pytest.mark.parametrize("raw,accepted", [
    ("50000", "50000"), (" 50000 ", "50000"), ("+50000", "50000"), ("050000", "50000"),
    ("5e4", None), ("50000.0", None), ("50_000", None), ("0x10", None), ("", None), ("2147483648", None),
    ("0" * 30 + "50000", "50000"), ("9" * 5000, None),
])
def test_int_parsing_is_javas(raw, accepted):
    if accepted is None:
        with pytest.raises(ConfigError) as info:
            validate_group_config({"consumer.session.timeout.ms": raw}, coordinator())
        assert info.value.message == (f"Invalid value {raw} for configuration consumer.session.timeout.ms: "
                                      f"Not a number of type INT")
    else:
        assert validate_group_config({"consumer.session.timeout.ms": raw}, coordinator()) == {
            "consumer.session.timeout.ms": accepted}


@pytest.mark.parametrize("value,ok", [
    ("latest", True), ("earliest", True), (" earliest ", True), ("none", False), ("LATEST", False),
    ("by_duration", False), ("by_duration:", False), ("by_duration:PT1H", True), ("by_duration:P1DT2H3M4.5S", True),
    ("by_duration:-PT1H", False), ("by_duration:PT-1S", False), ("by_duration:-PT-1S", True),
    ("by_duration:P1M", False), ("by_duration:P1W", False), ("by_duration:PT", False), ("BY_DURATION:PT1H", False),
    ("by_duration:pt1h", True), ("by_duration:PT0S", True),
])
def test_share_auto_offset_reset_values(value, ok):
    c = coordinator()
    if ok:
        assert validate_group_config({"share.auto.offset.reset": value}, c) == {
            "share.auto.offset.reset": value.strip()}
    else:
        with pytest.raises(ConfigError) as info:
            validate_group_config({"share.auto.offset.reset": value}, c)
        assert "The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'." \
            in info.value.message


@pytest.mark.parametrize("value,ok", [("read_committed", True), ("read_uncommitted", True),
                                      ("READ_COMMITTED", False), ("committed", False)])
def test_share_isolation_level_values(value, ok):
    if ok:
        assert validate_group_config({"share.isolation.level": value}, coordinator())
    else:
        with pytest.raises(ConfigError) as info:
            validate_group_config({"share.isolation.level": value}, coordinator())
        assert info.value.message.endswith("String must be one of: read_committed, read_uncommitted")


def test_unset_keys_count_with_the_brokers_configured_defaults():
    # The broker raised every minimum: a group that sets only one key must still be accepted
    # (Kafka 4.2 would compare its built-in share defaults with the raised minimums and refuse).
    c = coordinator(**{"group.share.min.session.timeout.ms": 50000, "group.share.session.timeout.ms": 55000,
                       "group.share.max.session.timeout.ms": 60000})
    assert validate_group_config({"consumer.session.timeout.ms": "50000"}, c)
    with pytest.raises(ConfigError) as info:
        validate_group_config({"share.session.timeout.ms": "45000"}, c)
    assert info.value.message.startswith(
        "share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms")


def test_null_and_unknown_names():
    with pytest.raises(ConfigError) as info:
        validate_group_config({"consumer.session.timeout.ms": None}, coordinator())
    assert info.value.message == "Null value not supported for group configs: consumer.session.timeout.ms"
    with pytest.raises(ConfigError) as info:
        validate_group_config({"share.delivery.count.limit": "3"}, coordinator())   # a Kafka 4.3 key
    assert info.value.message == "Unknown group config name: share.delivery.count.limit"


# -- effective values and DescribeConfigs rows -----------------------------------------------------------
def test_effective_values_take_the_group_value_else_the_broker_default():
    c = coordinator(**{"group.consumer.heartbeat.interval.ms": 6000})
    cfg, capped = resolve_group_config({"consumer.session.timeout.ms": "50000",
                                        "share.auto.offset.reset": "by_duration:PT1M",
                                        "share.isolation.level": "read_committed"}, c)
    assert capped == []
    assert (cfg.consumer_session_timeout_ms, cfg.consumer_heartbeat_interval_ms) == (50000, 6000)
    assert cfg.share_auto_offset_reset == ShareAutoOffsetReset("by_duration", 60 * 10**9)
    assert cfg.share_read_committed and cfg.share_record_lock_duration_ms == 30000


def test_stored_values_outside_narrowed_bounds_are_capped():
    c = coordinator(**{"group.consumer.max.session.timeout.ms": 50000})
    cfg, capped = resolve_group_config({"consumer.session.timeout.ms": "60000",
                                        "consumer.heartbeat.interval.ms": "1000"}, c)
    assert cfg.consumer_session_timeout_ms == 50000 and cfg.consumer_heartbeat_interval_ms == 5000
    assert sorted(capped) == [("consumer.heartbeat.interval.ms", 1000, 5000),
                              ("consumer.session.timeout.ms", 60000, 50000)]


def test_start_ms_of_a_duration():
    now = 1_700_000_000_123
    assert ShareAutoOffsetReset.parse("by_duration:PT1H").start_ms(now) == now - 3_600_000
    # Instant.toEpochMilli rounds down: 0.5 ms back from a whole millisecond is the millisecond before
    assert ShareAutoOffsetReset.parse("by_duration:PT0.0005S").start_ms(now) == now - 1
    assert ShareAutoOffsetReset.parse("by_duration:P100000D").start_ms(now) == 0


def test_describe_rows_sources_and_values():
    c = coordinator(**{"group.share.record.lock.duration.ms": 20000})
    rows = {r.name: r for r in describe_group_config({"consumer.session.timeout.ms": "50000"}, c)}
    assert list(rows) == list(GROUP_KEYS)
    set_row = rows["consumer.session.timeout.ms"]
    assert (set_row.value, set_row.source) == ("50000", ConfigSource.DYNAMIC_GROUP_CONFIG)
    assert set_row.synonyms == (("consumer.session.timeout.ms", "50000", ConfigSource.DYNAMIC_GROUP_CONFIG),)
    assert (rows["share.record.lock.duration.ms"].value, rows["share.record.lock.duration.ms"].source) == (
        "20000", ConfigSource.DEFAULT_CONFIG)
    assert rows["share.auto.offset.reset"].value == "latest"
    assert rows["share.isolation.level"].value == "read_uncommitted"
    # streams.* keys are accepted for compatibility only (streams groups are not served): read-only
    assert all(r.read_only == r.name.startswith("streams.") and not r.sensitive and r.doc for r in rows.values())
    assert int(ConfigSource.DYNAMIC_GROUP_CONFIG) == 8


def test_the_doc_names_every_group_key_and_log_event():
    import os
    import re

    from sundial.config.group_coordinator import GROUP_COORDINATOR_CONFIGS

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    with open(os.path.join(root, "docs", "groups.md"), encoding="utf-8") as fh:
        doc = fh.read().split("## Group configuration", 1)[1]
    for d in list(GROUP_COORDINATOR_CONFIGS) + list(GROUP_CONFIGS):
        assert f"`{d.name}`" in doc or (d.name.replace(".min.", ".").replace(".max.", ".") in doc), d.name
    sources = ""
    for path in ("broker/group_configs.py", "broker/handlers/admin.py"):
        with open(os.path.join(root, path), encoding="utf-8") as fh:
            sources += fh.read()
    events = re.findall(r"`(group_config[a-z_]*)`", doc)
    assert len(events) >= 5
    for event in events:
        assert f'"{event}"' in sources, event
