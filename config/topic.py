"""Topic-level settings (Kafka's ``LogConfig``) and how a topic's effective values are resolved.

Every key is Kafka's dotted name with Kafka's default. A topic's effective value
comes from, in order:

1. the topic override (CreateTopics configs, AlterConfigs, IncrementalAlterConfigs);
2. the first broker synonym set in ``server.properties`` / ``--override``
   (``log.retention.ms`` > ``log.retention.minutes`` > ``log.retention.hours``);
3. the static default below.

That order is what DescribeConfigs reports as the source (DYNAMIC_TOPIC_CONFIG,
STATIC_BROKER_CONFIG, DEFAULT_CONFIG).

Timestamp bounds (KIP-32, KIP-937)
----------------------------------
Three spellings bound how far a CreateTime may be from the broker clock:

* ``message.timestamp.before.max.ms`` / ``message.timestamp.after.max.ms``
  (Kafka 3.6+, KIP-937): separate past and future bounds;
* ``message.timestamp.difference.max.ms`` (Kafka 0.10.0–3.x): one symmetric bound,
  deprecated by Kafka;
* ``max.message.time.difference.ms``: the spelling used by the KIP-32 text (seed 002);
  Sundial accepts it as an alias of the previous key. No Kafka release used it.

Resolution is scope first, then key: a key set on the topic beats anything set on
the broker; within one scope the KIP-937 key wins over the symmetric one. With
nothing set, ``before`` is unbounded and ``after`` is one hour, the defaults of
today's Kafka (``ServerLogConfigs.LOG_MESSAGE_TIMESTAMP_AFTER_MAX_MS_DEFAULT``;
Kafka 3.x had no future bound by default).

Message format (seed 002)
-------------------------
``message.format.version`` takes Kafka's version strings (``0.9.0``, ``0.10.2``,
``3.0-IV1`` …) and, as a Sundial shorthand, ``v0``/``v1``/``v2``. Below 0.10.0 the
topic stores magic 0, 0.10.x stores magic 1, 0.11.0 and later magic 2. Kafka 3.0+
ignores this key and always stores v2; Sundial honours it so the migration plan of
KIP-32 (up-conversion on append, down-conversion on fetch) can be exercised.

Consumed-log retention (seed 004)
---------------------------------
``retention.commitoffset.ms|minutes|hours`` (topic) and
``log.retention.commitoffset.ms|minutes|hours`` (broker) give the age a segment
must reach before it may be deleted *early* because every consumer group has
committed past it. They are Sundial extensions (KIP-68 never shipped). A value
explicitly set larger than the topic's ``retention.ms`` is refused.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Mapping

from .defs import (
    HOURS_TO_MS,
    LONG_MAX,
    MINUTES_TO_MS,
    ConfigDef,
    ConfigError,
    ConfigRegistry,
    ConfigType,
    Synonym,
    at_least,
    between,
    compatibility_only,
    each_one_of,
    format_value,
    one_of,
    suggestion,
)

L = ConfigType.LONG
I = ConfigType.INT

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:-IV(\d+))?$")


@functools.lru_cache(maxsize=64)
def record_version_for(message_format_version: str) -> int:
    """Magic byte stored for a ``message.format.version`` value (see module doc)."""
    text = message_format_version.strip()
    short = {"v0": 0, "v1": 1, "v2": 2, "0": 0, "1": 1, "2": 2}
    if text.lower() in short:
        return short[text.lower()]
    m = _VERSION_RE.match(text)
    if not m:
        raise ValueError(f"not a Kafka version string: {message_format_version!r}")
    major, minor = int(m.group(1)), int(m.group(2))
    if (major, minor) < (0, 10):
        return 0
    if (major, minor) == (0, 10):
        return 1
    return 2


def _validate_format_version(value: str) -> None:
    record_version_for(value)


TOPIC_CONFIGS = ConfigRegistry()
_def = TOPIC_CONFIGS.add

CLEANUP_POLICY = _def(ConfigDef(
    "cleanup.policy", ConfigType.LIST, ("delete",),
    "delete: old segments go by time and size; compact: the log cleaner keeps the latest record per key "
    "(docs/compaction.md); both may be given.",
    each_one_of("delete", "compact"), (Synonym("log.cleanup.policy"),)))
COMPRESSION_TYPE = _def(ConfigDef(
    "compression.type", ConfigType.STRING, "producer",
    "Codec of stored batches; 'producer' keeps the producer's codec.",
    one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    (Synonym("compression.type"),)))
DELETE_RETENTION_MS = _def(ConfigDef(
    "delete.retention.ms", L, 86_400_000,
    "How long a tombstone stays readable after the cleaner first keeps it (its batch's delete horizon).",
    at_least(0), (Synonym("log.cleaner.delete.retention.ms"),)))
FILE_DELETE_DELAY_MS = _def(ConfigDef(
    "file.delete.delay.ms", L, 60_000,
    "Time a deleted segment's files stay on disk, renamed with a .deleted suffix, before removal.",
    at_least(0), (Synonym("log.segment.delete.delay.ms"),)))
FLUSH_MESSAGES = _def(ConfigDef(
    "flush.messages", L, LONG_MAX,
    "fsync the log after this many appended records (default: leave it to the OS, as Kafka does).",
    at_least(1), (Synonym("log.flush.interval.messages"),)))
FLUSH_MS = _def(ConfigDef(
    "flush.ms", L, LONG_MAX, "fsync the log when the oldest unflushed data is this old.",
    at_least(0), (Synonym("log.flush.interval.ms"), Synonym("log.flush.scheduler.interval.ms"))))
INDEX_INTERVAL_BYTES = _def(ConfigDef(
    "index.interval.bytes", I, 4096,
    "Bytes appended between two offset-index (and time-index) entries.",
    at_least(0), (Synonym("log.index.interval.bytes"),)))
MAX_COMPACTION_LAG_MS = _def(ConfigDef(
    "max.compaction.lag.ms", L, LONG_MAX,
    "Longest time a record stays ineligible for compaction: a log whose oldest dirty segment began this long "
    "ago is cleaned whatever its dirty ratio; also bounds segment.ms on compacted topics.",
    at_least(1), (Synonym("log.cleaner.max.compaction.lag.ms"),)))
MAX_MESSAGE_BYTES = _def(ConfigDef(
    "max.message.bytes", I, 1_048_588,
    "Largest record batch accepted, including the 12-byte log overhead.",
    at_least(0), (Synonym("message.max.bytes"),)))
MESSAGE_DOWNCONVERSION_ENABLE = _def(ConfigDef(
    "message.downconversion.enable", ConfigType.BOOLEAN, True,
    "Whether fetches from old clients may be down-converted; if false they get UNSUPPORTED_VERSION.",
    None, (Synonym("log.message.downconversion.enable"),)))
MESSAGE_FORMAT_VERSION = _def(ConfigDef(
    "message.format.version", ConfigType.STRING, "3.0-IV1",
    "Record format stored on disk: below 0.10.0 magic 0, 0.10.x magic 1, 0.11.0+ magic 2 "
    "(v0/v1/v2 are accepted as shorthands).",
    _validate_format_version, (Synonym("log.message.format.version"),)))
MESSAGE_TIMESTAMP_TYPE = _def(ConfigDef(
    "message.timestamp.type", ConfigType.STRING, "CreateTime",
    "CreateTime keeps the producer's timestamp; LogAppendTime replaces it with the broker clock at append.",
    one_of("CreateTime", "LogAppendTime"), (Synonym("log.message.timestamp.type"),)))
MESSAGE_TIMESTAMP_DIFFERENCE_MAX_MS = _def(ConfigDef(
    "message.timestamp.difference.max.ms", L, LONG_MAX,
    "Deprecated symmetric bound on |CreateTime - broker time|; used when the before/after keys are not set.",
    at_least(0), (Synonym("log.message.timestamp.difference.max.ms"),),
    aliases=("max.message.time.difference.ms",)))
MESSAGE_TIMESTAMP_BEFORE_MAX_MS = _def(ConfigDef(
    "message.timestamp.before.max.ms", L, LONG_MAX,
    "Largest accepted age of a CreateTime (broker time minus record time).",
    at_least(0), (Synonym("log.message.timestamp.before.max.ms"),)))
MESSAGE_TIMESTAMP_AFTER_MAX_MS = _def(ConfigDef(
    "message.timestamp.after.max.ms", L, 3_600_000,
    "Largest accepted lead of a CreateTime over the broker clock (record time minus broker time).",
    at_least(0), (Synonym("log.message.timestamp.after.max.ms"),)))
MIN_CLEANABLE_DIRTY_RATIO = _def(ConfigDef(
    "min.cleanable.dirty.ratio", ConfigType.DOUBLE, 0.5,
    "Dirty bytes over all bytes (the clean and cleanable sections) above which the cleaner picks the log.",
    between(0, 1), (Synonym("log.cleaner.min.cleanable.ratio"),)))
MIN_COMPACTION_LAG_MS = _def(ConfigDef(
    "min.compaction.lag.ms", L, 0,
    "A segment whose largest record timestamp is newer than now minus this stays uncompacted.",
    at_least(0), (Synonym("log.cleaner.min.compaction.lag.ms"),)))
#: Why the replication keys have no effect on one node (one home for the broker and topic keys).
SINGLE_NODE_IN_SYNC = "a single node is its partitions' only replica and always in sync, so acks=all is " \
                      "answered once the leader has appended"
SINGLE_NODE_NO_ELECTION = "a single node has no other replica that could be elected leader"

MIN_INSYNC_REPLICAS = _def(compatibility_only(ConfigDef(
    "min.insync.replicas", I, 1, "Fewest in-sync replicas for an acks=all write.",
    at_least(1), (Synonym("min.insync.replicas"),)), SINGLE_NODE_IN_SYNC))
PREALLOCATE = _def(ConfigDef(
    "preallocate", ConfigType.BOOLEAN, False, "Pre-size new .log files to segment.bytes.",
    None, (Synonym("log.preallocate"),)))
RETENTION_BYTES = _def(ConfigDef(
    "retention.bytes", L, -1, "Largest partition size before the oldest segments are deleted; -1 is unlimited.",
    None, (Synonym("log.retention.bytes"),)))
RETENTION_MS = _def(ConfigDef(
    "retention.ms", L, 604_800_000,
    "Age (by the segment's largest record timestamp) after which a segment is deleted; -1 keeps data forever.",
    at_least(-1),
    (Synonym("log.retention.ms"), Synonym("log.retention.minutes", MINUTES_TO_MS),
     Synonym("log.retention.hours", HOURS_TO_MS))))
SEGMENT_BYTES = _def(ConfigDef(
    "segment.bytes", I, 1_073_741_824, "Size at which the active segment is rolled.",
    at_least(14), (Synonym("log.segment.bytes"),)))
SEGMENT_INDEX_BYTES = _def(ConfigDef(
    "segment.index.bytes", I, 10_485_760, "Pre-allocated size of each offset and time index file.",
    at_least(4), (Synonym("log.index.size.max.bytes"),)))
SEGMENT_JITTER_MS = _def(ConfigDef(
    "segment.jitter.ms", L, 0, "Random reduction of segment.ms drawn once per segment.",
    at_least(0), (Synonym("log.roll.jitter.ms"), Synonym("log.roll.jitter.hours", HOURS_TO_MS))))
SEGMENT_MS = _def(ConfigDef(
    "segment.ms", L, 604_800_000,
    "Roll when the incoming max timestamp is this far past the first batch's timestamp.",
    at_least(1), (Synonym("log.roll.ms"), Synonym("log.roll.hours", HOURS_TO_MS))))
UNCLEAN_LEADER_ELECTION_ENABLE = _def(compatibility_only(ConfigDef(
    "unclean.leader.election.enable", ConfigType.BOOLEAN, False,
    "Whether a replica out of sync may be elected leader.",
    None, (Synonym("unclean.leader.election.enable"),)), SINGLE_NODE_NO_ELECTION))
RETENTION_COMMITOFFSET_MS = _def(ConfigDef(
    "retention.commitoffset.ms", L, None,
    "Consumed-log retention (Sundial): how old a segment must be (its largest timestamp) before it is "
    "deleted once every consumer group has committed past it; at most retention.ms.",
    at_least(0),
    (Synonym("log.retention.commitoffset.ms"), Synonym("log.retention.commitoffset.minutes", MINUTES_TO_MS),
     Synonym("log.retention.commitoffset.hours", HOURS_TO_MS))))
RETENTION_COMMITOFFSET_MINUTES = _def(ConfigDef(
    "retention.commitoffset.minutes", I, None, "Sundial: retention.commitoffset.ms in minutes.", at_least(0)))
RETENTION_COMMITOFFSET_HOURS = _def(ConfigDef(
    "retention.commitoffset.hours", I, None, "Sundial: retention.commitoffset.ms in hours.", at_least(0)))

#: Default age of consumed retention when neither the topic nor the broker sets one.
DEFAULT_RETENTION_COMMITOFFSET_MS = 24 * HOURS_TO_MS

_TIMESTAMP_BOUND_KEYS = (
    MESSAGE_TIMESTAMP_BEFORE_MAX_MS.name,
    MESSAGE_TIMESTAMP_AFTER_MAX_MS.name,
    MESSAGE_TIMESTAMP_DIFFERENCE_MAX_MS.name,
)
_COMMITOFFSET_KEYS = (
    (RETENTION_COMMITOFFSET_MS.name, 1),
    (RETENTION_COMMITOFFSET_MINUTES.name, MINUTES_TO_MS),
    (RETENTION_COMMITOFFSET_HOURS.name, HOURS_TO_MS),
)
_BROKER_COMMITOFFSET_KEYS = (
    ("log.retention.commitoffset.ms", 1),
    ("log.retention.commitoffset.minutes", MINUTES_TO_MS),
    ("log.retention.commitoffset.hours", HOURS_TO_MS),
)


class ConfigSource(IntEnum):
    """DescribeConfigs v1+ ``config_source`` values (Kafka ``DescribeConfigsResponse.ConfigSource``)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    DYNAMIC_CLIENT_METRICS_CONFIG = 7
    DYNAMIC_GROUP_CONFIG = 8            # a key a group set for itself (the GROUP config resource)


class TimestampType(IntEnum):
    """Record timestamp types; the value is Kafka's wire id."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @classmethod
    def from_config(cls, value: str) -> "TimestampType":
        return cls.LOG_APPEND_TIME if value == "LogAppendTime" else cls.CREATE_TIME




@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic's effective settings, typed, with units in the names.

    Built by :func:`resolve_topic_config`; storage and broker read only this.
    ``retention_commitoffset_ms`` is the consumed-retention age (seed 004);
    ``consumed_retention_enabled`` mirrors the broker's
    ``log.retention.commitoffset.enable``.
    """

    cleanup_policy: tuple[str, ...] = ("delete",)
    compression_type: str = "producer"
    delete_retention_ms: int = 86_400_000
    file_delete_delay_ms: int = 60_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    index_interval_bytes: int = 4096
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    message_downconversion_enable: bool = True
    message_format_version: str = "3.0-IV1"
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3_600_000
    min_insync_replicas: int = 1
    preallocate: bool = False
    retention_bytes: int = -1
    retention_ms: int = 604_800_000
    segment_bytes: int = 1_073_741_824
    segment_index_bytes: int = 10_485_760
    segment_jitter_ms: int = 0
    segment_ms: int = 604_800_000
    retention_commitoffset_ms: int = DEFAULT_RETENTION_COMMITOFFSET_MS
    consumed_retention_enabled: bool = False

    @property
    def record_version(self) -> int:
        """Magic byte of batches stored for this topic (0, 1 or 2)."""
        return record_version_for(self.message_format_version)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.from_config(self.message_timestamp_type)

    @property
    def is_log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def timestamp_bounded(self) -> bool:
        """True when CreateTime records must be range-checked at append."""
        return self.message_timestamp_before_max_ms < LONG_MAX or self.message_timestamp_after_max_ms < LONG_MAX

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """Kafka ``LogConfig.maxSegmentMs``: compacted topics also roll by max.compaction.lag.ms."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def index_entries_max(self) -> int:
        return self.segment_index_bytes // 8


_FIELD_FOR_KEY = {
    "cleanup.policy": "cleanup_policy",
    "compression.type": "compression_type",
    "delete.retention.ms": "delete_retention_ms",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "index.interval.bytes": "index_interval_bytes",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "max.message.bytes": "max_message_bytes",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "message.downconversion.enable": "message_downconversion_enable",
    "message.format.version": "message_format_version",
    "message.timestamp.type": "message_timestamp_type",
    "min.insync.replicas": "min_insync_replicas",
    "preallocate": "preallocate",
    "retention.bytes": "retention_bytes",
    "retention.ms": "retention_ms",
    "segment.bytes": "segment_bytes",
    "segment.index.bytes": "segment_index_bytes",
    "segment.jitter.ms": "segment_jitter_ms",
    "segment.ms": "segment_ms",
}


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One row of DescribeConfigs: the value a topic sees and where it came from."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    type: ConfigType
    doc: str
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...] = ()


def unknown_topic_config(name: str) -> ConfigError:
    """Kafka's refusal of an unknown topic key (INVALID_CONFIG at the wire), with a suggestion when the
    name looks like a misspelling of a topic key or of a broker key's topic form."""
    return ConfigError(name, f"unknown topic config name{suggestion(name, TOPIC_CONFIGS.defs)}")


def normalize_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Validate topic-level overrides and return them typed, under canonical names.

    Unknown keys are refused (Kafka: "Unknown topic config name"), as are values
    that do not parse. ``None`` values are dropped (they mean "unset").
    """
    result: dict[str, Any] = {}
    for raw_name, raw_value in overrides.items():
        d = TOPIC_CONFIGS.get(raw_name)
        if d is None:
            raise unknown_topic_config(raw_name)
        if raw_value is None:
            continue
        result[d.name] = d.parse(raw_value)
    return result


def _broker_value(d: ConfigDef, broker_explicit: Mapping[str, Any]) -> tuple[Any, str] | None:
    for syn in d.synonyms:
        if syn.name in broker_explicit and broker_explicit[syn.name] is not None:
            value = broker_explicit[syn.name]
            if syn.factor != 1 and isinstance(value, int):
                value = value * syn.factor if value >= 0 else -1
            return value, syn.name
    return None


def _effective(d: ConfigDef, topic: Mapping[str, Any], broker: Mapping[str, Any]) -> tuple[Any, ConfigSource]:
    if d.name in topic:
        return topic[d.name], ConfigSource.DYNAMIC_TOPIC_CONFIG
    b = _broker_value(d, broker)
    if b is not None:
        return b[0], ConfigSource.STATIC_BROKER_CONFIG
    return d.default, ConfigSource.DEFAULT_CONFIG


def _timestamp_bounds(topic: Mapping[str, Any], broker: Mapping[str, Any]) -> tuple[int, int]:
    """(before_max_ms, after_max_ms) with the scope-first precedence of the module doc."""

    def pick(new_key: str, default: int) -> int:
        diff_key = MESSAGE_TIMESTAMP_DIFFERENCE_MAX_MS.name
        if new_key in topic:
            return topic[new_key]
        if diff_key in topic:
            return topic[diff_key]
        for scope_key in ("log." + new_key, "log." + diff_key, "max.message.time.difference.ms"):
            if broker.get(scope_key) is not None:
                return broker[scope_key]
        return default

    return (pick(MESSAGE_TIMESTAMP_BEFORE_MAX_MS.name, MESSAGE_TIMESTAMP_BEFORE_MAX_MS.default),
            pick(MESSAGE_TIMESTAMP_AFTER_MAX_MS.name, MESSAGE_TIMESTAMP_AFTER_MAX_MS.default))


def _commitoffset(topic: Mapping[str, Any], broker: Mapping[str, Any]) -> tuple[int | None, bool]:
    """(consumed-retention age in ms or None when unset anywhere, set explicitly on the topic)."""
    for key, factor in _COMMITOFFSET_KEYS:
        if topic.get(key) is not None:
            return topic[key] * factor, True
    for key, factor in _BROKER_COMMITOFFSET_KEYS:
        if broker.get(key) is not None:
            return broker[key] * factor, False
    return None, False


def resolve_topic_config(overrides: Mapping[str, Any] | None = None,
                         broker_explicit: Mapping[str, Any] | None = None) -> TopicConfig:
    """The effective :class:`TopicConfig` of a topic.

    ``overrides``: topic-level keys (raw strings or typed; validated here).
    ``broker_explicit``: broker keys explicitly set in server.properties or by
    ``--override``, already typed (see ``config.broker.BrokerConfig.explicit``).
    Raises :class:`ConfigError` for unknown keys, bad values, a consumed
    retention explicitly longer than the forced retention, or a minimum compaction
    lag above the maximum (Kafka ``LogConfig.validateValues``).
    """
    topic = normalize_overrides(overrides or {})
    broker = dict(broker_explicit or {})
    kwargs: dict[str, Any] = {}
    for key, field_name in _FIELD_FOR_KEY.items():
        value, _ = _effective(TOPIC_CONFIGS.defs[key], topic, broker)
        kwargs[field_name] = value
    if kwargs["min_compaction_lag_ms"] > kwargs["max_compaction_lag_ms"]:
        # Kafka LogConfig.validateValues
        raise ConfigError("min.compaction.lag.ms",
                          f"conflict topic config setting min.compaction.lag.ms ({kwargs['min_compaction_lag_ms']}) "
                          f"> max.compaction.lag.ms ({kwargs['max_compaction_lag_ms']})")
    before, after = _timestamp_bounds(topic, broker)
    kwargs["message_timestamp_before_max_ms"] = before
    kwargs["message_timestamp_after_max_ms"] = after
    commit_ms, explicit_on_topic = _commitoffset(topic, broker)
    retention_ms = kwargs["retention_ms"]
    if commit_ms is None:
        commit_ms = DEFAULT_RETENTION_COMMITOFFSET_MS
        if retention_ms >= 0:
            commit_ms = min(commit_ms, retention_ms)
    elif retention_ms >= 0 and commit_ms > retention_ms:
        if explicit_on_topic or "retention.ms" not in topic:
            raise ConfigError(
                "retention.commitoffset.ms",
                f"consumed retention ({commit_ms} ms) cannot be longer than the forced retention "
                f"retention.ms ({retention_ms} ms)")
        commit_ms = retention_ms
    kwargs["retention_commitoffset_ms"] = commit_ms
    kwargs["consumed_retention_enabled"] = bool(broker.get("log.retention.commitoffset.enable", False))
    return TopicConfig(**kwargs)


def describe_topic_config(overrides: Mapping[str, Any] | None = None,
                          broker_explicit: Mapping[str, Any] | None = None,
                          include_synonyms: bool = False) -> list[ConfigEntry]:
    """DescribeConfigs rows for a topic: every topic key with its value and source."""
    topic = normalize_overrides(overrides or {})
    broker = dict(broker_explicit or {})
    effective = resolve_topic_config(topic, broker)
    rows: list[ConfigEntry] = []
    for d in TOPIC_CONFIGS:
        value, source = _effective(d, topic, broker)
        if d.name == MESSAGE_TIMESTAMP_BEFORE_MAX_MS.name:
            value = effective.message_timestamp_before_max_ms
        elif d.name == MESSAGE_TIMESTAMP_AFTER_MAX_MS.name:
            value = effective.message_timestamp_after_max_ms
        elif d.name == RETENTION_COMMITOFFSET_MS.name:
            value = effective.retention_commitoffset_ms
        synonyms: list[tuple[str, str | None, ConfigSource]] = []
        if include_synonyms:
            if d.name in topic:
                synonyms.append((d.name, format_value(d.type, topic[d.name]), ConfigSource.DYNAMIC_TOPIC_CONFIG))
            for syn in d.synonyms:
                if syn.name in broker and broker[syn.name] is not None:
                    synonyms.append((syn.name, format_value(d.type, broker[syn.name]),
                                     ConfigSource.STATIC_BROKER_CONFIG))
            if d.default is not None:
                synonyms.append((d.name, format_value(d.type, d.default), ConfigSource.DEFAULT_CONFIG))
        rows.append(ConfigEntry(d.name, format_value(d.type, value), source, d.read_only, d.sensitive,
                                d.type, d.doc, tuple(synonyms)))
    return rows


def format_overrides(overrides: Mapping[str, Any]) -> dict[str, str]:
    """Typed overrides back to strings, for persisting with the topic."""
    out: dict[str, str] = {}
    for name, value in normalize_overrides(overrides).items():
        text = format_value(TOPIC_CONFIGS.defs[name].type, value)
        if text is not None:
            out[name] = text
    return out


__all__ = [
    "TOPIC_CONFIGS", "TopicConfig", "TimestampType", "ConfigSource", "ConfigEntry",
    "resolve_topic_config", "describe_topic_config", "normalize_overrides", "format_overrides",
    "record_version_for", "DEFAULT_RETENTION_COMMITOFFSET_MS", "unknown_topic_config",
]
