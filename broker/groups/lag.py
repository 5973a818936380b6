"""Consumer lag in offsets and in time (seed 002's "lag in time").

For one group and each partition it has committed:

* ``offset_lag`` = log end offset (the high watermark; one node) minus the committed
  offset, never negative;
* ``time_lag_ms`` = now minus the timestamp of the record at the committed offset,
  i.e. how old the oldest record the group has not consumed is; 0 when the group is
  caught up. A committed offset below the log start offset measures from the first
  record still in the log. When the timestamp cannot be found (empty log, a record
  without timestamp, the partition is gone) the time lag is None.

The storage gives the record timestamp (``PartitionLog.record_timestamp_at``); this
module does no I/O of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True, slots=True)
class LagRow:
    topic: str
    partition: int
    committed_offset: int
    log_end_offset: int | None
    offset_lag: int | None
    time_lag_ms: int | None


def compute_lag(committed: Mapping[tuple[str, int], object], logs, now_ms: int) -> list[LagRow]:
    rows = []
    for (topic, partition), c in sorted(committed.items()):
        offset = c.offset
        log = logs.get_log(topic, partition) if logs is not None else None
        if log is None:
            rows.append(LagRow(topic, partition, offset, None, None, None))
            continue
        leo = log.high_watermark
        offset_lag = max(leo - offset, 0)
        if offset >= leo:
            time_lag = 0
        else:
            position = max(offset, log.log_start_offset)
            try:
                ts = log.record_timestamp_at(position)
            except Exception:
                ts = None
            time_lag = None if ts is None or ts < 0 else max(now_ms - ts, 0)
        rows.append(LagRow(topic, partition, offset, leo, offset_lag, time_lag))
    return rows
