"""Kafka 4's consumer group protocol (KIP-848): ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

Thin: each handler turns the decoded request into the coordinator's call
(:meth:`broker.groups.coordinator.GroupCoordinator.consumer_heartbeat`, the consumer groups'
``describe``) and a refusal (:class:`~broker.groups.modern.errors.GroupError`) into the
response's error code and message, as Kafka's ``GroupCoordinatorService`` does. Version facts:

* ConsumerGroupHeartbeat v0 lets the broker pick a member id on join; v1 (KIP-1082) requires
  the client's own, and adds ``SubscribedTopicRegex`` (the request validation lives with the
  state machine, :mod:`broker.groups.modern.requests`).
* ConsumerGroupDescribe v1 adds each member's ``MemberType`` (1: the consumer protocol).

Authorization, as Kafka: the heartbeat needs READ on the group, describe DESCRIBE on it
(GROUP_AUTHORIZATION_FAILED otherwise). A heartbeat's subscribed topics are not checked here:
Kafka checks DESCRIBE on topics a regex resolves to only when an authorizer is configured, and
so does :mod:`broker.groups.modern.regex`' caller (see docs/groups.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sundial.protocol.errors import ErrorCode

from ..authorizer import OPERATIONS_NOT_REQUESTED, AclOperation, ResourceType, authorized_operations, is_authorized
from ..groups.modern.errors import GroupError
from ..groups.modern.requests import HeartbeatRequest
from .groups import client_host


def _heartbeat_error(code: ErrorCode, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None}


def assignment_answer(assignment) -> dict | None:
    """A heartbeat's assignment (topic id → partitions), sorted; None when there is none to send."""
    if assignment is None:
        return None
    return {"topic_partitions": [{"topic_id": topic_id, "partitions": sorted(partitions)}
                                 for topic_id, partitions in sorted(assignment.items())]}


def describe_each(ctx, group_ids: Iterable, describe: Callable[[str], object] | None, *,
                  include_operations: bool, described: Callable[[object, int], dict],
                  not_described: Callable[[str, ErrorCode, str | None], dict],
                  refusal: Callable[[object], tuple[ErrorCode, str] | None] = lambda desc: None) -> list[dict]:
    """One answer per group id: GROUP_AUTHORIZATION_FAILED without DESCRIBE on the group,
    COORDINATOR_NOT_AVAILABLE when there is no coordinator (``describe`` None), the
    :class:`GroupError` ``describe`` raises, ``refusal(description)`` when it gives one, else
    ``described(description, authorized operations)``."""
    out = []
    for group_id in group_ids:
        if not is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id or ""):
            out.append(not_described(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, None))
            continue
        if describe is None:
            out.append(not_described(group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE, None))
            continue
        try:
            desc = describe(group_id)
        except GroupError as exc:
            out.append(not_described(group_id, exc.error_code, exc.message))
            continue
        refused = refusal(desc)
        if refused is not None:
            out.append(not_described(group_id, *refused))
            continue
        operations = (authorized_operations(ctx, ResourceType.GROUP, group_id) if include_operations
                      else OPERATIONS_NOT_REQUESTED)
        out.append(described(desc, operations))
    return out


async def handle_consumer_group_heartbeat(ctx, request):
    coord = getattr(ctx.broker, "groups", None)
    if not is_authorized(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id or ""):
        return _heartbeat_error(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    if coord is None:
        return _heartbeat_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, None)
    if not ctx.broker.config.group_coordinator.consumer_protocol_enabled:
        return _heartbeat_error(ErrorCode.UNSUPPORTED_VERSION,
                                "The new consumer group protocol is not enabled "
                                "(group.coordinator.rebalance.protocols has no 'consumer').")
    owned = None
    if request.topic_partitions is not None:
        owned = {tp.topic_id: tuple(tp.partitions or ()) for tp in request.topic_partitions}
    heartbeat = HeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id, rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=request.subscribed_topic_regex if ctx.api_version >= 1 else None,
        server_assignor=request.server_assignor, topic_partitions=owned, version=ctx.api_version)
    try:
        result = await coord.consumer_heartbeat(heartbeat, client_id=ctx.client_id or "",
                                                client_host=client_host(ctx))
    except GroupError as exc:
        return _heartbeat_error(exc.error_code, exc.message)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "member_id": result.member_id, "member_epoch": result.member_epoch,
            "heartbeat_interval_ms": result.heartbeat_interval_ms, "assignment": assignment_answer(result.assignment)}


def _topic_partitions(parts) -> dict:
    return {"topic_partitions": [{"topic_id": tp.topic_id, "topic_name": tp.topic_name,
                                  "partitions": list(tp.partitions)} for tp in parts]}


def _described(desc, operations: int) -> dict:
    return {"error_code": ErrorCode.NONE, "error_message": None, "group_id": desc.group_id,
            "group_state": desc.state, "group_epoch": desc.group_epoch, "assignment_epoch": desc.assignment_epoch,
            "assignor_name": desc.assignor_name, "authorized_operations": operations,
            "members": [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                         "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                         "subscribed_topic_names": list(m.subscribed_topic_names),
                         "subscribed_topic_regex": m.subscribed_topic_regex,
                         "assignment": _topic_partitions(m.assignment),
                         "target_assignment": _topic_partitions(m.target_assignment),
                         "member_type": m.member_type} for m in desc.members]}


def _not_described(group_id: str, code: ErrorCode, message: str | None) -> dict:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [],
            "authorized_operations": OPERATIONS_NOT_REQUESTED}


async def handle_consumer_group_describe(ctx, request):
    coord = getattr(ctx.broker, "groups", None)
    out = describe_each(ctx, request.group_ids or [], None if coord is None else coord.consumer_describe,
                        include_operations=bool(request.include_authorized_operations), described=_described,
                        not_described=_not_described)
    return {"throttle_time_ms": 0, "groups": out}
