"""Metadata (3) and DescribeCluster (60): this node leads every partition.

Request topics: v0 empty list or v1+ null means every topic; v1+ empty list means
none. An unknown topic is created when ``auto.create.topics.enable`` is true and the
request allows it (v4+ ``allow_auto_topic_creation``; always for v0–v3), with
``num.partitions`` partitions, and answered at once; otherwise it gets
UNKNOWN_TOPIC_OR_PARTITION (3), and a name Kafka would refuse gets
INVALID_TOPIC_EXCEPTION (17). Brokers are reported with the advertised address of
the listener the client connected to. Leader epoch is 0; replicas and ISR are this
node. Internal topics (``__consumer_offsets``) are flagged ``is_internal``.

With an authorizer (Kafka's ``handleTopicMetadataRequest``): an all-topics request
lists only the topics the principal may DESCRIBE; a named topic it may not DESCRIBE
answers TOPIC_AUTHORIZATION_FAILED (29) whether or not it exists; auto-creation needs
CREATE on the cluster or the topic, else UNKNOWN_TOPIC_OR_PARTITION.

Authorized operations (KIP-430), when the request asks for them (Metadata v8+ per topic, v8–10
for the cluster; DescribeCluster): the supported operations the principal may perform, as
Kafka's ``AuthHelper.authorizedOperations`` computes them (every one without an authorizer).
"""

from __future__ import annotations

import uuid

import structlog

from sundial.protocol.errors import ErrorCode

from ..authorizer import CLUSTER_NAME, OPERATIONS_NOT_REQUESTED, AclOperation, ResourceType, authorized_operations, \
    is_authorized
from ..topics import INTERNAL_TOPICS, TopicError, auto_create_allowed, create_topic_durably, validate_topic_name

logger = structlog.get_logger(__name__)

ZERO_UUID = uuid.UUID(int=0)


def _uuid(raw) -> uuid.UUID:
    if isinstance(raw, uuid.UUID):
        return raw
    if raw is None:
        return ZERO_UUID
    return uuid.UUID(bytes=bytes(raw))


def topic_entry(broker, meta, error: int = ErrorCode.NONE) -> dict:
    node = broker.node_id
    return {
        "error_code": error,
        "name": meta.name,
        "topic_id": _uuid(meta.topic_id),
        "is_internal": meta.name in INTERNAL_TOPICS,
        "partitions": [
            {"error_code": ErrorCode.NONE, "partition_index": p, "leader_id": node, "leader_epoch": 0,
             "replica_nodes": [node], "isr_nodes": [node], "offline_replicas": []}
            for p in range(meta.partitions)
        ],
    }


def brokers_entry(ctx) -> list[dict]:
    ep = ctx.broker.endpoint_for(ctx.listener_name)
    return [{"node_id": ep.node_id, "host": ep.host, "port": ep.port, "rack": None}]


async def handle_metadata(ctx, request):
    broker = ctx.broker
    logs = broker.logs
    version = ctx.api_version
    requested = request.topics
    all_topics = requested is None or (version == 0 and len(requested) == 0)
    allow_auto = getattr(request, "allow_auto_topic_creation", True) if version >= 4 else True
    topics = []
    if all_topics:
        for meta in sorted(logs.topics(), key=lambda m: m.name):
            if is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, meta.name, log_denied=False):
                topics.append(topic_entry(broker, meta))
    else:
        seen = set()
        for t in requested:
            name = t.name
            if name is None:  # v10+ lookup by topic id
                meta = logs.topic_by_id(bytes(_uuid(t.topic_id).bytes)) if hasattr(logs, "topic_by_id") else None
                if meta is None:
                    topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None,
                                   "topic_id": _uuid(t.topic_id), "partitions": []})
                elif not is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, meta.name):
                    topics.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": None,
                                   "topic_id": _uuid(t.topic_id), "partitions": []})
                else:
                    topics.append(topic_entry(broker, meta))
                continue
            if name in seen:
                continue
            seen.add(name)
            if not is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                topics.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name,
                               "topic_id": ZERO_UUID, "partitions": []})
                continue
            meta = logs.topic(name)
            if meta is None:
                try:
                    validate_topic_name(name)
                except TopicError:
                    topics.append({"error_code": ErrorCode.INVALID_TOPIC_EXCEPTION, "name": name,
                                   "topic_id": ZERO_UUID, "partitions": []})
                    continue
                if allow_auto and auto_create_allowed(broker, name) and (
                        is_authorized(ctx, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False)
                        or is_authorized(ctx, AclOperation.CREATE, ResourceType.TOPIC, name)):
                    try:
                        await create_topic_durably(broker, name, -1, via="auto-create (Metadata)",
                                                   client_id=ctx.client_id)
                        meta = logs.topic(name)
                    except TopicError as exc:
                        if exc.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                            topics.append({"error_code": exc.error_code, "name": name, "topic_id": ZERO_UUID,
                                           "partitions": []})
                            continue
                        meta = logs.topic(name)
                if meta is None:
                    topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                                   "topic_id": ZERO_UUID, "partitions": []})
                    continue
            topics.append(topic_entry(broker, meta))
    if version >= 8 and getattr(request, "include_topic_authorized_operations", False):
        for entry in topics:
            if entry["error_code"] == ErrorCode.NONE:
                entry["topic_authorized_operations"] = authorized_operations(ctx, ResourceType.TOPIC, entry["name"])
    return {
        "throttle_time_ms": 0,
        "brokers": brokers_entry(ctx),
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
        "cluster_authorized_operations": _cluster_operations(
            ctx, 8 <= version <= 10 and getattr(request, "include_cluster_authorized_operations", False)),
    }


def _cluster_operations(ctx, requested) -> int:
    return authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME) if requested else OPERATIONS_NOT_REQUESTED


async def handle_describe_cluster(ctx, request):
    broker = ctx.broker
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "endpoint_type": 1,
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "cluster_authorized_operations": _cluster_operations(
            ctx, getattr(request, "include_cluster_authorized_operations", False)),
        "brokers": [{"broker_id": e["node_id"], "host": e["host"], "port": e["port"], "rack": None,
                     "is_fenced": False} for e in brokers_entry(ctx)],
    }
