"""Sundial's storage engine: Kafka-format partition logs on local disks.

The public surface (what ``broker/`` and the tools import) is re-exported here; the
contract is described in docs/architecture.md. Modules, bottom-up:

The record format itself (batch framing and views, records of every magic, codecs,
builders, in-batch search, index entry layouts) is the package :mod:`records`, below
storage; its names listed in ``__all__`` are re-exported here.

* :mod:`storage.errors` — exceptions named after the Kafka errors they map to (the
  record-format ones come from :mod:`records.errors`).
* :mod:`storage.origin` — :class:`AppendOrigin`, where an append comes from (client,
  coordinator, replication) and so which checks it gets.
* :mod:`storage.validator` — append-time validation (LogValidator);
  :mod:`storage.convert` — down-conversion for old fetchers.
* :mod:`storage.files` — file names, atomic writes, positional writes, :class:`FileSlice`.
* :mod:`storage.index`, :mod:`storage.offset_index`, :mod:`storage.time_index` — the
  mmap'd ``.index`` / ``.timeindex`` files; :mod:`storage.txn_index` — ``.txnindex``
  (aborted transactions).
* :mod:`storage.segment` — one ``.log`` with its indexes (LogSegment);
  :mod:`storage.segment_recovery` — its recovery and the index checks run at load.
* :mod:`storage.producer_state` — idempotent producers, open transactions and
  ``.snapshot`` files.
* :mod:`storage.retention` — which segments retention may delete (incl. consumed retention).
* :mod:`storage.recovery` — loading a partition directory, clean or unclean (LogLoader).
* :mod:`storage.segments` — the segment list of a log (its one owner, with the version every
  cache and flush job keys on) and the one segment factory.
* :mod:`storage.log` — :class:`PartitionLog`: append, roll, read, truncation; composing
  :mod:`storage.log_search` (ListOffsets and its caches), :mod:`storage.log_retention`
  (deleting old segments), :mod:`storage.log_flush` (flush jobs) and
  :mod:`storage.log_transactions` (producer state, markers, last stable offset, aborted
  lists; docs/transactions.md).
* :mod:`storage.log_cleaning` (composed by the log), :mod:`storage.offset_map`,
  :mod:`storage.cleaner_batches`, :mod:`storage.cleaner_txn`, :mod:`storage.cleaned_segment`,
  :mod:`storage.cleaner`,
  :mod:`storage.cleaner_manager` — log compaction (docs/compaction.md); the cleaning itself
  may run on another thread from a snapshot, the swap runs on the log's owner thread.
* :mod:`storage.checkpoints` — checkpoint files and the clean-shutdown marker.
* :mod:`storage.topics` — topic metadata persistence and name rules.
* :mod:`storage.log_manager` — :class:`LogManager`: every partition across ``log.dirs``.

Synchronous and not thread-safe; time is always a parameter (``now_ms``).
"""

from .errors import (
    CorruptIndexError,
    CorruptRecordError,
    InvalidOffsetError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    InvalidTxnStateError,
    KafkaStorageError,
    LogSegmentOffsetOverflowError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordBatchTooLargeError,
    RecordError,
    RecordTooLargeError,
    StorageError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from .files import FileSlice
from .log import AppendResult, FetchDataInfo, FlushJob, PartitionLog, SegmentInfo
from .log_manager import LogManager
from .origin import AppendOrigin
from sundial.records import (
    BatchView,
    Record,
    find_first_at_or_after,
    first_record_with_timestamp,
    iter_batches,
    iter_file_batches,
    iter_records,
)
from .retention import DeletedSegment, HeldSegment, RetentionOutcome
from .time_index import TimestampOffset
from .topics import (
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    TopicMetadata,
    UnknownTopicOrPartitionError,
    validate_topic_name,
)
from .validator import BatchInfo, ValidatedRecords, validate_records

__all__ = [
    # errors
    "StorageError", "OffsetOutOfRangeError", "CorruptRecordError", "RecordTooLargeError",
    "RecordBatchTooLargeError", "InvalidRecordError", "InvalidTimestampError", "UnsupportedForMessageFormatError",
    "UnsupportedCompressionTypeError", "OutOfOrderSequenceError", "InvalidProducerEpochError",
    "UnknownProducerIdError", "InvalidTxnStateError", "TransactionCoordinatorFencedError", "KafkaStorageError",
    "LogSegmentOffsetOverflowError", "CorruptIndexError",
    "InvalidOffsetError", "RecordError", "TopicAlreadyExistsError", "InvalidTopicError", "InvalidPartitionsError",
    "UnknownTopicOrPartitionError",
    # logs
    "LogManager", "PartitionLog", "AppendOrigin", "AppendResult", "FetchDataInfo", "FlushJob", "SegmentInfo",
    "FileSlice", "TimestampOffset", "RetentionOutcome", "DeletedSegment", "HeldSegment", "TopicMetadata", "validate_topic_name",
    # records and validation
    "BatchView", "Record", "iter_batches", "iter_file_batches", "iter_records", "find_first_at_or_after",
    "first_record_with_timestamp", "validate_records", "ValidatedRecords", "BatchInfo",
]
