"""The in-flight batches of a share-partition ordered by first offset (Kafka's ``cachedState``, a
``NavigableMap<Long, InFlightBatch>``), with the navigation the engine needs: floor entry, the
entries whose first offset is within a range, higher and lower keys, removal of a prefix."""

from __future__ import annotations

import bisect
from typing import Iterator

from .in_flight import InFlightBatch


class CachedState:
    __slots__ = ("_keys", "_batches")

    def __init__(self) -> None:
        self._keys: list[int] = []
        self._batches: dict[int, InFlightBatch] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __bool__(self) -> bool:
        return bool(self._keys)

    def __iter__(self) -> Iterator[InFlightBatch]:
        return (self._batches[k] for k in list(self._keys))

    def put(self, batch: InFlightBatch) -> None:
        if batch.first_offset not in self._batches:
            bisect.insort(self._keys, batch.first_offset)
        self._batches[batch.first_offset] = batch

    def first(self) -> InFlightBatch:
        return self._batches[self._keys[0]]

    def last(self) -> InFlightBatch:
        return self._batches[self._keys[-1]]

    def floor(self, offset: int) -> InFlightBatch | None:
        """The batch with the greatest first offset ``<= offset``."""
        i = bisect.bisect_right(self._keys, offset)
        return self._batches[self._keys[i - 1]] if i else None

    def higher_key(self, offset: int) -> int | None:
        i = bisect.bisect_right(self._keys, offset)
        return self._keys[i] if i < len(self._keys) else None

    def lower_key(self, offset: int) -> int | None:
        i = bisect.bisect_left(self._keys, offset)
        return self._keys[i - 1] if i else None

    def between(self, from_offset: int, to_offset: int, *, to_inclusive: bool = True) -> list[InFlightBatch]:
        """The batches whose first offset is in ``from_offset..to_offset`` (Kafka ``subMap``)."""
        lo = bisect.bisect_left(self._keys, from_offset)
        hi = (bisect.bisect_right if to_inclusive else bisect.bisect_left)(self._keys, to_offset)
        return [self._batches[k] for k in self._keys[lo:hi]]

    def remove_through(self, last_key: int) -> None:
        """Drop every batch whose first offset is ``<= last_key``."""
        hi = bisect.bisect_right(self._keys, last_key)
        for k in self._keys[:hi]:
            del self._batches[k]
        del self._keys[:hi]

    def clear(self) -> None:
        self._keys.clear()
        self._batches.clear()
