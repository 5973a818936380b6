"""Share groups (KIP-932): ShareGroupHeartbeat (76) and ShareGroupDescribe (77), version 1 each.

Thin: each handler turns the decoded request into a call on the share groups
(:class:`broker.groups.share_groups.ShareGroups`, ``broker.groups.share``) and a refusal
(:class:`~broker.groups.modern.errors.GroupError`) into the response's error code and message.
Version 0 was Kafka 4.0's early access and is gone from Kafka 4.1's JSON; v1 requires the
client's own member id.

Both answer UNSUPPORTED_VERSION while share groups are off, as Kafka's ``isShareGroupProtocolEnabled``:
they are on when ``group.share.enable`` is true or the feature ``share.version`` is finalized at 1 or
more, which this broker does once it serves ShareFetch (:func:`broker.handlers.api_versions.finalized_features`).

Authorization, as Kafka 4.2's ``KafkaApis``: the heartbeat needs READ on the group
(GROUP_AUTHORIZATION_FAILED) and, when it names subscribed topics, DESCRIBE on every one of
them (TOPIC_AUTHORIZATION_FAILED); describe needs DESCRIBE on the group, and a group whose
members are assigned a topic the caller may not describe answers TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from sundial.protocol.errors import ErrorCode
from sundial.protocol.features import SHARE_VERSION

from ..authorizer import OPERATIONS_NOT_REQUESTED, AclOperation, ResourceType, is_authorized
from ..groups.modern.errors import GroupError
from ..groups.share.manager import ShareHeartbeatRequest
from .api_versions import finalized_features
from .consumer_groups import assignment_answer, describe_each
from .groups import client_host

_DISABLED = "Share groups are not enabled (group.share.enable is false and share.version is not finalized)."


def share_groups_enabled(broker) -> bool:
    config = getattr(broker, "config", None)
    if config is not None and config.group_coordinator.share.enable:
        return True
    return finalized_features(broker).get(SHARE_VERSION, 0) >= 1


def _shares(ctx):
    coord = getattr(ctx.broker, "groups", None)
    return None if coord is None else coord.share


def _heartbeat_error(code: ErrorCode, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None}


async def handle_share_group_heartbeat(ctx, request):
    coord = _shares(ctx)
    group_id = request.group_id or ""
    if not is_authorized(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return _heartbeat_error(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    topics = request.subscribed_topic_names
    if topics and not all(is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, t or "") for t in topics):
        return _heartbeat_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
    if coord is None:
        return _heartbeat_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, None)
    if not share_groups_enabled(ctx.broker):
        return _heartbeat_error(ErrorCode.UNSUPPORTED_VERSION, _DISABLED)
    heartbeat = ShareHeartbeatRequest(
        group_id=group_id, member_id=request.member_id or "", member_epoch=request.member_epoch,
        rack_id=request.rack_id, subscribed_topic_names=tuple(topics) if topics is not None else None)
    try:
        result = await coord.heartbeat(heartbeat, client_id=ctx.client_id or "", client_host=client_host(ctx))
    except GroupError as exc:
        return _heartbeat_error(exc.error_code, exc.message)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "member_id": result.member_id, "member_epoch": result.member_epoch,
            "heartbeat_interval_ms": result.heartbeat_interval_ms, "assignment": assignment_answer(result.assignment)}


def _not_described(group_id: str, code: ErrorCode, message: str | None) -> dict:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [],
            "authorized_operations": OPERATIONS_NOT_REQUESTED}


def _described(desc, operations: int) -> dict:
    return {"error_code": ErrorCode.NONE, "error_message": None, "group_id": desc.group_id,
            "group_state": desc.state, "group_epoch": desc.group_epoch, "assignment_epoch": desc.assignment_epoch,
            "assignor_name": desc.assignor_name, "authorized_operations": operations,
            "members": [{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "subscribed_topic_names": list(m.subscribed_topic_names),
                         "assignment": {"topic_partitions": [
                             {"topic_id": tid, "topic_name": name, "partitions": list(parts)}
                             for tid, name, parts in m.assignment]}}
                        for m in desc.members]}


async def handle_share_group_describe(ctx, request):
    coord = _shares(ctx)
    group_ids = [group_id or "" for group_id in request.group_ids or []]
    if not share_groups_enabled(ctx.broker):
        return {"throttle_time_ms": 0,
                "groups": [_not_described(g, ErrorCode.UNSUPPORTED_VERSION, _DISABLED) for g in group_ids]}

    def topics_refusal(desc) -> tuple[ErrorCode, str] | None:
        names = {name for m in desc.members for _, name, _ in m.assignment}
        if all(is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, n) for n in names):
            return None
        return (ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                "The described group uses topics that the client is not authorized to describe.")

    out = describe_each(ctx, group_ids, None if coord is None else coord.describe,
                        include_operations=bool(request.include_authorized_operations), described=_described,
                        not_described=_not_described, refusal=topics_refusal)
    return {"throttle_time_ms": 0, "groups": out}
