"""WriteTxnMarkers (27): write COMMIT/ABORT markers to partitions this node leads
(Kafka ``KafkaApis.handleWriteTxnMarkersRequest``).

Kafka's transaction coordinators send it to partition leaders; ``kafka-transactions.sh
abort`` (``Admin.abortTransaction``) sends it to close a hanging transaction: one ABORT
marker for (producer id, producer epoch, coordinator epoch) on one partition. Sundial's own
coordinator writes its markers without the wire; both go through
:class:`broker.txn.markers.ReplicaMarkerWriter`, so a marker from here closes the
producer's open transaction exactly as the coordinator's would: the last stable offset
moves, an ABORT gets its ``.txnindex`` entry, parked read_committed fetches wake, and a
marker in ``__consumer_offsets`` commits or drops that producer's pending group offsets.

Versions: v1 (v0 was removed by Kafka 4.0) and v2 (KIP-1228, Kafka 4.2), whose markers carry
a ``transaction_version``: a marker of transaction version 2 or more must have an epoch above
the partition's epoch for the producer (the coordinator bumped it), older ones an epoch not
below it.

Checks and errors, as Kafka:

* ALTER on the CLUSTER (KIP-1037) or else CLUSTER_ACTION on the CLUSTER; without either every
  partition of every marker answers CLUSTER_AUTHORIZATION_FAILED (31) and nothing is written.
* Per partition: UNKNOWN_TOPIC_OR_PARTITION (3) when this node has no such partition;
  INVALID_PRODUCER_EPOCH (47) when the partition knows a newer epoch of the producer;
  TRANSACTION_COORDINATOR_FENCED (52) when its last marker for the producer came from a
  newer coordinator epoch; KAFKA_STORAGE_ERROR (56); REQUEST_TIMED_OUT (7) when the marker
  is not durable within 30 s. A marker for a producer with no open transaction in the
  partition is written anyway.
* The answer has one entry per producer id; markers of the same producer id share it.

Markers are written one request marker after another, in request order, each durable
before the next is written.
"""

from __future__ import annotations

import structlog

from sundial.protocol.errors import ErrorCode

from ..authorizer import CLUSTER_NAME, AclOperation, ResourceType, is_authorized

logger = structlog.get_logger(__name__)


def _authorized(ctx) -> bool:
    """ALTER on the cluster (KIP-1037, checked without logging a denial), else CLUSTER_ACTION."""
    if is_authorized(ctx, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False):
        return True
    return is_authorized(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)


def _partitions(marker) -> list[tuple[str, int]]:
    return [(t.name, p) for t in marker.topics or [] for p in t.partition_indexes or []]


def _answer(results: dict[int, dict[tuple[str, int], int]]) -> dict:
    markers = []
    for producer_id, codes in results.items():
        topics: dict[str, list[dict]] = {}
        for (topic, partition), code in codes.items():
            topics.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
        markers.append({"producer_id": producer_id,
                        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]})
    return {"markers": markers}


async def handle_write_txn_markers(ctx, request):
    markers = request.markers or []
    results: dict[int, dict[tuple[str, int], int]] = {}
    if not _authorized(ctx):
        for marker in markers:
            codes = results.setdefault(marker.producer_id, {})
            for tp in _partitions(marker):
                codes[tp] = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return _answer(results)
    writer = ctx.broker.transactions.markers
    for marker in markers:
        partitions = _partitions(marker)
        codes = results.setdefault(marker.producer_id, {})
        if not partitions:
            continue
        version = (marker.transaction_version or 0) if ctx.api_version >= 2 else 0
        written = await writer.write_markers(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                                             bool(marker.transaction_result), partitions,
                                             transaction_version=version)
        codes.update(written)
        logger.info("txn_markers_written_by_request", producer_id=marker.producer_id,
                    producer_epoch=marker.producer_epoch, coordinator_epoch=marker.coordinator_epoch,
                    result="COMMIT" if marker.transaction_result else "ABORT", transaction_version=version,
                    partitions=[f"{t}-{p}" for t, p in partitions],
                    errors={f"{t}-{p}": ErrorCode(c).name for (t, p), c in written.items() if c != ErrorCode.NONE})
    return _answer(results)
