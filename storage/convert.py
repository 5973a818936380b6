"""Down-conversion of fetched data for old consumers (Kafka ``RecordsUtil.downConvert``, reference §9.3).

``down_convert(data, to_magic, fetch_offset)`` rewrites the complete entries of ``data``
(a slice of a ``.log`` file; a partial trailing entry is dropped) so that a Fetch v0/v1
client (``to_magic`` 0) or a Fetch v2/v3 client (``to_magic`` 1) can read them:

* entries whose magic is already ``<= to_magic`` are copied unchanged;
* control batches are dropped; zstd batches raise
  :class:`UnsupportedCompressionTypeError` (old clients cannot decode zstd);
* every other batch becomes one legacy entry set with **the same codec** (a compressed
  v2 batch becomes one compressed wrapper; an uncompressed one becomes one message per
  record) and the same offsets;
* record headers are dropped (legacy messages have none);
* a LogAppendTime batch keeps its type and every converted record gets the batch's max
  timestamp (what a reader of the v2 batch saw); CreateTime keeps each record's
  timestamp; magic 0 has no timestamps;
* in an uncompressed batch, records below ``fetch_offset`` are dropped (an uncompressed
  legacy "batch" is a single message, so there is nothing to keep them for);
* a negative timestamp other than -1 (accepted in place by Kafka's validator, but not
  representable by its builder) is written as -1.

If no record needed converting (for example ``data`` held only the start of one large
batch), the original bytes are returned unchanged, as Kafka does, so the client can
still make progress. Conversion needs the records, so it costs per-record Python work;
data that needs no conversion should be sent straight from the file instead.
"""

from __future__ import annotations

from sundial.records import codecs
from sundial.records.builder import SimpleRecord, build_records
from sundial.records.errors import UnsupportedCompressionTypeError
from sundial.records.framing import iter_batches, iter_records
from sundial.records.layout import LOG_APPEND_TIME, MAGIC_V0, MAGIC_V1, MAGIC_V2, NO_TIMESTAMP


def down_convert(data, to_magic: int, fetch_offset: int) -> bytes:
    """Rewrite ``data`` for a consumer that reads at most magic ``to_magic`` (0 or 1)."""
    if to_magic not in (MAGIC_V0, MAGIC_V1, MAGIC_V2):
        raise ValueError(f"cannot convert records to magic {to_magic}")
    parts: list[bytes] = []
    converted = 0
    for view in iter_batches(data):
        if to_magic < MAGIC_V2:
            if view.is_control:
                continue
            if view.compression == codecs.ZSTD:
                raise UnsupportedCompressionTypeError(
                    "Down-conversion of zstandard-compressed batches is not supported")
        if view.magic <= to_magic:
            parts.append(view.tobytes())
            continue
        keep_all = to_magic > MAGIC_V1 or view.is_compressed
        offsets: list[int] = []
        records: list[SimpleRecord] = []
        log_append = view.timestamp_type == LOG_APPEND_TIME
        for record in iter_records(view):
            if keep_all or record.offset >= fetch_offset:
                ts = record.timestamp if record.timestamp >= NO_TIMESTAMP else NO_TIMESTAMP
                headers = record.headers if to_magic >= MAGIC_V2 else ()
                records.append(SimpleRecord(ts, record.key, record.value, headers))
                offsets.append(record.offset)
        if not records:
            continue
        built = build_records(
            to_magic, records, offsets=offsets, compression=view.compression,
            timestamp_type=LOG_APPEND_TIME if log_append else 0,
            log_append_time_ms=view.max_timestamp if log_append else NO_TIMESTAMP)
        parts.append(built.buffer)
        converted += built.record_count
    if converted == 0:
        return bytes(data)
    return b"".join(parts)


__all__ = ["down_convert"]
