"""An independent writer and reader of Kafka record bytes, for tests only.

Written from the byte tables of the reference (kafka-time-semantics.md §2.1-§2.7), not
from storage/ or records/: plain ``struct`` calls and explicit loops, no shared helpers,
no speed tricks. Tests use it as ground truth for what the record package (records/)
reads and what records/builder.py writes.
"""

from __future__ import annotations

import struct
import zlib

import crc32c


def zigzag_varint(n: int) -> bytes:
    u = (n << 1) ^ (n >> 63)
    u &= (1 << 64) - 1
    out = bytearray()
    while True:
        if u < 0x80:
            out.append(u)
            return bytes(out)
        out.append((u & 0x7F) | 0x80)
        u >>= 7


def read_zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    u = 0
    while True:
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    return (u >> 1) ^ -(u & 1), pos


def v2_record(offset_delta: int, timestamp_delta: int, key, value, headers=()) -> bytes:
    body = bytearray()
    body.append(0)                                   # attributes
    body += zigzag_varint(timestamp_delta)
    body += zigzag_varint(offset_delta)
    for blob in (key, value):
        if blob is None:
            body += zigzag_varint(-1)
        else:
            body += zigzag_varint(len(blob)) + blob
    body += zigzag_varint(len(headers))
    for hkey, hvalue in headers:
        kb = hkey.encode()
        body += zigzag_varint(len(kb)) + kb
        if hvalue is None:
            body += zigzag_varint(-1)
        else:
            body += zigzag_varint(len(hvalue)) + hvalue
    return zigzag_varint(len(body)) + bytes(body)


def v2_batch(records, *, base_offset=0, base_timestamp=None, max_timestamp=None, attributes=0,
             last_offset_delta=None, count=None, producer_id=-1, producer_epoch=-1, base_sequence=-1,
             partition_leader_epoch=-1, payload=None) -> bytes:
    """records: list of (offset_delta, timestamp, key, value, headers)."""
    if base_timestamp is None:
        base_timestamp = records[0][1] if records else -1
    if max_timestamp is None:
        max_timestamp = max((r[1] for r in records), default=-1)
    if payload is None:
        payload = b"".join(v2_record(od, ts - base_timestamp, k, v, h) for od, ts, k, v, h in records)
    if last_offset_delta is None:
        last_offset_delta = records[-1][0] if records else 0
    if count is None:
        count = len(records)
    after_crc = struct.pack(">hiqqqhii", attributes, last_offset_delta, base_timestamp, max_timestamp,
                            producer_id, producer_epoch, base_sequence, count) + payload
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)       # epoch + magic + crc + rest
    return struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, 2, crc) + after_crc


def legacy_message(magic: int, offset: int, key, value, *, timestamp=-1, attributes=0) -> bytes:
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for blob in (key, value):
        body += struct.pack(">i", -1) if blob is None else struct.pack(">i", len(blob)) + blob
    crc = zlib.crc32(body)
    message = struct.pack(">I", crc) + body
    return struct.pack(">qi", offset, len(message)) + message


def parse_v2_batch(data: bytes) -> dict:
    (base_offset, batch_length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts, pid, pepoch,
     base_seq, count) = struct.unpack_from(">qiibIhiqqqhii", data, 0)
    assert magic == 2
    assert batch_length + 12 == len(data), "batch length covers everything after byte 12"
    assert crc == crc32c.crc32c(data[21:]), "CRC-32C from byte 21"
    return dict(base_offset=base_offset, partition_leader_epoch=epoch, attributes=attributes,
                last_offset_delta=last_delta, base_timestamp=base_ts, max_timestamp=max_ts, producer_id=pid,
                producer_epoch=pepoch, base_sequence=base_seq, count=count, payload=data[61:])


def parse_v2_records(payload: bytes, count: int):
    """[(offset_delta, timestamp_delta, key, value, headers)] of an uncompressed records section."""
    out = []
    pos = 0
    for _ in range(count):
        length, pos = read_zigzag(payload, pos)
        end = pos + length
        assert payload[pos] == 0
        pos += 1
        ts_delta, pos = read_zigzag(payload, pos)
        off_delta, pos = read_zigzag(payload, pos)
        fields = []
        for _ in range(2):
            n, pos = read_zigzag(payload, pos)
            if n < 0:
                fields.append(None)
            else:
                fields.append(payload[pos:pos + n])
                pos += n
        nh, pos = read_zigzag(payload, pos)
        headers = []
        for _ in range(nh):
            n, pos = read_zigzag(payload, pos)
            hk = payload[pos:pos + n].decode()
            pos += n
            n, pos = read_zigzag(payload, pos)
            hv = None if n < 0 else payload[pos:pos + n]
            pos += max(n, 0)
            headers.append((hk, hv))
        assert pos == end
        out.append((off_delta, ts_delta, fields[0], fields[1], tuple(headers)))
    assert pos == len(payload)
    return out


def parse_legacy_entries(data: bytes):
    """[(offset, magic, attributes, timestamp, key, value)] of a legacy message set."""
    out = []
    pos = 0
    while pos < len(data):
        offset, size = struct.unpack_from(">qi", data, pos)
        msg = data[pos + 12:pos + 12 + size]
        crc, magic, attributes = struct.unpack_from(">Ibb", msg, 0)
        assert crc == zlib.crc32(msg[4:]), "CRC-32 from the magic byte"
        p = 6
        timestamp = -1
        if magic == 1:
            (timestamp,) = struct.unpack_from(">q", msg, p)
            p += 8
        fields = []
        for _ in range(2):
            (n,) = struct.unpack_from(">i", msg, p)
            p += 4
            if n < 0:
                fields.append(None)
            else:
                fields.append(msg[p:p + n])
                p += n
        assert p == len(msg)
        out.append((offset, magic, attributes & 0xFF, timestamp, fields[0], fields[1]))
        pos += 12 + size
    return out
