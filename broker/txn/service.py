"""Wiring of the transaction coordinator into the daemon (called by :mod:`broker.server`).

Started after the logs and the group coordinator (the markers of a transaction that
was being completed complete the group's pending offsets), stopped before the group
coordinator and the logs close. ``__transaction_state`` is created lazily (first
FindCoordinator for a transaction key or first transactional InitProducerId); when
it exists it is loaded here, before any listener accepts a connection.
"""

from __future__ import annotations

from .coordinator import TransactionCoordinator
from .log import TransactionLog
from .markers import ReplicaMarkerWriter


async def start_transaction_coordinator(broker, config) -> TransactionCoordinator:
    log = TransactionLog(broker, config, now_ms=broker.now_ms)
    coordinator = TransactionCoordinator(config, log, ReplicaMarkerWriter(broker), broker.producer_ids,
                                         now_ms=broker.now_ms)
    await coordinator.start()
    return coordinator
