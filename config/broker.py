"""Broker-level settings (Kafka's ``KafkaConfig``) with Kafka's names and defaults.

Where Sundial's default differs from Kafka's, the doc of the key says so:
``listeners`` binds loopback only, ``log.dir`` is ``./sundial-data`` and
``socket.listen.backlog.size`` is 1024 (Kafka's 50 makes a storm of new
connections wait for the 1 s SYN retransmit). Sundial's own keys carry the
``sundial.`` prefix so they can never clash with a Kafka name; the consumed
retention keys of seed 004 keep the names the seed gives them.

Keys Kafka knows but a single-node broker has no use for (``zookeeper.connect``,
``process.roles``, ``controller.quorum.voters`` …) are accepted and ignored with a
warning, so a ``server.properties`` copied from Kafka still starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .defs import (
    LONG_MAX,
    INT_MAX,
    ConfigDef,
    ConfigError,
    ConfigRegistry,
    ConfigType,
    at_least,
    between,
    each_one_of,
    format_value,
    compatibility_only,
    did_you_mean,
    one_of,
    os_default_or_at_least,
    suggestion,
)
from .group_coordinator import GROUP_COORDINATOR_CONFIGS, GroupCoordinatorConfig
from .share import SHARE_COORDINATOR_CONFIGS, ShareCoordinatorConfig
from .quotas import QUOTA_CONFIGS, ClientQuotaConfig
from .components import (
    AuthorizerConfig,
    ClassicGroupsConfig,
    LogSchedulingConfig,
    OffsetsConfig,
    SaslConfig,
    SocketServerConfig,
    SslConfig,
    TopicAdminConfig,
    TransactionConfig,
)
from .topic import (
    TOPIC_CONFIGS,
    ConfigEntry,
    ConfigSource,
    SINGLE_NODE_IN_SYNC,
    SINGLE_NODE_NO_ELECTION,
    TopicConfig,
    record_version_for,
    resolve_topic_config,
)

B = ConfigType.BOOLEAN
S = ConfigType.STRING
I = ConfigType.INT
L = ConfigType.LONG
D = ConfigType.DOUBLE

BROKER_CONFIGS = ConfigRegistry()
_def = BROKER_CONFIGS.add

# --- server and listeners --------------------------------------------------------
_def(ConfigDef("node.id", I, 1, "Id of this broker in Metadata answers.", at_least(0), aliases=("broker.id",)))
_def(ConfigDef("listeners", S, "PLAINTEXT://127.0.0.1:9092",
               "Comma-separated listener URIs NAME://host:port (Sundial binds loopback by default; "
               "an empty host binds all interfaces)."))
_def(ConfigDef("advertised.listeners", S, None,
               "Listener URIs given to clients in Metadata; defaults to listeners. Needed when a listener "
               "binds 0.0.0.0 or :: (clients cannot connect to those); an empty host advertises the host's "
               "name."))
_def(ConfigDef("listener.security.protocol.map", S,
               "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
               "Listener name to security protocol."))
_def(ConfigDef("log.dirs", ConfigType.LIST, None, "Data directories; overrides log.dir."))
_def(ConfigDef("log.dir", S, "./sundial-data", "Data directory when log.dirs is not set (Kafka: /tmp/kafka-logs)."))
_def(ConfigDef("num.partitions", I, 1, "Partitions of an auto-created topic.", at_least(1)))
_def(compatibility_only(ConfigDef("default.replication.factor", I, 1,
                                 "Replicas of an auto-created topic.", at_least(1)),
                       "Sundial is a single node: every partition has exactly one replica"))
_def(ConfigDef("auto.create.topics.enable", B, True, "Create unknown topics on Metadata and Produce."))
_def(ConfigDef("delete.topic.enable", B, True, "Allow DeleteTopics."))
_def(ConfigDef("num.recovery.threads.per.data.dir", I, 1,
               "Threads per data directory that open and recover its logs at start-up (all directories at once).",
               at_least(1)))
_def(ConfigDef("num.io.threads", I, 8,
               "Threads that write Produce and transaction-marker batches into their segments, and as many "
               "that fsync them (each pool started as needed; in Kafka the request handler threads, which do "
               "this disk work).", between(1, 1024)))
_def(ConfigDef("background.threads", I, 10, "Threads of the scheduler that does the broker's blocking file work "
               "(deleting segments, opening partitions, checkpoints, warming Fetch reads).", at_least(1)))
_def(ConfigDef("log.initial.task.delay.ms", L, 30_000, "Delay before the first retention pass.", at_least(0)))

# --- log defaults (topic synonyms) -------------------------------------------------
_def(ConfigDef("log.segment.bytes", I, 1_073_741_824, "Default segment.bytes.", at_least(14)))
_def(ConfigDef("log.roll.ms", L, None, "Default segment.ms; wins over log.roll.hours.", at_least(1)))
_def(ConfigDef("log.roll.hours", I, 168, "Default segment.ms in hours.", at_least(1)))
_def(ConfigDef("log.roll.jitter.ms", L, None, "Default segment.jitter.ms.", at_least(0)))
_def(ConfigDef("log.roll.jitter.hours", I, 0, "Default segment.jitter.ms in hours.", at_least(0)))
_def(ConfigDef("log.retention.ms", L, None, "Default retention.ms; wins over minutes and hours."))
_def(ConfigDef("log.retention.minutes", I, None, "Default retention.ms in minutes."))
_def(ConfigDef("log.retention.hours", I, 168, "Default retention.ms in hours."))
_def(ConfigDef("log.retention.bytes", L, -1, "Default retention.bytes."))
_def(ConfigDef("log.retention.check.interval.ms", L, 300_000, "Period of the retention pass.", at_least(1)))
_def(ConfigDef("log.segment.delete.delay.ms", L, 60_000, "Default file.delete.delay.ms.", at_least(0)))
_def(ConfigDef("log.index.interval.bytes", I, 4096, "Default index.interval.bytes.", at_least(0)))
_def(ConfigDef("log.index.size.max.bytes", I, 10_485_760, "Default segment.index.bytes.", at_least(4)))
_def(ConfigDef("log.message.timestamp.type", S, "CreateTime", "Default message.timestamp.type.",
               one_of("CreateTime", "LogAppendTime")))
_def(ConfigDef("log.message.timestamp.difference.max.ms", L, LONG_MAX,
               "Default message.timestamp.difference.max.ms (deprecated symmetric bound).", at_least(0),
               aliases=("max.message.time.difference.ms",)))
_def(ConfigDef("log.message.timestamp.before.max.ms", L, LONG_MAX, "Default message.timestamp.before.max.ms.",
               at_least(0)))
_def(ConfigDef("log.message.timestamp.after.max.ms", L, 3_600_000, "Default message.timestamp.after.max.ms.",
               at_least(0)))
_def(ConfigDef("log.message.format.version", S, "3.0-IV1", "Default message.format.version.",
               lambda v: record_version_for(v) and None))
_def(ConfigDef("log.message.downconversion.enable", B, True, "Default message.downconversion.enable."))
_def(ConfigDef("message.max.bytes", I, 1_048_588, "Default max.message.bytes.", at_least(0)))
_def(ConfigDef("log.flush.interval.messages", L, LONG_MAX, "Default flush.messages.", at_least(1)))
_def(ConfigDef("log.flush.interval.ms", L, None, "Default flush.ms.", at_least(0)))
_def(ConfigDef("log.flush.scheduler.interval.ms", L, LONG_MAX,
               "How often flush.ms is checked (the default, or 0: every second; docs/durability.md).", at_least(0)))
_def(ConfigDef("log.flush.offset.checkpoint.interval.ms", I, 60_000,
               "How often recovery points are checkpointed.", at_least(0)))
_def(ConfigDef("log.flush.start.offset.checkpoint.interval.ms", I, 60_000,
               "How often log start offsets are checkpointed.", at_least(0)))
_def(ConfigDef("log.preallocate", B, False, "Default preallocate."))
_def(ConfigDef("log.cleanup.policy", ConfigType.LIST, ("delete",), "Default cleanup.policy.",
               each_one_of("delete", "compact")))
_def(ConfigDef("log.cleaner.delete.retention.ms", L, 86_400_000, "Default delete.retention.ms.", at_least(0)))
_def(ConfigDef("log.cleaner.min.compaction.lag.ms", L, 0, "Default min.compaction.lag.ms.", at_least(0)))
_def(ConfigDef("log.cleaner.max.compaction.lag.ms", L, LONG_MAX, "Default max.compaction.lag.ms.", at_least(1)))
_def(ConfigDef("log.cleaner.min.cleanable.ratio", D, 0.5, "Default min.cleanable.dirty.ratio.", between(0, 1)))

# --- log cleaner (Kafka CleanerConfig; docs/compaction.md) ---------------------------
_def(ConfigDef("log.cleaner.enable", B, True,
               "Run the log cleaner: topics with cleanup.policy=compact are compacted only while it runs."))
_def(ConfigDef("log.cleaner.threads", I, 1,
               "Cleaner threads, each cleaning one log at a time with a dedupe map of "
               "dedupe.buffer.size / threads.", at_least(0)))
_def(ConfigDef("log.cleaner.dedupe.buffer.size", L, 128 * 1024 * 1024,
               "Memory of the key -> offset map of one cleaning pass, across all cleaner threads."))
_def(ConfigDef("log.cleaner.io.buffer.load.factor", D, 0.9,
               "How full the dedupe map may get before a pass stops mapping (and cleans up to there)."))
_def(ConfigDef("log.cleaner.io.buffer.size", I, 512 * 1024,
               "Read and write buffer memory of the cleaner threads (half each).", at_least(0)))
_def(ConfigDef("log.cleaner.io.max.bytes.per.second", D, 1.7976931348623157e308,
               "Throttle: the cleaner's read plus write rate is kept below this on average."))
_def(ConfigDef("log.cleaner.backoff.ms", L, 15_000, "Sleep of the cleaner when no log needs cleaning.",
               at_least(0)))
_def(ConfigDef("compression.type", S, "producer", "Default compression.type.",
               one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")))
_def(compatibility_only(ConfigDef("min.insync.replicas", I, 1, "Default min.insync.replicas.", at_least(1)),
                       SINGLE_NODE_IN_SYNC))
_def(compatibility_only(ConfigDef("unclean.leader.election.enable", B, False,
                                 "Default unclean.leader.election.enable."), SINGLE_NODE_NO_ELECTION))

# --- consumed-log retention (seed 004) --------------------------------------------
_def(ConfigDef("log.retention.commitoffset.enable", B, False,
               "Consumed-log retention: delete a segment early once every consumer group that reads the "
               "topic has committed past it and it is older than retention.commitoffset.ms "
               "(docs/retention.md)."))
_def(ConfigDef("log.retention.commitoffset.ms", L, None, "Default retention.commitoffset.ms.", at_least(0)))
_def(ConfigDef("log.retention.commitoffset.minutes", I, None, "Default retention.commitoffset.ms in minutes.",
               at_least(0)))
_def(ConfigDef("log.retention.commitoffset.hours", I, None, "Default retention.commitoffset.ms in hours.",
               at_least(0)))

# --- network and requests ----------------------------------------------------------
_def(ConfigDef("socket.request.max.bytes", I, 104_857_600, "Largest request frame accepted.", at_least(1)))
_def(ConfigDef("socket.send.buffer.bytes", I, 102_400, "SO_SNDBUF of accepted sockets; -1 keeps the OS value.",
               os_default_or_at_least(1)))
_def(ConfigDef("socket.receive.buffer.bytes", I, 102_400,
               "SO_RCVBUF of the listening sockets (accepted ones inherit it); -1 keeps the OS value.",
               os_default_or_at_least(1)))
_def(ConfigDef("socket.listen.backlog.size", I, 1024, "listen() backlog (Kafka: 50).", at_least(1)))
_def(ConfigDef("connections.max.idle.ms", L, 600_000, "Close connections idle this long.", at_least(0)))
_def(ConfigDef("max.connections", I, INT_MAX, "Cap on open client connections.", at_least(0)))
_def(ConfigDef("max.connections.per.ip", I, INT_MAX, "Cap on open connections from one address.", at_least(0)))
_def(ConfigDef("max.connections.per.ip.overrides", S, "", "host:count pairs overriding max.connections.per.ip."))
_def(ConfigDef("queued.max.requests", I, 500, "Requests read ahead per connection before reading pauses.",
               at_least(1)))
_def(ConfigDef("queued.max.request.bytes", L, -1, "Bytes of queued requests, all connections; -1 unlimited."))
_def(ConfigDef("fetch.max.bytes", I, 57_671_680, "Upper bound on a Fetch response's max_bytes.", at_least(0)))
_def(ConfigDef("max.request.partition.size.limit", I, 2000,
               "Most partitions one DescribeTopicPartitions answer holds (the request's ResponsePartitionLimit "
               "is capped by it).", at_least(1)))

# --- groups and committed offsets --------------------------------------------------
_def(ConfigDef("group.initial.rebalance.delay.ms", I, 3000, "Wait for more members before the first rebalance.",
               at_least(0)))
_def(ConfigDef("group.min.session.timeout.ms", I, 6000, "Smallest session timeout a member may ask for."))
_def(ConfigDef("group.max.session.timeout.ms", I, 1_800_000, "Largest session timeout a member may ask for."))
_def(ConfigDef("group.max.size", I, INT_MAX, "Largest number of members in a group.", at_least(1)))
_def(ConfigDef("offsets.retention.minutes", I, 10_080, "Keep committed offsets of an empty group this long.",
               at_least(1)))
_def(ConfigDef("offsets.retention.check.interval.ms", L, 600_000, "Period of the offsets expiry pass.",
               at_least(1)))
_def(ConfigDef("offsets.topic.segment.bytes", I, 104_857_600, "segment.bytes of the internal offsets log.",
               at_least(1)))
_def(ConfigDef("offset.metadata.max.bytes", I, 4096, "Largest metadata string stored with a commit."))
_def(ConfigDef("sundial.offsets.snapshot.min.records", I, 10_000,
               "Records in __consumer_offsets before the live state is re-appended and older records dropped.",
               at_least(1)))
# --- group protocols: group.consumer.*, group.share.*, group.streams.* (config/group_coordinator.py) --------
for _group_def in GROUP_COORDINATOR_CONFIGS + SHARE_COORDINATOR_CONFIGS:
    _def(_group_def)
del _group_def

# --- client quotas: quota.window.* (config/quotas.py; docs/quotas.md) -----------------------
for _quota_def in QUOTA_CONFIGS:
    _def(_quota_def)
del _quota_def

_def(ConfigDef("producer.id.expiration.ms", I, 86_400_000,
               "Forget an idempotent producer's state after this long without appends.", at_least(1)))

# --- transactions (issue 14; docs/transactions.md) ---------------------------------------
_def(ConfigDef("transaction.max.timeout.ms", I, 900_000,
               "Largest transaction.timeout.ms a producer may ask for (InitProducerId answers "
               "INVALID_TRANSACTION_TIMEOUT above it).", at_least(1)))
_def(ConfigDef("transaction.state.log.num.partitions", I, 50,
               "Partitions of __transaction_state when it is created (fixed afterwards).", at_least(1)))
_def(ConfigDef("transaction.state.log.segment.bytes", I, 104_857_600,
               "segment.bytes of __transaction_state.", at_least(1)))
_def(ConfigDef("transaction.state.log.load.buffer.size", I, 5_242_880,
               "Bytes read at a time while loading __transaction_state.", at_least(1)))
_def(ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", I, 10_000,
               "How often transactions open longer than their timeout are fenced and aborted.", at_least(1)))
_def(ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", I, 3_600_000,
               "How often transactional ids past transactional.id.expiration.ms are removed.", at_least(1)))
_def(ConfigDef("transactional.id.expiration.ms", I, 604_800_000,
               "Forget a transactional id whose last transaction ended (or that was initialised) this long ago.",
               at_least(1)))

# --- security (issue 7) ----------------------------------------------------------------
_def(ConfigDef("ssl.keystore.location", S, None, "PEM file with the server certificate chain (and key)."))
_def(ConfigDef("ssl.keystore.password", ConfigType.PASSWORD, None, "Password of the keystore.", sensitive=True))
_def(ConfigDef("ssl.key.password", ConfigType.PASSWORD, None, "Password of the private key.", sensitive=True))
_def(ConfigDef("ssl.keystore.type", S, "PEM", "Keystore format (Sundial reads PEM)."))
_def(ConfigDef("ssl.truststore.location", S, None, "PEM file of CA certificates for client authentication."))
_def(ConfigDef("ssl.truststore.password", ConfigType.PASSWORD, None,
               "Password of the truststore: refused, as Kafka refuses it for PEM (a PEM bundle has none).",
               sensitive=True))
_def(ConfigDef("ssl.truststore.type", S, "PEM", "Truststore format (Sundial reads PEM)."))
_def(ConfigDef("ssl.client.auth", S, "none", "Client certificate policy.", one_of("none", "requested", "required")))
_def(ConfigDef("ssl.enabled.protocols", ConfigType.LIST, ("TLSv1.2", "TLSv1.3"), "Allowed TLS versions."))
_def(ConfigDef("ssl.cipher.suites", ConfigType.LIST, (), "Allowed cipher suites (empty: library defaults)."))
_def(ConfigDef("sasl.enabled.mechanisms", ConfigType.LIST, ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
               "SASL mechanisms offered on SASL listeners (Kafka's default is GSSAPI, which Sundial lacks)."))
_def(ConfigDef("authorizer.class.name", S, "", "Any non-empty value turns on Sundial's ACL authorizer."))
_def(ConfigDef("super.users", S, None, "Semicolon-separated principals (User:name) that bypass ACLs."))
_def(ConfigDef("allow.everyone.if.no.acl.found", B, False, "Allow access to resources without ACLs."))
_def(ConfigDef("connection.failed.authentication.delay.ms", I, 100,
               "How long the answer to a failed SASL authentication, and the close after it, is delayed "
               "(slows down password guessing).", at_least(0)))
_def(ConfigDef("sundial.authentication.failure.log.interval.ms", L, 10_000,
               "authentication_failed is logged for the first failure from a client address, then at most once "
               "per this interval per address, with the count of failures not logged since; 0 logs every one.",
               at_least(0)))

# --- Sundial's own keys ---------------------------------------------------------------
_def(ConfigDef("sundial.event.loop", S, "auto", "auto (uvloop when installed), uvloop, or asyncio.",
               one_of("auto", "uvloop", "asyncio")))
_def(ConfigDef("sundial.metrics.listener", S, None,
               "host:port (or [ipv6]:port) of the Prometheus metrics endpoint; port 0 picks a free one; "
               "unset or empty means off.", lambda v: v and parse_host_port(v) and None))
_def(ConfigDef("sundial.metrics.internal.topics.enabled", B, False,
               "Report the per-partition series (sundial_log_*) of internal topics (__consumer_offsets, "
               "__transaction_state, __share_group_state) too; off by default, as they would outnumber the rest."))
_def(ConfigDef("sundial.shutdown.grace.ms", L, 10_000, "How long a clean shutdown waits for in-flight requests.",
               at_least(0)))
_def(ConfigDef("sundial.credentials.file", S, None,
               "SCRAM/PLAIN credentials store; default <first log dir>/credentials.json."))
_def(ConfigDef("sundial.acls.file", S, None, "ACL rules file; default <first log dir>/acls.json."))
_def(ConfigDef("sundial.connection.max.queued.bytes", L, 16 * 1024 * 1024,
               "Bytes of request frames queued on one connection before reading from it pauses.", at_least(1)))
_def(ConfigDef("sundial.connection.max.pending.produce.requests", I, 100,
               "Produce requests (acks 1 or all) one connection may have appended but not yet answered "
               "while it goes on reading the requests behind them; 1 turns pipelining off.", at_least(1)))
_def(ConfigDef("sundial.connection.max.pending.produce.bytes", L, 16 * 1024 * 1024,
               "Bytes of Produce requests one connection may have appended but not yet answered.",
               at_least(1)))

def parse_host_port(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``host:port``, ``[ipv6]:port`` or ``:port`` (``default_host``) → (host, port).

    An ``http://`` prefix is accepted (a URL pasted from a scrape config). Raises
    ValueError with a message a user can act on; ``ConfigDef.parse`` names the key.
    """
    value = text.strip()
    if value.lower().startswith("http://"):
        value = value[len("http://"):].rstrip("/")
    if value.startswith("["):
        host, sep, port_text = value[1:].partition("]")
        if not sep or not port_text.startswith(":") or not host:
            raise ValueError("expected host:port, e.g. 127.0.0.1:9404 or [::1]:9404")
        port_text = port_text[1:]
    else:
        host, sep, port_text = value.rpartition(":")
        if not sep:
            raise ValueError("expected host:port, e.g. 127.0.0.1:9404")
        if ":" in host:
            raise ValueError("write an IPv6 address in brackets, e.g. [::1]:9404")
    if not port_text.isdigit():
        raise ValueError(f"the port {port_text!r} is not a number" if port_text else "the port is missing")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"the port {port} is above 65535")
    if any(c.isspace() or c in "/?#@" for c in host):
        raise ValueError(f"{host!r} is not a host name or address")
    return host or default_host, port


#: Keys of Kafka's server.properties that a single node ignores (warned, not refused).
IGNORED_KAFKA_KEYS = frozenset({
    "zookeeper.connect", "zookeeper.connection.timeout.ms", "process.roles", "controller.quorum.voters",
    "controller.quorum.bootstrap.servers", "controller.listener.names", "inter.broker.listener.name",
    "offsets.topic.replication.factor", "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr", "num.network.threads",
    "share.coordinator.state.topic.replication.factor", "share.coordinator.state.topic.min.isr",
    "inter.broker.protocol.version", "num.replica.fetchers", "metadata.log.dir",
})


#: Addresses a listener may bind but a client cannot connect to (Kafka refuses to advertise 0.0.0.0).
WILDCARD_HOSTS = ("0.0.0.0", "::")


@dataclass(frozen=True, slots=True)
class Listener:
    """One parsed listener URI."""

    name: str
    host: str
    port: int
    security_protocol: str

    @property
    def uri(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listeners(text: str, protocol_map: str, key: str = "listeners") -> list[Listener]:
    mapping: dict[str, str] = {}
    for pair in protocol_map.split(","):
        if not pair.strip():
            continue
        if ":" not in pair:
            raise ConfigError("listener.security.protocol.map", f"bad entry {pair!r}")
        name, proto = pair.split(":", 1)
        mapping[name.strip().upper()] = proto.strip().upper()
    listeners: list[Listener] = []
    seen: set[str] = set()
    for uri in text.split(","):
        uri = uri.strip()
        if not uri:
            continue
        if "://" not in uri:
            raise ConfigError(key, f"listener {uri!r} is not NAME://host:port")
        name, rest = uri.split("://", 1)
        name = name.strip().upper()
        host, sep, port_text = rest.rpartition(":")
        if not sep:
            raise ConfigError(key, f"listener {uri!r} has no port")
        try:
            port = int(port_text)
        except ValueError:
            raise ConfigError(key, f"listener {uri!r} has a bad port") from None
        if not 0 <= port <= 65535:
            raise ConfigError(key, f"listener {uri!r} port out of range")
        host = host.strip("[]")
        if name in seen:
            raise ConfigError(key, f"listener name {name} appears twice")
        seen.add(name)
        proto = mapping.get(name)
        if proto is None:
            raise ConfigError(key, f"listener {name} has no entry in listener.security.protocol.map")
        if proto not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ConfigError("listener.security.protocol.map", f"unknown security protocol {proto}")
        listeners.append(Listener(name, host, port, proto))
    if not listeners and key == "listeners":
        raise ConfigError(key, "no listener given")
    return listeners


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The log cleaner's settings (Kafka ``CleanerConfig``), typed; see docs/compaction.md."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    dedupe_buffer_load_factor: float = 0.9
    io_buffer_size: int = 512 * 1024
    max_io_bytes_per_second: float = 1.7976931348623157e308
    backoff_ms: int = 15_000
    max_message_bytes: int = 1_048_588

    @property
    def dedupe_buffer_per_thread(self) -> int:
        """Kafka sizes each thread's offset map as dedupe.buffer.size / threads (capped at 2 GiB)."""
        return min(self.dedupe_buffer_size // max(self.threads, 1), 2**31 - 1)


#: The broker key behind each field of :class:`CleanerConfig`.
CLEANER_FIELD_FOR_KEY = {
    "log.cleaner.enable": "enable",
    "log.cleaner.threads": "threads",
    "log.cleaner.dedupe.buffer.size": "dedupe_buffer_size",
    "log.cleaner.io.buffer.load.factor": "dedupe_buffer_load_factor",
    "log.cleaner.io.buffer.size": "io_buffer_size",
    "log.cleaner.io.max.bytes.per.second": "max_io_bytes_per_second",
    "log.cleaner.backoff.ms": "backoff_ms",
    "message.max.bytes": "max_message_bytes",
}


class BrokerConfig:
    """The broker's settings: every defined key typed, and which ones the user set.

    ``explicit`` holds only keys set in ``server.properties`` or by ``--override``
    (under canonical names); topic defaults are derived from it so that
    DescribeConfigs can tell a broker-set value from a built-in default.
    """

    def __init__(self, explicit: Mapping[str, Any] | None = None,
                 unknown: Mapping[str, str] | None = None) -> None:
        self.explicit: dict[str, Any] = {}
        for name, raw in (explicit or {}).items():
            d = BROKER_CONFIGS.get(name)
            if d is None:
                raise ConfigError(name, "unknown broker config")
            self.explicit[d.name] = d.parse(raw)
        self.unknown: dict[str, str] = dict(unknown or {})
        self.values: dict[str, Any] = {d.name: self.explicit.get(d.name, d.default) for d in BROKER_CONFIGS}
        self._check()

    def _check(self) -> None:
        self._check_advertised(self.listeners, self.advertised_listeners)
        #: The group protocols' settings, typed (Kafka's cross-setting checks run here).
        self.group_coordinator = GroupCoordinatorConfig.from_values(self.values)
        #: The share coordinator's settings (share.coordinator.*), typed.
        self.share_coordinator = ShareCoordinatorConfig.from_values(self.values)
        # One typed view per component (config.components), built once: broker keys are static.
        self.sockets = SocketServerConfig.from_values(self.values)
        self.ssl = SslConfig.from_values(self.values)
        self.sasl = SaslConfig.from_values(self.values)
        self.authorizer = AuthorizerConfig.from_values(self.values)
        self.topic_admin = TopicAdminConfig.from_values(self.values)
        self.classic_groups = ClassicGroupsConfig.from_values(self.values)
        self.offsets = OffsetsConfig.from_values(self.values)
        self.transactions = TransactionConfig.from_values(self.values)
        self.log_scheduling = LogSchedulingConfig.from_values(self.values)
        self.quotas = ClientQuotaConfig.from_values(self.values)
        threads = self.values["log.cleaner.threads"]
        if threads < 1 or self.values["log.cleaner.dedupe.buffer.size"] // threads <= 1024 * 1024:
            # Kafka KafkaConfig: require(dedupeBufferSize / threads > 1 MiB)
            raise ConfigError("log.cleaner.dedupe.buffer.size",
                              "log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread "
                              "(and log.cleaner.threads at least 1).")
        try:
            defaults = self.topic_defaults()
        except ConfigError as exc:
            if exc.name != "retention.commitoffset.ms":
                raise
            # Name the broker keys the user set, not the topic keys they stand in for.
            raise ConfigError("log.retention.commitoffset.ms",
                              exc.message.replace("retention.ms", "log.retention.ms|minutes|hours")) from None
        if defaults.retention_ms >= 0 and any(
                k in self.explicit for k in ("log.retention.commitoffset.ms", "log.retention.commitoffset.minutes",
                                             "log.retention.commitoffset.hours")):
            if defaults.retention_commitoffset_ms > defaults.retention_ms:
                raise ConfigError("log.retention.commitoffset.ms",
                                  "consumed retention cannot be longer than log.retention.*")

    def _check_advertised(self, listeners: list[Listener], advertised: list[Listener]) -> None:
        """Kafka's checks of what clients are told: every advertised name is a listener, and no
        advertised host is the wildcard 0.0.0.0 or :: (clients cannot connect to it). When
        advertised.listeners is unset the listeners are advertised, so a listener bound to a
        wildcard needs advertised.listeners (an empty host advertises the host's name, as Kafka)."""
        names = {l.name for l in listeners}
        explicit = bool(self.values["advertised.listeners"])
        for adv in advertised:
            if adv.name not in names:
                raise ConfigError("advertised.listeners", f"listener name {adv.name} is not in listeners "
                                  f"({', '.join(sorted(names))})")
            if adv.host in WILDCARD_HOSTS:
                shown = f"[{adv.host}]" if ":" in adv.host else adv.host
                if explicit:
                    raise ConfigError("advertised.listeners", f"{adv.name}://{shown}:{adv.port} uses the "
                                      f"non-routable address {adv.host}; advertise a host name or address "
                                      f"clients can reach")
                raise ConfigError("advertised.listeners", f"listener {adv.name} binds {adv.host}, which clients "
                                  f"cannot connect to; set advertised.listeners={adv.name}://HOST:{adv.port} "
                                  f"with a host name or address clients can reach")

    def __getitem__(self, name: str) -> Any:
        canon = BROKER_CONFIGS.canonical(name)
        if canon is None:
            raise KeyError(name)
        return self.values[canon]

    def get(self, name: str, default: Any = None) -> Any:
        canon = BROKER_CONFIGS.canonical(name)
        return self.values.get(canon, default) if canon else default

    # -- derived views --------------------------------------------------------------
    @property
    def node_id(self) -> int:
        return self.values["node.id"]

    @property
    def listeners(self) -> list[Listener]:
        return parse_listeners(self.values["listeners"], self.values["listener.security.protocol.map"])

    @property
    def advertised_listeners(self) -> list[Listener]:
        text = self.values["advertised.listeners"]
        if not text:
            return self.listeners
        return parse_listeners(text, self.values["listener.security.protocol.map"], "advertised.listeners")

    @property
    def metrics_listener(self) -> tuple[str, int] | None:
        """(host, port) of the Prometheus endpoint, or None when it is off."""
        text = self.values["sundial.metrics.listener"]
        return parse_host_port(text) if text else None

    @property
    def metrics_internal_topics_enabled(self) -> bool:
        """sundial.metrics.internal.topics.enabled: report the internal topics' partition series too."""
        return self.values["sundial.metrics.internal.topics.enabled"]

    @property
    def max_request_partition_size_limit(self) -> int:
        """max.request.partition.size.limit: most partitions in one DescribeTopicPartitions answer."""
        return self.values["max.request.partition.size.limit"]

    @property
    def fetch_max_bytes(self) -> int:
        """fetch.max.bytes: the upper bound on a Fetch response's max_bytes."""
        return self.values["fetch.max.bytes"]

    @property
    def log_dirs(self) -> list[str]:
        dirs = self.values["log.dirs"]
        if dirs:
            return list(dirs)
        return [self.values["log.dir"]]

    @property
    def cleaner(self) -> CleanerConfig:
        return CleanerConfig(**{field: self.values[key] for key, field in CLEANER_FIELD_FOR_KEY.items()})

    def topic_defaults(self) -> TopicConfig:
        """Effective settings of a topic without overrides."""
        return resolve_topic_config({}, self.explicit)

    def topic_config(self, overrides: Mapping[str, Any] | None) -> TopicConfig:
        """Effective settings of a topic with ``overrides`` (raises ConfigError)."""
        return resolve_topic_config(overrides or {}, self.explicit)

    def describe(self, include_synonyms: bool = False) -> list[ConfigEntry]:
        """DescribeConfigs rows for the broker resource."""
        rows = []
        for d in BROKER_CONFIGS:
            explicit = d.name in self.explicit
            value = self.values[d.name]
            source = ConfigSource.STATIC_BROKER_CONFIG if explicit else ConfigSource.DEFAULT_CONFIG
            text = None if d.sensitive else format_value(d.type, value)
            synonyms: tuple = ()
            if include_synonyms:
                syn = []
                if explicit:
                    syn.append((d.name, text, ConfigSource.STATIC_BROKER_CONFIG))
                if d.default is not None:
                    syn.append((d.name, None if d.sensitive else format_value(d.type, d.default),
                                ConfigSource.DEFAULT_CONFIG))
                synonyms = tuple(syn)
            rows.append(ConfigEntry(d.name, text, source, True, d.sensitive, d.type, d.doc, synonyms))
        return rows


def unknown_key_warnings(unknown: Iterable[str]) -> list[tuple[str, str | None]]:
    """(key, the broker key it likely misspells or None) for each unknown key, sorted; Kafka's keys that
    a single node ignores (:data:`IGNORED_KAFKA_KEYS`) get no suggestion."""
    known = list(BROKER_CONFIGS.defs)
    return [(key, None if key in IGNORED_KAFKA_KEYS else did_you_mean(key, known)) for key in sorted(unknown)]


def split_known(items: Iterable[tuple[str, str]]) -> tuple[dict[str, str], dict[str, str]]:
    """Separate defined broker keys from unknown ones (the latter are warned about)."""
    known: dict[str, str] = {}
    unknown: dict[str, str] = {}
    for name, value in items:
        if name in BROKER_CONFIGS:
            known[name] = value
        elif name in TOPIC_CONFIGS and not name.startswith("log."):
            # A topic key at broker level is a common slip; Kafka ignores it too.
            unknown[name] = value
        else:
            unknown[name] = value
    return known, unknown
