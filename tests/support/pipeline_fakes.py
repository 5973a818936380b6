"""Test doubles and builders for the pipeline unit tests (no broker, no JVM).

* :class:`FakeLog` / :class:`FakeOffsetClient`: partitions as plain lists of
  (offset, timestamp) with a log start offset; every answer is computed by brute force
  over those lists, so it is the ground truth the planner is checked against.
* :func:`build_batch`: a v2 record batch built by kafka-python's
  ``DefaultRecordBatchBuilder`` (an independent encoder), then patched for what a
  broker sets (base offset, LogAppendTime, control/transactional flags, compression
  with cramjam) with the CRC-32C recomputed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import cramjam
import crc32c

from sundial.pipeline.offsets import TopicPartition
from sundial.pipeline.options import Subscription

# --- fake offset client ----------------------------------------------------------------


@dataclass
class FakeLog:
    timestamps: list[int] = field(default_factory=list)   # timestamp of offset i
    log_start: int = 0

    @property
    def log_end(self) -> int:
        return len(self.timestamps)

    def first_at_or_after(self, ts: int) -> int | None:
        for offset in range(self.log_start, self.log_end):
            if self.timestamps[offset] >= ts:
                return offset
        return None


class FakeOffsetClient:
    def __init__(self, logs: dict[TopicPartition, FakeLog]) -> None:
        self.logs = logs
        self.calls: list[str] = []

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        self.calls.append("partitions")
        if subscription.kind == "assign":
            return sorted(subscription.assigned)
        return sorted(tp for tp in self.logs if subscription.matches(tp.topic))

    def earliest_offsets(self, tps):
        self.calls.append("earliest")
        return {tp: self.logs[tp].log_start for tp in tps}

    def latest_offsets(self, tps):
        self.calls.append("latest")
        return {tp: self.logs[tp].log_end for tp in tps}

    def offsets_for_times(self, timestamps):
        self.calls.append("for_times")
        return {tp: self.logs[tp].first_at_or_after(ts) for tp, ts in timestamps.items()}

    def close(self) -> None:
        self.calls.append("close")


# --- record batches ----------------------------------------------------------------------

_CRC_AT = 17
_ATTR_AT = 21
_MAX_TS_AT = 35


def build_batch(records, *, base_offset: int = 0, codec: int = 0, log_append_time_ms: int | None = None,
                producer_id: int = -1, transactional: bool = False, control: bool = False) -> bytes:
    """records: (offset_delta, timestamp_ms, key, value, headers) tuples."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for delta, ts, key, value, headers in records:
        builder.append(delta, timestamp=ts, key=key, value=value, headers=list(headers or []))
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    if codec:
        body = bytes(data[61:])
        compressed = {
            1: lambda b: bytes(cramjam.gzip.compress(b)),
            2: lambda b: bytes(cramjam.snappy.compress_raw(b)),
            3: lambda b: bytes(cramjam.lz4.compress(b)),
            4: lambda b: bytes(cramjam.zstd.compress(b)),
        }[codec](body)
        data = data[:61] + compressed
        struct.pack_into(">i", data, 8, len(data) - 12)
    attrs = struct.unpack_from(">h", data, _ATTR_AT)[0] | codec
    if log_append_time_ms is not None:
        attrs |= 0x08
        struct.pack_into(">q", data, _MAX_TS_AT, log_append_time_ms)
    if transactional:
        attrs |= 0x10
    if control:
        attrs |= 0x20
    struct.pack_into(">h", data, _ATTR_AT, attrs)
    if producer_id >= 0:
        struct.pack_into(">qhi", data, 43, producer_id, 0, 0)
    struct.pack_into(">I", data, _CRC_AT, crc32c.crc32c(bytes(data[_ATTR_AT:])))
    return bytes(data)


def control_batch(base_offset: int, producer_id: int, *, abort: bool, ts: int = 0) -> bytes:
    key = struct.pack(">hh", 0, 0 if abort else 1)
    value = struct.pack(">hi", 0, 0)
    return build_batch([(0, ts, key, value, [])], base_offset=base_offset, producer_id=producer_id,
                       transactional=True, control=True)


def xerial_snappy(body: bytes, block_bytes: int = 32 * 1024) -> bytes:
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(body), block_bytes):
        block = bytes(cramjam.snappy.compress_raw(body[i:i + block_bytes]))
        out += struct.pack(">i", len(block)) + block
    return bytes(out)
