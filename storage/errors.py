"""Exceptions raised by storage/.

Every class is named after the Kafka error the broker reports for it; the mapping to
wire error codes lives in exactly one place, ``broker/errors.py``. Storage code never
deals in numeric error codes. The record-format errors (``CorruptRecordError``,
``InvalidRecordError``, ``InvalidTimestampError``, ``UnsupportedCompressionTypeError``)
are defined in :mod:`records.errors`, where the record package raises them, and are
re-exported here; ``StorageError`` is their base, ``records.errors.KafkaError``.

=====================================  =================================================
exception                              Kafka error (code)
=====================================  =================================================
``OffsetOutOfRangeError``              OFFSET_OUT_OF_RANGE (1)
``CorruptRecordError``                 CORRUPT_MESSAGE (2)
``RecordTooLargeError``                MESSAGE_TOO_LARGE (10)
``RecordBatchTooLargeError``           RECORD_LIST_TOO_LARGE (18)
``InvalidRecordError``                 INVALID_RECORD (87)
``InvalidTimestampError``              INVALID_TIMESTAMP (32), a kind of InvalidRecordError
``UnsupportedForMessageFormatError``   UNSUPPORTED_FOR_MESSAGE_FORMAT (43)
``UnsupportedCompressionTypeError``    UNSUPPORTED_COMPRESSION_TYPE (76)
``OutOfOrderSequenceError``            OUT_OF_ORDER_SEQUENCE_NUMBER (45)
``InvalidProducerEpochError``          INVALID_PRODUCER_EPOCH (47)
``UnknownProducerIdError``             UNKNOWN_PRODUCER_ID (59)
``InvalidTxnStateError``               INVALID_TXN_STATE (48)
``TransactionCoordinatorFencedError``  TRANSACTION_COORDINATOR_FENCED (52)
``KafkaStorageError``                  KAFKA_STORAGE_ERROR (56): any OSError on a log
``LogSegmentOffsetOverflowError``      internal (offset not representable in a segment)
``CorruptIndexError``                  internal (index file fails its sanity check)
``InvalidOffsetError``                 internal (index append out of order)
=====================================  =================================================

Record validation failures carry ``record_errors``, the per-record errors Produce v8+
reports; :mod:`records.errors` describes them.
"""

from __future__ import annotations

from sundial.records.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    RecordError,
    UnsupportedCompressionTypeError,
)

#: Base of every exception storage/ raises on purpose. It is the record package's base,
#: so the record-format errors below (defined there, raised by both layers) are storage
#: errors too.
StorageError = KafkaError


class OffsetOutOfRangeError(StorageError):
    """A fetch or lookup offset lies outside [log start offset, log end offset]."""


class RecordTooLargeError(StorageError):
    """A batch (including its 12-byte log overhead) exceeds ``max.message.bytes``."""


class RecordBatchTooLargeError(StorageError):
    """The appended record set is larger than ``segment.bytes``."""


class UnsupportedForMessageFormatError(StorageError):
    """The request needs a newer record format than the topic stores (e.g. idempotence into magic < 2)."""


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's sequence number skips ahead of the expected one."""


class InvalidProducerEpochError(StorageError):
    """An idempotent producer's epoch is older than the one last seen."""


class InvalidTxnStateError(StorageError):
    """A producer with an open transaction appended a non-transactional batch (Kafka ``InvalidTxnStateException``)."""


class TransactionCoordinatorFencedError(StorageError):
    """A transaction marker carries a coordinator epoch older than the one last seen for its producer."""


class UnknownProducerIdError(StorageError):
    """No state is known for the producer id of an idempotent append."""


class KafkaStorageError(StorageError):
    """An operating-system error while reading or writing a log (disk full, I/O error)."""

    @classmethod
    def from_os_error(cls, exc: OSError, what: str) -> "KafkaStorageError":
        err = cls(f"{what}: {exc.strerror or exc}")
        err.__cause__ = exc
        return err


class LogSegmentOffsetOverflowError(StorageError):
    """An offset cannot be stored relative to its segment's base offset (outside int32)."""


class CorruptIndexError(StorageError):
    """An offset or time index file fails its sanity check and must be rebuilt."""


class InvalidOffsetError(StorageError):
    """An index append would break the strictly increasing order of entries."""


__all__ = [
    "StorageError",
    "OffsetOutOfRangeError",
    "CorruptRecordError",
    "RecordTooLargeError",
    "RecordBatchTooLargeError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "UnsupportedForMessageFormatError",
    "UnsupportedCompressionTypeError",
    "OutOfOrderSequenceError",
    "InvalidProducerEpochError",
    "UnknownProducerIdError",
    "InvalidTxnStateError",
    "TransactionCoordinatorFencedError",
    "KafkaStorageError",
    "LogSegmentOffsetOverflowError",
    "CorruptIndexError",
    "InvalidOffsetError",
    "RecordError",
]
