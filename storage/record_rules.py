"""The rules a batch and its records must satisfy on append (Kafka ``LogValidator``'s
``validateBatch``, ``validateRecord`` and ``validateRecordCompression``; reference §3.3, §3.5).

Used by :mod:`storage.validator`, which decides the path (in place, recompressed,
rebuilt) and assigns offsets. Batch rules raise at the first failure; record rules are
collected over the whole batch and raised together, as Produce v8+ reports them:
``InvalidTimestampError`` when any is a timestamp error, else ``InvalidRecordError``,
each with ``record_errors = [(batch_index, message)]``. A legacy inner CRC mismatch
raises ``CorruptRecordError`` at once.
"""

from __future__ import annotations

from typing import Sequence

from sundial.config.topic import TopicConfig
from sundial.records import codecs
from sundial.records.batch import BatchView
from sundial.records.framing import iter_records
from sundial.records.layout import LOG_APPEND_TIME, MAGIC_V0, MAGIC_V1, MAGIC_V2, NO_TIMESTAMP
from sundial.records.legacy import legacy_inner_messages
from sundial.records.record import Record
from sundial.records.v2 import iter_v2_records

from .errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    UnsupportedForMessageFormatError,
)
from .origin import AppendOrigin


def timestamp_window(config: TopicConfig, now_ms: int) -> tuple[int, int]:
    """(lowest, highest) CreateTime accepted at ``now_ms``: ``message.timestamp.before.max.ms``
    before the clock, ``message.timestamp.after.max.ms`` after it."""
    return now_ms - config.message_timestamp_before_max_ms, now_ms + config.message_timestamp_after_max_ms


class ValidationContext:
    """One append's settings as the rules need them (topic config, clock, origin, codecs)."""

    __slots__ = ("config", "now_ms", "leader_epoch", "client", "to_magic", "source", "target", "log_append",
                 "bounded", "compact", "before_ms", "after_ms", "lowest_ms", "highest_ms")

    def __init__(self, config: TopicConfig, now_ms: int, leader_epoch: int, origin: AppendOrigin, source: int,
                 target: int) -> None:
        self.config = config
        self.now_ms = now_ms
        self.leader_epoch = leader_epoch
        self.client = origin is AppendOrigin.CLIENT
        self.to_magic = config.record_version
        self.source = source
        self.target = target
        self.log_append = config.is_log_append_time
        self.bounded = config.timestamp_bounded and not self.log_append
        self.compact = config.compact
        self.before_ms = config.message_timestamp_before_max_ms
        self.after_ms = config.message_timestamp_after_max_ms
        self.lowest_ms, self.highest_ms = timestamp_window(config, now_ms)


# ---------------------------------------------------------------- batch rules

def validate_batch(first: BatchView, batch: BatchView, ctx: ValidationContext) -> None:
    if first.magic != batch.magic:
        raise InvalidRecordError(
            f"Batch magic {batch.magic} is not the same as the first batch's magic byte {first.magic}")
    if ctx.client:
        if batch.magic >= MAGIC_V2:
            count_from_offsets = batch.last_offset_delta + 1
            if count_from_offsets <= 0:
                raise InvalidRecordError(
                    f"Batch has an invalid offset range: [{batch.base_offset}, {batch.last_offset}]")
            count = batch.record_count
            if count <= 0:
                raise InvalidRecordError(f"Invalid reported count for record batch: {count}")
            if count_from_offsets != count:
                raise InvalidRecordError(
                    f"Inconsistent batch offset range [{batch.base_offset}, {batch.last_offset}] "
                    f"and count of records {count}")
        if batch.is_control:
            raise InvalidRecordError("Clients are not allowed to write control records")
        if batch.has_producer_id and batch.base_sequence < 0:
            raise InvalidRecordError(
                f"Invalid sequence number {batch.base_sequence} in record batch with producerId {batch.producer_id}")
    if batch.is_transactional and ctx.to_magic < MAGIC_V2:
        raise UnsupportedForMessageFormatError(
            f"Transactional records cannot be used with magic version {ctx.to_magic}")
    if batch.has_producer_id and ctx.to_magic < MAGIC_V2:
        raise UnsupportedForMessageFormatError(f"Idempotent records cannot be used with magic version {ctx.to_magic}")


# ---------------------------------------------------------------- record rules

def timestamp_error(ctx: ValidationContext, ts: int, batch_is_log_append: bool, offset: int) -> str | None:
    if not ctx.log_append and ts != NO_TIMESTAMP:
        if ts < ctx.lowest_ms or ts > ctx.highest_ms:
            return (f"Timestamp {ts} of message with offset {offset} is out of range. "
                    f"The timestamp should be within [{ctx.lowest_ms}, {ctx.highest_ms}]")
    elif batch_is_log_append:
        return (f"Invalid timestamp type in message with offset {offset}. "
                "Producer should not set timestamp type to LogAppendTime.")
    return None


def raise_record_errors(errors: list[tuple[int, str, bool]]) -> None:
    """errors: (batch_index, message, is_timestamp_error)."""
    if not errors:
        return
    record_errors = [(i, m) for i, m, _ in errors]
    if any(t for _, _, t in errors):
        raise InvalidTimestampError("One or more records have been rejected due to invalid timestamp",
                                    record_errors)
    raise InvalidRecordError(
        f"One or more records have been rejected due to {len(record_errors)} record errors in total, and only "
        f"showing the first three errors at most: {record_errors[:3]}", record_errors)


class RecordToCheck:
    """A record as the validator sees it (reader semantics + what the checks need)."""

    __slots__ = ("offset", "timestamp", "key", "value", "headers", "magic", "compressed", "crc_valid")

    def __init__(self, offset, timestamp, key, value, headers, magic, compressed=False, crc_valid=True):
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers
        self.magic = magic
        self.compressed = compressed
        self.crc_valid = crc_valid


def records_of(view: BatchView) -> list[RecordToCheck]:
    if view.magic == MAGIC_V2:
        return [RecordToCheck(r.offset, r.timestamp, r.key, r.value, r.headers, MAGIC_V2)
                for r in iter_v2_records(view)]
    if view.compression == codecs.NONE:
        (r,) = _legacy_as_records(view)
        return [RecordToCheck(r.offset, r.timestamp, r.key, r.value, (), view.magic)]
    out = []
    wrapper_lat = view.timestamp_type == LOG_APPEND_TIME
    for m in legacy_inner_messages(view):
        if m.magic == MAGIC_V0:
            ts = NO_TIMESTAMP
        elif wrapper_lat:
            ts = view.max_timestamp
        else:
            ts = m.timestamp
        out.append(RecordToCheck(m.offset, ts, m.key, m.value, (), m.magic, (m.attributes & 0x07) != 0, m.crc_valid))
    return out


def _legacy_as_records(view: BatchView) -> list[Record]:
    return list(iter_records(view))


def check_records(view: BatchView, recs: Sequence[RecordToCheck], ctx: ValidationContext, *, compressed_source: bool,
                   rebuilding: bool) -> None:
    """Kafka ``validateRecordCompression`` + ``validateRecord`` for every record of one batch."""
    errors: list[tuple[int, str, bool]] = []
    batch_lat = view.timestamp_type == LOG_APPEND_TIME
    legacy_compressed = view.magic <= MAGIC_V1 and view.compression != codecs.NONE
    for index, rec in enumerate(recs):
        if compressed_source and rec.compressed:
            errors.append((index, "Compressed outer record should not have an inner record with a compression "
                                  f"attribute set: offset {rec.offset}", False))
            continue
        if rec.magic != view.magic:
            errors.append((index, f"Record at offset {rec.offset}'s magic {rec.magic} does not match outer magic "
                                  f"{view.magic}", False))
            continue
        if legacy_compressed and not rec.crc_valid:
            raise CorruptRecordError(f"Record at inner offset {rec.offset} is corrupt (stored crc does not match)")
        if ctx.compact and rec.key is None:
            errors.append((index, "Compacted topic cannot accept message without key", False))
            continue
        message = timestamp_error(ctx, rec.timestamp, batch_lat, rec.offset)
        if message is None and rebuilding and rec.timestamp < NO_TIMESTAMP:
            message = f"Invalid negative timestamp {rec.timestamp} of message with offset {rec.offset}"
        if message is not None:
            errors.append((index, message, True))
    raise_record_errors(errors)


def check_rebuild_timestamps(recs: Sequence[RecordToCheck]) -> None:
    errors = [(i, f"Invalid negative timestamp {r.timestamp} of message with offset {r.offset}", True)
              for i, r in enumerate(recs) if r.timestamp < NO_TIMESTAMP]
    raise_record_errors(errors)


__all__ = ["ValidationContext", "validate_batch", "timestamp_error", "raise_record_errors", "RecordToCheck",
           "records_of", "check_records", "check_rebuild_timestamps"]
