"""The offset index (``<base>.index``): offset → byte position in the segment's ``.log``.

File format (Kafka ``OffsetIndex``; layout in :mod:`records.index_entries`), 8 bytes per
entry, big-endian, no header::

    +------------------------+------------------------+
    | relative offset  int32 | position          int32|
    +------------------------+------------------------+

``relative offset = offset - base offset`` (base 50: offset 55 is stored as 5) and
``position`` is the byte position of a batch in the ``.log`` file.

Invariants
----------
* Entries are strictly increasing in offset (and therefore in position); appending an
  offset <= the last one raises :class:`InvalidOffsetError`; appending to a full index
  raises :class:`IndexFullError`.
* The index is sparse: the segment adds an entry for the **last** offset of an append
  pointing at the **start** of that append, every ``index.interval.bytes`` (see
  :mod:`storage.segment`). A lookup therefore gives a position from which a forward scan
  finds the wanted batch.
* ``lookup(o)`` = the entry with the largest offset <= o, or ``(base offset, 0)``.
* ``truncate_to(o)`` removes every entry with offset >= o.
* Full ⇔ ``entries >= max_entries``.
"""

from __future__ import annotations

from typing import NamedTuple

from sundial.records.index_entries import OFFSET_ENTRY as _ENTRY
from sundial.records.index_entries import OFFSET_ENTRY_SIZE
from sundial.records.index_entries import RELATIVE_OFFSET as _REL

from .errors import InvalidOffsetError
from .index import AbstractIndex, loaded_attribute

_unpack_rel = _REL.unpack_from
_unpack_entry = _ENTRY.unpack_from


class IndexFullError(ValueError):
    """Append to an index with no free slot (Kafka: IllegalArgumentException)."""


class OffsetPosition(NamedTuple):
    offset: int
    position: int


def _key_of(mm, slot: int) -> int:
    return _unpack_rel(mm, slot * OFFSET_ENTRY_SIZE)[0]


class OffsetIndex(AbstractIndex):
    """Sparse offset → position map of one segment (see module doc)."""

    ENTRY_SIZE = OFFSET_ENTRY_SIZE
    _relative_offset_of = staticmethod(_key_of)
    _unpack_entry = staticmethod(_ENTRY.unpack_from)
    __slots__ = ("_last_offset",)

    def _refresh_last(self) -> None:
        if self._entries == 0:
            self._last_offset = self.base_offset
        else:
            self._last_offset = self.base_offset + _REL.unpack(self._raw_entry(self._entries - 1)[:4])[0]

    last_offset = loaded_attribute("_last_offset", "Offset of the last entry, or the base offset when empty.")

    @staticmethod
    def _make_entry(base_offset: int, rel: int, pos: int) -> OffsetPosition:
        return OffsetPosition(base_offset + rel, pos)

    def last_entry(self) -> OffsetPosition:
        mm = self._ensure()
        if self._entries == 0 or mm is None:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(self._entries - 1)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """Entry with the largest offset <= target, or (base offset, 0)."""
        slot = self._largest_lower_bound_slot(target_offset - self.base_offset, _key_of)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self._entry_at(self._mm, slot)

    def fetch_upper_bound_offset(self, fetch_position: int, fetch_size: int) -> OffsetPosition | None:
        """First entry whose position >= fetch_position + fetch_size (Kafka ``fetchUpperBoundOffset``)."""
        mm = self._ensure()
        target = fetch_position + fetch_size
        n = self._entries
        if mm is None:
            return None
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) >> 1
            if _unpack_entry(mm, mid * OFFSET_ENTRY_SIZE)[1] >= target:
                hi = mid
            else:
                lo = mid + 1
        if lo >= n:
            return None
        return self._entry_at(mm, lo)

    def append(self, offset: int, position: int) -> None:
        """Add (offset, position); offset must exceed the last entry's offset."""
        if not self._loaded:
            self._load()
        if self._entries >= self._max_entries:
            raise IndexFullError(f"attempt to append to a full index (size = {self._entries}) {self.path}")
        if self._entries > 0 and offset <= self._last_offset:
            raise InvalidOffsetError(
                f"attempt to append an offset ({offset}) to position {self._entries} no larger than the "
                f"last offset appended ({self._last_offset}) to {self.path}")
        self._write_entry(_ENTRY.pack(self._relative(offset), position))
        self._last_offset = offset

    def sanity_check(self) -> None:
        """Kafka's check: last offset >= base offset and a length that is a multiple of the entry size."""
        self._load()
        self._check_last_offset_and_length(self._last_offset)


__all__ = ["OffsetIndex", "OffsetPosition", "IndexFullError"]
