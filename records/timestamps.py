"""Time as Kafka counts it: milliseconds since the Unix epoch, and ListOffsets' sentinels.

Record timestamps (CreateTime, LogAppendTime), index entries, retention and the
tools' ``--time`` arguments all live in one int64 millisecond space; this module is
the one home of what is shared across it by storage, the daemon and the tools:

* :func:`wall_clock_ms`: the wall clock in ms (Kafka ``Time.SYSTEM.milliseconds()``),
  the default clock of the daemon (LogAppendTime, retention, groups) and of the tools;
* the negative timestamps a ListOffsets request may carry instead of a time (Kafka
  ``ListOffsetsRequest``): ``LATEST_TIMESTAMP`` (-1, the log end offset),
  ``EARLIEST_TIMESTAMP`` (-2, the log start offset), ``MAX_TIMESTAMP`` (-3, v7+, the
  first record holding the largest timestamp), ``EARLIEST_LOCAL_TIMESTAMP`` (-4, v8+)
  and ``LATEST_TIERED_TIMESTAMP`` (-5, v9+).

It lives with the record format, at the bottom of the house, because storage answers
these sentinels (``storage.log_search``) and may import neither ``protocol`` nor the
daemon, while the daemon and the tools may all import ``records``.
"""

from __future__ import annotations

import time

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch, from the system clock."""
    return time.time_ns() // 1_000_000


__all__ = ["LATEST_TIMESTAMP", "EARLIEST_TIMESTAMP", "MAX_TIMESTAMP", "EARLIEST_LOCAL_TIMESTAMP",
           "LATEST_TIERED_TIMESTAMP", "wall_clock_ms"]
