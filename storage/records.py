"""Kafka record batches (magic 2) and legacy message sets (magic 0 and 1), read in place.

Batches stay opaque bytes: a :class:`BatchView` is a header view over a ``memoryview``
(nothing is copied) and records are parsed only when a rule needs them.

Framing (every magic; ``.log`` files, Produce and Fetch ``records`` fields)
-------------------------------------------------------------------------
::

    0   offset   int64   v2: base offset; legacy: offset of the (last) message
    8   size     int32   bytes that follow (entry size = size + 12, the log overhead)
    16  magic    int8    0, 1 or 2 (byte 16 for every magic)

Iteration (:func:`iter_batches`) stops silently when 17 bytes or fewer remain or the
declared entry runs past the end (a partial trailing entry, as Kafka's
``FileLogInputStream``); it raises :class:`CorruptRecordError` for ``size < 14``
(checked first, so a zero-filled tail is corrupt, not partial), for a magic outside
0..2, and for an entry too small for its magic's header.

Magic 2 record batch header (61 bytes; big-endian)
--------------------------------------------------
::

    0   base_offset             int64
    8   batch_length            int32   size - 12
    12  partition_leader_epoch  int32   not covered by the CRC
    16  magic                   int8    2
    17  crc                     uint32  CRC-32C of bytes 21..end
    21  attributes              int16   bits 0-2 codec, 3 LogAppendTime, 4 transactional,
                                        5 control, 6 delete horizon
    23  last_offset_delta       int32
    27  base_timestamp          int64   first record's timestamp
    35  max_timestamp           int64   LogAppendTime: the broker's append time
    43  producer_id             int64
    51  producer_epoch          int16
    53  base_sequence           int32
    57  records_count           int32
    61  records                 compressed as one stream when the codec is not none

Magic 2 record: ``length`` varint (bytes after it), ``attributes`` int8,
``timestamp_delta`` varlong, ``offset_delta`` varint, ``key_length`` varint + key,
``value_length`` varint + value, ``header_count`` varint, then per header
``key_length`` varint + UTF-8 key and ``value_length`` varint + value. Varints are
zig-zag LEB128 (at most 5 bytes; varlongs 10); a negative key/value length is null.

Magic 0/1 message (legacy)
--------------------------
::

    0   offset        int64   absolute; inner messages of compressed v1: relative 0..n-1
    8   size          int32   bytes from crc to end (>= 14 for v0, >= 22 for v1)
    12  crc           uint32  CRC-32 (zlib) of bytes 16..end
    16  magic         int8
    17  attributes    int8    bits 0-2 codec (no zstd), bit 3 LogAppendTime (v1)
    18  timestamp     int64   v1 only
    --  key_length    int32 + key     (-1 = null)
    --  value_length  int32 + value   (-1 = null)

A compressed legacy message is a *wrapper* whose value holds a compressed message set
of inner messages. Its offset is the absolute offset of the last inner message; v1
inner offsets are relative (absolute = wrapper offset - last inner + inner; a wrapper
offset 0 means base 0), v0 inner offsets are absolute.

Reader semantics (what every record reports)
--------------------------------------------
* v2: ``base_offset + offset_delta``; timestamp ``base_timestamp + delta``, except in a
  LogAppendTime batch where every record reports the batch ``max_timestamp``.
* v1: the message's own timestamp and type; inside a compressed wrapper the wrapper's
  type, and the wrapper timestamp for every inner message if the wrapper is
  LogAppendTime.
* v0: timestamp -1, type -1 (no timestamp).

In-place rewrites (``set_last_offset``, ``set_partition_leader_epoch``,
``set_max_timestamp``, ``set_legacy_timestamp``) need a writable buffer and keep the
batch valid: the v2 CRC is recomputed when covered bytes change (the leader epoch is
not covered); a legacy message's CRC is recomputed when its timestamp changes (the
offset is outside the CRC).

The in-batch timestamp walks (:func:`find_first_at_or_after`,
:func:`first_record_with_timestamp`, :class:`BatchTimestampIndex` for repeated searches
in one batch) and the validator's record scan (:func:`scan_v2_records`) have a C
implementation in ``storage/_speedups.c``; the
pure-Python code here is the reference and is used when the extension is not built or
``SUNDIAL_NO_EXTENSIONS=1`` is set. ``IMPLEMENTATION`` says which one is active.
"""

from __future__ import annotations

import bisect
import os
import struct
import zlib
from array import array
from typing import Iterator, NamedTuple

from crc32c import crc32c

from . import codecs
from .errors import CorruptRecordError, InvalidRecordError

# ---------------------------------------------------------------- framing constants
LOG_OVERHEAD = 12
HEADER_SIZE_UP_TO_MAGIC = 17
MAGIC_OFFSET = 16
MIN_ENTRY_SIZE = 14                     # smallest legal `size` (a v0 message with null key and value)

MAGIC_V0 = 0
MAGIC_V1 = 1
MAGIC_V2 = 2

NO_TIMESTAMP = -1
NO_TIMESTAMP_TYPE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

# ---------------------------------------------------------------- v2 layout
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61
RECORD_BATCH_OVERHEAD = 61

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_SIZE = struct.Struct(">qi")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")

# ---------------------------------------------------------------- legacy layout
LEGACY_CRC_OFFSET = 12
LEGACY_ATTRIBUTES_OFFSET = 17
LEGACY_TIMESTAMP_OFFSET = 18
LEGACY_KEY_LENGTH_OFFSET_V0 = 18
LEGACY_KEY_LENGTH_OFFSET_V1 = 26
RECORD_OVERHEAD_V0 = 14                 # crc .. end with null key and value
RECORD_OVERHEAD_V1 = 22
LEGACY_TIMESTAMP_TYPE_MASK = 0x08

_LEGACY_HEADER = struct.Struct(">qiIbb")
_LEGACY_HEADER_V1 = struct.Struct(">qiIbbq")

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def v2_attributes(compression: int, timestamp_type: int, is_transactional: bool, is_control: bool) -> int:
    """Kafka ``DefaultRecordBatch.computeAttributes``: the batch attributes written on a rewrite
    (any other bit, such as the delete-horizon flag, is cleared)."""
    return (compression | (TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0)
            | (TRANSACTIONAL_FLAG_MASK if is_transactional else 0) | (CONTROL_FLAG_MASK if is_control else 0))


class Record(NamedTuple):
    """One record as a Kafka reader sees it (see "Reader semantics" above)."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class BatchView:
    """Header view of one log entry: a v2 record batch or a legacy (v0/v1) message.

    ``buf`` is the memoryview the entry lives in and ``start`` its index there;
    ``position`` is what the caller asked positions to be reported as (index in the
    buffer, or file position for :func:`iter_file_batches`). ``size_bytes`` includes
    the 12-byte log overhead. For a legacy compressed wrapper ``last_offset`` is the
    wrapper offset and ``base_offset``/``record_count`` need decompression (computed
    on first use).
    """

    __slots__ = (
        "buf", "start", "position", "size_bytes", "magic", "crc", "attributes", "compression",
        "timestamp_type", "is_transactional", "is_control", "last_offset", "max_timestamp",
        "base_timestamp", "last_offset_delta", "producer_id", "producer_epoch", "base_sequence",
        "partition_leader_epoch", "_base_offset", "_record_count",
    )

    def __init__(self, buf: memoryview, start: int = 0, position: int | None = None) -> None:
        self.buf = buf
        self.start = start
        self.position = start if position is None else position
        if len(buf) - start < HEADER_SIZE_UP_TO_MAGIC:
            raise CorruptRecordError(f"record entry at position {self.position} is truncated")
        magic = buf[start + MAGIC_OFFSET]
        if magic == MAGIC_V2:
            self._init_v2()
        elif magic == MAGIC_V1 or magic == MAGIC_V0:
            self._init_legacy(magic)
        else:
            raise CorruptRecordError(f"invalid magic byte {magic} in record entry at position {self.position}")

    def _init_v2(self) -> None:
        buf, start = self.buf, self.start
        size = _I32.unpack_from(buf, start + LENGTH_OFFSET)[0] + LOG_OVERHEAD
        if size < RECORD_BATCH_OVERHEAD or start + size > len(buf):
            raise CorruptRecordError(
                f"record batch at position {self.position} has size {size}, "
                f"below the {RECORD_BATCH_OVERHEAD}-byte v2 header or past the end of the data")
        (base_offset, _, epoch, magic, crc, attributes, last_delta, base_ts, max_ts,
         producer_id, producer_epoch, base_sequence, count) = _V2_HEADER.unpack_from(buf, start)
        self.size_bytes = size
        self.magic = magic
        self.crc = crc
        self.attributes = attributes
        self.compression = attributes & COMPRESSION_CODEC_MASK
        self.timestamp_type = LOG_APPEND_TIME if attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME
        self.is_transactional = bool(attributes & TRANSACTIONAL_FLAG_MASK)
        self.is_control = bool(attributes & CONTROL_FLAG_MASK)
        self._base_offset = base_offset
        self.last_offset_delta = last_delta
        self.last_offset = base_offset + last_delta
        self.base_timestamp = base_ts
        self.max_timestamp = max_ts
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self._record_count = count
        self.partition_leader_epoch = epoch

    def _init_legacy(self, magic: int) -> None:
        buf, start = self.buf, self.start
        if magic == MAGIC_V1:
            if len(buf) - start < LOG_OVERHEAD + RECORD_OVERHEAD_V1:
                raise CorruptRecordError(f"v1 message at position {self.position} is truncated")
            offset, size, crc, _, attributes, timestamp = _LEGACY_HEADER_V1.unpack_from(buf, start)
            minimum = RECORD_OVERHEAD_V1
        else:
            offset, size, crc, _, attributes = _LEGACY_HEADER.unpack_from(buf, start)
            timestamp = NO_TIMESTAMP
            minimum = RECORD_OVERHEAD_V0
        if size < minimum or start + size + LOG_OVERHEAD > len(buf):
            raise CorruptRecordError(
                f"v{magic} message at position {self.position} has size {size}, "
                f"below the {minimum}-byte minimum or past the end of the data")
        self.size_bytes = size + LOG_OVERHEAD
        self.magic = magic
        self.crc = crc
        self.attributes = attributes & 0xFF
        self.compression = attributes & COMPRESSION_CODEC_MASK
        if magic == MAGIC_V0:
            self.timestamp_type = NO_TIMESTAMP_TYPE
        else:
            self.timestamp_type = LOG_APPEND_TIME if attributes & LEGACY_TIMESTAMP_TYPE_MASK else CREATE_TIME
        self.is_transactional = False
        self.is_control = False
        self.last_offset = offset
        self.max_timestamp = timestamp
        self.base_timestamp = timestamp
        self.last_offset_delta = 0
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_sequence = NO_SEQUENCE
        self.partition_leader_epoch = NO_PARTITION_LEADER_EPOCH
        if self.compression == codecs.NONE:
            self._base_offset = offset
            self._record_count = 1
        else:
            self._base_offset = None
            self._record_count = None

    # ------------------------------------------------------------ derived fields
    @property
    def base_offset(self) -> int:
        if self._base_offset is None:
            self._load_legacy_inner_offsets()
        return self._base_offset

    @property
    def record_count(self) -> int:
        if self._record_count is None:
            self._load_legacy_inner_offsets()
        return self._record_count

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def end(self) -> int:
        """Index in ``buf`` just past this entry."""
        return self.start + self.size_bytes

    @property
    def next_position(self) -> int:
        return self.position + self.size_bytes

    @property
    def is_compressed(self) -> bool:
        return self.compression != codecs.NONE

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """Kafka ``lastSequence``: base sequence + last offset delta, wrapping at 2^31."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)

    @property
    def data(self) -> memoryview:
        """The whole entry (log overhead included), zero-copy."""
        return self.buf[self.start:self.start + self.size_bytes]

    def tobytes(self) -> bytes:
        return bytes(self.data)

    def crc_valid(self) -> bool:
        """Stored CRC matches: CRC-32C of bytes 21.. (v2) or CRC-32 of bytes 16.. (legacy)."""
        if self.magic == MAGIC_V2:
            return crc32c(self.buf[self.start + ATTRIBUTES_OFFSET:self.start + self.size_bytes]) == self.crc
        return zlib.crc32(self.buf[self.start + MAGIC_OFFSET:self.start + self.size_bytes]) == self.crc

    def compute_crc(self) -> int:
        if self.magic == MAGIC_V2:
            return crc32c(self.buf[self.start + ATTRIBUTES_OFFSET:self.start + self.size_bytes])
        return zlib.crc32(self.buf[self.start + MAGIC_OFFSET:self.start + self.size_bytes])

    def ensure_valid(self) -> None:
        """Raise :class:`CorruptRecordError` when the CRC does not match."""
        if not self.crc_valid():
            raise CorruptRecordError(
                f"record batch at position {self.position} (offset {self.last_offset}) is corrupt: "
                f"stored crc {self.crc} does not match computed crc {self.compute_crc()}")

    def records_payload(self, max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES):
        """The records section (v2: after the 61-byte header; legacy wrapper: its value),
        decompressed when the entry is compressed."""
        if self.magic == MAGIC_V2:
            raw = self.buf[self.start + RECORDS_OFFSET:self.start + self.size_bytes]
            if self.compression == codecs.NONE:
                return raw
            return codecs.decompress(self.compression, raw, magic=MAGIC_V2, max_bytes=max_bytes)
        _key, value = _legacy_key_value(self.buf, self.start, self.size_bytes, self.magic)
        if value is None:
            return None
        if self.compression == codecs.NONE:
            return value
        return codecs.decompress(self.compression, value, magic=self.magic, max_bytes=max_bytes)

    def _load_legacy_inner_offsets(self) -> None:
        inner = legacy_inner_messages(self)
        self._record_count = len(inner)
        self._base_offset = inner[0].offset

    def __repr__(self) -> str:
        return (f"BatchView(magic={self.magic}, position={self.position}, size_bytes={self.size_bytes}, "
                f"last_offset={self.last_offset}, max_timestamp={self.max_timestamp}, "
                f"timestamp_type={self.timestamp_type}, compression={self.compression})")

    # ------------------------------------------------------------ in-place rewrites
    def _writable(self) -> memoryview:
        if self.buf.readonly:
            raise TypeError("record batch rewrite needs a writable buffer (bytearray or writable memoryview)")
        return self.buf

    def set_last_offset(self, last_offset: int) -> None:
        """Assign offsets: v2 writes ``base_offset = last_offset - last_offset_delta`` (no CRC change);
        a legacy entry writes its offset field (outside its CRC)."""
        buf = self._writable()
        if self.magic == MAGIC_V2:
            base = last_offset - self.last_offset_delta
            _I64.pack_into(buf, self.start + BASE_OFFSET_OFFSET, base)
            self._base_offset = base
        else:
            _I64.pack_into(buf, self.start, last_offset)
            if self.compression == codecs.NONE:
                self._base_offset = last_offset
            else:
                self._base_offset = None if self._record_count is None else last_offset - self._record_count + 1
        self.last_offset = last_offset

    def set_partition_leader_epoch(self, epoch: int) -> None:
        """v2 only (bytes 12-15, outside the CRC); ignored for legacy entries."""
        if self.magic != MAGIC_V2:
            return
        _I32.pack_into(self._writable(), self.start + PARTITION_LEADER_EPOCH_OFFSET, epoch)
        self.partition_leader_epoch = epoch

    def set_max_timestamp(self, timestamp_type: int, timestamp: int) -> None:
        """Kafka ``setMaxTimestamp``: v2 writes max timestamp + the type bit and recomputes the
        CRC; v1 rewrites the message (wrapper) timestamp and type bit and its CRC.
        No-op when nothing changes. v0 has no timestamp (raises ``ValueError``)."""
        if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise ValueError(f"timestamp type {timestamp_type} cannot be set on a record batch")
        if self.magic == MAGIC_V0:
            raise ValueError("a magic 0 message has no timestamp")
        if self.timestamp_type == timestamp_type and self.max_timestamp == timestamp:
            return
        buf = self._writable()
        start = self.start
        if self.magic == MAGIC_V2:
            attributes = v2_attributes(self.compression, timestamp_type, self.is_transactional, self.is_control)
            _I16.pack_into(buf, start + ATTRIBUTES_OFFSET, attributes)
            _I64.pack_into(buf, start + MAX_TIMESTAMP_OFFSET, timestamp)
            crc = crc32c(buf[start + ATTRIBUTES_OFFSET:start + self.size_bytes])
            _U32.pack_into(buf, start + CRC_OFFSET, crc)
        else:
            attributes = self.compression | (LEGACY_TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0)
            buf[start + LEGACY_ATTRIBUTES_OFFSET] = attributes
            _I64.pack_into(buf, start + LEGACY_TIMESTAMP_OFFSET, timestamp)
            self.base_timestamp = timestamp
            crc = zlib.crc32(buf[start + MAGIC_OFFSET:start + self.size_bytes])
            _U32.pack_into(buf, start + LEGACY_CRC_OFFSET, crc)
        self.attributes = attributes
        self.crc = crc
        self.timestamp_type = timestamp_type
        self.max_timestamp = timestamp

    set_legacy_timestamp = set_max_timestamp


# ---------------------------------------------------------------- batch iteration

def _as_memoryview(buf) -> memoryview:
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def iter_batches(buf, position: int = 0, *, end: int | None = None,
                 file_position: int | None = None) -> Iterator[BatchView]:
    """Yield a :class:`BatchView` for each complete entry of ``buf`` from ``position``.

    ``end`` limits the region (default: the whole buffer). With ``file_position``,
    each view's ``position`` is reported as ``file_position + (index - position)``.
    """
    mv = _as_memoryview(buf)
    limit = len(mv) if end is None else min(end, len(mv))
    pos = position
    shift = 0 if file_position is None else file_position - position
    unpack = _OFFSET_SIZE.unpack_from
    while limit - pos > HEADER_SIZE_UP_TO_MAGIC:
        size = unpack(mv, pos)[1]
        if size < MIN_ENTRY_SIZE:
            raise CorruptRecordError(
                f"record size {size} at position {pos + shift} is smaller than the minimum record overhead "
                f"({MIN_ENTRY_SIZE})")
        entry_end = pos + LOG_OVERHEAD + size
        if entry_end > limit:
            return
        yield BatchView(mv, pos, pos + shift)
        pos = entry_end


def iter_file_batches(fd: int, position: int, end: int, *,
                      chunk_bytes: int = 1 << 20) -> Iterator[BatchView]:
    """Yield views of the complete entries of file ``fd`` in ``[position, end)``.

    Reads with ``os.pread`` in chunks of about ``chunk_bytes`` (an entry larger than a
    chunk is read whole); each view's ``position`` is its file position. Same stopping
    and corruption rules as :func:`iter_batches`.
    """
    while end - position > HEADER_SIZE_UP_TO_MAGIC:
        want = min(chunk_bytes, end - position)
        chunk = os.pread(fd, want, position)
        if len(chunk) <= HEADER_SIZE_UP_TO_MAGIC:
            return
        consumed = 0
        for view in iter_batches(chunk, 0, file_position=position):
            consumed = view.end
            yield view
        if consumed == 0:
            # The first entry does not fit in the chunk: read it whole, if it is complete.
            size = _OFFSET_SIZE.unpack_from(chunk, 0)[1]
            if size < MIN_ENTRY_SIZE:
                raise CorruptRecordError(
                    f"record size {size} at position {position} is smaller than the minimum record overhead "
                    f"({MIN_ENTRY_SIZE})")
            entry_bytes = LOG_OVERHEAD + size
            if position + entry_bytes > end:
                return
            chunk = os.pread(fd, entry_bytes, position)
            if len(chunk) < entry_bytes:
                return
            view = BatchView(memoryview(chunk), 0, position)
            yield view
            consumed = entry_bytes
        position += consumed


def batches_of(data) -> Iterator[BatchView]:
    """Views of one BatchView (itself) or of every entry in a bytes-like object."""
    if isinstance(data, BatchView):
        yield data
    else:
        yield from iter_batches(data)


# ---------------------------------------------------------------- varints

def _read_uvarint(b, pos: int, max_bytes: int) -> tuple[int, int]:
    x = b[pos]
    if x < 0x80:
        return x, pos + 1
    result = x & 0x7F
    shift = 7
    n = 1
    while True:
        x = b[pos + n]
        n += 1
        result |= (x & 0x7F) << shift
        if x < 0x80:
            return result, pos + n
        if n >= max_bytes:
            raise InvalidRecordError(f"varint at position {pos} is longer than {max_bytes} bytes")
        shift += 7


def read_varint(b, pos: int) -> tuple[int, int]:
    """Zig-zag varint (int32) at ``pos`` -> (value, next position)."""
    u, pos = _read_uvarint(b, pos, 5)
    if u > 0xFFFFFFFF:
        raise InvalidRecordError("varint does not fit in 32 bits")
    return (u >> 1) ^ -(u & 1), pos


def read_varlong(b, pos: int) -> tuple[int, int]:
    """Zig-zag varlong (int64) at ``pos`` -> (value, next position)."""
    u, pos = _read_uvarint(b, pos, 10)
    if u > 0xFFFFFFFFFFFFFFFF:
        raise InvalidRecordError("varlong does not fit in 64 bits")
    return (u >> 1) ^ -(u & 1), pos


def _wrap64(x: int) -> int:
    if _INT64_MIN <= x <= _INT64_MAX:
        return x
    return ((x + (1 << 63)) % (1 << 64)) - (1 << 63)


# ---------------------------------------------------------------- v2 records

class V2RecordScan(NamedTuple):
    """Summary of a structural walk over the records of one v2 batch.

    ``min_timestamp``/``max_timestamp`` cover records whose timestamp is not -1
    (``None`` when there is none); ``sequential_offsets`` says the offset deltas are
    exactly 0..count-1; ``first_null_key`` is the index of the first record without a
    key, or -1.
    """

    min_timestamp: int | None
    max_timestamp: int | None
    sequential_offsets: bool
    first_null_key: int


def _v2_record_fields(b, pos: int, end: int, index: int):
    """Parse one v2 record at ``pos``; returns (next_pos, ts_delta, offset_delta, key_slice,
    value_slice, headers) with key/value as (start, length) pairs (length -1 = null)."""
    try:
        length, body = read_varint(b, pos)
        record_end = body + length
        if length < 0 or record_end > end:
            raise InvalidRecordError(
                f"record {index} declares {length} bytes but only {end - body} remain in the batch")
        p = body + 1                                         # attributes (unused)
        ts_delta, p = read_varlong(b, p)
        offset_delta, p = read_varint(b, p)
        key_len, p = read_varint(b, p)
        key_start = p
        if key_len > 0:
            p += key_len
        value_len, p = read_varint(b, p)
        value_start = p
        if value_len > 0:
            p += value_len
        header_count, p = read_varint(b, p)
        if header_count < 0:
            raise InvalidRecordError(f"record {index} has a negative header count {header_count}")
        headers = []
        for _ in range(header_count):
            hk_len, p = read_varint(b, p)
            if hk_len < 0:
                raise InvalidRecordError(f"record {index} has a header with a negative key size")
            hk_start = p
            p += hk_len
            hv_len, p = read_varint(b, p)
            hv_start = p
            if hv_len > 0:
                p += hv_len
            headers.append((hk_start, hk_len, hv_start, hv_len))
            if p > record_end:
                break
    except IndexError:
        raise InvalidRecordError(f"record {index} runs past the end of its batch") from None
    if p != record_end:
        raise InvalidRecordError(
            f"invalid record size: record {index} declares {length} bytes but its fields use {p - body}")
    return record_end, ts_delta, offset_delta, (key_start, key_len), (value_start, value_len), headers


def _v2_payload(view: BatchView, max_bytes: int):
    """(buffer, start, end) of the uncompressed records of a v2 batch."""
    if view.compression == codecs.NONE:
        return view.buf, view.start + RECORDS_OFFSET, view.start + view.size_bytes
    payload = view.records_payload(max_bytes)
    return payload, 0, len(payload)


def _check_count(view: BatchView) -> int:
    count = view._record_count
    if count < 0:
        raise InvalidRecordError(f"found invalid record count {count} in magic v2 batch")
    return count


def iter_v2_records(view: BatchView, max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES) -> Iterator[Record]:
    """Records of a v2 batch with Kafka's reader semantics; checks count and trailing bytes."""
    count = _check_count(view)
    b, pos, end = _v2_payload(view, max_bytes)
    if isinstance(b, memoryview):
        b = b[pos:end].tobytes()
        pos, end = 0, len(b)
    base_offset = view._base_offset
    base_ts = view.base_timestamp
    log_append = view.timestamp_type == LOG_APPEND_TIME
    ts_type = view.timestamp_type
    max_ts = view.max_timestamp
    for index in range(count):
        if pos >= end:
            raise InvalidRecordError(
                f"batch declares {count} records but its data ends after {index}")
        pos, ts_delta, offset_delta, (ks, kl), (vs, vl), hdrs = _v2_record_fields(b, pos, end, index)
        key = bytes(b[ks:ks + kl]) if kl >= 0 else None
        value = bytes(b[vs:vs + vl]) if vl >= 0 else None
        headers = tuple(
            (bytes(b[hs:hs + hl]).decode("utf-8", "surrogateescape"), bytes(b[vs2:vs2 + vl2]) if vl2 >= 0 else None)
            for hs, hl, vs2, vl2 in hdrs)
        yield Record(base_offset + offset_delta, max_ts if log_append else _wrap64(base_ts + ts_delta),
                     ts_type, key, value, headers)
    if pos != end:
        raise InvalidRecordError(
            f"incorrect declared batch size: {end - pos} bytes remain after the {count} declared records")


def _scan_v2_py(b, pos: int, end: int, count: int, base_ts: int, *, wrap: bool = False) -> V2RecordScan:
    """Reference implementation of :func:`scan_v2_records` (full structural parse).

    Timestamps are ``base_ts + delta`` wrapped to 64 bits like Java's ``long``; -1 is
    left out of min/max. Reads never look past ``end``.
    """
    mv = memoryview(b)[pos:end]
    end = len(mv)
    pos = 0
    exempt_delta = _wrap64(NO_TIMESTAMP - base_ts)
    lo = hi = None
    sequential = True
    first_null_key = -1
    for index in range(count):
        if pos >= end:
            raise InvalidRecordError(f"batch declares {count} records but its data ends after {index}")
        pos, ts_delta, offset_delta, (_ks, kl), _v, _h = _v2_record_fields(mv, pos, end, index)
        if offset_delta != index:
            sequential = False
        if kl < 0 and first_null_key < 0:
            first_null_key = index
        if wrap:
            value = _wrap64(base_ts + ts_delta)
            if value == NO_TIMESTAMP:
                continue
        elif ts_delta == exempt_delta:
            continue
        else:
            value = ts_delta
        if lo is None:
            lo = hi = value
        elif value < lo:
            lo = value
        elif value > hi:
            hi = value
    if pos != end:
        raise InvalidRecordError(
            f"incorrect declared batch size: {end - pos} bytes remain after the {count} declared records")
    if lo is None:
        return V2RecordScan(None, None, sequential, first_null_key)
    if wrap:
        return V2RecordScan(lo, hi, sequential, first_null_key)
    if base_ts + lo < _INT64_MIN or base_ts + hi > _INT64_MAX:
        # Some timestamp overflowed 64 bits: order changes after wrapping, walk again.
        return _scan_v2_py(mv, 0, end, count, base_ts, wrap=True)
    return V2RecordScan(base_ts + lo, base_ts + hi, sequential, first_null_key)


def scan_v2_records(view: BatchView, max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES,
                    payload=None) -> V2RecordScan:
    """Walk every record of a v2 batch, checking its structure (count, record lengths,
    varints, no trailing bytes; :class:`InvalidRecordError` otherwise), and summarise
    timestamps (as ``base_timestamp + delta``, ignoring LogAppendTime), offset deltas and
    null keys. ``payload`` may pass already-decompressed records."""
    count = _check_count(view)
    if payload is None:
        b, pos, end = _v2_payload(view, max_bytes)
    else:
        b, pos, end = payload, 0, len(payload)
    return _scan_v2(b, pos, end, count, view.base_timestamp)


def _first_record_header(b, pos: int, end: int) -> tuple[int, int]:
    """(timestamp delta, offset delta) of the record at ``pos``."""
    try:
        _length, p = read_varint(b, pos)
        ts_delta, p = read_varlong(b, p + 1)
        offset_delta, p = read_varint(b, p)
    except IndexError:
        raise InvalidRecordError("first record runs past the end of its batch") from None
    return ts_delta, offset_delta


def _find_v2_py(b, pos: int, end: int, count: int, base_ts: int, target: int,
                min_offset_delta: int, exact: bool):
    """Reference walk: first record (in order) with offset delta >= ``min_offset_delta``
    and timestamp >= ``target`` (``== target`` when ``exact``); returns
    (offset_delta, timestamp) or None. Reads only length, timestamp and offset deltas,
    and never looks past ``end``. One- and two-byte varints are decoded inline."""
    b = bytes(memoryview(b)[pos:end])
    end = len(b)
    pos = 0
    for index in range(count):
        if pos >= end:
            raise InvalidRecordError(f"batch declares {count} records but its data ends after {index}")
        try:
            x = b[pos]
            if x < 0x80:
                length = (x >> 1) ^ -(x & 1)
                p = pos + 1
            else:
                length, p = read_varint(b, pos)
            record_end = p + length
            if length < 0 or record_end > end:
                raise InvalidRecordError(f"record {index} declares {length} bytes past the end of its batch")
            p += 1
            x = b[p]
            if x < 0x80:
                ts_delta = (x >> 1) ^ -(x & 1)
                p += 1
            else:
                y = b[p + 1]
                if y < 0x80:
                    u = (x & 0x7F) | (y << 7)
                    ts_delta = (u >> 1) ^ -(u & 1)
                    p += 2
                else:
                    ts_delta, p = read_varlong(b, p)
            x = b[p]
            if x < 0x80:
                offset_delta = (x >> 1) ^ -(x & 1)
            else:
                y = b[p + 1]
                if y < 0x80:
                    u = (x & 0x7F) | (y << 7)
                    offset_delta = (u >> 1) ^ -(u & 1)
                else:
                    offset_delta, _ = read_varint(b, p)
        except IndexError:
            raise InvalidRecordError(f"record {index} runs past the end of its batch") from None
        if offset_delta >= min_offset_delta:
            ts = base_ts + ts_delta
            if ts > _INT64_MAX or ts < _INT64_MIN:
                ts = _wrap64(ts)
            if (ts == target) if exact else (ts >= target):
                return offset_delta, ts
        pos = record_end
    return None


def _index_v2_py(b, pos: int, end: int, count: int, base_ts: int):
    """Reference for the C ``index_v2``: (offset deltas, running max timestamps) as int64 arrays."""
    b = memoryview(b)[pos:end]
    end = len(b)
    pos = 0
    offsets = array("q")
    maxima = array("q")
    running = _INT64_MIN
    for index in range(count):
        if pos >= end:
            raise InvalidRecordError(f"batch declares {count} records but its data ends after {index}")
        try:
            length, p = read_varint(b, pos)
            if length < 0 or p + length > end:
                raise InvalidRecordError(f"record {index} declares {length} bytes past the end of its batch")
            pos = p + length
            ts_delta, p = read_varlong(b, p + 1)
            offset_delta, p = read_varint(b, p)
        except IndexError:
            raise InvalidRecordError(f"record {index} runs past the end of its batch") from None
        ts = _wrap64(base_ts + ts_delta)
        if ts > running:
            running = ts
        offsets.append(offset_delta)
        maxima.append(running)
    return offsets, maxima


_scan_v2 = _scan_v2_py
_find_v2 = _find_v2_py
_index_v2 = _index_v2_py
IMPLEMENTATION = "python"
#: Linear CRC-32C of (message || n zero bytes) from that of the message, or None without C.
crc32c_extend = None

if os.environ.get("SUNDIAL_NO_EXTENSIONS", "") not in ("1", "true", "yes"):
    try:
        from . import _speedups  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - depends on the build
        _speedups = None
    if _speedups is not None:
        def _scan_v2(b, pos, end, count, base_ts):  # noqa: F811
            try:
                result = _speedups.scan_v2(b, pos, end, count, base_ts)
            except ValueError as exc:
                raise InvalidRecordError(str(exc)) from None
            return V2RecordScan(*result)

        def _find_v2(b, pos, end, count, base_ts, target, min_offset_delta, exact):  # noqa: F811
            try:
                return _speedups.find_v2(b, pos, end, count, base_ts, target, min_offset_delta, exact)
            except ValueError as exc:
                raise InvalidRecordError(str(exc)) from None

        def _index_v2(b, pos, end, count, base_ts):  # noqa: F811
            try:
                offsets, maxima = _speedups.index_v2(b, pos, end, count, base_ts)
            except ValueError as exc:
                raise InvalidRecordError(str(exc)) from None
            return memoryview(offsets).cast("q"), memoryview(maxima).cast("q")

        IMPLEMENTATION = "c"
        crc32c_extend = _speedups.crc32c_extend


# ---------------------------------------------------------------- legacy messages

class LegacyMessage(NamedTuple):
    """One inner message of a legacy compressed wrapper, as stored (offset not yet absolute)."""

    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    crc_valid: bool


def _legacy_key_value(buf, start: int, size_bytes: int, magic: int):
    end = start + size_bytes
    pos = start + (LEGACY_KEY_LENGTH_OFFSET_V1 if magic == MAGIC_V1 else LEGACY_KEY_LENGTH_OFFSET_V0)
    try:
        (key_len,) = _I32.unpack_from(buf, pos)
        pos += 4
        key = None
        if key_len >= 0:
            if pos + key_len > end:
                raise CorruptRecordError("legacy message key runs past the end of the message")
            key = bytes(buf[pos:pos + key_len])
            pos += key_len
        (value_len,) = _I32.unpack_from(buf, pos)
        pos += 4
        value = None
        if value_len >= 0:
            if pos + value_len > end:
                raise CorruptRecordError("legacy message value runs past the end of the message")
            value = buf[pos:pos + value_len]
            pos += value_len
    except struct.error:
        raise CorruptRecordError("legacy message is truncated") from None
    if pos != end:
        raise CorruptRecordError(f"legacy message has {end - pos} bytes after its value")
    return key, value


def legacy_inner_messages(view: BatchView, max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES
                          ) -> list[LegacyMessage]:
    """Inner messages of a compressed v0/v1 wrapper with **absolute** offsets.

    Raises :class:`InvalidRecordError` for a null or empty wrapper or a wrapper offset
    below the last inner offset, :class:`CorruptRecordError` for undecodable data.
    Inner CRCs are reported, not enforced (``crc_valid``).
    """
    payload = view.records_payload(max_bytes)
    if payload is None:
        raise InvalidRecordError("found invalid compressed record set with null value")
    mv = memoryview(payload)
    inner: list[LegacyMessage] = []
    pos = 0
    n = len(mv)
    while n - pos >= LOG_OVERHEAD:
        offset, size = _OFFSET_SIZE.unpack_from(mv, pos)
        if size < RECORD_OVERHEAD_V0:
            raise CorruptRecordError(f"inner message size {size} is smaller than the minimum record overhead")
        end = pos + LOG_OVERHEAD + size
        if end > n:
            raise CorruptRecordError("inner message runs past the end of the compressed message set")
        magic = mv[pos + MAGIC_OFFSET]
        (crc,) = _U32.unpack_from(mv, pos + LEGACY_CRC_OFFSET)
        attributes = mv[pos + LEGACY_ATTRIBUTES_OFFSET]
        if magic == MAGIC_V1:
            if size < RECORD_OVERHEAD_V1:
                raise CorruptRecordError(f"inner v1 message size {size} is below the minimum")
            (timestamp,) = _I64.unpack_from(mv, pos + LEGACY_TIMESTAMP_OFFSET)
        elif magic == MAGIC_V0:
            timestamp = NO_TIMESTAMP
        else:
            raise CorruptRecordError(f"invalid magic byte {magic} in an inner message")
        key, value = _legacy_key_value(mv, pos, LOG_OVERHEAD + size, magic)
        inner.append(LegacyMessage(offset, magic, attributes, timestamp, key,
                                   None if value is None else bytes(value),
                                   zlib.crc32(mv[pos + MAGIC_OFFSET:end]) == crc))
        pos = end
    if pos != n:
        raise CorruptRecordError(f"compressed message set has {n - pos} trailing bytes")
    if not inner:
        raise InvalidRecordError("found invalid compressed record set with no inner records")
    if view.magic == MAGIC_V1:
        wrapper_offset = view.last_offset
        last_inner = inner[-1].offset
        if wrapper_offset == 0:
            base = 0
        else:
            base = wrapper_offset - last_inner
            if base < 0:
                raise InvalidRecordError(
                    f"found invalid compressed record set: wrapper offset {wrapper_offset} is below "
                    f"the last inner offset {last_inner}")
        inner = [m._replace(offset=base + m.offset) for m in inner]
    return inner


def _iter_legacy_records(view: BatchView, max_bytes: int) -> Iterator[Record]:
    if view.compression == codecs.NONE:
        key, value = _legacy_key_value(view.buf, view.start, view.size_bytes, view.magic)
        yield Record(view.last_offset, view.max_timestamp, view.timestamp_type, key,
                     None if value is None else bytes(value), ())
        return
    wrapper_type = view.timestamp_type
    wrapper_ts = view.max_timestamp
    for m in legacy_inner_messages(view, max_bytes):
        if m.magic == MAGIC_V0:
            ts, ts_type = NO_TIMESTAMP, NO_TIMESTAMP_TYPE
        elif wrapper_type == LOG_APPEND_TIME:
            ts, ts_type = wrapper_ts, LOG_APPEND_TIME
        else:
            ts, ts_type = m.timestamp, wrapper_type
        yield Record(m.offset, ts, ts_type, m.key, m.value, ())


def iter_records(data, *, max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES) -> Iterator[Record]:
    """Records of a :class:`BatchView`, or of every entry in a bytes-like buffer, in order.

    Compressed data is inflated with a limit of ``max_bytes``. Structural problems raise
    :class:`InvalidRecordError` (v2) or :class:`CorruptRecordError` (legacy, codecs).
    """
    for view in batches_of(data):
        if view.magic == MAGIC_V2:
            yield from iter_v2_records(view, max_bytes)
        else:
            yield from _iter_legacy_records(view, max_bytes)


# ---------------------------------------------------------------- timestamp search in a batch

def find_first_at_or_after(batch: BatchView, target_ms: int, min_offset: int = 0,
                           *, max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES
                           ) -> tuple[int, int] | None:
    """First record of ``batch`` with ``timestamp >= target_ms`` and ``offset >= min_offset``
    as ``(offset, timestamp)``, or None: the linear-scan step of Kafka's
    ``FileRecords.searchForTimestamp``.

    A batch whose max timestamp is below the target is skipped without reading records;
    a LogAppendTime batch answers from its header; a v2 batch whose first record is
    already at or after the target answers after one record header; otherwise only the
    length/timestamp/offset deltas of the records are read.
    """
    if batch.max_timestamp < target_ms or batch.last_offset < min_offset:
        return None
    if batch.magic == MAGIC_V2:
        count = _check_count(batch)
        if count == 0:
            return None
        b, pos, end = _v2_payload(batch, max_bytes)
        base_offset = batch._base_offset
        min_delta = min_offset - base_offset
        if batch.timestamp_type == LOG_APPEND_TIME:
            if min_delta <= 0:
                return base_offset, batch.max_timestamp
            found = _find_v2(b, pos, end, count, 0, _INT64_MIN, min_delta, False)
            return None if found is None else (base_offset + found[0], batch.max_timestamp)
        if min_delta <= 0:
            ts_delta, offset_delta = _first_record_header(b, pos, end)
            ts = batch.base_timestamp + ts_delta
            if ts >= target_ms:
                return base_offset + offset_delta, _wrap64(ts)
        found = _find_v2(b, pos, end, count, batch.base_timestamp, target_ms, min_delta, False)
        return None if found is None else (base_offset + found[0], found[1])
    if batch.compression == codecs.NONE:
        return batch.last_offset, batch.max_timestamp      # max_timestamp >= target and offset >= min
    for record in _iter_legacy_records(batch, max_bytes):
        if record.timestamp >= target_ms and record.offset >= min_offset:
            return record.offset, record.timestamp
    return None


def first_record_with_timestamp(batch: BatchView, timestamp_ms: int,
                                *, max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES) -> int | None:
    """Offset of the first record of ``batch`` whose timestamp equals ``timestamp_ms``, or None.

    For ListOffsets MAX_TIMESTAMP (-3): the log keeps the batch holding the max timestamp
    and this finds the record inside it (KAFKA-16310). A LogAppendTime batch reports its
    max timestamp for every record, so its first record matches.
    """
    if batch.magic == MAGIC_V0 or batch.max_timestamp < timestamp_ms:
        return None
    if batch.magic == MAGIC_V2:
        count = _check_count(batch)
        if count == 0:
            return None
        if batch.timestamp_type == LOG_APPEND_TIME:
            return batch._base_offset if batch.max_timestamp == timestamp_ms else None
        b, pos, end = _v2_payload(batch, max_bytes)
        found = _find_v2(b, pos, end, count, batch.base_timestamp, timestamp_ms, _INT64_MIN, True)
        return None if found is None else batch._base_offset + found[0]
    for record in _iter_legacy_records(batch, max_bytes):
        if record.timestamp == timestamp_ms:
            return record.offset
    return None


class BatchTimestampIndex:
    """Running-max timestamps of one batch, so repeated searches in it are a bisect.

    The record offsets and, for each record, the largest timestamp up to it (reader
    semantics) are taken with one walk (C when available; 16 bytes per record). The
    first record whose running max reaches a target is exactly the first record with
    ``timestamp >= target``, and its timestamp is that max. Batches in a log never
    change, so a log may cache one index per batch position. :meth:`lookup` answers
    for ``min_offset <= first_offset``; for a larger ``min_offset`` use
    :func:`find_first_at_or_after` on the batch.
    """

    __slots__ = ("base_offset", "first_offset", "last_offset", "record_count", "_offsets", "_maxima", "size_bytes")

    def __init__(self, batch: BatchView, *, max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES) -> None:
        self.last_offset = batch.last_offset
        if batch.magic == MAGIC_V2:
            count = _check_count(batch)
            base = batch._base_offset
            if batch.timestamp_type == LOG_APPEND_TIME:
                b, pos, end = _v2_payload(batch, max_bytes)
                deltas, _ = _index_v2(b, pos, end, count, 0)
                maxima = array("q", [batch.max_timestamp]) * count
            else:
                b, pos, end = _v2_payload(batch, max_bytes)
                deltas, maxima = _index_v2(b, pos, end, count, batch.base_timestamp)
        else:
            running = _INT64_MIN
            base = batch.base_offset
            deltas, maxima = array("q"), array("q")
            for record in _iter_legacy_records(batch, max_bytes):
                running = max(running, record.timestamp)
                deltas.append(record.offset - base)
                maxima.append(running)
        self._offsets = deltas
        self._maxima = maxima
        self.base_offset = base
        self.record_count = len(deltas)
        self.first_offset = base + deltas[0] if len(deltas) else batch.last_offset + 1
        self.size_bytes = 16 * len(deltas)

    def covers(self, min_offset: int) -> bool:
        return min_offset <= self.first_offset

    def lookup(self, target_ms: int, min_offset: int | None = None) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with timestamp >= ``target_ms``, or None."""
        if min_offset is not None and min_offset > self.first_offset:
            raise ValueError("BatchTimestampIndex answers only for min_offset <= first_offset")
        i = bisect.bisect_left(self._maxima, target_ms)
        if i >= self.record_count:
            return None
        return self.base_offset + self._offsets[i], self._maxima[i]


__all__ = [
    "BatchView", "BatchTimestampIndex", "Record", "LegacyMessage", "V2RecordScan", "iter_batches", "iter_file_batches", "iter_records",
    "iter_v2_records", "legacy_inner_messages", "scan_v2_records", "find_first_at_or_after",
    "first_record_with_timestamp", "read_varint", "read_varlong", "v2_attributes", "IMPLEMENTATION",
    "LOG_OVERHEAD", "RECORD_BATCH_OVERHEAD", "HEADER_SIZE_UP_TO_MAGIC", "MIN_ENTRY_SIZE",
    "MAGIC_V0", "MAGIC_V1", "MAGIC_V2", "NO_TIMESTAMP", "NO_TIMESTAMP_TYPE", "CREATE_TIME", "LOG_APPEND_TIME",
    "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH", "NO_SEQUENCE", "NO_PARTITION_LEADER_EPOCH",
    "RECORD_OVERHEAD_V0", "RECORD_OVERHEAD_V1",
]
