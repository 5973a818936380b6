"""Rebuilding and checking the indexes of one segment, for :class:`storage.segment.LogSegment`.

Both halves read the segment's files and its public state only; the segment owns what
they find. :func:`rebuild_indexes` (Kafka ``LogSegment.recover``, reference §8.2) refills
the empty indexes from the batches, validating each (CRC, sizes, offset range), and
returns a :class:`RecoveryScan`; ``LogSegment.recover`` then truncates the file after the
last valid batch (or, when repairing a segment below the recovery point, keeps the data
and rebuilds only the indexes), takes the scan's state as its own and writes the final
time entry.

:func:`check_indexes` (beyond Kafka: KAFKA-10207, KAFKA-19200; run by :mod:`storage.recovery` on
every load) read a few dozen bytes per file to decide whether the indexes can be
trusted: sizes against the entry width (:mod:`records.index_entries`, the layouts
``sundial dump-log`` reads too), entries that increase, no zero-filled tail, a last
offset entry that points at its batch, a time index present when records carry
timestamps.
"""

from __future__ import annotations

import os
from typing import Callable, NamedTuple

from sundial.records.batch import BatchView
from sundial.records.errors import CorruptRecordError, InvalidRecordError
from sundial.records.framing import BatchHeader, walk_headers
from sundial.records.index_entries import OFFSET_ENTRY, OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE
from sundial.records.layout import HEADER_SIZE_UP_TO_MAGIC, INT32_MAX, LOG_OVERHEAD, MAGIC_V2, MIN_ENTRY_SIZE, OFFSET_SIZE

from .errors import KafkaStorageError
from .offset_index import OffsetIndex
from .time_index import NO_TIMESTAMP, TimeIndex

#: Bytes read per pread while recovering (validating whole batches).
RECOVERY_CHUNK_BYTES = 8 * 1024 * 1024

_unpack_offset_size = OFFSET_SIZE.unpack_from
_UNVERIFIED = BatchHeader(-1, 0, 0, -1, -1, -1, -1)


class RecoveryScan(NamedTuple):
    """What :func:`rebuild_indexes` found: the segment applies it to its own state."""

    valid_bytes: int                 # bytes of valid batches from the start of the file
    next_offset: int                 # one past the last valid batch's last offset
    max_timestamp_ms: int
    offset_of_max_timestamp: int
    first_timestamp_ms: int | None   # max timestamp of the first valid batch (rolling base)
    error: str | None                # why the scan stopped early, None at a clean end


def rebuild_indexes(fd: int, end: int, *, base_offset: int, index_interval_bytes: int, offset_index: OffsetIndex,
                    time_index: TimeIndex, log_path: str, on_batch: Callable | None = None,
                    progress: Callable[[int], None] | None = None) -> RecoveryScan:
    """Scan the batches of ``fd`` up to ``end`` and append index entries as the live append
    would (§8.2); the indexes must be empty. Each batch is validated (CRC, sizes, offset
    range); the first invalid one ends the scan. ``on_batch(view)`` sees every valid batch."""
    interval = index_interval_bytes
    # state: max timestamp, its offset, valid bytes, position of the last index entry, next offset
    st = [NO_TIMESTAMP, base_offset, 0, 0, base_offset]
    first_ts: list[int] = []

    def take(view) -> None:
        if not view.crc_valid():
            raise CorruptRecordError(
                f"record batch at position {view.position} in {log_path} is corrupt (crc mismatch)")
        last = view.last_offset
        if not 0 <= last - base_offset <= INT32_MAX:
            raise InvalidRecordError(
                f"offset {last} at position {view.position} does not fit segment base {base_offset}")
        ts = view.max_timestamp
        if not first_ts:
            first_ts.append(ts)
        if ts > st[0]:
            st[0], st[1] = ts, last
        valid = st[2]
        if valid - st[3] > interval:
            offset_index.append(last, valid)
            time_index.maybe_append(st[0], st[1])
            st[3] = valid
        st[2] = valid + view.size_bytes
        st[4] = last + 1
        if on_batch is not None:
            on_batch(view)

    error: str | None = None
    pos = 0
    try:
        while end - pos > HEADER_SIZE_UP_TO_MAGIC:
            want = min(RECOVERY_CHUNK_BYTES, end - pos)
            chunk = os.pread(fd, want, pos)
            if len(chunk) <= HEADER_SIZE_UP_TO_MAGIC:
                break
            mv = memoryview(chunk)
            limit = len(chunk)
            i = 0
            while limit - i > HEADER_SIZE_UP_TO_MAGIC:
                entry_size = _unpack_offset_size(chunk, i)[1]
                if entry_size < MIN_ENTRY_SIZE:
                    raise CorruptRecordError(
                        f"record size {entry_size} at position {pos + i} is smaller than the minimum record "
                        f"overhead ({MIN_ENTRY_SIZE})")
                entry_bytes = entry_size + LOG_OVERHEAD
                if i + entry_bytes > limit:
                    break
                take(BatchView(mv, i, pos + i))
                i += entry_bytes
            if i == 0:
                # The first entry does not fit in a chunk: read it whole if it is complete.
                entry_bytes = _unpack_offset_size(chunk, 0)[1] + LOG_OVERHEAD
                if len(chunk) < want or pos + entry_bytes > end:
                    break
                big = os.pread(fd, entry_bytes, pos)
                if len(big) < entry_bytes:
                    break
                take(BatchView(memoryview(big), 0, pos))
                i = entry_bytes
            elif len(chunk) < want:
                pos += i
                break
            pos += i
            if progress is not None:
                progress(pos)
    except (CorruptRecordError, InvalidRecordError) as exc:
        error = str(exc)
    except OSError as exc:
        raise KafkaStorageError.from_os_error(exc, f"cannot read segment {log_path}") from exc
    max_ts, offset_of_max, valid_bytes, _, next_offset = st
    return RecoveryScan(valid_bytes, next_offset, max_ts, offset_of_max, first_ts[0] if first_ts else None, error)


# -- index checks (beyond Kafka: KAFKA-10207, KAFKA-19200) ----------------------------------------------
def check_indexes(segment) -> list[str]:
    """Problems found cheaply in the index files of ``segment`` (a :class:`~storage.segment.LogSegment`) (empty list: trusted).

    Never trusts file lengths: checks sizes against the entry width, that the
    entries look strictly increasing (first, last and a sample in between), that no
    zero-filled tail is present, that the last offset entry points at a batch in the
    ``.log`` that can hold its offset, and that a segment whose data carries
    timestamps has a non-empty time index. Reads a few dozen bytes per file.
    """
    problems: list[str] = []
    size = segment.size_bytes
    oi, ti = segment.offset_index, segment.time_index
    oi_len = oi.file_length()
    ti_len = ti.file_length()
    if not os.path.exists(oi.path):
        if size > 0:
            problems.append("offset index missing")
    elif oi_len % OFFSET_ENTRY_SIZE:
        problems.append(f"offset index length {oi_len} is not a multiple of {OFFSET_ENTRY_SIZE}")
    if not os.path.exists(ti.path):
        if size > 0:
            problems.append("time index missing")
    elif ti_len % TIME_ENTRY_SIZE:
        problems.append(f"time index length {ti_len} is not a multiple of {TIME_ENTRY_SIZE}")
    if problems:
        return problems
    if size == 0:
        if oi_len or ti_len:
            if oi.peek_entries([0])[0] and any(e != b"\0" * OFFSET_ENTRY_SIZE for e in oi.peek_entries([0, -1])[1]):
                problems.append("offset index has entries but the log is empty")
            if ti.peek_entries([0])[0] and any(e != b"\0" * TIME_ENTRY_SIZE for e in ti.peek_entries([0, -1])[1]):
                problems.append("time index has entries but the log is empty")
        return problems
    own_fd = not segment.has_open_fd
    try:
        fd = os.open(segment.log_path, os.O_RDONLY) if own_fd else segment.fd
    except OSError as exc:
        return [f"log unreadable: {exc}"]
    try:
        return _check_index_entries(segment, fd, size, problems)
    finally:
        if own_fd:
            os.close(fd)

def _check_index_entries(segment, fd: int, size: int, problems: list[str]) -> list[str]:
    oi, ti = segment.offset_index, segment.time_index
    base = segment.base_offset
    n_oi = oi.file_length() // OFFSET_ENTRY_SIZE
    n_ti = ti.file_length() // TIME_ENTRY_SIZE
    first_header: BatchHeader | None = None
    try:
        for h in walk_headers(fd, 0, size):
            first_header = h
            break
    except CorruptRecordError as exc:
        return [f"first batch unreadable: {exc}"]
    oi_ok = True
    if n_oi:
        slots = sorted({0, n_oi - 1, *[(n_oi - 1) * k // 16 for k in range(1, 16)]})
        _, raw = oi.peek_entries(slots)
        entries = [OffsetIndex.parse_entry(r, base) for r in raw]
        for e in entries:
            # The first append (position 0) is never indexed, live or by recovery.
            if e.offset < base or not 0 < e.position < size:
                problems.append(f"offset index entry {tuple(e)} outside the log ({size} bytes)")
                break
        for a, b in zip(entries, entries[1:]):
            if not (a.offset < b.offset and a.position < b.position):
                problems.append(f"offset index entries not increasing: {tuple(a)} then {tuple(b)}")
                break
        if not problems:
            last = entries[-1]
            h = _header_at(fd, last.position, size)
            if h is None or h.first_field > last.offset or h.last_offset > last.offset:
                problems.append(f"offset index last entry {tuple(last)} does not point at its append")
        oi_ok = not problems
    elif first_header is not None and first_header.magic == MAGIC_V2 and size > first_header.size_bytes \
            and first_header.size_bytes > segment.index_interval_bytes:
        # A second append after a first one larger than the interval is always indexed.
        problems.append("offset index empty although the log needs entries")
    if n_ti:
        slots = sorted({0, n_ti - 1, *[(n_ti - 1) * k // 16 for k in range(1, 16)]})
        _, raw = ti.peek_entries(slots)
        entries_t = [TimeIndex.parse_entry(r, base) for r in raw]
        bad = next((e for e in entries_t if e.timestamp_ms < 0 or not 0 <= e.offset - base <= INT32_MAX), None)
        if bad is not None:
            problems.append(f"time index entry {tuple(bad[:2])} is invalid")
        else:
            for a, b in zip(entries_t, entries_t[1:]):
                if not (a.timestamp_ms < b.timestamp_ms and a.offset <= b.offset):
                    problems.append(f"time index entries not increasing: {tuple(a[:2])} then {tuple(b[:2])}")
                    break
        if not problems and oi_ok:
            # Every entry (T, O) names the batch whose last offset is O and whose max timestamp is T.
            for e in {entries_t[0], entries_t[-1]}:
                h = _batch_holding(segment, fd, size, e.offset, n_oi)
                if h is _UNVERIFIED:
                    continue
                if h is None or h.last_offset != e.offset or h.max_timestamp != e.timestamp_ms:
                    problems.append(f"time index entry {tuple(e[:2])} does not match the batch at offset "
                                    f"{e.offset}")
                    break
    elif first_header is not None and first_header.max_timestamp >= 0:
        problems.append("time index empty although the records carry timestamps")
    return problems

def _header_at(fd: int, position: int, size: int) -> BatchHeader | None:
    try:
        h = next(walk_headers(fd, position, size), None)
    except CorruptRecordError:
        return None
    return h if h is not None and h.position == position else None

def _batch_holding(segment, fd: int, size: int, offset: int, n_oi: int,
               max_batches: int = 4096) -> BatchHeader | None:
    """First batch whose last offset >= ``offset``, located through the offset index file
    (binary search with pread, nothing mapped) and a short header walk."""
    position = 0
    if n_oi:
        try:
            ifd = os.open(segment.offset_index.path, os.O_RDONLY)
        except OSError:
            ifd = -1
        if ifd >= 0:
            try:
                lo, hi = 0, n_oi - 1
                while lo <= hi:
                    mid = (lo + hi) >> 1
                    rel, pos = OFFSET_ENTRY.unpack(os.pread(ifd, OFFSET_ENTRY_SIZE, mid * OFFSET_ENTRY_SIZE))
                    if segment.base_offset + rel <= offset:
                        position = pos
                        lo = mid + 1
                    else:
                        hi = mid - 1
            finally:
                os.close(ifd)
    try:
        for i, h in enumerate(walk_headers(fd, position, size)):
            if h.last_offset >= offset:
                return h
            if i >= max_batches:
                return _UNVERIFIED  # too far from an index entry to check cheaply
    except CorruptRecordError:
        return None
    return None


__all__ = ["RECOVERY_CHUNK_BYTES", "RecoveryScan", "check_indexes", "rebuild_indexes"]
