"""DescribeLogDirs (35) and DescribeTopicPartitions (75): the disk view and the paged topic view.

DescribeLogDirs (Kafka ``KafkaApis.handleDescribeLogDirsRequest`` and
``ReplicaManager.describeLogDirs``), v0-v4:

* needs DESCRIBE on the cluster; without it the answer has no directories and, from v3,
  the top-level error CLUSTER_AUTHORIZATION_FAILED (31);
* ``topics`` null asks for every replica; otherwise for the listed partitions (unknown ones
  are left out, as Kafka does);
* one result per configured log directory (absolute path), also when it holds none of the
  asked partitions; per partition: the size of its segment files, the offset lag and whether
  it is the future replica of an AlterReplicaLogDirs move (:mod:`storage.log_dirs`); from
  v4, the total and usable bytes of the directory's volume;
* a directory that cannot be read answers KAFKA_STORAGE_ERROR (56) with no partitions, and the
  failure is logged.

Sizes of logs not opened yet and the volumes' ``statvfs`` are read on a worker thread: the
event loop never waits on the disk.

DescribeTopicPartitions (KIP-966; Kafka ``DescribeTopicPartitionsRequestHandler`` and
``KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse``), v0:

* an empty ``topics`` list means every topic the principal may DESCRIBE (the others are left
  out silently); a listed topic it may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED (29),
  a listed unknown one UNKNOWN_TOPIC_OR_PARTITION (3), or INVALID_TOPIC_EXCEPTION (17) for a
  name Kafka would refuse;
* topics are answered in name order from the cursor's topic on, partitions from the cursor's
  partition on (only in the cursor's topic), at most ``min(ResponsePartitionLimit,
  max.request.partition.size.limit)`` partitions (at least 1). When the limit stops the
  answer inside a topic, ``NextCursor`` names that topic and the first partition left out;
  when it is reached exactly at the end of a topic and more topics follow, ``NextCursor`` is
  the next topic, partition 0. ``NextCursor`` is null when everything was answered;
* a cursor whose topic is not in a non-empty ``topics`` list, or whose partition is negative,
  is INVALID_REQUEST (42) for every listed topic;
* TopicAuthorizedOperations is always filled for the answered topics (KIP-430).

Leader epoch 0 and this node as leader, replica and ISR, as Metadata answers; the eligible
leader replica lists (KIP-966's ELR) are empty.
"""

from __future__ import annotations

import asyncio
import uuid

import structlog

from sundial.protocol.errors import ErrorCode
from sundial.storage.log_dirs import measure_log_dirs

from ..authorizer import CLUSTER_NAME, AclOperation, ResourceType, authorized_operations, is_authorized
from ..topics import INTERNAL_TOPICS, TopicError, validate_topic_name

logger = structlog.get_logger(__name__)

#: The broker setting that caps ResponsePartitionLimit (Kafka's name and default: 2000).

ZERO_UUID = uuid.UUID(int=0)


# -- DescribeLogDirs ---------------------------------------------------------------------------------


async def handle_describe_log_dirs(ctx, request):
    if not is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results": []}
    logs = ctx.broker.logs
    placements = logs.replica_placements()
    if request.topics is not None:
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
        placements = [p for p in placements if (p.topic, p.partition) in wanted]
    reports = await asyncio.to_thread(measure_log_dirs, list(logs.log_dirs), placements)
    results = []
    for report in reports:
        if report.error is not None:
            logger.warning("log_dir_describe_failed", log_dir=report.log_dir,
                           reason=report.error.strerror or str(report.error))
            results.append({"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": report.log_dir, "topics": []})
            continue
        by_topic: dict[str, list[dict]] = {}
        for r in report.replicas:
            by_topic.setdefault(r.topic, []).append({
                "partition_index": r.partition, "partition_size": r.size_bytes, "offset_lag": r.offset_lag,
                "is_future_key": r.is_future})
        results.append({
            "error_code": ErrorCode.NONE, "log_dir": report.log_dir,
            "topics": [{"name": name, "partitions": parts} for name, parts in sorted(by_topic.items())],
            "total_bytes": report.total_bytes, "usable_bytes": report.usable_bytes,
        })
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": results}


# -- DescribeTopicPartitions ---------------------------------------------------------------------------


def _error_answer(request, error: int) -> dict:
    """Kafka's ``DescribeTopicPartitionsRequest.getErrorResponse``: every listed topic with ``error``."""
    return {"throttle_time_ms": 0, "next_cursor": None,
            "topics": [{"error_code": error, "name": t.name, "topic_id": ZERO_UUID, "is_internal": False,
                        "partitions": []} for t in request.topics]}


def _missing_topic_error(name: str) -> int:
    try:
        validate_topic_name(name)
    except TopicError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _partition(node: int, index: int) -> dict:
    return {"error_code": ErrorCode.NONE, "partition_index": index, "leader_id": node, "leader_epoch": 0,
            "replica_nodes": [node], "isr_nodes": [node], "eligible_leader_replicas": [], "last_known_elr": [],
            "offline_replicas": []}


async def handle_describe_topic_partitions(ctx, request):
    broker = ctx.broker
    logs = broker.logs
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = len(request.topics) == 0
    if fetch_all:
        names = {meta.name for meta in logs.topics() if meta.name >= cursor_topic}
    else:
        names = {t.name for t in request.topics if t.name >= cursor_topic}
        if cursor is not None and cursor.topic_name not in names:
            logger.info("describe_topic_partitions_refused", client_id=ctx.client_id,
                        reason="the cursor's topic is not in the topic list", cursor_topic=cursor.topic_name)
            return _error_answer(request, ErrorCode.INVALID_REQUEST)
    if cursor is not None and cursor.partition_index < 0:
        logger.info("describe_topic_partitions_refused", client_id=ctx.client_id,
                    reason="negative cursor partition", cursor_partition=cursor.partition_index)
        return _error_answer(request, ErrorCode.INVALID_REQUEST)

    authorized, denied = [], []
    for name in sorted(names):
        if is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_denied=not fetch_all):
            authorized.append(name)
        elif not fetch_all:
            denied.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name, "topic_id": ZERO_UUID,
                           "is_internal": False, "partitions": []})

    remaining = max(min(broker.config.max_request_partition_size_limit, request.response_partition_limit), 1)
    node = broker.node_id
    answered: list[dict] = []
    next_cursor = None
    for name in authorized:
        if remaining == 0:
            # The limit was reached exactly at the end of the previous topic.
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        meta = logs.topic(name)
        if meta is None:
            if not fetch_all:
                answered.append({"error_code": _missing_topic_error(name), "name": name, "topic_id": ZERO_UUID,
                                 "is_internal": name in INTERNAL_TOPICS, "partitions": []})
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        upper = min(meta.partitions, start + remaining)
        partitions = [_partition(node, p) for p in range(start, upper)]
        answered.append({"error_code": ErrorCode.NONE, "name": name, "topic_id": uuid.UUID(bytes=bytes(meta.topic_id)),
                         "is_internal": name in INTERNAL_TOPICS, "partitions": partitions})
        if upper < meta.partitions:
            next_cursor = {"topic_name": name, "partition_index": upper}
            break
        remaining -= len(partitions)
    for entry in answered:
        entry["topic_authorized_operations"] = authorized_operations(ctx, ResourceType.TOPIC, entry["name"])
    return {"throttle_time_ms": 0, "topics": answered + denied, "next_cursor": next_cursor}
