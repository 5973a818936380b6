"""Building the transaction coordinator (called by the composition root, :mod:`broker.node`).

Built after the replica manager and the group coordinator: markers go through the
replica manager, and those written into ``__consumer_offsets`` complete the group's
pending transactional offsets. ``start()`` (by :class:`broker.server.BrokerServer`, after
the group coordinator started) loads ``__transaction_state`` when it exists, before any
listener accepts a connection; the topic itself is created lazily (first FindCoordinator
for a transaction key or first transactional InitProducerId).
"""

from __future__ import annotations

from typing import Callable

from .coordinator import TransactionCoordinator
from .log import TransactionLog
from .markers import ReplicaMarkerWriter


def build_transaction_coordinator(config, *, logs, replica_manager, groups, producer_ids,
                                  now_ms: Callable[[], int]) -> TransactionCoordinator:
    log = TransactionLog(config.transactions, logs, replica_manager, now_ms=now_ms)
    return TransactionCoordinator(config.transactions, log, ReplicaMarkerWriter(replica_manager, groups), producer_ids,
                                  now_ms=now_ms)
