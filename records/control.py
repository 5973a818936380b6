"""Control batches: transaction markers (Kafka ``EndTransactionMarker``, ``ControlRecordType``).

A transaction marker is a v2 batch with the *control* and *transactional* attribute
bits set, the producer id and epoch of the transaction, base sequence -1 and exactly
one record (offset delta 0, timestamp delta 0, no headers)::

    key    version int16 = 0, type int16 (0 ABORT, 1 COMMIT)       CONTROL_RECORD_KEY
    value  version int16 = 0, coordinator_epoch int32              END_TXN_MARKER_VALUE

The batch's base and max timestamps are the marker's timestamp (CreateTime: Kafka's
coordinator uses its wall clock). :func:`build_end_txn_marker` is byte for byte
``MemoryRecords.withEndTransactionMarker``. Parsing follows Kafka: a key shorter than
4 bytes or with a negative version is an invalid record, an unknown type parses as
UNKNOWN (-1) and is refused as an end-transaction marker; a value shorter than 6 bytes
or with a negative version is invalid. Extra bytes after the known fields are ignored
(newer versions may append fields). Layouts are in :mod:`records.layout`.
"""

from __future__ import annotations

from typing import NamedTuple

from .builder import SimpleRecord, build_records
from .errors import InvalidRecordError
from .layout import (
    CONTROL_RECORD_KEY,
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    END_TXN_MARKER_VALUE,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_SEQUENCE,
)
from .v2 import iter_v2_records

CONTROL_TYPE_UNKNOWN = -1
CONTROL_RECORD_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_TYPE_NAMES = {CONTROL_TYPE_ABORT: "ABORT", CONTROL_TYPE_COMMIT: "COMMIT"}


class EndTxnMarker(NamedTuple):
    """A parsed transaction marker (``control_type`` is CONTROL_TYPE_ABORT or CONTROL_TYPE_COMMIT)."""

    control_type: int
    coordinator_epoch: int

    @property
    def is_abort(self) -> bool:
        return self.control_type == CONTROL_TYPE_ABORT

    @property
    def type_name(self) -> str:
        return _TYPE_NAMES.get(self.control_type, "UNKNOWN")


def control_type_name(control_type: int) -> str:
    return _TYPE_NAMES.get(control_type, "UNKNOWN")


def encode_control_key(control_type: int) -> bytes:
    return CONTROL_RECORD_KEY.pack(CONTROL_RECORD_KEY_VERSION, control_type)


def encode_end_txn_marker_value(coordinator_epoch: int) -> bytes:
    return END_TXN_MARKER_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def parse_control_type(key: bytes | None) -> int:
    """Kafka ``ControlRecordType.parse``: the type id, or CONTROL_TYPE_UNKNOWN."""
    if key is None or len(key) < CONTROL_RECORD_KEY.size:
        raise InvalidRecordError(f"invalid value size found for end control record key: "
                                 f"{0 if key is None else len(key)}")
    version, type_id = CONTROL_RECORD_KEY.unpack_from(key, 0)
    if version < 0:
        raise InvalidRecordError(f"invalid version found for control record: {version}; may indicate data corruption")
    return type_id if type_id in _TYPE_NAMES else CONTROL_TYPE_UNKNOWN


def parse_end_txn_marker(key: bytes | None, value: bytes | None) -> EndTxnMarker:
    """Kafka ``EndTransactionMarker.deserialize`` of one control record."""
    control_type = parse_control_type(key)
    if control_type == CONTROL_TYPE_UNKNOWN:
        raise InvalidRecordError("invalid control record type for end transaction marker")
    if value is None or len(value) < END_TXN_MARKER_VALUE.size:
        raise InvalidRecordError(f"invalid value size found for end transaction marker: "
                                 f"{0 if value is None else len(value)}")
    version, coordinator_epoch = END_TXN_MARKER_VALUE.unpack_from(value, 0)
    if version < 0:
        raise InvalidRecordError(f"invalid version found for end transaction marker: {version}; "
                                 "may indicate data corruption")
    return EndTxnMarker(control_type, coordinator_epoch)


def read_end_txn_marker(view) -> EndTxnMarker | None:
    """The marker of a control :class:`~records.batch.BatchView` (its first record), or None
    for a control batch without records (all of its transaction was compacted away) or with
    a control type other than ABORT/COMMIT."""
    if view.magic != MAGIC_V2 or not view.is_control:
        raise InvalidRecordError("not a control batch")
    for record in iter_v2_records(view):
        control_type = parse_control_type(record.key)
        if control_type == CONTROL_TYPE_UNKNOWN:
            return None
        return parse_end_txn_marker(record.key, record.value)
    return None


def build_end_txn_marker(*, producer_id: int, producer_epoch: int, coordinator_epoch: int, control_type: int,
                         timestamp_ms: int, base_offset: int = 0,
                         partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """One COMMIT/ABORT control batch, byte-exact with ``MemoryRecords.withEndTransactionMarker``."""
    if control_type not in _TYPE_NAMES:
        raise ValueError(f"end transaction marker type must be ABORT (0) or COMMIT (1), not {control_type}")
    record = SimpleRecord(timestamp_ms, encode_control_key(control_type),
                          encode_end_txn_marker_value(coordinator_epoch))
    return build_records(MAGIC_V2, [record], base_offset=base_offset, producer_id=producer_id,
                         producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE, is_transactional=True,
                         is_control=True, partition_leader_epoch=partition_leader_epoch).buffer


__all__ = ["EndTxnMarker", "CONTROL_TYPE_ABORT", "CONTROL_TYPE_COMMIT", "CONTROL_TYPE_UNKNOWN",
           "build_end_txn_marker", "parse_end_txn_marker", "parse_control_type", "read_end_txn_marker",
           "encode_control_key", "encode_end_txn_marker_value", "control_type_name"]
