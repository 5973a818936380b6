"""One record as a Kafka reader sees it, whatever the magic of the batch holding it.

Reader semantics (what every record reports)
--------------------------------------------
* v2: ``base_offset + offset_delta``; timestamp ``base_timestamp + delta``, except in a
  LogAppendTime batch where every record reports the batch ``max_timestamp``.
* v1: the message's own timestamp and type; inside a compressed wrapper the wrapper's
  type, and the wrapper timestamp for every inner message if the wrapper is
  LogAppendTime.
* v0: timestamp -1, type -1 (no timestamp).
"""

from __future__ import annotations

from typing import NamedTuple


class Record(NamedTuple):
    """One record (see the module doc for what each magic reports)."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


__all__ = ["Record"]
