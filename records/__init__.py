"""Kafka's record format: one home for batches, records, codecs and index entries.

The bottom of the house (Kafka keeps the same knowledge in
``clients/.../common/record``, shared by broker and clients). Everything that reads or
writes record bytes imports it: storage (logs, segments, validator, recovery), the
broker's Produce handler and offsets store, the tools and the Spark source. It imports
nothing of Sundial: only the standard library, ``crc32c`` and ``cramjam``.

Modules, bottom-up:

* :mod:`records.errors` — ``CorruptRecordError``, ``InvalidRecordError``,
  ``InvalidTimestampError``, ``UnsupportedCompressionTypeError`` (base ``KafkaError``).
* :mod:`records.layout` — every byte position: framing, the v2 header (the only Python
  module that spells out 21, 23, 27, 35, 43, 57, 61...), legacy messages, attribute bits.
* :mod:`records.varint` — zig-zag varints, read and written.
* :mod:`records.codecs` — gzip, snappy, lz4, zstd as Kafka frames them, with a
  decompressed-size limit.
* :mod:`records.record` — :class:`Record` and the reader semantics of each magic.
* :mod:`records.legacy` — magic 0/1 messages and compressed wrappers.
* :mod:`records.batch` — :class:`BatchView`, the header view of one entry, and its
  in-place rewrites.
* :mod:`records.walks` — the per-record walks of a v2 batch (Python reference) and the
  glue of the C accelerator ``records._speedups``.
* :mod:`records.v2` — v2 record iteration and the structural scan.
* :mod:`records.framing` — walking a buffer or a ``.log`` file entry by entry
  (views or bare headers) and iterating records of any magic.
* :mod:`records.search` — timestamp search inside one batch.
* :mod:`records.builder` — batches and message sets built byte-exact with Kafka.
* :mod:`records.control` — control batches: COMMIT/ABORT transaction markers.
* :mod:`records.index_entries` — ``.index`` / ``.timeindex`` entry layouts.
* :mod:`records.timestamps` — the wall clock in ms and ListOffsets' sentinel timestamps
  (-1 latest … -5 latest tiered), shared by storage, the daemon and the tools.
"""

from .batch import BatchView
from .builder import BuiltRecords, SimpleRecord, build_batch, build_records
from .errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    UnsupportedCompressionTypeError,
)
from .framing import BatchHeader, batches_of, iter_batches, iter_file_batches, iter_records, walk_headers
from .layout import (
    CREATE_TIME,
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_V0,
    MAGIC_V1,
    MAGIC_V2,
    MIN_ENTRY_SIZE,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    NO_TIMESTAMP_TYPE,
    RECORD_BATCH_OVERHEAD,
    RECORD_OVERHEAD_V0,
    RECORD_OVERHEAD_V1,
    v2_attributes,
)
from .legacy import LegacyMessage, legacy_inner_messages
from .record import Record
from .search import BatchTimestampIndex, find_first_at_or_after, first_record_with_timestamp
from .v2 import iter_v2_records, scan_v2_records
from .varint import encode_varint, read_varint, read_varlong
from .walks import IMPLEMENTATION, V2RecordScan

__all__ = [
    "BatchView", "BatchHeader", "BatchTimestampIndex", "Record", "LegacyMessage", "V2RecordScan",
    "iter_batches", "iter_file_batches", "batches_of", "iter_records", "iter_v2_records", "walk_headers",
    "legacy_inner_messages", "scan_v2_records", "find_first_at_or_after", "first_record_with_timestamp",
    "read_varint", "read_varlong", "encode_varint", "v2_attributes", "IMPLEMENTATION",
    "SimpleRecord", "BuiltRecords", "build_records", "build_batch",
    "KafkaError", "CorruptRecordError", "InvalidRecordError", "InvalidTimestampError",
    "UnsupportedCompressionTypeError",
    "LOG_OVERHEAD", "RECORD_BATCH_OVERHEAD", "HEADER_SIZE_UP_TO_MAGIC", "MIN_ENTRY_SIZE",
    "MAGIC_V0", "MAGIC_V1", "MAGIC_V2", "NO_TIMESTAMP", "NO_TIMESTAMP_TYPE", "CREATE_TIME", "LOG_APPEND_TIME",
    "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH", "NO_SEQUENCE", "NO_PARTITION_LEADER_EPOCH",
    "RECORD_OVERHEAD_V0", "RECORD_OVERHEAD_V1",
]
