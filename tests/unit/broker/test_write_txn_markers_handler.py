"""WriteTxnMarkers (27) handler over real logs: what Kafka's ``handleWriteTxnMarkersRequest`` does.

* the wire: v1 and v2 request and response bytes written by hand from Kafka's JSON
  (WriteTxnMarkersRequest/Response.json, flexible from v1, ``TransactionVersion`` int8 in v2)
  decode and encode as Sundial reads and writes them;
* authorization: ALTER or CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED for
  every partition and nothing written;
* an ABORT closes a hanging transaction: the LSO reaches the high watermark and the aborted
  transaction is in the ``.txnindex``; unknown partitions, an older producer epoch and an older
  coordinator epoch get Kafka's codes; markers of one producer id share one answer entry;
* v2: a TV2 marker needs an epoch above the partition's (a retry at that epoch of a closed
  transaction is accepted); TV0 markers in v2 keep the old rule;
* a marker in ``__consumer_offsets`` completes the producer's pending group offsets.
"""

from __future__ import annotations

import struct
import time
from types import SimpleNamespace

import pytest

from sundial.broker.authorizer import AclOperation, ResourceType
from sundial.broker.handlers.write_txn_markers import handle_write_txn_markers
from sundial.broker.txn.markers import ReplicaMarkerWriter
from sundial.config.topic import TopicConfig
from sundial.protocol import FrameDecoder, decode_request, encode_response
from sundial.protocol.api_keys import ApiKey
from sundial.protocol.errors import ErrorCode as E
from sundial.protocol.header import RequestHeader, parse_request_header
from sundial.protocol.schema_codec import SCHEMA_CLASSES, build_message
from sundial.storage.log import PartitionLog
from support.wire_bytes import cstr, uvarint

from test_write_txn_markers import replica_manager, txn_batch

KEY = ApiKey.WRITE_TXN_MARKERS


# -- the wire, from Kafka's JSON ----------------------------------------------------------------
def _request_bytes(version: int) -> bytes:
    """Two markers: (pid 7, epoch 3, ABORT, t:[0,2], coordinator epoch 5, TV 2 in v2) and
    (pid 8, epoch 0, COMMIT, u:[1], coordinator epoch 0, TV 0)."""
    def marker(pid, epoch, commit, topics, coord, tv):
        body = struct.pack(">qhb", pid, epoch, commit) + uvarint(len(topics) + 1)
        for name, parts in topics:
            body += cstr(name) + uvarint(len(parts) + 1) + b"".join(struct.pack(">i", p) for p in parts) + b"\0"
        body += struct.pack(">i", coord)
        if version >= 2:
            body += struct.pack(">b", tv)
        return body + b"\0"
    body = uvarint(3) + marker(7, 3, 0, [("t", [0, 2])], 5, 2) + marker(8, 0, 1, [("u", [1])], 0, 0) + b"\0"
    header = struct.pack(">hhi", KEY, version, 99) + struct.pack(">h", 3) + b"cli" + b"\0"
    frame = header + body
    return struct.pack(">i", len(frame)) + frame


@pytest.mark.parametrize("version", [1, 2])
def test_request_bytes_from_kafkas_json_decode(version):
    frames = FrameDecoder(1 << 20).feed(_request_bytes(version))
    header = parse_request_header(frames[0])
    req = decode_request(header, frames[0])
    got = [(m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch,
            m.transaction_version if version >= 2 else 0,
            [(t.name, list(t.partition_indexes)) for t in m.topics]) for m in req.markers]
    assert got == [(7, 3, False, 5, 2 if version >= 2 else 0, [("t", [0, 2])]),
                   (8, 0, True, 0, 0, [("u", [1])])]


@pytest.mark.parametrize("version", [1, 2])
def test_response_bytes_match_kafkas_json(version):
    value = {"markers": [{"producer_id": 7, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0}, {"partition_index": 2, "error_code": 47}]}]}]}
    body = (uvarint(2) + struct.pack(">q", 7) + uvarint(2) + cstr("t") + uvarint(3)
            + struct.pack(">ih", 0, 0) + b"\0" + struct.pack(">ih", 2, 47) + b"\0" + b"\0" + b"\0" + b"\0")
    frame = struct.pack(">i", -3) + b"\0" + body          # response header v1: correlation id, tags
    expected = struct.pack(">i", len(frame)) + frame
    out = encode_response(RequestHeader(KEY, version, -3, "c", 0), value)
    assert b"".join(bytes(b) for b in out) == expected


# -- the handler over real logs --------------------------------------------------------------------
class _Authorizer:
    def __init__(self, allowed):
        self.allowed = set(allowed)
        self.asked = []

    def authorize(self, principal, host, operation, resource_type, name, *, log_denied=True):
        self.asked.append((operation, resource_type, name, log_denied))
        return (operation, resource_type) in self.allowed


class _Groups:
    def __init__(self):
        self.completed = []

    def complete_txn_offsets(self, producer_id, commit, partition):
        self.completed.append((producer_id, commit, partition))


@pytest.fixture
def env(tmp_path):
    logs = {(t, p): PartitionLog.create(str(tmp_path / f"{t}-{p}"), TopicConfig(), topic=t, partition=p)
            for t, p in (("a", 0), ("a", 1), ("__consumer_offsets", 3))}
    rm = replica_manager(logs)
    groups = _Groups()
    broker = SimpleNamespace(authorizer=None, replica_manager=rm, groups=groups,
                             transactions=SimpleNamespace(markers=ReplicaMarkerWriter(rm, groups)))
    yield SimpleNamespace(logs=logs, rm=rm, groups=groups, broker=broker)
    for log in logs.values():
        log.close()


def _call(env, version, markers):
    ctx = SimpleNamespace(broker=env.broker, api_key=KEY, api_version=version, principal="User:op",
                          client_host="127.0.0.1")
    req = build_message(SCHEMA_CLASSES[KEY][0], version, {"markers": markers})
    return handle_write_txn_markers(ctx, req)


def _marker(pid, epoch, commit, parts, coordinator_epoch=0, tv=0):
    topics: dict[str, list[int]] = {}
    for t, p in parts:
        topics.setdefault(t, []).append(p)
    return {"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
            "coordinator_epoch": coordinator_epoch, "transaction_version": tv}


def _codes(resp):
    return {m["producer_id"]: {(t["name"], p["partition_index"]): p["error_code"]
                               for t in m["topics"] for p in t["partitions"]} for m in resp["markers"]}


def _open(env, tp, pid, epoch=0):
    log = env.logs[tp]
    log.append(txn_batch(pid, epoch=epoch), now_ms=int(time.time() * 1000))
    return log


@pytest.mark.asyncio
@pytest.mark.parametrize("allowed, ok", [
    ((), False),
    (((AclOperation.ALTER, ResourceType.CLUSTER),), True),
    (((AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER),), True),
    (((AclOperation.WRITE, ResourceType.CLUSTER),), False),
])
async def test_cluster_authorization(env, allowed, ok):
    env.broker.authorizer = auth = _Authorizer(allowed)
    log = _open(env, ("a", 0), 9)
    resp = await _call(env, 1, [_marker(9, 0, False, [("a", 0), ("a", 1)]), _marker(9, 0, False, [("zz", 0)])])
    if ok:
        assert _codes(resp) == {9: {("a", 0): E.NONE, ("a", 1): E.NONE, ("zz", 0): E.UNKNOWN_TOPIC_OR_PARTITION}}
        assert log.last_stable_offset == log.high_watermark == 3
    else:
        assert _codes(resp) == {9: {("a", 0): E.CLUSTER_AUTHORIZATION_FAILED, ("a", 1): E.CLUSTER_AUTHORIZATION_FAILED,
                                    ("zz", 0): E.CLUSTER_AUTHORIZATION_FAILED}}
        assert log.log_end_offset == 2 and log.last_stable_offset == 0
    # ALTER is asked first without logging a denial; CLUSTER_ACTION only when ALTER is refused
    assert auth.asked[0] == (AclOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster", False)


@pytest.mark.asyncio
async def test_abort_of_a_hanging_transaction_moves_the_lso_and_indexes_it(env):
    log = _open(env, ("a", 0), 9, epoch=2)
    other = _open(env, ("a", 1), 10)
    assert log.last_stable_offset == 0
    resp = await _call(env, 1, [_marker(9, 2, False, [("a", 0)]), _marker(10, 0, True, [("a", 1), ("b", 4)])])
    assert _codes(resp) == {9: {("a", 0): E.NONE}, 10: {("a", 1): E.NONE, ("b", 4): E.UNKNOWN_TOPIC_OR_PARTITION}}
    assert log.last_stable_offset == log.high_watermark == 3
    assert log.collect_aborted_transactions(0, 3) == [(9, 0)]
    assert other.last_stable_offset == 3 and other.collect_aborted_transactions(0, 3) == []
    assert log.recovery_point > 2          # answered once the marker is durable


@pytest.mark.asyncio
async def test_fencing_codes(env):
    log = _open(env, ("a", 0), 9, epoch=2)
    resp = await _call(env, 1, [_marker(9, 1, False, [("a", 0)])])
    assert _codes(resp) == {9: {("a", 0): E.INVALID_PRODUCER_EPOCH}}
    resp = await _call(env, 1, [_marker(9, 2, False, [("a", 0)], coordinator_epoch=4)])
    assert _codes(resp) == {9: {("a", 0): E.NONE}}
    resp = await _call(env, 1, [_marker(9, 2, False, [("a", 0)], coordinator_epoch=3)])
    assert _codes(resp) == {9: {("a", 0): E.TRANSACTION_COORDINATOR_FENCED}}
    assert log.log_end_offset == 3        # only the accepted marker was written


@pytest.mark.asyncio
async def test_transaction_version_2_markers_need_a_bumped_epoch(env):
    log = _open(env, ("a", 0), 9, epoch=2)
    resp = await _call(env, 2, [_marker(9, 2, False, [("a", 0)], tv=2)])
    assert _codes(resp) == {9: {("a", 0): E.INVALID_PRODUCER_EPOCH}}
    assert log.last_stable_offset == 0
    resp = await _call(env, 2, [_marker(9, 3, False, [("a", 0)], tv=2)])
    assert _codes(resp) == {9: {("a", 0): E.NONE}}
    assert log.last_stable_offset == log.high_watermark == 3
    # the same marker again (a retry; the transaction is closed at epoch 3): accepted
    resp = await _call(env, 2, [_marker(9, 3, False, [("a", 0)], tv=2)])
    assert _codes(resp) == {9: {("a", 0): E.NONE}}
    # a legacy (TV0) marker in v2 keeps the not-below rule
    _open(env, ("a", 1), 11, epoch=1)
    resp = await _call(env, 2, [_marker(11, 1, True, [("a", 1)], tv=0)])
    assert _codes(resp) == {11: {("a", 1): E.NONE}}


@pytest.mark.asyncio
async def test_marker_in_consumer_offsets_completes_group_offsets(env):
    resp = await _call(env, 1, [_marker(12, 0, True, [("__consumer_offsets", 3)])])
    assert _codes(resp) == {12: {("__consumer_offsets", 3): E.NONE}}
    assert env.groups.completed == [(12, True, 3)]


@pytest.mark.asyncio
async def test_empty_request_and_marker_without_partitions(env):
    assert await _call(env, 1, []) == {"markers": []}
    assert _codes(await _call(env, 1, [_marker(5, 0, False, [])])) == {5: {}}
