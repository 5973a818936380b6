"""Pipelined durable produce, seen from the wire (issue: acks=all without waiting in line).

A connection goes on reading and appending Produce requests while earlier acks=all
answers wait for their fsync. What must hold, checked against a real daemon:

* answers leave in request order, also with a non-Produce request among them;
* offsets follow arrival order exactly (each request's base offset is the previous
  one's plus its record count) and the log holds the records in that order;
* idempotent batches sent many at a time keep exact sequences; a gap is refused;
* a client that vanishes with answers owed leaves a log that holds a gap-free,
  in-order prefix of what it sent, and whatever was acknowledged survives a kill -9.

Ground truth is what the test sent; the log is read back with kafka-python.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest
from kafka import KafkaConsumer, TopicPartition

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey
from sundial.records.builder import SimpleRecord, build_records

from .clients import connect_raw, create_topic, read_frame

pytestmark = pytest.mark.integration

PRODUCE_VERSION = 7
METADATA_VERSION = 1


def produce_frame(corr: int, topic: str, values: list[bytes], *, acks: int = -1, producer_id: int = -1,
                  base_sequence: int = -1) -> bytes:
    now_ms = int(time.time() * 1000)
    batch = build_records(2, [SimpleRecord(now_ms, None, v) for v in values], producer_id=producer_id,
                          producer_epoch=0 if producer_id >= 0 else -1, base_sequence=base_sequence).buffer
    return encode_request(ApiKey.PRODUCE, PRODUCE_VERSION, corr, "pipeline-test", {
        "transactional_id": None, "acks": acks, "timeout_ms": 30_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})


def metadata_frame(corr: int, topic: str) -> bytes:
    return encode_request(ApiKey.METADATA, METADATA_VERSION, corr, "pipeline-test", {"topics": [{"name": topic}]})


def read_values(bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0) -> list[tuple[int, bytes]]:
    """(offset, value) of every record from the log start, waiting until ``expected`` are read."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                out.extend((r.offset, r.value) for r in recs)
        assert len(out) >= expected, f"read {len(out)} of {expected} records within {timeout_s} s"
        return out
    finally:
        c.close()


def end_offset(bootstrap: str, topic: str) -> int:
    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        return c.end_offsets([tp])[tp]
    finally:
        c.close()


def init_producer_id(s: socket.socket) -> int:
    s.sendall(encode_request(ApiKey.INIT_PRODUCER_ID, 1, 1, "pipeline-test",
                             {"transactional_id": None, "transaction_timeout_ms": 60_000}))
    _, body = decode_response(ApiKey.INIT_PRODUCER_ID, 1, read_frame(s))
    assert body.error_code == 0
    return body.producer_id


def test_answers_in_request_order_with_metadata_between(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    s = connect_raw(broker.host, broker.port)
    s.settimeout(60)
    sizes = [1 + (i % 4) for i in range(120)]
    frames, kinds = [], []
    for i, n in enumerate(sizes):
        corr = 1000 + i
        if i == 60:  # a Metadata among the produces gets its answer in its place
            frames.append(metadata_frame(corr, topic_name))
            kinds.append("metadata")
            continue
        frames.append(produce_frame(corr, topic_name, [b"%d-%d" % (i, j) for j in range(n)],
                                    acks=-1 if i % 7 else 1))
        kinds.append("produce")
    s.sendall(b"".join(frames))  # everything in flight at once; nothing read yet
    expected_offset = 0
    for i, kind in enumerate(kinds):
        frame = read_frame(s)
        if kind == "metadata":
            corr, body = decode_response(ApiKey.METADATA, METADATA_VERSION, frame)
            assert corr == 1000 + i
            assert [t.name for t in body.topics] == [topic_name]
            continue
        corr, body = decode_response(ApiKey.PRODUCE, PRODUCE_VERSION, frame)
        assert corr == 1000 + i, f"answer {i} carries correlation id {corr}"
        part = body.responses[0].partition_responses[0]
        assert part.error_code == 0
        assert part.base_offset == expected_offset, "offsets must follow arrival order"
        expected_offset += sizes[i]
    s.close()
    sent = [b"%d-%d" % (i, j) for i, n in enumerate(sizes) if kinds[i] == "produce" for j in range(n)]
    assert read_values(broker.bootstrap, topic_name, len(sent)) == list(enumerate(sent))


def test_idempotent_batches_in_flight_keep_exact_sequences(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    s = connect_raw(broker.host, broker.port)
    s.settimeout(60)
    pid = init_producer_id(s)
    batches, seq = [], 0
    for i in range(40):
        values = [b"s%d-%d" % (i, j) for j in range(3)]
        batches.append((values, seq))
        seq += len(values)
    # 40 batches in flight, then the last one again (a retry: answered as a duplicate, stored once),
    # then a batch with a sequence gap (refused).
    frames = [produce_frame(10 + i, topic_name, v, producer_id=pid, base_sequence=q)
              for i, (v, q) in enumerate(batches)]
    frames.append(produce_frame(60, topic_name, batches[-1][0], producer_id=pid, base_sequence=batches[-1][1]))
    frames.append(produce_frame(61, topic_name, [b"gap"], producer_id=pid, base_sequence=seq + 5))
    s.sendall(b"".join(frames))
    answers = [decode_response(ApiKey.PRODUCE, PRODUCE_VERSION, read_frame(s)) for _ in frames]
    s.close()
    assert [corr for corr, _ in answers] == [10 + i for i in range(40)] + [60, 61]
    parts = [body.responses[0].partition_responses[0] for _, body in answers]
    assert [p.error_code for p in parts[:41]] == [0] * 41
    assert [p.base_offset for p in parts[:40]] == [3 * i for i in range(40)]
    assert parts[40].base_offset == parts[39].base_offset  # the duplicate answers the stored offset
    assert parts[41].error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    expected = [v for values, _ in batches for v in values]
    assert read_values(broker.bootstrap, topic_name, len(expected)) == list(enumerate(expected))
    assert end_offset(broker.bootstrap, topic_name) == len(expected)


def test_client_vanishing_mid_pipeline_loses_nothing_acknowledged(broker_factory):
    proc = broker_factory().start()
    topic = "vanish"
    create_topic(proc.bootstrap, topic)
    s = connect_raw(proc.host, proc.port)
    s.settimeout(60)
    total, read_first = 300, 100
    values = [[b"v%d-%d" % (i, j) for j in range(2)] for i in range(total)]
    s.sendall(b"".join(produce_frame(i, topic, v) for i, v in enumerate(values)))
    acknowledged = 0
    for i in range(read_first):
        corr, body = decode_response(ApiKey.PRODUCE, PRODUCE_VERSION, read_frame(s))
        assert corr == i
        part = body.responses[0].partition_responses[0]
        assert part.error_code == 0 and part.base_offset == 2 * i
        acknowledged += 2
    # Vanish with answers owed: a reset, not a polite close.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    sent = [v for batch in values for v in batch]
    stored = read_values(proc.bootstrap, topic, acknowledged)
    assert stored == list(enumerate(sent[:len(stored)])), "the log must hold an in-order prefix of what was sent"
    assert len(stored) % 2 == 0, "batches are stored whole"
    # The daemon dies without a clean shutdown: what was acknowledged is on disk.
    proc.kill()
    proc.start()
    after = read_values(proc.bootstrap, topic, acknowledged)
    assert after[:acknowledged] == list(enumerate(sent[:acknowledged]))
    assert after == list(enumerate(sent[:len(after)]))


def test_pipelining_off_answers_the_same(broker_factory):
    """With one pending request per connection the answers are the same, request by request."""
    proc = broker_factory(**{"sundial.connection.max.pending.produce.requests": 1}).start()
    create_topic(proc.bootstrap, "serial")
    s = connect_raw(proc.host, proc.port)
    s.settimeout(60)
    s.sendall(b"".join(produce_frame(i, "serial", [b"x%d" % i]) for i in range(50)))
    answers = [decode_response(ApiKey.PRODUCE, PRODUCE_VERSION, read_frame(s)) for _ in range(50)]
    s.close()
    assert [c for c, _ in answers] == list(range(50))
    assert [b.responses[0].partition_responses[0].base_offset for _, b in answers] == list(range(50))
