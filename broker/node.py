"""The daemon's parts and the one place that builds them (the composition root).

:func:`build_broker` is called once by :class:`~broker.server.BrokerServer.start`, after
the listeners are bound, the data directories locked, ``meta.properties`` read and the
logs loaded. It builds every part in order, each handed what it uses as constructor
parameters (nothing reaches back into the :class:`Broker` for its collaborators):

1. security: a ``SecurityManager`` when a listener is not PLAINTEXT (it owns the
   credential store; a bad SASL setting fails here, before anything is written), else
   the credential store alone (the SCRAM admin APIs use it);
2. ``Authorizer`` when ``authorizer.class.name`` is set;
3. ``ProducerIdManager(data dir)``: producer id blocks (InitProducerId);
4. ``GroupConfigStore`` (:mod:`broker.group_configs`): the groups' own keys (the GROUP config
   resource), read from the first data directory; ``GroupCoordinator(config, logs, now_ms)``:
   membership, and its offset manager (``GroupMetadataManager``) over ``__consumer_offsets``
   (loaded by ``start()``);
5. ``ShareStateStore`` (:mod:`broker.share.state_store`): share-partition state in
   ``__share_group_state`` (replayed by ``start()``); ``ReplicaManager(config, logs, purgatory,
   metrics, now_ms, groups)``: the data plane (the consumed-retention input is the group
   coordinator and the share groups' start offsets, :mod:`broker.share.retention`);
6. ``TransactionCoordinator`` (:mod:`broker.txn`): ``__transaction_state`` over the logs, markers
   through the replica manager, transactional offsets completed in the group coordinator
   (loaded by ``start()``);
7. ``LogCleanerService(logs, cleaner config, log dirs, metrics, now_ms)`` when ``log.cleaner.enable``;
8. ``ClientQuotas`` (:mod:`broker.quotas`): the client quota store (``client-quotas.json`` in the first
   data directory) and the produce, fetch and request quota managers.

:class:`Broker` is what connections and handlers see (``ctx.broker``): every attribute
is set once, at construction. Two features are optional and then *disabled*, given as
``None`` at construction and never filled in later: ``security`` (None: every listener
is PLAINTEXT; the principal is ``User:ANONYMOUS``) and ``authorizer`` (None: no
``authorizer.class.name``, every operation is allowed, as Kafka without an authorizer);
``cleaner`` is None when ``log.cleaner.enable=false``.
"""

from __future__ import annotations

import functools
import socket
import time
from dataclasses import dataclass
from typing import Callable

from sundial.config import BrokerConfig
from sundial.storage import LogManager

from .authorizer import Authorizer
from .dispatch import Dispatcher
from .flusher import PartitionFlushers
from .group_configs import GroupConfigStore
from .groups.coordinator import GroupCoordinator
from .log_cleaner import LogCleanerService
from .metrics import BrokerMetrics
from .producer_ids import ProducerIdManager
from .purgatory import FetchPurgatory
from .quotas import ClientQuotas
from .quotas_store import ClientQuotaStore
from .replica_manager import ReplicaManager
from .sasl import CredentialStore
from .security import SecurityManager
from .share.manager import SharePartitionManager
from .share.retention import ConsumedReaders
from .share.state_store import ShareStateStore
from .txn.coordinator import TransactionCoordinator
from .txn.service import build_transaction_coordinator


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    node_id: int
    host: str
    port: int


@functools.cache
def canonical_host_name() -> str:
    """The host's canonical name (looked up once, when first advertised: it may ask the DNS)."""
    return socket.getfqdn() or "localhost"


class Broker:
    """The broker's parts, shared by every connection and handler (built by :func:`build_broker`)."""

    def __init__(self, config: BrokerConfig, *, now_ms: Callable[[], int], cluster_id: str, advertised: dict,
                 logs: LogManager, metrics: BrokerMetrics, purgatory: FetchPurgatory, dispatcher: Dispatcher,
                 producer_ids: ProducerIdManager, group_configs: GroupConfigStore, groups: GroupCoordinator,
                 replica_manager: ReplicaManager,
                 transactions: TransactionCoordinator, credentials: CredentialStore, security: SecurityManager | None, authorizer: Authorizer | None,
                 cleaner: LogCleanerService | None, share_partitions: SharePartitionManager | None = None,
                 share_state: ShareStateStore | None = None, quotas: ClientQuotas | None = None,
                 flushers: PartitionFlushers | None = None) -> None:
        self.config = config
        self.now_ms = now_ms
        self.node_id = config.node_id
        self.cluster_id = cluster_id
        self.advertised = advertised
        self.logs = logs
        self.metrics = metrics
        self.purgatory = purgatory
        self.dispatcher = dispatcher
        self.producer_ids = producer_ids
        self.group_configs = group_configs
        self.groups = groups
        self.replica_manager = replica_manager
        self.transactions = transactions
        self.credentials = credentials
        self.security = security
        self.authorizer = authorizer
        self.cleaner = cleaner
        self.share_partitions = share_partitions
        self.share_state = share_state
        self.quotas = quotas
        #: The one flusher of each partition (Produce, markers, internal topics); built by
        #: :func:`build_broker`, closed by :meth:`close_flushers` once every writer has stopped.
        self._flushers = flushers
        self.started_monotonic = time.monotonic()

    def close_flushers(self) -> None:
        """Close the partition flushers (and their fsync threads when they are their own)."""
        if self._flushers is not None:
            self._flushers.close()

    def endpoint_for(self, listener_name: str) -> NodeEndpoint:
        """This node as clients of ``listener_name`` must address it (Metadata, FindCoordinator).

        An empty advertised host is the host's canonical name, as Kafka advertises it; the
        configuration refuses the wildcards 0.0.0.0 and :: (config.broker)."""
        adv = self.advertised.get(listener_name) or next(iter(self.advertised.values()))
        return NodeEndpoint(self.node_id, adv.host or canonical_host_name(), adv.port)

    @property
    def node(self) -> NodeEndpoint:
        return self.endpoint_for(next(iter(self.advertised)))


def build_broker(config: BrokerConfig, *, now_ms: Callable[[], int], cluster_id: str, advertised: dict,
                 logs: LogManager, metrics: BrokerMetrics, purgatory: FetchPurgatory,
                 dispatcher: Dispatcher, scheduler=None, flush_threads=None) -> Broker:
    """Build the daemon's parts in order (see the module docstring); the logs are loaded already."""
    data_dir = logs.log_dirs[0]
    if any(l.security_protocol != "PLAINTEXT" for l in config.listeners):
        security = SecurityManager(config.sasl, config.listeners, data_dir)
        credentials = security.credentials
    else:
        security = None
        credentials = CredentialStore(config.sasl.credentials_path(data_dir))
    authorizer = Authorizer.from_config(config.authorizer, data_dir) if config.authorizer.enabled else None
    producer_ids = ProducerIdManager(data_dir)
    group_configs = GroupConfigStore.open(data_dir, config.group_coordinator)
    # One flusher per partition for every writer that waits for durability: Produce, transaction
    # markers and the coordinators' internal topics (closed by Broker.close_flushers).
    flushers = PartitionFlushers(flush_threads, thread_count=config.log_scheduling.io_threads)
    groups = GroupCoordinator(config, logs, now_ms=now_ms, group_configs=group_configs, flushers=flushers)
    share_state = ShareStateStore.open(logs, config, now_ms=now_ms, flushers=flushers)
    replica_manager = ReplicaManager(config, logs, purgatory=purgatory, metrics=metrics, now_ms=now_ms,
                                     groups=ConsumedReaders(groups, share_state), scheduler=scheduler,
                                     flushers=flushers)
    transactions = build_transaction_coordinator(config, logs=logs, replica_manager=replica_manager, groups=groups,
                                                 producer_ids=producer_ids, now_ms=now_ms)
    cleaner = LogCleanerService(logs, config.cleaner, logs.log_dirs, metrics=metrics, now_ms=now_ms) \
        if config.cleaner.enable else None
    share_partitions = SharePartitionManager.for_broker(config, replica_manager=replica_manager, store=share_state,
                                                        groups=groups, group_configs=group_configs, now_ms=now_ms)
    groups.share.add_deletion_listener(share_state.on_group_deleted)  # DeleteGroups deletes the state too
    quotas = ClientQuotas(ClientQuotaStore.open(data_dir), config.quotas, metrics=metrics)
    return Broker(config, now_ms=now_ms, cluster_id=cluster_id, advertised=advertised, logs=logs, metrics=metrics,
                  purgatory=purgatory, dispatcher=dispatcher, producer_ids=producer_ids,
                  group_configs=group_configs, groups=groups,
                  replica_manager=replica_manager, transactions=transactions, credentials=credentials, security=security,
                  authorizer=authorizer, cleaner=cleaner, share_partitions=share_partitions, share_state=share_state,
                  quotas=quotas, flushers=flushers)
