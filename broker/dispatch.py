"""The handler table: API key → handler, the versions the broker advertises, pipelining.

:data:`ROUTES` is the one place that says which handler serves which API. Each row is a
:class:`Route`: the API key, its handler (``async handler(ctx, request) -> response``,
see :mod:`broker.handlers`), optionally ``versions=(min, max)`` narrowing what the
protocol package can decode, and optionally ``begin`` for a pipelined API.

* The advertised range of an API is the intersection of the protocol's
  ``SUPPORTED_VERSIONS`` and the row's ``versions``; an API without a row is not
  advertised at all (librdkafka, for one, sends whatever is advertised).
* ``begin(ctx, request)`` does the in-order part of a request at once and returns an
  awaitable of its response, so the connection can go on with the requests behind it
  (Produce with acks != 0, see :mod:`broker.produce_pipeline`).
* ``prepare(ctx, request)`` runs before ``begin`` or the handler, in request order: None
  when there is nothing to wait for, else an awaitable the connection awaits first
  (opening the partitions a request names off the loop, :mod:`broker.log_opening`).

Adding an API: write its handler in a module of :mod:`broker.handlers`, import the
module here and add one row. A row whose API the protocol package cannot decode is
a programming error and fails at start-up (never silently dropped).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from sundial.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from sundial.protocol.schema_codec import encode_api_versions_fallback

from .handlers import admin, api_versions, consumer_groups, fetch, groups, list_offsets, metadata, produce, \
    producer, sasl, security_admin, transactions
from .handlers import log_dirs
from .handlers import alter_replica_log_dirs
from .handlers import client_quotas
from . import log_opening
from .handlers import share_groups
from .handlers import share_fetch, share_offsets
from .handlers import write_txn_markers

Handler = Callable[[Any, Any], Awaitable[Any]]
Begin = Callable[[Any, Any], Awaitable[Any]]
Prepare = Callable[[Any, Any], "Awaitable[None] | None"]


@dataclass(frozen=True)
class Route:
    """One API: its key, its handler, an optional version narrowing, an optional pipelined start."""

    api_key: ApiKey
    handler: Handler
    versions: tuple[int, int] | None = None
    begin: Begin | None = None
    prepare: Prepare | None = None


ROUTES: tuple[Route, ...] = (
    Route(ApiKey.API_VERSIONS, api_versions.handle_api_versions),
    # Metadata and cluster
    Route(ApiKey.METADATA, metadata.handle_metadata),
    Route(ApiKey.DESCRIBE_CLUSTER, metadata.handle_describe_cluster),
    # Data plane
    Route(ApiKey.PRODUCE, produce.handle_produce, begin=produce.begin_produce,
          prepare=log_opening.open_produce_partitions),
    Route(ApiKey.FETCH, fetch.handle_fetch),   # opens its partitions itself (ReplicaManager.fetch)
    Route(ApiKey.LIST_OFFSETS, list_offsets.handle_list_offsets, prepare=log_opening.open_list_offsets_partitions),
    # Producers
    Route(ApiKey.INIT_PRODUCER_ID, producer.handle_init_producer_id),
    Route(ApiKey.OFFSET_FOR_LEADER_EPOCH, producer.handle_offset_for_leader_epoch,
          prepare=log_opening.open_offset_for_leader_epoch_partitions),
    # Topics and configs
    Route(ApiKey.CREATE_TOPICS, admin.handle_create_topics),
    Route(ApiKey.DELETE_TOPICS, admin.handle_delete_topics),
    Route(ApiKey.CREATE_PARTITIONS, admin.handle_create_partitions),
    Route(ApiKey.DESCRIBE_CONFIGS, admin.handle_describe_configs),
    Route(ApiKey.ALTER_CONFIGS, admin.handle_alter_configs),
    Route(ApiKey.INCREMENTAL_ALTER_CONFIGS, admin.handle_incremental_alter_configs),
    Route(ApiKey.DELETE_RECORDS, admin.handle_delete_records, prepare=log_opening.open_delete_records_partitions),
    # Log dirs and paged topic descriptions
    Route(ApiKey.DESCRIBE_LOG_DIRS, log_dirs.handle_describe_log_dirs),
    Route(ApiKey.DESCRIBE_TOPIC_PARTITIONS, log_dirs.handle_describe_topic_partitions),
    Route(ApiKey.ALTER_REPLICA_LOG_DIRS, alter_replica_log_dirs.handle_alter_replica_log_dirs),
    # Consumer groups. Kafka 4 removed OffsetCommit/OffsetFetch v0-v1 from its JSON; the
    # protocol package still decodes them and the handlers serve them (old simple consumers).
    Route(ApiKey.FIND_COORDINATOR, groups.handle_find_coordinator),
    Route(ApiKey.JOIN_GROUP, groups.handle_join_group),
    Route(ApiKey.SYNC_GROUP, groups.handle_sync_group),
    Route(ApiKey.HEARTBEAT, groups.handle_heartbeat),
    Route(ApiKey.LEAVE_GROUP, groups.handle_leave_group),
    Route(ApiKey.OFFSET_COMMIT, groups.handle_offset_commit, versions=(0, 9)),
    Route(ApiKey.OFFSET_FETCH, groups.handle_offset_fetch, versions=(0, 9)),
    Route(ApiKey.OFFSET_DELETE, groups.handle_offset_delete),
    Route(ApiKey.LIST_GROUPS, groups.handle_list_groups),
    Route(ApiKey.DESCRIBE_GROUPS, groups.handle_describe_groups),
    Route(ApiKey.DELETE_GROUPS, groups.handle_delete_groups),
    # Kafka 4's consumer group protocol (KIP-848)
    Route(ApiKey.CONSUMER_GROUP_HEARTBEAT, consumer_groups.handle_consumer_group_heartbeat),
    Route(ApiKey.CONSUMER_GROUP_DESCRIBE, consumer_groups.handle_consumer_group_describe),
    # Share groups (KIP-932): membership and assignment
    Route(ApiKey.SHARE_GROUP_HEARTBEAT, share_groups.handle_share_group_heartbeat),
    Route(ApiKey.SHARE_GROUP_DESCRIBE, share_groups.handle_share_group_describe),
    # Share groups (KIP-932): the data path
    Route(ApiKey.SHARE_FETCH, share_fetch.handle_share_fetch),
    Route(ApiKey.SHARE_ACKNOWLEDGE, share_fetch.handle_share_acknowledge),
    # Security
    Route(ApiKey.SASL_HANDSHAKE, sasl.handle_sasl_handshake),
    Route(ApiKey.SASL_AUTHENTICATE, sasl.handle_sasl_authenticate),
    Route(ApiKey.CREATE_ACLS, security_admin.handle_create_acls),
    Route(ApiKey.DESCRIBE_ACLS, security_admin.handle_describe_acls),
    Route(ApiKey.DELETE_ACLS, security_admin.handle_delete_acls),
    Route(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, security_admin.handle_describe_user_scram_credentials),
    Route(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, security_admin.handle_alter_user_scram_credentials),
    # Client quotas (docs/quotas.md)
    Route(ApiKey.DESCRIBE_CLIENT_QUOTAS, client_quotas.handle_describe_client_quotas),
    Route(ApiKey.ALTER_CLIENT_QUOTAS, client_quotas.handle_alter_client_quotas),
    # Transactions (FindCoordinator key type TRANSACTION and transactional InitProducerId are above)
    Route(ApiKey.ADD_PARTITIONS_TO_TXN, transactions.handle_add_partitions_to_txn),
    Route(ApiKey.ADD_OFFSETS_TO_TXN, transactions.handle_add_offsets_to_txn),
    Route(ApiKey.TXN_OFFSET_COMMIT, transactions.handle_txn_offset_commit),
    Route(ApiKey.END_TXN, transactions.handle_end_txn),
    Route(ApiKey.DESCRIBE_TRANSACTIONS, transactions.handle_describe_transactions),
    Route(ApiKey.LIST_TRANSACTIONS, transactions.handle_list_transactions),
    Route(ApiKey.DESCRIBE_PRODUCERS, transactions.handle_describe_producers,
          prepare=log_opening.open_describe_producers_partitions),
    Route(ApiKey.WRITE_TXN_MARKERS, write_txn_markers.handle_write_txn_markers),
    # Share groups (KIP-932): the share-group offsets admin APIs
    Route(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, share_offsets.handle_describe_share_group_offsets,
          prepare=log_opening.open_describe_share_group_offsets_partitions),
    Route(ApiKey.ALTER_SHARE_GROUP_OFFSETS, share_offsets.handle_alter_share_group_offsets),
    Route(ApiKey.DELETE_SHARE_GROUP_OFFSETS, share_offsets.handle_delete_share_group_offsets),
)


def advertised_range(route: Route) -> tuple[int, int] | None:
    """The versions served for ``route``: the protocol's range narrowed by the row (None: empty)."""
    supported = SUPPORTED_VERSIONS.get(route.api_key)
    if supported is None:
        raise ValueError(f"no codec for API {route.api_key!r}: the protocol package must decode it first")
    lo, hi = supported
    if route.versions is not None:
        lo, hi = max(lo, route.versions[0]), min(hi, route.versions[1])
    return (lo, hi) if lo <= hi else None


class Dispatcher:
    """The routes indexed by API key, as the connection looks them up per request."""

    def __init__(self, routes: tuple[Route, ...] = ROUTES) -> None:
        self.handlers: dict[int, Handler] = {}
        self.advertised: dict[int, tuple[int, int]] = {}
        self.pipelined: dict[int, Begin] = {}
        self.prepare: dict[int, Prepare] = {}
        #: ApiVersions response bodies per (version, error): the table is fixed once built.
        self.api_versions_bodies: dict[tuple[int, int], bytes] = {}
        for route in routes:
            key = int(route.api_key)
            if key in self.handlers:
                raise ValueError(f"two routes for API {route.api_key!r}")
            served = advertised_range(route)
            if served is None:
                continue
            self.handlers[key] = route.handler
            self.advertised[key] = served
            if route.begin is not None:
                self.pipelined[key] = route.begin
            if route.prepare is not None:
                self.prepare[key] = route.prepare

    def api_versions_table(self) -> list[dict]:
        return [{"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in sorted(self.advertised.items())]

    def api_versions_fallback(self, correlation_id: int):
        """Frame for an ApiVersions request of a version we do not serve (v0 body, error 35)."""
        return encode_api_versions_fallback(correlation_id, self.api_versions_table())
