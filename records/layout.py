"""Byte layouts of Kafka's record formats: the one place that spells out a field position.

Every other Python module reads and writes batches through these names (the C
accelerator, ``records/_speedups.c``, walks only the records section and repeats none
of the header positions). Index entry layouts are in :mod:`records.index_entries`.

Framing (every magic; ``.log`` files, Produce and Fetch ``records`` fields)
-------------------------------------------------------------------------
::

    0   offset   int64   v2: base offset; legacy: offset of the (last) message
    8   size     int32   bytes that follow (entry size = size + 12, the log overhead)
    16  magic    int8    0, 1 or 2 (byte 16 for every magic)

A reader stops silently when 17 bytes or fewer remain or the declared entry runs past
the end (a partial trailing entry, as Kafka's ``FileLogInputStream``); ``size < 14`` is
corrupt (checked first, so a zero-filled tail is corrupt, not partial), as are a magic
outside 0..2 and an entry too small for its magic's header.

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
zig-zag LEB128 (at most 5 bytes; varlongs 10; :mod:`records.varint`); a negative
key/value length is null.

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

A control batch (attribute bit 5) holds control records whose key is
``(version int16, type int16)``, type 0 ABORT and 1 COMMIT; a transaction marker's value
is ``(version int16, coordinator_epoch int32)``.

A compressed legacy message is a *wrapper* whose value holds a compressed message set
of inner messages. Its offset is the absolute offset of the last inner message; v1
inner offsets are relative (absolute = wrapper offset - last inner + inner; a wrapper
offset 0 means base 0), v0 inner offsets are absolute.
"""

from __future__ import annotations

import struct

# ---------------------------------------------------------------- framing
LOG_OVERHEAD = 12                       # offset int64 + size int32
HEADER_SIZE_UP_TO_MAGIC = 17
MAGIC_OFFSET = 16
MIN_ENTRY_SIZE = 14                     # smallest legal `size` (a v0 message with null key and value)

MAGIC_V0 = 0
MAGIC_V1 = 1
MAGIC_V2 = 2

# ---------------------------------------------------------------- sentinels and timestamp types
NO_TIMESTAMP = -1
NO_TIMESTAMP_TYPE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: The highest producer epoch (an int16, Kafka ``Short.MAX_VALUE``); a producer epoch is
#: exhausted one below it, and InitProducerId then moves to a new producer id.
MAX_PRODUCER_EPOCH = 0x7FFF
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# ---------------------------------------------------------------- v2 batch header
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
RECORD_BATCH_OVERHEAD = 61              # the whole v2 header, log overhead included

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

#: The whole v2 header: base offset, length, leader epoch, magic, crc, attributes,
#: last offset delta, base timestamp, max timestamp, producer id, producer epoch,
#: base sequence, records count.
V2_HEADER = struct.Struct(">qiibIhiqqqhii")
#: Bytes 0..20: base offset, length, leader epoch, magic, crc.
V2_HEADER_BEFORE_CRC = struct.Struct(">qiibI")
#: Bytes 21..60 (the part of the header the CRC covers).
V2_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")
#: Bytes 43..56: producer id, producer epoch, base sequence.
V2_PRODUCER = struct.Struct(">qhi")

# ---------------------------------------------------------------- control records (v2 control batches)
#: Key of a control record: version int16, type int16 (Kafka ``ControlRecordType``).
CONTROL_RECORD_KEY = struct.Struct(">hh")
CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1
#: Value of an ABORT/COMMIT marker: version int16, coordinator epoch int32 (``EndTransactionMarker``).
END_TXN_MARKER_VALUE = struct.Struct(">hi")

# ---------------------------------------------------------------- legacy message (magic 0/1)
LEGACY_CRC_OFFSET = 12
LEGACY_ATTRIBUTES_OFFSET = 17
LEGACY_TIMESTAMP_OFFSET = 18
LEGACY_KEY_LENGTH_OFFSET_V0 = 18
LEGACY_KEY_LENGTH_OFFSET_V1 = 26
RECORD_OVERHEAD_V0 = 14                 # crc .. end with null key and value
RECORD_OVERHEAD_V1 = 22
LEGACY_TIMESTAMP_TYPE_MASK = 0x08

#: offset, size, crc, magic, attributes
LEGACY_HEADER_V0 = struct.Struct(">qiIbb")
#: offset, size, crc, magic, attributes, timestamp
LEGACY_HEADER_V1 = struct.Struct(">qiIbbq")
#: What follows the crc: magic, attributes (v0) and timestamp (v1).
LEGACY_BODY_V0 = struct.Struct(">bb")
LEGACY_BODY_V1 = struct.Struct(">bbq")
#: offset, size, crc: the first 16 bytes of a legacy message.
LEGACY_OFFSET_SIZE_CRC = struct.Struct(">qiI")

# ---------------------------------------------------------------- plain fields
OFFSET_SIZE = struct.Struct(">qi")      # the framing prefix of every entry
INT64 = struct.Struct(">q")
INT32 = struct.Struct(">i")
INT16 = struct.Struct(">h")
UINT32 = struct.Struct(">I")


def v2_attributes(compression: int, timestamp_type: int, is_transactional: bool, is_control: bool) -> int:
    """Kafka ``DefaultRecordBatch.computeAttributes``: the batch attributes written on a rewrite
    (any other bit, such as the delete-horizon flag, is cleared)."""
    return (compression | (TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0)
            | (TRANSACTIONAL_FLAG_MASK if is_transactional else 0) | (CONTROL_FLAG_MASK if is_control else 0))
