"""A look at the first record batch header of a records buffer, without validating it.

The broker decides some things about a Produce partition before storage appends it
(Kafka ``ProduceRequest.validateRecords`` and ``hasTransactionalRecords``): whether the
buffer holds exactly one magic-2 batch with records, its codec, its transactional flag.
Those decisions need a few header fields, read here through the layout of
:mod:`records.layout` so that no broker module reads record bytes itself
(``ReplicaManager.produce_records_error`` and ``carries_transactional_batch`` are the
broker's entry points). Nothing here checks the CRC or walks the records: the append
validates the whole batch (:mod:`storage.validator`).
"""

from __future__ import annotations

from typing import NamedTuple

from sundial.records.layout import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    V2_HEADER,
)


class BatchHeaderPeek(NamedTuple):
    """The fields of the first entry's header a request-level check needs (as stored, unchecked)."""

    magic: int
    entry_bytes: int          # batch_length + the 12-byte log overhead, as declared
    compression: int          # attributes & codec mask (records.codecs numbers)
    transactional: bool
    record_count: int


def peek_first_batch(buf) -> BatchHeaderPeek | None:
    """The header fields of the entry at the start of ``buf`` read as a v2 batch header; None when
    ``buf`` is None or shorter than one (61 bytes). The magic is reported as found: for magic 0/1
    the other fields are not meaningful."""
    if buf is None or len(buf) < RECORD_BATCH_OVERHEAD:
        return None
    (_base, length, _epoch, magic, _crc, attributes, _delta, _base_ts, _max_ts, _pid, _pepoch, _seq,
     count) = V2_HEADER.unpack_from(buf, 0)
    return BatchHeaderPeek(magic, length + LOG_OVERHEAD, attributes & COMPRESSION_CODEC_MASK,
                           bool(attributes & TRANSACTIONAL_FLAG_MASK), count)


def first_batch_is_transactional(buf) -> bool:
    """Whether the entry at the start of ``buf`` is a magic-2 batch with the transactional flag
    (the low byte of its attributes; a buffer too short to hold them is not)."""
    return (buf is not None and len(buf) > ATTRIBUTES_OFFSET + 1 and buf[MAGIC_OFFSET] == MAGIC_V2
            and bool(buf[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG_MASK))


__all__ = ["BatchHeaderPeek", "peek_first_batch", "first_batch_is_transactional"]
