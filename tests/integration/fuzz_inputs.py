"""The inputs of the connection fuzzer (``connection_fuzz.py``): valid frames, real batches, mutations.

Valid requests of every API and version come from ``tests/support/protocol_cases.py``
(the schema corpus); Produce requests carry real record batches for the fuzz topics
(:data:`TOPICS`), Fetch and ListOffsets read them; mutations flip, truncate, extend and
splice bytes, overwrite int16/int32/int64/varint fields with boundary values, change the
API key or version, lie in the size prefix, and mutate batches inside (with the CRC
recomputed, so the mutation reaches the validator), decompression bombs included.
"""

from __future__ import annotations

import gzip
import random
import struct

from crc32c import crc32c

from sundial.protocol import encode_request
from sundial.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from support.protocol_cases import case_value, schema_classes, to_kp

MAX_FRAME_BYTES = 1 << 20
TOPICS = {"fz-create": {}, "fz-lat": {"message.timestamp.type": "LogAppendTime"},
          "fz-compact": {"cleanup.policy": "compact"},
          "fz-open": {"message.timestamp.before.max.ms": str(2**63 - 1),
                      "message.timestamp.after.max.ms": str(2**63 - 1)}}
INTERESTING_INT32 = [0, 1, -1, -2, 0x7FFFFFFF, -0x80000000, 0x7FFF, 0x8000, 0xFFFF, 255, 256, 1 << 20]
INTERESTING_INT16 = [0, 1, -1, -2, 0x7FFF, -0x8000, 255]
INTERESTING_INT64 = [0, -1, -2, -3, 2**63 - 1, -(2**63), 2**31, 1_700_000_000_000]
INTERESTING_VARINT = [b"\x00", b"\x01", b"\x7f", b"\x80\x01", b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\x01",
                      b"\x80\x80\x80\x80\x80\x80", b"\xff" * 10 + b"\x01"]


def schema_corpus() -> list[bytes]:
    frames = []
    for key, (lo, hi) in sorted(SUPPORTED_VERSIONS.items()):
        req_cls, _ = schema_classes(key)
        for version in range(lo, hi + 1):
            for case in ("sparse", "full"):
                kp = to_kp(req_cls, case_value(req_cls, version, case), version)
                kp.with_header(correlation_id=7, client_id="fuzz")
                frames.append(bytes(kp.encode(header=True, framed=True))[4:])
    return frames


def make_batch(rng: random.Random, now_ms: int) -> bytes:
    from sundial.records.builder import SimpleRecord, build_records

    codec = rng.choice([0, 0, 0, 1, 2, 3, 4])
    n = rng.randint(1, 20)
    ts = [now_ms + rng.randint(-5000, 5000) if rng.random() < 0.9 else rng.choice(INTERESTING_INT64)
          for _ in range(n)]
    recs = [SimpleRecord(t, None if rng.random() < 0.2 else b"k%d" % rng.randint(0, 5),
                         rng.randbytes(rng.randint(0, 200))) for t in ts]
    pid = rng.choice([-1, -1, rng.randint(0, 50)])
    try:
        return build_records(2, recs, compression=codec, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                             base_sequence=rng.randint(0, 100) if pid >= 0 else -1).buffer
    except Exception:  # noqa: BLE001 - a timestamp the builder refuses: plain batch instead
        return build_records(2, [SimpleRecord(now_ms, b"k", b"v")]).buffer


def bomb(rng: random.Random) -> bytes:
    """A gzip batch whose one record inflates far past the decompressed-size limit."""
    from sundial.records.builder import v2_header

    payload = gzip.compress(b"\0" * rng.choice([64 << 20, 300 << 20]), compresslevel=1)
    return v2_header(base_offset=0, batch_bytes=61 + len(payload), partition_leader_epoch=-1, attributes=1,
                     last_offset_delta=0, base_timestamp=0, max_timestamp=0, producer_id=-1, producer_epoch=-1,
                     base_sequence=-1, record_count=1, payload=payload) + payload


_BOMBS: list[bytes] = []


def fix_crc(batch: bytearray) -> None:
    if len(batch) >= 61:
        struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))


def mutate_batch(rng: random.Random, batch: bytes) -> bytes:
    b = bytearray(batch)
    if len(b) < 61:
        return bytes(b)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(8)
        if op == 0:  # record count
            count = struct.unpack_from(">i", b, 57)[0]
            struct.pack_into(">i", b, 57, rng.choice(INTERESTING_INT32 + [count + 1 if count < 2**31 - 1 else 0]))
        elif op == 1:  # last offset delta
            struct.pack_into(">i", b, 23, rng.choice(INTERESTING_INT32))
        elif op == 2:  # batch length
            struct.pack_into(">i", b, 8, rng.choice(INTERESTING_INT32 + [len(b) - 12 + rng.randint(-9, 9)]))
        elif op == 3:  # timestamps
            struct.pack_into(">q", b, rng.choice([27, 35]), rng.choice(INTERESTING_INT64))
        elif op == 4:  # attributes: codec, timestamp type, transactional, control
            struct.pack_into(">h", b, 21, rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 0x7FFF, -1]))
        elif op == 5 and len(b) > 62:  # a varint inside the records
            at = rng.randrange(61, len(b))
            b[at:at + 1] = rng.choice(INTERESTING_VARINT)
        elif op == 6 and len(b) > 62:  # flip bytes in the records / compressed payload
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(61, len(b))] = rng.randrange(256)
        elif op == 7:  # producer id / epoch / sequence
            struct.pack_into(">qhi", b, 43, rng.choice(INTERESTING_INT64), rng.choice(INTERESTING_INT16),
                             rng.choice(INTERESTING_INT32))
    if rng.random() < 0.9:
        fix_crc(b)
    return bytes(b)


def produce_frame(rng: random.Random, corr: int, now_ms: int) -> bytes:
    if rng.random() < 0.003:
        if not _BOMBS:
            _BOMBS.append(bomb(rng))
        records = _BOMBS[0]
    else:
        records = make_batch(rng, now_ms)
        if rng.random() < 0.6:
            records = mutate_batch(rng, records)
    version = rng.choice([3, 5, 7, 8, 9])
    body = {"transactional_id": None, "acks": rng.choice([-1, 1, 0, 1, 1, 2]), "timeout_ms": 2000,
            "topic_data": [{"name": rng.choice(list(TOPICS) + ["fz-none"]),
                            "partition_data": [{"index": rng.choice([0, 1, 2, -1]), "records": records}]}]}
    return encode_request(ApiKey.PRODUCE, version, corr, "fuzz", body)[4:]


def read_frame(rng: random.Random, corr: int) -> bytes:
    topic = rng.choice(list(TOPICS))
    if rng.random() < 0.5:
        return encode_request(ApiKey.FETCH, rng.choice([4, 11, 12]), corr, "fuzz", {
            "replica_id": -1, "max_wait_ms": rng.choice([0, 0, 5]), "min_bytes": 1,
            "max_bytes": rng.choice([0, 100, 1 << 20]), "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [{"partition": rng.choice([0, 1]),
                                                        "fetch_offset": rng.choice([0, 1, 5, 50, -1, 2**62]),
                                                        "partition_max_bytes": rng.choice([0, 64, 1 << 20])}]}]})[4:]
    return encode_request(ApiKey.LIST_OFFSETS, rng.choice([0, 1, 4, 7, 8]), corr, "fuzz", {
        "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": rng.choice([0, 1]), "current_leader_epoch": -1, "max_num_offsets": 3,
             "timestamp": rng.choice(INTERESTING_INT64 + [-3, -4, -5, 1_700_000_000_000 + rng.randint(0, 10**9)])}]}]
    })[4:]


def mutate(rng: random.Random, frame: bytes, corpus: list[bytes]) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(9)
        if op == 0 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif op == 1 and len(data) > 1:
            del data[rng.randrange(len(data)):]
        elif op == 2:
            at = rng.randrange(len(data) + 1)
            data[at:at] = rng.randbytes(rng.randint(1, 8))
        elif op == 3 and len(data) >= 12:
            struct.pack_into(">i", data, rng.randrange(8, len(data) - 3), rng.choice(INTERESTING_INT32))
        elif op == 4 and len(data) >= 10:
            struct.pack_into(">h", data, rng.randrange(8, len(data) - 1), rng.choice(INTERESTING_INT16))
        elif op == 5 and len(data) > 8:
            at = rng.randrange(8, len(data))
            data[at:at + 1] = rng.choice(INTERESTING_VARINT)
        elif op == 6 and len(data) >= 4:
            struct.pack_into(">hh", data, 0, rng.choice([rng.randrange(-3, 100), struct.unpack_from(">h", data)[0]]),
                             rng.randrange(-2, 20))
        elif op == 7:
            other = rng.choice(corpus)
            cut = rng.randrange(len(data) + 1)
            data = data[:cut] + other[rng.randrange(len(other) + 1):]
        elif op == 8 and len(data) > 8:
            a = rng.randrange(8, len(data))
            b = min(len(data), a + rng.randint(1, 16))
            data[b:b] = data[a:b]
    return bytes(data)


def with_prefix(rng: random.Random, body: bytes) -> tuple[bytes, bool]:
    """(stream bytes, size prefix honest)."""
    r = rng.random()
    if r < 0.93:
        return struct.pack(">i", len(body)) + body, True
    if r < 0.96:
        return struct.pack(">i", max(0, len(body) - rng.randint(1, 8))) + body, False
    if r < 0.98:
        return struct.pack(">i", len(body) + rng.randint(1, 8)) + body, False
    return struct.pack(">i", rng.choice([-1, -0x80000000, 0x7FFFFFFF, MAX_FRAME_BYTES + 1])) + body, False
