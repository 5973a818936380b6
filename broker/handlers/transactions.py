"""Transaction APIs: InitProducerId with a transactional id (22, called from
:mod:`broker.handlers.producer`), AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
TxnOffsetCommit (28), DescribeProducers (61), DescribeTransactions (65), ListTransactions (66).

Thin: each handler checks authorization and shapes Kafka's response for the version;
:class:`broker.txn.coordinator.TransactionCoordinator` (``broker.transactions``) holds the logic.

Version facts that live here (Kafka ``KafkaApis``):

* PRODUCER_FENCED (90, KIP-588) is sent only to clients that know it: InitProducerId v4+,
  AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2+; older versions get
  INVALID_PRODUCER_EPOCH (47) instead.
* AddPartitionsToTxn v0-v3 carries one transaction (``v3_and_below_*`` fields) and answers
  per partition: all partitions share the coordinator's error; a topic the principal may
  not WRITE gets TOPIC_AUTHORIZATION_FAILED and an unknown one UNKNOWN_TOPIC_OR_PARTITION,
  and then every other partition OPERATION_NOT_ATTEMPTED, nothing being added.
* AddOffsetsToTxn adds the ``__consumer_offsets`` partition of the group to the transaction.

Authorization (Kafka's): WRITE on the transactional id for InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn and TxnOffsetCommit (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 53);
WRITE on each added topic; READ on the group for AddOffsetsToTxn and TxnOffsetCommit (else
GROUP_AUTHORIZATION_FAILED, 30) and READ on each committed topic; DESCRIBE on the
transactional id for DescribeTransactions (and ListTransactions lists only those); READ on
the topic for DescribeProducers.
"""

from __future__ import annotations

import structlog

from sundial.protocol.api_keys import ApiKey
from sundial.protocol.errors import ErrorCode

from ..authorizer import AclOperation, ResourceType, is_authorized
from ..groups.offset_manager import CommitRequest

logger = structlog.get_logger(__name__)

KEY_TYPE_TRANSACTION = 1
#: First version of each API that may carry PRODUCER_FENCED (KIP-588).
_FENCED_FROM = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2, ApiKey.ADD_OFFSETS_TO_TXN: 2,
                ApiKey.END_TXN: 2}


def coordinator(ctx):
    return getattr(ctx.broker, "transactions", None)


def _fenced_for_version(ctx, error: ErrorCode) -> ErrorCode:
    if error == ErrorCode.PRODUCER_FENCED and ctx.api_version < _FENCED_FROM.get(ctx.api_key, 0):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def _txn_id_ok(ctx, operation, transactional_id) -> bool:
    return is_authorized(ctx, operation, ResourceType.TRANSACTIONAL_ID, transactional_id or "")


def _not_serving(coord) -> ErrorCode | None:
    if coord is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return coord.coordinator_error()


# -- FindCoordinator (key type TRANSACTION) ----------------------------------------------------
def find_transaction_coordinator(ctx, key: str) -> dict:
    """One FindCoordinator answer for a transactional id (called by the FindCoordinator handler).

    Kafka: DESCRIBE on the transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED; the
    first request creates ``__transaction_state`` (here at once, so the answer is this node)."""
    none = {"node_id": -1, "host": "", "port": -1}
    if not key:
        return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": "empty transactional id", **none}
    if not _txn_id_ok(ctx, AclOperation.DESCRIBE, key):
        return {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "error_message": None, **none}
    coord = coordinator(ctx)
    if (err := _not_serving(coord)) is not None:
        return {"error_code": err, "error_message": err.name, **none}
    try:
        coord.ensure_topic()
    except Exception as exc:  # storage failure creating the internal topic: the client retries
        logger.error("transaction_state_topic_create_failed", error=str(exc))
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "error_message": str(exc), **none}
    broker = ctx.broker
    ep = broker.endpoint_for(ctx.listener_name) if hasattr(broker, "endpoint_for") else broker.node
    return {"error_code": ErrorCode.NONE, "error_message": None, "node_id": ep.node_id, "host": ep.host,
            "port": ep.port}


# -- InitProducerId (transactional) ------------------------------------------------------------
async def init_transactional_producer_id(ctx, request) -> dict:
    txn_id = request.transactional_id
    reply = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": -1, "producer_epoch": -1}
    if not _txn_id_ok(ctx, AclOperation.WRITE, txn_id):
        reply["error_code"] = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return reply
    coord = coordinator(ctx)
    if (err := _not_serving(coord)) is not None:
        reply["error_code"] = err
        return reply
    pid = getattr(request, "producer_id", -1) if ctx.api_version >= 3 else -1
    epoch = getattr(request, "producer_epoch", -1) if ctx.api_version >= 3 else -1
    if (pid is None or pid < 0) != (epoch is None or epoch < 0):
        reply["error_code"] = ErrorCode.INVALID_REQUEST  # Kafka: both or neither
        return reply
    result = await coord.init_producer_id(txn_id, request.transaction_timeout_ms, pid if pid is not None else -1,
                                          epoch if epoch is not None else -1)
    reply["error_code"] = _fenced_for_version(ctx, result.error)
    if result.error == ErrorCode.NONE:
        reply["producer_id"], reply["producer_epoch"] = result.producer_id, result.producer_epoch
    return reply


# -- AddPartitionsToTxn -------------------------------------------------------------------------
def _partition_results(by_topic: dict[str, dict[int, ErrorCode]]) -> list[dict]:
    return [{"name": topic, "results_by_partition": [{"partition_index": p, "partition_error_code": code}
                                                    for p, code in parts.items()]}
            for topic, parts in by_topic.items()]


async def handle_add_partitions_to_txn(ctx, request):
    txn_id = request.v3_and_below_transactional_id
    wanted: dict[str, list[int]] = {}
    for t in request.v3_and_below_topics or []:
        wanted.setdefault(t.name, []).extend(t.partitions or [])

    def all_with(code):
        return {topic: {p: code for p in parts} for topic, parts in wanted.items()}

    if not _txn_id_ok(ctx, AclOperation.WRITE, txn_id):
        results = all_with(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _partition_results(results)}
    rm = ctx.broker.replica_manager
    bad: dict[str, dict[int, ErrorCode]] = {}
    for topic, parts in wanted.items():
        for p in parts:
            if not is_authorized(ctx, AclOperation.WRITE, ResourceType.TOPIC, topic):
                bad.setdefault(topic, {})[p] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif rm.log_for(topic, p) is None:
                bad.setdefault(topic, {})[p] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if bad:
        results = all_with(ErrorCode.OPERATION_NOT_ATTEMPTED)
        for topic, parts in bad.items():
            results[topic].update(parts)
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _partition_results(results)}
    coord = coordinator(ctx)
    error = _not_serving(coord)
    if error is None:
        partitions = [(topic, p) for topic, parts in wanted.items() for p in parts]
        error = await coord.add_partitions(txn_id, request.v3_and_below_producer_id,
                                           request.v3_and_below_producer_epoch, partitions)
    error = _fenced_for_version(ctx, error)
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _partition_results(all_with(error))}


# -- AddOffsetsToTxn ----------------------------------------------------------------------------
async def handle_add_offsets_to_txn(ctx, request):
    if not _txn_id_ok(ctx, AclOperation.WRITE, request.transactional_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not is_authorized(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id or ""):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    coord = coordinator(ctx)
    error = _not_serving(coord)
    if error is None:
        offsets_partition = ctx.broker.groups.offsets_partition_for(request.group_id)
        error = await coord.add_partitions(request.transactional_id, request.producer_id, request.producer_epoch,
                                           [offsets_partition])
    return {"throttle_time_ms": 0, "error_code": _fenced_for_version(ctx, error)}


# -- TxnOffsetCommit ---------------------------------------------------------------------------
async def handle_txn_offset_commit(ctx, request):
    """Offsets of a transaction: written now, visible once the transaction commits (the group
    offset manager keeps them pending; its COMMIT/ABORT marker decides them)."""
    version = ctx.api_version
    shape: list[tuple[str, list[tuple[int, ErrorCode | None]]]] = []
    entries: list[CommitRequest] = []
    txn_ok = _txn_id_ok(ctx, AclOperation.WRITE, request.transactional_id)
    group_ok = txn_ok and is_authorized(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id or "")
    for t in request.topics or []:
        topic_ok = group_ok and is_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, t.name)
        parts = []
        for p in t.partitions or []:
            if not txn_ok:
                parts.append((p.partition_index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            elif not group_ok:
                parts.append((p.partition_index, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            elif not topic_ok:
                parts.append((p.partition_index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            else:
                parts.append((p.partition_index, None))
                entries.append(CommitRequest(t.name, p.partition_index, p.committed_offset,
                                             leader_epoch=(p.committed_leader_epoch if version >= 2 else -1),
                                             metadata=p.committed_metadata))
        shape.append((t.name, parts))
    groups = getattr(ctx.broker, "groups", None)
    if not entries:
        errors = []
    elif groups is None:
        errors = [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(entries)
    else:
        errors = await groups.txn_commit_offsets(
            group_id=request.group_id, producer_id=request.producer_id, producer_epoch=request.producer_epoch,
            member_id=(request.member_id or "") if version >= 3 else "",
            group_instance_id=request.group_instance_id if version >= 3 else None,
            generation_id=request.generation_id if version >= 3 else -1, offsets=entries)
    granted = iter(errors)
    topics = [{"name": name, "partitions": [{"partition_index": p, "error_code": code if code is not None
                                             else next(granted)} for p, code in parts]}
              for name, parts in shape]
    return {"throttle_time_ms": 0, "topics": topics}


# -- EndTxn -------------------------------------------------------------------------------------
async def handle_end_txn(ctx, request):
    if not _txn_id_ok(ctx, AclOperation.WRITE, request.transactional_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    coord = coordinator(ctx)
    error = _not_serving(coord)
    if error is None:
        error = await coord.end_transaction(request.transactional_id, request.producer_id, request.producer_epoch,
                                            bool(request.committed))
    return {"throttle_time_ms": 0, "error_code": _fenced_for_version(ctx, error)}


# -- DescribeTransactions / ListTransactions ----------------------------------------------------
async def handle_describe_transactions(ctx, request):
    coord = coordinator(ctx)
    states = []
    for txn_id in request.transactional_ids or []:
        entry = {"error_code": ErrorCode.NONE, "transactional_id": txn_id, "transaction_state": "",
                 "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
                 "producer_epoch": -1, "topics": []}
        if not _txn_id_ok(ctx, AclOperation.DESCRIBE, txn_id):
            entry["error_code"] = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif (err := _not_serving(coord)) is not None:
            entry["error_code"] = err
        else:
            md = coord.describe(txn_id)
            if md is None:
                entry["error_code"] = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            else:
                topics: dict[str, list[int]] = {}
                for topic, p in sorted(md.partitions):
                    if is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic, log_denied=False):
                        topics.setdefault(topic, []).append(p)
                entry.update(transaction_state=md.state.kafka_name, transaction_timeout_ms=md.txn_timeout_ms,
                             transaction_start_time_ms=md.txn_start_timestamp_ms, producer_id=md.producer_id,
                             producer_epoch=md.producer_epoch,
                             topics=[{"topic": t, "partitions": ps} for t, ps in topics.items()])
        states.append(entry)
    return {"throttle_time_ms": 0, "transaction_states": states}


async def handle_list_transactions(ctx, request):
    coord = coordinator(ctx)
    if (err := _not_serving(coord)) is not None:
        return {"throttle_time_ms": 0, "error_code": err, "unknown_state_filters": [], "transaction_states": []}
    duration = getattr(request, "duration_filter", -1) if ctx.api_version >= 1 else -1
    unknown, found = coord.list(request.state_filters or [], request.producer_id_filters or [],
                                -1 if duration is None else duration)
    states = [{"transactional_id": md.transactional_id, "producer_id": md.producer_id,
               "transaction_state": md.state.kafka_name}
              for md in sorted(found, key=lambda m: m.transactional_id)
              if _txn_id_ok_quiet(ctx, md.transactional_id)]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "unknown_state_filters": unknown,
            "transaction_states": states}


def _txn_id_ok_quiet(ctx, txn_id) -> bool:
    return is_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id, log_denied=False)



# -- DescribeProducers --------------------------------------------------------------------------
async def handle_describe_producers(ctx, request):
    """Kafka ``ReplicaManager.activeProducerState``: every producer the partition's state knows
    (:meth:`broker.replica_manager.ReplicaManager.describe_producers`)."""
    rm = ctx.broker.replica_manager
    topics = []
    for t in request.topics or []:
        may_read = is_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, t.name)
        parts = []
        for p in t.partition_indexes or []:
            if not may_read:
                parts.append({"partition_index": p, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                              "error_message": None, "active_producers": []})
                continue
            answer = rm.describe_producers(t.name, p)
            parts.append({"partition_index": p, "error_code": answer.error_code,
                          "error_message": answer.error_message, "active_producers": [
                              {"producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
                               "last_sequence": d.last_sequence, "last_timestamp": d.last_timestamp_ms,
                               "coordinator_epoch": d.coordinator_epoch,
                               "current_txn_start_offset": d.current_txn_start_offset}
                              for d in answer.producers]})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}

