"""Group commit (broker.flusher.PartitionFlusher) over a real partition log.

Invariants checked: a waiter is released only once its last offset is below the log's
recovery point (durable); waiters that arrive while a flush runs start a second one at
once, so never more than two run; a failing fsync fails exactly the waiters it was to
cover, and later flushes still release the rest.
"""

from __future__ import annotations

import asyncio
import errno
import threading
import time

import pytest

from broker.flusher import PartitionFlusher
from config.topic import TopicConfig
from storage import log as storage_log
from records.builder import SimpleRecord, build_records
from storage.log import PartitionLog


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


@pytest.mark.asyncio
async def test_waiters_released_only_when_durable_with_two_flushes_at_most(log, monkeypatch):
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

    monkeypatch.setattr(storage_log.FlushJob, "run", slow_run)
    flusher = PartitionFlusher(log, "t", 0)
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
    assert peak[0] <= PartitionFlusher.MAX_IN_FLIGHT
    assert flusher.flushes < 60, "fsyncs are shared"
    assert log.recovery_point == log.log_end_offset


@pytest.mark.asyncio
async def test_failed_fsync_fails_its_waiters_and_later_flushes_recover(log, monkeypatch):
    real_run = storage_log.FlushJob.run
    fail = [True]

    def maybe_failing_run(job):
        if fail[0]:
            job.discard()
            raise storage_log.KafkaStorageError.from_os_error(OSError(errno.EIO, "injected"), "flush failed")
        real_run(job)

    monkeypatch.setattr(storage_log.FlushJob, "run", maybe_failing_run)
    flusher = PartitionFlusher(log, "t", 0)
    first = append(log, 2)
    with pytest.raises(storage_log.KafkaStorageError):
        await asyncio.wait_for(flusher.wait_flushed(first), 30)
    assert log.recovery_point <= first
    fail[0] = False
    second = append(log, 2)
    await asyncio.wait_for(flusher.wait_flushed(second), 30)
    assert log.recovery_point > second


@pytest.mark.asyncio
async def test_no_fsync_thread_fails_the_waiters_instead_of_hanging(log, monkeypatch):
    """When the OS refuses to start any fsync thread the waiters get the error (the produce
    answer is then KAFKA_STORAGE_ERROR); once threads start again, flushes go through."""
    from broker import flusher as flusher_module

    monkeypatch.setattr(flusher_module, "_THREADS", flusher_module.FlushThreads(2))
    real_start = threading.Thread.start

    def refused(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refused)
    flusher = PartitionFlusher(log, "t", 0)
    first = append(log, 1)
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(flusher.wait_flushed(first), 30)
    assert log.recovery_point <= first
    monkeypatch.setattr(threading.Thread, "start", real_start)
    second = append(log, 1)
    await asyncio.wait_for(flusher.wait_flushed(second), 30)
    assert log.recovery_point > second
