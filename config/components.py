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


#: Each view and the broker key behind each of its fields (read by the settings-effect test).
COMPONENT_VIEWS: dict[type, dict[str, str]] = {}


def _view(field_for_key: dict[str, str]):
    """Class decorator: ``cls`` becomes a frozen typed view (a slotted dataclass) whose fields copy the
    broker keys of ``field_for_key`` ({key: field}), registered in :data:`COMPONENT_VIEWS`."""
    def make(cls):
        view = dataclass(frozen=True, slots=True)(cls)
        COMPONENT_VIEWS[view] = field_for_key
        return view
    return make


def _copy(cls, values: Mapping[str, Any], **computed):
    kwargs = {f: values[k] for k, f in COMPONENT_VIEWS[cls].items() if f not in computed}
    return cls(**kwargs, **computed)


def _file_in(data_dir: str, configured: str | None, default_name: str) -> str:
    """A store's file: the one configured, else ``default_name`` in the data directory ``data_dir``."""
    return configured or os.path.join(data_dir, default_name)


class _View:
    """What every view shares: :meth:`from_values`, the copy of its keys' parsed values."""

    __slots__ = ()

    @classmethod
    def from_values(cls, values: Mapping[str, Any]):
        return _copy(cls, values)


# --- sockets, connections, request queues ---------------------------------------------------------
@_view({
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
})
class SocketServerConfig(_View):
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


# --- TLS and SASL --------------------------------------------------------------------------------------
@_view({
    "ssl.keystore.location": "keystore_location",
    "ssl.keystore.password": "keystore_password",
    "ssl.key.password": "key_password",
    "ssl.keystore.type": "keystore_type",
    "ssl.truststore.location": "truststore_location",
    "ssl.truststore.password": "truststore_password",
    "ssl.truststore.type": "truststore_type",
    "ssl.client.auth": "client_auth",
    "ssl.enabled.protocols": "enabled_protocols",
    "ssl.cipher.suites": "cipher_suites",
})
class SslConfig(_View):
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


@_view({
    "sasl.enabled.mechanisms": "enabled_mechanisms",
    "sundial.credentials.file": "credentials_file",
    "connection.failed.authentication.delay.ms": "failed_authentication_delay_ms",
    "sundial.authentication.failure.log.interval.ms": "failure_log_interval_ms",
})
class SaslConfig(_View):
    """SASL mechanisms, the credentials store and the answers to failed authentications."""

    enabled_mechanisms: tuple[str, ...]
    credentials_file: str | None
    failed_authentication_delay_ms: int
    failure_log_interval_ms: int

    def credentials_path(self, data_dir: str) -> str:
        """sundial.credentials.file, by default ``credentials.json`` in the first data directory."""
        return _file_in(data_dir, self.credentials_file, "credentials.json")


@_view({
    "authorizer.class.name": "class_name",
    "super.users": "super_users",
    "allow.everyone.if.no.acl.found": "allow_everyone_if_no_acl_found",
    "sundial.acls.file": "acls_file",
})
class AuthorizerConfig(_View):
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
        return _file_in(data_dir, self.acls_file, "acls.json")


# --- topics, groups, offsets, transactions -------------------------------------------------------------
@_view({
    "num.partitions": "num_partitions",
    "auto.create.topics.enable": "auto_create_topics_enable",
    "delete.topic.enable": "delete_topic_enable",
})
class TopicAdminConfig(_View):
    """Creating and deleting topics: automatic creation, its partition count, DeleteTopics."""

    num_partitions: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool


@_view({
    "group.min.session.timeout.ms": "min_session_timeout_ms",
    "group.max.session.timeout.ms": "max_session_timeout_ms",
    "group.initial.rebalance.delay.ms": "initial_rebalance_delay_ms",
    "group.max.size": "max_size",
})
class ClassicGroupsConfig(_View):
    """The classic group protocol's broker keys (``group.*`` without a protocol family)."""

    min_session_timeout_ms: int
    max_session_timeout_ms: int
    initial_rebalance_delay_ms: int
    max_size: int


@_view({
    "offsets.retention.minutes": "offsets_retention_ms",
    "offsets.retention.check.interval.ms": "retention_check_interval_ms",
    "offset.metadata.max.bytes": "metadata_max_bytes",
    "offsets.topic.segment.bytes": "topic_segment_bytes",
    "sundial.offsets.snapshot.min.records": "snapshot_min_records",
})
class OffsetsConfig(_View):
    """Committed offsets: their retention and expiry pass, metadata size, and ``__consumer_offsets``."""

    offsets_retention_ms: int
    retention_check_interval_ms: int
    metadata_max_bytes: int
    topic_segment_bytes: int
    snapshot_min_records: int

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "OffsetsConfig":
        """offsets.retention.minutes is held in milliseconds."""
        return _copy(cls, values, offsets_retention_ms=values["offsets.retention.minutes"] * 60_000)


@_view({
    "transaction.max.timeout.ms": "max_timeout_ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "abort_timed_out_cleanup_interval_ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "remove_expired_cleanup_interval_ms",
    "transactional.id.expiration.ms": "transactional_id_expiration_ms",
    "transaction.state.log.num.partitions": "state_log_num_partitions",
    "transaction.state.log.segment.bytes": "state_log_segment_bytes",
    "transaction.state.log.load.buffer.size": "state_log_load_buffer_bytes",
})
class TransactionConfig(_View):
    """The transaction coordinator and ``__transaction_state`` (Kafka ``TransactionStateManagerConfig``
    and ``TransactionLogConfig``)."""

    max_timeout_ms: int
    abort_timed_out_cleanup_interval_ms: int
    remove_expired_cleanup_interval_ms: int
    transactional_id_expiration_ms: int
    state_log_num_partitions: int
    state_log_segment_bytes: int
    state_log_load_buffer_bytes: int


# --- the daemon's periodic and background work ----------------------------------------------------------
#: Longest period a periodic task is given (asyncio timers overflow far below Kafka's Long.MAX_VALUE).
MAX_PERIOD_MS = 2**31


@_view({
    "log.retention.check.interval.ms": "retention_check_interval_ms",
    "log.initial.task.delay.ms": "initial_task_delay_ms",
    "log.flush.offset.checkpoint.interval.ms": "flush_offset_checkpoint_interval_ms",
    "log.flush.start.offset.checkpoint.interval.ms": "flush_start_offset_checkpoint_interval_ms",
    "log.flush.scheduler.interval.ms": "flush_scheduler_interval_ms",
    "background.threads": "background_threads",
    "num.io.threads": "io_threads",
    "producer.id.expiration.ms": "producer_id_expiration_ms",
    "num.recovery.threads.per.data.dir": "recovery_threads_per_data_dir",
})
class LogSchedulingConfig(_View):
    """The log manager's threads and the periods of the daemon's log tasks (retention, checkpoints, flush)."""

    retention_check_interval_ms: int
    initial_task_delay_ms: int
    flush_offset_checkpoint_interval_ms: int
    flush_start_offset_checkpoint_interval_ms: int
    flush_scheduler_interval_ms: int
    background_threads: int
    io_threads: int
    producer_id_expiration_ms: int
    recovery_threads_per_data_dir: int

    @property
    def flush_check_interval_ms(self) -> int:
        """How often topics' ``flush.ms`` is checked: ``log.flush.scheduler.interval.ms``. Its Kafka default,
        Long.MAX_VALUE, means "never" in Kafka, where a topic's ``flush.ms`` then has no effect at all;
        Sundial checks every second instead (and for 0, which Kafka's scheduler refuses)."""
        interval = self.flush_scheduler_interval_ms
        return interval if 0 < interval <= MAX_PERIOD_MS else 1000
