"""Hostile input against the running daemon: each case gets Kafka's error code or a closed
connection, a log line, no crash, no hang and no change to stored data.

Cases: frames over ``socket.request.max.bytes``, negative, zero and huge lengths,
truncated frames (half-closed and stalled), unknown API keys and versions, bad CRCs,
batches whose count, length or offset-delta fields lie (CRC made valid, so the lie
reaches the validator), records with absurd varints, compression bombs, timestamps at
the int64 limits. After every case a sentinel topic is read back byte for byte and the
target topic's log end offset is checked.

Fuzzing: ``test_connection_fuzz_in_process`` drives mutated frames through the real
``Connection`` of an in-process broker (``connection_fuzz.py``; CI size
``SUNDIAL_CONN_FUZZ_FRAMES``, default 15,000; ``benchmarks/fuzz_long.py`` for 10^6+);
``test_socket_fuzz_against_the_daemon`` sends a few thousand mutated frames over real
sockets to the subprocess daemon and checks it logged no internal error.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import os
import random
import socket
import struct
import time

import pytest
from kafka import KafkaConsumer, TopicPartition

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey

from support.kafka_bytes_ref import zigzag_varint as varint

from . import connection_fuzz
from .clients import connect_raw, create_topic, producer, read_frame
from .conftest import SundialProcess, free_port

MAX_REQUEST = 4 << 20  # room for compression bombs
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
INTERNAL_ERRORS = {"request_failed", "connection_failed", "response_encoding_failed", "periodic_task_failed"}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    proc = SundialProcess(tmp_path_factory.mktemp("hostile"), {
        "socket.request.max.bytes": str(MAX_REQUEST), "connections.max.idle.ms": "1500",
    }, port=free_port())
    proc.start()
    # The sentinel is not about retention: it must outlive the daemon's retention passes
    # (the first runs 30 s after start), however long the module takes on a busy host.
    create_topic(proc.bootstrap, "sentinel", configs={"retention.ms": "-1"})
    for name, cfg in (("t-create", {}), ("t-lat", {"message.timestamp.type": "LogAppendTime"}),
                      ("t-open", {"message.timestamp.before.max.ms": str(LONG_MAX),
                                  "message.timestamp.after.max.ms": str(LONG_MAX)}),
                      ("t-lz4", {"compression.type": "lz4"})):
        create_topic(proc.bootstrap, name, configs=cfg)
    p = producer(proc.bootstrap, acks="all")
    now_ms = int(time.time() * 1000)
    for i in range(5):
        p.send("sentinel", key=b"k%d" % i, value=b"sentinel-%d" % i, partition=0, timestamp_ms=now_ms - 5 + i)
    p.flush()
    p.close()
    proc.sentinel = read_topic(proc, "sentinel")
    assert proc.sentinel == [(i, now_ms - 5 + i, b"k%d" % i, b"sentinel-%d" % i) for i in range(5)]
    yield proc
    events = {e.get("event") for e in proc.log_lines()}
    assert not events & INTERNAL_ERRORS, events & INTERNAL_ERRORS
    assert proc.running, proc.log_text()[-3000:]
    assert proc.stop() == 0


def read_topic(proc, topic: str, timeout_s: float = 60.0) -> list[tuple]:
    """Every record of partition 0 from the log start to the log end, as (offset, timestamp, key, value).

    Counts ``end - beginning`` records (retention or DeleteRecords may have moved the log
    start) and fails with the offsets and what arrived if they do not all come in time.
    """
    c = KafkaConsumer(bootstrap_servers=proc.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      request_timeout_ms=30000)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        begin = c.beginning_offsets([tp])[tp]
        end = c.end_offsets([tp])[tp]
        c.seek(tp, begin)
        out = []
        deadline = time.monotonic() + timeout_s
        while len(out) < end - begin and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                out.extend((r.offset, r.timestamp, r.key, r.value) for r in recs)
    finally:
        c.close()
    assert len(out) == end - begin, (f"{topic}: read {len(out)} of the {end - begin} records in [{begin}, {end}) "
                                     f"within {timeout_s:.0f}s; offsets read: {[r[0] for r in out][:20]}")
    return out


def log_end(proc, topic: str) -> int:
    _, body = call(proc, ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    return body.topics[0].partitions[0].offset


@pytest.fixture
def unchanged(daemon):
    """Checks after the test: the daemon lives, answers, and the sentinel topic is intact."""
    yield
    assert daemon.running, daemon.log_text()[-3000:]
    assert call(daemon, 18, 0, {})[1].error_code == 0
    assert read_topic(daemon, "sentinel") == daemon.sentinel


# -- raw wire helpers -----------------------------------------------------------------------------------
def connect(proc) -> socket.socket:
    return connect_raw(proc.host, proc.port)


def call(proc, api_key, version, body):
    s = connect(proc)
    try:
        s.sendall(encode_request(api_key, version, 77, "hostile", body))
        return decode_response(api_key, version, read_frame(s))
    finally:
        s.close()


def closed_by_daemon(s: socket.socket, timeout: float = 30) -> bool:
    """True once the daemon closed ``s``; False if it stayed open for ``timeout`` seconds."""
    s.settimeout(timeout)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def new_events(proc, since: int) -> set[str]:
    return {e.get("event") for e in proc.log_lines()[since:]}


def wait_for_events(proc, since: int, wanted: set[str], timeout_s: float = 30) -> set[str]:
    """The events logged after line ``since``, once one of ``wanted`` is among them (or at the deadline)."""
    deadline = time.monotonic() + timeout_s
    while True:
        events = new_events(proc, since)
        if events & wanted or time.monotonic() > deadline:
            return events
        time.sleep(0.05)


# -- record batch construction (written out independently of records.builder) -------------------------------
def record(ts_delta=0, off_delta=0, key=b"k", value=b"v", raw_length: bytes | None = None) -> bytes:
    body = b"\x00" + varint(ts_delta) + varint(off_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(len(value)) + value + varint(0)
    return (raw_length if raw_length is not None else varint(len(body))) + body


def batch(records: bytes, *, count: int, last_offset_delta: int | None = None, base_ts: int | None = None,
          max_ts: int | None = None, attributes: int = 0, length_delta: int = 0) -> bytes:
    from crc32c import crc32c

    base_ts = int(time.time() * 1000) if base_ts is None else base_ts
    max_ts = base_ts if max_ts is None else max_ts
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    after_crc = struct.pack(">hiqqqhii", attributes, lod, base_ts, max_ts, -1, -1, -1, count)
    crc = crc32c(records, crc32c(after_crc))
    length = 49 + len(records) + length_delta
    return struct.pack(">qiibI", 0, length, -1, 2, crc) + after_crc + records


def produce(proc, topic: str, records: bytes, version: int = 8, acks: int = 1):
    return call(proc, ApiKey.PRODUCE, version, {
        "transactional_id": None, "acks": acks, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]})[1]


def expect_refused(proc, topic: str, records: bytes, codes=(2, 87), version: int = 8):
    before_end = log_end(proc, topic)
    since = len(proc.log_lines())
    part = produce(proc, topic, records, version).responses[0].partition_responses[0]
    assert part.error_code in codes, part
    assert part.base_offset == -1
    assert log_end(proc, topic) == before_end, "nothing may be stored"
    assert new_events(proc, since) & {"append_rejected", "produce_refused"}
    return part


# -- frames ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,payload,event", [
    ("over socket.request.max.bytes", struct.pack(">i", MAX_REQUEST + 1) + b"\x00" * 64, "frame_refused"),
    ("huge", struct.pack(">i", 0x7FFFFFFF), "frame_refused"),
    ("negative", struct.pack(">i", -1), "frame_refused"),
    ("most negative", struct.pack(">i", -(2**31)), "frame_refused"),
    ("zero length", struct.pack(">i", 0), "request_header_invalid"),
    ("header cut short", struct.pack(">i", 5) + b"\x00\x03\x00\x01\x00", "request_header_invalid"),
    ("client id longer than the frame", struct.pack(">ihhih", 10, 18, 0, 1, 300), "request_header_invalid"),
    ("unknown api key", struct.pack(">ihhih", 10, 999, 0, 1, -1), "request_version_unsupported"),
    ("negative api key", struct.pack(">ihhih", 10, -1, 0, 1, -1), "request_version_unsupported"),
    ("produce v99", struct.pack(">ihhih", 10, 0, 99, 1, -1), ("request_version_unsupported", "request_header_invalid")),
    ("metadata v-1", struct.pack(">ihhih", 10, 3, -1, 1, -1), ("request_version_unsupported", "request_header_invalid")),
    ("body cut short", struct.pack(">ihhih", 14, 2, 1, 7, -1) + b"\xff\xff\xff\xff", "request_invalid"),
    ("array length lies", struct.pack(">ihhih", 14, 3, 1, 7, -1) + struct.pack(">i", 0x7FFFFFFF), "request_invalid"),
], ids=lambda v: v if isinstance(v, str) and " " in v or v in ("huge", "negative") else "")
def test_bad_frames_close_the_connection_with_a_log_line(daemon, unchanged, name, payload, event):
    since = len(daemon.log_lines())
    s = connect(daemon)
    s.sendall(payload)
    assert closed_by_daemon(s), name
    s.close()
    wanted = {event} if isinstance(event, str) else set(event)
    events = wait_for_events(daemon, since, wanted)
    assert events & wanted, (name, events)


def test_api_versions_with_an_unknown_version_is_answered_with_35(daemon, unchanged):
    s = connect(daemon)
    header = struct.pack(">hhih", 18, 77, 5, 4) + b"test" + b"\x00"  # flexible header v2, empty body
    s.sendall(struct.pack(">i", len(header) + 3) + header + b"\x00\x00\x00")
    frame = read_frame(s)
    assert struct.unpack_from(">ih", frame, 4) == (5, 35)
    s.close()


def test_truncated_frames_never_hang_the_daemon(daemon, unchanged):
    # half-closed in the middle of a frame: the daemon closes its side
    s = connect(daemon)
    s.sendall(struct.pack(">i", 100) + b"\x00" * 50)
    s.shutdown(socket.SHUT_WR)
    assert closed_by_daemon(s)
    s.close()
    # stalled in the middle of a frame: the idle sweep closes it (and says so); meanwhile others are served
    since = len(daemon.log_lines())
    stalled = connect(daemon)
    stalled.sendall(struct.pack(">i", 1000) + b"\x00\x12\x00\x00")
    assert call(daemon, 18, 0, {})[1].error_code == 0
    assert closed_by_daemon(stalled, timeout=60)
    stalled.close()
    events = wait_for_events(daemon, since, {"connection_idle_closed"})
    assert "connection_idle_closed" in events, events


def test_many_frames_in_one_write_and_one_byte_at_a_time(daemon, unchanged):
    s = connect(daemon)
    frames = b"".join(encode_request(18, 0, i, "pipe", {}) for i in range(200))
    s.sendall(frames)
    assert [struct.unpack_from(">i", read_frame(s), 4)[0] for _ in range(200)] == list(range(200))
    one = encode_request(3, 1, 9, "slow", {"topics": None})
    for i in range(len(one)):
        s.send(one[i:i + 1])
    assert struct.unpack_from(">i", read_frame(s), 4)[0] == 9
    s.close()


# -- record batches -------------------------------------------------------------------------------------------
def test_bad_crc_is_corrupt_message(daemon, unchanged):
    good = batch(record() + record(off_delta=1), count=2)
    bad = bytearray(good)
    bad[-2] ^= 0x40
    expect_refused(daemon, "t-create", bytes(bad), codes=(2,))


TOPICS_FOR_LIES = ["t-create", "t-lat", "t-open"]


@pytest.mark.parametrize("topic", TOPICS_FOR_LIES)
@pytest.mark.parametrize("name,make", [
    ("count too high", lambda: batch(record() + record(off_delta=1), count=5)),
    ("count too low", lambda: batch(record() + record(off_delta=1) + record(off_delta=2), count=2)),
    ("count zero", lambda: batch(record(), count=0, last_offset_delta=-1)),
    ("count negative", lambda: batch(record(), count=-3)),
    ("last offset delta lies", lambda: batch(record() + record(off_delta=1), count=2, last_offset_delta=7)),
    ("trailing bytes after the records", lambda: batch(record() + b"\x00\x00\x00", count=1)),
])
def test_batches_whose_fields_lie_are_refused(daemon, unchanged, topic, name, make):
    expect_refused(daemon, topic, make())


@pytest.mark.parametrize("length_delta", [-5, 3, 10_000, -49, 2**31 - 2000])
def test_batch_length_field_lies(daemon, unchanged, length_delta):
    data = batch(record() + record(off_delta=1), count=2, length_delta=length_delta)
    # the frame holds the bytes the batch claims or not: either way nothing is stored
    expect_refused(daemon, "t-create", data)


@pytest.mark.parametrize("topic", TOPICS_FOR_LIES)
@pytest.mark.parametrize("name,rec", [
    ("record length past the batch", record(raw_length=varint(10_000))),
    ("negative record length", record(raw_length=varint(-7))),
    ("ten-byte varint length", record(raw_length=b"\xff" * 9 + b"\x01")),
    ("varint that never ends", b"\x80" * 12),
    ("key length past the record", record(key=b"k")[:1] + b"\x00\x00\x00" + varint(10_000) + b"k" + b"\x02v\x00"),
    ("huge header count", record()[:-1] + varint(2**31 - 1)),
])
def test_records_with_absurd_varints_are_refused(daemon, unchanged, topic, name, rec):
    expect_refused(daemon, topic, batch(rec, count=1))


def test_a_negative_key_length_means_a_null_key_as_in_kafka(daemon, unchanged):
    """Kafka's DefaultRecord reads any negative key length as null; so do Sundial and the clients."""
    body = b"\x00\x00\x00" + varint(-5) + varint(1) + b"v" + varint(0)
    start = log_end(daemon, "t-create")
    part = produce(daemon, "t-create", batch(varint(len(body)) + body, count=1)).responses[0].partition_responses[0]
    assert part.error_code == 0 and part.base_offset == start
    assert read_topic(daemon, "t-create")[-1][2:] == (None, b"v")


@pytest.mark.parametrize("topic", ["t-create", "t-lat", "t-open", "t-lz4"])
@pytest.mark.parametrize("codec", [1, 3, 4], ids=["gzip", "lz4", "zstd"])
def test_compression_bombs_are_refused_without_blowing_memory(daemon, unchanged, topic, codec):
    payload = _bomb(codec)
    assert len(payload) < 1_000_000
    rss_before = _rss(daemon)
    expect_refused(daemon, topic, batch(payload, count=1, attributes=codec))
    grown_mb = (_rss(daemon) - rss_before) / (1 << 20)
    assert grown_mb < 200, f"a bomb grew the daemon by {grown_mb:.0f} MB"


@functools.lru_cache(maxsize=None)
def _bomb(codec: int) -> bytes:
    """One record followed by 200-300 MiB of zeros (the limit is 128 MiB), compressed into less
    than max.message.bytes (LZ4 cannot do better than about 1:255)."""
    import cramjam

    data = record(value=b"\x00" * 64) + b"\x00" * ((200 if codec == 3 else 300) << 20)
    if codec == 1:
        return gzip.compress(data, 6)
    if codec == 3:
        return bytes(cramjam.lz4.compress(data))
    return bytes(cramjam.zstd.compress(data, level=1))


def _rss(proc) -> int:
    with open(f"/proc/{proc.proc.pid}/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))


def test_timestamps_at_the_int64_limits(daemon, unchanged):
    # bounded topic (message.timestamp.after.max.ms = 1 h): far future and far past are INVALID_TIMESTAMP
    for ts in (LONG_MAX, LONG_MIN, LONG_MIN + 1):
        part = expect_refused(daemon, "t-create", batch(record(), count=1, base_ts=ts, max_ts=ts), codes=(32,))
        assert part.record_errors and "out of range" in part.record_errors[0].batch_index_error_message
    # a base timestamp whose deltas overflow 64 bits: Kafka adds them in wrapping long arithmetic
    # (the records then carry -7), so this may be accepted; it must not hurt the daemon
    part = produce(daemon, "t-create", batch(record(ts_delta=LONG_MAX) + record(ts_delta=LONG_MAX, off_delta=1),
                                             count=2, base_ts=LONG_MAX - 5, max_ts=LONG_MAX))
    assert part.responses[0].partition_responses[0].error_code in (0, 32, 87)
    # unbounded topic: Long.MAX is a legal CreateTime; searches still answer exactly
    start = log_end(daemon, "t-open")
    part = produce(daemon, "t-open", batch(record(), count=1, base_ts=LONG_MAX, max_ts=LONG_MAX)) \
        .responses[0].partition_responses[0]
    assert part.error_code == 0 and part.base_offset == start

    def lookup(ts):
        _, body = call(daemon, ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "t-open", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}]}]})
        p = body.topics[0].partitions[0]
        return p.error_code, p.offset, p.timestamp

    assert lookup(LONG_MAX) == (0, start, LONG_MAX)
    assert lookup(-3) == (0, start, LONG_MAX)  # max timestamp
    assert lookup(LONG_MAX - 1)[1] == start
    # -2 passes Kafka's bounds check (now - ts <= before.max); it must not confuse the time index
    neg = produce(daemon, "t-open", batch(record(), count=1, base_ts=-2, max_ts=-2)).responses[0].partition_responses[0]
    assert neg.error_code == 0 and neg.base_offset == start + 1
    assert lookup(-3) == (0, start, LONG_MAX)
    assert lookup(0)[1] == start  # the first record with timestamp >= 0 is the Long.MAX one
    # a LogAppendTime topic ignores whatever the client claims
    part = produce(daemon, "t-lat", batch(record(), count=1, base_ts=LONG_MIN, max_ts=LONG_MIN)) \
        .responses[0].partition_responses[0]
    assert part.error_code == 0 and abs(part.log_append_time_ms - time.time() * 1000) < 60_000


def test_produce_acks_0_failure_closes_the_connection(daemon, unchanged):
    s = connect(daemon)
    bad = bytearray(batch(record(), count=1))
    bad[-1] ^= 1
    s.sendall(encode_request(ApiKey.PRODUCE, 8, 5, "acks0", {
        "transactional_id": None, "acks": 0, "timeout_ms": 1000,
        "topic_data": [{"name": "t-create", "partition_data": [{"index": 0, "records": bytes(bad)}]}]}))
    assert closed_by_daemon(s)
    s.close()


# -- fuzzing ---------------------------------------------------------------------------------------------------
def test_connection_fuzz_in_process():
    frames = int(os.environ.get("SUNDIAL_CONN_FUZZ_FRAMES", "15000"))
    seed = int(os.environ["SUNDIAL_FUZZ_SEED"]) if "SUNDIAL_FUZZ_SEED" in os.environ else None
    stats = asyncio.run(connection_fuzz.run_campaign(frames, seed))
    print("\n" + stats.line())
    assert not stats.findings, f"seed {stats.seed}:\n" + "\n".join(stats.findings[:3])
    assert stats.frames >= frames and stats.health_checks >= 1


SOCKET_FUZZ_FRAMES = 3000


def test_socket_fuzz_against_the_daemon(daemon, unchanged):
    rng = random.Random(int(os.environ.get("SUNDIAL_FUZZ_SEED", "7")))
    corpus = connection_fuzz.schema_corpus()
    now_ms = int(time.time() * 1000)
    sent = 0
    since = len(daemon.log_lines())
    deadline = time.monotonic() + 240  # a hang guard only: a quiet host sends them in a few seconds
    while sent < SOCKET_FUZZ_FRAMES and time.monotonic() < deadline:
        s = connect(daemon)
        s.settimeout(2)
        try:
            for _ in range(rng.randint(1, 20)):
                r = rng.random()
                if r < 0.3:
                    body = connection_fuzz.produce_frame(rng, sent, now_ms)
                elif r < 0.4:
                    body = connection_fuzz.read_frame(rng, sent)
                else:
                    body = rng.choice(corpus)
                if rng.random() < 0.5:
                    body = connection_fuzz.mutate(rng, body, corpus)
                stream, _honest = connection_fuzz.with_prefix(rng, body)
                s.sendall(stream)
                sent += 1
        except OSError:
            pass
        finally:
            s.close()
    assert sent >= SOCKET_FUZZ_FRAMES, f"only {sent} of {SOCKET_FUZZ_FRAMES} frames sent in 240 s"
    events = new_events(daemon, since)
    assert not events & INTERNAL_ERRORS, events & INTERNAL_ERRORS


@pytest.mark.parametrize("count", [2**31 - 1, 10_001])
def test_absurd_partition_counts_are_refused_at_once(daemon, unchanged, count):
    """Refused before any partition is made: error 37, no directory, and an answer at all (a broker
    that tried to create 2^31 partitions would not answer within the socket timeout)."""
    _, body = call(daemon, ApiKey.CREATE_TOPICS, 3, {"topics": [{"name": f"huge-{count}", "num_partitions": count,
                                                               "replication_factor": 1, "assignments": [],
                                                               "configs": []}],
                                                     "timeout_ms": 5000, "validate_only": False})
    assert body.topics[0].error_code == 37  # INVALID_PARTITIONS
    _, body = call(daemon, ApiKey.CREATE_PARTITIONS, 1, {"topics": [{"name": "t-create", "count": count,
                                                                    "assignments": None}],
                                                         "timeout_ms": 5000, "validate_only": False})
    assert body.results[0].error_code == 37
    assert not os.path.exists(os.path.join(daemon.data_dir, f"huge-{count}-0"))
