"""Entry layouts of the per-segment index files (Kafka ``OffsetIndex``, ``TimeIndex``, ``AbortedTxn``).

Both files are arrays of fixed-size big-endian entries without a header; offsets are
stored relative to the segment's base offset (base 50: offset 55 is stored as 5).

Offset index (``<base>.index``), 8 bytes per entry::

    0   relative offset  int32
    4   position         int32   byte position of a batch in the segment's .log

Time index (``<base>.timeindex``, KIP-33), 12 bytes per entry::

    0   timestamp        int64
    8   relative offset  int32

Transaction index (``<base>.txnindex``), 34 bytes per aborted transaction::

    0   version             int16   0
    2   producer_id         int64
    10  first_offset        int64
    18  last_offset         int64   offset of the ABORT marker
    26  last_stable_offset  int64

The storage index classes (``storage/offset_index.py``, ``storage/time_index.py``), the
segment's index checks and ``sundial dump-log`` all read and write entries through
these names.
"""

from __future__ import annotations

import struct

OFFSET_ENTRY = struct.Struct(">ii")          # relative offset, position
OFFSET_ENTRY_SIZE = OFFSET_ENTRY.size        # 8
OFFSET_ENTRY_RELATIVE_OFFSET_AT = 0
OFFSET_ENTRY_POSITION_AT = 4

TIME_ENTRY = struct.Struct(">qi")            # timestamp, relative offset
TIME_ENTRY_SIZE = TIME_ENTRY.size            # 12
TIME_ENTRY_TIMESTAMP_AT = 0
TIME_ENTRY_RELATIVE_OFFSET_AT = 8

ABORTED_TXN = struct.Struct(">hqqqq")       # version, producer id, first, last, last stable offset
ABORTED_TXN_SIZE = ABORTED_TXN.size          # 34
ABORTED_TXN_VERSION = 0

#: The int32 relative offset of either entry (``unpack_from(buf, slot * size + *_RELATIVE_OFFSET_AT)``).
RELATIVE_OFFSET = struct.Struct(">i")
#: The int64 timestamp of a time entry.
TIMESTAMP = struct.Struct(">q")


__all__ = [
    "OFFSET_ENTRY", "OFFSET_ENTRY_SIZE", "OFFSET_ENTRY_RELATIVE_OFFSET_AT", "OFFSET_ENTRY_POSITION_AT",
    "TIME_ENTRY", "TIME_ENTRY_SIZE", "TIME_ENTRY_TIMESTAMP_AT", "TIME_ENTRY_RELATIVE_OFFSET_AT",
    "RELATIVE_OFFSET", "TIMESTAMP", "ABORTED_TXN", "ABORTED_TXN_SIZE", "ABORTED_TXN_VERSION",
]
