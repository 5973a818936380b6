"""Typed views of the broker's keys, one per component that reads them.

:class:`config.broker.BrokerConfig` builds each view once, when the configuration is read
(``BrokerConfig.sockets``, ``.ssl``, ``.sasl``, ``.authorizer``, ``.topic_admin``,
``.classic_groups``, ``.offsets``, ``.transactions``, ``.log_scheduling``, ``.quotas``),
and the composition root (``broker/server.py``, ``broker/node.py``) hands them to the
components, which read fields named with their units (``_ms``, ``_bytes``) instead of
dotted keys. Every broker key is static: Sundial refuses AlterConfigs and
IncrementalAlterConfigs on the BROKER resource (INVALID_REQUEST), so a view built at start
holds for the process's life.

Each view names the broker key behind each of its fields (:data:`COMPONENT_VIEWS`: class →
{key: field}); ``from_values`` copies the already parsed and validated values, so the
defaults and the validation messages are those of the key definitions in
:mod:`config.broker`, their one home: the views declare no defaults of their own (a test
builds one from ``BrokerConfig({...})``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping


def _copy(cls, values: Mapping[str, Any], field_for_key: Mapping[str, str], **computed):
    kwargs = {f: values[k] for k, f in field_for_key.items() if f not in computed}
    return cls(**kwargs, **computed)


# --- sockets, connections, request queues ---------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SocketServerConfig:
    """Listeners' sockets, connection limits and per-connection request queues (Kafka
    ``SocketServerConfigs`` and Sundial's ``sundial.connection.*``)."""

    request_max_bytes: int
    send_buffer_bytes: int
    receive_buffer_bytes: int
    listen_backlog_size: int
    connections_max_idle_ms: int
    max_connections: int
    max_connections_per_ip: int
    max_connections_per_ip_overrides: str
    queued_max_requests: int
    queued_max_request_bytes: int
    connection_max_queued_bytes: int
    max_pending_produce_requests: int
    max_pending_produce_bytes: int
    shutdown_grace_ms: int

    def connection_limit_for(self, host: str) -> int:
        """Connections ``host`` may hold open: its entry in max.connections.per.ip.overrides (the
        first ``host:count`` pair naming it with a whole count), else max.connections.per.ip."""
        for pair in (self.max_connections_per_ip_overrides or "").split(","):
            if ":" in pair:
                h, n = pair.rsplit(":", 1)
                if h.strip() == host:
                    try:
                        return int(n)
                    except ValueError:
                        pass
        return self.max_connections_per_ip

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "SocketServerConfig":
        return _copy(cls, values, SOCKET_FIELD_FOR_KEY)


SOCKET_FIELD_FOR_KEY = {
    "socket.request.max.bytes": "request_max_bytes",
    "socket.send.buffer.bytes": "send_buffer_bytes",
    "socket.receive.buffer.bytes": "receive_buffer_bytes",
    "socket.listen.backlog.size": "listen_backlog_size",
    "connections.max.idle.ms": "connections_max_idle_ms",
    "max.connections": "max_connections",
    "max.connections.per.ip": "max_connections_per_ip",
    "max.connections.per.ip.overrides": "max_connections_per_ip_overrides",
    "queued.max.requests": "queued_max_requests",
    "queued.max.request.bytes": "queued_max_request_bytes",
    "sundial.connection.max.queued.bytes": "connection_max_queued_bytes",
    "sundial.connection.max.pending.produce.requests": "max_pending_produce_requests",
    "sundial.connection.max.pending.produce.bytes": "max_pending_produce_bytes",
    "sundial.shutdown.grace.ms": "shutdown_grace_ms",
}


# --- TLS and SASL --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SslConfig:
    """The ``ssl.*`` keys of SSL and SASL_SSL listeners (PEM files only)."""

    keystore_location: str | None
    keystore_password: str | None = field(repr=False)
    key_password: str | None = field(repr=False)
    keystore_type: str
    truststore_location: str | None
    truststore_password: str | None = field(repr=False)
    truststore_type: str
    client_auth: str
    enabled_protocols: tuple[str, ...]
    cipher_suites: tuple[str, ...]

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "SslConfig":
        return _copy(cls, values, SSL_FIELD_FOR_KEY)


SSL_FIELD_FOR_KEY = {f"ssl.{name.replace('_', '.')}": name for name in SslConfig.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class SaslConfig:
    """SASL mechanisms, the credentials store and the answers to failed authentications."""

    enabled_mechanisms: tuple[str, ...]
    credentials_file: str | None
    failed_authentication_delay_ms: int
    failure_log_interval_ms: int

    def credentials_path(self, data_dir: str) -> str:
        """sundial.credentials.file, by default ``credentials.json`` in the first data directory."""
        return self.credentials_file or os.path.join(data_dir, "credentials.json")

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "SaslConfig":
        return _copy(cls, values, SASL_FIELD_FOR_KEY)


SASL_FIELD_FOR_KEY = {
    "sasl.enabled.mechanisms": "enabled_mechanisms",
    "sundial.credentials.file": "credentials_file",
    "connection.failed.authentication.delay.ms": "failed_authentication_delay_ms",
    "sundial.authentication.failure.log.interval.ms": "failure_log_interval_ms",
}


@dataclass(frozen=True, slots=True)
class AuthorizerConfig:
    """The ACL authorizer: on when authorizer.class.name is set."""

    class_name: str
    super_users: str | None
    allow_everyone_if_no_acl_found: bool
    acls_file: str | None

    @property
    def enabled(self) -> bool:
        return bool(self.class_name)

    def acls_path(self, data_dir: str) -> str:
        """sundial.acls.file, by default ``acls.json`` in the first data directory."""
        return self.acls_file or os.path.join(data_dir, "acls.json")

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "AuthorizerConfig":
        return _copy(cls, values, AUTHORIZER_FIELD_FOR_KEY)


AUTHORIZER_FIELD_FOR_KEY = {
    "authorizer.class.name": "class_name",
    "super.users": "super_users",
    "allow.everyone.if.no.acl.found": "allow_everyone_if_no_acl_found",
    "sundial.acls.file": "acls_file",
}


# --- topics, groups, offsets, transactions -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TopicAdminConfig:
    """Creating and deleting topics: automatic creation, its partition count, DeleteTopics."""

    num_partitions: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "TopicAdminConfig":
        return _copy(cls, values, TOPIC_ADMIN_FIELD_FOR_KEY)


TOPIC_ADMIN_FIELD_FOR_KEY = {
    "num.partitions": "num_partitions",
    "auto.create.topics.enable": "auto_create_topics_enable",
    "delete.topic.enable": "delete_topic_enable",
}


@dataclass(frozen=True, slots=True)
class ClassicGroupsConfig:
    """The classic group protocol's broker keys (``group.*`` without a protocol family)."""

    min_session_timeout_ms: int
    max_session_timeout_ms: int
    initial_rebalance_delay_ms: int
    max_size: int

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "ClassicGroupsConfig":
        return _copy(cls, values, CLASSIC_GROUPS_FIELD_FOR_KEY)


CLASSIC_GROUPS_FIELD_FOR_KEY = {
    "group.min.session.timeout.ms": "min_session_timeout_ms",
    "group.max.session.timeout.ms": "max_session_timeout_ms",
    "group.initial.rebalance.delay.ms": "initial_rebalance_delay_ms",
    "group.max.size": "max_size",
}


@dataclass(frozen=True, slots=True)
class OffsetsConfig:
    """Committed offsets: their retention and expiry pass, metadata size, and ``__consumer_offsets``."""

    offsets_retention_ms: int
    retention_check_interval_ms: int
    metadata_max_bytes: int
    topic_segment_bytes: int
    snapshot_min_records: int

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "OffsetsConfig":
        return _copy(cls, values, OFFSETS_FIELD_FOR_KEY,
                     offsets_retention_ms=values["offsets.retention.minutes"] * 60_000)


OFFSETS_FIELD_FOR_KEY = {
    "offsets.retention.minutes": "offsets_retention_ms",
    "offsets.retention.check.interval.ms": "retention_check_interval_ms",
    "offset.metadata.max.bytes": "metadata_max_bytes",
    "offsets.topic.segment.bytes": "topic_segment_bytes",
    "sundial.offsets.snapshot.min.records": "snapshot_min_records",
}


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    """The transaction coordinator and ``__transaction_state`` (Kafka ``TransactionStateManagerConfig``
    and ``TransactionLogConfig``)."""

    max_timeout_ms: int
    abort_timed_out_cleanup_interval_ms: int
    remove_expired_cleanup_interval_ms: int
    transactional_id_expiration_ms: int
    state_log_num_partitions: int
    state_log_segment_bytes: int
    state_log_load_buffer_bytes: int

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "TransactionConfig":
        return _copy(cls, values, TRANSACTION_FIELD_FOR_KEY)


TRANSACTION_FIELD_FOR_KEY = {
    "transaction.max.timeout.ms": "max_timeout_ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "abort_timed_out_cleanup_interval_ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "remove_expired_cleanup_interval_ms",
    "transactional.id.expiration.ms": "transactional_id_expiration_ms",
    "transaction.state.log.num.partitions": "state_log_num_partitions",
    "transaction.state.log.segment.bytes": "state_log_segment_bytes",
    "transaction.state.log.load.buffer.size": "state_log_load_buffer_bytes",
}


# --- the daemon's periodic and background work ----------------------------------------------------------
#: Longest period a periodic task is given (asyncio timers overflow far below Kafka's Long.MAX_VALUE).
MAX_PERIOD_MS = 2**31


@dataclass(frozen=True, slots=True)
class LogSchedulingConfig:
    """The log manager's threads and the periods of the daemon's log tasks (retention, checkpoints, flush)."""

    retention_check_interval_ms: int
    initial_task_delay_ms: int
    flush_offset_checkpoint_interval_ms: int
    flush_start_offset_checkpoint_interval_ms: int
    flush_scheduler_interval_ms: int
    background_threads: int
    producer_id_expiration_ms: int
    recovery_threads_per_data_dir: int

    @property
    def flush_check_interval_ms(self) -> int:
        """How often topics' ``flush.ms`` is checked: ``log.flush.scheduler.interval.ms``. Its Kafka default,
        Long.MAX_VALUE, means "never" in Kafka, where a topic's ``flush.ms`` then has no effect at all;
        Sundial checks every second instead (and for 0, which Kafka's scheduler refuses)."""
        interval = self.flush_scheduler_interval_ms
        return interval if 0 < interval <= MAX_PERIOD_MS else 1000

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "LogSchedulingConfig":
        return _copy(cls, values, LOG_SCHEDULING_FIELD_FOR_KEY)


LOG_SCHEDULING_FIELD_FOR_KEY = {
    "log.retention.check.interval.ms": "retention_check_interval_ms",
    "log.initial.task.delay.ms": "initial_task_delay_ms",
    "log.flush.offset.checkpoint.interval.ms": "flush_offset_checkpoint_interval_ms",
    "log.flush.start.offset.checkpoint.interval.ms": "flush_start_offset_checkpoint_interval_ms",
    "log.flush.scheduler.interval.ms": "flush_scheduler_interval_ms",
    "background.threads": "background_threads",
    "producer.id.expiration.ms": "producer_id_expiration_ms",
    "num.recovery.threads.per.data.dir": "recovery_threads_per_data_dir",
}


#: Each view and the broker key behind each of its fields (read by the settings-effect test).
COMPONENT_VIEWS: dict[type, dict[str, str]] = {
    SocketServerConfig: SOCKET_FIELD_FOR_KEY,
    SslConfig: SSL_FIELD_FOR_KEY,
    SaslConfig: SASL_FIELD_FOR_KEY,
    AuthorizerConfig: AUTHORIZER_FIELD_FOR_KEY,
    TopicAdminConfig: TOPIC_ADMIN_FIELD_FOR_KEY,
    ClassicGroupsConfig: CLASSIC_GROUPS_FIELD_FOR_KEY,
    OffsetsConfig: OFFSETS_FIELD_FOR_KEY,
    TransactionConfig: TRANSACTION_FIELD_FOR_KEY,
    LogSchedulingConfig: LOG_SCHEDULING_FIELD_FOR_KEY,
}
