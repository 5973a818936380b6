"""Group commit (broker.flusher.PartitionFlusher) over a real partition log, on both
fsync-thread implementations (Python threads and the native worker).

Invariants checked: a waiter is released only once its last offset is below the log's
recovery point (durable); waiters that arrive while a flush runs start a second one at
once, so never more than two are in flight; a failing fsync fails exactly the waiters it
was to cover, and later flushes still release the rest. A failure is injected for real:
a pipe among the job's descriptors makes fdatasync fail with EINVAL on either path; a slow
or failing disk is a ``run_job`` handed to ``FlushThreads``, and the threads are handed to
the flusher (``threads=``), never swapped in a module global.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time

import pytest

from sundial.broker import flusher as flusher_module
from sundial.broker.flusher import FlushThreads, NativeFlushThreads, PartitionFlusher
from sundial.config.topic import TopicConfig
from sundial.records.builder import SimpleRecord, build_records
from sundial.storage import files
from sundial.storage import log as storage_log
from sundial.storage.log import PartitionLog


def append(log: PartitionLog, n: int = 1) -> int:
    """Append one batch of ``n`` records; returns its last offset."""
    now = int(time.time() * 1000)
    batch = build_records(2, [SimpleRecord(now, None, b"v")] * n).buffer
    return log.append(batch, now_ms=now).last_offset


@pytest.fixture
def log(tmp_path):
    log = PartitionLog.create(str(tmp_path / "t-0"), TopicConfig(), topic="t", partition=0)
    yield log
    log.close()


NATIVE = files.native_fsync_built()
NOT_BUILT = "the native fsync worker is not built (or SUNDIAL_NO_EXTENSIONS=1)"


@pytest.fixture(params=["python", pytest.param("native", marks=pytest.mark.skipif(not NATIVE, reason=NOT_BUILT))])
def kind(request):
    """Which fsync threads the test builds and hands to its flusher."""
    return request.param


@pytest.fixture
def make_threads(kind):
    """``make_threads(run_job=None)``: fsync threads of this test's kind (a ``run_job``, the
    injected disk, only for the Python threads: the native ones sync for real)."""
    made = []

    def make(run_job=None):
        if kind == "native":
            threads = NativeFlushThreads(4)
        else:
            threads = FlushThreads(4, run_job=run_job) if run_job is not None else FlushThreads(4)
        made.append(threads)
        return threads

    yield make
    for threads in made:
        if isinstance(threads, NativeFlushThreads):
            threads.close()


class CountingThreads:
    """Fsync threads that count the flushes in flight from submit to done (and their peak)."""

    def __init__(self, threads) -> None:
        self._threads = threads
        self.in_flight = 0
        self.peak = 0

    def submit(self, job, loop, done) -> None:
        def counted_done(job, error):
            self.in_flight -= 1
            done(job, error)

        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self._threads.submit(job, loop, counted_done)


def inject_bad_descriptor(monkeypatch, fail: list[bool]) -> None:
    """While ``fail[0]``: every flush job also holds a pipe, which fdatasync refuses (EINVAL)."""
    real_prepare = PartitionLog.prepare_flush

    def prepare(self, up_to_offset=None):
        job = real_prepare(self, up_to_offset)
        if job is not None and fail[0]:
            r, w = os.pipe()
            os.close(w)
            job.fds.insert(0, r)
        return job

    monkeypatch.setattr(PartitionLog, "prepare_flush", prepare)


@pytest.mark.asyncio
async def test_waiters_released_only_when_durable_with_two_flushes_at_most(log, kind, make_threads):
    real_run = storage_log.FlushJob.run
    lock = threading.Lock()
    running = [0]
    peak = [0]

    def slow_run(job):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            time.sleep(0.02)
            real_run(job)
        finally:
            with lock:
                running[0] -= 1

    counting = CountingThreads(make_threads(run_job=slow_run))   # a slow disk for the Python threads
    flusher = PartitionFlusher(log, "t", 0, threads=counting)
    released: list[tuple[int, int]] = []

    async def produce_and_wait(i: int) -> None:
        last = append(log, 1 + i % 3)
        await flusher.wait_flushed(last)
        released.append((last, log.recovery_point))

    tasks = []
    for i in range(60):
        tasks.append(asyncio.ensure_future(produce_and_wait(i)))
        if i % 7 == 0:
            await asyncio.sleep(0.005)  # appends arrive while flushes run
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    assert len(released) == 60
    assert all(point > last for last, point in released), "released before its data was durable"
    # A flush that finishes first may release everybody while the other is still on its
    # thread: its completion is still due.
    deadline = time.monotonic() + 60
    while counting.in_flight and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert peak[0] <= PartitionFlusher.MAX_IN_FLIGHT
    assert (peak[0] >= 1) == (kind == "python"), "the injected disk runs on the Python threads only"
    assert 1 <= counting.peak <= PartitionFlusher.MAX_IN_FLIGHT and counting.in_flight == 0
    assert flusher.flushes < 60, "fsyncs are shared"
    assert log.recovery_point == log.log_end_offset


@pytest.mark.asyncio
async def test_failed_fsync_fails_its_waiters_and_later_flushes_recover(log, monkeypatch, make_threads, open_under):
    fail = [True]
    inject_bad_descriptor(monkeypatch, fail)
    before = open_under(log.dir)
    flusher = PartitionFlusher(log, "t", 0, threads=make_threads())
    first = append(log, 2)
    with pytest.raises(storage_log.KafkaStorageError) as raised:
        await asyncio.wait_for(flusher.wait_flushed(first), 30)
    assert str(raised.value) == "flush failed: " + os.strerror(errno.EINVAL)
    assert isinstance(raised.value.__cause__, OSError) and raised.value.__cause__.errno == errno.EINVAL
    assert log.recovery_point <= first
    assert open_under(log.dir) <= before, "the failed job's descriptors are closed"
    fail[0] = False
    second = append(log, 2)
    await asyncio.wait_for(flusher.wait_flushed(second), 30)
    assert log.recovery_point > second


@pytest.mark.asyncio
async def test_an_injected_run_job_runs_every_flush_of_its_threads(log):
    """``FlushThreads(run_job=...)``: the injected disk runs each job (here it fails, then
    syncs for real); the failure reaches the waiters and later flushes recover."""
    fail = [True]
    ran = []

    def maybe_failing_run(job):
        ran.append(job.target_offset)
        if fail[0]:
            job.discard()
            raise storage_log.KafkaStorageError.from_os_error(OSError(errno.EIO, "injected"), "flush failed")
        job.run()

    flusher = PartitionFlusher(log, "t", 0, threads=FlushThreads(2, run_job=maybe_failing_run))
    first = append(log, 2)
    with pytest.raises(storage_log.KafkaStorageError):
        await asyncio.wait_for(flusher.wait_flushed(first), 30)
    assert log.recovery_point <= first
    fail[0] = False
    second = append(log, 2)
    await asyncio.wait_for(flusher.wait_flushed(second), 30)
    assert log.recovery_point > second
    assert ran and ran[-1] == log.recovery_point


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.asyncio
async def test_flush_threads_belong_to_whoever_built_them(log, monkeypatch, native):
    """No process-wide pool: each call builds new threads of the kind the environment allows, and
    closing them lets the queued flush finish, then refuses work (the waiters fail, none hangs)."""
    monkeypatch.setenv("SUNDIAL_NATIVE_FSYNC", native)
    kind = NativeFlushThreads if flusher_module.native_fsync_available() else FlushThreads
    assert kind is (NativeFlushThreads if native == "1" and files.native_fsync_built() else FlushThreads)
    threads = flusher_module.make_flush_threads(2)
    other = flusher_module.make_flush_threads(2)
    assert isinstance(threads, kind) and other is not threads
    other.close()
    flusher = PartitionFlusher(log, "t", 0, threads=threads)
    last = append(log, 3)
    await asyncio.wait_for(flusher.wait_flushed(last), 30)
    assert log.recovery_point > last
    threads.close()
    later = append(log, 1)
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(flusher.wait_flushed(later), 30)


@pytest.mark.asyncio
async def test_flushers_close_only_threads_of_their_own(log):
    """PartitionFlushers built without threads owns new ones and closes them; handed threads stay
    open for their owner."""
    handed = FlushThreads(2)
    shared = flusher_module.PartitionFlushers(handed)
    first = shared.flusher("t", 0, log)
    assert shared.flusher("t", 0, log) is first
    last = append(log, 2)
    await asyncio.wait_for(shared.wait_flushed("t", 0, log, last), 30)
    shared.close()
    assert shared.flusher("t", 0, log) is not first          # forgotten by close
    await asyncio.wait_for(shared.wait_flushed("t", 0, log, append(log, 1)), 30)   # threads still open
    handed.close()
    own = flusher_module.PartitionFlushers(thread_count=2)
    await asyncio.wait_for(own.wait_flushed("t", 0, log, append(log, 1)), 30)
    own.close()
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(own.wait_flushed("t", 0, log, append(log, 1)), 30)


@pytest.mark.asyncio
async def test_no_fsync_thread_fails_the_waiters_instead_of_hanging(log, monkeypatch):
    """When the OS refuses to start any fsync thread the waiters get the error (the produce
    answer is then KAFKA_STORAGE_ERROR); once threads start again, flushes go through."""
    threads = FlushThreads(2)
    real_start = threading.Thread.start

    def refused(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refused)
    flusher = PartitionFlusher(log, "t", 0, threads=threads)
    first = append(log, 1)
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(flusher.wait_flushed(first), 30)
    assert log.recovery_point <= first
    monkeypatch.setattr(threading.Thread, "start", real_start)
    second = append(log, 1)
    await asyncio.wait_for(flusher.wait_flushed(second), 30)
    assert log.recovery_point > second


@pytest.mark.skipif(not NATIVE, reason=NOT_BUILT)
def test_native_threads_serve_several_loops(tmp_path, monkeypatch):
    """One native worker, loops one after another and two at once in two threads: every
    flush completes on its own loop and makes its log durable."""
    made = NativeFlushThreads(2)
    logs = [PartitionLog.create(str(tmp_path / f"t-{i}"), TopicConfig(), topic="t", partition=i) for i in range(4)]

    async def produce_and_wait(log) -> None:
        flusher = PartitionFlusher(log, "t", 0, threads=made)
        loop = asyncio.get_running_loop()
        for _ in range(20):
            last = append(log, 2)
            await asyncio.wait_for(flusher.wait_flushed(last), 60)
            assert log.recovery_point > last
            assert asyncio.get_running_loop() is loop

    try:
        asyncio.run(produce_and_wait(logs[0]))   # a loop that is closed afterwards
        asyncio.run(produce_and_wait(logs[1]))   # a new loop registers on the same eventfd
        errors: list[BaseException] = []

        def in_thread(log) -> None:
            try:
                asyncio.run(produce_and_wait(log))
            except BaseException as exc:  # reported below
                errors.append(exc)

        workers = [threading.Thread(target=in_thread, args=(log,)) for log in logs[2:]]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        assert not errors
        assert all(log.recovery_point == log.log_end_offset == 40 for log in logs)
    finally:
        made.close()
        for log in logs:
            log.close()


@pytest.mark.skipif(not NATIVE, reason=NOT_BUILT)
@pytest.mark.asyncio
async def test_native_threads_refusing_a_job_fail_the_waiters_and_close_its_files(log, monkeypatch, open_under):
    """A native worker that takes no more jobs (closed) makes the waiters fail at once,
    and the job's descriptors are closed, not leaked."""
    made = NativeFlushThreads(2)
    flusher = PartitionFlusher(log, "t", 0, threads=made)
    first = append(log, 1)
    await asyncio.wait_for(flusher.wait_flushed(first), 30)
    made.close()
    before = open_under(log.dir)
    second = append(log, 1)
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(flusher.wait_flushed(second), 30)
    assert log.recovery_point == second   # the first flush's point, nothing more
    assert open_under(log.dir) == before


@pytest.mark.parametrize("native", ["1", "0"])
def test_flushers_built_without_threads_start_as_many_as_they_are_given(monkeypatch, native):
    """The broker's ``num.io.threads`` reaches its fsync threads (broker.node.build_broker)."""
    monkeypatch.setenv("SUNDIAL_NATIVE_FSYNC", native)
    for count in (1, 5):
        own = flusher_module.PartitionFlushers(thread_count=count)
        assert own.threads.size == count
        own.close()
