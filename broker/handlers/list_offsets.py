"""ListOffsets (2): earliest, latest, max timestamp, by timestamp, and v0's "offsets before".

A partition named twice in one request gets INVALID_REQUEST (42) for each copy (v1+,
as Kafka). Per partition the answer comes from
:meth:`broker.replica_manager.ReplicaManager.list_offset` (through ``list_offset_resident``: a
timestamp search does not wait on the disk on the loop); "not found" is offset -1
with timestamp -1, which kafka-python and aiokafka turn into ``None`` and librdkafka
into -1. With an authorizer, a topic the principal may not DESCRIBE answers
TOPIC_AUTHORIZATION_FAILED (29). The isolation level (v2+) sets the last fetchable offset:
the last stable offset under READ_COMMITTED, the high watermark otherwise.
"""

from __future__ import annotations

from sundial.protocol.errors import ErrorCode

from ..authorizer import AclOperation, ResourceType, is_authorized


async def handle_list_offsets(ctx, request):
    rm = ctx.broker.replica_manager
    version = ctx.api_version
    counts: dict[tuple[str, int], int] = {}
    for t in request.topics:
        for p in t.partitions:
            key = (t.name, p.partition_index)
            counts[key] = counts.get(key, 0) + 1
    topics = []
    for t in request.topics:
        parts = []
        may_describe = is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)
        for p in t.partitions:
            if not may_describe:
                parts.append({"partition_index": p.partition_index,
                              "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "old_style_offsets": [],
                              "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            if version >= 1 and counts[(t.name, p.partition_index)] > 1:
                parts.append({"partition_index": p.partition_index, "error_code": ErrorCode.INVALID_REQUEST,
                              "old_style_offsets": [], "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            ans = await rm.list_offset_resident(t.name, p.partition_index, p.timestamp, api_version=version,
                                              current_leader_epoch=getattr(p, "current_leader_epoch", -1),
                                              max_num_offsets=getattr(p, "max_num_offsets", 1) or 1,
                                              isolation_level=getattr(request, "isolation_level", 0) or 0)
            parts.append({"partition_index": p.partition_index, "error_code": ans.error_code,
                          "old_style_offsets": ans.old_style_offsets, "timestamp": ans.timestamp,
                          "offset": ans.offset, "leader_epoch": ans.leader_epoch})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
