"""Writing transaction markers on one node (Kafka ``TransactionMarkerChannelManager`` + the
receiving side of WriteTxnMarkers, ``KafkaApis.handleWriteTxnMarkersRequest``).

Kafka's coordinator sends WriteTxnMarkers to each partition leader; on one node the
coordinator appends the same control batches itself through
:meth:`broker.replica_manager.ReplicaManager.write_txn_markers` (COMMIT/ABORT marker with
the producer id, epoch and coordinator epoch; durable before it returns). As in
``handleWriteTxnMarkersRequest``, once a marker is in a ``__consumer_offsets`` partition
the group offset manager is told to materialise (commit) or drop (abort) that
producer's pending transactional offsets (``complete_txn_offsets``).

Per-partition error codes come back to the coordinator, which retries the partitions
that failed and drops the ones whose topic is gone (UNKNOWN_TOPIC_OR_PARTITION).

The WriteTxnMarkers API (:mod:`broker.handlers.write_txn_markers`, what
``kafka-transactions.sh abort`` sends) writes through the same object, so a marker from
the wire moves the last stable offset, fills ``.txnindex`` and completes pending group
offsets exactly as the coordinator's own markers do.
"""

from __future__ import annotations

import structlog

from sundial.protocol.errors import ErrorCode

from ..topics import OFFSETS_TOPIC

logger = structlog.get_logger(__name__)


class ReplicaMarkerWriter:
    def __init__(self, replica_manager, groups) -> None:
        self._rm = replica_manager
        self._groups = groups

    async def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                            partitions, *, transaction_version: int = 0,
                            timeout_ms: int = 30_000) -> dict[tuple[str, int], int]:
        codes = await self._rm.write_txn_markers(
            producer_id=producer_id, producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch,
            commit=commit, partitions=list(partitions), transaction_version=transaction_version,
            timeout_ms=timeout_ms)
        for (topic, partition), code in codes.items():
            if topic == OFFSETS_TOPIC and code == ErrorCode.NONE:
                self._groups.complete_txn_offsets(producer_id, commit, partition)
        return codes
