"""Fetch (1): read each partition from its log, long-polling until min_bytes or max_wait_ms.

Fetch sessions (KIP-227, v7+) are declined the way Kafka allows: the answer carries
session id 0, so clients keep sending full fetch requests; a request naming a
session id other than 0 gets FETCH_SESSION_ID_NOT_FOUND (70). Partition order,
KIP-74 sizing, down-conversion for v0–v3 and the long poll are in
:meth:`broker.replica_manager.ReplicaManager.fetch`. Record bytes are handed to the
encoder as storage file slices, which the connection sends with ``sendfile``.
Isolation (v4+): READ_COMMITTED (1) returns only data below the last stable offset with
the aborted transactions (producer id, first offset) of the range, as Kafka's
``collectAbortedTransactions``; READ_UNCOMMITTED (0) sends a null list. Every partition
answer carries the last stable offset (v4+). With an authorizer, partitions of a topic the principal may not READ answer
TOPIC_AUTHORIZATION_FAILED (29) with no records and are not read.

Client quotas (:mod:`broker.quotas`): ``max_bytes`` is capped at what ``consumer_byte_rate``
allows in one quota window; the response's record bytes count against it and the handler's
time against ``request_percentage``. A throttled Fetch is answered with its throttle time and
no partitions (its bytes are not counted), as Kafka answers it.
"""

from __future__ import annotations

from sundial.protocol.errors import ErrorCode
from sundial.records.layout import INT32_MAX

from ..authorizer import AclOperation, ResourceType, is_authorized
from ..replica_manager import FetchOutcome, FetchPartition


async def handle_fetch(ctx, request):
    rm = ctx.broker.replica_manager
    version = ctx.api_version
    session_id = getattr(request, "session_id", 0) or 0
    if version >= 7 and session_id != 0:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0,
                "responses": []}
    parts = []
    denied: list[tuple[int, FetchOutcome]] = []  # (position in the answer, outcome)
    position = 0
    for t in request.topics:
        may_read = is_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, t.topic)
        for p in t.partitions:
            if may_read:
                parts.append(FetchPartition(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                                            getattr(p, "current_leader_epoch", -1)))
            else:
                denied.append((position, FetchOutcome(t.topic, p.partition,
                                                      error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
            position += 1
    max_bytes = getattr(request, "max_bytes", INT32_MAX) if version >= 3 else INT32_MAX
    quotas = ctx.broker.quotas
    quota_max_bytes = quotas.fetch_max_bytes(ctx) if quotas is not None else None
    if quota_max_bytes is not None:
        max_bytes = max(1, min(max_bytes, int(quota_max_bytes)))
    if parts or not denied:
        isolation = (getattr(request, "isolation_level", 0) or 0) if version >= 4 else 0
        results = await rm.fetch(parts, max_wait_ms=request.max_wait_ms,
                                 min_bytes=min(request.min_bytes, max_bytes), max_bytes=max_bytes,
                                 api_version=version, isolation_level=isolation)
    else:
        results = []
    for index, outcome in denied:
        results.insert(index, outcome)
    if quotas is not None:
        throttle_ms = quotas.record_fetch(ctx, sum(out.size_bytes for out in results))
        if throttle_ms > 0:
            ctx.throttle_time_ms = throttle_ms
            return {"throttle_time_ms": throttle_ms, "error_code": ErrorCode.NONE, "session_id": 0,
                    "responses": []}
    responses: list[dict] = []
    current = None
    for out in results:
        if current is None or current["topic"] != out.topic:
            current = {"topic": out.topic, "partitions": []}
            responses.append(current)
        current["partitions"].append({
            "partition_index": out.partition,
            "error_code": out.error_code,
            "high_watermark": out.high_watermark,
            "last_stable_offset": out.last_stable_offset,
            "log_start_offset": out.log_start_offset,
            "aborted_transactions": (out.aborted_transactions if out.aborted_transactions is not None
                                     and out.error_code == ErrorCode.NONE else None if version >= 4 else []),
            "preferred_read_replica": -1,
            "records": out.records if out.records is not None else b"",
        })
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0, "responses": responses}
