"""The storage exception tree of docs/architecture.md."""

import pytest

from sundial.storage import errors as E

KAFKA_NAMED = [
    E.OffsetOutOfRangeError, E.CorruptRecordError, E.RecordTooLargeError, E.RecordBatchTooLargeError,
    E.InvalidRecordError, E.InvalidTimestampError, E.UnsupportedForMessageFormatError,
    E.UnsupportedCompressionTypeError, E.OutOfOrderSequenceError, E.InvalidProducerEpochError,
    E.UnknownProducerIdError, E.KafkaStorageError, E.LogSegmentOffsetOverflowError,
    E.CorruptIndexError, E.InvalidOffsetError,
]


@pytest.mark.parametrize("cls", KAFKA_NAMED)
def test_every_error_is_a_storage_error_with_its_message(cls):
    exc = cls("something broke")
    assert isinstance(exc, E.StorageError)
    assert str(exc) == "something broke"
    assert exc.message == "something broke"


def test_invalid_timestamp_is_an_invalid_record_and_carries_record_errors():
    exc = E.InvalidTimestampError("bad timestamps", [(0, "too old"), (2, None)])
    assert isinstance(exc, E.InvalidRecordError)
    assert exc.record_errors == [(0, "too old"), (2, None)]
    assert E.InvalidRecordError("batch rule").record_errors == []


def test_kafka_storage_error_wraps_os_error():
    os_err = OSError(28, "No space left on device")
    exc = E.KafkaStorageError.from_os_error(os_err, "append to topic-0 failed")
    assert "No space left" in str(exc)
    assert exc.__cause__ is os_err


def test_all_is_complete():
    for name in E.__all__:
        assert hasattr(E, name)
    assert set(KAFKA_NAMED) <= {getattr(E, n) for n in E.__all__}
