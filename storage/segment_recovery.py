"""Rebuilding and checking the indexes of one segment: the recovery half of :class:`LogSegment`.

:class:`SegmentRecovery` is a base of :class:`storage.segment.LogSegment`; its methods
work on the segment's files and state like the segment's own.

Recovery (Kafka ``LogSegment.recover``, reference §8.2) rebuilds both indexes from the
batches, validating each (CRC, sizes, offset range), truncates the file after the last
valid batch (or, when repairing a segment below the recovery point, keeps the data and
rebuilds only the indexes) and writes the final time entry.

Index checks (beyond Kafka: KAFKA-10207, KAFKA-19200; run by :mod:`storage.recovery` on
every load) read a few dozen bytes per file to decide whether the indexes can be
trusted: sizes against the entry width (:mod:`records.index_entries`, the layouts
``sundial dump-log`` reads too), entries that increase, no zero-filled tail, a last
offset entry that points at its batch, a time index present when records carry
timestamps.
"""

from __future__ import annotations

import os
from typing import Callable

import structlog

from sundial.records.batch import BatchView
from sundial.records.errors import CorruptRecordError, InvalidRecordError
from sundial.records.framing import BatchHeader, walk_headers
from sundial.records.index_entries import OFFSET_ENTRY, OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE
from sundial.records.layout import HEADER_SIZE_UP_TO_MAGIC, INT32_MAX, LOG_OVERHEAD, MAGIC_V2, MIN_ENTRY_SIZE, OFFSET_SIZE

from .errors import KafkaStorageError
from .offset_index import OffsetIndex
from .time_index import NO_TIMESTAMP, TimeIndex

logger = structlog.get_logger(__name__)

#: Bytes read per pread while recovering (validating whole batches).
RECOVERY_CHUNK_BYTES = 8 * 1024 * 1024

_unpack_offset_size = OFFSET_SIZE.unpack_from
_UNVERIFIED = BatchHeader(-1, 0, 0, -1, -1, -1, -1)


class SegmentRecovery:
    """Recovery and index checks of a :class:`~storage.segment.LogSegment` (see module doc)."""

    __slots__ = ()

    # -- recovery ----------------------------------------------------------------------------------
    def recover(self, *, truncate: bool = True, on_batch: Callable | None = None,
                progress: Callable[[int], None] | None = None) -> int:
        """Rebuild both indexes from the batches (§8.2); returns the bytes cut from the end.

        Each batch is validated (CRC, sizes, offset range). The first invalid one ends the
        scan; with ``truncate`` the ``.log`` is cut there (Kafka), otherwise it is kept and
        only the indexes are rebuilt (repair of a segment below the recovery point).
        ``on_batch(view)`` sees every valid batch (producer state).
        """
        self.offset_index.reset()
        self.time_index.reset()
        fd = self.fd
        file_size = os.fstat(fd).st_size
        end = max(self.size_bytes, file_size)
        interval = self.index_interval_bytes
        # state: max timestamp, its offset, valid bytes, position of the last index entry, next offset
        st = [NO_TIMESTAMP, self.base_offset, 0, 0, self.base_offset]
        first_ts: list[int] = []
        offset_index, time_index = self.offset_index, self.time_index

        def take(view) -> None:
            if not view.crc_valid():
                raise CorruptRecordError(
                    f"record batch at position {view.position} in {self._log_path} is corrupt (crc mismatch)")
            last = view.last_offset
            if not 0 <= last - self.base_offset <= INT32_MAX:
                raise InvalidRecordError(
                    f"offset {last} at position {view.position} does not fit segment base {self.base_offset}")
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
            raise KafkaStorageError.from_os_error(exc, f"cannot read segment {self._log_path}") from exc
        max_ts, offset_of_max, valid_bytes, _, next_offset = st
        truncated = end - valid_bytes
        if error is not None:
            logger.warning("segment_corruption_found", path=self._log_path, base_offset=self.base_offset,
                           position=valid_bytes, error=error)
        if truncate:
            if file_size != valid_bytes:
                self._drop_read_map()
                try:
                    os.ftruncate(fd, valid_bytes)
                except OSError as exc:
                    raise KafkaStorageError.from_os_error(exc, f"cannot truncate segment {self._log_path}") from exc
            self.size_bytes = valid_bytes
            self._preallocated = False
            self._next_offset = next_offset
        else:
            truncated = 0
            self._next_offset = next_offset if error is None else None
        self.offset_index.trim_to_valid_size()
        self._max_ts, self._offset_of_max_ts = max_ts, offset_of_max
        self.time_index.maybe_append(max_ts, offset_of_max, skip_full_check=True)
        self.time_index.trim_to_valid_size()
        self._rolling_base_ts = first_ts[0] if first_ts else None
        self._rolling_base_loaded = True
        self.bytes_since_last_index_entry = 0
        self._cached_mtime_ms = None
        return truncated

    # -- index checks (beyond Kafka: KAFKA-10207, KAFKA-19200) ------------------------------------------
    def check_indexes(self) -> list[str]:
        """Problems found cheaply in this segment's index files (empty list: trusted).

        Never trusts file lengths: checks sizes against the entry width, that the
        entries look strictly increasing (first, last and a sample in between), that no
        zero-filled tail is present, that the last offset entry points at a batch in the
        ``.log`` that can hold its offset, and that a segment whose data carries
        timestamps has a non-empty time index. Reads a few dozen bytes per file.
        """
        problems: list[str] = []
        size = self.size_bytes
        oi, ti = self.offset_index, self.time_index
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
        own_fd = self._fd < 0
        try:
            fd = os.open(self._log_path, os.O_RDONLY) if own_fd else self._fd
        except OSError as exc:
            return [f"log unreadable: {exc}"]
        try:
            return self._check_index_entries(fd, size, problems)
        finally:
            if own_fd:
                os.close(fd)

    def _check_index_entries(self, fd: int, size: int, problems: list[str]) -> list[str]:
        oi, ti = self.offset_index, self.time_index
        base = self.base_offset
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
                h = self._header_at(fd, last.position, size)
                if h is None or h.first_field > last.offset or h.last_offset > last.offset:
                    problems.append(f"offset index last entry {tuple(last)} does not point at its append")
            oi_ok = not problems
        elif first_header is not None and first_header.magic == MAGIC_V2 and size > first_header.size_bytes \
                and first_header.size_bytes > self.index_interval_bytes:
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
                    h = self._batch_holding(fd, size, e.offset, n_oi)
                    if h is _UNVERIFIED:
                        continue
                    if h is None or h.last_offset != e.offset or h.max_timestamp != e.timestamp_ms:
                        problems.append(f"time index entry {tuple(e[:2])} does not match the batch at offset "
                                        f"{e.offset}")
                        break
        elif first_header is not None and first_header.max_timestamp >= 0:
            problems.append("time index empty although the records carry timestamps")
        return problems

    def _header_at(self, fd: int, position: int, size: int) -> BatchHeader | None:
        try:
            h = next(walk_headers(fd, position, size), None)
        except CorruptRecordError:
            return None
        return h if h is not None and h.position == position else None

    def _batch_holding(self, fd: int, size: int, offset: int, n_oi: int,
                       max_batches: int = 4096) -> BatchHeader | None:
        """First batch whose last offset >= ``offset``, located through the offset index file
        (binary search with pread, nothing mapped) and a short header walk."""
        position = 0
        if n_oi:
            try:
                ifd = os.open(self.offset_index.path, os.O_RDONLY)
            except OSError:
                ifd = -1
            if ifd >= 0:
                try:
                    lo, hi = 0, n_oi - 1
                    while lo <= hi:
                        mid = (lo + hi) >> 1
                        rel, pos = OFFSET_ENTRY.unpack(os.pread(ifd, OFFSET_ENTRY_SIZE, mid * OFFSET_ENTRY_SIZE))
                        if self.base_offset + rel <= offset:
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


__all__ = ["SegmentRecovery", "RECOVERY_CHUNK_BYTES"]
