"""Framing: walking the entries of a buffer or a ``.log`` file, and iterating their records.

Every magic shares the 17-byte prefix of :mod:`records.layout` (offset, size, magic).
The walkers stop silently when 17 bytes or fewer remain or the declared entry runs past
the end (a partial trailing entry, as Kafka's ``FileLogInputStream``); they raise
:class:`~records.errors.CorruptRecordError` for ``size < 14`` (checked first, so a
zero-filled tail is corrupt, not partial), for a magic outside 0..2, and for an entry
too small for its magic's header.

* :func:`iter_batches` / :func:`iter_file_batches` — a :class:`~records.batch.BatchView`
  per entry of a buffer / of a file region (read with ``pread`` in chunks).
* :func:`walk_headers` — only the header fields of each entry of a file region
  (:class:`BatchHeader`), read with small ``pread`` calls: what a segment needs to find
  a batch by offset, its next offset or its producer state, without building views.
  Given a page-cache probe, it raises :class:`NotInPageCache` instead of reading a
  range the probe says is not resident (so an event loop never waits on the disk).
* :func:`iter_records` — the records of a view or a buffer, any magic, reader semantics.
"""

from __future__ import annotations

import os
from typing import Callable, Iterator, NamedTuple

from . import codecs
from .batch import BatchView
from .errors import CorruptRecordError
from .layout import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE_UP_TO_MAGIC,
    INT16,
    INT32,
    INT64,
    LAST_OFFSET_DELTA_OFFSET,
    LEGACY_TIMESTAMP_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V0,
    MAGIC_V1,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    MIN_ENTRY_SIZE,
    NO_TIMESTAMP,
    OFFSET_SIZE,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORD_OVERHEAD_V1,
    V2_PRODUCER,
)
from .legacy import iter_legacy_records
from .record import Record
from .v2 import iter_v2_records

_unpack_offset_size = OFFSET_SIZE.unpack_from
_unpack_i16 = INT16.unpack_from
_unpack_i32 = INT32.unpack_from
_unpack_i64 = INT64.unpack_from
_unpack_v2_producer = V2_PRODUCER.unpack_from

#: Bytes read per pread while walking batch headers from an index position.
HEADER_SCAN_CHUNK_BYTES = 16 * 1024


class NotInPageCache(Exception):
    """A walk given a page-cache probe met a range of its file that is not resident:
    reading it would wait on the disk. ``fd``, ``position`` and ``size`` name the range
    (the descriptor is the caller's; it may close once the caller's call returns)."""

    def __init__(self, fd: int, position: int, size: int) -> None:
        super().__init__(f"{size} bytes at position {position} are not in the page cache")
        self.fd = fd
        self.position = position
        self.size = size


def _as_memoryview(buf) -> memoryview:
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def _undersized_entry(size: int, position: int) -> CorruptRecordError:
    """An entry whose size field is below the smallest entry (the walk cannot step past it)."""
    return CorruptRecordError(f"record size {size} at position {position} is smaller than the minimum record "
                              f"overhead ({MIN_ENTRY_SIZE})")


def iter_batches(buf, position: int = 0, *, end: int | None = None,
                 file_position: int | None = None) -> Iterator[BatchView]:
    """Yield a :class:`BatchView` for each complete entry of ``buf`` from ``position``.

    ``end`` limits the region (default: the whole buffer). With ``file_position``,
    each view's ``position`` is reported as ``file_position + (index - position)``.
    """
    mv = _as_memoryview(buf)
    limit = len(mv) if end is None else min(end, len(mv))
    pos = position
    shift = 0 if file_position is None else file_position - position
    unpack = _unpack_offset_size
    while limit - pos > HEADER_SIZE_UP_TO_MAGIC:
        size = unpack(mv, pos)[1]
        if size < MIN_ENTRY_SIZE:
            raise _undersized_entry(size, pos + shift)
        entry_end = pos + LOG_OVERHEAD + size
        if entry_end > limit:
            return
        yield BatchView(mv, pos, pos + shift)
        pos = entry_end


def iter_file_batches(fd: int, position: int, end: int, *,
                      chunk_bytes: int = 1 << 20) -> Iterator[BatchView]:
    """Yield views of the complete entries of file ``fd`` in ``[position, end)``.

    Reads with ``os.pread`` in chunks of about ``chunk_bytes`` (an entry larger than a
    chunk is read whole); each view's ``position`` is its file position. Same stopping
    and corruption rules as :func:`iter_batches`.
    """
    while end - position > HEADER_SIZE_UP_TO_MAGIC:
        want = min(chunk_bytes, end - position)
        chunk = os.pread(fd, want, position)
        if len(chunk) <= HEADER_SIZE_UP_TO_MAGIC:
            return
        consumed = 0
        for view in iter_batches(chunk, 0, file_position=position):
            consumed = view.end
            yield view
        if consumed == 0:
            # The first entry does not fit in the chunk: read it whole, if it is complete.
            size = _unpack_offset_size(chunk, 0)[1]
            if size < MIN_ENTRY_SIZE:
                raise _undersized_entry(size, position)
            entry_bytes = LOG_OVERHEAD + size
            if position + entry_bytes > end:
                return
            chunk = os.pread(fd, entry_bytes, position)
            if len(chunk) < entry_bytes:
                return
            view = BatchView(memoryview(chunk), 0, position)
            yield view
            consumed = entry_bytes
        position += consumed


def batches_of(data) -> Iterator[BatchView]:
    """Views of one BatchView (itself) or of every entry in a bytes-like object."""
    if isinstance(data, BatchView):
        yield data
    else:
        yield from iter_batches(data)


class BatchHeader(NamedTuple):
    """What a header walk tells about one entry of a ``.log`` file (no record parsing)."""

    position: int          # file position of the entry
    size_bytes: int        # including the 12-byte log overhead
    magic: int
    first_field: int       # v2: base offset; legacy: offset of the (last) message
    last_offset: int
    max_timestamp: int     # -1 for magic 0
    leader_epoch: int      # v2 partition leader epoch, else -1
    attributes: int = 0
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1


def walk_headers(fd: int, position: int, end: int, chunk_bytes: int = HEADER_SCAN_CHUNK_BYTES, *,
                 with_producer: bool = False,
                 probe: Callable[[int, int, int], bool] | None = None) -> Iterator[BatchHeader]:
    """Headers of the complete entries of ``fd`` in ``[position, end)``.

    Stops silently at a partial trailing entry or when 17 bytes or fewer remain;
    raises :class:`CorruptRecordError` for ``size < 14``, a magic outside 0..2 or an
    entry smaller than its magic's header — the rules of Kafka's ``FileLogInputStream``.
    ``with_producer`` also fills the v2 attributes and producer fields. ``probe(fd,
    position, size)``, when given, is asked before each read whether the range is in the
    page cache; when it is not, :class:`NotInPageCache` is raised and nothing is read.
    """
    # Field positions as locals: this loop runs once per batch of every search and load.
    header_bytes = RECORD_BATCH_OVERHEAD
    magic_at, epoch_at, attributes_at = MAGIC_OFFSET, PARTITION_LEADER_EPOCH_OFFSET, ATTRIBUTES_OFFSET
    last_delta_at, max_ts_at, producer_at = LAST_OFFSET_DELTA_OFFSET, MAX_TIMESTAMP_OFFSET, PRODUCER_ID_OFFSET
    v2_needs = MAX_TIMESTAMP_OFFSET + 8                   # up to the max timestamp
    v1_ts_at = LEGACY_TIMESTAMP_OFFSET
    v1_needs = LEGACY_TIMESTAMP_OFFSET + 8
    chunk_bytes = max(chunk_bytes, header_bytes)
    buf = b""
    buf_pos = position
    pos = position
    while end - pos > HEADER_SIZE_UP_TO_MAGIC:
        need = min(header_bytes, end - pos)
        i = pos - buf_pos
        if i < 0 or i + need > len(buf):
            want = min(chunk_bytes, end - pos)
            if probe is not None and not probe(fd, pos, want):
                raise NotInPageCache(fd, pos, want)
            buf = os.pread(fd, want, pos)
            buf_pos = pos
            i = 0
            if len(buf) <= HEADER_SIZE_UP_TO_MAGIC:
                return
            need = min(need, len(buf))
        first, size = _unpack_offset_size(buf, i)
        if size < MIN_ENTRY_SIZE:
            raise _undersized_entry(size, pos)
        entry_bytes = size + LOG_OVERHEAD
        if pos + entry_bytes > end:
            return
        magic = buf[i + magic_at]
        if magic == MAGIC_V2:
            if entry_bytes < header_bytes or i + v2_needs > len(buf):
                raise CorruptRecordError(
                    f"record batch at position {pos} has size {entry_bytes}, below the {header_bytes}-byte "
                    "v2 header")
            last = first + _unpack_i32(buf, i + last_delta_at)[0]
            max_ts = _unpack_i64(buf, i + max_ts_at)[0]
            epoch = _unpack_i32(buf, i + epoch_at)[0]
            if with_producer and i + header_bytes <= len(buf):
                pid, pepoch, bseq = _unpack_v2_producer(buf, i + producer_at)
                yield BatchHeader(pos, entry_bytes, MAGIC_V2, first, last, max_ts, epoch,
                                  _unpack_i16(buf, i + attributes_at)[0], pid, pepoch, bseq)
                pos += entry_bytes
                continue
        elif magic == MAGIC_V1:
            if size < RECORD_OVERHEAD_V1 or i + v1_needs > len(buf):
                raise CorruptRecordError(f"v1 message at position {pos} has size {size}, below the minimum")
            last = first
            max_ts = _unpack_i64(buf, i + v1_ts_at)[0]
            epoch = -1
        elif magic == MAGIC_V0:
            last = first
            max_ts = NO_TIMESTAMP
            epoch = -1
        else:
            raise CorruptRecordError(f"invalid magic byte {magic} in record entry at position {pos}")
        yield BatchHeader(pos, entry_bytes, magic, first, last, max_ts, epoch)
        pos += entry_bytes


def iter_records(data, *, max_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES) -> Iterator[Record]:
    """Records of a :class:`BatchView`, or of every entry in a bytes-like buffer, in order.

    Compressed data is inflated with a limit of ``max_bytes``. Structural problems raise
    :class:`InvalidRecordError` (v2) or :class:`CorruptRecordError` (legacy, codecs).
    """
    for view in batches_of(data):
        if view.magic == MAGIC_V2:
            yield from iter_v2_records(view, max_bytes)
        else:
            yield from iter_legacy_records(view, max_bytes)


__all__ = ["iter_batches", "iter_file_batches", "batches_of", "iter_records", "walk_headers", "BatchHeader",
           "NotInPageCache", "HEADER_SCAN_CHUNK_BYTES"]
