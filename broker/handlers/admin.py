"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
AlterConfigs, IncrementalAlterConfigs and DeleteRecords; the config APIs also serve the GROUP
config resource (type 32, a group's own keys: :mod:`config.group`, stored by
:class:`~broker.group_configs.GroupConfigStore`).

Each topic or resource in a request succeeds or fails on its own, with Kafka's error
codes: TOPIC_ALREADY_EXISTS (36), INVALID_PARTITIONS (37), INVALID_REPLICATION_FACTOR
(38), INVALID_REPLICA_ASSIGNMENT (39), INVALID_CONFIG (40, with the key and reason in
the message), INVALID_TOPIC_EXCEPTION (17), UNKNOWN_TOPIC_OR_PARTITION (3),
TOPIC_DELETION_DISABLED (73), OFFSET_OUT_OF_RANGE (1) for DeleteRecords beyond the
high watermark. ``validate_only`` runs every check and changes nothing.

With an authorizer each topic or resource is checked as Kafka's ``KafkaApis`` does:
CreateTopics needs CREATE on the cluster or the topic, DeleteTopics and
DeleteRecords DELETE, CreatePartitions ALTER, DescribeConfigs DESCRIBE_CONFIGS and
(Incremental)AlterConfigs ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED, 29),
on the group for group resources (GROUP_AUTHORIZATION_FAILED, 30) or on the cluster for
broker resources (CLUSTER_AUTHORIZATION_FAILED, 31).

A topic may have at most ``MAX_PARTITIONS_PER_TOPIC`` partitions (INVALID_PARTITIONS
beyond): creating one directory per partition on the event loop, a request for 2^31
partitions would stall the broker for hours (Kafka relies on controller quotas).

Topic configs are persisted with the topic (overrides only); DescribeConfigs reports
every topic key with its effective value and its source (topic override, broker
setting, or default), with synonyms from v1. Broker settings are static (read from
``server.properties``); altering them is refused with INVALID_REQUEST.

Before any resource of an (Incremental)AlterConfigs request is applied, Kafka's preprocessing
refuses with INVALID_REQUEST a resource named twice (both entries), a key given twice in one
resource, and a null value (other than with DELETE). DescribeConfigs with a null or empty
list of keys describes every key. Group resources answer as Kafka 4.2: every key with its
value and source (DYNAMIC_GROUP_CONFIG or DEFAULT_CONFIG), Kafka's INVALID_CONFIG messages,
SET and DELETE only (APPEND/SUBTRACT: INVALID_CONFIG, no group key is a list); see
docs/groups.md.
"""

from __future__ import annotations

import structlog

from sundial.config import ConfigError, ConfigSource, describe_topic_config
from sundial.config.topic import TOPIC_CONFIGS, unknown_topic_config
from sundial.protocol.api_keys import ApiKey
from sundial.protocol.errors import ErrorCode

from ..authorizer import CLUSTER_NAME, AclOperation, ResourceType, is_authorized
from ..refusals import refuse
from ..topics import INTERNAL_TOPICS, TopicError, create_topic_durably, delete_topic_durably
from .metadata import ZERO_UUID, _uuid

logger = structlog.get_logger(__name__)

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_GROUP = 32

OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
MAX_PARTITIONS_PER_TOPIC = 10_000


# -- CreateTopics -------------------------------------------------------------------------------
async def handle_create_topics(ctx, request):
    broker = ctx.broker
    validate_only = bool(getattr(request, "validate_only", False))
    results = []
    names = [t.name for t in request.topics]
    for t in request.topics:
        entry = {"name": t.name, "topic_id": None, "error_code": ErrorCode.NONE, "error_message": None,
                 "num_partitions": -1, "replication_factor": -1, "configs": None}
        if names.count(t.name) > 1:
            entry["error_code"] = ErrorCode.INVALID_REQUEST
            entry["error_message"] = f"topic '{t.name}' appears more than once in the request"
            results.append(entry)
            continue
        if not (is_authorized(ctx, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False)
                or is_authorized(ctx, AclOperation.CREATE, ResourceType.TOPIC, t.name)):
            entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            entry["error_message"] = "Authorization failed."
            results.append(entry)
            continue
        configs = {c.name: c.value for c in (t.configs or [])}
        assignments = {a.partition_index: list(a.broker_ids) for a in (t.assignments or [])}
        try:
            if t.num_partitions > MAX_PARTITIONS_PER_TOPIC or len(assignments) > MAX_PARTITIONS_PER_TOPIC:
                raise TopicError(ErrorCode.INVALID_PARTITIONS,
                                 f"at most {MAX_PARTITIONS_PER_TOPIC} partitions per topic")
            if assignments and (t.num_partitions != -1 or t.replication_factor != -1):
                raise TopicError(ErrorCode.INVALID_REQUEST,
                                 "give either assignments or partitions/replication factor, not both")
            created = await create_topic_durably(broker, t.name, t.num_partitions, t.replication_factor,
                                                 configs, validate_only=validate_only,
                                                 assignments=assignments or None, client_id=ctx.client_id)
        except TopicError as exc:
            entry["error_code"] = exc.error_code
            entry["error_message"] = exc.message
            logger.info("create_topic_refused", topic=t.name, error=ErrorCode(exc.error_code).name,
                        reason=exc.message)
            results.append(entry)
            continue
        _warn_without_effect(t.name, configs)
        entry["topic_id"] = _uuid(created.topic_id)
        entry["num_partitions"] = created.partitions
        entry["replication_factor"] = created.replication_factor
        rows = describe_topic_config({k: v for k, v in configs.items() if v is not None},
                                     broker.config.explicit)
        entry["configs"] = [{"name": r.name, "value": None if r.sensitive else r.value, "read_only": r.read_only,
                             "config_source": int(r.source), "is_sensitive": r.sensitive} for r in rows]
        results.append(entry)
    return {"throttle_time_ms": 0, "topics": results}


# -- DeleteTopics -------------------------------------------------------------------------------
async def handle_delete_topics(ctx, request):
    broker = ctx.broker
    logs = broker.logs
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    responses = []
    for name, topic_id in wanted:
        entry = {"name": name, "topic_id": _uuid(topic_id) if topic_id is not None else ZERO_UUID,
                 "error_code": ErrorCode.NONE, "error_message": None}
        meta = None
        if name is None and topic_id is not None:
            finder = getattr(logs, "topic_by_id", None)
            meta = finder(_uuid(topic_id).bytes) if finder else None
            if meta is None:
                entry["error_code"] = ErrorCode.UNKNOWN_TOPIC_ID
                responses.append(entry)
                continue
            name = entry["name"] = meta.name
        else:
            meta = logs.topic(name)
        if not is_authorized(ctx, AclOperation.DELETE, ResourceType.TOPIC, name):
            entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif meta is None:
            entry["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif not broker.config.topic_admin.delete_topic_enable:
            entry["error_code"] = ErrorCode.TOPIC_DELETION_DISABLED
        elif name in INTERNAL_TOPICS:
            entry["error_code"] = ErrorCode.INVALID_TOPIC_EXCEPTION
            entry["error_message"] = f"internal topic '{name}' cannot be deleted"
        else:
            entry["topic_id"] = _uuid(meta.topic_id)
            await delete_topic_durably(broker, name)   # the file work off the event loop
            broker.replica_manager.forget_topic(name)
            if broker.groups is not None:
                broker.groups.remove_offsets_of_topic(name)  # as Kafka: no stale commits for a new namesake
                broker.groups.topics_changed()
            for p in range(meta.partitions):
                broker.purgatory.notify(name, p)
            logger.info("topic_deleted", topic=name)
        responses.append(entry)
    return {"throttle_time_ms": 0, "responses": responses}


# -- CreatePartitions -------------------------------------------------------------------------------
async def handle_create_partitions(ctx, request):
    broker = ctx.broker
    logs = broker.logs
    results = []
    for t in request.topics:
        entry = {"name": t.name, "error_code": ErrorCode.NONE, "error_message": None}
        meta = logs.topic(t.name)
        if not is_authorized(ctx, AclOperation.ALTER, ResourceType.TOPIC, t.name):
            entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif meta is None:
            entry["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif t.count > MAX_PARTITIONS_PER_TOPIC:
            entry["error_code"] = ErrorCode.INVALID_PARTITIONS
            entry["error_message"] = f"at most {MAX_PARTITIONS_PER_TOPIC} partitions per topic"
        elif t.count <= meta.partitions:
            entry["error_code"] = ErrorCode.INVALID_PARTITIONS
            entry["error_message"] = (f"topic has {meta.partitions} partitions; the new count {t.count} "
                                      f"must be larger")
        elif t.assignments is not None and any(sorted(set(a.broker_ids)) != [broker.node_id]
                                               for a in t.assignments):
            entry["error_code"] = ErrorCode.INVALID_REPLICA_ASSIGNMENT
            entry["error_message"] = f"partitions can only be assigned to broker {broker.node_id}"
        elif not request.validate_only:
            logs.create_partitions(t.name, t.count)
            logger.info("partitions_created", topic=t.name, partitions=t.count)
            if broker.groups is not None:
                broker.groups.topics_changed()
        results.append(entry)
    return {"throttle_time_ms": 0, "results": results}


# -- DescribeConfigs ------------------------------------------------------------------------------
def _config_row(row, *, version: int, include_synonyms: bool, include_documentation: bool) -> dict:
    return {
        "name": row.name,
        "value": None if row.sensitive else row.value,
        "read_only": row.read_only,
        "config_source": int(row.source),
        "is_default": row.source == ConfigSource.DEFAULT_CONFIG,
        "is_sensitive": row.sensitive,
        "synonyms": [{"name": n, "value": v, "source": int(s)} for n, v, s in row.synonyms]
        if include_synonyms else [],
        "config_type": row.type.wire_id,
        "documentation": row.doc if include_documentation else None,
    }


async def handle_describe_configs(ctx, request):
    broker = ctx.broker
    include_synonyms = bool(getattr(request, "include_synonyms", False))
    include_documentation = bool(getattr(request, "include_documentation", False))
    results = []
    for res in request.resources:
        entry = {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": res.resource_type,
                 "resource_name": res.resource_name, "configs": []}
        denied = _config_access_denied(ctx, res, AclOperation.DESCRIBE_CONFIGS)
        if denied is not None:
            entry["error_code"], entry["error_message"] = denied
            results.append(entry)
            continue
        if res.resource_type == RESOURCE_TOPIC:
            meta = broker.logs.topic(res.resource_name)
            if meta is None:
                entry["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                entry["error_message"] = f"topic '{res.resource_name}' does not exist"
                results.append(entry)
                continue
            rows = describe_topic_config(meta.overrides, broker.config.explicit, include_synonyms=True)
        elif res.resource_type == RESOURCE_BROKER:
            if res.resource_name not in ("", str(broker.node_id)):
                entry["error_code"] = ErrorCode.INVALID_REQUEST
                entry["error_message"] = f"this is broker {broker.node_id}"
                results.append(entry)
                continue
            rows = broker.config.describe(include_synonyms=True)
        elif res.resource_type == RESOURCE_BROKER_LOGGER:
            rows = []
        elif res.resource_type == RESOURCE_GROUP:
            if not res.resource_name:
                entry["error_code"] = ErrorCode.INVALID_REQUEST
                entry["error_message"] = "Group name must not be empty"
                results.append(entry)
                continue
            rows = broker.group_configs.describe(res.resource_name)
        else:
            entry["error_code"] = ErrorCode.INVALID_REQUEST
            entry["error_message"] = f"resource type {res.resource_type} is not supported"
            refuse(ctx, f"config_resource:DESCRIBE_CONFIGS:{res.resource_type}", entry["error_message"],
                   api="DESCRIBE_CONFIGS", error="INVALID_REQUEST", resource=res.resource_name)
            results.append(entry)
            continue
        keys = res.configuration_keys
        if keys:   # Kafka: null or empty means every key
            wanted = set(keys)
            rows = [r for r in rows if r.name in wanted]
        entry["configs"] = [_config_row(r, version=ctx.api_version, include_synonyms=include_synonyms,
                                        include_documentation=include_documentation) for r in rows]
        results.append(entry)
    return {"throttle_time_ms": 0, "results": results}


def _api_name(ctx) -> str:
    try:
        return ApiKey(ctx.api_key).name
    except (ValueError, AttributeError):
        return "?"


def _config_access_denied(ctx, res, operation):
    """(error code, message) when the principal may not ``operation`` the config resource, else None."""
    if res.resource_type == RESOURCE_TOPIC:
        if not is_authorized(ctx, operation, ResourceType.TOPIC, res.resource_name):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
    elif res.resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
        if not is_authorized(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed."
    elif res.resource_type == RESOURCE_GROUP:
        if not is_authorized(ctx, operation, ResourceType.GROUP, res.resource_name):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."
    return None


# -- AlterConfigs / IncrementalAlterConfigs ----------------------------------------------------------
def _warn_without_effect(topic: str, configs: dict) -> None:
    """Warn about topic keys set in a request that are accepted for compatibility only."""
    for key, reason in TOPIC_CONFIGS.without_effect(k for k, v in configs.items() if v is not None):
        logger.warning("config_key_without_effect", key=key, topic=topic, reason=reason)


def _apply_topic_overrides(broker, name: str, overrides: dict[str, str], validate_only: bool) -> None:
    try:
        broker.config.topic_config(overrides)
    except ConfigError as exc:
        raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    if not validate_only:
        broker.logs.alter_topic_config(name, overrides)
        logger.info("topic_config_altered", topic=name, configs=overrides)


def _preprocess(resources) -> dict[int, tuple[ErrorCode, str]]:
    """Kafka's ``ConfigAdminManager.preprocess``: refusals decided before any resource is applied,
    by position in the request."""
    refused: dict[int, tuple[ErrorCode, str]] = {}
    first: dict[tuple[int, str], int] = {}
    for i, res in enumerate(resources):
        where = first.setdefault((res.resource_type, res.resource_name), i)
        if where != i:
            refused[where] = refused[i] = (ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
    for i, res in enumerate(resources):
        if i in refused:
            continue
        names = [c.name for c in res.configs]
        if len(set(names)) != len(names):
            refused[i] = (ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
            continue
        nulls = [c.name for c in res.configs
                 if c.value is None and getattr(c, "config_operation", OP_SET) != OP_DELETE]
        if nulls:
            refused[i] = (ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))
    return refused


async def _alter_resource(broker, res, new_overrides_fn, validate_only: bool, ctx=None, refusal=None) -> dict:
    entry = {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": res.resource_type,
             "resource_name": res.resource_name}
    denied = refusal or (_config_access_denied(ctx, res, AclOperation.ALTER_CONFIGS) if ctx is not None else None)
    if denied is not None:
        entry["error_code"], entry["error_message"] = denied
    else:
        await _apply_alter(broker, res, new_overrides_fn, validate_only, ctx, entry)
    if res.resource_type == RESOURCE_GROUP and entry["error_code"] != ErrorCode.NONE:
        logger.info("group_config_refused", group=res.resource_name, error=ErrorCode(entry["error_code"]).name,
                    reason=entry["error_message"], client_id=getattr(ctx, "client_id", None))
    return entry


async def _apply_alter(broker, res, new_overrides_fn, validate_only: bool, ctx, entry: dict) -> None:
    """Apply one resource's change (or only check it), recording a refusal in ``entry``."""
    try:
        if res.resource_type == RESOURCE_TOPIC:
            meta = broker.logs.topic(res.resource_name)
            if meta is None:
                raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"topic '{res.resource_name}' does not exist")
            overrides = new_overrides_fn(dict(meta.overrides))
            _apply_topic_overrides(broker, res.resource_name, overrides, validate_only)
            _warn_without_effect(res.resource_name, {k: v for k, v in overrides.items()
                                                     if meta.overrides.get(k) != v})
        elif res.resource_type == RESOURCE_GROUP:
            if not res.resource_name:
                raise TopicError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
            try:
                await broker.group_configs.alter(res.resource_name, new_overrides_fn, validate_only=validate_only)
            except OSError as exc:   # the store could not be written: the change was not made
                logger.error("group_config_store_failed", group=res.resource_name, error=str(exc))
                raise TopicError(ErrorCode.KAFKA_STORAGE_ERROR,
                                 f"cannot store the group configs: {exc.strerror or exc}") from None
        elif res.resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
            reason = "broker settings are static in Sundial: edit server.properties and restart"
            if ctx is not None:
                refuse(ctx, "alter_broker_config", reason, api=_api_name(ctx), error="INVALID_REQUEST",
                       resource=res.resource_name)
            raise TopicError(ErrorCode.INVALID_REQUEST, reason)
        else:
            reason = f"resource type {res.resource_type} is not supported"
            if ctx is not None:
                refuse(ctx, f"config_resource:{_api_name(ctx)}:{res.resource_type}", reason, api=_api_name(ctx),
                       error="INVALID_REQUEST", resource=res.resource_name)
            raise TopicError(ErrorCode.INVALID_REQUEST, reason)
    except TopicError as exc:
        entry["error_code"] = exc.error_code
        entry["error_message"] = exc.message
    except ConfigError as exc:
        entry["error_code"] = ErrorCode.INVALID_CONFIG
        # group messages are Kafka's own sentences (they name the key); topic ones are "key: reason"
        entry["error_message"] = exc.message if res.resource_type == RESOURCE_GROUP else str(exc)


async def handle_alter_configs(ctx, request):
    broker = ctx.broker
    refused = _preprocess(request.resources)
    responses = []
    for i, res in enumerate(request.resources):
        def replace(_old, res=res):
            return {c.name: c.value for c in res.configs if c.value is not None}

        responses.append(await _alter_resource(broker, res, replace, bool(request.validate_only), ctx,
                                               refused.get(i)))
    return {"throttle_time_ms": 0, "responses": responses}


def _group_incremental(res):
    """IncrementalAlterConfigs on a group: SET and DELETE (DELETE of an unset key changes nothing);
    no group key is a list, so APPEND and SUBTRACT are refused as Kafka refuses them."""
    def change(old: dict) -> dict:
        new = dict(old)
        for c in res.configs:
            op = c.config_operation
            if op == OP_SET:
                new[c.name] = c.value
            elif op == OP_DELETE:
                new.pop(c.name, None)
            elif op in (OP_APPEND, OP_SUBTRACT):
                verb = "APPEND" if op == OP_APPEND else "SUBTRACT"
                raise ConfigError(c.name, f"Can't {verb} to key {c.name} because its type is not LIST.")
            else:
                raise TopicError(ErrorCode.INVALID_REQUEST, f"Unknown alter config operation {op}")
        return new

    return change


def _topic_incremental(res):
    def incremental(old: dict):
        new = dict(old)
        for c in res.configs:
            d = TOPIC_CONFIGS.get(c.name)
            if d is None:
                raise unknown_topic_config(c.name)
            name = d.name
            op = c.config_operation
            if op == OP_SET:
                new[name] = c.value
            elif op == OP_DELETE:
                new.pop(name, None)
            elif op in (OP_APPEND, OP_SUBTRACT):
                if d.type.value != "LIST":
                    raise ConfigError(name, "APPEND and SUBTRACT apply to list settings only")
                current = new.get(name)
                items = [x.strip() for x in (current or ",".join(d.default or ())).split(",") if x.strip()]
                for v in (c.value or "").split(","):
                    v = v.strip()
                    if not v:
                        continue
                    if op == OP_APPEND and v not in items:
                        items.append(v)
                    elif op == OP_SUBTRACT and v in items:
                        items.remove(v)
                new[name] = ",".join(items)
            else:
                raise ConfigError(name, f"unknown config operation {op}")
        return {k: v for k, v in new.items() if v is not None}

    return incremental


async def handle_incremental_alter_configs(ctx, request):
    broker = ctx.broker
    refused = _preprocess(request.resources)
    responses = []
    for i, res in enumerate(request.resources):
        change = _group_incremental(res) if res.resource_type == RESOURCE_GROUP else _topic_incremental(res)
        responses.append(await _alter_resource(broker, res, change, bool(request.validate_only), ctx, refused.get(i)))
    return {"throttle_time_ms": 0, "responses": responses}


# -- DeleteRecords ---------------------------------------------------------------------------------
async def handle_delete_records(ctx, request):
    """Per partition: DELETE on the topic, then :meth:`ReplicaManager.delete_records`."""
    rm = ctx.broker.replica_manager
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            if not is_authorized(ctx, AclOperation.DELETE, ResourceType.TOPIC, t.name):
                code, low_watermark = ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1
            else:
                answer = rm.delete_records(t.name, p.partition_index, p.offset)
                code, low_watermark = answer.error_code, answer.low_watermark
            parts.append({"partition_index": p.partition_index, "low_watermark": low_watermark, "error_code": code})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
