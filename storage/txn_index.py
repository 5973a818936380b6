"""The transaction index (``<base>.txnindex``): aborted transactions of one segment.

Kafka's ``TransactionIndex`` and ``AbortedTxn``. One entry per ABORT marker written in
the segment, 34 bytes, big-endian::

    version             int16   0
    producer_id         int64
    first_offset        int64   first offset of the aborted transaction (may lie in an earlier segment)
    last_offset         int64   offset of the ABORT marker
    last_stable_offset  int64   the partition's LSO once this transaction completed

Invariants: ``last_offset`` strictly increases along the file (an append that breaks
it raises ``ValueError``, as Kafka's ``IllegalArgumentException``); the file is created
on the first append only, so most segments have none. A trailing partial entry (torn
write) is ignored by readers; a version above 0 is a corrupt index. ``sanity_check``
(Kafka's) refuses an entry whose last offset is below the segment's base offset.

Read-committed fetches use :meth:`collect_aborted` (Kafka ``collectAbortedTxns``): the
entries with ``last_offset >= fetch_offset`` and ``first_offset < upper_bound``; the
search is complete once an entry's ``last_stable_offset >= upper_bound`` (no later
segment can hold a transaction overlapping the range). Entries are cached in memory
after the first read (the file only grows by :meth:`append`, or shrinks by
:meth:`truncate_to` / :meth:`reset`).
"""

from __future__ import annotations

import os
from typing import NamedTuple

from sundial.records.index_entries import ABORTED_TXN, ABORTED_TXN_SIZE, ABORTED_TXN_VERSION

from . import files
from .errors import CorruptIndexError, KafkaStorageError



class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ABORTED_TXN.pack(ABORTED_TXN_VERSION, self.producer_id, self.first_offset, self.last_offset,
                                self.last_stable_offset)


def decode_aborted_txns(data: bytes, path: str = "") -> list[AbortedTxn]:
    """Entries of a ``.txnindex`` image (a partial trailing entry is ignored)."""
    out = []
    for pos in range(0, len(data) - ABORTED_TXN_SIZE + 1, ABORTED_TXN_SIZE):
        version, pid, first, last, lso = ABORTED_TXN.unpack_from(data, pos)
        if version > ABORTED_TXN_VERSION:
            raise CorruptIndexError(f"unexpected aborted transaction version {version} in transaction index "
                                    f"{path}, current version is {ABORTED_TXN_VERSION}")
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class TransactionIndex:
    """One segment's ``.txnindex`` (see module doc)."""

    __slots__ = ("path", "base_offset", "_entries")

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None

    def file_exists(self) -> bool:
        return os.path.exists(self.path)

    def entries(self) -> list[AbortedTxn]:
        """Every entry (Kafka ``allAbortedTxns``)."""
        if self._entries is None:
            try:
                with open(self.path, "rb") as fh:
                    data = fh.read()
            except FileNotFoundError:
                data = b""
            except OSError as exc:
                raise KafkaStorageError.from_os_error(exc, f"cannot read transaction index {self.path}") from exc
            self._entries = decode_aborted_txns(data, self.path)
        return self._entries

    @property
    def last_offset(self) -> int | None:
        entries = self.entries()
        return entries[-1].last_offset if entries else None

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries()
        if entries and entries[-1].last_offset >= txn.last_offset:
            raise ValueError(f"the last offset of appended transactions must increase sequentially, but "
                             f"{txn.last_offset} is not greater than current last offset {entries[-1].last_offset} "
                             f"of index {self.path}")
        size = len(entries) * ABORTED_TXN_SIZE
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                files.pwrite_all(fd, txn.encode(), size)
                os.ftruncate(fd, size + ABORTED_TXN_SIZE)   # drop a torn tail past the valid entries
            finally:
                os.close(fd)
        except OSError as exc:
            raise KafkaStorageError.from_os_error(exc, f"cannot write transaction index {self.path}") from exc
        entries.append(txn)

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """(aborted transactions overlapping [fetch_offset, upper_bound_offset), search complete)."""
        out = []
        for txn in self.entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return out, True
        return out, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above ``offset``."""
        entries = self.entries()
        keep = len(entries)
        for i, txn in enumerate(entries):
            if txn.last_offset >= offset:
                keep = i
                break
        if keep == len(entries):
            return
        self._truncate_file(keep)

    def reset(self) -> None:
        """Remove every entry (the file stays, empty, when it existed)."""
        self._truncate_file(0)

    def _truncate_file(self, keep: int) -> None:
        if self.file_exists():
            try:
                os.truncate(self.path, keep * ABORTED_TXN_SIZE)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise KafkaStorageError.from_os_error(exc, f"cannot truncate transaction index {self.path}") from exc
        if self._entries is not None:
            del self._entries[keep:]

    def sanity_check(self) -> None:
        """Kafka ``sanityCheck``: every marker lies at or after the segment's base offset."""
        for txn in self.entries():
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(f"last offset of aborted transaction {txn} in index {self.path} is less "
                                        f"than start offset {self.base_offset}")

    def rename_to(self, path: str) -> None:
        try:
            os.rename(self.path, path)
        except FileNotFoundError:
            pass
        self.path = path

    def flush_fd(self) -> int | None:
        """A read-only descriptor of the file for fdatasync (caller closes it), None when absent."""
        try:
            return os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None

    def delete(self) -> None:
        files.remove_quietly(self.path)
        self._entries = []

    def forget_cache(self) -> None:
        self._entries = None


__all__ = ["AbortedTxn", "TransactionIndex", "ABORTED_TXN", "ABORTED_TXN_SIZE", "decode_aborted_txns"]
