"""Records of a v2 batch (Kafka ``DefaultRecord``): iteration with reader semantics and the
structural scan the validator runs over every batch.

Record layout and reader semantics: :mod:`records.layout`, :mod:`records.record`. The
per-record walks themselves (Python reference and C) are in :mod:`records.walks`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from . import codecs
from . import walks
from .errors import InvalidRecordError
from .layout import LOG_APPEND_TIME, RECORDS_OFFSET
from .record import Record
from .varint import wrap64
from .tokenizer import FULL, record_spans
from .walks import V2RecordScan

if TYPE_CHECKING:
    from .batch import BatchView


def v2_payload(view: "BatchView", max_bytes: int, scratch: bool = False):
    """(buffer, start, end) of the uncompressed records of a v2 batch (``scratch``: see
    :func:`records.codecs.decompress`; for a caller that drops the buffer at once)."""
    if view.compression == codecs.NONE:
        return view.buf, view.start + RECORDS_OFFSET, view.start + view.size_bytes
    payload = view.records_payload(max_bytes, scratch)
    return payload, 0, len(payload)


def check_count(view: "BatchView") -> int:
    """The batch's records count, refused when negative."""
    count = view._record_count
    if count < 0:
        raise InvalidRecordError(f"found invalid record count {count} in magic v2 batch")
    return count


def iter_v2_records(view: "BatchView", max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES) -> Iterator[Record]:
    """Records of a v2 batch with Kafka's reader semantics; checks count and trailing bytes."""
    count = check_count(view)
    b, pos, end = v2_payload(view, max_bytes)
    if isinstance(b, memoryview):
        b = b[pos:end].tobytes()
        pos, end = 0, len(b)
    base_offset = view._base_offset
    base_ts = view.base_timestamp
    log_append = view.timestamp_type == LOG_APPEND_TIME
    ts_type = view.timestamp_type
    max_ts = view.max_timestamp
    for _a, _o, _e, ts_delta, offset_delta, ks, kl, vs, vl, hdrs in record_spans(b, pos, end, count, FULL,
                                                                                  to_end=True):
        key = bytes(b[ks:ks + kl]) if kl >= 0 else None
        value = bytes(b[vs:vs + vl]) if vl >= 0 else None
        headers = tuple(
            (bytes(b[hs:hs + hl]).decode("utf-8", "surrogateescape"), bytes(b[vs2:vs2 + vl2]) if vl2 >= 0 else None)
            for hs, hl, vs2, vl2 in hdrs)
        yield Record(base_offset + offset_delta, max_ts if log_append else wrap64(base_ts + ts_delta),
                     ts_type, key, value, headers)


def scan_v2_records(view: "BatchView", max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES,
                    payload=None) -> V2RecordScan:
    """Walk every record of a v2 batch, checking its structure (count, record lengths,
    varints, no trailing bytes; :class:`InvalidRecordError` otherwise), and summarise
    timestamps (as ``base_timestamp + delta``, ignoring LogAppendTime), offset deltas and
    null keys. ``payload`` may pass already-decompressed records."""
    count = check_count(view)
    if payload is None:
        b, pos, end = v2_payload(view, max_bytes, scratch=True)  # the scan keeps nothing of it
    else:
        b, pos, end = payload, 0, len(payload)
    return walks._scan_v2(b, pos, end, count, view.base_timestamp)


__all__ = ["iter_v2_records", "scan_v2_records", "v2_payload", "check_count"]
