"""Append-time validation: Kafka's ``analyzeAndValidateRecords`` + ``LogValidator`` (reference §3).

:func:`validate_records` is a pure function of (record bytes, topic config, next offset,
``now_ms``): it never mutates its input and does no I/O. It returns
:class:`ValidatedRecords` whose ``chunks`` are the bytes to append, in order (they may
reference the input buffer: write them before the input is reused), with offsets
assigned from ``next_offset``. Any failure raises and nothing of the append is kept.
The batch and record rules (steps 2 and 3 below) are :mod:`storage.record_rules`; the
bytes are read and written through the record package (:mod:`records`).

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

The one-batch shortcut
----------------------
What a client sends almost always (one v2 batch, CRC intact, stored in place as magic 2
with its own codec, CreateTime flag, offset deltas 0..n-1, every rule met) is validated by
``_one_batch_in_place`` in one pass over the header fields, with the same CRC check,
decompression and structural walk as below. It decides nothing else: on anything
unusual, a failed rule included, it returns None and :func:`validate_general` runs the
whole procedure described here from the start, so refusals and the other paths keep one
home (tests/property/test_validator_shortcut.py checks the two agree).

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
from typing import NamedTuple

from crc32c import crc32c

from sundial.config.topic import TopicConfig
from sundial.records import codecs, walks
from sundial.records.batch import BatchView, last_sequence_of
from sundial.records.builder import build_records, v2_header
from sundial.records.framing import iter_batches
from sundial.records.layout import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    CREATE_TIME,
    INT16,
    INT32,
    INT64,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_V0,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    UINT32,
    V2_HEADER,
    v2_attributes,
)
from sundial.records.v2 import scan_v2_records
from sundial.records.walks import crc32c_extend, first_record_header

from .errors import (
    InvalidRecordError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from .origin import AppendOrigin
from .record_rules import (
    RecordToCheck,
    ValidationContext,
    check_rebuild_timestamps,
    check_records,
    records_of,
    timestamp_error,
    timestamp_window,
    validate_batch,
)

_unpack_v2_header = V2_HEADER.unpack_from


class BatchInfo(NamedTuple):
    """Producer state of one appended batch (v2); legacy output is summarised with producer id -1.

    A named tuple: immutable, and built in a fraction of a frozen dataclass's time (one per
    appended batch)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    record_count: int
    is_transactional: bool
    max_timestamp: int
    is_control: bool = False


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


# ---------------------------------------------------------------- entry point

def validate_records(records, *, config: TopicConfig, next_offset: int, now_ms: int, leader_epoch: int = 0,
                     origin: AppendOrigin = AppendOrigin.CLIENT) -> ValidatedRecords:
    """Validate ``records`` (bytes-like, one partition's data) for an append at ``next_offset``.

    ``origin`` is :attr:`AppendOrigin.CLIENT` (Produce: all client rules apply) or
    :attr:`AppendOrigin.COORDINATOR`.
    An input holding no complete entry gives ``record_count == 0`` and no chunks.
    """
    if origin is AppendOrigin.CLIENT:
        fast = _one_batch_in_place(records, config, next_offset, now_ms, leader_epoch)
        if fast is not None:
            return fast
    return validate_general(records, config=config, next_offset=next_offset, now_ms=now_ms,
                            leader_epoch=leader_epoch, origin=origin)


def validate_general(records, *, config: TopicConfig, next_offset: int, now_ms: int, leader_epoch: int = 0,
                     origin: AppendOrigin = AppendOrigin.CLIENT) -> ValidatedRecords:
    """:func:`validate_records` without the one-batch shortcut: every path, every rule."""
    views = _analyze(records, config, origin)
    if not views:
        return ValidatedRecords((), -1, -1, 0, NO_TIMESTAMP, -1, NO_TIMESTAMP, False, [], 0)
    source = codecs.NONE
    for view in views:
        if view.compression != codecs.NONE:
            source = view.compression
    target = _stored_codec(config, source)
    ctx = ValidationContext(config, now_ms, leader_epoch, origin, source, target)
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


def _stored_codec(config: TopicConfig, source: int) -> int:
    """The codec a batch compressed with ``source`` is stored with (``compression.type``)."""
    wanted = config.compression_type
    return source if wanted == "producer" else codecs.codec_id(wanted)


def _analyze(records, config: TopicConfig, origin: AppendOrigin) -> list[BatchView]:
    views = []
    max_bytes = config.max_message_bytes
    client = origin is AppendOrigin.CLIENT
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


# ---------------------------------------------------------------- v2 header-level checks

def _v2_fast_checks(view: BatchView, ctx: ValidationContext) -> tuple[int, bool]:
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
        bad = timestamp_error(ctx, ts, True, view.base_offset)
        if bad is not None or (scan is not None and ctx.compact and scan.first_null_key >= 0):
            check_records(view, records_of(view), ctx, compressed_source=False, rebuilding=False)
        return ts, True if scan is None else scan.sequential_offsets
    if scan is None:
        return view.max_timestamp, True
    if ctx.compact and scan.first_null_key >= 0:
        check_records(view, records_of(view), ctx, compressed_source=False, rebuilding=False)
    if ctx.bounded and scan.min_timestamp is not None and (
            scan.min_timestamp < ctx.lowest_ms or scan.max_timestamp > ctx.highest_ms):
        check_records(view, records_of(view), ctx, compressed_source=False, rebuilding=False)
    return (NO_TIMESTAMP if scan.max_timestamp is None else scan.max_timestamp), scan.sequential_offsets


def _in_place_header(entry: memoryview, base_offset: int, leader_epoch: int, crc: int, attributes: int,
                     max_ts: int, new_attributes: int, new_max_ts: int):
    """(new 61-byte header, records-section view) of the v2 batch ``entry`` (its CRC ``crc``,
    already verified) kept in place: base offset and leader epoch set; when the timestamp
    type or the max timestamp changes, attributes become ``new_attributes`` and the max
    timestamp ``new_max_ts`` (else the header keeps its own), the CRC patched for them."""
    header = bytearray(entry[:RECORD_BATCH_OVERHEAD])
    payload = entry[RECORD_BATCH_OVERHEAD:]
    INT64.pack_into(header, BASE_OFFSET_OFFSET, base_offset)
    INT32.pack_into(header, PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
    if (attributes ^ new_attributes) & TIMESTAMP_TYPE_MASK or max_ts != new_max_ts:
        INT16.pack_into(header, ATTRIBUTES_OFFSET, new_attributes)
        INT64.pack_into(header, MAX_TIMESTAMP_OFFSET, new_max_ts)
        covered = memoryview(header)[ATTRIBUTES_OFFSET:]
        if crc32c_extend is not None:
            # CRC-32C is linear: patch the (already verified) CRC for the changed header bytes
            # instead of a second pass over the records.
            old = entry[ATTRIBUTES_OFFSET:RECORD_BATCH_OVERHEAD]
            crc ^= crc32c_extend(crc32c(covered) ^ crc32c(old), len(payload))
        else:
            crc = crc32c(payload, crc32c(covered))
        UINT32.pack_into(header, CRC_OFFSET, crc)
    return bytes(header), payload


def _v2_in_place(view: BatchView, ctx: ValidationContext, next_offset: int, batch_max: int) -> ValidatedRecords:
    return _in_place_result(view.buf[view.start:view.start + view.size_bytes],
                            _unpack_v2_header(view.buf, view.start), next_offset, ctx.leader_epoch, ctx.log_append,
                            ctx.now_ms, batch_max)


def _in_place_result(entry: memoryview, fields: tuple, next_offset: int, leader_epoch: int, log_append: bool,
                     now_ms: int, batch_max: int) -> ValidatedRecords:
    """The append of the v2 batch ``entry`` kept in place (``fields``: its unpacked
    ``V2_HEADER``): offsets from ``next_offset``, LogAppendTime stamped or ``batch_max``
    (the records' max CreateTime) as max timestamp, and the producer fields."""
    (_base, _length, _epoch, _magic, crc, attributes, last_delta, _base_ts, max_ts, producer_id, producer_epoch,
     base_sequence, count) = fields
    last_offset = next_offset + count - 1
    if log_append:
        timestamp_type, new_max_ts, shallow, log_append_time = LOG_APPEND_TIME, now_ms, last_offset, now_ms
    else:
        timestamp_type, new_max_ts, log_append_time = CREATE_TIME, batch_max, NO_TIMESTAMP
        shallow = last_offset if batch_max > NO_TIMESTAMP else -1
    transactional = bool(attributes & TRANSACTIONAL_FLAG_MASK)
    control = bool(attributes & CONTROL_FLAG_MASK)
    new_attributes = v2_attributes(attributes & COMPRESSION_CODEC_MASK, timestamp_type, transactional, control)
    header, payload = _in_place_header(entry, last_offset - last_delta, leader_epoch, crc, attributes, max_ts,
                                       new_attributes, new_max_ts)
    info = BatchInfo(producer_id, producer_epoch, base_sequence, last_sequence_of(base_sequence, last_delta),
                     next_offset, last_offset, count, transactional, new_max_ts, control)
    return ValidatedRecords((header, payload), next_offset, last_offset, count, new_max_ts, shallow, log_append_time,
                            False, [info], len(entry))


# ---------------------------------------------------------------- the one-batch shortcut

def _one_batch_in_place(records, config: TopicConfig, next_offset: int, now_ms: int,
                        leader_epoch: int) -> ValidatedRecords | None:
    """What a client's Produce carries almost always, validated in one pass, or None.

    The case: ``records`` is exactly one v2 batch (nothing after it), CRC intact, kept in
    place (topic stored as magic 2, codec kept), CreateTime flag, offset deltas 0..n-1,
    every rule satisfied. Anything else, a failed rule included, returns None and
    :func:`validate_general` runs from the start: it raises the errors and takes the
    other paths, so this function never decides a refusal and its result is exactly what
    that one would return (a property test compares them).
    """
    mv = records if type(records) is memoryview else memoryview(records)
    size = len(mv)
    if size < RECORD_BATCH_OVERHEAD or mv.format != "B" or mv.ndim != 1:
        return None
    fields = _unpack_v2_header(mv, 0)
    (base_offset, length, _epoch, magic, crc, attributes, last_delta, base_ts, _max_ts, producer_id, _producer_epoch,
     base_sequence, count) = fields
    if (magic != MAGIC_V2 or length + LOG_OVERHEAD != size or base_offset != 0 or count <= 0
            or last_delta + 1 != count or attributes & (TIMESTAMP_TYPE_MASK | CONTROL_FLAG_MASK)
            or (producer_id > NO_PRODUCER_ID and base_sequence < 0) or size > config.max_message_bytes
            or size > config.segment_bytes or config.record_version != MAGIC_V2):
        return None
    codec = attributes & COMPRESSION_CODEC_MASK
    if _stored_codec(config, codec) != codec or crc32c(mv[ATTRIBUTES_OFFSET:]) != crc:
        return None
    try:
        if codec == codecs.NONE:
            scan = walks._scan_v2(mv, RECORD_BATCH_OVERHEAD, size, count, base_ts)
        else:
            payload = codecs.decompress(codec, mv[RECORD_BATCH_OVERHEAD:], magic=MAGIC_V2, scratch=True)
            scan = walks._scan_v2(payload, 0, len(payload), count, base_ts)
    except Exception:  # the general path raises it again, as the refusal it is
        return None
    if scan is None or not scan.sequential_offsets or (config.compact and scan.first_null_key >= 0):
        return None
    log_append = config.is_log_append_time
    if not log_append and scan.min_timestamp is not None and config.timestamp_bounded:
        lowest_ms, highest_ms = timestamp_window(config, now_ms)
        if scan.min_timestamp < lowest_ms or scan.max_timestamp > highest_ms:
            return None
    batch_max = NO_TIMESTAMP if scan.max_timestamp is None else scan.max_timestamp
    return _in_place_result(mv, fields, next_offset, leader_epoch, log_append, now_ms, batch_max)


# ---------------------------------------------------------------- paths

def _assign_in_place_uncompressed(views: list[BatchView], ctx: ValidationContext, next_offset: int) -> ValidatedRecords:
    first = views[0]
    if first.magic == MAGIC_V2:
        validate_batch(first, first, ctx)
        batch_max, _sequential = _v2_fast_checks(first, ctx)
        return _v2_in_place(first, ctx, next_offset, batch_max)

    # Legacy uncompressed messages: copy, then rewrite offsets (and v1 timestamps) in the copy.
    start, end = first.start, views[-1].end
    copy = bytearray(first.buf[start:end])
    offset = next_offset
    max_ts, shallow = NO_TIMESTAMP, -1
    for view in views:
        validate_batch(first, view, ctx)
        check_records(view, records_of(view), ctx, compressed_source=False, rebuilding=False)
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


def _convert_uncompressed(views: list[BatchView], ctx: ValidationContext, next_offset: int) -> ValidatedRecords:
    first = views[0]
    validated: list[RecordToCheck] = []
    for view in views:
        validate_batch(first, view, ctx)
        recs = records_of(view)
        check_records(view, recs, ctx, compressed_source=False, rebuilding=True)
        validated.extend(recs)
    return _rebuild(first, validated, ctx, next_offset, codecs.NONE)


def _validate_compressed(views: list[BatchView], ctx: ValidationContext, next_offset: int) -> ValidatedRecords:
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
        validate_batch(first, first, ctx)
        batch_max, sequential = _v2_fast_checks(first, ctx)
        if sequential:
            return _v2_in_place(first, ctx, next_offset, batch_max)
        in_place = False      # inner offsets are not 0..n-1: rebuild, as Kafka does

    if not in_place and first.magic == MAGIC_V2 and ctx.to_magic == MAGIC_V2 and len(views) == 1:
        recoded = _v2_recompress(first, ctx, next_offset)
        if recoded is not None:
            return recoded

    validated: list[RecordToCheck] = []
    expected_inner = 0
    max_ts = NO_TIMESTAMP
    compressed_source = ctx.source != codecs.NONE
    for view in views:
        validate_batch(first, view, ctx)
        recs = records_of(view)
        check_records(view, recs, ctx, compressed_source=compressed_source, rebuilding=not in_place)
        for rec in recs:
            if view.magic > MAGIC_V0 and ctx.to_magic > MAGIC_V0:
                if rec.timestamp > max_ts:
                    max_ts = rec.timestamp
                if rec.offset != expected_inner:
                    in_place = False
            expected_inner += 1
        validated.extend(recs)
    if not in_place:
        check_rebuild_timestamps(validated)
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


def _v2_recompress(view: BatchView, ctx: ValidationContext, next_offset: int) -> ValidatedRecords | None:
    """Change the codec of one v2 batch without decoding its records, or None to take the slow path.

    The records section of a v2 batch does not depend on the codec. When the batch is
    what Kafka's builder would write anyway (CreateTime flag, offset deltas 0..n-1,
    base timestamp = first record's timestamp, checked by one structural scan), the
    rebuilt batch is the same records section recompressed under a new header, so it is
    produced that way, at codec speed.
    """
    if view.timestamp_type != CREATE_TIME:
        return None
    validate_batch(view, view, ctx)
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
        check_records(view, records_of(view), ctx, compressed_source=view.is_compressed, rebuilding=True)
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
                     last_offset, count, view.is_transactional, result_max, view.is_control)
    return ValidatedRecords((header, body), next_offset, last_offset, count, result_max, shallow,
                            log_append_time, True, [info], size)


def _rebuild(first: BatchView, recs: list[RecordToCheck], ctx: ValidationContext, next_offset: int, codec: int) -> ValidatedRecords:
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


__all__ = ["validate_records", "ValidatedRecords", "BatchInfo"]
