"""Share groups' settings (KIP-932): the share coordinator's broker keys and a group's effective settings.

Three families of keys make up a share group's configuration; each has one home:

* ``group.share.*`` and ``share.fetch.purgatory.purge.interval.requests`` (Kafka
  ``ShareGroupConfig``/``GroupCoordinatorConfig``): defined with the other group protocols in
  :mod:`config.group_coordinator` (typed view :class:`~config.group_coordinator.ShareGroupConfig`),
  because their ``min``/``max`` keys bound the group-level keys and Kafka checks them together;
* the group-level ``share.*`` keys of the GROUP config resource (``share.session.timeout.ms``,
  ``share.heartbeat.interval.ms``, ``share.record.lock.duration.ms``, ``share.auto.offset.reset``,
  ``share.isolation.level``; Kafka 4.2 ``GroupConfig``): defined in :mod:`config.group`;
* ``share.coordinator.*`` (Kafka ``ShareCoordinatorConfig``): defined here,
  :data:`SHARE_COORDINATOR_CONFIGS`, registered in the broker's registry by :mod:`config.broker`,
  typed as :class:`ShareCoordinatorConfig` (``BrokerConfig.share_coordinator``).
  ``share.coordinator.state.topic.replication.factor`` and ``.min.isr`` are among the keys a
  single node ignores (``IGNORED_KAFKA_KEYS``: warned, not refused), and the keys of
  :data:`SHARE_COORDINATOR_KEYS_WITHOUT_EFFECT` are validated but warned as without effect.

:data:`ALL_SHARE_KEYS` indexes every key of the three families (:data:`SHARE_GROUP_BROKER_CONFIGS`,
:data:`SHARE_COORDINATOR_CONFIGS`, :data:`SHARE_GROUP_LEVEL_CONFIGS`).

:class:`ShareGroupSettings` is what the fetch side reads for one group: the group's GROUP
configs over the broker defaults (:func:`share_group_settings`), resolved anew on each call so an
IncrementalAlterConfigs takes effect on the next fetch. ``delivery_count_limit`` and
``partition_max_record_locks`` are broker-wide in Kafka 4.2 (their group-level keys,
``share.delivery.count.limit`` and ``share.partition.max.record.locks``, come with Kafka 4.3,
KIP-1240).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .defs import ConfigDef, ConfigType, at_least, between, compatibility_only
from .group import BY_DURATION, EARLIEST, GROUP_CONFIGS, LATEST, READ_COMMITTED, READ_UNCOMMITTED, GroupConfig, \
    ShareAutoOffsetReset
from .group_coordinator import GROUP_COORDINATOR_CONFIGS, ShareGroupConfig

I = ConfigType.INT
L = ConfigType.LONG

_SHARE_COORDINATOR_DEFS: tuple[ConfigDef, ...] = (
    ConfigDef("share.coordinator.state.topic.num.partitions", I, 50,
              "Partitions of __share_group_state when it is created (fixed afterwards).", at_least(1)),
    ConfigDef("share.coordinator.state.topic.segment.bytes", I, 104_857_600,
              "segment.bytes of __share_group_state.", at_least(1)),
    ConfigDef("share.coordinator.state.topic.compression.codec", I, 0,
              "Compression of the records written to __share_group_state (Kafka's codec ids: 0 none, 1 gzip, "
              "2 snappy, 3 lz4, 4 zstd).", between(0, 4)),
    ConfigDef("share.coordinator.threads", I, 1,
              "Threads of the share coordinator (Sundial's runs on the event loop; the value is validated).",
              at_least(1)),
    ConfigDef("share.coordinator.snapshot.update.records.per.snapshot", I, 500,
              "Update records (ShareUpdate) written for a share-partition between two snapshots (ShareSnapshot).",
              between(0, 500)),
    ConfigDef("share.coordinator.write.timeout.ms", I, 5000,
              "How long a write of share-partition state may take before it fails.", at_least(1)),
    ConfigDef("share.coordinator.load.buffer.size", I, 5 * 1024 * 1024,
              "Bytes read at a time while loading __share_group_state.", at_least(1)),
    ConfigDef("share.coordinator.append.linger.ms", I, 10,
              "How long the share coordinator waits to batch its writes.", at_least(0)),
    ConfigDef("share.coordinator.state.topic.prune.interval.ms", L, 300_000,
              "How often records of __share_group_state older than every partition's latest snapshot are "
              "deleted.", at_least(1)),
    ConfigDef("share.coordinator.cold.partition.snapshot.interval.ms", I, 300_000,
              "How often a snapshot is written for share-partitions that received no update.", at_least(1)),
)

#: Keys Kafka's multi-threaded, multi-partition share coordinator reads and one node's has no use
#: for, with the reason: validated, warned at start-up as without effect when set, read-only.
_WITHOUT_EFFECT = {
    "share.coordinator.state.topic.num.partitions":
        "the share state of one node is kept in one partition of __share_group_state",
    "share.coordinator.state.topic.compression.codec": "share state records are written uncompressed",
    "share.coordinator.threads": "the share coordinator runs on the event loop",
    "share.coordinator.load.buffer.size":
        "__share_group_state is replayed through the log reader, which sizes its own reads",
    "share.coordinator.append.linger.ms": "each share state write is appended at once and answered once fsynced",
}

SHARE_COORDINATOR_CONFIGS: tuple[ConfigDef, ...] = tuple(
    compatibility_only(d, _WITHOUT_EFFECT[d.name]) if d.name in _WITHOUT_EFFECT else d
    for d in _SHARE_COORDINATOR_DEFS)
SHARE_COORDINATOR_KEYS_WITHOUT_EFFECT = frozenset(_WITHOUT_EFFECT)

#: Every share-group key, by family (an index of the three homes described above).
SHARE_GROUP_BROKER_CONFIGS: tuple[ConfigDef, ...] = tuple(
    d for d in GROUP_COORDINATOR_CONFIGS if d.name.startswith(("group.share.", "share.fetch.")))
SHARE_GROUP_LEVEL_CONFIGS: tuple[ConfigDef, ...] = tuple(d for d in GROUP_CONFIGS if d.name.startswith("share."))
ALL_SHARE_KEYS = frozenset(d.name for d in SHARE_GROUP_BROKER_CONFIGS + SHARE_COORDINATOR_CONFIGS
                           + SHARE_GROUP_LEVEL_CONFIGS)


@dataclass(frozen=True, slots=True)
class ShareCoordinatorConfig:
    """The ``share.coordinator.*`` keys, typed; build with :meth:`from_values`."""

    state_topic_num_partitions: int = 50
    state_topic_segment_bytes: int = 104_857_600
    state_topic_compression_codec: int = 0
    threads: int = 1
    snapshot_update_records_per_snapshot: int = 500
    write_timeout_ms: int = 5000
    load_buffer_size: int = 5 * 1024 * 1024
    append_linger_ms: int = 10
    state_topic_prune_interval_ms: int = 300_000
    cold_partition_snapshot_interval_ms: int = 300_000

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "ShareCoordinatorConfig":
        return cls(**{f: values["share.coordinator." + f.replace("_", ".")] for f in cls.__dataclass_fields__})


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """What the share-partitions of one group run with (see the module doc)."""

    record_lock_duration_ms: int
    delivery_count_limit: int
    partition_max_record_locks: int
    #: ``strategy`` is LATEST, EARLIEST or BY_DURATION (then ``duration_ms``)
    auto_offset_reset: ShareAutoOffsetReset
    isolation_level: str
    session_timeout_ms: int
    heartbeat_interval_ms: int

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED


def share_group_settings(group: GroupConfig, broker: ShareGroupConfig) -> ShareGroupSettings:
    """A group's settings from its resolved GROUP config (:func:`config.group.resolve_group_config`,
    already the broker defaults where the group sets nothing) and the broker-wide share keys."""
    return ShareGroupSettings(
        record_lock_duration_ms=group.share_record_lock_duration_ms,
        delivery_count_limit=broker.delivery_count_limit,
        partition_max_record_locks=broker.partition_max_record_locks,
        auto_offset_reset=group.share_auto_offset_reset,
        isolation_level=group.share_isolation_level,
        session_timeout_ms=group.share_session_timeout_ms,
        heartbeat_interval_ms=group.share_heartbeat_interval_ms,
    )


__all__ = [
    "SHARE_GROUP_BROKER_CONFIGS", "SHARE_GROUP_LEVEL_CONFIGS", "ALL_SHARE_KEYS", "SHARE_COORDINATOR_CONFIGS", "SHARE_COORDINATOR_KEYS_WITHOUT_EFFECT", "ShareCoordinatorConfig", "ShareGroupSettings",
    "share_group_settings", "ShareAutoOffsetReset", "LATEST", "EARLIEST", "BY_DURATION", "READ_COMMITTED",
    "READ_UNCOMMITTED",
]
