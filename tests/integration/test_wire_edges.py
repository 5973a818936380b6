"""The wire server at its edges: legacy formats, raw frames, bad input, admin APIs, limits."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    TopicAlreadyExistsError,
)

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey

from .clients import admin, connect_raw, consume_all, create_topic, read_frame, topic_with_deleted_records
from .conftest import unique_topic


# -- legacy clients (seed 002's migration plan) -----------------------------------------------
@pytest.mark.parametrize("topic_format", ["3.0-IV1", "0.10.2", "0.9.0"])
@pytest.mark.parametrize("producer_version", [(0, 9), (0, 10, 1), (0, 11)])
def test_legacy_produce_and_fetch_convert_between_formats(broker, topic_format, producer_version):
    topic = unique_topic("legacy")
    create_topic(broker.bootstrap, topic, configs={"message.format.version": topic_format})
    stored_magic = {"3.0-IV1": 2, "0.10.2": 1, "0.9.0": 0}[topic_format]
    ts = int(time.time() * 1000) - 5000
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, api_version=producer_version)
    md = [p.send(topic, value=f"v{i}".encode(), key=b"k", timestamp_ms=ts + i).get(timeout=30)
          for i in range(3)]
    p.close()
    assert [m.offset for m in md] == [0, 1, 2]
    producer_has_ts = producer_version >= (0, 10)
    for consumer_version in [(0, 9), (0, 10, 1), (0, 11), None]:
        c = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                          api_version=consumer_version, enable_auto_commit=False)
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 3 and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                got.extend(recs)
        c.close()
        assert [(r.offset, r.key, r.value) for r in got] == [(i, b"k", f"v{i}".encode()) for i in range(3)]
        reader_has_ts = consumer_version is None or consumer_version >= (0, 10)
        for i, r in enumerate(got):
            if not reader_has_ts:
                assert r.timestamp in (None, -1)
            elif producer_has_ts and stored_magic >= 1:
                assert r.timestamp == ts + i
            else:
                assert r.timestamp in (None, -1)  # stored without timestamps (magic 0)


# -- raw frames -----------------------------------------------------------------------------------
def _connect(broker) -> socket.socket:
    return connect_raw(broker.host, broker.port)


def _closed_by_peer(s: socket.socket) -> bool:
    s.settimeout(30)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def test_api_versions_unknown_version_gets_v0_answer_with_error_35(broker):
    s = _connect(broker)
    # ApiVersions v99: header v2 (flexible) with an empty body
    header = struct.pack(">hhih", 18, 99, 1234, 4) + b"test" + b"\x00"
    s.sendall(struct.pack(">i", len(header) + 3) + header + b"\x00\x00\x00")
    frame = read_frame(s)
    corr, error = struct.unpack_from(">ih", frame, 4)
    assert corr == 1234 and error == 35
    (count,) = struct.unpack_from(">i", frame, 10)
    keys = {struct.unpack_from(">hhh", frame, 14 + 6 * i) for i in range(count)}
    assert any(k == 18 for k, _lo, _hi in keys)
    # the connection stays usable: a supported ApiVersions now succeeds
    s.sendall(encode_request(18, 0, 5, "test", {}))
    corr, body = decode_response(18, 0, read_frame(s))
    assert corr == 5 and body.error_code == 0
    advertised = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert 71 not in advertised  # telemetry is not implemented, so not advertised
    assert advertised[ApiKey.LIST_OFFSETS][0] == 0 and advertised[ApiKey.LIST_OFFSETS][1] >= 7
    assert advertised[ApiKey.PRODUCE] == (0, 9) and advertised[ApiKey.FETCH][1] >= 12
    s.close()


def test_pipelined_requests_are_answered_in_order(broker):
    s = _connect(broker)
    frames = b"".join(encode_request(18, v % 3, 100 + i, "pipe", {}) for i, v in enumerate(range(50)))
    s.sendall(frames)
    for i in range(50):
        corr, _ = decode_response(18, i % 3, read_frame(s))
        assert corr == 100 + i
    s.close()


@pytest.mark.parametrize("payload", [
    struct.pack(">i", -5),                                        # negative size
    struct.pack(">i", 200 * 1024 * 1024),                         # over socket.request.max.bytes
    struct.pack(">i", 3) + b"\x00\x01\x02",                       # header cut short
    struct.pack(">ihhih", 10, 999, 0, 1, -1),                     # unknown API key
    struct.pack(">ihhih", 10, 0, 99, 1, -1),                      # unsupported Produce version
    struct.pack(">ihhih", 14, 2, 1, 7, -1) + b"\xff\xff\xff\xff",  # ListOffsets v1 body cut short
])
def test_bad_frames_close_the_connection_and_the_daemon_keeps_serving(broker, payload):
    s = _connect(broker)
    s.sendall(payload)
    assert _closed_by_peer(s)
    s.close()
    s = _connect(broker)
    s.sendall(encode_request(18, 0, 1, "after", {}))
    corr, body = decode_response(18, 0, read_frame(s))
    assert corr == 1 and body.error_code == 0
    s.close()


def test_produce_with_a_corrupt_crc_gets_corrupt_message_and_stores_nothing(broker):
    topic = unique_topic("crc")
    create_topic(broker.bootstrap, topic)
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    b.append(0, timestamp=int(time.time() * 1000), key=b"k", value=b"v", headers=[])
    batch = bytearray(b.build())
    batch[-1] ^= 0xFF  # flip a byte inside the CRC-covered area
    s = _connect(broker)
    request = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
               "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": bytes(batch)}]}]}
    s.sendall(encode_request(0, 7, 9, "crc", request))
    corr, body = decode_response(0, 7, read_frame(s))
    part = body.responses[0].partition_responses[0]
    assert part.error_code == 2 and part.base_offset == -1
    s.close()
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    tp = TopicPartition(topic, 0)
    assert c.end_offsets([tp])[tp] == 0
    c.close()


def test_invalid_timestamp_reports_record_errors_from_produce_v8(broker):
    topic = unique_topic("recerr")
    create_topic(broker.bootstrap, topic, configs={"message.timestamp.before.max.ms": "1000"})
    from kafka.record.default_records import DefaultRecordBatchBuilder

    now = int(time.time() * 1000)
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, ts in enumerate([now, now - 10 * 60_000, now, now - 20 * 60_000]):
        b.append(i, timestamp=ts, key=None, value=b"v", headers=[])
    s = _connect(broker)
    request = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
               "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": bytes(b.build())}]}]}
    s.sendall(encode_request(0, 8, 9, "recerr", request))
    _, body = decode_response(0, 8, read_frame(s))
    part = body.responses[0].partition_responses[0]
    assert part.error_code == 32 and part.base_offset == -1 and part.log_append_time_ms == -1
    assert sorted(e.batch_index for e in part.record_errors) == [1, 3]
    assert part.error_message
    s.close()


# -- admin APIs --------------------------------------------------------------------------------------
def test_create_topics_validation_and_errors(broker):
    a = admin(broker.bootstrap)
    topic = unique_topic("adm")
    a.create_topics([NewTopic(topic, 3, 1, topic_configs={"retention.ms": "1000"})], validate_only=True)
    assert topic not in a.list_topics()
    a.create_topics([NewTopic(topic, 3, 1, topic_configs={"retention.ms": "1000"})])
    assert topic in a.list_topics()
    with pytest.raises(TopicAlreadyExistsError):
        a.create_topics([NewTopic(topic, 1, 1)])
    with pytest.raises(InvalidConfigurationError):
        a.create_topics([NewTopic(unique_topic("bad"), 1, 1, topic_configs={"segment.bytes": "abc"})])
    with pytest.raises(InvalidConfigurationError):
        a.create_topics([NewTopic(unique_topic("bad"), 1, 1, topic_configs={"no.such.config": "1"})])
    a.create_partitions({topic: NewPartitions(5)})
    with pytest.raises(InvalidPartitionsError):
        a.create_partitions({topic: NewPartitions(2)})
    a.close()


def test_describe_and_alter_configs_report_sources(broker):
    topic = unique_topic("cfg")
    create_topic(broker.bootstrap, topic, configs={"message.timestamp.type": "LogAppendTime"})
    a = admin(broker.bootstrap)
    res = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    configs = _configs_of(res)
    assert configs["message.timestamp.type"] == ("LogAppendTime", "DYNAMIC_TOPIC_CONFIG")
    assert configs["retention.ms"] == ("604800000", "DEFAULT_CONFIG")
    def describe():
        return _configs_of(a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                                              config_filter="all"))

    # IncrementalAlterConfigs: SET one key, keep the others
    a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "1234"})],
                    incremental=True)
    configs = describe()
    assert configs["retention.ms"] == ("1234", "DYNAMIC_TOPIC_CONFIG")
    assert configs["message.timestamp.type"] == ("LogAppendTime", "DYNAMIC_TOPIC_CONFIG")
    # APPEND to a list setting, DELETE an override
    a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                    configs={"cleanup.policy": ("APPEND", "compact"),
                                             "retention.ms": ("DELETE", None)})], incremental=True)
    configs = describe()
    assert configs["cleanup.policy"] == ("delete,compact", "DYNAMIC_TOPIC_CONFIG")
    assert configs["retention.ms"] == ("604800000", "DEFAULT_CONFIG")
    # AlterConfigs (not incremental, sent raw: kafka-python would re-send the other overrides)
    s = _connect(broker)
    s.sendall(encode_request(33, 1, 3, "alter", {"resources": [{"resource_type": 2, "resource_name": topic,
                                                                "configs": [{"name": "segment.ms", "value": "5000"}]}],
                                                 "validate_only": False}))
    _, body = decode_response(33, 1, read_frame(s))
    s.close()
    assert body.responses[0].error_code == 0
    configs = describe()
    assert configs["segment.ms"] == ("5000", "DYNAMIC_TOPIC_CONFIG")
    assert configs["message.timestamp.type"] == ("CreateTime", "DEFAULT_CONFIG")
    # a bad value is refused and changes nothing
    result = a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"segment.ms": "0"})],
                             incremental=True)
    assert "InvalidConfig" in repr(result) or "INVALID_CONFIG" in repr(result)
    assert describe()["segment.ms"] == ("5000", "DYNAMIC_TOPIC_CONFIG")
    a.close()


def _configs_of(res) -> dict:
    """kafka-python 3 answers {"topic": {name: {config: {"value": ..., "config_source": ...}}}}."""
    out = {}
    for resources in res.values():
        for configs in resources.values():
            for name, entry in configs.items():
                out[name] = (entry["value"], entry["config_source"])
    return out


def test_delete_records_moves_the_log_start_offset(broker):
    topic = topic_with_deleted_records(broker.bootstrap, "delrec", 10, 6)
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    tp = TopicPartition(topic, 0)
    assert c.beginning_offsets([tp])[tp] == 6
    assert c.offsets_for_times({tp: 0})[tp].offset == 6, "timestamp search skips offsets below log start"
    c.close()
    got = consume_all(broker.bootstrap, topic, [0], 4)
    assert [r.offset for r in got] == [6, 7, 8, 9]


def test_idle_connections_are_closed(broker_factory):
    b = broker_factory(**{"connections.max.idle.ms": "400"}).start()
    s = _connect(b)
    s.sendall(encode_request(18, 0, 1, "idle", {}))
    read_frame(s)
    assert _closed_by_peer(s)  # within 30 s: how soon after 400 ms is the machine's speed
    closes = [e for e in b.log_lines() if e.get("event") == "connection_idle_closed"]
    assert closes and all(e["idle_ms"] >= 400 for e in closes), closes
