"""Broker-level settings of the group protocols (Kafka 4.2 ``GroupCoordinatorConfig`` and ``ShareGroupConfig``).

The keys keep Kafka's names, types, defaults and bounds; :data:`GROUP_COORDINATOR_CONFIGS`
is added to the broker's registry by :mod:`config.broker`. :class:`GroupCoordinatorConfig`
is the typed view handed to the group coordinators, built once from the broker's values by
:meth:`GroupCoordinatorConfig.from_values`, which also runs Kafka's cross-setting checks
(``min <= default <= max``, heartbeat interval below session timeout, exactly one share
assignor, the classic protocol always on ...) and raises :class:`ConfigError` with Kafka's
wording, so a bad ``server.properties`` stops the daemon at start as it stops Kafka.

Three families:

* ``group.consumer.*``: the consumer rebalance protocol (KIP-848); the ``min``/``max`` keys
  also bound the group-level ``consumer.*`` keys of the GROUP config resource (:mod:`config.group`).
* ``group.share.*`` and ``share.fetch.purgatory.purge.interval.requests``: share groups (KIP-932).
* ``group.streams.*``: Kafka Streams groups (KIP-1071). Sundial serves no streams groups; the
  keys exist because they bound and default the group-level ``streams.*`` keys, which Kafka
  4.2 accepts on every broker (see docs/groups.md).

``group.coordinator.rebalance.protocols`` lists the enabled protocols as Kafka does; ``classic``
cannot be removed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from .defs import INT_MAX, ConfigDef, ConfigError, ConfigType, at_least, between, compatibility_only, one_of

I = ConfigType.INT
LIST = ConfigType.LIST

#: Broker keys validated and stored for Kafka compatibility but read by no component: streams
#: groups (KIP-1071) are not served. Setting one logs a warning.
INERT_KEY_PREFIXES = ("group.streams.",)

#: Server-side assignors Sundial serves for consumer groups (the first is Kafka's default).
CONSUMER_GROUP_BUILTIN_ASSIGNORS = ("uniform", "range")
#: The share-group assignor (Kafka's ``SimpleAssignor``).
SHARE_GROUP_BUILTIN_ASSIGNORS = ("simple",)
#: ``group.coordinator.rebalance.protocols`` values (Kafka ``Group.GroupType``).
GROUP_TYPES = ("consumer", "classic", "share", "streams")
#: ``group.consumer.migration.policy`` values (Kafka ``ConsumerGroupMigrationPolicy``).
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


def _non_empty_distinct_of(*choices: str):
    """Kafka ``ValidList.anyNonDuplicateValues(false, false)``, restricted to the names Sundial serves."""
    def check(values: tuple[str, ...]) -> None:
        if not values:
            raise ValueError("the list must not be empty")
        seen: set[str] = set()
        for v in values:
            if v in seen:
                raise ValueError(f"{v!r} appears twice")
            seen.add(v)
            if v not in choices:
                raise ValueError(f"{v!r} is not an assignor Sundial serves ({', '.join(choices)}); "
                                 f"custom assignor classes are not supported")

    return check


def _protocols(values: tuple[str, ...]) -> None:
    """Kafka ``ValidList.in(false, GroupType...)``: a non-empty list of known group types."""
    if not values:
        raise ValueError("the list must not be empty")
    for v in values:
        if v not in GROUP_TYPES:
            raise ValueError(f"{v!r} is not one of {', '.join(GROUP_TYPES)}")


@dataclass(frozen=True, slots=True)
class MemberTiming:
    """Session timeout and heartbeat interval of a family's members and the bounds a group may set them
    within (``group.<family>.[min.|max.]session.timeout.ms`` and ``...heartbeat.interval.ms``), typed;
    the defaults are Kafka's, the same in every family."""

    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 45_000
    max_session_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = 5_000
    min_heartbeat_interval_ms: int = 5_000
    max_heartbeat_interval_ms: int = 15_000


_TIMING_DEFAULTS = {f.name: f.default for f in dataclasses.fields(MemberTiming)}

_DEFS: list[ConfigDef] = []


def _def(d: ConfigDef) -> ConfigDef:
    if d.name.startswith(INERT_KEY_PREFIXES):
        d = compatibility_only(d, STREAMS_NOT_SERVED)
    _DEFS.append(d)
    return d


def _member_timing_defs(family: str, session_doc: str, heartbeat_doc: str) -> None:
    """The session timeout and heartbeat interval of a group family's members, each with the smallest and
    largest value a group may set (Kafka's defaults, the same in every family: :class:`MemberTiming`)."""
    for name, doc in (("session.timeout.ms", session_doc), ("heartbeat.interval.ms", heartbeat_doc)):
        field = name.replace(".", "_")
        _def(ConfigDef(f"group.{family}.{name}", I, _TIMING_DEFAULTS[field], doc, at_least(1)))
        for bound, word in (("min", "Smallest"), ("max", "Largest")):
            _def(ConfigDef(f"group.{family}.{bound}.{name}", I, _TIMING_DEFAULTS[f"{bound}_{field}"],
                           f"{word} {family}.{name} a group may set.", at_least(1)))


#: Why the ``group.streams.*`` keys (and the group-level ``streams.*`` keys) have no effect.
STREAMS_NOT_SERVED = "streams groups (KIP-1071) are not served; the value is validated and bounds only the " \
                     "group-level streams.* keys, which have no effect either"


# --- which protocols are on ---------------------------------------------------------------
_def(ConfigDef("group.coordinator.rebalance.protocols", LIST, ("classic", "consumer", "streams"),
               "Enabled rebalance protocols: classic (JoinGroup/SyncGroup), consumer (KIP-848 "
               "ConsumerGroupHeartbeat), share and streams; classic cannot be removed. Sundial serves no "
               "streams groups whatever this says.", _protocols))

# --- consumer groups (KIP-848) ----------------------------------------------------------------
_member_timing_defs("consumer",
                    "Session timeout of consumer-protocol members: one not heard from for this long is fenced. "
                    "Default of the group-level consumer.session.timeout.ms.",
                    "Heartbeat interval given to consumer-protocol members. Default of the group-level "
                    "consumer.heartbeat.interval.ms.")
_def(ConfigDef("group.consumer.max.size", I, INT_MAX,
               "Most members a consumer-protocol group accepts (classic groups: group.max.size).", at_least(1)))
_def(ConfigDef("group.consumer.assignors", LIST, CONSUMER_GROUP_BUILTIN_ASSIGNORS,
               "Server-side assignors (uniform, range); the first is used when a member names none.",
               _non_empty_distinct_of(*CONSUMER_GROUP_BUILTIN_ASSIGNORS)))
_def(ConfigDef("group.consumer.migration.policy", ConfigType.STRING, "bidirectional",
               "Conversion of non-empty groups between the classic and consumer protocols: bidirectional, "
               "upgrade (classic to consumer only), downgrade (consumer to classic only) or disabled. "
               "Empty groups always convert.", one_of(*MIGRATION_POLICIES, case_insensitive=True)))
_def(ConfigDef("group.consumer.regex.refresh.interval.ms", I, 600_000,
               "How often the topics matching the groups' subscribed regular expressions are resolved again "
               "(they are also resolved when topics are created or deleted).", at_least(10_000)))

# --- share groups (KIP-932) --------------------------------------------------------------------
_def(ConfigDef("group.share.enable", ConfigType.BOOLEAN, False,
               "Kafka's internal switch for share groups (Kafka serves them when this is true or the "
               "finalized feature share.version is at least 1)."))
_member_timing_defs("share",
                    "Session timeout of share-group members. Default of the group-level share.session.timeout.ms.",
                    "Heartbeat interval given to share-group members. Default of the group-level "
                    "share.heartbeat.interval.ms.")
_def(ConfigDef("group.share.max.size", I, 200, "Most members a share group accepts.", between(1, 1000)))
_def(compatibility_only(ConfigDef(
    "group.share.assignors", LIST, SHARE_GROUP_BUILTIN_ASSIGNORS, "The share-group assignor: exactly one, simple.",
    _non_empty_distinct_of(*SHARE_GROUP_BUILTIN_ASSIGNORS)),
    "simple is the only share assignor, so the one value accepted is the assignor always used"))
_def(ConfigDef("group.share.record.lock.duration.ms", I, 30_000,
               "How long a share consumer holds the records it acquired before they are released to others. "
               "Default of the group-level share.record.lock.duration.ms.", between(1000, 3_600_000)))
_def(ConfigDef("group.share.min.record.lock.duration.ms", I, 15_000,
               "Smallest share.record.lock.duration.ms a group may set.", between(1000, 30_000)))
_def(ConfigDef("group.share.max.record.lock.duration.ms", I, 60_000,
               "Largest share.record.lock.duration.ms a group may set.", between(30_000, 3_600_000)))
_def(ConfigDef("group.share.delivery.count.limit", I, 5,
               "Deliveries of a record to a share group before it is archived.", between(2, 10)))
_def(ConfigDef("group.share.partition.max.record.locks", I, 2000,
               "Most records of one share-partition that may be acquired (in flight) at once.",
               between(100, 10_000)))
_def(ConfigDef("group.share.max.share.sessions", I, 2000,
               "Most share sessions the broker keeps; at least group.share.max.size.", at_least(1)))
_def(compatibility_only(ConfigDef(
    "share.fetch.purgatory.purge.interval.requests", I, 1000,
    "ShareFetch requests between two purges of completed entries from the share-fetch purgatory."),
    "a completed share fetch leaves Sundial's purgatory at once, so there is nothing to purge"))

# --- streams groups (KIP-1071): bounds and defaults of the group-level streams.* keys ----------
_member_timing_defs("streams",
                    "Default of the group-level streams.session.timeout.ms (Sundial serves no streams groups).",
                    "Default of the group-level streams.heartbeat.interval.ms (Sundial serves no streams groups).")
_def(ConfigDef("group.streams.max.size", I, INT_MAX, "Most members of a streams group (none are served).",
               at_least(1)))
_def(ConfigDef("group.streams.num.standby.replicas", I, 0,
               "Default of the group-level streams.num.standby.replicas.", at_least(0)))
_def(ConfigDef("group.streams.max.standby.replicas", I, 2,
               "Largest streams.num.standby.replicas a group may set.", at_least(0)))
_def(ConfigDef("group.streams.initial.rebalance.delay.ms", I, 3000,
               "Default of the group-level streams.initial.rebalance.delay.ms.", at_least(0)))

#: Every broker-level key of this module, in definition order (registered by config.broker).
GROUP_COORDINATOR_CONFIGS: tuple[ConfigDef, ...] = tuple(_DEFS)


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig(MemberTiming):
    """The ``group.consumer.*`` keys, typed."""

    max_size: int = INT_MAX
    assignors: tuple[str, ...] = CONSUMER_GROUP_BUILTIN_ASSIGNORS
    migration_policy: str = "bidirectional"
    regex_refresh_interval_ms: int = 600_000

    @property
    def default_assignor(self) -> str:
        """The assignor of a member that names none (Kafka: the first of group.consumer.assignors)."""
        return self.assignors[0]

    @property
    def upgrade_enabled(self) -> bool:
        """A non-empty classic group may convert to the consumer protocol."""
        return self.migration_policy in ("bidirectional", "upgrade")

    @property
    def downgrade_enabled(self) -> bool:
        """A non-empty consumer group may convert back to the classic protocol."""
        return self.migration_policy in ("bidirectional", "downgrade")


@dataclass(frozen=True, slots=True)
class ShareGroupConfig(MemberTiming):
    """The ``group.share.*`` keys and ``share.fetch.purgatory.purge.interval.requests``, typed."""

    enable: bool = False
    max_size: int = 200
    assignors: tuple[str, ...] = SHARE_GROUP_BUILTIN_ASSIGNORS
    record_lock_duration_ms: int = 30_000
    min_record_lock_duration_ms: int = 15_000
    max_record_lock_duration_ms: int = 60_000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2000
    max_share_sessions: int = 2000
    fetch_purgatory_purge_interval_requests: int = 1000


@dataclass(frozen=True, slots=True)
class StreamsGroupConfig(MemberTiming):
    """The ``group.streams.*`` keys, typed (bounds and defaults of the group-level ``streams.*`` keys)."""

    max_size: int = INT_MAX
    num_standby_replicas: int = 0
    max_standby_replicas: int = 2
    initial_rebalance_delay_ms: int = 3000


def _family(cls, values: Mapping[str, Any], prefix: str, renames: Mapping[str, str] | None = None):
    """Build one of the dataclasses above: field ``min_session_timeout_ms`` is key
    ``<prefix>min.session.timeout.ms`` unless ``renames`` names another key."""
    kwargs = {}
    for field in cls.__dataclass_fields__:
        key = (renames or {}).get(field) or prefix + field.replace("_", ".")
        kwargs[field] = values[key]
    return cls(**kwargs)


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    """The group protocols' broker settings, typed; build with :meth:`from_values`."""

    rebalance_protocols: tuple[str, ...] = ("classic", "consumer", "streams")
    consumer: ConsumerGroupConfig = ConsumerGroupConfig()
    share: ShareGroupConfig = ShareGroupConfig()
    streams: StreamsGroupConfig = StreamsGroupConfig()

    @property
    def consumer_protocol_enabled(self) -> bool:
        """``consumer`` is among the enabled protocols (Kafka also requires the group.version feature)."""
        return "consumer" in self.rebalance_protocols

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "GroupCoordinatorConfig":
        """The typed view of a broker's values (every key of :data:`GROUP_COORDINATOR_CONFIGS`
        present, already parsed); raises :class:`ConfigError` when Kafka would refuse to start."""
        consumer = _family(ConsumerGroupConfig, values, "group.consumer.")
        # Kafka parses the policy case-insensitively (ConsumerGroupMigrationPolicy.parse)
        consumer = dataclasses.replace(consumer, migration_policy=consumer.migration_policy.lower())
        share = _family(ShareGroupConfig, values, "group.share.", {
            "fetch_purgatory_purge_interval_requests": "share.fetch.purgatory.purge.interval.requests"})
        streams = _family(StreamsGroupConfig, values, "group.streams.")
        config = cls(tuple(values["group.coordinator.rebalance.protocols"]), consumer, share, streams)
        config.check()
        return config

    def check(self) -> None:
        """Kafka's start-up requirements (``GroupCoordinatorConfig``, ``ShareGroupConfig``, ``KafkaConfig``)."""
        if "classic" not in self.rebalance_protocols:
            raise ConfigError("group.coordinator.rebalance.protocols",
                              "Disabling the 'classic' protocol is not supported.")
        for family, group in (("consumer", self.consumer), ("share", self.share), ("streams", self.streams)):
            _check_bounds(family, group)
        if len(self.share.assignors) != 1:
            raise ConfigError("group.share.assignors", f"group.share.assignors must contain exactly one assignor, "
                                                       f"but found {len(self.share.assignors)}")
        s = self.share
        _require(s.record_lock_duration_ms >= s.min_record_lock_duration_ms,
                 "group.share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms", ">=")
        _require(s.max_record_lock_duration_ms >= s.record_lock_duration_ms,
                 "group.share.max.record.lock.duration.ms", "group.share.record.lock.duration.ms", ">=")
        _require(s.max_share_sessions >= s.max_size, "group.share.max.share.sessions", "group.share.max.size", ">=")
        _require(self.streams.num_standby_replicas <= self.streams.max_standby_replicas,
                 "group.streams.num.standby.replicas", "group.streams.max.standby.replicas", "<=")


_WORDS = {">=": "greater than or equal to", "<=": "less than or equal to", "<": "less than"}


def _require(ok: bool, key: str, other: str, relation: str) -> None:
    if not ok:
        raise ConfigError(key, f"{key} must be {_WORDS[relation]} {other}")


def _check_bounds(family: str, g) -> None:
    """The min/default/max and heartbeat-below-session requirements of one protocol family."""
    p = f"group.{family}."
    for name in ("heartbeat.interval.ms", "session.timeout.ms"):
        attr = name.replace(".", "_")
        value, low, high = getattr(g, attr), getattr(g, "min_" + attr), getattr(g, "max_" + attr)
        key, min_key, max_key = p + name, f"{p}min.{name}", f"{p}max.{name}"
        _require(high >= low, max_key, min_key, ">=")
        _require(value >= low, key, min_key, ">=")
        _require(value <= high, key, max_key, "<=")
    _require(g.heartbeat_interval_ms < g.session_timeout_ms,
             p + "heartbeat.interval.ms", p + "session.timeout.ms", "<")


__all__ = [
    "GROUP_COORDINATOR_CONFIGS", "GroupCoordinatorConfig", "ConsumerGroupConfig", "ShareGroupConfig",
    "StreamsGroupConfig", "CONSUMER_GROUP_BUILTIN_ASSIGNORS", "SHARE_GROUP_BUILTIN_ASSIGNORS", "GROUP_TYPES",
    "MIGRATION_POLICIES",
]
