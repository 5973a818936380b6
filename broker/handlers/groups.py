"""Group APIs: FindCoordinator (10), JoinGroup (11), SyncGroup (14), Heartbeat (12),
LeaveGroup (13), OffsetCommit (8), OffsetFetch (9), ListGroups (16), DescribeGroups (15),
DeleteGroups (42) and OffsetDelete (47).

Thin: each handler reads the decoded request (kafka-python snake_case names; fields a
version lacks read as their schema default), calls :class:`broker.groups.coordinator.GroupCoordinator`
and shapes Kafka's response for the version. Version facts that live here:

* JoinGroup v0 has no rebalance timeout (it equals the session timeout); v4+ without
  ``group.instance.id`` requires a known member id (KIP-394); ``protocol_name`` is a
  non-nullable string before v7 ("" when there is none).
* LeaveGroup v0–v2 carries one member and reports its error at the top level; v3+
  is a batch with one result per member.
* OffsetCommit v0 (Kafka's ZooKeeper-era commit) and v1 are answered like a simple
  consumer when no generation is given; v1 may carry a per-partition commit
  timestamp, v2–v4 a ``retention_time_ms`` (Kafka's expire timestamp, -1 = broker
  default). The field is ``generation_id_or_member_epoch`` in kafka-python 3.
* OffsetFetch v0–v1: errors per partition; v2–v7: a top-level error, ``topics=null``
  asks for every committed partition; v8+: many groups per request. A partition
  without a commit answers offset -1, leader epoch -1, metadata "".
* FindCoordinator v0–v3: one key; v4+: a list (``coordinator_keys``). Group keys are
  answered with this node (the address of the listener the client used);
  transaction keys go to the transaction coordinator
  (:func:`broker.handlers.transactions.find_transaction_coordinator`); other key types get
  INVALID_REQUEST.

With an authorizer, Kafka's checks: FindCoordinator needs DESCRIBE on the group,
Join/Sync/Heartbeat/Leave and OffsetCommit READ, OffsetFetch and DescribeGroups
DESCRIBE, DeleteGroups and OffsetDelete DELETE, else GROUP_AUTHORIZATION_FAILED (30).
Committing needs READ on each topic and fetching DESCRIBE (TOPIC_AUTHORIZATION_FAILED,
29, per partition; an all-partitions OffsetFetch leaves such topics out). ListGroups
lists every group with DESCRIBE on the cluster, else the groups the principal may
DESCRIBE.
"""

from __future__ import annotations

import structlog

from sundial.protocol.errors import ErrorCode

from ..authorizer import CLUSTER_NAME, OPERATIONS_NOT_REQUESTED, AclOperation, ResourceType, authorized_operations, \
    is_authorized
from ..refusals import refuse
from .transactions import find_transaction_coordinator
from ..groups.offset_manager import CommitRequest, FetchedOffset

logger = structlog.get_logger(__name__)

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


def _coordinator(ctx):
    return getattr(ctx.broker, "groups", None)


def _group_ok(ctx, operation, group_id) -> bool:
    return is_authorized(ctx, operation, ResourceType.GROUP, group_id or "")


def client_host(ctx) -> str:
    """The client's address with Kafka's leading ``/`` (``InetAddress.toString``)."""
    host = ctx.client_host or ""
    return host if host.startswith("/") else f"/{host}"


def _opt(request, name, default=None):
    value = getattr(request, name, default)
    return default if value is None else value


# -- FindCoordinator --------------------------------------------------------------------------------
def _endpoint(ctx):
    broker = ctx.broker
    if hasattr(broker, "endpoint_for"):
        return broker.endpoint_for(ctx.listener_name)
    return broker.node


def _find_one(ctx, key: str, key_type: int) -> dict:
    coord = _coordinator(ctx)
    if key_type == KEY_TYPE_TRANSACTION:
        return find_transaction_coordinator(ctx, key)
    if key_type != KEY_TYPE_GROUP:
        reason = f"unknown key type {key_type}"
        refuse(ctx, f"find_coordinator:key_type:{key_type}", reason, api="FIND_COORDINATOR",
               error="INVALID_REQUEST", key=key)
        return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": reason, "node_id": -1, "host": "",
                "port": -1}
    if not _group_ok(ctx, AclOperation.DESCRIBE, key):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "error_message": None,
                "node_id": -1, "host": "", "port": -1}
    if coord is None or not coord.active:
        code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if coord is not None and coord.loading \
            else ErrorCode.COORDINATOR_NOT_AVAILABLE
        return {"error_code": code, "error_message": code.name, "node_id": -1, "host": "", "port": -1}
    ep = _endpoint(ctx)
    return {"error_code": ErrorCode.NONE, "error_message": None, "node_id": ep.node_id, "host": ep.host,
            "port": ep.port}


async def handle_find_coordinator(ctx, request):
    key_type = _opt(request, "key_type", KEY_TYPE_GROUP)
    if ctx.api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys or []:
            coordinators.append({"key": key, **_find_one(ctx, key, key_type)})
        return {"throttle_time_ms": 0, "coordinators": coordinators}
    return {"throttle_time_ms": 0, **_find_one(ctx, request.key, key_type)}


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ------------------------------------------------
async def handle_join_group(ctx, request):
    version = ctx.api_version
    coord = _coordinator(ctx)
    session_timeout_ms = request.session_timeout_ms
    rebalance_timeout_ms = _opt(request, "rebalance_timeout_ms", -1)
    if version == 0 or rebalance_timeout_ms < 0:
        rebalance_timeout_ms = session_timeout_ms
    instance_id = getattr(request, "group_instance_id", None) if version >= 5 else None
    member_id = request.member_id or ""
    if not _group_ok(ctx, AclOperation.READ, request.group_id):
        reply_error, reply = ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    elif coord is None:
        reply_error, reply = ErrorCode.COORDINATOR_NOT_AVAILABLE, None
    else:
        reply = await coord.join_group(
            group_id=request.group_id, member_id=member_id, group_instance_id=instance_id,
            client_id=ctx.client_id or "", client_host=client_host(ctx), session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=request.protocol_type or "",
            protocols=[(p.name, bytes(p.metadata or b"")) for p in (request.protocols or [])],
            require_known_member_id=version >= 4 and instance_id is None,
            reason=getattr(request, "reason", None) if version >= 8 else None)
        reply_error = reply.error
    if reply is None or reply_error != ErrorCode.NONE:
        return {"throttle_time_ms": 0, "error_code": reply_error, "generation_id": -1,
                "protocol_type": None, "protocol_name": None if version >= 7 else "", "leader": "",
                "skip_assignment": False, "member_id": reply.member_id if reply is not None else member_id,
                "members": []}
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "generation_id": reply.generation_id,
        "protocol_type": reply.protocol_type,
        "protocol_name": reply.protocol_name if version >= 7 else (reply.protocol_name or ""),
        "leader": reply.leader_id,
        "skip_assignment": reply.skip_assignment,
        "member_id": reply.member_id,
        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
                    for m in reply.members],
    }


async def handle_sync_group(ctx, request):
    version = ctx.api_version
    coord = _coordinator(ctx)
    if not _group_ok(ctx, AclOperation.READ, request.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "assignment": b""}
    if coord is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "assignment": b""}
    reply = await coord.sync_group(
        group_id=request.group_id, generation_id=request.generation_id, member_id=request.member_id or "",
        group_instance_id=getattr(request, "group_instance_id", None) if version >= 3 else None,
        protocol_type=getattr(request, "protocol_type", None) if version >= 5 else None,
        protocol_name=getattr(request, "protocol_name", None) if version >= 5 else None,
        assignments=[(a.member_id, bytes(a.assignment or b"")) for a in (request.assignments or [])])
    return {"throttle_time_ms": 0, "error_code": reply.error, "protocol_type": reply.protocol_type,
            "protocol_name": reply.protocol_name, "assignment": reply.assignment}


async def handle_heartbeat(ctx, request):
    coord = _coordinator(ctx)
    if not _group_ok(ctx, AclOperation.READ, request.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if coord is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    code = coord.heartbeat(group_id=request.group_id, member_id=request.member_id or "",
                           group_instance_id=getattr(request, "group_instance_id", None)
                           if ctx.api_version >= 3 else None,
                           generation_id=request.generation_id)
    return {"throttle_time_ms": 0, "error_code": code}


async def handle_leave_group(ctx, request):
    version = ctx.api_version
    coord = _coordinator(ctx)
    if version >= 3:
        members = [(m.member_id or "", m.group_instance_id, getattr(m, "reason", None) if version >= 5 else None)
                   for m in (request.members or [])]
    else:
        members = [(request.member_id or "", None, None)]
    if not _group_ok(ctx, AclOperation.READ, request.group_id):
        top, errors = ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    elif coord is None:
        top, errors = ErrorCode.COORDINATOR_NOT_AVAILABLE, []
    else:
        top, errors = coord.leave_group(group_id=request.group_id, members=members)
    if version < 3:
        error = top if top != ErrorCode.NONE else next((e for e in errors if e != ErrorCode.NONE), ErrorCode.NONE)
        return {"throttle_time_ms": 0, "error_code": error}
    return {
        "throttle_time_ms": 0,
        "error_code": top,
        "members": [] if top != ErrorCode.NONE else [
            {"member_id": m[0], "group_instance_id": m[1], "error_code": e} for m, e in zip(members, errors)],
    }


# -- OffsetCommit / OffsetFetch / OffsetDelete --------------------------------------------------------
async def handle_offset_commit(ctx, request):
    version = ctx.api_version
    coord = _coordinator(ctx)
    generation = _opt(request, "generation_id_or_member_epoch", None)
    if generation is None:
        generation = _opt(request, "generation_id", -1)
    if version == 0:
        generation = -1
    member_id = (request.member_id or "") if version >= 1 else ""
    instance_id = getattr(request, "group_instance_id", None) if version >= 7 else None
    retention_ms = _opt(request, "retention_time_ms", -1) if 2 <= version <= 4 else -1
    entries: list[CommitRequest] = []
    shape: list[tuple[str, list[int]]] = []
    denied: dict[int, int] = {}  # position among all partitions → error code
    group_ok = _group_ok(ctx, AclOperation.READ, request.group_id)
    position = 0
    for t in request.topics or []:
        indexes = []
        topic_ok = group_ok and is_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, t.name)
        for p in t.partitions or []:
            if not topic_ok:
                denied[position] = (ErrorCode.TOPIC_AUTHORIZATION_FAILED if group_ok
                                    else ErrorCode.GROUP_AUTHORIZATION_FAILED)
                indexes.append(p.partition_index)
                position += 1
                continue
            position += 1
            entries.append(CommitRequest(
                t.name, p.partition_index, p.committed_offset,
                leader_epoch=_opt(p, "committed_leader_epoch", -1) if version >= 6 else -1,
                metadata=p.committed_metadata,
                commit_timestamp_ms=_opt(p, "commit_timestamp", -1) if version == 1 else -1))
            indexes.append(p.partition_index)
        shape.append((t.name, indexes))
    if coord is None:
        errors = [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(entries)
    elif not entries:
        errors = []
    else:
        errors = await coord.commit_offsets(group_id=request.group_id, member_id=member_id,
                                            group_instance_id=instance_id, generation_id=generation,
                                            offsets=entries, retention_time_ms=retention_ms, api_version=version)
    if denied:
        allowed = iter(errors)
        errors = [denied[i] if i in denied else next(allowed) for i in range(position)]
    it = iter(errors)
    return {"throttle_time_ms": 0,
            "topics": [{"name": name, "partitions": [{"partition_index": i, "error_code": next(it)}
                                                     for i in indexes]}
                       for name, indexes in shape]}


def _partition_answer(row, error=ErrorCode.NONE) -> dict:
    c = row.committed
    if c is None:
        return {"partition_index": row.partition, "committed_offset": -1, "committed_leader_epoch": -1,
                "metadata": "", "error_code": error}
    return {"partition_index": row.partition, "committed_offset": c.offset,
            "committed_leader_epoch": c.leader_epoch, "metadata": c.metadata, "error_code": error}


def _fetch_group(coord, group_id, topics, require_stable: bool, per_partition_errors: bool, ctx=None,
                 member: tuple[str | None, int] = (None, -1)):
    """(error, topics list) for one group of an OffsetFetch (``member``: v9's member id and epoch)."""
    partitions = None if topics is None else [(t.name, p) for t in topics for p in (t.partition_indexes or [])]
    if ctx is not None and not _group_ok(ctx, AclOperation.DESCRIBE, group_id):
        rows = [FetchedOffset(t, p, None) for t, p in partitions or []]
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
        by_topic: dict[str, list[dict]] = {}
        for row in rows:
            by_topic.setdefault(row.topic, []).append(_partition_answer(row, error))
        return error, [{"name": name, "partitions": parts} for name, parts in by_topic.items()]
    if coord is None:
        error, rows = ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        if partitions:
                rows = [FetchedOffset(t, p, None) for t, p in partitions]
    else:
        error, rows = coord.fetch_offsets(group_id=group_id, partitions=partitions, require_stable=require_stable,
                                          member_id=member[0], member_epoch=member[1])
    by_topic: dict[str, list[dict]] = {}
    visible: dict[str, bool] = {}
    for row in rows:
        if ctx is not None:
            ok = visible.get(row.topic)
            if ok is None:
                ok = visible[row.topic] = is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, row.topic,
                                                         log_denied=partitions is not None)
            if not ok:
                if partitions is not None:  # named partitions: answered with the error
                    by_topic.setdefault(row.topic, []).append(
                        {"partition_index": row.partition, "committed_offset": -1, "committed_leader_epoch": -1,
                         "metadata": "", "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED})
                continue  # all partitions: left out
        by_topic.setdefault(row.topic, []).append(
            _partition_answer(row, error if per_partition_errors and error else row.error))
    return error, [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


async def handle_offset_fetch(ctx, request):
    version = ctx.api_version
    coord = _coordinator(ctx)
    require_stable = bool(_opt(request, "require_stable", False)) if version >= 7 else False
    if version >= 8:
        groups = []
        for g in request.groups or []:
            member = (getattr(g, "member_id", None), _opt(g, "member_epoch", -1)) if version >= 9 else (None, -1)
            error, topics = _fetch_group(coord, g.group_id, g.topics, require_stable, False, ctx, member)
            groups.append({"group_id": g.group_id, "topics": [] if error else topics, "error_code": error})
        return {"throttle_time_ms": 0, "groups": groups}
    topics_in = request.topics
    if version < 2 and topics_in is None:
        topics_in = []
    error, topics = _fetch_group(coord, request.group_id, topics_in, require_stable, version < 2, ctx)
    if version < 2:
        return {"throttle_time_ms": 0, "topics": topics}
    return {"throttle_time_ms": 0, "topics": [] if error else topics, "error_code": error}


async def handle_offset_delete(ctx, request):
    coord = _coordinator(ctx)
    partitions = [(t.name, p.partition_index) for t in (request.topics or []) for p in (t.partitions or [])]
    topic_ok = {t.name: is_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, t.name) for t in (request.topics or [])}
    allowed = [(t, p) for t, p in partitions if topic_ok[t]]
    if not _group_ok(ctx, AclOperation.DELETE, request.group_id):
        top, errors = ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    elif coord is None:
        top, errors = ErrorCode.COORDINATOR_NOT_AVAILABLE, []
    else:
        top, errors = await coord.delete_offsets(group_id=request.group_id, partitions=allowed)
    if top != ErrorCode.NONE:
        return {"error_code": top, "throttle_time_ms": 0, "topics": []}
    if len(allowed) != len(partitions):
        granted = iter(errors)
        errors = [next(granted) if topic_ok[t] else ErrorCode.TOPIC_AUTHORIZATION_FAILED for t, _ in partitions]
    it = iter(errors)
    return {"error_code": ErrorCode.NONE, "throttle_time_ms": 0,
            "topics": [{"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                                        "error_code": next(it)} for p in (t.partitions or [])]}
                       for t in (request.topics or [])]}


# -- ListGroups / DescribeGroups / DeleteGroups ----------------------------------------------------------
def _group_ok_quiet(ctx, row) -> bool:
    group_id = row.get("group_id") if isinstance(row, dict) else getattr(row, "group_id", "")
    return is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id or "", log_denied=False)


async def handle_list_groups(ctx, request):
    coord = _coordinator(ctx)
    if coord is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "groups": []}
    states = (_opt(request, "states_filter", []) or []) if ctx.api_version >= 4 else []
    types = (_opt(request, "types_filter", []) or []) if ctx.api_version >= 5 else []
    # a null element of these non-nullable string arrays decodes as None: ignore it, never crash
    error, rows = coord.list_groups([s for s in states if s is not None], [t for t in types if t is not None])
    if not is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False):
        rows = [r for r in rows if _group_ok_quiet(ctx, r)]
    return {"throttle_time_ms": 0, "error_code": error, "groups": rows}


async def handle_describe_groups(ctx, request):
    coord = _coordinator(ctx)
    include_ops = bool(_opt(request, "include_authorized_operations", False)) if ctx.api_version >= 3 else False
    out = []
    for group_id in request.groups or []:
        if not _group_ok(ctx, AclOperation.DESCRIBE, group_id):
            error, desc = ErrorCode.GROUP_AUTHORIZATION_FAILED, {"group_state": "", "protocol_type": "",
                                                                  "protocol_data": "", "members": []}
        elif coord is None:
            error, desc = ErrorCode.COORDINATOR_NOT_AVAILABLE, {"group_state": "Dead", "protocol_type": "",
                                                                 "protocol_data": "", "members": []}
        else:
            error, desc = coord.describe_group(group_id)
            if error == ErrorCode.GROUP_ID_NOT_FOUND and ctx.api_version < 6:
                error, desc = ErrorCode.NONE, {k: v for k, v in desc.items() if k != "error_message"}
        described = include_ops and error == ErrorCode.NONE
        out.append({"error_code": error, "error_message": None, "group_id": group_id, **desc,
                    "authorized_operations": authorized_operations(ctx, ResourceType.GROUP, group_id) if described
                    else OPERATIONS_NOT_REQUESTED})
    return {"throttle_time_ms": 0, "groups": out}


async def handle_delete_groups(ctx, request):
    coord = _coordinator(ctx)
    names = list(request.groups_names or [])
    allowed = [g for g in names if _group_ok(ctx, AclOperation.DELETE, g)]
    if coord is None:
        errors = [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(names)
    else:
        done = dict(zip(allowed, await coord.delete_groups(allowed))) if allowed else {}
        errors = [done.get(g, ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in names]
    return {"throttle_time_ms": 0,
            "results": [{"group_id": g, "error_code": e} for g, e in zip(names, errors)]}
