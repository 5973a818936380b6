"""Small helpers shared by the unit and property tests: byte readers written for the tests,
fakes of the broker's parts, and oracles computed the plain way."""

from __future__ import annotations

import os
from dataclasses import dataclass

from kafka.record.memory_records import MemoryRecords

from sundial.records import iter_records
from sundial.storage.log_manager import LogManager


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos``: (value, position after it). Running off the end is a
    ``ValueError``, as a bounds-checked client reader (librdkafka's) treats it as a parse error."""
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("uvarint parsing failed")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def feed_in_pieces(decoder, data: bytes, sizes) -> list[bytes]:
    """Every frame a ``FrameDecoder`` gives for ``data`` fed in pieces of ``sizes`` (cycled)."""
    out, pos, i = [], 0, 0
    while pos < len(data):
        n = sizes[i % len(sizes)]
        i += 1
        out += [bytes(f) for f in decoder.feed(data[pos:pos + n])]
        pos += n
    return out


def selected(ranges, logs) -> set:
    """``(tp, offset)`` of every record the pipeline's planned ranges keep: the offset in its range
    and the record's timestamp (from the fake ``logs``) inside the range's time window."""
    out = set()
    for r in ranges:
        for off in range(r.start, r.end):
            ts = logs[r.tp].timestamps[off]
            if r.min_timestamp_ms is not None and ts < r.min_timestamp_ms:
                continue
            if r.max_timestamp_ms is not None and ts >= r.max_timestamp_ms:
                continue
            out.add((r.tp, off))
    return out


def records_on_disk(log) -> list[tuple[int, int]]:
    """``(offset, timestamp)`` of every record in a partition log's segment files, read from the files."""
    out = []
    for seg in log.segments:
        data = os.pread(seg.fd, seg.size_bytes, 0)
        out.extend((r.offset, r.timestamp) for r in iter_records(data))
    return out


class LogsByPartition:
    """The log manager's ``get_log`` over a dict ``{(topic, partition): log}``."""

    def __init__(self, logs) -> None:
        self.logs = logs

    def get_log(self, topic, partition):
        return self.logs.get((topic, partition))


class RecordingPurgatory:
    """A fetch purgatory that records the partitions it is told about, in order (``woken``)."""

    def __init__(self) -> None:
        self.woken = []

    def notify(self, topic, partition) -> None:
        self.woken.append((topic, partition))


def started_manager(dirs, **explicit):
    """A started LogManager over ``dirs`` with the ``explicit`` settings (by Kafka name), deleted
    segments removed at once (``log.segment.delete.delay.ms`` 0) unless they say otherwise."""
    mgr = LogManager(dirs, {"log.segment.delete.delay.ms": 0, **explicit})
    mgr.startup()
    return mgr


@dataclass
class HandlerContext:
    """What a request handler reads of its ``RequestContext``, with a test client's values."""

    broker: object
    api_version: int
    client_id: str = "client-1"
    client_host: str = "127.0.0.1"
    principal: str = "User:ANONYMOUS"
    listener_name: str = "PLAINTEXT"
    correlation_id: int = 1


def kafka_python_records(data) -> list[tuple]:
    """``(offset, timestamp, key, value)`` of every record in ``data`` as kafka-python's reader sees it."""
    out = []
    records = MemoryRecords(bytes(data))
    while records.has_next():
        out += [(r.offset, r.timestamp, r.key, r.value) for r in records.next_batch()]
    return out


class ManualClock:
    """A ``now_ms`` a test moves by hand (``clock.now += ...``)."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now
