"""Exceptions raised by the record package.

Every class is named after the Kafka error it stands for (Kafka keeps these in
``org.apache.kafka.common.errors``, next to the record format, for broker and clients
alike). :class:`KafkaError` is the base; ``storage.errors.StorageError`` *is* this class,
so storage code catches a corrupt batch the same way whichever layer found it, and
``broker/errors.py`` maps each class to its wire error code.

=====================================  =================================================
exception                              Kafka error (code)
=====================================  =================================================
``CorruptRecordError``                 CORRUPT_MESSAGE (2): bad CRC, size, magic, codec data
``InvalidRecordError``                 INVALID_RECORD (87): a batch or record breaks a rule
``InvalidTimestampError``              INVALID_TIMESTAMP (32), a kind of InvalidRecordError
``UnsupportedCompressionTypeError``    UNSUPPORTED_COMPRESSION_TYPE (76)
=====================================  =================================================

Record validation failures (:class:`InvalidRecordError` and its subclass
:class:`InvalidTimestampError`) carry ``record_errors``: a list of
``(batch_index, message | None)`` pairs, ``batch_index`` being the 0-based position of
the offending record inside its batch, exactly what Produce v8+ reports per partition.
The exception's ``message`` is the summary text Produce v8+ sends as ``error_message``.
An ``InvalidRecordError`` raised by a batch-level check carries no record errors
(Kafka: a plain ``InvalidRecordException``, not a ``RecordValidationException``).
"""

from __future__ import annotations

from typing import Iterable

RecordError = tuple[int, "str | None"]


class KafkaError(Exception):
    """Base of every exception named after a Kafka error (Kafka's ``ApiException``)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class CorruptRecordError(KafkaError):
    """Bytes that do not form a record batch: bad CRC, bad size, bad magic, codec failure."""


class InvalidRecordError(KafkaError):
    """A batch or record breaks a validation rule (Kafka ``InvalidRecordException``).

    ``record_errors`` lists ``(batch_index, message | None)`` for record-level
    problems collected over the whole batch; it is empty for batch-level rules.
    """

    def __init__(self, message: str = "", record_errors: Iterable[RecordError] = ()) -> None:
        super().__init__(message)
        self.record_errors: list[RecordError] = list(record_errors)


class InvalidTimestampError(InvalidRecordError):
    """A CreateTime outside the topic's bounds, or a producer-set LogAppendTime flag."""


class UnsupportedCompressionTypeError(KafkaError):
    """A codec the receiving side cannot handle (zstd in magic < 2, or an unknown codec id)."""


__all__ = ["KafkaError", "CorruptRecordError", "InvalidRecordError", "InvalidTimestampError",
           "UnsupportedCompressionTypeError", "RecordError"]
