"""Append-time validation: Kafka's ``analyzeAndValidateRecords`` + ``LogValidator`` (reference §3).

:func:`validate_records` is a pure function of (record bytes, topic config, next offset,
``now_ms``): it never mutates its input and does no I/O. It returns
:class:`ValidatedRecords` whose ``chunks`` are the bytes to append, in order (they may
reference the input buffer: write them before the input is reused), with offsets
assigned from ``next_offset``. Any failure raises and nothing of the append is kept.

Order of checks (§3.1)
----------------------
1. Shallow scan of every entry (:func:`records.framing.iter_batches`: ``size < 14`` or a
   bad magic -> ``CorruptRecordError``; a partial trailing entry is ignored): v2 client
   batches must have base offset 0 (``InvalidRecordError``); each entry, 12-byte
   overhead included, must fit ``max.message.bytes`` (``RecordTooLargeError``); its CRC
   must match (``CorruptRecordError``).
2. v2 or compressed input must be one batch; all batches one magic; client v2 batches
   need ``last_offset_delta + 1 == records_count > 0``; no control batches from
   clients; a producer id needs a base sequence >= 0 (all ``InvalidRecordError``);
   idempotent or transactional data into a topic stored below magic 2 ->
   ``UnsupportedForMessageFormatError``.
3. Record rules, collected over the whole batch (§3.3, §3.5): compacted topics need
   keys; inner messages of a legacy wrapper must be uncompressed and share its magic;
   a legacy inner CRC mismatch raises ``CorruptRecordError`` at once; CreateTime
   records (timestamp -1 exempt) must satisfy ``now - ts <= before_max`` and
   ``ts - now <= after_max``; a producer-set LogAppendTime flag is refused when the
   range branch is not taken (KIP-937 order). Errors are raised as
   ``InvalidTimestampError`` when any is a timestamp error, else ``InvalidRecordError``,
   with ``record_errors = [(batch_index, message)]``.
4. Rebuilt output is re-checked against ``max.message.bytes``; the whole append against
   ``segment.bytes`` (``RecordBatchTooLargeError``).

Paths (§3.2): target magic = ``config.record_version``; target codec =
``compression.type`` (``producer`` keeps the source codec).

* **in place, uncompressed** (codecs none -> none, same magic): a v2 batch gets a new
  61-byte header (base offset, leader epoch, max timestamp/type bit, CRC) and its
  records section is passed through untouched; legacy messages are copied and their
  offsets (and v1 timestamps) rewritten.
* **in place, compressed** (same codec, same magic, magic > 0, v1 inner offsets
  0..n-1): only the batch/wrapper header changes.
* **rebuild** otherwise: records are decoded and re-encoded by ``records.builder`` with
  the target magic and codec (``converted`` is True). A codec change of one canonical
  v2 batch (CreateTime flag, offset deltas 0..n-1, base timestamp = first record's)
  skips the decoding: its records section is recompressed under a new header, which
  is byte for byte what the builder would write (a property test checks it).

What a v2 batch costs on the fast path
--------------------------------------
A v2 batch kept in place is *not* decoded into record objects. One structural walk
(``scan_v2_records``, C-accelerated, about 25 ns per record) checks the record count,
every record's length and varints and the absence of trailing bytes, and yields
min/max timestamps, key presence and whether offset deltas are 0..n-1 (else: rebuild,
as Kafka does for compressed input). The walk runs for every batch, as Kafka's
validator iterates every record: a batch whose count or lengths lie, or whose
compressed payload is corrupt or inflates past the limit, is refused instead of
stored for consumers to choke on. Records are decoded only when a rule fails
(timestamp bounds, null keys in a compacted topic) to report each bad record.
LogAppendTime stamping is a header patch plus one CRC-32C pass over the batch.
Legacy input is always parsed.

Max timestamp and its offset (§3.6): per path as ``LogValidator``; the offset is the
*shallow* one (last offset of the batch holding the max; v0/v1 uncompressed: the
message). The record-level offset of the max timestamp is found at search time with
``records.search.first_record_with_timestamp`` (KAFKA-16310). Magic 0 output has no
timestamps: (-1, -1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from crc32c import crc32c

from config.topic import TopicConfig
from records import codecs
from records.batch import BatchView
from records.builder import build_records, v2_header
from records.framing import iter_batches, iter_records
from records.layout import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    CRC_OFFSET,
    CREATE_TIME,
    INT16,
    INT32,
    INT64,
    LOG_APPEND_TIME,
    MAGIC_V0,
    MAGIC_V1,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    UINT32,
    v2_attributes,
)
from records.legacy import legacy_inner_messages
from records.record import Record
from records.v2 import iter_v2_records, scan_v2_records
from records.walks import crc32c_extend, first_record_header

from .errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)

ORIGIN_CLIENT = "client"
ORIGIN_COORDINATOR = "coordinator"
ORIGIN_REPLICATION = "replication"



@dataclass(frozen=True, slots=True)
class BatchInfo:
    """Producer state of one appended batch (v2); legacy output is summarised with producer id -1."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    record_count: int
    is_transactional: bool
    max_timestamp: int


@dataclass(slots=True)
class ValidatedRecords:
    """What to append. ``chunks`` concatenated are the bytes (``buffer`` joins them)."""

    chunks: tuple
    first_offset: int
    last_offset: int
    record_count: int
    max_timestamp_ms: int
    shallow_offset_of_max_timestamp: int
    log_append_time_ms: int
    converted: bool
    batches: list[BatchInfo] = field(default_factory=list)
    size_bytes: int = 0

    @property
    def buffer(self):
        if len(self.chunks) == 1:
            return self.chunks[0]
        return b"".join(self.chunks)


class _Ctx:
    __slots__ = ("config", "now_ms", "leader_epoch", "client", "to_magic", "source", "target", "log_append",
                 "bounded", "compact", "before_ms", "after_ms", "lowest_ms", "highest_ms")

    def __init__(self, config: TopicConfig, now_ms: int, leader_epoch: int, origin: str, source: int,
                 target: int) -> None:
        self.config = config
        self.now_ms = now_ms
        self.leader_epoch = leader_epoch
        self.client = origin == ORIGIN_CLIENT
        self.to_magic = config.record_version
        self.source = source
        self.target = target
        self.log_append = config.is_log_append_time
        self.bounded = config.timestamp_bounded and not self.log_append
        self.compact = config.compact
        self.before_ms = config.message_timestamp_before_max_ms
        self.after_ms = config.message_timestamp_after_max_ms
        self.lowest_ms = now_ms - self.before_ms
        self.highest_ms = now_ms + self.after_ms


# ---------------------------------------------------------------- entry point

def validate_records(records, *, config: TopicConfig, next_offset: int, now_ms: int, leader_epoch: int = 0,
                     origin: str = ORIGIN_CLIENT) -> ValidatedRecords:
    """Validate ``records`` (bytes-like, one partition's data) for an append at ``next_offset``.

    ``origin`` is ``"client"`` (Produce: all client rules apply) or ``"coordinator"``.
    An input holding no complete entry gives ``record_count == 0`` and no chunks.
    """
    views = _analyze(records, config, origin)
    if not views:
        return ValidatedRecords((), -1, -1, 0, NO_TIMESTAMP, -1, NO_TIMESTAMP, False, [], 0)
    source = codecs.NONE
    for view in views:
        if view.compression != codecs.NONE:
            source = view.compression
    if config.compression_type == "producer":
        target = source
    else:
        target = codecs.codec_id(config.compression_type)
    ctx = _Ctx(config, now_ms, leader_epoch, origin, source, target)
    first = views[0]
    if (first.magic >= MAGIC_V2 or source != codecs.NONE) and len(views) > 1:
        raise InvalidRecordError("Compressed outer record has more than one batch")
    if source == codecs.NONE and target == codecs.NONE:
        if all(v.magic == ctx.to_magic for v in views):
            result = _assign_in_place_uncompressed(views, ctx, next_offset)
        else:
            result = _convert_uncompressed(views, ctx, next_offset)
    else:
        result = _validate_compressed(views, ctx, next_offset)
    if result.size_bytes > config.segment_bytes:
        raise RecordBatchTooLargeError(
            f"the appended record set is {result.size_bytes} bytes, larger than segment.bytes "
            f"({config.segment_bytes})")
    return result


def _analyze(records, config: TopicConfig, origin: str) -> list[BatchView]:
    views = []
    max_bytes = config.max_message_bytes
    client = origin == ORIGIN_CLIENT
    for view in iter_batches(records):
        if client and view.magic >= MAGIC_V2 and view.base_offset != 0:
            raise InvalidRecordError(
                f"The baseOffset of the record batch in the append should be 0, but it is {view.base_offset}")
        if view.size_bytes > max_bytes:
            raise RecordTooLargeError(
                f"the record batch is {view.size_bytes} bytes, larger than max.message.bytes ({max_bytes})")
        view.ensure_valid()
        views.append(view)
    return views


# ---------------------------------------------------------------- batch rules

def _validate_batch(first: BatchView, batch: BatchView, ctx: _Ctx) -> None:
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

def _timestamp_error(ctx: _Ctx, ts: int, batch_is_log_append: bool, offset: int) -> str | None:
    if not ctx.log_append and ts != NO_TIMESTAMP:
        if ts < ctx.lowest_ms or ts > ctx.highest_ms:
            return (f"Timestamp {ts} of message with offset {offset} is out of range. "
                    f"The timestamp should be within [{ctx.lowest_ms}, {ctx.highest_ms}]")
    elif batch_is_log_append:
        return (f"Invalid timestamp type in message with offset {offset}. "
                "Producer should not set timestamp type to LogAppendTime.")
    return None


def _raise_record_errors(errors: list[tuple[int, str, bool]]) -> None:
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


class _Rec:
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


def _records_of(view: BatchView) -> list[_Rec]:
    if view.magic == MAGIC_V2:
        return [_Rec(r.offset, r.timestamp, r.key, r.value, r.headers, MAGIC_V2) for r in iter_v2_records(view)]
    if view.compression == codecs.NONE:
        (r,) = _legacy_as_records(view)
        return [_Rec(r.offset, r.timestamp, r.key, r.value, (), view.magic)]
    out = []
    wrapper_lat = view.timestamp_type == LOG_APPEND_TIME
    for m in legacy_inner_messages(view):
        if m.magic == MAGIC_V0:
            ts = NO_TIMESTAMP
        elif wrapper_lat:
            ts = view.max_timestamp
        else:
            ts = m.timestamp
        out.append(_Rec(m.offset, ts, m.key, m.value, (), m.magic, (m.attributes & 0x07) != 0, m.crc_valid))
    return out


def _legacy_as_records(view: BatchView) -> list[Record]:
    return list(iter_records(view))


def _check_records(view: BatchView, recs: Sequence[_Rec], ctx: _Ctx, *, compressed_source: bool,
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
        message = _timestamp_error(ctx, rec.timestamp, batch_lat, rec.offset)
        if message is None and rebuilding and rec.timestamp < NO_TIMESTAMP:
            message = f"Invalid negative timestamp {rec.timestamp} of message with offset {rec.offset}"
        if message is not None:
            errors.append((index, message, True))
    _raise_record_errors(errors)


# ---------------------------------------------------------------- v2 header-level checks

def _v2_fast_checks(view: BatchView, ctx: _Ctx) -> tuple[int, bool]:
    """Validate one v2 batch without materialising records.

    Returns (batch max timestamp as Kafka would compute it, offsets sequential). Falls
    back to a full record check (which raises with every record error) when a rule
    fails.
    """
    count = view.record_count
    scan = scan_v2_records(view)  # structure always (module doc); record objects only on a failed rule
    if view.timestamp_type == LOG_APPEND_TIME and count > 0:
        # Reader semantics: every record reports the batch max timestamp.
        ts = view.max_timestamp
        bad = _timestamp_error(ctx, ts, True, view.base_offset)
        if bad is not None or (scan is not None and ctx.compact and scan.first_null_key >= 0):
            _check_records(view, _records_of(view), ctx, compressed_source=False, rebuilding=False)
        return ts, True if scan is None else scan.sequential_offsets
    if scan is None:
        return view.max_timestamp, True
    if ctx.compact and scan.first_null_key >= 0:
        _check_records(view, _records_of(view), ctx, compressed_source=False, rebuilding=False)
    if ctx.bounded and scan.min_timestamp is not None and (
            scan.min_timestamp < ctx.lowest_ms or scan.max_timestamp > ctx.highest_ms):
        _check_records(view, _records_of(view), ctx, compressed_source=False, rebuilding=False)
    return (NO_TIMESTAMP if scan.max_timestamp is None else scan.max_timestamp), scan.sequential_offsets


def _patched_v2_header(view: BatchView, last_offset: int, ctx: _Ctx, timestamp_type: int, max_ts: int):
    """(new 61-byte header, records-section view) for an in-place v2 batch."""
    header = bytearray(view.buf[view.start:view.start + RECORD_BATCH_OVERHEAD])
    payload = view.buf[view.start + RECORD_BATCH_OVERHEAD:view.start + view.size_bytes]
    INT64.pack_into(header, BASE_OFFSET_OFFSET, last_offset - view.last_offset_delta)
    INT32.pack_into(header, PARTITION_LEADER_EPOCH_OFFSET, ctx.leader_epoch)
    if view.timestamp_type != timestamp_type or view.max_timestamp != max_ts:
        attributes = v2_attributes(view.compression, timestamp_type, view.is_transactional, view.is_control)
        INT16.pack_into(header, ATTRIBUTES_OFFSET, attributes)
        INT64.pack_into(header, MAX_TIMESTAMP_OFFSET, max_ts)
        covered = memoryview(header)[ATTRIBUTES_OFFSET:]
        if crc32c_extend is not None:
            # CRC-32C is linear: patch the (already verified) CRC for the changed header bytes
            # instead of a second pass over the records.
            old = view.buf[view.start + ATTRIBUTES_OFFSET:view.start + RECORD_BATCH_OVERHEAD]
            crc = view.crc ^ crc32c_extend(crc32c(covered) ^ crc32c(old), len(payload))
        else:
            crc = crc32c(payload, crc32c(covered))
        UINT32.pack_into(header, CRC_OFFSET, crc)
    return bytes(header), payload


def _v2_in_place(view: BatchView, ctx: _Ctx, next_offset: int, batch_max: int) -> ValidatedRecords:
    count = view.record_count
    last_offset = next_offset + count - 1
    if ctx.log_append:
        header, payload = _patched_v2_header(view, last_offset, ctx, LOG_APPEND_TIME, ctx.now_ms)
        max_ts, shallow = ctx.now_ms, last_offset
        log_append_time = ctx.now_ms
    else:
        header, payload = _patched_v2_header(view, last_offset, ctx, CREATE_TIME, batch_max)
        max_ts = batch_max
        shallow = last_offset if batch_max > NO_TIMESTAMP else -1
        log_append_time = NO_TIMESTAMP
    info = BatchInfo(view.producer_id, view.producer_epoch, view.base_sequence, view.last_sequence, next_offset,
                     last_offset, count, view.is_transactional, max_ts)
    return ValidatedRecords((header, payload), next_offset, last_offset, count, max_ts, shallow, log_append_time,
                            False, [info], view.size_bytes)


# ---------------------------------------------------------------- paths

def _assign_in_place_uncompressed(views: list[BatchView], ctx: _Ctx, next_offset: int) -> ValidatedRecords:
    first = views[0]
    if first.magic == MAGIC_V2:
        _validate_batch(first, first, ctx)
        batch_max, _sequential = _v2_fast_checks(first, ctx)
        return _v2_in_place(first, ctx, next_offset, batch_max)

    # Legacy uncompressed messages: copy, then rewrite offsets (and v1 timestamps) in the copy.
    start, end = first.start, views[-1].end
    copy = bytearray(first.buf[start:end])
    offset = next_offset
    max_ts, shallow = NO_TIMESTAMP, -1
    for view in views:
        _validate_batch(first, view, ctx)
        _check_records(view, _records_of(view), ctx, compressed_source=False, rebuilding=False)
        out = BatchView(memoryview(copy), view.start - start)
        out.set_last_offset(offset)
        if view.magic > MAGIC_V0:
            ts = view.max_timestamp
            if ctx.log_append:
                out.set_max_timestamp(LOG_APPEND_TIME, ctx.now_ms)
            else:
                out.set_max_timestamp(CREATE_TIME, ts)
                if ts > max_ts:
                    max_ts, shallow = ts, offset
        offset += 1
    log_append_time = NO_TIMESTAMP
    if ctx.log_append:
        log_append_time = ctx.now_ms
        if first.magic > MAGIC_V0:
            max_ts, shallow = ctx.now_ms, next_offset
    info = BatchInfo(-1, -1, -1, -1, next_offset, offset - 1, len(views), False, max_ts)
    return ValidatedRecords((bytes(copy),), next_offset, offset - 1, len(views), max_ts, shallow, log_append_time,
                            False, [info], len(copy))


def _convert_uncompressed(views: list[BatchView], ctx: _Ctx, next_offset: int) -> ValidatedRecords:
    first = views[0]
    validated: list[_Rec] = []
    for view in views:
        _validate_batch(first, view, ctx)
        recs = _records_of(view)
        _check_records(view, recs, ctx, compressed_source=False, rebuilding=True)
        validated.extend(recs)
    return _rebuild(first, validated, ctx, next_offset, codecs.NONE)


def _validate_compressed(views: list[BatchView], ctx: _Ctx, next_offset: int) -> ValidatedRecords:
    first = views[0]
    if ctx.target == codecs.ZSTD and ctx.to_magic < MAGIC_V2:
        raise UnsupportedCompressionTypeError(
            f"zstd compression cannot be stored with message format v{ctx.to_magic}")
    in_place = ctx.source == ctx.target
    if first.magic != ctx.to_magic or ctx.to_magic == MAGIC_V0:
        in_place = False
    if ctx.source == codecs.NONE and first.is_control:
        in_place = True

    if in_place and first.magic == MAGIC_V2:
        # One compressed v2 batch kept as is: header work only, unless a rule needs the records.
        _validate_batch(first, first, ctx)
        batch_max, sequential = _v2_fast_checks(first, ctx)
        if sequential:
            return _v2_in_place(first, ctx, next_offset, batch_max)
        in_place = False      # inner offsets are not 0..n-1: rebuild, as Kafka does

    if not in_place and first.magic == MAGIC_V2 and ctx.to_magic == MAGIC_V2 and len(views) == 1:
        recoded = _v2_recompress(first, ctx, next_offset)
        if recoded is not None:
            return recoded

    validated: list[_Rec] = []
    expected_inner = 0
    max_ts = NO_TIMESTAMP
    compressed_source = ctx.source != codecs.NONE
    for view in views:
        _validate_batch(first, view, ctx)
        recs = _records_of(view)
        _check_records(view, recs, ctx, compressed_source=compressed_source, rebuilding=not in_place)
        for rec in recs:
            if view.magic > MAGIC_V0 and ctx.to_magic > MAGIC_V0:
                if rec.timestamp > max_ts:
                    max_ts = rec.timestamp
                if rec.offset != expected_inner:
                    in_place = False
            expected_inner += 1
        validated.extend(recs)
    if not in_place:
        _check_rebuild_timestamps(validated)
        return _rebuild(first, validated, ctx, next_offset, ctx.target)

    # Compressed legacy (v1) wrapper kept in place: rewrite the wrapper only.
    count = len(validated)
    last_offset = next_offset + count - 1
    copy = bytearray(first.data)
    out = BatchView(memoryview(copy), 0)
    out.set_last_offset(last_offset)
    if ctx.log_append:
        max_ts = ctx.now_ms
    out.set_max_timestamp(LOG_APPEND_TIME if ctx.log_append else CREATE_TIME, max_ts)
    info = BatchInfo(-1, -1, -1, -1, next_offset, last_offset, count, False, max_ts)
    return ValidatedRecords((bytes(copy),), next_offset, last_offset, count, max_ts,
                            last_offset, ctx.now_ms if ctx.log_append else NO_TIMESTAMP, False, [info], len(copy))


def _v2_recompress(view: BatchView, ctx: _Ctx, next_offset: int) -> ValidatedRecords | None:
    """Change the codec of one v2 batch without decoding its records, or None to take the slow path.

    The records section of a v2 batch does not depend on the codec. When the batch is
    what Kafka's builder would write anyway (CreateTime flag, offset deltas 0..n-1,
    base timestamp = first record's timestamp, checked by one structural scan), the
    rebuilt batch is the same records section recompressed under a new header, so it is
    produced that way, at codec speed.
    """
    if view.timestamp_type != CREATE_TIME:
        return None
    _validate_batch(view, view, ctx)
    count = view.record_count
    payload = view.records_payload()
    scan = scan_v2_records(view, payload=payload)
    if not scan.sequential_offsets or count <= 0:
        return None
    if first_record_header(payload, 0, len(payload))[0] != 0:
        return None
    if scan.min_timestamp is not None and scan.min_timestamp < NO_TIMESTAMP:
        return None                      # the slow path reports these records
    if (ctx.compact and scan.first_null_key >= 0) or (
            ctx.bounded and scan.min_timestamp is not None
            and (scan.min_timestamp < ctx.lowest_ms or scan.max_timestamp > ctx.highest_ms)):
        _check_records(view, _records_of(view), ctx, compressed_source=view.is_compressed, rebuilding=True)
    max_ts = NO_TIMESTAMP if scan.max_timestamp is None else scan.max_timestamp
    codec = ctx.target
    body = bytes(payload) if codec == codecs.NONE else codecs.compress(codec, payload, magic=MAGIC_V2)
    attributes = codec | (TRANSACTIONAL_FLAG_MASK if view.is_transactional else 0)
    if ctx.log_append:
        attributes |= TIMESTAMP_TYPE_MASK
    last_offset = next_offset + count - 1
    header = v2_header(
        base_offset=next_offset, batch_bytes=RECORD_BATCH_OVERHEAD + len(body),
        partition_leader_epoch=ctx.leader_epoch, attributes=attributes, last_offset_delta=count - 1,
        base_timestamp=view.base_timestamp, max_timestamp=ctx.now_ms if ctx.log_append else max_ts,
        producer_id=view.producer_id, producer_epoch=view.producer_epoch, base_sequence=view.base_sequence,
        record_count=count, payload=body)
    size = len(header) + len(body)
    if size > ctx.config.max_message_bytes:
        raise RecordTooLargeError(
            f"the converted record batch is {size} bytes, larger than max.message.bytes "
            f"({ctx.config.max_message_bytes})")
    if ctx.log_append:
        result_max, shallow, log_append_time = ctx.now_ms, last_offset, ctx.now_ms
    else:
        result_max, shallow, log_append_time = max_ts, (last_offset if max_ts > NO_TIMESTAMP else -1), NO_TIMESTAMP
    last_sequence = view.last_sequence
    info = BatchInfo(view.producer_id, view.producer_epoch, view.base_sequence, last_sequence, next_offset,
                     last_offset, count, view.is_transactional, result_max)
    return ValidatedRecords((header, body), next_offset, last_offset, count, result_max, shallow,
                            log_append_time, True, [info], size)


def _check_rebuild_timestamps(recs: Sequence[_Rec]) -> None:
    errors = [(i, f"Invalid negative timestamp {r.timestamp} of message with offset {r.offset}", True)
              for i, r in enumerate(recs) if r.timestamp < NO_TIMESTAMP]
    _raise_record_errors(errors)


def _rebuild(first: BatchView, recs: list[_Rec], ctx: _Ctx, next_offset: int, codec: int) -> ValidatedRecords:
    to_magic = ctx.to_magic
    if to_magic < MAGIC_V2 and any(r.headers for r in recs):
        raise UnsupportedForMessageFormatError(f"record headers cannot be stored with message format v{to_magic}")
    built = build_records(
        to_magic, recs, base_offset=next_offset, compression=codec,
        timestamp_type=LOG_APPEND_TIME if ctx.log_append else CREATE_TIME, log_append_time_ms=ctx.now_ms,
        producer_id=first.producer_id, producer_epoch=first.producer_epoch, base_sequence=first.base_sequence,
        is_transactional=first.is_transactional, partition_leader_epoch=ctx.leader_epoch)
    buffer = built.buffer
    max_message_bytes = ctx.config.max_message_bytes
    batches: list[BatchInfo] = []
    for view in iter_batches(buffer):
        if view.size_bytes > max_message_bytes:
            raise RecordTooLargeError(
                f"the converted record batch is {view.size_bytes} bytes, larger than max.message.bytes "
                f"({max_message_bytes})")
        if to_magic == MAGIC_V2 or view.compression != codecs.NONE:
            batches.append(BatchInfo(view.producer_id, view.producer_epoch, view.base_sequence, view.last_sequence,
                                     view.base_offset, view.last_offset, view.record_count, view.is_transactional,
                                     view.max_timestamp))
    if not batches:
        batches.append(BatchInfo(-1, -1, -1, -1, built.base_offset, built.last_offset, built.record_count, False,
                                 built.max_timestamp))
    return ValidatedRecords((buffer,), built.base_offset, built.last_offset, built.record_count,
                            built.max_timestamp, built.shallow_offset_of_max_timestamp,
                            ctx.now_ms if ctx.log_append else NO_TIMESTAMP, True, batches, len(buffer))


__all__ = ["validate_records", "ValidatedRecords", "BatchInfo", "ORIGIN_CLIENT", "ORIGIN_COORDINATOR",
           "ORIGIN_REPLICATION"]
