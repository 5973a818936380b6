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
from sundial.records.layout import INT32_MAX

from .errors import CorruptIndexError, InvalidOffsetError
from .index import AbstractIndex, MappedIndexes

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
    __slots__ = ("_last_offset",)

    def __init__(self, path: str, base_offset: int, max_index_size: int = 10_485_760,
                 mapped_indexes: MappedIndexes | None = None) -> None:
        super().__init__(path, base_offset, max_index_size, mapped_indexes)
        self._last_offset = base_offset

    def _after_load(self) -> None:
        self._refresh_last_offset()

    def _refresh_last_offset(self) -> None:
        if self._entries == 0:
            self._last_offset = self.base_offset
        else:
            self._last_offset = self.base_offset + _REL.unpack(self._raw_entry(self._entries - 1)[:4])[0]

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when empty."""
        if not self._loaded:
            self._load()
        return self._last_offset

    def _relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if rel < 0 or rel > INT32_MAX:
            raise InvalidOffsetError(
                f"offset {offset} cannot be stored relative to base offset {self.base_offset}")
        return rel

    def entry(self, n: int) -> OffsetPosition:
        mm = self._ensure()
        if n < 0 or n >= self._entries or mm is None:
            raise IndexError(f"attempt to fetch entry {n} of an index with {self._entries} entries")
        rel, pos = _unpack_entry(mm, n * OFFSET_ENTRY_SIZE)
        return OffsetPosition(self.base_offset + rel, pos)

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
        rel, pos = _unpack_entry(self._mm, slot * OFFSET_ENTRY_SIZE)
        return OffsetPosition(self.base_offset + rel, pos)

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
        rel, pos = _unpack_entry(mm, lo * OFFSET_ENTRY_SIZE)
        return OffsetPosition(self.base_offset + rel, pos)

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
        if self._entries != 0 and self._last_offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt index found, index file ({self.path}) has non-zero size but the last offset is "
                f"{self._last_offset} which is less than the base offset {self.base_offset}")
        if self._length % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"index file {self.path} is corrupt, found {self._length} bytes which is neither positive "
                f"nor a multiple of {self.ENTRY_SIZE}")

    @staticmethod
    def parse_entry(raw: bytes, base_offset: int) -> OffsetPosition:
        rel, pos = _ENTRY.unpack(raw)
        return OffsetPosition(base_offset + rel, pos)


__all__ = ["OffsetIndex", "OffsetPosition", "IndexFullError"]
