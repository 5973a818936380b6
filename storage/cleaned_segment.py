"""The cleaner's output segment: ``<base>.log.cleaned`` and its indexes, and their renames.

Besides the offset and time indexes, a ``<base>.txnindex.cleaned`` is written when the
cleaned segment keeps the ABORT marker of a transaction some of whose batches it walked
(:mod:`storage.cleaner_txn`); it is renamed with the others and is optional.

A cleaned segment is written by the cleaner thread alone, with plain file writes (it
never touches the mmap'd index classes, whose mappings are shared with the log's owner
thread), then handed to the log's owner for the swap (:mod:`storage.log_cleaning`).

Index rule (Kafka ``LogSegment.append``, per batch, as the cleaner's appends go through
it): for each batch written at ``position``, first the segment's max timestamp and its
offset grow to the batch's max timestamp and **last** offset when the batch's max is
strictly larger; then, if more than ``index.interval.bytes`` were written since the last
entry, the offset index gets ``(batch last offset, position)`` and the time index
``(max so far, its offset)`` when that max is strictly above the last time entry; the
counter restarts at 0 and grows by the batch's size. So every entry points at the start
of a batch. Closing (``onBecomeInactiveSegment``) adds the final time entry ``(max,
offset)`` when it grows, writes both index files exactly (no pre-allocation), fsyncs the
three files and sets the ``.log`` mtime to the mtime of the last segment it replaces (so
time retention and the legacy tombstone horizon see the original age).

Files: ``files.segment_file(dir, base, suffix) + ".cleaned"`` while written; the swap
renames them to ``.swap`` and then to their final names (Kafka ``changeFileSuffixes``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from sundial.records.index_entries import OFFSET_ENTRY, TIME_ENTRY
from sundial.records.layout import INT32_MAX

from . import files
from .errors import KafkaStorageError, LogSegmentOffsetOverflowError

SUFFIXES = (files.LOG_SUFFIX, files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX)
#: Written only when the cleaned segment keeps an aborted transaction's marker.
OPTIONAL_SUFFIXES = (files.TXN_INDEX_SUFFIX,)


def temp_paths(dir_path: str, base_offset: int, temp_suffix: str) -> list[str]:
    """The ``.log``, ``.index`` and ``.timeindex`` paths of a segment with ``temp_suffix`` appended."""
    return [files.segment_file(dir_path, base_offset, s) + temp_suffix for s in SUFFIXES]


def optional_paths(dir_path: str, base_offset: int, temp_suffix: str) -> list[str]:
    """The ``.txnindex`` path of a segment with ``temp_suffix`` appended."""
    return [files.segment_file(dir_path, base_offset, s) + temp_suffix for s in OPTIONAL_SUFFIXES]


@dataclass(slots=True)
class CleanedSegment:
    """A written ``.cleaned`` segment and the segments it replaces (opaque to the cleaner thread)."""

    dir: str
    base_offset: int
    size_bytes: int
    last_offset: int                 # base_offset - 1 when empty
    max_timestamp_ms: int
    replaces: list = field(default_factory=list)   # the LogSegment objects, compared by identity at the swap
    replaced_bases: list[int] = field(default_factory=list)
    replaced_bytes: int = 0
    log_generation: int = 0

    @property
    def paths(self) -> list[str]:
        return temp_paths(self.dir, self.base_offset, files.CLEANED_SUFFIX)

    def delete_files(self) -> None:
        for suffix in (files.CLEANED_SUFFIX, files.SWAP_SUFFIX):
            for path in temp_paths(self.dir, self.base_offset, suffix) + optional_paths(self.dir, self.base_offset,
                                                                                        suffix):
                files.remove_quietly(path)


class CleanedSegmentWriter:
    """Appends kept batches to ``<base>.log.cleaned`` with the index rule of the module doc."""

    def __init__(self, dir_path: str, base_offset: int, index_interval_bytes: int) -> None:
        self.dir = dir_path
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path, self.index_path, self.time_index_path = temp_paths(dir_path, base_offset,
                                                                          files.CLEANED_SUFFIX)
        self.txn_index_path = optional_paths(dir_path, base_offset, files.CLEANED_SUFFIX)[0]
        self.txn_entries: list | None = None      # AbortedTxn entries kept (set before finish)
        for path in (self.log_path, self.index_path, self.time_index_path, self.txn_index_path):
            files.remove_quietly(path)
        try:
            self._fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise KafkaStorageError.from_os_error(exc, f"cannot create {self.log_path}") from exc
        self.size_bytes = 0
        self.last_offset = base_offset - 1
        self._pending: list = []
        self._pending_bytes = 0
        self._offset_entries: list[bytes] = []
        self._time_entries: list[bytes] = []
        self._last_time_entry_ms = -1
        self._max_ts = -1
        self._offset_of_max_ts = base_offset
        self._since_last_entry = 0

    @property
    def max_timestamp_ms(self) -> int:
        return self._max_ts

    def append(self, data, last_offset: int, max_timestamp_ms: int) -> None:
        """Add one batch (bytes-like) whose last offset and max timestamp are given."""
        rel = last_offset - self.base_offset
        if rel < 0 or rel > INT32_MAX:
            raise LogSegmentOffsetOverflowError(
                f"offset {last_offset} cannot be stored relative to the cleaned segment's base {self.base_offset}")
        position = self.size_bytes
        size = len(data)
        if max_timestamp_ms > self._max_ts:
            self._max_ts, self._offset_of_max_ts = max_timestamp_ms, last_offset
        if self._since_last_entry > self.index_interval_bytes:
            self._offset_entries.append(OFFSET_ENTRY.pack(rel, position))
            self._maybe_time_entry()
            self._since_last_entry = 0
        self._since_last_entry += size
        self._pending.append(data)
        self._pending_bytes += size
        self.size_bytes = position + size
        self.last_offset = last_offset

    def _maybe_time_entry(self) -> None:
        if self._max_ts > self._last_time_entry_ms:
            self._time_entries.append(TIME_ENTRY.pack(self._max_ts, self._offset_of_max_ts - self.base_offset))
            self._last_time_entry_ms = self._max_ts

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    def write_pending(self) -> int:
        """Write the buffered batches (the cleaner's write buffer); bytes written."""
        n = self._pending_bytes
        if n:
            try:
                files.pwritev_all(self._fd, self._pending, self.size_bytes - n, n)
            except OSError as exc:
                raise KafkaStorageError.from_os_error(exc, f"cannot write {self.log_path}") from exc
            self._pending = []
            self._pending_bytes = 0
        return n

    def finish(self, last_modified_ms: int | None) -> None:
        """Final time entry, index files, fsync of the three files, the mtime; closes the writer."""
        self.write_pending()
        self._maybe_time_entry()
        try:
            indexes = [(self.index_path, self._offset_entries), (self.time_index_path, self._time_entries)]
            if self.txn_entries:
                indexes.append((self.txn_index_path, [t.encode() for t in self.txn_entries]))
            for path, entries in indexes:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    data = b"".join(entries)
                    if data:
                        files.pwrite_all(fd, data, 0)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.fsync(self._fd)
        except OSError as exc:
            raise KafkaStorageError.from_os_error(exc, f"cannot write cleaned segment {self.log_path}") from exc
        finally:
            self.close()
        if last_modified_ms is not None:
            ns = last_modified_ms * 1_000_000
            os.utime(self.log_path, ns=(ns, ns))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def abandon(self) -> None:
        """Close and delete the files (an aborted or failed clean)."""
        self.close()
        for path in (self.log_path, self.index_path, self.time_index_path, self.txn_index_path):
            files.remove_quietly(path)

    def result(self) -> CleanedSegment:
        return CleanedSegment(self.dir, self.base_offset, self.size_bytes, self.last_offset, self._max_ts)


def rename_all(dir_path: str, base_offset: int, from_suffix: str, to_suffix: str, *, must_exist: bool = True) -> None:
    """Rename a segment's three files (``.log`` first), then its ``.txnindex`` if there is one,
    from ``from_suffix`` to ``to_suffix``."""
    for old, new in zip(temp_paths(dir_path, base_offset, from_suffix), temp_paths(dir_path, base_offset, to_suffix)):
        try:
            os.rename(old, new)
        except FileNotFoundError:
            if must_exist:
                raise
    for old, new in zip(optional_paths(dir_path, base_offset, from_suffix),
                        optional_paths(dir_path, base_offset, to_suffix)):
        try:
            os.rename(old, new)
        except FileNotFoundError:
            pass


__all__ = ["CleanedSegment", "CleanedSegmentWriter", "rename_all", "temp_paths", "optional_paths", "SUFFIXES"]
