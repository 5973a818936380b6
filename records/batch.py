"""The header view of one log entry: a v2 record batch or a legacy (v0/v1) message.

Batches stay opaque bytes: a :class:`BatchView` is a header view over a ``memoryview``
(nothing is copied) and records are parsed only when a rule needs them
(:func:`records.framing.iter_records`). Layouts are in :mod:`records.layout`.

In-place rewrites (``set_last_offset``, ``set_partition_leader_epoch``,
``set_max_timestamp``, ``set_legacy_timestamp``) need a writable buffer and keep the
batch valid: the v2 CRC is recomputed when covered bytes change (the leader epoch is
not covered); a legacy message's CRC is recomputed when its timestamp changes (the
offset is outside the CRC).
"""

from __future__ import annotations

import zlib

from crc32c import crc32c

from . import codecs
from .errors import CorruptRecordError
from .layout import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CREATE_TIME,
    CRC_OFFSET,
    HEADER_SIZE_UP_TO_MAGIC,
    INT16,
    INT32,
    INT64,
    LEGACY_ATTRIBUTES_OFFSET,
    LEGACY_CRC_OFFSET,
    LEGACY_HEADER_V0,
    LEGACY_HEADER_V1,
    LEGACY_TIMESTAMP_OFFSET,
    LEGACY_TIMESTAMP_TYPE_MASK,
    LENGTH_OFFSET,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V0,
    MAGIC_V1,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    NO_TIMESTAMP_TYPE,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORD_OVERHEAD_V0,
    RECORD_OVERHEAD_V1,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    UINT32,
    V2_HEADER,
    v2_attributes,
)
from .legacy import legacy_inner_messages, legacy_key_value


def last_sequence_of(base_sequence: int, last_offset_delta: int) -> int:
    """Kafka ``lastSequence``: base sequence + last offset delta, wrapping at 2^31."""
    if base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return (base_sequence + last_offset_delta) % (1 << 31)


def decrement_sequence(seq: int, decrement: int) -> int:
    """Kafka ``DefaultRecordBatch.decrementSequence``: ``seq`` moved back by ``decrement``,
    wrapping at 2^31 as :func:`last_sequence_of` does forward."""
    if seq < decrement:
        return (seq - decrement) % (1 << 31)
    return seq - decrement


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
        size = INT32.unpack_from(buf, start + LENGTH_OFFSET)[0] + LOG_OVERHEAD
        if size < RECORD_BATCH_OVERHEAD or start + size > len(buf):
            raise CorruptRecordError(
                f"record batch at position {self.position} has size {size}, "
                f"below the {RECORD_BATCH_OVERHEAD}-byte v2 header or past the end of the data")
        (base_offset, _, epoch, magic, crc, attributes, last_delta, base_ts, max_ts,
         producer_id, producer_epoch, base_sequence, count) = V2_HEADER.unpack_from(buf, start)
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
            offset, size, crc, _, attributes, timestamp = LEGACY_HEADER_V1.unpack_from(buf, start)
            minimum = RECORD_OVERHEAD_V1
        else:
            offset, size, crc, _, attributes = LEGACY_HEADER_V0.unpack_from(buf, start)
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
        """Kafka ``lastSequence`` (:func:`last_sequence_of`)."""
        return last_sequence_of(self.base_sequence, self.last_offset_delta)

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

    def records_payload(self, max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES, scratch: bool = False):
        """The records section (v2: after the 61-byte header; legacy wrapper: its value),
        decompressed when the entry is compressed (v2 with ``scratch``: maybe into the
        thread's scratch buffer, see :func:`records.codecs.decompress`)."""
        if self.magic == MAGIC_V2:
            raw = self.buf[self.start + RECORDS_OFFSET:self.start + self.size_bytes]
            if self.compression == codecs.NONE:
                return raw
            return codecs.decompress(self.compression, raw, magic=MAGIC_V2, max_bytes=max_bytes, scratch=scratch)
        _key, value = legacy_key_value(self.buf, self.start, self.size_bytes, self.magic)
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
            INT64.pack_into(buf, self.start + BASE_OFFSET_OFFSET, base)
            self._base_offset = base
        else:
            INT64.pack_into(buf, self.start, last_offset)
            if self.compression == codecs.NONE:
                self._base_offset = last_offset
            else:
                self._base_offset = None if self._record_count is None else last_offset - self._record_count + 1
        self.last_offset = last_offset

    def set_partition_leader_epoch(self, epoch: int) -> None:
        """v2 only (bytes 12-15, outside the CRC); ignored for legacy entries."""
        if self.magic != MAGIC_V2:
            return
        INT32.pack_into(self._writable(), self.start + PARTITION_LEADER_EPOCH_OFFSET, epoch)
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
            INT16.pack_into(buf, start + ATTRIBUTES_OFFSET, attributes)
            INT64.pack_into(buf, start + MAX_TIMESTAMP_OFFSET, timestamp)
            crc = crc32c(buf[start + ATTRIBUTES_OFFSET:start + self.size_bytes])
            UINT32.pack_into(buf, start + CRC_OFFSET, crc)
        else:
            attributes = self.compression | (LEGACY_TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0)
            buf[start + LEGACY_ATTRIBUTES_OFFSET] = attributes
            INT64.pack_into(buf, start + LEGACY_TIMESTAMP_OFFSET, timestamp)
            self.base_timestamp = timestamp
            crc = zlib.crc32(buf[start + MAGIC_OFFSET:start + self.size_bytes])
            UINT32.pack_into(buf, start + LEGACY_CRC_OFFSET, crc)
        self.attributes = attributes
        self.crc = crc
        self.timestamp_type = timestamp_type
        self.max_timestamp = timestamp

    set_legacy_timestamp = set_max_timestamp

__all__ = ["BatchView", "last_sequence_of", "decrement_sequence"]
