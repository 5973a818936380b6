"""DeleteRecords, OffsetForLeaderEpoch and DescribeProducers against the real daemon, on the wire.

The records come from kafka-python (an idempotent producer, one batch per send, flushed each
time); the test counts what it sent and compares the daemon's answers with those counts: the
end offset of epoch 0 is the number of records, the producer's last sequence is that number
minus one, DeleteRecords moves the log start offset to where it was asked (or the end for -1)
and refuses past the end and on internal topics.
"""

from __future__ import annotations

import uuid

from sundial.protocol.api_keys import ApiKey

from .clients import RawConnection, create_topic, producer


def test_offsets_producers_and_deletes_answer_what_was_produced(broker):
    topic = f"seam-{uuid.uuid4().hex[:10]}"
    create_topic(broker.bootstrap, topic, 2)
    p = producer(broker.bootstrap, acks="all", enable_idempotence=True)
    sent = 0
    try:
        for i in range(5):
            p.send(topic, value=b"v%d" % i, partition=0)
            p.flush(timeout=30)
            sent += 1
    finally:
        p.close(timeout=30)
    w = RawConnection.to(broker.bootstrap, "seam-test")
    try:
        oe = w.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0},
            {"partition": 1, "current_leader_epoch": 0, "leader_epoch": 0},
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 3},
            {"partition": 0, "current_leader_epoch": 2, "leader_epoch": 0},
            {"partition": 9, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
        got = [(q.error_code, q.leader_epoch, q.end_offset) for q in oe.topics[0].partitions]
        assert got == [(0, 0, sent), (0, 0, 0), (0, -1, -1), (75, -1, -1), (3, -1, -1)]   # 75 UNKNOWN_LEADER_EPOCH

        dp = w.call(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": [0, 1, 9]}]})
        p0, p1, p9 = dp.topics[0].partitions
        assert (p0.error_code, p1.error_code, p9.error_code) == (0, 0, 3)
        assert [(a.last_sequence, a.coordinator_epoch, a.current_txn_start_offset) for a in p0.active_producers] \
            == [(sent - 1, -1, -1)]
        assert p0.active_producers[0].producer_id >= 0 and list(p1.active_producers) == []

        dr = w.call(ApiKey.DELETE_RECORDS, 2, {"timeout_ms": 30000, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "offset": 2}, {"partition_index": 1, "offset": 1}]},
            {"name": "__consumer_offsets", "partitions": [{"partition_index": 0, "offset": 0}]}]})
        got = {(t.name, q.partition_index): (q.error_code, q.low_watermark) for t in dr.topics for q in t.partitions}
        assert got == {(topic, 0): (0, 2), (topic, 1): (1, -1), ("__consumer_offsets", 0): (17, -1)}
        dr = w.call(ApiKey.DELETE_RECORDS, 2, {"timeout_ms": 30000, "topics": [
            {"name": topic,
             "partitions": [{"partition_index": 0, "offset": 1}, {"partition_index": 1, "offset": -1}]}]})
        assert [(q.error_code, q.low_watermark) for q in dr.topics[0].partitions] == [(0, 2), (0, 0)]
        dr = w.call(ApiKey.DELETE_RECORDS, 2, {"timeout_ms": 30000, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "offset": -1}]}]})
        assert [(q.error_code, q.low_watermark) for q in dr.topics[0].partitions] == [(0, sent)]
    finally:
        w.close()
