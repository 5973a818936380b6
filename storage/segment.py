"""One log segment: a ``.log`` file of record batches with its offset and time indexes.

Files: ``<20-digit base offset>.log`` (batches, byte-identical to Kafka's), ``.index``
(:mod:`storage.offset_index`), ``.timeindex`` (:mod:`storage.time_index`) and
``.txnindex`` (:mod:`storage.txn_index`, aborted transactions whose ABORT marker is in
this segment; maintained by the partition log, which knows the producer state). The
``.log`` is created with the segment; the index files are created on first use.

Append and index maintenance (Kafka ``LogSegment.append``; reference §4.1)
-------------------------------------------------------------------------
For ``append(largest_offset, largest_timestamp_ms, shallow_offset_of_max_timestamp,
records)`` (nothing happens for an empty buffer):

1. ``position`` = current size. If it is 0, ``largest_timestamp_ms`` becomes the
   *rolling-base timestamp* (what time-based rolling measures from, §5.2).
2. ``largest_offset - base_offset`` must fit in [0, 2^31-1], else
   :class:`LogSegmentOffsetOverflowError`.
3. The bytes are written at ``position``.
4. If ``largest_timestamp_ms`` is strictly greater than the max so far, the max and its
   offset become ``(largest_timestamp_ms, shallow_offset_of_max_timestamp)``.
5. If the bytes appended since the last index entry are **strictly greater** than
   ``index.interval.bytes`` (the counter does not include this append yet): offset entry
   ``(largest_offset, position)`` — the *last* offset of the append with its *start*
   position — then ``time_index.maybe_append(max so far, its offset)``; reset the counter.
6. The counter grows by the size of this append.

So the first append into a segment is never indexed, and a time entry is written only
with an offset entry and only when the max grew. On roll and close the final time entry
``(max, offset of max)`` is written without the full check and both indexes (and a
pre-allocated ``.log``) are trimmed to their valid size (§4.3).

Max timestamp (§4.2): ``(max_timestamp_so_far, offset)`` is loaded lazily from the last
time-index entry; ``largest_timestamp_ms`` is that max when >= 0, else the ``.log``
file's mtime — used by retention and by the choice of segment in a timestamp search.

Reads (§9.1) return a :class:`FileSlice` starting at the first batch whose **last**
offset is >= the wanted offset (found with the offset index and a forward scan of batch
headers), so a slice may begin with records below the fetch offset, as Kafka's does.

Batch headers are walked with :func:`records.framing.walk_headers`. Recovery (§8.2) and
the index checks run at load are in :mod:`storage.segment_recovery`. ``truncate_to``
(§8.4) is batch-granular and reloads the max timestamp from the last time entry plus a
scan of the batches after it.

Not thread-safe; the partition log serialises every call. ``FileSlice`` descriptors stay
valid until the next call on the owning log.
"""

from __future__ import annotations

import mmap
import os
from typing import Callable, NamedTuple

import structlog

from sundial.records.framing import BatchHeader, NotInPageCache, walk_headers
from sundial.records.layout import INT32_MAX

from . import files
from .errors import CorruptRecordError, KafkaStorageError, LogSegmentOffsetOverflowError
from .files import FileSlice
from .index import MappedIndexes
from .offset_index import OffsetIndex, OffsetPosition
from . import segment_recovery
from .time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset
from .txn_index import TransactionIndex

logger = structlog.get_logger(__name__)


class SegmentRead(NamedTuple):
    """Result of :meth:`LogSegment.read`: the slice and the batch it starts with."""

    offset: int                    # last offset of the first batch in the slice
    position: int
    slice: FileSlice
    first_entry_incomplete: bool   # the first batch is larger than the size allowed


def random_segment_jitter(config, rng) -> int:
    """Kafka ``randomSegmentJitter``: abs(random int) % min(segment.jitter.ms, segment.ms) for a
    :class:`~config.topic.TopicConfig`."""
    if config.segment_jitter_ms <= 0:
        return 0
    return rng.randrange(0, 2**31) % min(config.segment_jitter_ms, config.segment_ms)


def _ms_of_mtime(st: os.stat_result) -> int:
    return st.st_mtime_ns // 1_000_000


class LogSegment:
    """A ``.log`` file and its two indexes (see module doc); recovery and index checks read
    through :mod:`storage.segment_recovery`."""

    __slots__ = (
        "dir", "base_offset", "index_interval_bytes", "max_index_size", "_log_path", "_fd", "size_bytes",
        "offset_index", "time_index", "txn_index", "_max_ts", "_offset_of_max_ts", "_rolling_base_ts", "_rolling_base_loaded",
        "created_ms", "roll_jitter_ms", "bytes_since_last_index_entry", "_next_offset", "_preallocated",
        "_cached_mtime_ms", "is_active", "indexes_durable", "_read_map",
    )

    def __init__(self, dir_path: str, base_offset: int, *, index_interval_bytes: int = 4096,
                 max_index_size: int = 10_485_760, roll_jitter_ms: int = 0, created_ms: int | None = None,
                 size_bytes: int = 0, preallocated: bool = False,
                 mapped_indexes: MappedIndexes | None = None) -> None:
        self.dir = dir_path
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self._log_path = files.log_file(dir_path, base_offset)
        self._fd = -1
        self.size_bytes = size_bytes
        # both indexes count against the mappings of whoever built the segment (a private set when None)
        mapped = mapped_indexes if mapped_indexes is not None else MappedIndexes()
        self.offset_index = OffsetIndex(files.index_file(dir_path, base_offset), base_offset, max_index_size, mapped)
        self.time_index = TimeIndex(files.time_index_file(dir_path, base_offset), base_offset, max_index_size, mapped)
        self.txn_index = TransactionIndex(files.txn_index_file(dir_path, base_offset), base_offset)
        self._max_ts: int | None = None          # None: not loaded yet
        self._offset_of_max_ts = base_offset
        self._rolling_base_ts: int | None = None
        self._rolling_base_loaded = size_bytes == 0
        self.created_ms = created_ms
        self.roll_jitter_ms = roll_jitter_ms
        self.bytes_since_last_index_entry = 0
        self._next_offset: int | None = base_offset if size_bytes == 0 else None
        self._preallocated = preallocated
        self._cached_mtime_ms: int | None = None
        self.is_active = False
        self.indexes_durable = True
        self._read_map: mmap.mmap | None = None   # read-only view of the .log for searches

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def create(cls, dir_path: str, base_offset: int, *, index_interval_bytes: int = 4096,
               max_index_size: int = 10_485_760, roll_jitter_ms: int = 0, created_ms: int | None = None,
               preallocate_bytes: int = 0, mapped_indexes: MappedIndexes | None = None) -> "LogSegment":
        """A new, empty segment; its ``.log`` is created now (pre-sized when ``preallocate_bytes``)."""
        seg = cls(dir_path, base_offset, index_interval_bytes=index_interval_bytes,
                  max_index_size=max_index_size, roll_jitter_ms=roll_jitter_ms, created_ms=created_ms,
                  preallocated=preallocate_bytes > 0, mapped_indexes=mapped_indexes)
        try:
            fd = files.open_segment_log(seg._log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
            if preallocate_bytes > 0:
                os.ftruncate(fd, preallocate_bytes)
        except OSError as exc:
            raise KafkaStorageError.from_os_error(exc, f"cannot create segment {seg._log_path}") from exc
        seg._fd = fd
        seg.indexes_durable = False
        return seg

    @classmethod
    def open(cls, dir_path: str, base_offset: int, *, index_interval_bytes: int = 4096,
             max_index_size: int = 10_485_760, roll_jitter_ms: int = 0,
             mapped_indexes: MappedIndexes | None = None) -> "LogSegment":
        """An existing segment; nothing but a stat of the ``.log`` happens here."""
        path = files.log_file(dir_path, base_offset)
        try:
            st = os.stat(path)
        except OSError as exc:
            raise KafkaStorageError.from_os_error(exc, f"cannot open segment {path}") from exc
        seg = cls(dir_path, base_offset, index_interval_bytes=index_interval_bytes,
                  max_index_size=max_index_size, roll_jitter_ms=roll_jitter_ms, size_bytes=st.st_size,
                  mapped_indexes=mapped_indexes)
        seg._cached_mtime_ms = _ms_of_mtime(st)
        return seg

    # -- files ----------------------------------------------------------------------------------
    @property
    def log_path(self) -> str:
        return self._log_path

    @property
    def fd(self) -> int:
        """The ``.log`` descriptor, opened on first use."""
        if self._fd < 0:
            try:
                self._fd = files.open_segment_log(self._log_path, os.O_RDWR)
            except OSError as exc:
                raise KafkaStorageError.from_os_error(exc, f"cannot open segment {self._log_path}") from exc
        return self._fd

    @property
    def has_open_fd(self) -> bool:
        return self._fd >= 0

    def last_modified_ms(self) -> int:
        """mtime of the ``.log`` in ms (cached for inactive segments; Kafka ``lastModified``)."""
        if self._cached_mtime_ms is not None and not self.is_active:
            return self._cached_mtime_ms
        try:
            st = os.fstat(self._fd) if self._fd >= 0 else os.stat(self._log_path)
        except OSError:
            return 0
        self._cached_mtime_ms = _ms_of_mtime(st)
        return self._cached_mtime_ms

    def set_last_modified_ms(self, ms: int) -> None:
        os.utime(self._log_path, ns=(ms * 1_000_000, ms * 1_000_000))
        self._cached_mtime_ms = ms

    # -- offsets --------------------------------------------------------------------------------
    def can_convert_to_relative_offset(self, offset: int) -> bool:
        rel = offset - self.base_offset
        return 0 <= rel <= INT32_MAX

    def _ensure_offset_in_range(self, offset: int) -> None:
        if not self.can_convert_to_relative_offset(offset):
            raise LogSegmentOffsetOverflowError(
                f"detected offset overflow at offset {offset} in segment with base offset {self.base_offset}")

    @property
    def next_offset(self) -> int:
        """One past the last offset stored in this segment (base offset when empty)."""
        if self._next_offset is None:
            self._next_offset = self._read_next_offset()
        return self._next_offset

    def _read_next_offset(self) -> int:
        if self.size_bytes == 0:
            return self.base_offset
        start = self.offset_index.lookup(self.offset_index.last_offset).position
        if start >= self.size_bytes:
            start = 0
        last = None
        for header in walk_headers(self.fd, start, self.size_bytes):
            last = header
        return self.base_offset if last is None else last.last_offset + 1

    # -- max timestamp ----------------------------------------------------------------------------
    def _load_max_timestamp(self) -> None:
        if self._max_ts is None:
            entry = self.time_index.peek_last_entry()
            self._max_ts, self._offset_of_max_ts = entry.timestamp_ms, entry.offset

    @property
    def max_timestamp_so_far(self) -> int:
        self._load_max_timestamp()
        return self._max_ts  # type: ignore[return-value]

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        self._load_max_timestamp()
        return self._offset_of_max_ts

    @property
    def max_timestamp_known(self) -> bool:
        return self._max_ts is not None

    def largest_timestamp_ms(self) -> int:
        """Max record timestamp, or the ``.log`` mtime when the segment has none (§4.2)."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.last_modified_ms()

    @property
    def largest_timestamp_source(self) -> str:
        return "records" if self.max_timestamp_so_far >= 0 else "mtime"

    # -- recovery (§8.2) and index checks ---------------------------------------------------------
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
        scan = segment_recovery.rebuild_indexes(
            fd, end, base_offset=self.base_offset, index_interval_bytes=self.index_interval_bytes,
            offset_index=self.offset_index, time_index=self.time_index, log_path=self._log_path,
            on_batch=on_batch, progress=progress)
        truncated = end - scan.valid_bytes
        if scan.error is not None:
            logger.warning("segment_corruption_found", path=self._log_path, base_offset=self.base_offset,
                           position=scan.valid_bytes, error=scan.error)
        if truncate:
            if file_size != scan.valid_bytes:
                self._drop_read_map()
                try:
                    os.ftruncate(fd, scan.valid_bytes)
                except OSError as exc:
                    raise KafkaStorageError.from_os_error(exc, f"cannot truncate segment {self._log_path}") from exc
            self.size_bytes = scan.valid_bytes
            self._preallocated = False
            self._next_offset = scan.next_offset
        else:
            truncated = 0
            self._next_offset = scan.next_offset if scan.error is None else None
        self.offset_index.trim_to_valid_size()
        self._max_ts, self._offset_of_max_ts = scan.max_timestamp_ms, scan.offset_of_max_timestamp
        self.time_index.maybe_append(scan.max_timestamp_ms, scan.offset_of_max_timestamp, skip_full_check=True)
        self.time_index.trim_to_valid_size()
        self._rolling_base_ts = scan.first_timestamp_ms
        self._rolling_base_loaded = True
        self.bytes_since_last_index_entry = 0
        self._cached_mtime_ms = None
        return truncated

    def check_indexes(self) -> list[str]:
        """Problems found cheaply in this segment's index files (empty list: trusted); see
        :func:`storage.segment_recovery.check_indexes`."""
        return segment_recovery.check_indexes(self)

    # -- append -----------------------------------------------------------------------------------
    def append(self, largest_offset: int, largest_timestamp_ms: int, shallow_offset_of_max_timestamp: int,
               records, *, size_bytes: int | None = None) -> None:
        """Append validated bytes (see module doc for the index rules).

        ``records`` is a bytes-like object or a tuple/list of them (written with one
        ``pwritev``, in order); ``size_bytes`` may give their total length. The same as
        :meth:`begin_append`, the write, then :meth:`end_append`.
        """
        if isinstance(records, (tuple, list)):
            chunks = records
            n = sum(len(c) for c in chunks) if size_bytes is None else size_bytes
        else:
            chunks = None
            n = len(records)
        if n == 0:
            return
        position = self.begin_append(largest_offset)
        try:
            if chunks is None:
                files.pwrite_all(self.fd, records, position)
            else:
                files.pwritev_all(self.fd, chunks, position, n)
        except OSError as exc:
            raise KafkaStorageError.from_os_error(exc, f"cannot write to segment {self._log_path}") from exc
        self.end_append(largest_offset, largest_timestamp_ms, shallow_offset_of_max_timestamp, position, n)

    def begin_append(self, largest_offset: int) -> int:
        """First half of an append: check ``largest_offset`` against the base and make room for
        the index entries it may add (disk full fails here, before the ``.log`` grows, never
        between the ``.log`` and its indexes); the file position to write the bytes at. Nothing
        of the segment's state moves until :meth:`end_append`."""
        self._ensure_offset_in_range(largest_offset)
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.reserve_next_entry()
            self.time_index.reserve_next_entry()
        return self.size_bytes

    def end_append(self, largest_offset: int, largest_timestamp_ms: int, shallow_offset_of_max_timestamp: int,
                   position: int, size_bytes: int) -> None:
        """Second half, once ``size_bytes`` bytes are written at ``position`` (what
        :meth:`begin_append` returned, with no other append between): the size, the next
        offset, the max timestamp and the index entries (module doc)."""
        if position != self.size_bytes:
            raise KafkaStorageError(f"append at position {position} of segment {self._log_path}, whose size is "
                                    f"{self.size_bytes}")
        if position == 0:
            self._rolling_base_ts = largest_timestamp_ms
            self._rolling_base_loaded = True
        self.size_bytes = position + size_bytes
        self._next_offset = largest_offset + 1
        if self._max_ts is None:
            self._load_max_timestamp()
        if largest_timestamp_ms > self._max_ts:  # type: ignore[operator]
            self._max_ts = largest_timestamp_ms
            self._offset_of_max_ts = shallow_offset_of_max_timestamp
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(largest_offset, position)
            self.time_index.maybe_append(self._max_ts, self._offset_of_max_ts)  # type: ignore[arg-type]
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size_bytes

    # -- rolling ----------------------------------------------------------------------------------
    def first_batch_timestamp(self) -> int:
        """Rolling-base timestamp (max timestamp of the first batch); Long.MAX_VALUE when empty."""
        self._load_rolling_base()
        if self._rolling_base_ts is None:
            return (1 << 63) - 1
        return self._rolling_base_ts

    def _load_rolling_base(self) -> None:
        if not self._rolling_base_loaded:
            self._rolling_base_loaded = True
            for header in walk_headers(self.fd, 0, self.size_bytes):
                self._rolling_base_ts = header.max_timestamp
                break

    def time_waited_for_roll(self, now_ms: int, message_timestamp_ms: int) -> int:
        """Kafka ``timeWaitedForRoll`` (§5.2): message time since the first batch, else wall time."""
        self._load_rolling_base()
        ts = self._rolling_base_ts
        if ts is not None and ts >= 0:
            return message_timestamp_ms - ts
        if self.created_ms is None:
            self.created_ms = now_ms
        return now_ms - self.created_ms

    def ensure_active_capacity(self) -> None:
        """Give a re-opened active segment's indexes their full size back (Kafka resizes after load)."""
        self.offset_index.resize(self.max_index_size)
        self.time_index.resize(self.max_index_size)

    def should_roll(self, *, segment_bytes: int, max_segment_ms: int, messages_size: int,
                    max_timestamp_in_messages: int, max_offset_in_messages: int, now_ms: int) -> str | None:
        """The reason to roll before appending (§5.1), or None. Conditions checked in Kafka's order.

        A segment whose creation time is unknown (created without a clock, or re-opened
        after a restart — Kafka resets it then too) takes ``now_ms`` as its creation time.
        """
        if self.created_ms is None:
            self.created_ms = now_ms
        size = self.size_bytes
        if size > segment_bytes - messages_size:
            return "segment_bytes"
        if size > 0 and (self.time_waited_for_roll(now_ms, max_timestamp_in_messages)
                         > max_segment_ms - self.roll_jitter_ms):
            return "segment_ms"
        if self.offset_index.is_full():
            return "offset_index_full"
        if self.time_index.is_full():
            return "time_index_full"
        if not self.can_convert_to_relative_offset(max_offset_in_messages):
            return "offset_overflow"
        return None

    def on_become_inactive(self) -> None:
        """Roll: final time entry, trim both indexes and a pre-allocated ``.log``."""
        self._load_max_timestamp()
        self.time_index.maybe_append(self._max_ts, self._offset_of_max_ts, skip_full_check=True)  # type: ignore
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self._trim_log()
        self.is_active = False
        self.indexes_durable = False
        self._cached_mtime_ms = None

    def _trim_log(self) -> None:
        if self._preallocated or (self._fd >= 0 and os.fstat(self._fd).st_size != self.size_bytes):
            try:
                os.ftruncate(self.fd, self.size_bytes)
            except OSError as exc:
                raise KafkaStorageError.from_os_error(exc, f"cannot trim segment {self._log_path}") from exc
            self._preallocated = False

    # -- read ------------------------------------------------------------------------------------
    def translate_offset(self, offset: int, starting_position: int = 0, *,
                         probe: Callable[[int, int, int], bool] | None = None) -> BatchHeader | None:
        """First batch whose last offset >= ``offset`` (Kafka ``translateOffset``). ``probe``: a
        page-cache probe for the header walk (:func:`~records.framing.walk_headers`)."""
        mapping = self.offset_index.lookup(offset)
        start = max(mapping.position, starting_position)
        if start > self.size_bytes:
            start = starting_position
        for header in walk_headers(self.fd, start, self.size_bytes, probe=probe):
            if header.last_offset >= offset:
                return header
        return None

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = False, *,
             probe: Callable[[int, int, int], bool] | None = None) -> SegmentRead | None:
        """A slice starting at the batch holding ``start_offset``; None if nothing is at/after it.
        With ``probe``, a batch header not in the page cache raises
        :class:`~records.framing.NotInPageCache` instead of being read."""
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for log read from segment {self._log_path}")
        if max_position is None:
            max_position = self.size_bytes
        found = self.translate_offset(start_offset, probe=probe)
        if found is None:
            return None
        adjusted = max(max_size, found.size_bytes) if min_one_message else max_size
        if adjusted == 0 or max_position < 0:
            return SegmentRead(found.last_offset, found.position, FileSlice(self.fd, found.position, 0), False)
        fetch_size = max(0, min(max_position - found.position, adjusted))
        return SegmentRead(found.last_offset, found.position, FileSlice(self.fd, found.position, fetch_size),
                           adjusted < found.size_bytes)

    def read_batch(self, header: BatchHeader) -> memoryview:
        """The bytes of one batch, for a search that parses it right away.

        Served from a read-only mapping of the ``.log`` (no copy: a timestamp search in
        a 1 MiB batch walks only up to the record it looks for, where a ``pread`` would
        first copy the whole batch into a fresh buffer). The mapping covers the logical
        size when it was made and is remade when a batch beyond it is read; it is
        dropped before any truncation so no view can outlive the bytes it maps. Callers
        must not keep the view across storage calls. Falls back to ``pread`` if the file
        cannot be mapped.
        """
        end = header.position + header.size_bytes
        if end > self.size_bytes:
            raise CorruptRecordError(f"short read of batch at position {header.position} in {self._log_path}")
        m = self._read_map
        if m is None or len(m) < end:
            try:
                m = self._read_map = mmap.mmap(self.fd, self.size_bytes, access=mmap.ACCESS_READ)
            except (OSError, ValueError):
                self._read_map = None
                data = os.pread(self.fd, header.size_bytes, header.position)
                if len(data) != header.size_bytes:
                    raise CorruptRecordError(
                        f"short read of batch at position {header.position} in {self._log_path}") from None
                return memoryview(data)
        return memoryview(m)[header.position:end]

    def _drop_read_map(self) -> None:
        # Not closed here: a view may still be alive in the caller's frame; the mapping
        # is unmapped when the last reference goes. Dropping it before a truncation means
        # no later read can touch pages past the new end of the file.
        self._read_map = None

    # -- timestamp search ------------------------------------------------------------------------
    def find_offset_by_timestamp(self, timestamp_ms: int, starting_offset: int, find_in_batch: Callable, *,
                                 probe: Callable[[int, int, int], bool] | None = None) -> TimestampOffset | None:
        """First record with timestamp >= ``timestamp_ms`` and offset >= ``starting_offset`` (§6.2 3–5).

        ``find_in_batch(batch_bytes, position, target_ms, min_offset)`` returns
        ``(offset, timestamp)`` or None for one batch. ``probe(fd, position, size)``: a
        page-cache probe, asked before each header read and before a batch is parsed; a range
        it refuses raises :class:`~records.framing.NotInPageCache` and nothing of it is read.
        """
        ts_entry = self.time_index.lookup(timestamp_ms)
        position = self.offset_index.lookup(max(ts_entry.offset, starting_offset)).position
        if position > self.size_bytes:
            position = 0
        for header in walk_headers(self.fd, position, self.size_bytes, probe=probe):
            if header.max_timestamp >= timestamp_ms and header.last_offset >= starting_offset:
                if probe is not None and not probe(self.fd, header.position, header.size_bytes):
                    raise NotInPageCache(self.fd, header.position, header.size_bytes)
                found = find_in_batch(self.read_batch(header), header.position, timestamp_ms, starting_offset)
                if found is not None:
                    epoch = header.leader_epoch if header.magic >= 2 and header.leader_epoch >= 0 else None
                    return TimestampOffset(found[1], found[0], epoch)
        return None

    def find_max_timestamp_batch(self) -> BatchHeader | None:
        """The first batch (from the max's index position) whose max timestamp equals the segment max."""
        max_ts = self.max_timestamp_so_far
        position = self.offset_index.lookup(self.offset_of_max_timestamp_so_far).position
        if position > self.size_bytes:
            position = 0
        for header in walk_headers(self.fd, position, self.size_bytes):
            if header.max_timestamp == max_ts:
                return header
        return None

    def largest_timestamp_after(self, position: int) -> TimestampOffset:
        """Max batch timestamp (and that batch's last offset) from ``position`` to the end."""
        best_ts, best_offset = NO_TIMESTAMP, -1
        for header in walk_headers(self.fd, position, self.size_bytes):
            if header.max_timestamp > best_ts:
                best_ts, best_offset = header.max_timestamp, header.last_offset
        return TimestampOffset(best_ts, best_offset)

    def _read_largest_timestamp(self) -> TimestampOffset:
        last = self.time_index.last_entry()
        position = self.offset_index.lookup(last.offset).position
        if position > self.size_bytes:
            position = 0
        after = self.largest_timestamp_after(position)
        if after.timestamp_ms > last.timestamp_ms:
            return after
        return last

    # -- truncation --------------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset >= ``offset`` (batch-granular); bytes removed."""
        mapping = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.offset_index.resize(self.max_index_size)
        self.time_index.resize(self.max_index_size)
        removed = 0
        if mapping is not None:
            removed = self.size_bytes - mapping.position
            self._drop_read_map()
            try:
                os.ftruncate(self.fd, mapping.position)
            except OSError as exc:
                raise KafkaStorageError.from_os_error(exc, f"cannot truncate segment {self._log_path}") from exc
            self.size_bytes = mapping.position
            self._preallocated = False
        if self.size_bytes == 0:
            self.created_ms = None
            self._rolling_base_ts = None
            self._rolling_base_loaded = True
        self.bytes_since_last_index_entry = 0
        self._next_offset = None
        if self._max_ts is None or self._max_ts >= 0:
            reloaded = self._read_largest_timestamp()
            self._max_ts, self._offset_of_max_ts = reloaded.timestamp_ms, reloaded.offset
        if self._max_ts is not None and self._max_ts < 0:
            self._offset_of_max_ts = self.base_offset
        self._cached_mtime_ms = None
        return removed

    # -- durability and life cycle ----------------------------------------------------------------
    def flush_fds(self, *, include_indexes: bool) -> list[int]:
        """Duplicated descriptors to fdatasync for this segment (caller closes them)."""
        out = [os.dup(self.fd)]
        if include_indexes:
            for index in (self.offset_index, self.time_index):
                if index.file_exists():
                    try:
                        out.append(os.open(index.path, os.O_RDONLY))
                    except FileNotFoundError:
                        pass
            txn_fd = self.txn_index.flush_fd()
            if txn_fd is not None:
                out.append(txn_fd)
        return out

    def close(self) -> None:
        """Final time entry (if the max was ever loaded), trim, release files."""
        if self._max_ts is not None and self._max_ts > self.time_index.peek_last_entry().timestamp_ms:
            try:
                self.time_index.maybe_append(self._max_ts, self._offset_of_max_ts, skip_full_check=True)
            except (ValueError, LogSegmentOffsetOverflowError, KafkaStorageError) as exc:
                logger.warning("final_time_index_entry_skipped", path=self.time_index.path, error=str(exc))
        self.offset_index.close()
        self.time_index.close()
        self._drop_read_map()
        if self._fd >= 0:
            try:
                self._trim_log()
            finally:
                os.close(self._fd)
                self._fd = -1

    def release_fd(self) -> None:
        """Close the ``.log`` descriptor (reopened on next use); only while no slice is out."""
        self._drop_read_map()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def close_handles(self) -> None:
        """Release descriptors and mappings without writing anything."""
        self.offset_index.close_handler()
        self.time_index.close_handler()
        self._drop_read_map()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def rename_suffix(self, add: str) -> list[str]:
        """Rename every existing file of the segment to ``<name><add>``; returns new paths."""
        renamed = []
        old = self._log_path
        try:
            os.rename(old, old + add)
            renamed.append(old + add)
        except FileNotFoundError:
            pass
        self._log_path = old + add
        for index in (self.offset_index, self.time_index):
            existed = index.file_exists()
            index.rename_to(index.path + add)
            if existed:
                renamed.append(index.path)
        if self.txn_index.file_exists():
            self.txn_index.rename_to(self.txn_index.path + add)
            renamed.append(self.txn_index.path)
        else:
            self.txn_index.path += add
        return renamed

    def delete_files(self) -> None:
        self.close_handles()
        for path in (self._log_path, self.offset_index.path, self.time_index.path, self.txn_index.path):
            files.remove_quietly(path)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size_bytes={self.size_bytes}, dir={self.dir!r})"


__all__ = ["LogSegment", "SegmentRead", "BatchHeader", "walk_headers", "OffsetPosition", "random_segment_jitter"]
