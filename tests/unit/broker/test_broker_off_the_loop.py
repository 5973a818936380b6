"""The broker keeps blocking file work off the event loop: the scheduler, the page-cache probe
behind sendfile, opening partitions before serving them, and retention's renames after the log
start offset checkpoint. The loop's responsiveness is observed by a ticker coroutine that must
run while a file operation is held on another thread (no timing assertions)."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import mmap
import os
import threading
import time

import pytest

from sundial.broker import page_cache
from sundial.broker.metrics import BrokerMetrics, PartitionRows, on_loop, resident_partition_rows
from sundial.broker.replica_manager import FetchPartition, ReplicaManager
from sundial.broker.scheduler import Scheduler
from sundial.config import BrokerConfig
from sundial.records.builder import SimpleRecord, build_records
from sundial.records.framing import iter_records
from sundial.storage import disk, files
from sundial.storage.checkpoints import read_offset_checkpoint
from sundial.storage.log_manager import LogManager

UNBOUNDED = {"message.timestamp.after.max.ms": "9223372036854775807"}


class HeldDisk(disk.Disk):
    """Holds ``held`` operations until ``gate`` is set; records the order of every operation and,
    at each rename, the log start offset checkpoint as it is on disk then."""

    def __init__(self, held=(), checkpoint_path: str | None = None) -> None:
        self.held = set(held)
        self.gate = threading.Event()
        self.started = threading.Event()
        self.order: list[str] = []
        self.checkpoint_path = checkpoint_path
        self.checkpoint_at_rename: list[dict] = []
        self.lock = threading.Lock()

    def is_slow(self, op: str) -> bool:
        return op == "read" and "read" in self.held

    def pause(self, op: str) -> None:
        with self.lock:
            self.order.append(op)
            if op == "rename" and self.checkpoint_path:
                self.checkpoint_at_rename.append(read_offset_checkpoint(self.checkpoint_path))
        if op in self.held:
            self.started.set()
            assert self.gate.wait(60)


@pytest.fixture
def seam():
    installed = []

    def install(d):
        installed.append(disk.install(d))
        return d

    yield install
    while installed:
        disk.install(installed.pop())


class _Purgatory:
    def notify(self, topic, partition):
        pass

    def park(self, keys):
        raise AssertionError("not expected to park")

    def unpark(self, waiter):
        pass


def records(count: int = 1, value: bytes = b"v") -> bytes:
    now = int(time.time() * 1000)
    return build_records(2, [SimpleRecord(now, b"k", value)] * count).buffer


def build(tmp_path, scheduler, **topic_overrides):
    logs = LogManager([str(tmp_path)], {}, executor=scheduler.executor if scheduler else None)
    logs.startup()
    rm = ReplicaManager(BrokerConfig({}), logs, purgatory=_Purgatory(), metrics=BrokerMetrics(),
                        now_ms=lambda: int(time.time() * 1000), scheduler=scheduler)
    return logs, rm


def evict_or_skip(seg, *close) -> None:
    """Drop the segment's pages from the page cache (written back first); skip the test, after
    ``close`` (callables), where the file system keeps them."""
    os.fsync(seg.fd)
    os.posix_fadvise(seg.fd, 0, 0, os.POSIX_FADV_DONTNEED)
    if page_cache.cached(seg.fd, 0, seg.size_bytes):
        for fn in close:
            fn()
        pytest.skip("the file system here keeps the pages (no eviction to test)")


async def served_while(work, held: HeldDisk) -> int:
    """Run ``work`` (a coroutine); count the ticks the loop ran while ``held`` held a file operation."""
    ticks = 0
    stop = False

    async def ticker():
        nonlocal ticks
        while not stop:
            if held.started.is_set() and not held.gate.is_set():
                ticks += 1
                if ticks >= 20:
                    held.gate.set()   # enough observed: let the file operation finish
            await asyncio.sleep(0)

    t = asyncio.get_running_loop().create_task(ticker())
    try:
        result = await work
    finally:
        stop = True
        await t
    return ticks, result


# -- the scheduler ------------------------------------------------------------------------------------
def test_scheduler_runs_slices_in_parallel_and_keeps_their_order():
    s = Scheduler(3)
    seen_threads = set()
    lock = threading.Lock()
    barrier = threading.Barrier(3, timeout=60)

    def job(part):
        barrier.wait()       # three slices at once, or this times out
        with lock:
            # by identity: two threads an executor starts at once may share a name
            seen_threads.add((threading.get_ident(), threading.current_thread().name))
        return sum(part)

    results = asyncio.run(s.run_all(job, list(range(9))))
    s.close()
    assert results == [0 + 1 + 2, 3 + 4 + 5, 6 + 7 + 8] and len(seen_threads) == 3
    assert all(name.startswith("sundial-scheduler") for _, name in seen_threads)
    with pytest.raises(ValueError):
        Scheduler(0)


# -- the page cache probe --------------------------------------------------------------------------------
def test_page_cache_probe_sees_cached_and_evicted_ranges(tmp_path):
    path = str(tmp_path / "seg")
    data = os.urandom(3 << 20)
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.pread(fd, len(data), 0)
        for position, size in ((0, 4096), (100, 60_000), (5000, 2 << 20)):   # both probes
            assert page_cache.cached(fd, position, size)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        evicted = not page_cache.cached(fd, 0, 2 << 20)
        if evicted:   # the kernel dropped them: warming brings them back
            page_cache.warm(page_cache.own([(fd, 0, 2 << 20)]))
            assert page_cache.cached(fd, 0, 2 << 20)
        assert page_cache.cached(fd, 0, 0)
    finally:
        os.close(fd)


def test_cachestat_probe_agrees_with_mincore_page_by_page(tmp_path):
    """cachestat(2) (one system call) against mmap + mincore as the oracle, on a file with
    resident and evicted stretches, over ranges that start and end inside pages."""
    probe = page_cache._CachestatProbe(page_cache._libc)
    page = mmap.PAGESIZE
    path = str(tmp_path / "seg")
    with open(path, "wb") as fh:
        fh.write(os.urandom(64 * page))
        fh.flush()
        os.fsync(fh.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        if probe.available:
            probe.cached(fd, 0, page)
        if not probe.available:
            pytest.skip("no cachestat(2) here (kernel before 6.5, or refused by a seccomp filter)")
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        for first in (3, 20, 40):                       # three resident stretches of 5 pages
            os.pread(fd, 5 * page, first * page)
        ranges = [(0, 1), (3 * page, 5 * page), (3 * page + 10, 5 * page - 10), (3 * page, 5 * page + 1),
                  (20 * page - 1, 2), (21 * page + 7, 100), (40 * page, 5 * page), (0, 64 * page),
                  (44 * page + page - 1, 1), (45 * page, 1)]
        ranges += [(a * 97 % (64 * page), b) for a, b in zip(range(1, 400, 7), range(1, 40000, 700))]
        checked = 0
        for position, size in ranges:
            size = min(size, 64 * page - position)
            want = page_cache._cached_mincore(fd, position, size)
            if want is None:
                continue
            assert probe.cached(fd, position, size) is want, (position, size)
            checked += 1
        assert checked > 10
    finally:
        os.close(fd)


def test_a_refused_cachestat_is_not_asked_again_and_the_other_probes_answer(tmp_path):
    calls = []

    class RefusingLibc:
        def syscall(self, *args):
            calls.append(args[0])
            ctypes.set_errno(errno.ENOSYS)
            return -1

    probe = page_cache._CachestatProbe(RefusingLibc())
    if not probe.available:
        pytest.skip("not Linux")
    assert probe.cached(0, 0, 4096) is None
    assert not probe.available and calls == [451]
    path = str(tmp_path / "f")
    with open(path, "wb") as fh:
        fh.write(b"x" * 100_000)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.pread(fd, 100_000, 0)
        assert page_cache._cached_rwf(fd, 0, 4096) in (True, None)
        assert page_cache._cached_mincore(fd, 0, 100_000) in (True, None)
    finally:
        os.close(fd)


def test_warm_closes_the_descriptors_it_owns(tmp_path):
    path = str(tmp_path / "f")
    with open(path, "wb") as fh:
        fh.write(b"x" * 10_000)
    fd = os.open(path, os.O_RDONLY)
    owned = page_cache.own([(fd, 0, 10_000)])
    page_cache.warm(owned)
    with pytest.raises(OSError):
        os.fstat(owned[0][0])
    os.fstat(fd)   # the original is untouched
    os.close(fd)


# -- opening partitions ----------------------------------------------------------------------------------
def test_the_loop_serves_while_a_partition_opens(tmp_path, seam):
    held = seam(HeldDisk(held={"open"}))
    scheduler = Scheduler(2)
    logs, rm = build(tmp_path, scheduler)
    logs.create_topic("t", 2, UNBOUNDED)

    async def main():
        waiting = rm.open_logs([("t", 0), ("nope", 0), ("t", 9)])
        assert waiting is not None
        ticks, _ = await served_while(waiting, held)
        assert ticks > 0 and logs.is_open("t", 0)
        assert rm.open_logs([("t", 0)]) is None          # open already: nothing to wait for
        out = rm.append_one("t", 0, records(), int(time.time() * 1000))
        assert out.error_code == 0 and out.base_offset == 0

    asyncio.run(main())
    logs.shutdown()
    scheduler.close()


def test_without_a_scheduler_nothing_is_awaited(tmp_path):
    logs, rm = build(tmp_path, None)
    logs.create_topic("t", 1, UNBOUNDED)
    assert rm.open_logs([("t", 0)]) is None
    assert rm.log_for("t", 0) is not None
    logs.shutdown()


# -- fetch: the page cache is warmed off the loop -------------------------------------------------------
def test_a_fetch_of_cold_pages_reads_them_on_the_scheduler(tmp_path, seam):
    scheduler = Scheduler(2)
    logs, rm = build(tmp_path, scheduler)
    logs.create_topic("t", 1, UNBOUNDED)
    log = logs.get_log("t", 0)
    log.append(records(5, b"x" * 100), now_ms=int(time.time() * 1000))
    held = seam(HeldDisk(held={"read"}))   # a slow disk: every range counts as cold

    async def main():
        ticks, results = await served_while(
            rm.fetch([FetchPartition("t", 0, 0, 1 << 20)], max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                     api_version=11), held)
        assert ticks > 0 and rm.page_cache_warms == 1
        # The header walk met the cold range first (held while the loop ticked), then the answer's.
        assert rm.header_warms == 1 and held.order == ["read", "read"]
        (out,) = results
        assert out.error_code == 0 and out.records.size == log.active_segment.size_bytes
        assert isinstance(out.records, files.FileSlice)   # still zero-copy

    asyncio.run(main())
    logs.shutdown()
    scheduler.close()


def test_a_fetch_reads_evicted_batch_headers_on_the_scheduler_before_walking_them(tmp_path):
    """Real eviction (no seam): after the segment's pages are dropped from the page cache, the
    Fetch's header walk does not read them on the loop; the scheduler reads them in first and
    the answer is the one a plain read gives."""
    scheduler = Scheduler(2)
    logs, rm = build(tmp_path, scheduler)
    logs.create_topic("t", 1, {**UNBOUNDED, "index.interval.bytes": "100000"})
    log = logs.get_log("t", 0)
    for _ in range(40):
        log.append(records(4, b"y" * 2000), now_ms=int(time.time() * 1000))
    seg = log.active_segment
    expected = log.read(150, 1 << 20)
    want = (expected.slices[0].position, expected.slices[0].size)
    evict_or_skip(seg, logs.shutdown, scheduler.close)

    async def main():
        (out,) = await rm.fetch([FetchPartition("t", 0, 150, 1 << 20)], max_wait_ms=0, min_bytes=1,
                                max_bytes=1 << 20, api_version=11)
        assert out.error_code == 0 and (out.records.position, out.records.size) == want
        assert rm.header_warms == 1

    asyncio.run(main())
    logs.shutdown()
    scheduler.close()


# -- metrics: the oldest retained timestamp is read into the page cache off the loop ----------------------
def _partition_with_old_records(tmp_path, logs=None):
    if logs is None:
        logs, _ = build(tmp_path, None)
    logs.create_topic("t", 1, UNBOUNDED)
    log = logs.get_log("t", 0)
    t0 = int(time.time() * 1000) - 60_000
    for i in range(30):
        log.append(build_records(2, [SimpleRecord(t0 + i, b"k", b"w" * 2000)] * 4).buffer, now_ms=t0 + 60_000)
    first = next(iter_records(log.read(0, 1 << 20).slices[0].read()))   # brute force: the first record
    return logs, log, first.timestamp


def test_a_scrape_reads_the_oldest_batch_in_on_its_own_thread_while_the_loop_serves(tmp_path, seam):
    logs, log, want = _partition_with_old_records(tmp_path)
    rows = PartitionRows(lambda: logs)
    held = seam(HeldDisk(held={"read"}))   # a slow disk: every range counts as cold

    async def main():
        scrape = resident_partition_rows(asyncio.get_running_loop(), rows)
        ticks, got = await served_while(asyncio.to_thread(scrape), held)
        assert ticks > 0 and rows.warms == 1 and held.order == ["read"]
        (row,) = got
        assert row["oldest_timestamp_ms"] == want
        log.roll(int(time.time() * 1000))   # a roll keeps the answer: the next scrape reads nothing
        (row,) = await asyncio.to_thread(scrape)
        assert row["oldest_timestamp_ms"] == want and rows.warms == 1 and held.order == ["read"]

    asyncio.run(main())
    logs.shutdown()


def test_a_scrape_after_eviction_reads_the_oldest_batch_in_first(tmp_path):
    """Real eviction (no seam): the scrape's probe on the loop sees the dropped pages, the scrape's
    thread reads them in, and the row is the brute-force answer."""
    logs, log, want = _partition_with_old_records(tmp_path)
    seg = log.active_segment
    evict_or_skip(seg, logs.shutdown)
    rows = PartitionRows(lambda: logs)

    async def main():
        (row,) = await asyncio.to_thread(resident_partition_rows(asyncio.get_running_loop(), rows))
        assert row["oldest_timestamp_ms"] == want and rows.warms == 1

    asyncio.run(main())
    logs.shutdown()


def test_a_loop_answer_that_comes_after_the_scrape_gave_up_is_discarded():
    release = threading.Event()
    discarded = []

    def slow():   # holds the loop until the scrape has given up
        assert release.wait(60)
        return ["late"]

    async def main():
        call = on_loop(asyncio.get_running_loop(), slow, timeout_s=0.05, discard=discarded.append)

        def scrape():
            try:
                return call()
            finally:
                release.set()

        assert await asyncio.to_thread(scrape) == []
        await asyncio.sleep(0)
        assert discarded == [["late"]]

    asyncio.run(main())


# -- ListOffsets by timestamp: the search's ranges are read in off the loop ------------------------------
def test_a_timestamp_lookup_of_cold_pages_reads_them_on_the_scheduler(tmp_path, seam):
    scheduler = Scheduler(2)
    logs, rm = build(tmp_path, scheduler)
    logs, log, first_ms = _partition_with_old_records(tmp_path / "d", logs=logs)
    target = first_ms + 14   # batch 14: 4 records a batch, their timestamps 1 ms apart by batch
    plain = rm.list_offset("t", 0, target, api_version=7)
    assert plain.offset == 56
    held = seam(HeldDisk(held={"read"}))   # a slow disk: every range counts as cold, every time

    async def main():
        ticks, answer = await served_while(rm.list_offset_resident("t", 0, target, api_version=7), held)
        assert ticks > 0 and answer == plain
        # three rounds read in on the scheduler while the loop ticked, then the search read as it is
        assert rm.lookup_warms == 3 and held.order == ["read"] * 3

    asyncio.run(main())
    logs.shutdown()
    scheduler.close()


def test_a_timestamp_lookup_after_eviction_reads_the_batch_in_first(tmp_path):
    scheduler = Scheduler(2)
    logs, rm = build(tmp_path, scheduler)
    logs, log, first_ms = _partition_with_old_records(tmp_path / "d", logs=logs)
    seg = log.active_segment   # not searched before the eviction: a search maps the pages it reads
    evict_or_skip(seg, logs.shutdown, scheduler.close)

    async def main():
        answer = await rm.list_offset_resident("t", 0, first_ms + 20, api_version=7)
        assert rm.lookup_warms >= 1
        assert answer == rm.list_offset("t", 0, first_ms + 20, api_version=7) and answer.offset == 80

    asyncio.run(main())
    logs.shutdown()
    scheduler.close()


# -- retention: checkpoint, then renames, then unlinks -----------------------------------------------------
def test_dropped_segments_are_renamed_after_the_log_start_offset_is_checkpointed(tmp_path, seam):
    scheduler = Scheduler(3)
    logs, rm = build(tmp_path, scheduler)
    logs.create_topic("t", 1, {"segment.bytes": "100", "file.delete.delay.ms": "0", **UNBOUNDED})
    log = logs.get_log("t", 0)
    for _ in range(6):
        log.append(records(), now_ms=int(time.time() * 1000))
    log.delete_records(4)
    checkpoint = os.path.join(str(tmp_path), files.LOG_START_OFFSET_CHECKPOINT_FILE)
    held = seam(HeldDisk(held={"rename"}, checkpoint_path=checkpoint))

    async def main():
        ticks, _ = await served_while(rm.run_retention(), held)
        assert ticks > 0

    asyncio.run(main())
    renames = [i for i, op in enumerate(held.order) if op == "rename"]
    assert len(renames) == 4
    assert "checkpoint" in held.order[:renames[0]]                  # the checkpoint came first ...
    assert all(cp.get(("t", 0)) == 4 for cp in held.checkpoint_at_rename)   # ... holding the new start
    names = set(os.listdir(log.dir))
    for base in range(4):
        assert files.filename_prefix(base) + ".log.deleted" in names
    due, _ = logs.take_expired_files(int(time.time() * 1000) + 1)
    assert {os.path.basename(p) for p in due} >= {files.filename_prefix(b) + ".log.deleted" for b in range(4)}
    logs.shutdown()
    scheduler.close()
