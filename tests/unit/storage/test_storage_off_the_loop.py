"""Storage's side of keeping blocking file work off the event loop: the disk seam, parallel
start-up recovery (``num.recovery.threads.per.data.dir``), opening a partition on an
executor, and retention's renames handed out as jobs, with their ordering guarantees
(renames before a segment of the same base is created or reopened). Concurrency is
observed through a disk seam that records what runs at once; no timing assertions."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading

import pytest
from support.log_helpers import NOW_MS, batch

from sundial.storage import disk, files
from sundial.storage.log_manager import LogManager

UNBOUNDED = {"message.timestamp.after.max.ms": "9223372036854775807"}


class RecordingDisk(disk.Disk):
    """Counts operations in progress; ``gate`` (when set) holds every ``open`` until released."""

    def __init__(self, hold: set[str] = frozenset()) -> None:
        self.hold = set(hold)
        self.lock = threading.Lock()
        self.in_progress = dict.fromkeys(disk.OPERATIONS, 0)
        self.max_in_progress = dict.fromkeys(disk.OPERATIONS, 0)
        self.order: list[str] = []
        self.gate = threading.Event()
        self.arrived = threading.Condition(self.lock)

    def pause(self, op: str) -> None:
        with self.lock:
            self.order.append(op)
            self.in_progress[op] += 1
            self.max_in_progress[op] = max(self.max_in_progress[op], self.in_progress[op])
            self.arrived.notify_all()
        try:
            if op in self.hold:
                assert self.gate.wait(60), "the test never released the gate"
        finally:
            with self.lock:
                self.in_progress[op] -= 1

    def wait_in_progress(self, op: str, count: int, timeout_s: float = 60) -> None:
        with self.lock:
            assert self.arrived.wait_for(lambda: self.in_progress[op] >= count, timeout_s), \
                f"{count} {op} never ran at once: {self.in_progress}"


@pytest.fixture
def seam():
    installed = []

    def install(d: disk.Disk) -> disk.Disk:
        installed.append(disk.install(d))
        return d

    yield install
    while installed:
        disk.install(installed.pop())


def crashed_dir_with_partitions(tmp_path, partitions: int) -> list[str]:
    dirs = [str(tmp_path / "d1")]
    mgr = LogManager(dirs, {"log.segment.delete.delay.ms": 0})
    mgr.startup()
    mgr.create_topic("t", partitions, UNBOUNDED)
    for p in range(partitions):
        mgr.get_log("t", p).append(batch([NOW_MS + i for i in range(3)]), now_ms=NOW_MS)
    mgr.close_without_marker()   # no clean-shutdown marker: the next start recovers every partition
    return dirs


# -- the seam ---------------------------------------------------------------------------------------
def test_slow_disk_is_parsed_from_its_variable():
    d = disk.parse_slow_disk("open,read:500;unlink:20")
    assert d.delays_ms == {"open": 500, "read": 500, "unlink": 20} and d.is_slow("read") and not d.is_slow("rename")
    assert disk.parse_slow_disk("7").delays_ms == dict.fromkeys(disk.OPERATIONS, 7)
    for bad in ("", "open:x", "nope:5", "open:-1"):
        with pytest.raises(ValueError):
            disk.parse_slow_disk(bad)
    assert not disk.Disk().is_slow("read")


def test_slow_disk_is_installed_only_when_the_variable_is_set(seam):
    seam(disk.Disk())
    assert not disk.install_from_environment({}).is_slow("unlink")
    installed = disk.install_from_environment({disk.SLOW_DISK_ENV: "unlink:1"})
    assert installed.is_slow("unlink") and disk.current() is installed
    installed.pause("unlink")
    installed.pause("open")          # not slowed: not counted
    assert installed.started["unlink"] == installed.finished["unlink"] == 1 and installed.started["open"] == 0


# -- parallel recovery ------------------------------------------------------------------------------
@pytest.mark.parametrize("threads", [1, 3])
def test_recovery_runs_on_num_recovery_threads_per_data_dir(tmp_path, seam, threads):
    partitions = 7
    dirs = crashed_dir_with_partitions(tmp_path, partitions)
    recording = seam(RecordingDisk(hold={"open"}))
    mgr = LogManager(dirs, {}, recovery_threads_per_data_dir=threads)
    starting = threading.Thread(target=mgr.startup)
    starting.start()
    try:
        recording.wait_in_progress("open", threads)   # N recoveries are under way at once ...
        with recording.lock:
            assert recording.in_progress["open"] == threads   # ... and no more than N
    finally:
        recording.gate.set()
        starting.join(60)
    assert not starting.is_alive()
    assert recording.max_in_progress["open"] == threads
    assert recording.order.count("open") == partitions
    for p in range(partitions):   # every partition recovered and installed, with its records
        assert mgr.is_open("t", p) and mgr.get_log("t", p).log_end_offset == 3
    mgr.shutdown()


def test_a_failed_recovery_fails_the_start_after_the_others_finish(tmp_path, seam, monkeypatch):
    dirs = crashed_dir_with_partitions(tmp_path, 4)
    from sundial.storage import log_manager

    real_open = log_manager.PartitionLog.open

    def open_or_fail(pdir, *args, **kwargs):
        if pdir.endswith("t-2"):
            raise OSError(5, "injected I/O error")
        return real_open(pdir, *args, **kwargs)

    monkeypatch.setattr(log_manager.PartitionLog, "open", open_or_fail)
    mgr = LogManager(dirs, {}, recovery_threads_per_data_dir=2)
    with pytest.raises(OSError):
        mgr.startup()
    assert {p for p in range(4) if mgr.is_open("t", p)} == {0, 1, 3}
    mgr.close_without_marker()


def test_recovery_threads_must_be_positive(tmp_path):
    with pytest.raises(ValueError):
        LogManager([str(tmp_path)], {}, recovery_threads_per_data_dir=0)


# -- opening on an executor ---------------------------------------------------------------------------
@contextlib.contextmanager
def _opening(tmp_path, seam, partitions: int = 1, **explicit):
    """A started manager on a two-thread executor whose topic ``t`` (``partitions`` partitions) has
    partition 0 being opened on the executor, the open held until ``recording.gate`` is set:
    yields (recording disk, manager, the open's future)."""
    recording = seam(RecordingDisk(hold={"open"}))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        mgr = LogManager([str(tmp_path)], explicit, executor=pool)
        mgr.startup()
        mgr.create_topic("t", partitions, UNBOUNDED)
        fut = mgr.start_open("t", 0)
        recording.wait_in_progress("open", 1)
        yield recording, mgr, fut


def test_a_partition_opens_on_the_executor_and_is_installed_by_the_owner(tmp_path, seam):
    with _opening(tmp_path, seam, partitions=2) as (recording, mgr, fut):
        assert fut is not None and mgr.start_open("t", 0) is fut     # one open at a time
        assert not mgr.is_open("t", 0)       # nothing installed while it runs
        recording.gate.set()
        fut.result(60)
        assert not mgr.is_open("t", 0)       # installed by the owner, not by the worker
        log = mgr.finish_open("t", 0)
        assert mgr.is_open("t", 0) and mgr.get_log("t", 0) is log and log.defer_renames
        assert mgr.start_open("t", 0) is None and mgr.start_open("nope", 0) is None
        assert mgr.start_open("t", 2) is None
        mgr.shutdown()


def test_get_log_waits_for_an_open_under_way_instead_of_opening_twice(tmp_path, seam):
    with _opening(tmp_path, seam) as (recording, mgr, _fut):
        threading.Timer(0.05, recording.gate.set).start()
        log = mgr.get_log("t", 0)
        assert log is not None and mgr.get_log("t", 0) is log
        assert recording.order.count("open") == 1
        mgr.shutdown()


def test_a_topic_deleted_while_its_partition_opens_is_not_installed(tmp_path, seam):
    with _opening(tmp_path, seam, **{"log.segment.delete.delay.ms": 0}) as (recording, mgr, fut):
        threading.Timer(0.05, recording.gate.set).start()
        mgr.delete_topic("t")                 # waits for the open, closes what it opened
        assert fut.done() and not mgr.is_open("t", 0)
        assert mgr.finish_open("t", 0) is None
        mgr.create_topic("t", 1, UNBOUNDED)   # a new topic of the same name starts empty
        assert mgr.get_log("t", 0).log_end_offset == 0
        mgr.shutdown()


def test_shutdown_installs_and_closes_opens_under_way(tmp_path, seam):
    with _opening(tmp_path, seam) as (recording, mgr, _fut):
        threading.Timer(0.05, recording.gate.set).start()
        mgr.shutdown()
    assert os.path.exists(os.path.join(str(tmp_path), files.CLEAN_SHUTDOWN_FILE))


# -- retention's renames as jobs ------------------------------------------------------------------------
def _log_with_segments(tmp_path, count: int, pool):
    mgr = LogManager([str(tmp_path)], {"log.segment.delete.delay.ms": 0}, executor=pool)
    mgr.startup()
    mgr.create_topic("t", 1, {"segment.bytes": "100", "file.delete.delay.ms": "0", **UNBOUNDED})
    fut = mgr.start_open("t", 0)
    fut.result(60)
    log = mgr.finish_open("t", 0)
    for i in range(count):
        log.append(batch([NOW_MS + i]), now_ms=NOW_MS)
    return mgr, log


def _names(path) -> set[str]:
    return set(os.listdir(path))


def test_retention_hands_out_its_renames_and_unlinks_follow_them(tmp_path):
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        mgr, log = _log_with_segments(tmp_path, 5, pool)
        bases = [s.base_offset for s in log.segments]
        log.delete_records(3)
        outcome = log.delete_old_segments(NOW_MS)
        gone = [d.base_offset for d in outcome.deleted]
        assert gone and log.log_start_offset == 3
        # the segments left the log, their files are still there under their own names
        for base in gone:
            assert files.filename_prefix(base) + ".log" in _names(log.dir)
        assert mgr.take_expired_files(NOW_MS + 10) == ([], [])     # nothing to unlink before the renames
        jobs = mgr.take_rename_jobs()
        assert sorted(b for _tp, j in jobs for b in j.bases) == sorted(gone)
        assert mgr.take_rename_jobs() == []                        # handed out once
        for tp, job in jobs:
            pool.submit(job.run).result(60)
            mgr.renamed(tp, job)
        for base in gone:
            assert files.filename_prefix(base) + ".log.deleted" in _names(log.dir)
        due, _dirs = mgr.take_expired_files(NOW_MS + 10)
        assert {os.path.basename(p) for p in due} >= {files.filename_prefix(b) + ".log.deleted" for b in gone}
        assert [s.base_offset for s in log.segments] == bases[len(gone):]
        mgr.shutdown()


def test_a_segment_created_at_the_base_of_an_owed_rename_waits_for_the_rename(tmp_path, seam):
    """Renames before reopen: a segment file with the base offset of a segment whose rename is
    still owed (here: running, slowly, on another thread) is created only after that rename."""
    recording = seam(RecordingDisk(hold={"rename"}))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        mgr, log = _log_with_segments(tmp_path, 4, pool)
        log.delete_records(2)
        gone = [d.base_offset for d in log.delete_old_segments(NOW_MS).deleted]
        assert 0 in gone
        jobs = mgr.take_rename_jobs()
        running = [pool.submit(job.run) for _tp, job in jobs]
        recording.wait_in_progress("rename", 1)
        threading.Timer(0.05, recording.gate.set).start()
        # start again at offset 0: a new segment 00000000000000000000.log while the old one's rename runs
        log.truncate_fully_and_start_at(0, now_ms=NOW_MS)
        for fut in running:
            fut.result(60)
        names = _names(log.dir)
        assert files.filename_prefix(0) + ".log.deleted" in names     # the old one, renamed first
        assert files.filename_prefix(0) + ".log" in names             # the new one, not renamed away
        assert log.segments[0].base_offset == 0 and log.log_end_offset == 0
        log.append(batch([NOW_MS]), now_ms=NOW_MS)
        assert log.read(0, 1 << 20).slices                            # the new segment is the one in use
        for tp, job in jobs:
            mgr.renamed(tp, job)   # already given back by the log: nothing twice
        due, _ = mgr.take_expired_files(NOW_MS + 10)
        assert files.log_file(log.dir, 0) not in due
        mgr.shutdown()


def test_closing_a_log_does_the_renames_it_still_owes(tmp_path):
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        mgr, log = _log_with_segments(tmp_path, 4, pool)
        log.delete_records(3)
        gone = [d.base_offset for d in log.delete_old_segments(NOW_MS).deleted]
        pdir = log.dir
        mgr.shutdown()
        names = _names(pdir)
        for base in gone:
            assert files.filename_prefix(base) + ".log" not in names
            assert files.filename_prefix(base) + ".log.deleted" in names


def test_without_an_executor_retention_renames_at_once(tmp_path):
    mgr = LogManager([str(tmp_path)], {"log.segment.delete.delay.ms": 0})
    mgr.startup()
    mgr.create_topic("t", 1, {"segment.bytes": "100", "file.delete.delay.ms": "0", **UNBOUNDED})
    log = mgr.get_log("t", 0)
    assert not log.defer_renames
    for i in range(3):
        log.append(batch([NOW_MS + i]), now_ms=NOW_MS)
    log.delete_records(2)
    gone = [d.base_offset for d in log.delete_old_segments(NOW_MS).deleted]
    assert gone and mgr.take_rename_jobs() == []
    for base in gone:
        assert files.filename_prefix(base) + ".log.deleted" in _names(log.dir)
    mgr.shutdown()
