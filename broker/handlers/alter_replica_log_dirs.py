"""AlterReplicaLogDirs (34), v1-v2: move partitions between this broker's ``log.dirs``.

As Kafka's ``KafkaApis.handleAlterReplicaLogDirsRequest`` and
``ReplicaManager.alterReplicaLogDirs``:

* needs ALTER on the cluster; without it every partition answers
  CLUSTER_AUTHORIZATION_FAILED (31);
* per partition: LOG_DIR_NOT_FOUND (57) when the path is not one of ``log.dirs`` (compared
  with the absolute paths, exactly); UNKNOWN_TOPIC_OR_PARTITION (3) for a partition the broker
  does not have; INVALID_TOPIC_EXCEPTION (17) when the topic name is too long for a
  ``-future`` directory; KAFKA_STORAGE_ERROR (56) for a partition offline or in the middle of
  its swap; else NONE: the move is under way (or there was nothing to do: the partition is
  already in that directory, or already moving there). The answer does not wait for the copy;
  DescribeLogDirs shows the future replica and its lag until the swap;
* a partition listed under two directories is moved to the last one (Kafka keeps one entry per
  partition); the answer lists each partition once, grouped by topic.

The move itself is :mod:`broker.log_mover` and :mod:`storage.log_move` (docs/log-dirs.md).
"""

from __future__ import annotations

import structlog

from sundial.protocol.errors import ErrorCode
from sundial.storage.errors import KafkaStorageError
from sundial.storage.log_move import LogDirNotFoundError
from sundial.storage.topics import InvalidTopicError, UnknownTopicOrPartitionError

from ..authorizer import CLUSTER_NAME, AclOperation, ResourceType, is_authorized

logger = structlog.get_logger(__name__)


def _wanted(request) -> dict[tuple[str, int], str]:
    """Partition -> destination, the last one named winning (Kafka's ``partitionDirs`` map)."""
    out: dict[tuple[str, int], str] = {}
    for d in request.dirs:
        for topic in d.topics:
            for p in topic.partitions:
                out[(topic.name, p)] = d.path
    return out


def _answer(codes: dict[tuple[str, int], int]) -> dict:
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return {"throttle_time_ms": 0,
            "results": [{"topic_name": t, "partitions": parts} for t, parts in by_topic.items()]}


async def handle_alter_replica_log_dirs(ctx, request):
    wanted = _wanted(request)
    if not is_authorized(ctx, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return _answer(dict.fromkeys(wanted, ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
    mover = ctx.broker.replica_manager.log_mover
    codes: dict[tuple[str, int], int] = {}
    for (topic, partition), path in wanted.items():
        try:
            mover.alter(topic, partition, path)
            code = ErrorCode.NONE
        except LogDirNotFoundError:
            code = ErrorCode.LOG_DIR_NOT_FOUND
        except UnknownTopicOrPartitionError:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        except InvalidTopicError:
            code = ErrorCode.INVALID_TOPIC_EXCEPTION
        except KafkaStorageError:
            code = ErrorCode.KAFKA_STORAGE_ERROR
        codes[(topic, partition)] = code
        if code != ErrorCode.NONE:
            logger.warning("alter_replica_log_dir_refused", topic=topic, partition=partition, log_dir=path,
                           error=code.name, client_id=ctx.client_id)
        else:
            logger.info("alter_replica_log_dir", topic=topic, partition=partition, log_dir=path,
                        client_id=ctx.client_id)
    return _answer(codes)
