"""The share-group offsets admin APIs (KIP-932): DescribeShareGroupOffsets (90, v0-1),
AlterShareGroupOffsets (91, v0) and DeleteShareGroupOffsets (92, v0).

A share group's "offset" on a partition is its share-partition start offset (SPSO), kept by the
share-state store (:mod:`broker.share.state_store`). As Kafka's ``KafkaApis`` and
``GroupCoordinatorService``:

* **Describe** needs DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED for the group) and on each
  topic: a named topic without it answers TOPIC_AUTHORIZATION_FAILED for its partitions, and with
  ``Topics`` null (every initialized share-partition of the group) such topics are left out. A
  partition without state, or of a topic that does not exist, answers start offset -1 without an
  error (as OffsetFetch answers -1). v1 adds the lag (KIP-1226): the latest offset (the high
  watermark, asked of the ReplicaManager as ListOffsets asks it, as Kafka's coordinator does) less
  the SPSO less the records from the SPSO on already acknowledged or archived; -1 without state.
* **Alter** needs READ on the group and on each topic. The group must have no members
  (NON_EMPTY_GROUP); a group of another type answers GROUP_ID_NOT_FOUND. Each partition of an
  existing topic is initialized afresh at the given start offset (a new state epoch; everything in
  flight is forgotten; a start offset past the log end or before the log start is taken as given
  and corrected by the share-partition when it next reads the log, as in Kafka); an unknown topic or
  partition answers UNKNOWN_TOPIC_OR_PARTITION. Like Kafka 4.2, a share group need not exist yet: it is
  created empty, and the offsets set before its first member joins are where it starts.
* **Delete** needs DELETE on the group and READ on each topic. The group must be a share group
  (GROUP_ID_NOT_FOUND) with no members (NON_EMPTY_GROUP); each named topic's state is deleted for
  every partition, so the group starts there afresh with ``share.auto.offset.reset``; a topic that
  does not exist, or where the group has no state, answers UNKNOWN_TOPIC_OR_PARTITION.

All three answer UNSUPPORTED_VERSION while share groups are off (Kafka's ``isShareGroupProtocolEnabled``:
``group.share.enable`` or the finalized feature ``share.version``).

After an alter or delete the share-partition manager drops the partitions' engines so the next
fetch reads the new state. Answers go out once the state is durable.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import structlog

from sundial.protocol.errors import ErrorCode
from sundial.records.timestamps import LATEST_TIMESTAMP

from ..authorizer import AclOperation, ResourceType, is_authorized
from ..groups.modern.errors import GroupError
from ..share.state_store import ShareStateWriteError
from .share_groups import share_groups_enabled

logger = structlog.get_logger(__name__)

ZERO_UUID = uuid.UUID(int=0)
#: Kafka ``PartitionFactory``: what a share-partition without state answers.
UNINITIALIZED_START_OFFSET = -1
DEFAULT_LEADER_EPOCH = 0
UNKNOWN_LAG = -1
#: The ListOffsets version the lag's latest-offset lookup is answered as (v1: one offset, no
#: read_committed; the high watermark).
LATEST_OFFSET_LOOKUP_VERSION = 1

_MESSAGES = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
}
NO_OFFSETS_TO_DELETE = "There is no offset information to delete."
DISABLED = "Share groups are not enabled (group.share.enable is false and share.version is not finalized)."


# --- what the handlers use of the broker ------------------------------------------------------

def _store(ctx):
    return getattr(ctx.broker, "share_state", None)


def _share_groups(ctx):
    """The share groups' shell (membership), None when the broker has none."""
    return getattr(getattr(ctx.broker, "groups", None), "share", None)


def _group_problem(ctx, group_id: str, *, must_exist: bool) -> tuple[ErrorCode, str | None] | None:
    """GROUP_ID_NOT_FOUND for a group of another type (or, with ``must_exist``, no share group),
    NON_EMPTY_GROUP for a share group with members; None when the offsets may change."""
    share = _share_groups(ctx)
    store = _store(ctx)
    # A group with share state is a share group even before its first member (offsets altered first).
    is_share = group_id in store.group_ids() or (share is not None and share.is_share_group(group_id))
    if not is_share:
        groups = getattr(ctx.broker, "groups", None)
        other = groups is not None and group_id in set(groups.group_ids())
        if other:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
        if must_exist:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        return None
    if share is not None and not share.is_empty(group_id):
        return ErrorCode.NON_EMPTY_GROUP, f"The group {group_id} is not empty."
    return None


def _forget(ctx, group_id: str, topic: str, partition: int) -> None:
    manager = getattr(ctx.broker, "share_partitions", None)
    if manager is not None:
        manager.forget(group_id, topic, partition)


def _topic_id(ctx, topic: str) -> bytes | None:
    meta = ctx.broker.logs.topic(topic)
    return None if meta is None else meta.topic_id


def _partition_count(ctx, topic: str) -> int | None:
    meta = ctx.broker.logs.topic(topic)
    return None if meta is None else meta.partitions


# --- DescribeShareGroupOffsets ----------------------------------------------------------------

def _described_partition(ctx, summary, topic: str, partition: int) -> dict:
    if summary is None:
        return {"partition_index": partition, "start_offset": UNINITIALIZED_START_OFFSET,
                "leader_epoch": DEFAULT_LEADER_EPOCH, "lag": UNKNOWN_LAG, "error_code": ErrorCode.NONE,
                "error_message": None}
    lag = UNKNOWN_LAG
    if summary.delivery_complete_count >= 0:
        latest = ctx.broker.replica_manager.list_offset(topic, partition, LATEST_TIMESTAMP,
                                                        api_version=LATEST_OFFSET_LOOKUP_VERSION)
        if latest.error_code == ErrorCode.NONE and latest.offset >= 0:
            lag = max(0, latest.offset - summary.start_offset - summary.delivery_complete_count)
    return {"partition_index": partition, "start_offset": summary.start_offset, "leader_epoch": summary.leader_epoch,
            "lag": lag, "error_code": ErrorCode.NONE, "error_message": None}


def _describe_group(ctx, group) -> dict:
    group_id = group.group_id
    out = {"group_id": group_id, "topics": [], "error_code": ErrorCode.NONE, "error_message": None}
    if not share_groups_enabled(ctx.broker):
        out["error_code"], out["error_message"] = ErrorCode.UNSUPPORTED_VERSION, DISABLED
        return out
    if not is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id or ""):
        out["error_code"] = ErrorCode.GROUP_AUTHORIZATION_FAILED
        return out
    store = _store(ctx)
    if store is None:
        out["error_code"] = ErrorCode.COORDINATOR_NOT_AVAILABLE
        return out
    if group.topics is None:  # every initialized share-partition of the group
        by_topic: dict[str, list] = {}
        ids: dict[str, bytes] = {}
        for summary in store.summaries(group_id):
            name = store.topic_ids.name_of(summary.topic_id)
            if name is None:
                continue
            by_topic.setdefault(name, []).append(summary)
            ids[name] = summary.topic_id
        for name in sorted(by_topic):
            if not is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_denied=False):
                continue
            out["topics"].append({"topic_name": name, "topic_id": ids[name], "partitions": [
                _described_partition(ctx, s, name, s.partition) for s in by_topic[name]]})
        return out
    for topic in group.topics:
        name = topic.topic_name
        partitions = list(topic.partitions or [])
        if not is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            out["topics"].append({"topic_name": name, "topic_id": ZERO_UUID, "partitions": [
                {"partition_index": p, "start_offset": UNINITIALIZED_START_OFFSET, "leader_epoch": 0,
                 "lag": UNKNOWN_LAG, "error_code": code, "error_message": _MESSAGES[code]} for p in partitions]})
            continue
        topic_id = _topic_id(ctx, name)
        out["topics"].append({"topic_name": name, "topic_id": topic_id or ZERO_UUID, "partitions": [
            _described_partition(ctx, None if topic_id is None else store.summary(group_id, name, p), name, p)
            for p in partitions]})
    return out


async def handle_describe_share_group_offsets(ctx, request):
    return {"throttle_time_ms": 0, "groups": [_describe_group(ctx, g) for g in request.groups or []]}


# --- AlterShareGroupOffsets -----------------------------------------------------------------------

def _group_error(code: ErrorCode, message: str | None = None) -> dict:
    """An Alter or Delete of share-group offsets refused whole (the two answers share this shape)."""
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": []}


def _alter_partition(partition: int, code: ErrorCode = ErrorCode.NONE, message: str | None = None) -> dict:
    return {"partition_index": partition, "error_code": code, "error_message": message}


def _admit(ctx, group_id, operation, *, must_exist: bool) -> tuple[dict | None, object]:
    """(the answer when an Alter or Delete of share-group offsets is refused before it looks at its
    topics, else None; the share state store). Refusals in Kafka's order: feature off, group ACL, no
    coordinator, empty id, the group."""
    if not share_groups_enabled(ctx.broker):
        return _group_error(ErrorCode.UNSUPPORTED_VERSION, DISABLED), None
    if not is_authorized(ctx, operation, ResourceType.GROUP, group_id or ""):
        return _group_error(ErrorCode.GROUP_AUTHORIZATION_FAILED), None
    store = _store(ctx)
    if store is None:
        return _group_error(ErrorCode.COORDINATOR_NOT_AVAILABLE), None
    if not group_id:
        return _group_error(ErrorCode.INVALID_GROUP_ID), store
    problem = _group_problem(ctx, group_id, must_exist=must_exist)
    return (None if problem is None else _group_error(*problem)), store


def _topic_problem(ctx, name: str, lookup: Callable[[object, str], object]) -> tuple[ErrorCode, object]:
    """(TOPIC_AUTHORIZATION_FAILED without READ on the topic, else UNKNOWN_TOPIC_OR_PARTITION when
    ``lookup(ctx, name)`` finds nothing, else NONE; what it found)."""
    if not is_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, name):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
    found = lookup(ctx, name)
    return (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if found is None else ErrorCode.NONE), found


async def handle_alter_share_group_offsets(ctx, request):
    group_id = request.group_id
    refusal, store = _admit(ctx, group_id, AclOperation.READ, must_exist=False)
    if refusal is not None:
        return refusal
    share = _share_groups(ctx)
    if share is not None and not share.is_share_group(group_id):
        try:  # offsets set before the first member: the group is created empty (Kafka 4.2)
            await share.ensure_group(group_id)
        except GroupError as exc:
            return _group_error(exc.error_code, exc.message)
    responses = []
    for topic in request.topics or []:
        name = topic.topic_name
        parts = [p.partition_index for p in topic.partitions or []]
        code, count = _topic_problem(ctx, name, _partition_count)
        if code:
            responses.append({"topic_name": name, "topic_id": ZERO_UUID,
                              "partitions": [_alter_partition(p, code, _MESSAGES[code]) for p in parts]})
            continue
        results = []
        for p in topic.partitions or []:
            index, start = p.partition_index, p.start_offset
            if not 0 <= index < count:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                results.append(_alter_partition(index, code, _MESSAGES[code]))
                continue
            if start < 0:
                results.append(_alter_partition(index, ErrorCode.INVALID_REQUEST,
                                                "The start offset must not be negative."))
                continue
            try:
                await store.initialize(group_id, name, index, start)
            except ShareStateWriteError as exc:
                results.append(_alter_partition(index, ErrorCode.KAFKA_STORAGE_ERROR, str(exc)))
                continue
            _forget(ctx, group_id, name, index)
            results.append(_alter_partition(index))
        logger.info("share_group_offsets_altered", group=group_id, topic=name,
                    partitions=[p.partition_index for p in topic.partitions or []])
        responses.append({"topic_name": name, "topic_id": _topic_id(ctx, name), "partitions": results})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "responses": responses}


# --- DeleteShareGroupOffsets ------------------------------------------------------------------------

def _delete_topic(name: str, topic_id, code: ErrorCode = ErrorCode.NONE, message: str | None = None) -> dict:
    return {"topic_name": name, "topic_id": topic_id or ZERO_UUID, "error_code": code, "error_message": message}


async def handle_delete_share_group_offsets(ctx, request):
    group_id = request.group_id
    refusal, store = _admit(ctx, group_id, AclOperation.DELETE, must_exist=True)
    if refusal is not None:
        return refusal
    responses = []
    for topic in request.topics or []:
        name = topic.topic_name
        code, topic_id = _topic_problem(ctx, name, _topic_id)
        if code:
            responses.append(_delete_topic(name, None, code, _MESSAGES[code]))
            continue
        partitions = [s.partition for s in store.summaries(group_id) if s.topic_id == topic_id]
        if not partitions:
            responses.append(_delete_topic(name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, NO_OFFSETS_TO_DELETE))
            continue
        try:
            for p in partitions:
                await store.delete(group_id, name, p)
                _forget(ctx, group_id, name, p)
        except ShareStateWriteError as exc:
            responses.append(_delete_topic(name, topic_id, ErrorCode.KAFKA_STORAGE_ERROR, str(exc)))
            continue
        logger.info("share_group_offsets_deleted", group=group_id, topic=name, partitions=partitions)
        responses.append(_delete_topic(name, topic_id))
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "responses": responses}


__all__ = ["handle_alter_share_group_offsets", "handle_delete_share_group_offsets",
           "handle_describe_share_group_offsets"]
