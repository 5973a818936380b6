"""The one Python tokenizer of the records of a v2 batch: :func:`record_spans`.

Every Python walk over the records section of one v2 batch reads its records through this
generator and keeps only what it needs: the structural scan and the timestamp searches of
:mod:`records.walks`, :func:`records.v2.iter_v2_records`, and the cleaner's walks in
``storage/offset_map.py``. Its C twin is ``parse_record`` in ``records/_record.h``, shared by
the C walks; the two apply the same checks in the same order and refuse with the same
message (tests/unit/records/test_tokenizer_contract.py runs every walk, C and Python, on one
corpus and demands the same answers and refusals).

Layout (:mod:`records.layout`): length varint, attributes int8, timestamp delta varlong,
offset delta varint, key length varint + key, value length varint + value, header count
varint, headers (key length varint + key, value length varint + value). A negative key or
value length is null.

``depth`` says how far each record is read: :data:`DELTAS` (length, attributes, timestamp
and offset deltas: the searches), :data:`KEY_VALUE` (and key and value: the cleaner copies
the rest unread) or :data:`FULL` (and the headers; the fields must fill the declared length).
Checks, in order, the first failure raising :class:`~records.errors.InvalidRecordError`:

=============================================  =============================================
failure                                        message
=============================================  =============================================
no bytes left for a declared record            :data:`MISSING`
a varint too long, out of range or cut off     the reader's (:mod:`records.varint`), or
                                               :data:`TRUNCATED`
length < 0 or past the end of the section      :data:`BAD_LENGTH`
a field ending past the record's declared end  :data:`OVERRUN` (a zero-length record too)
a negative header count                        :data:`HEADER_COUNT`
a negative header key length                   :data:`HEADER_KEY`
(FULL) fields ending before the declared end   :data:`SIZE`
bytes after the last record (``to_end``)       :data:`TRAILING`
a negative count                               :data:`NEGATIVE_COUNT`
=============================================  =============================================

Varints are read up to the end of the section (as Kafka reads them from the batch buffer); a
field that then ends past the record's declared end is an overrun.
"""

from __future__ import annotations

from typing import Iterator

from .errors import InvalidRecordError
from .varint import read_varint, read_varlong

DELTAS, KEY_VALUE, FULL = 0, 1, 2

MISSING = "batch declares more records than its data holds"
TRUNCATED = "record runs past the end of its batch"
BAD_LENGTH = "record length runs past the end of its batch"
OVERRUN = "invalid record size: the record's fields run past its declared length"
HEADER_COUNT = "record has a negative header count"
HEADER_KEY = "record has a header with a negative key size"
SIZE = "invalid record size: the record's fields do not fill its declared length"
TRAILING = "incorrect declared batch size: bytes remain after the declared records"
NEGATIVE_COUNT = "negative record count"

#: One record: (attributes_at, offset_delta_at, end, ts_delta, offset_delta, key_at, key_len,
#: value_at, value_len, headers). Positions index the buffer given; key and value fields are
#: None below KEY_VALUE depth; headers is a tuple of (key_at, key_len, value_at, value_len)
#: at FULL depth, else None.
RecordSpan = tuple


def record_spans(b, pos: int, end: int, count: int, depth: int = FULL, *, to_end: bool = False
                 ) -> Iterator[RecordSpan]:
    """Yield the spans of ``count`` records of ``b[pos:end]`` read to ``depth`` (module doc);
    with ``to_end``, refuse bytes left after the last one once the consumer has taken it.
    Never reads at or past ``end``."""
    if count < 0:
        raise InvalidRecordError(NEGATIVE_COUNT)
    if type(b) is not bytes or len(b) != end:
        b = memoryview(b)[:end]           # IndexError at ``end``, positions unchanged
    full = depth == FULL
    try:
        for _ in range(count):
            if pos >= end:
                raise InvalidRecordError(MISSING)
            x = b[pos]
            if x < 0x80:
                length = (x >> 1) ^ -(x & 1)
                body = pos + 1
            else:
                length, body = read_varint(b, pos)
            if length < 0 or length > end - body:
                raise InvalidRecordError(BAD_LENGTH)
            record_end = body + length
            if length < 1:
                raise InvalidRecordError(OVERRUN)
            p = body + 1
            x = b[p]
            if x < 0x80:
                ts_delta = (x >> 1) ^ -(x & 1)
                p += 1
            else:
                ts_delta, p = read_varlong(b, p)
            if p > record_end:
                raise InvalidRecordError(OVERRUN)
            offset_delta_at = p
            x = b[p]
            if x < 0x80:
                offset_delta = (x >> 1) ^ -(x & 1)
                p += 1
            else:
                offset_delta, p = read_varint(b, p)
            if p > record_end:
                raise InvalidRecordError(OVERRUN)
            if depth == DELTAS:
                yield body, offset_delta_at, record_end, ts_delta, offset_delta, None, None, None, None, None
                pos = record_end
                continue
            x = b[p]
            if x < 0x80:
                key_len = (x >> 1) ^ -(x & 1)
                p += 1
            else:
                key_len, p = read_varint(b, p)
            key_at = p
            if p > record_end or key_len > record_end - p:
                raise InvalidRecordError(OVERRUN)
            if key_len > 0:
                p += key_len
            x = b[p]
            if x < 0x80:
                value_len = (x >> 1) ^ -(x & 1)
                p += 1
            else:
                value_len, p = read_varint(b, p)
            value_at = p
            if p > record_end or value_len > record_end - p:
                raise InvalidRecordError(OVERRUN)
            if value_len > 0:
                p += value_len
            headers = None
            if full:
                x = b[p]
                if x < 0x80:
                    header_count = (x >> 1) ^ -(x & 1)
                    p += 1
                else:
                    header_count, p = read_varint(b, p)
                if p > record_end:
                    raise InvalidRecordError(OVERRUN)
                if header_count < 0:
                    raise InvalidRecordError(HEADER_COUNT)
                headers = []
                for _h in range(header_count):
                    hk_len, p = read_varint(b, p)
                    if p > record_end:
                        raise InvalidRecordError(OVERRUN)
                    if hk_len < 0:
                        raise InvalidRecordError(HEADER_KEY)
                    hk_at = p
                    if hk_len > record_end - p:
                        raise InvalidRecordError(OVERRUN)
                    p += hk_len
                    hv_len, p = read_varint(b, p)
                    hv_at = p
                    if p > record_end or hv_len > record_end - p:
                        raise InvalidRecordError(OVERRUN)
                    if hv_len > 0:
                        p += hv_len
                    headers.append((hk_at, hk_len, hv_at, hv_len))
                if p != record_end:
                    raise InvalidRecordError(SIZE)
                headers = tuple(headers)
            yield (body, offset_delta_at, record_end, ts_delta, offset_delta, key_at, key_len, value_at, value_len,
                   headers)
            pos = record_end
    except IndexError:
        raise InvalidRecordError(TRUNCATED) from None
    if to_end and pos != end:
        raise InvalidRecordError(TRAILING)


__all__ = ["record_spans", "RecordSpan", "DELTAS", "KEY_VALUE", "FULL", "MISSING", "TRUNCATED", "BAD_LENGTH",
           "OVERRUN", "HEADER_COUNT", "HEADER_KEY", "SIZE", "TRAILING", "NEGATIVE_COUNT"]
