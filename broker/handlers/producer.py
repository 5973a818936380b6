"""InitProducerId (22) and OffsetForLeaderEpoch (23).

InitProducerId for idempotent producers (null transactional id): a fresh producer id
(never reused, see :mod:`broker.producer_ids`) with epoch 0; with v3+ an existing
producer id and epoch ask for an epoch bump (KIP-360), which gives the same id with
epoch + 1, or a fresh id when the epoch would overflow. Transactions are not
implemented: a non-null transactional id is refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53), which clients report as a fatal
configuration error instead of retrying forever.

OffsetForLeaderEpoch: this node has always led every partition at epoch 0, so epoch
0 ends at the log end offset; asking about a later epoch gives UNDEFINED (-1, -1),
and a newer current leader epoch than 0 gives UNKNOWN_LEADER_EPOCH
(:meth:`broker.replica_manager.ReplicaManager.offset_for_leader_epoch` answers each partition).

With an authorizer: an idempotent InitProducerId needs IDEMPOTENT_WRITE on the
cluster or WRITE on some topic (KIP-679), else CLUSTER_AUTHORIZATION_FAILED (31);
OffsetForLeaderEpoch needs DESCRIBE on the topic, else TOPIC_AUTHORIZATION_FAILED (29).
"""

from __future__ import annotations

import structlog

from sundial.protocol.errors import ErrorCode

from .transactions import init_transactional_producer_id
from ..txn.state import is_epoch_exhausted
from ..authorizer import CLUSTER_NAME, AclOperation, ResourceType, is_authorized, is_authorized_any, record_denial

logger = structlog.get_logger(__name__)


async def handle_init_producer_id(ctx, request):
    broker = ctx.broker
    if request.transactional_id is not None:
        return await init_transactional_producer_id(ctx, request)
    if not (is_authorized(ctx, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False)
            or is_authorized_any(ctx, AclOperation.WRITE, ResourceType.TOPIC)):
        record_denial(ctx, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "producer_id": -1, "producer_epoch": -1}
    pid = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if ctx.api_version >= 3 and pid is not None and pid >= 0 and epoch is not None and epoch >= 0 \
            and not is_epoch_exhausted(epoch):
        new_pid, new_epoch = pid, epoch + 1
    else:
        new_pid, new_epoch = broker.producer_ids.next_id(), 0
    logger.debug("producer_id_issued", producer_id=new_pid, producer_epoch=new_epoch, client_id=ctx.client_id)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": new_pid,
            "producer_epoch": new_epoch}


async def handle_offset_for_leader_epoch(ctx, request):
    rm = ctx.broker.replica_manager
    topics = []
    for t in request.topics:
        parts = []
        may_describe = is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic)
        for p in t.partitions:
            if not may_describe:
                parts.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "partition": p.partition,
                              "leader_epoch": -1, "end_offset": -1})
                continue
            answer = rm.offset_for_leader_epoch(t.topic, p.partition, p.leader_epoch,
                                                getattr(p, "current_leader_epoch", -1))
            parts.append({"error_code": answer.error_code, "partition": p.partition,
                          "leader_epoch": answer.leader_epoch, "end_offset": answer.end_offset})
        topics.append({"topic": t.topic, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
