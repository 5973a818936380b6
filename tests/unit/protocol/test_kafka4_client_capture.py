"""Kafka 4 group requests captured from a real client (confluent-kafka 2.16.1, librdkafka 2.16).

A small asyncio server in the test speaks just enough Kafka, through Sundial's codec, for
confluent-kafka to run a consumer with ``group.protocol=consumer`` (KIP-848) and a
``ShareConsumer`` (KIP-932) against it. It advertises the new APIs, captures every request
and answers them. What the client sent is decoded and checked field by field; that the client
then acts on the answers (the assignment reaches ``on_assign``, the record reaches ``poll`` and
its acknowledgement comes back) checks the responses Sundial encodes.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, ShareConsumer

from sundial.protocol import FrameDecoder, decode_request, encode_api_versions_fallback, encode_response
from sundial.protocol.api_keys import ApiKey, is_supported
from sundial.protocol.header import parse_request_header
from sundial.records.builder import SimpleRecord, build_batch

TOPIC = "orders"
TOPIC_ID = uuid.UUID("5f0e1d2c-3b4a-4958-8776-a5b4c3d2e1f0")
DEADLINE_S = 30.0

#: librdkafka turns its record-format features on only when Produce and Fetch are both advertised.
ADVERTISED = {ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (0, 12), ApiKey.FIND_COORDINATOR: (0, 6),
              ApiKey.PRODUCE: (0, 9),
              ApiKey.OFFSET_FETCH: (0, 9), ApiKey.OFFSET_COMMIT: (0, 9), ApiKey.LIST_OFFSETS: (0, 9),
              ApiKey.FETCH: (0, 12), ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
              ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1), ApiKey.SHARE_FETCH: (1, 2), ApiKey.SHARE_ACKNOWLEDGE: (1, 2)}
TABLE = [{"api_key": int(k), "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(ADVERTISED.items())]


class FakeBroker:
    """One node, one topic with one partition; records every decoded request."""

    def __init__(self, records: bytes = b"") -> None:
        self.requests: list = []  # (header, decoded request)
        self.records = records
        self.changed = asyncio.Event()
        self.port = 0
        self._server = None
        self._share_fetches = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self._server.close()
        await self._server.wait_closed()

    def of(self, api_key):
        return [req for header, req in self.requests if header.api_key == api_key]

    async def wait_for(self, predicate) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not predicate():
            self.changed.clear()
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"timed out; requests seen: {[(h.api_key, h.api_version) for h, _ in self.requests]}"
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    async def _serve(self, reader, writer) -> None:
        decoder = FrameDecoder(1 << 20)
        try:
            while data := await reader.read(1 << 16):
                for frame in decoder.feed(data):
                    header = parse_request_header(frame)
                    if header.api_key == ApiKey.API_VERSIONS and not is_supported(18, header.api_version):
                        writer.write(b"".join(encode_api_versions_fallback(header.correlation_id, TABLE)))
                        continue
                    request = decode_request(header, frame)
                    self.requests.append((header, request))
                    self.changed.set()
                    response = await self._answer(header, request)
                    writer.write(b"".join(bytes(b) for b in encode_response(header, response)))
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _answer(self, header, req):  # noqa: C901 - one branch per API, on purpose
        key, v = header.api_key, header.api_version
        if key == ApiKey.API_VERSIONS:
            return {"error_code": 0, "api_keys": TABLE, "throttle_time_ms": 0}
        if key == ApiKey.METADATA:
            return self._metadata(req)
        if key == ApiKey.FIND_COORDINATOR:
            keys = list(req.coordinator_keys or []) or [req.key]
            if v >= 4:
                return {"coordinators": [{"key": k, "node_id": 1, "host": "127.0.0.1", "port": self.port,
                                          "error_code": 0, "error_message": None} for k in keys]}
            return {"error_code": 0, "node_id": 1, "host": "127.0.0.1", "port": self.port}
        if key == ApiKey.CONSUMER_GROUP_HEARTBEAT:
            epoch = -1 if req.member_epoch < 0 else req.member_epoch + 1
            assignment = {"topic_partitions": [{"topic_id": TOPIC_ID, "partitions": [0]}]} if epoch == 1 else None
            return {"member_id": req.member_id, "member_epoch": epoch, "heartbeat_interval_ms": 200,
                    "assignment": assignment}
        if key == ApiKey.SHARE_GROUP_HEARTBEAT:
            epoch = -1 if req.member_epoch < 0 else req.member_epoch + 1
            assignment = {"topic_partitions": [{"topic_id": TOPIC_ID, "partitions": [0]}]} if epoch == 1 else None
            return {"member_id": req.member_id, "member_epoch": epoch, "heartbeat_interval_ms": 200,
                    "assignment": assignment}
        if key == ApiKey.OFFSET_FETCH:
            return {"groups": [{"group_id": g.group_id, "error_code": 0, "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": -1,
                                                "committed_leader_epoch": -1, "metadata": "", "error_code": 0}]}]}
                for g in req.groups]}
        if key == ApiKey.LIST_OFFSETS:
            return {"topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "error_code": 0, "timestamp": -1, "offset": 0, "leader_epoch": 0}]}]}
        if key == ApiKey.FETCH:
            await asyncio.sleep(min(req.max_wait_ms, 100) / 1000)  # a broker's long poll, shortened
            return {"responses": [{"topic": TOPIC, "partitions": [
                {"partition_index": 0, "high_watermark": 0, "last_stable_offset": 0, "log_start_offset": 0,
                 "records": b""}]}]}
        if key == ApiKey.SHARE_FETCH:
            return await self._share_fetch(req)
        if key == ApiKey.SHARE_ACKNOWLEDGE:
            return {"acquisition_lock_timeout_ms": 30000, "responses": [
                {"topic_id": t.topic_id, "partitions": [{"partition_index": p.partition_index} for p in t.partitions]}
                for t in req.topics]}
        raise AssertionError(f"unexpected request {ApiKey(key).name} v{v}")

    def _metadata(self, req):
        wanted = req.topics
        known = wanted is None or any(t.name == TOPIC or t.topic_id == TOPIC_ID for t in wanted)
        topics = []
        if known:
            topics.append({"error_code": 0, "name": TOPIC, "topic_id": TOPIC_ID, "is_internal": False,
                           "partitions": [{"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0,
                                           "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}],
                           "topic_authorized_operations": -(2**31)})
        return {"brokers": [{"node_id": 1, "host": "127.0.0.1", "port": self.port, "rack": None}],
                "cluster_id": "capture", "controller_id": 1, "topics": topics}

    async def _share_fetch(self, req):
        self._share_fetches += 1
        first = self._share_fetches == 1 and any(p.partition_index == 0 for t in req.topics for p in t.partitions)
        if not first:
            await asyncio.sleep(min(req.max_wait_ms, 100) / 1000)
        partition = {"partition_index": 0, "current_leader": {"leader_id": 1, "leader_epoch": 0},
                     "records": self.records if first else b"",
                     "acquired_records": [(0, 0, 1)] if first else []}
        return {"acquisition_lock_timeout_ms": 30000, "responses": [{"topic_id": TOPIC_ID, "partitions": [partition]}]}


async def _call(fn, *args):
    return await asyncio.to_thread(fn, *args)


@pytest.mark.asyncio
@pytest.mark.timeout(120)
async def test_confluent_kafka_consumer_group_heartbeat_v1():
    broker = FakeBroker()
    await broker.start()
    assigned = []
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "group.id": "capture-group",
                         "group.protocol": "consumer", "group.remote.assignor": "range", "client.rack": "rack-7",
                         "max.poll.interval.ms": 123456, "enable.auto.commit": False, "client.id": "capture"})
    try:
        consumer.subscribe(["payments", TOPIC], on_assign=lambda c, parts: assigned.extend(parts))
        deadline = time.monotonic() + DEADLINE_S
        while not assigned:  # the client acts on our heartbeat answer: the assignment reaches on_assign
            assert time.monotonic() < deadline, [(h.api_key, h.api_version) for h, _ in broker.requests]
            await _call(consumer.poll, 0.2)
        await _call(consumer.close)
        await broker.wait_for(lambda: any(r.member_epoch == -1 for r in broker.of(ApiKey.CONSUMER_GROUP_HEARTBEAT)))
    finally:
        await broker.stop()
    heartbeats = broker.of(ApiKey.CONSUMER_GROUP_HEARTBEAT)
    versions = {h.api_version for h, _ in broker.requests if h.api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT}
    assert versions == {1}
    join = heartbeats[0]
    assert join.group_id == "capture-group"
    assert len(join.member_id) > 0  # KIP-1082: v1 members make up their own id
    assert join.member_epoch == 0
    assert join.instance_id is None
    assert join.rack_id == "rack-7"
    assert join.rebalance_timeout_ms == 123456  # max.poll.interval.ms
    assert sorted(join.subscribed_topic_names) == ["orders", "payments"]
    assert join.server_assignor == "range"
    assert not join.topic_partitions  # owns nothing yet
    assert [(p.topic, p.partition) for p in assigned] == [(TOPIC, 0)]
    leave = [r for r in heartbeats if r.member_epoch == -1][-1]
    assert leave.member_id == join.member_id and leave.group_id == "capture-group"
    # every heartbeat keeps the member id; the epochs the client reports are ones we handed out
    assert {r.member_id for r in heartbeats} == {join.member_id}
    assert {r.member_epoch for r in heartbeats} <= {0, 1, -1}


@pytest.mark.asyncio
@pytest.mark.timeout(120)
async def test_confluent_kafka_share_consumer():
    value = b"queue-record"
    records = build_batch(2, [SimpleRecord(timestamp=1_700_000_000_000, key=b"k", value=value)], base_offset=0)
    broker = FakeBroker(records)
    await broker.start()
    got = []
    consumer = ShareConsumer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "group.id": "capture-share",
                              "client.id": "capture"})
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + DEADLINE_S
        while not got:  # our ShareFetch answer (records + acquired range) becomes a message
            assert time.monotonic() < deadline, [(h.api_key, h.api_version) for h, _ in broker.requests]
            got.extend(m for m in (await _call(consumer.poll, 0.2) or []) if m.error() is None)
        # implicit acknowledgement: the next poll accepts what the last one returned
        await _call(consumer.poll, 0.2)
        await broker.wait_for(lambda: _acks(broker))
        await _call(consumer.close)
        await broker.wait_for(lambda: any(r.member_epoch == -1 for r in broker.of(ApiKey.SHARE_GROUP_HEARTBEAT)))
    finally:
        await broker.stop()
    assert [(m.topic(), m.partition(), m.offset(), m.value()) for m in got] == [(TOPIC, 0, 0, value)]
    join = broker.of(ApiKey.SHARE_GROUP_HEARTBEAT)[0]
    assert (join.group_id, join.member_epoch, list(join.subscribed_topic_names)) == ("capture-share", 0, [TOPIC])
    assert len(join.member_id) > 0 and join.rack_id is None
    fetch = broker.of(ApiKey.SHARE_FETCH)[0]
    assert (fetch.group_id, fetch.member_id, fetch.share_session_epoch) == ("capture-share", join.member_id, 0)
    assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in fetch.topics] == [(TOPIC_ID, [0])]
    assert fetch.max_records > 0 and fetch.batch_size > 0
    first, last, types = _acks(broker)[0]
    assert (first, last, types) == (0, 0, [1])  # ACCEPT the one record


def _acks(broker):
    out = []
    for req in broker.of(ApiKey.SHARE_FETCH) + broker.of(ApiKey.SHARE_ACKNOWLEDGE):
        for t in req.topics or []:
            for p in t.partitions:
                for b in p.acknowledgement_batches or []:
                    out.append((b.first_offset, b.last_offset, list(b.acknowledge_types)))
    return out
