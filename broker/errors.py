"""The one table that turns exceptions into Kafka error codes.

Storage and protocol raise their own exception types, named after the Kafka error
they stand for; handlers call :func:`error_code_for` at the wire boundary and put
the code in the partition's (or the request's) answer. An exception not in the
table is a bug and maps to UNKNOWN_SERVER_ERROR (-1) after being logged by the
caller.
"""

from __future__ import annotations

import sundial.storage.errors as se
import sundial.storage.topics as st
from sundial.protocol.errors import ErrorCode

class CloseConnection(Exception):
    """Raised by a handler to close the connection without answering (e.g. acks=0 failures)."""


_CODES: dict[type, ErrorCode] = {
    se.OffsetOutOfRangeError: ErrorCode.OFFSET_OUT_OF_RANGE,
    se.CorruptRecordError: ErrorCode.CORRUPT_MESSAGE,
    se.RecordTooLargeError: ErrorCode.MESSAGE_TOO_LARGE,
    se.RecordBatchTooLargeError: ErrorCode.RECORD_LIST_TOO_LARGE,
    se.InvalidTimestampError: ErrorCode.INVALID_TIMESTAMP,
    se.InvalidRecordError: ErrorCode.INVALID_RECORD,
    se.UnsupportedForMessageFormatError: ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    se.UnsupportedCompressionTypeError: ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
    se.OutOfOrderSequenceError: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    se.InvalidProducerEpochError: ErrorCode.INVALID_PRODUCER_EPOCH,
    se.UnknownProducerIdError: ErrorCode.UNKNOWN_PRODUCER_ID,
    se.InvalidTxnStateError: ErrorCode.INVALID_TXN_STATE,
    se.TransactionCoordinatorFencedError: ErrorCode.TRANSACTION_COORDINATOR_FENCED,
    se.KafkaStorageError: ErrorCode.KAFKA_STORAGE_ERROR,
    st.TopicAlreadyExistsError: ErrorCode.TOPIC_ALREADY_EXISTS,
    st.InvalidTopicError: ErrorCode.INVALID_TOPIC_EXCEPTION,
    st.InvalidPartitionsError: ErrorCode.INVALID_PARTITIONS,
    st.UnknownTopicOrPartitionError: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
}

#: Errors after which a Produce answer reports log_start_offset -1 (Kafka's ReplicaManager).
NO_LOG_START_OFFSET = frozenset({
    ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR,
})


def error_code_for(exc: BaseException) -> ErrorCode:
    """Kafka error code for an exception (walks the class hierarchy, most specific first)."""
    for cls in type(exc).__mro__:
        code = _CODES.get(cls)
        if code is not None:
            return code
    code = getattr(exc, "error_code", None)  # ProtocolError and ConfigError-like carriers
    if code is not None:
        return ErrorCode(code)
    return ErrorCode.UNKNOWN_SERVER_ERROR
