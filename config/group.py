"""Group-level settings: the GROUP config resource (Kafka 4.2 ``GroupConfig``, config resource type 32).

A group may override a few broker settings for itself through IncrementalAlterConfigs or
AlterConfigs on ``ConfigResource(GROUP, group_id)``; DescribeConfigs reports every key.

=====================================  ======  ================================  ==========================
key                                    type    default (broker key)              bounds (broker keys)
=====================================  ======  ================================  ==========================
consumer.session.timeout.ms            int     group.consumer.session.timeout.ms group.consumer.min/max.*
consumer.heartbeat.interval.ms         int     group.consumer.heartbeat...       group.consumer.min/max.*
share.session.timeout.ms               int     group.share.session.timeout.ms    group.share.min/max.*
share.heartbeat.interval.ms            int     group.share.heartbeat.interval.ms group.share.min/max.*
share.record.lock.duration.ms          int     group.share.record.lock...        group.share.min/max.record.*
share.auto.offset.reset                string  latest                            latest, earliest, by_duration:<ISO-8601>
share.isolation.level                  string  read_uncommitted                  read_uncommitted, read_committed
streams.session.timeout.ms             int     group.streams.session.timeout.ms  group.streams.min/max.*
streams.heartbeat.interval.ms          int     group.streams.heartbeat...        group.streams.min/max.*
streams.num.standby.replicas           int     group.streams.num.standby...      group.streams.max.standby.replicas
streams.initial.rebalance.delay.ms     int     group.streams.initial.rebalance.  at least 0
=====================================  ======  ================================  ==========================

Validation (:func:`validate_group_config`) is Kafka's ``GroupConfig.validate`` of the group's
whole new set, in Kafka's order and with Kafka's messages: unknown names ("Unknown group
config name: x"), then every value's type and static range in definition order ("Invalid value
0 for configuration consumer.session.timeout.ms: Value must be at least 1"), then the broker
bounds and "session timeout greater than heartbeat interval" (``validateValues``). Keys the
group does not set count with the broker's configured default. (Kafka 4.2 counts the share and
streams keys it does not set with their built-in defaults instead, so a broker whose minimums
were raised refuses every change to such a group; Kafka 4.3 fixed that as Sundial does.)

The effective values (:func:`resolve_group_config`) are the group's values, or the broker's
defaults, kept within the broker's current bounds: a value stored under older, wider bounds is
capped to the new ones (Kafka 4.3, KIP-1240), and the caller is told so it can warn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any, Mapping

from .defs import INT_MAX, INT_MIN, ConfigDef, ConfigError, ConfigRegistry, ConfigType, compatibility_only, suggestion
from .group_coordinator import STREAMS_NOT_SERVED, GroupCoordinatorConfig
from .iso_duration import NANOS_PER_SECOND, DurationParseError, parse_duration_ns
from .topic import ConfigEntry, ConfigSource

I = ConfigType.INT
S = ConfigType.STRING

#: ``share.auto.offset.reset`` strategies (Kafka ``ShareGroupAutoOffsetResetStrategy``).
LATEST, EARLIEST, BY_DURATION = "latest", "earliest", "by_duration"
#: ``share.isolation.level`` values (Kafka ``IsolationLevel``).
READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"


@dataclass(frozen=True, slots=True)
class ShareAutoOffsetReset:
    """A parsed ``share.auto.offset.reset``: where a share-partition starts when it has no state."""

    strategy: str                 # LATEST, EARLIEST or BY_DURATION
    duration_ns: int = 0          # BY_DURATION only: how far back from now

    @classmethod
    def parse(cls, text: str) -> "ShareAutoOffsetReset":
        """Kafka's ``ShareGroupAutoOffsetResetStrategy.fromString`` (case-sensitive; no ``none``)."""
        if text in (LATEST, EARLIEST):
            return cls(text)
        if text.startswith(BY_DURATION + ":"):
            try:
                ns = parse_duration_ns(text[len(BY_DURATION) + 1:])
            except DurationParseError as exc:
                raise ValueError(str(exc)) from None
            if ns < 0:
                raise ValueError("negative duration is not allowed")
            return cls(BY_DURATION, ns)
        raise ValueError(f"unknown strategy {text!r}")

    @property
    def duration_ms(self) -> int:
        """BY_DURATION only: the duration in whole milliseconds (rounded down)."""
        return self.duration_ns // 1_000_000

    def start_ms(self, now_ms: int) -> int:
        """BY_DURATION only: the first record time a share-partition starts at, ``now_ms`` minus the
        duration, rounded down to a millisecond as Java's ``Instant.toEpochMilli`` does and never
        below 0 (Kafka could reach ListOffsets' negative sentinels or overflow for durations longer
        than the epoch; 0 finds the first record, which is what such a duration means). The broker
        maps EARLIEST and LATEST to ListOffsets' sentinels (``records.timestamps``)."""
        return max(0, (now_ms * 1_000_000 - self.duration_ns) // 1_000_000)

    def __str__(self) -> str:
        if self.strategy != BY_DURATION:
            return self.strategy
        secs, nanos = divmod(self.duration_ns, NANOS_PER_SECOND)
        return f"{BY_DURATION}:PT{secs}{'.%09d' % nanos if nanos else ''}S"


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """A group's effective settings (see :func:`resolve_group_config`); field ``x_y_ms`` is key ``x.y.ms``."""

    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    share_session_timeout_ms: int
    share_heartbeat_interval_ms: int
    share_record_lock_duration_ms: int
    share_auto_offset_reset: ShareAutoOffsetReset
    share_isolation_level: str
    streams_session_timeout_ms: int
    streams_heartbeat_interval_ms: int
    streams_num_standby_replicas: int
    streams_initial_rebalance_delay_ms: int

    @property
    def share_read_committed(self) -> bool:
        return self.share_isolation_level == READ_COMMITTED


@dataclass(frozen=True, slots=True)
class _GroupKey:
    """How a group key is bounded and defaulted by broker keys (None: Kafka has no such bound)."""

    at_least: int | None = None
    default_key: str | None = None      # broker key giving the default
    lower_key: str | None = None        # broker key giving the minimum
    upper_key: str | None = None        # broker key giving the maximum


GROUP_CONFIGS = ConfigRegistry()
_KEYS: dict[str, _GroupKey] = {}


def _def(name: str, type_: ConfigType, default: Any, doc: str, spec: _GroupKey) -> None:
    d = ConfigDef(name, type_, default, doc)
    if name.startswith("streams."):
        d = compatibility_only(d, STREAMS_NOT_SERVED)
    GROUP_CONFIGS.add(d)
    _KEYS[name] = spec


def _bounded(family: str, key: str, at_least: int) -> _GroupKey:
    """Default ``group.<family>.<key>``, bounds ``group.<family>.min/max.<key>``."""
    return _GroupKey(at_least, f"group.{family}.{key}", f"group.{family}.min.{key}", f"group.{family}.max.{key}")


_def("consumer.session.timeout.ms", I, 45_000,
     "Session timeout of this consumer-protocol group's members.", _bounded("consumer", "session.timeout.ms", 1))
_def("consumer.heartbeat.interval.ms", I, 5_000,
     "Heartbeat interval given to this consumer-protocol group's members.",
     _bounded("consumer", "heartbeat.interval.ms", 1))
_def("share.session.timeout.ms", I, 45_000,
     "Session timeout of this share group's members.", _bounded("share", "session.timeout.ms", 1))
_def("share.heartbeat.interval.ms", I, 5_000,
     "Heartbeat interval given to this share group's members.", _bounded("share", "heartbeat.interval.ms", 1))
_def("share.record.lock.duration.ms", I, 30_000,
     "How long this share group's consumers hold the records they acquired.",
     _bounded("share", "record.lock.duration.ms", 1000))
_def("share.auto.offset.reset", S, LATEST,
     "Where a share-partition of this group starts when it has no state: latest, earliest, or "
     "by_duration:<ISO-8601 duration> (the first record at or after now minus the duration; PnDTnHnMn.nS, "
     "not negative).", _GroupKey())
_def("share.isolation.level", S, READ_UNCOMMITTED,
     "read_committed: this share group delivers only committed transactional records (below the last stable "
     "offset, never aborted ones); read_uncommitted: every record.", _GroupKey())
_def("streams.session.timeout.ms", I, 45_000,
     "Session timeout of a streams group (Sundial serves no streams groups).",
     _bounded("streams", "session.timeout.ms", 1))
_def("streams.heartbeat.interval.ms", I, 5_000,
     "Heartbeat interval of a streams group (Sundial serves no streams groups).",
     _bounded("streams", "heartbeat.interval.ms", 1))
_def("streams.num.standby.replicas", I, 0,
     "Standby replicas of each task of a streams group (Sundial serves no streams groups).",
     _GroupKey(0, "group.streams.num.standby.replicas", None, "group.streams.max.standby.replicas"))
_def("streams.initial.rebalance.delay.ms", I, 3000,
     "Initial rebalance delay of a streams group (Sundial serves no streams groups).",
     _GroupKey(0, "group.streams.initial.rebalance.delay.ms"))

#: Kafka's ``validateValues`` order: (checked key, relation, broker key).
_BOUND_CHECKS = tuple(
    (key, rel, getattr(_KEYS[key], attr)) for key in (
        "consumer.heartbeat.interval.ms", "consumer.session.timeout.ms", "share.heartbeat.interval.ms",
        "share.session.timeout.ms", "share.record.lock.duration.ms", "streams.heartbeat.interval.ms",
        "streams.session.timeout.ms", "streams.num.standby.replicas")
    for rel, attr in ((">=", "lower_key"), ("<=", "upper_key")) if getattr(_KEYS[key], attr))
_SESSION_OVER_HEARTBEAT = tuple((f"{f}.session.timeout.ms", f"{f}.heartbeat.interval.ms")
                                for f in ("consumer", "share", "streams"))

_JAVA_WHITESPACE = "".join(chr(c) for c in range(33))     # what Java's String.trim() removes
_INT_RE = re.compile(r"[+-]?\d+")


def broker_value(coordinator: GroupCoordinatorConfig, broker_key: str) -> Any:
    """The value of a ``group.<family>.<key>`` broker key in the typed view."""
    _, family, rest = broker_key.split(".", 2)
    return getattr(getattr(coordinator, family), rest.replace(".", "_"))


def _invalid(name: str, value: Any, reason: str) -> ConfigError:
    """Kafka's ``ConfigException(name, value, reason)`` wording."""
    return ConfigError(name, f"Invalid value {value} for configuration {name}: {reason}")


def _parse(name: str, raw: Any) -> Any:
    """Kafka ``ConfigDef.parseType`` plus the key's static validator; ConfigError with Kafka's message."""
    d = GROUP_CONFIGS.defs[name]
    text = str(raw).strip(_JAVA_WHITESPACE)
    if d.type is I:
        # Java's Integer.parseInt: optional sign, decimal digits (leading zeros allowed), 32 bits
        if not _INT_RE.fullmatch(text) or len(text.lstrip("+-").lstrip("0")) > 10 \
                or not INT_MIN <= (value := int(text)) <= INT_MAX:
            raise _invalid(name, raw, "Not a number of type INT")
        minimum = _KEYS[name].at_least
        if minimum is not None and value < minimum:
            raise _invalid(name, value, f"Value must be at least {minimum}")
        return value
    if name == "share.auto.offset.reset":
        try:
            return ShareAutoOffsetReset.parse(text)
        except ValueError:
            raise _invalid(name, text, f"Invalid value `{text}` for configuration {name}. The value must be either "
                                       f"'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.") from None
    if text not in (READ_COMMITTED, READ_UNCOMMITTED):          # share.isolation.level
        raise _invalid(name, text, f"String must be one of: {READ_COMMITTED}, {READ_UNCOMMITTED}")
    return text


def validate_group_config(props: Mapping[str, Any], coordinator: GroupCoordinatorConfig) -> dict[str, str]:
    """Kafka's ``GroupConfig.validate`` of a group's complete new set of keys (see the module doc).

    Returns the set with each value in canonical form (integers without sign or padding,
    strings trimmed); raises :class:`ConfigError` whose ``message`` is Kafka's.
    """
    nulls = [name for name, value in props.items() if value is None]
    if nulls:
        raise ConfigError(nulls[0], f"Null value not supported for group configs: {','.join(nulls)}")
    for name in props:
        if name not in GROUP_CONFIGS:
            raise ConfigError(name, f"Unknown group config name: {name}{suggestion(name, GROUP_CONFIGS.defs)}")
    parsed = {d.name: _parse(d.name, props[d.name]) for d in GROUP_CONFIGS if d.name in props}
    merged = {d.name: parsed[d.name] if d.name in parsed else _default(d.name, coordinator) for d in GROUP_CONFIGS}
    for key, relation, broker_key in _BOUND_CHECKS:
        bound = broker_value(coordinator, broker_key)
        if relation == ">=" and merged[key] < bound:
            raise ConfigError(key, f"{key} must be greater than or equal to {broker_key} "
                                   f"({merged[key]} < {bound})")
        if relation == "<=" and merged[key] > bound:
            raise ConfigError(key, f"{key} must be less than or equal to {broker_key} ({merged[key]} > {bound})")
    for session, heartbeat in _SESSION_OVER_HEARTBEAT:
        if merged[session] <= merged[heartbeat]:
            raise ConfigError(session, f"{session} must be greater than {heartbeat} "
                                       f"({merged[session]} <= {merged[heartbeat]})")
    return {name: str(value) if name in _INT_KEYS else str(props[name]).strip(_JAVA_WHITESPACE)
            for name, value in parsed.items()}


_INT_KEYS = frozenset(d.name for d in GROUP_CONFIGS if d.type is I)


def _default(name: str, coordinator: GroupCoordinatorConfig) -> Any:
    """The value of a key the group does not set: the broker's configured default, or Kafka's."""
    spec = _KEYS[name]
    if spec.default_key is not None:
        return broker_value(coordinator, spec.default_key)
    d = GROUP_CONFIGS.defs[name]
    return ShareAutoOffsetReset.parse(d.default) if name == "share.auto.offset.reset" else d.default


def resolve_group_config(overrides: Mapping[str, str], coordinator: GroupCoordinatorConfig
                         ) -> tuple[GroupConfig, list[tuple[str, int, int]]]:
    """A group's effective settings from its stored keys and the broker's settings.

    Returns the :class:`GroupConfig` and the keys that were capped to the broker's current
    bounds as ``(key, stored value, effective value)``. A stored value that no longer parses
    (never written by Sundial) falls back to the default and is reported with value -1.
    """
    values: dict[str, Any] = {}
    capped: list[tuple[str, int, int]] = []
    for d in GROUP_CONFIGS:
        if d.name not in overrides:
            values[d.name] = _default(d.name, coordinator)
            continue
        try:
            value = _parse(d.name, overrides[d.name])
        except ConfigError:
            values[d.name] = _default(d.name, coordinator)
            capped.append((d.name, -1, values[d.name]))
            continue
        spec = _KEYS[d.name]
        if d.type is I:
            low = broker_value(coordinator, spec.lower_key) if spec.lower_key else value
            high = broker_value(coordinator, spec.upper_key) if spec.upper_key else value
            effective = min(max(value, low), high)
            if effective != value:
                capped.append((d.name, value, effective))
            value = effective
        values[d.name] = value
    return GroupConfig(**{f.name: values[f.name.replace("_", ".")] for f in fields(GroupConfig)}), capped


def describe_group_config(overrides: Mapping[str, str], coordinator: GroupCoordinatorConfig) -> list[ConfigEntry]:
    """DescribeConfigs rows of a group, as Kafka 4.2 answers them: every key, the group's value
    (source DYNAMIC_GROUP_CONFIG) or the broker's default (source DEFAULT_CONFIG), one synonym
    naming the same key and source, never read-only, never sensitive."""
    rows = []
    for d in GROUP_CONFIGS:
        if d.name in overrides:
            text, source = overrides[d.name], ConfigSource.DYNAMIC_GROUP_CONFIG
        else:
            text, source = str(_default(d.name, coordinator)), ConfigSource.DEFAULT_CONFIG
        rows.append(ConfigEntry(d.name, text, source, d.read_only, False, d.type, d.doc, ((d.name, text, source),)))
    return rows


__all__ = [
    "GROUP_CONFIGS", "GroupConfig", "ShareAutoOffsetReset", "validate_group_config", "resolve_group_config",
    "describe_group_config", "broker_value", "LATEST", "EARLIEST", "BY_DURATION", "READ_UNCOMMITTED",
    "READ_COMMITTED",
]
