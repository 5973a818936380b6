"""Log-dir facts for DescribeLogDirs: placements from the LogManager, sizes measured on disk.

The oracle is the file system itself, read by the test: the sum of ``st_size`` of each
partition directory's ``NNNNNNNNNNNNNNNNNNNN.log`` files, and ``os.statvfs`` of each directory.
"""

from __future__ import annotations

import os
import shutil

import pytest
from support.log_helpers import NOW_MS, batch

from sundial.storage.log_dirs import INVALID_OFFSET_LAG, ReplicaPlacement, measure_log_dirs, offset_lag, \
    segment_bytes_on_disk
from sundial.storage.log_manager import LogManager

UNBOUNDED = {"message.timestamp.after.max.ms": "9223372036854775807", "log.segment.delete.delay.ms": 0}


def disk_size(partition_dir: str) -> int:
    """Brute force: every file named like a live log segment, by its name alone."""
    total = 0
    for name in os.listdir(partition_dir):
        stem, dot, ext = name.partition(".")
        if ext == "log" and len(stem) == 20 and stem.isdigit():
            total += os.path.getsize(os.path.join(partition_dir, name))
    return total


@pytest.fixture
def dirs(tmp_path):
    return [str(tmp_path / "d1"), str(tmp_path / "d2")]


def fill(mgr, topic: str, partitions: int, per_partition: list[int]) -> None:
    mgr.create_topic(topic, partitions)
    for p, count in enumerate(per_partition):
        log = mgr.get_log(topic, p)
        for i in range(count):
            log.append(batch([NOW_MS + i], value_size=50 + 7 * i), now_ms=NOW_MS)


def by_tp(reports):
    return {(r.topic, r.partition): (rep.log_dir, r) for rep in reports for r in rep.replicas}


def test_sizes_match_the_files_open_and_closed(dirs):
    mgr = LogManager(dirs, {**UNBOUNDED, "log.segment.bytes": 400})   # several segments per partition
    mgr.startup()
    fill(mgr, "orders", 4, [0, 3, 9, 20])
    fill(mgr, "audit", 1, [5])
    placements = mgr.replica_placements()
    assert sorted((p.topic, p.partition) for p in placements) == sorted(
        [("orders", p) for p in range(4)] + [("audit", 0)])
    assert all(p.size_bytes is not None for p in placements)            # all open: from memory
    open_reports = measure_log_dirs(mgr.log_dirs, placements)
    assert [r.log_dir for r in open_reports] == mgr.log_dirs
    for (topic, p), (log_dir, r) in by_tp(open_reports).items():
        pdir = os.path.join(log_dir, f"{topic}-{p}")
        assert r.size_bytes == disk_size(pdir), (topic, p)
        assert r.offset_lag == 0 and r.is_future is False
    assert by_tp(open_reports)[("orders", 3)][1].size_bytes > 0
    mgr.shutdown()

    reopened = LogManager(dirs, UNBOUNDED)
    reopened.startup()
    closed = reopened.replica_placements()
    assert all(p.size_bytes is None for p in closed)                    # lazy: nothing opened
    closed_reports = measure_log_dirs(reopened.log_dirs, closed)
    assert {k: v[1].size_bytes for k, v in by_tp(closed_reports).items()} == \
        {k: v[1].size_bytes for k, v in by_tp(open_reports).items()}
    assert not any(reopened.is_open(t, p) for t, p in reopened.all_partitions())
    reopened.shutdown()


def test_each_dir_reports_its_volume_and_its_own_partitions(dirs):
    mgr = LogManager(dirs, UNBOUNDED)
    mgr.startup()
    fill(mgr, "t", 5, [1, 1, 1, 1, 1])
    reports = measure_log_dirs(mgr.log_dirs, mgr.replica_placements())
    for rep in reports:
        st = os.statvfs(rep.log_dir)
        assert rep.total_bytes == st.f_blocks * st.f_frsize
        # usable space moves with everything else on the machine: only its bounds are fixed
        assert 0 <= rep.usable_bytes <= rep.total_bytes
        on_disk = {name for name in os.listdir(rep.log_dir) if name.startswith("t-")}
        assert {f"{r.topic}-{r.partition}" for r in rep.replicas} == on_disk
        assert rep.error is None
    assert sum(len(rep.replicas) for rep in reports) == 5
    mgr.shutdown()


def test_unreadable_dir_is_an_error_without_partitions(dirs):
    mgr = LogManager(dirs, UNBOUNDED)
    mgr.startup()
    fill(mgr, "t", 2, [1, 1])
    placements = mgr.replica_placements()
    shutil.rmtree(dirs[1])
    reports = measure_log_dirs(mgr.log_dirs, placements)
    assert reports[0].error is None and reports[1].error is not None
    assert reports[1].replicas == [] and reports[1].total_bytes == -1 and reports[1].usable_bytes == -1


def test_segment_bytes_skips_everything_but_live_segments(tmp_path):
    pdir = tmp_path / "t-0"
    pdir.mkdir()
    for name, size in [("00000000000000000000.log", 100), ("00000000000000000042.log", 7),
                       ("00000000000000000000.index", 80), ("00000000000000000042.log.deleted", 500),
                       ("00000000000000000050.log.cleaned", 300), ("00000000000000000042.snapshot", 9),
                       ("leader-epoch-checkpoint", 3)]:
        (pdir / name).write_bytes(b"x" * size)
    assert segment_bytes_on_disk(str(pdir)) == 107 == disk_size(str(pdir))
    assert segment_bytes_on_disk(str(tmp_path / "gone")) == 0


def test_offset_lag_rules():
    current = ReplicaPlacement("t", 0, "/d1", "/d1/t-0", log_end_offset=100, high_watermark=100)
    assert offset_lag(current, 100) == 0
    behind_hw = ReplicaPlacement("t", 0, "/d1", "/d1/t-0", log_end_offset=90, high_watermark=100)
    assert offset_lag(behind_hw, 90) == 10
    closed = ReplicaPlacement("t", 0, "/d1", "/d1/t-0")
    assert offset_lag(closed, None) == 0
    future = ReplicaPlacement("t", 0, "/d2", "/d2/t-0.x-future", is_future=True, log_end_offset=60)
    assert offset_lag(future, 100) == 40
    assert offset_lag(future, None) == INVALID_OFFSET_LAG
    reports = measure_log_dirs(["/nonexistent-sundial-dir"], [current])
    assert reports[0].error is not None
