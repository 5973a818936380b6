"""Lag in offsets and in time over real partition logs (ground truth: the timestamps written)."""

from __future__ import annotations

import random

from sundial.broker.groups.lag import compute_lag
from sundial.broker.groups.offsets import CommittedOffset
from sundial.storage import LogManager
from sundial.records.builder import SimpleRecord, build_batch

NOW = 1_700_000_000_000


def test_offset_and_time_lag(tmp_path):
    mgr = LogManager([str(tmp_path)], {"log.segment.bytes": 2048}, now_ms=lambda: NOW)
    mgr.startup()
    mgr.create_topic("t", 2)
    rng = random.Random(7)
    stamps = []
    log = mgr.get_log("t", 0)
    for i in range(200):  # non-monotonic CreateTime, several per batch, many segments
        batch = [SimpleRecord(NOW - 3_600_000 + i * 1000 + rng.randint(-5000, 5000), None, b"x" * 20)
                 for _ in range(3)]
        stamps += [r.timestamp for r in batch]
        log.append(build_batch(2, batch), now_ms=NOW)
    assert len(log.segments) > 5
    committed = {("t", 0): CommittedOffset(250), ("t", 1): CommittedOffset(0), ("gone", 0): CommittedOffset(5)}
    rows = {(r.topic, r.partition): r for r in compute_lag(committed, mgr, NOW + 10)}
    r = rows[("t", 0)]
    assert (r.committed_offset, r.log_end_offset, r.offset_lag) == (250, 600, 350)
    assert r.time_lag_ms == NOW + 10 - stamps[250]
    r = rows[("t", 1)]  # empty partition: caught up
    assert (r.offset_lag, r.time_lag_ms) == (0, 0)
    r = rows[("gone", 0)]
    assert (r.log_end_offset, r.offset_lag, r.time_lag_ms) == (None, None, None)
    # Caught up, and a commit below the log start offset measures from the first record left.
    log.delete_records(300)
    rows = {(r.topic, r.partition): r for r in compute_lag({("t", 0): CommittedOffset(600),
                                                             ("t", 1): CommittedOffset(0)}, mgr, NOW)}
    assert rows[("t", 0)].time_lag_ms == 0 and rows[("t", 0)].offset_lag == 0
    rows = {(r.topic, r.partition): r for r in compute_lag({("t", 0): CommittedOffset(10)}, mgr, NOW)}
    assert rows[("t", 0)].offset_lag == 590 and rows[("t", 0)].time_lag_ms == NOW - stamps[300]
    mgr.shutdown()
