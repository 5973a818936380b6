"""The time index (``<base>.timeindex``, KIP-33): timestamp → offset.

File format (Kafka ``TimeIndex``; layout in :mod:`records.index_entries`), 12 bytes per
entry, big-endian, no header::

    +---------------------------------------------+------------------------+
    | timestamp                             int64 | relative offset  int32 |
    +---------------------------------------------+------------------------+

An entry ``(T, O)`` means: the largest timestamp in the segment up to and including
the batch whose last offset is ``O`` is ``T``; every record with a timestamp above
``T`` lies after ``O``.

Invariants
----------
* Inside one file both timestamps and offsets never decrease, and an entry is written
  only when its timestamp is **strictly** greater than the last one (an equal
  timestamp is silently ignored, a smaller one raises, a smaller offset raises
  :class:`InvalidOffsetError`). Across segments there is no order.
* With only magic-0 data (timestamp -1) the index stays empty, because -1 is never
  greater than the empty index's last entry ``(-1, base offset)``.
* "Full" one slot early: ``entries >= max_entries - 1``. The last slot is kept for the
  entry written when the segment is rolled or closed, which skips the full check
  (``maybe_append(..., skip_full_check=True)``); that final entry is how the segment's
  max timestamp survives a restart.
* ``lookup(t)`` = the entry with the largest timestamp <= t, or ``(-1, base offset)``.
* ``truncate_to(o)`` removes entries whose **offset** is >= o.
"""

from __future__ import annotations

from typing import NamedTuple

from sundial.records.index_entries import RELATIVE_OFFSET as _REL
from sundial.records.index_entries import TIME_ENTRY as _ENTRY
from sundial.records.index_entries import TIME_ENTRY_RELATIVE_OFFSET_AT, TIME_ENTRY_SIZE
from sundial.records.index_entries import TIMESTAMP as _TS

from .errors import CorruptIndexError, InvalidOffsetError
from .index import AbstractIndex
from .offset_index import IndexFullError

_unpack_ts = _TS.unpack_from
_unpack_rel = _REL.unpack_from

NO_TIMESTAMP = -1


class TimestampOffset(NamedTuple):
    """A (timestamp, offset) pair; ``leader_epoch`` is set only by searches of the log."""

    timestamp_ms: int
    offset: int
    leader_epoch: int | None = None


def _ts_key(mm, slot: int) -> int:
    return _unpack_ts(mm, slot * TIME_ENTRY_SIZE)[0]


def _offset_key(mm, slot: int) -> int:
    return _unpack_rel(mm, slot * TIME_ENTRY_SIZE + TIME_ENTRY_RELATIVE_OFFSET_AT)[0]


class TimeIndex(AbstractIndex):
    """Sparse timestamp → offset map of one segment (see module doc)."""

    ENTRY_SIZE = TIME_ENTRY_SIZE
    KIND = "time index"
    A_KIND = "a time index"
    SPARE_SLOTS = 1   # kept for the entry written at roll or close (see module doc)
    _relative_offset_of = staticmethod(_offset_key)
    _unpack_entry = staticmethod(_ENTRY.unpack_from)
    __slots__ = ("_last_entry",)

    def _refresh_last(self) -> None:
        if self._entries == 0:
            self._last_entry = TimestampOffset(NO_TIMESTAMP, self.base_offset)
        else:
            self._last_entry = self.parse_entry(self._raw_entry(self._entries - 1), self.base_offset)

    def last_entry(self) -> TimestampOffset:
        """The last entry, or (-1, base offset) when empty."""
        if not self._loaded:
            self._load()
        return self._last_entry

    def peek_last_entry(self) -> TimestampOffset:
        """Same as :meth:`last_entry` but reads the file with pread when not loaded."""
        if self._loaded:
            return self._last_entry
        n, raw = self.peek_entries([-1])
        if n == 0 or not raw:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self.parse_entry(raw[0], self.base_offset)

    @staticmethod
    def _make_entry(base_offset: int, ts: int, rel: int) -> TimestampOffset:
        return TimestampOffset(ts, base_offset + rel)

    def lookup(self, target_ms: int) -> TimestampOffset:
        """Entry with the largest timestamp <= target_ms, or (-1, base offset)."""
        slot = self._largest_lower_bound_slot(target_ms, _ts_key)
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self._entry_at(self._mm, slot)

    def maybe_append(self, timestamp_ms: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append (timestamp, offset) if the timestamp grows strictly; True if written.

        Raises :class:`IndexFullError` when full (unless ``skip_full_check``),
        :class:`InvalidOffsetError` for an offset below the last entry's and
        ``ValueError`` for a timestamp below the last entry's.
        """
        if not self._loaded:
            self._load()
        if not skip_full_check and self.is_full():
            raise IndexFullError(f"attempt to append to a full time index (size = {self._entries}) {self.path}")
        last = self._last_entry
        if self._entries != 0 and offset < last.offset:
            raise InvalidOffsetError(
                f"attempt to append an offset ({offset}) to slot {self._entries} no larger than the last offset "
                f"appended ({last.offset}) to {self.path}")
        if self._entries != 0 and timestamp_ms < last.timestamp_ms:
            raise ValueError(
                f"attempt to append a timestamp ({timestamp_ms}) to slot {self._entries} no larger than the last "
                f"timestamp appended ({last.timestamp_ms}) to {self.path}")
        if timestamp_ms <= last.timestamp_ms:
            return False
        rel = self._relative(offset)
        if self._entries >= self._max_entries:
            # Only reachable with skip_full_check on an index opened full from disk: make room.
            self.resize((self._entries + 1) * self.ENTRY_SIZE)
        self._write_entry(_ENTRY.pack(timestamp_ms, rel))
        self._last_entry = TimestampOffset(timestamp_ms, offset)
        return True

    def sanity_check(self) -> None:
        """Kafka's check: last timestamp >= first, last offset >= base, length a multiple of the entry size."""
        mm = self._ensure()
        last = self._last_entry
        if self._entries != 0 and mm is not None and last.timestamp_ms < _ts_key(mm, 0):
            raise CorruptIndexError(
                f"corrupt time index found, time index file ({self.path}) has non-zero size but the last "
                f"timestamp is {last.timestamp_ms} which is less than the first timestamp {_ts_key(mm, 0)}")
        self._check_last_offset_and_length(last.offset)


__all__ = ["TimeIndex", "TimestampOffset", "NO_TIMESTAMP"]
