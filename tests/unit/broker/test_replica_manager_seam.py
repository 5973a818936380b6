"""The broker-storage seam: DeleteRecords, OffsetForLeaderEpoch, DescribeProducers and Produce's
request-level checks answered by the ReplicaManager over real logs.

Each handler is driven with a request built by the wire codec and its answer is read back through
the codec, so what is checked is what a client reads. The ground truth is a model the test keeps:
the log start offsets a sequence of appends and DeleteRecords must give (brute force over random
sequences), the end offset of epoch 0, the producers the test itself appended with, and the Kafka
request rules applied to the parameters a record buffer was built from.
"""

from __future__ import annotations

import asyncio
import tempfile
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.unit_helpers import LogsByPartition, RecordingPurgatory

from sundial.broker.handlers.admin import handle_delete_records
from sundial.broker.handlers.producer import handle_offset_for_leader_epoch
from sundial.broker.handlers.transactions import handle_describe_producers
from sundial.broker.replica_manager import ReplicaManager
from sundial.config import BrokerConfig
from sundial.config.topic import TopicConfig
from sundial.protocol.api_keys import ApiKey
from sundial.protocol.errors import ErrorCode
from sundial.protocol.schema_codec import SCHEMA_CLASSES, build_message, decode_response_body, \
    encode_response_body
from sundial.records import codecs
from sundial.records.builder import SimpleRecord, build_records
from sundial.storage.log import PartitionLog

E = ErrorCode
NOW_MS = 1_700_000_000_000


class _Authorizer:
    """Allows everything but ``denied`` ((operation name, topic) pairs)."""

    def __init__(self, denied):
        self.denied = denied

    def authorize(self, principal, host, operation, resource_type, name, log_denied=True):
        return (operation.name, name) not in self.denied


def replica_manager(logs) -> ReplicaManager:
    return ReplicaManager(BrokerConfig({}), LogsByPartition(logs), purgatory=RecordingPurgatory(), metrics=None, now_ms=lambda: NOW_MS)


def ctx_for(rm, api_version, denied=()):
    broker = SimpleNamespace(replica_manager=rm, authorizer=_Authorizer(set(denied)) if denied else None)
    return SimpleNamespace(broker=broker, api_version=api_version, principal="User:alice", client_host="127.0.0.1",
                           client_id="test")


def call(handler, api_key, version, value, rm, denied=()):
    request = build_message(SCHEMA_CLASSES[api_key][0], version, value)
    answer = asyncio.run(handler(ctx_for(rm, version, denied), request))
    return decode_response_body(api_key, version, encode_response_body(api_key, version, answer))


def batch(n, *, producer_id=-1, epoch=-1, seq=-1, transactional=False, ts=NOW_MS):
    return build_records(2, [SimpleRecord(ts + i, b"k", b"v%d" % i) for i in range(n)], producer_id=producer_id,
                         producer_epoch=epoch, base_sequence=seq, is_transactional=transactional).buffer


def new_log(root, topic, partition):
    return PartitionLog.create(f"{root}/{topic}-{partition}", TopicConfig(), topic=topic, partition=partition)


@pytest.fixture
def logs(tmp_path):
    out = {(t, p): new_log(tmp_path, t, p) for t, p in [("a", 0), ("a", 1), ("__consumer_offsets", 0)]}
    yield out
    for log in out.values():
        log.close()


# -- DeleteRecords ---------------------------------------------------------------------------------


operations = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 1), st.integers(1, 5)),
    st.tuples(st.just("delete"), st.integers(0, 2), st.integers(-3, 25)),
), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations, version=st.integers(0, 2))
def test_delete_records_moves_the_log_start_offset_as_a_model_says(ops, version):
    """Partitions 0 and 1 exist, partition 2 does not. Model: -1 means the high watermark; an
    offset outside [0, high watermark] is OFFSET_OUT_OF_RANGE; the log start offset never goes
    back; the low watermark answered is the log start offset after the call."""
    with tempfile.TemporaryDirectory() as root:
        logs = {("a", p): new_log(root, "a", p) for p in (0, 1)}
        rm = replica_manager(logs)
        leo = {0: 0, 1: 0}
        lso = {0: 0, 1: 0}
        try:
            for op, partition, arg in ops:
                if op == "append":
                    logs[("a", partition)].append(batch(arg), now_ms=NOW_MS)
                    leo[partition] += arg
                    continue
                resp = call(handle_delete_records, ApiKey.DELETE_RECORDS, version,
                            {"topics": [{"name": "a", "partitions": [{"partition_index": partition, "offset": arg}]}],
                             "timeout_ms": 1000}, rm)
                got = resp.topics[0].partitions[0]
                if partition not in leo:
                    expected = (E.UNKNOWN_TOPIC_OR_PARTITION, -1)
                else:
                    target = leo[partition] if arg == -1 else arg
                    if 0 <= target <= leo[partition]:
                        lso[partition] = max(lso[partition], target)
                        expected = (E.NONE, lso[partition])
                    else:
                        expected = (E.OFFSET_OUT_OF_RANGE, -1)
                assert (got.partition_index, got.error_code, got.low_watermark) == (partition, *expected)
                for p in (0, 1):
                    assert logs[("a", p)].log_start_offset == lso[p]
        finally:
            for log in logs.values():
                log.close()


def test_delete_records_refuses_internal_topics_and_unauthorized_ones(logs):
    for log in logs.values():
        log.append(batch(4), now_ms=NOW_MS)
    rm = replica_manager(logs)
    value = {"topics": [{"name": "a", "partitions": [{"partition_index": 0, "offset": 2},
                                                     {"partition_index": 1, "offset": -1}]},
                        {"name": "__consumer_offsets", "partitions": [{"partition_index": 0, "offset": 1}]},
                        {"name": "gone", "partitions": [{"partition_index": 0, "offset": 1}]}],
             "timeout_ms": 1000}
    resp = call(handle_delete_records, ApiKey.DELETE_RECORDS, 2, value, rm, denied={("DELETE", "gone")})
    got = {(t.name, p.partition_index): (p.error_code, p.low_watermark) for t in resp.topics for p in t.partitions}
    assert got == {("a", 0): (E.NONE, 2), ("a", 1): (E.NONE, 4),
                   ("__consumer_offsets", 0): (E.INVALID_TOPIC_EXCEPTION, -1),
                   ("gone", 0): (E.TOPIC_AUTHORIZATION_FAILED, -1)}
    assert logs[("__consumer_offsets", 0)].log_start_offset == 0
    resp = call(handle_delete_records, ApiKey.DELETE_RECORDS, 2, value, rm, denied={("DELETE", "a")})
    assert [p.error_code for p in resp.topics[0].partitions] == [E.TOPIC_AUTHORIZATION_FAILED] * 2
    assert logs[("a", 0)].log_start_offset == 2


# -- OffsetForLeaderEpoch ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(0, 5))
def test_offset_for_leader_epoch_every_version(logs, version):
    """Epoch 0 (or earlier) ends at the log end offset; a later epoch is UNDEFINED; a newer
    current leader epoch (v2+) is UNKNOWN_LEADER_EPOCH; an unknown partition and a topic the
    principal may not DESCRIBE get their codes."""
    logs[("a", 0)].append(batch(7), now_ms=NOW_MS)
    rm = replica_manager(logs)
    asked = [(0, 0, -1), (0, -1, -1), (0, 3, -1), (1, 0, -1), (5, 0, -1)]
    if version >= 2:
        asked += [(0, 0, 0), (0, 0, 1), (5, 0, 1)]
    value = {"replica_id": -1, "topics": [
        {"topic": "a", "partitions": [{"partition": p, "leader_epoch": e, "current_leader_epoch": c}
                                      for p, e, c in asked]},
        {"topic": "secret", "partitions": [{"partition": 0, "leader_epoch": 0, "current_leader_epoch": -1}]}]}
    resp = call(handle_offset_for_leader_epoch, ApiKey.OFFSET_FOR_LEADER_EPOCH, version, value, rm,
                denied={("DESCRIBE", "secret")})
    leo = {0: 7, 1: 0}

    def model(partition, epoch, current):
        if partition not in leo:
            return E.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
        if current > 0:
            return E.UNKNOWN_LEADER_EPOCH, -1, -1
        return (E.NONE, 0, leo[partition]) if epoch <= 0 else (E.NONE, -1, -1)

    got = [(p.error_code, p.leader_epoch, p.end_offset) if version >= 1 else (p.error_code, p.end_offset)
           for p in resp.topics[0].partitions]
    expected = [model(*a) for a in asked]
    assert got == (expected if version >= 1 else [(code, end) for code, _, end in expected])
    assert resp.topics[1].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED


# -- DescribeProducers ------------------------------------------------------------------------------


def test_describe_producers_lists_what_was_appended(logs):
    a0 = logs[("a", 0)]
    a0.append(batch(3, producer_id=7, epoch=1, seq=0, ts=NOW_MS), now_ms=NOW_MS)
    a0.append(batch(2, producer_id=7, epoch=1, seq=3, ts=NOW_MS + 10), now_ms=NOW_MS)
    a0.append(batch(1, producer_id=4, epoch=0, seq=0, ts=NOW_MS + 20), now_ms=NOW_MS)
    a0.append(batch(2, producer_id=9, epoch=5, seq=0, transactional=True, ts=NOW_MS + 30), now_ms=NOW_MS)
    rm = replica_manager(logs)
    value = {"topics": [{"name": "a", "partition_indexes": [0, 1, 9]},
                        {"name": "secret", "partition_indexes": [0]}]}
    resp = call(handle_describe_producers, ApiKey.DESCRIBE_PRODUCERS, 0, value, rm, denied={("READ", "secret")})
    p0, p1, p9 = resp.topics[0].partitions
    assert (p0.error_code, p1.error_code, p9.error_code) == (E.NONE, E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION)
    got = [(p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp, p.coordinator_epoch,
            p.current_txn_start_offset) for p in p0.active_producers]
    # by producer id; last sequence = base + count - 1; last timestamp = the batch's max timestamp;
    # the transaction of producer 9 opened at offset 6 (after 3 + 2 + 1 records)
    assert got == [(4, 0, 0, NOW_MS + 20, -1, -1), (7, 1, 4, NOW_MS + 11, -1, -1), (9, 5, 1, NOW_MS + 31, -1, 6)]
    assert list(p1.active_producers) == [] and list(p9.active_producers) == []
    assert resp.topics[1].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED


def test_describe_producers_reports_a_storage_failure_with_its_reason():
    class Broken:
        def describe_producers(self):
            raise OSError(5, "Input/output error")

    rm = replica_manager({("a", 0): Broken()})
    resp = call(handle_describe_producers, ApiKey.DESCRIBE_PRODUCERS, 0,
                {"topics": [{"name": "a", "partition_indexes": [0]}]}, rm)
    p = resp.topics[0].partitions[0]
    assert p.error_code == E.KAFKA_STORAGE_ERROR and "Input/output error" in p.error_message
    assert list(p.active_producers) == []


# -- Produce's request-level checks ---------------------------------------------------------------


ONE_BATCH = "one batch"
MSG_NOT_ONE = "Produce v3+ needs one record batch of magic 2"
MSG_TWO = "Produce v3+ needs exactly one record batch per partition"
MSG_EMPTY = "the record batch holds no records"
MSG_ZSTD = "zstd needs Produce v7 or later"

buffers = st.fixed_dictionaries({
    "magic": st.sampled_from([0, 1, 2]),
    "codec": st.sampled_from([codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]),
    "transactional": st.booleans(),
    "records": st.integers(1, 3),
    "value_bytes": st.sampled_from([0, 5, 80]),
    "shape": st.sampled_from([ONE_BATCH, "two batches", "trailing bytes", "truncated", "zero count", "none"]),
    "cut": st.integers(1, 80),
})


def build_buffer(spec):
    """The buffer ``spec`` describes, and the model's facts about it."""
    if spec["shape"] == "none":
        return None
    magic = spec["magic"]
    codec = spec["codec"] if magic == 2 or spec["codec"] != codecs.ZSTD else codecs.NONE
    transactional = spec["transactional"] and magic == 2
    kwargs = dict(producer_id=11, producer_epoch=0, base_sequence=0, is_transactional=True) if transactional else {}
    value = b"x" * spec["value_bytes"]
    buf = build_records(magic, [SimpleRecord(NOW_MS, b"k", value)] * spec["records"], compression=codec,
                        **kwargs).buffer
    if spec["shape"] == "two batches":
        buf = buf + buf
    elif spec["shape"] == "trailing bytes":
        buf = buf + b"\0" * 3
    elif spec["shape"] == "truncated":
        buf = buf[:max(0, len(buf) - spec["cut"])]
    elif spec["shape"] == "zero count" and magic == 2:
        buf = buf[:57] + b"\0\0\0\0" + buf[61:]
    return buf


def produce_model(spec, buf, api_version):
    """Kafka ``ProduceRequest.validateRecords``, from what the buffer was built from."""
    if api_version < 3:
        return E.NONE, None
    if buf is None or len(buf) < 61:
        return E.INVALID_RECORD, MSG_NOT_ONE
    if spec["magic"] != 2:
        return E.INVALID_RECORD, f"Produce v{api_version} carries magic {spec['magic']}; magic 2 is required"
    if spec["shape"] in ("two batches", "trailing bytes", "truncated"):
        return E.INVALID_RECORD, MSG_TWO
    if spec["shape"] == "zero count":
        return E.INVALID_RECORD, MSG_EMPTY
    if spec["codec"] == codecs.ZSTD and api_version < 7:
        return E.UNSUPPORTED_COMPRESSION_TYPE, MSG_ZSTD
    return E.NONE, None


@settings(max_examples=300, deadline=None)
@given(spec=buffers, api_version=st.integers(0, 12))
def test_produce_records_error_follows_kafkas_request_rules(spec, api_version):
    buf = build_buffer(spec)
    assert ReplicaManager.produce_records_error(buf, api_version) == produce_model(spec, buf, api_version)
    if buf is not None:
        assert ReplicaManager.produce_records_error(memoryview(buf), api_version) == \
            produce_model(spec, buf, api_version)


@settings(max_examples=200, deadline=None)
@given(specs=st.lists(buffers, min_size=0, max_size=4), api_version=st.integers(0, 12))
def test_carries_transactional_batch_when_any_partition_holds_one(specs, api_version):
    """A partition counts when its buffer starts with a magic-2 batch whose transactional flag is
    readable (23 bytes or more of it arrived), whatever else is wrong with it."""
    bufs = [build_buffer(s) for s in specs]
    expected = api_version >= 3 and any(
        b is not None and s["magic"] == 2 and s["transactional"] and len(b) >= 23 for s, b in zip(specs, bufs))
    assert ReplicaManager.carries_transactional_batch(bufs, api_version) is expected
    assert ReplicaManager.carries_transactional_batch((memoryview(b) if b is not None else None for b in bufs),
                                                      api_version) is expected


def test_the_peek_reads_the_header_as_the_record_format_builds_it():
    from sundial.storage.batch_peek import peek_first_batch
    buf = build_records(2, [SimpleRecord(NOW_MS, b"k", b"v")] * 3, compression=codecs.LZ4, producer_id=3,
                        producer_epoch=0, base_sequence=0, is_transactional=True).buffer
    peek = peek_first_batch(buf)
    assert (peek.magic, peek.entry_bytes, peek.compression, peek.transactional, peek.record_count) == \
        (2, len(buf), codecs.LZ4, True, 3)
    assert peek_first_batch(buf[:60]) is None and peek_first_batch(None) is None


def test_a_transactional_producer_entry_is_read_through_the_documented_api(logs):
    """The transaction-version-2 marker check reads one producer through ``describe_producer``."""
    a0 = logs[("a", 0)]
    a0.append(batch(2, producer_id=9, epoch=5, seq=0, transactional=True), now_ms=NOW_MS)
    d = a0.describe_producer(9)
    assert (d.producer_id, d.producer_epoch, d.current_txn_start_offset) == (9, 5, 0)
    assert a0.describe_producer(10) is None
    assert [d] == [p for p in a0.describe_producers() if p.producer_id == 9]
    rm = replica_manager(logs)
    codes = asyncio.run(rm.write_txn_markers(producer_id=9, producer_epoch=5, coordinator_epoch=0, commit=True,
                                             partitions=[("a", 0)], transaction_version=2))
    assert codes == {("a", 0): E.INVALID_PRODUCER_EPOCH}   # KIP-1228: a v2 marker must bump the epoch
    codes = asyncio.run(rm.write_txn_markers(producer_id=9, producer_epoch=6, coordinator_epoch=0, commit=True,
                                             partitions=[("a", 0)], transaction_version=2,
                                             timestamp_ms=NOW_MS))
    assert codes == {("a", 0): E.NONE}
