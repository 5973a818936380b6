"""ShareFetch (78) v1-2 and ShareAcknowledge (79) v1-2: share groups' data path (KIP-932).

The share-partition manager (:mod:`broker.share.manager`) does the work; this module checks the
request, keeps the share session (:mod:`broker.share.sessions`) and writes Kafka's answer:

* ACLs: READ on the group (else the whole answer is GROUP_AUTHORIZATION_FAILED), READ on each
  topic (else its partitions answer TOPIC_AUTHORIZATION_FAILED and are neither acknowledged nor
  fetched). A topic id the broker does not know answers UNKNOWN_TOPIC_ID.
* An empty member id is INVALID_REQUEST. Session errors (SHARE_SESSION_NOT_FOUND,
  INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED, INVALID_REQUEST for acknowledgements
  in a request that opens a session) are the answer's top-level error.
* Acknowledgements, piggy-backed on ShareFetch or alone in ShareAcknowledge, are applied per
  partition, all batches of a partition or none; the partition's ``AcknowledgeErrorCode``
  (ShareFetch) or ``ErrorCode`` (ShareAcknowledge) tells the result, given only once the new
  state is durable. Batches must be in offset order without overlap, and type 4 (RENEW) is
  accepted only in a request with ``IsRenewAck`` (v2), else INVALID_REQUEST.
* ShareFetch then acquires records in every partition of the session (rotated by the session
  epoch so that no partition is always served last), long-polling up to ``MaxWaitMs``. With
  ``IsRenewAck`` (v2) it only acknowledges: ``MaxWaitMs``, ``MinBytes``, ``MaxBytes`` and
  ``MaxRecords`` must then be 0 (INVALID_REQUEST otherwise), as Kafka requires.
* Epoch -1 closes the session: acknowledgements are applied, then every record the member still
  holds is released.
* The answer of a request that opened a session names every partition of the session; later
  answers name the partitions with records, errors or acknowledgements and those just added, as
  Kafka's incremental share fetch context does. Partitions without records carry empty records
  (not null: librdkafka refuses a null record set).
"""

from __future__ import annotations

import asyncio
import uuid

import structlog

from sundial.protocol.errors import ErrorCode

from ..authorizer import AclOperation, ResourceType, is_authorized
from ..share.acknowledgement import AcknowledgementBatch, AcknowledgeType
from ..share.acquisition import AcquireMode
from ..share.sessions import FINAL_EPOCH, INITIAL_EPOCH, ShareSessionCache, ShareSessionError

logger = structlog.get_logger(__name__)

_NO_LEADER = {"leader_id": -1, "leader_epoch": -1}


def _uuid(raw) -> uuid.UUID:
    if isinstance(raw, uuid.UUID):
        return raw
    return uuid.UUID(bytes=bytes(raw))


class _Topics:
    """Topic ids of one request resolved to names, with the TOPIC READ check done once each."""

    def __init__(self, ctx) -> None:
        self._ctx = ctx
        self._logs = ctx.broker.logs
        self._names: dict[uuid.UUID, tuple[str | None, int]] = {}

    def resolve(self, topic_id: uuid.UUID) -> tuple[str | None, int]:
        """(name, error code) of a topic id."""
        found = self._names.get(topic_id)
        if found is None:
            meta = self._logs.topic_by_id(topic_id.bytes)
            if meta is None:
                found = (None, ErrorCode.UNKNOWN_TOPIC_ID)
            elif not is_authorized(self._ctx, AclOperation.READ, ResourceType.TOPIC, meta.name):
                found = (meta.name, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            else:
                found = (meta.name, ErrorCode.NONE)
            self._names[topic_id] = found
        return found


def _ack_batches(raw_batches, renew_allowed: bool) -> list[AcknowledgementBatch] | None:
    """The request's batches of one partition, None when they are out of order, overlap or use a
    type the request may not (Kafka's request validation: INVALID_REQUEST)."""
    out = []
    previous_last = -1
    for b in raw_batches:
        types = tuple(b.acknowledge_types or ())
        if not types or b.first_offset > b.last_offset or b.first_offset <= previous_last:
            return None
        if any(t < 0 or t > AcknowledgeType.RENEW or (t == AcknowledgeType.RENEW and not renew_allowed)
               for t in types):
            return None
        previous_last = b.last_offset
        out.append(AcknowledgementBatch(b.first_offset, b.last_offset, types))
    return out


async def _acknowledge_all(ctx, manager, group_id: str, member_id: str, topics: _Topics,
                           acks: dict[tuple[uuid.UUID, int], list], renew_allowed: bool) -> dict:
    """Apply the acknowledgements of every partition; ``{(topic id, partition): error code}``."""
    codes: dict[tuple[uuid.UUID, int], int] = {}
    pending = []
    for (topic_id, partition), raw in acks.items():
        name, code = topics.resolve(topic_id)
        if code != ErrorCode.NONE:
            codes[(topic_id, partition)] = code
            continue
        batches = _ack_batches(raw, renew_allowed)
        if batches is None:
            codes[(topic_id, partition)] = ErrorCode.INVALID_REQUEST
            continue
        pending.append(((topic_id, partition), manager.acknowledge(group_id, member_id, name, partition, batches)))
    if pending:
        results = await asyncio.gather(*(coro for _, coro in pending))
        for (key, _), code in zip(pending, results):
            codes[key] = code
    return codes


def _lock_duration_ms(manager, group_id: str) -> int:
    try:
        return manager.settings(group_id).record_lock_duration_ms
    except Exception:
        return 0


def _collect(request_topics) -> tuple[dict, dict]:
    """Request partitions in order (duplicated topics merged): ``{(id, p): None}`` and the
    acknowledgement batches of those that have some."""
    partitions: dict[tuple[uuid.UUID, int], None] = {}
    acks: dict[tuple[uuid.UUID, int], list] = {}
    for t in request_topics or ():
        topic_id = _uuid(t.topic_id)
        for p in t.partitions or ():
            key = (topic_id, p.partition_index)
            partitions[key] = None
            batches = list(p.acknowledgement_batches or ())
            if batches:
                acks.setdefault(key, []).extend(batches)
    return partitions, acks


def _request_error(code: ErrorCode, message: str | None = None, lock_ms: int = 0) -> dict:
    """A ShareFetch or ShareAcknowledge answer refused whole (the two share this shape)."""
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
            "acquisition_lock_timeout_ms": lock_ms, "responses": [], "node_endpoints": []}


def _admit(ctx, request, manager) -> tuple[dict | None, str, str, int, bool]:
    """What ShareFetch and ShareAcknowledge check first (READ on the group, a member id): (the
    refusal or None, group id, member id, acquisition lock duration, whether it renews locks)."""
    group_id = request.group_id or ""
    member_id = request.member_id or ""
    if not is_authorized(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return _request_error(ErrorCode.GROUP_AUTHORIZATION_FAILED), group_id, member_id, 0, False
    lock_ms = _lock_duration_ms(manager, group_id)
    if not member_id:
        return _request_error(ErrorCode.INVALID_REQUEST, "The member id is empty", lock_ms), group_id, member_id, \
            lock_ms, False
    renew = ctx.api_version >= 2 and bool(getattr(request, "is_renew_ack", False))
    return None, group_id, member_id, lock_ms, renew


async def handle_share_fetch(ctx, request):
    manager = ctx.broker.share_partitions
    version = ctx.api_version
    refusal, group_id, member_id, lock_ms, renew = _admit(ctx, request, manager)
    if refusal is not None:
        return refusal
    if renew and (request.max_wait_ms or request.min_bytes or request.max_bytes or request.max_records):
        return _request_error(ErrorCode.INVALID_REQUEST, "A renewing ShareFetch must not fetch", lock_ms)
    epoch = request.share_session_epoch
    partitions, acks = _collect(request.topics)
    forgotten = [(_uuid(f.topic_id), p) for f in request.forgotten_topics_data or () for p in f.partitions or ()]
    sessions: ShareSessionCache = manager.sessions
    added: list = []
    try:
        if epoch == FINAL_EPOCH:
            session = sessions.check(group_id, member_id, epoch)
        elif epoch == INITIAL_EPOCH:
            if acks:
                raise ShareSessionError(ErrorCode.INVALID_REQUEST,
                                        "Acknowledgements in a ShareFetch that opens a share session")
            session = sessions.open(group_id, member_id, ctx.connection_id, partitions)
            added = list(session.partitions)
        else:
            session = sessions.check(group_id, member_id, epoch)
            added = sessions.update(session, partitions, forgotten)
            sessions.advance(session)
    except ShareSessionError as exc:
        logger.info("share_fetch_session_refused", group=group_id, member=member_id, epoch=epoch,
                    error=exc.error_code.name, reason=exc.message)
        return _request_error(exc.error_code, exc.message, lock_ms)

    topics = _Topics(ctx)
    ack_codes = await _acknowledge_all(ctx, manager, group_id, member_id, topics, acks, renew)

    rows: dict[tuple[uuid.UUID, int], dict] = {}

    def row(key) -> dict:
        found = rows.get(key)
        if found is None:
            found = {"partition_index": key[1], "error_code": ErrorCode.NONE, "error_message": None,
                     "acknowledge_error_code": ErrorCode.NONE, "acknowledge_error_message": None,
                     "current_leader": _NO_LEADER, "records": b"", "acquired_records": ()}
            rows[key] = found
        return found

    for key, code in ack_codes.items():
        row(key)["acknowledge_error_code"] = code

    if epoch == FINAL_EPOCH:
        sessions.remove(group_id, member_id)
        task = manager.release_member(group_id, member_id)
        if task is not None:
            await task
    elif not renew:
        targets = []
        names = {}
        for key in session.partitions:
            name, code = topics.resolve(key[0])
            if code != ErrorCode.NONE:
                row(key)["error_code"] = code
                continue
            names[(name, key[1])] = key
            targets.append((name, key[1]))
        if len(targets) > 1 and session.epoch > 0:
            shift = session.epoch % len(targets)
            targets = targets[shift:] + targets[:shift]
        mode = AcquireMode(request.share_acquire_mode) if version >= 2 and \
            request.share_acquire_mode in (0, 1) else AcquireMode.BATCH_OPTIMIZED
        if targets:
            results = await manager.fetch(group_id, member_id, targets, max_wait_ms=request.max_wait_ms,
                                          min_bytes=request.min_bytes, max_bytes=request.max_bytes,
                                          max_records=request.max_records, batch_size=request.batch_size,
                                          mode=mode)
            for tp, result in results.items():
                key = names[tp]
                if result.error_code == ErrorCode.NONE and not result.acquired and key not in added \
                        and key not in rows and epoch != INITIAL_EPOCH:
                    continue
                r = row(key)
                r["error_code"] = result.error_code
                if result.acquired:
                    r["records"] = result.records
                    r["acquired_records"] = [(a.first_offset, a.last_offset, a.delivery_count)
                                             for a in result.acquired]
        for key in added:
            row(key)
    by_topic: dict[uuid.UUID, list] = {}
    for (topic_id, _), r in rows.items():
        by_topic.setdefault(topic_id, []).append(r)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "acquisition_lock_timeout_ms": lock_ms,
            "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
            "node_endpoints": []}


async def handle_share_acknowledge(ctx, request):
    manager = ctx.broker.share_partitions
    refusal, group_id, member_id, lock_ms, renew = _admit(ctx, request, manager)
    if refusal is not None:
        return refusal
    epoch = request.share_session_epoch
    sessions: ShareSessionCache = manager.sessions
    try:
        if epoch == INITIAL_EPOCH:
            raise ShareSessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                                    "A ShareAcknowledge cannot open a share session")
        session = sessions.check(group_id, member_id, epoch)
        if epoch != FINAL_EPOCH:
            sessions.advance(session)
    except ShareSessionError as exc:
        logger.info("share_acknowledge_session_refused", group=group_id, member=member_id, epoch=epoch,
                    error=exc.error_code.name, reason=exc.message)
        return _request_error(exc.error_code, exc.message, lock_ms)
    _, acks = _collect(request.topics)
    codes = await _acknowledge_all(ctx, manager, group_id, member_id, _Topics(ctx), acks, renew)
    if epoch == FINAL_EPOCH:
        sessions.remove(group_id, member_id)
        task = manager.release_member(group_id, member_id)
        if task is not None:
            await task
    by_topic: dict[uuid.UUID, list] = {}
    for (topic_id, partition), code in codes.items():
        by_topic.setdefault(topic_id, []).append({"partition_index": partition, "error_code": code,
                                                  "error_message": None, "current_leader": _NO_LEADER})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "acquisition_lock_timeout_ms": lock_ms,
            "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
            "node_endpoints": []}
