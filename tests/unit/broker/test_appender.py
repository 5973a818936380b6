"""Appends whose writes run off the loop (broker/appender.py) against a real partition log.

An injected disk holds every write at a gate: while it is held the event loop keeps running
other work, the log shows nothing of the appends (its end offset has not moved), later
appends of the partition wait in order, and once the gate opens every append ends with the
offsets a one-at-a-time append would give, read back from the files. A failing write leaves
the log as before and the next append takes its place. The native writer threads are
checked the same way against a full read.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from support.log_helpers import NOW_MS, batch, topic_config

from sundial.broker.appender import AppendWriters, PartitionAppender, _write
from sundial.records.framing import iter_records
from sundial.storage.errors import KafkaStorageError
from sundial.storage.log import AppendResult, PartitionLog


class GatedDisk:
    """Writes wait at a gate; ``fail_next`` makes the next write raise EIO instead."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.writes = 0
        self.fail_next = False

    def write(self, fd: int, position: int, chunks: tuple) -> None:
        self.started.set()
        if not self.gate.wait(60):
            raise OSError(5, "gate never opened")
        self.writes += 1
        if self.fail_next:
            self.fail_next = False
            raise OSError(5, "injected EIO")
        _write(fd, position, chunks)


@pytest.fixture
def log(tmp_path):
    plog = PartitionLog.create(str(tmp_path / "t-0"), topic_config(), topic="t", partition=0, now_ms=NOW_MS)
    yield plog
    plog.close(flush=False)


def all_records(plog) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record, read from the files from offset 0."""
    out = []
    for _view, data in plog.batches_from(0, 1 << 20):
        out.extend((r.offset, r.timestamp) for r in iter_records(data))
    return out


def settle(log, result, exc):
    return exc if exc is not None else result


def begin_of(plog, timestamps):
    return lambda: (plog, plog.begin_append(batch(timestamps), now_ms=NOW_MS))


def test_the_loop_runs_while_a_write_is_held_and_appends_keep_their_order(log):
    async def main():
        disk = GatedDisk()
        writers = AppendWriters(2, write=disk.write)
        appender = PartitionAppender(writers)
        first = appender.submit(begin_of(log, [NOW_MS]), settle)
        assert isinstance(first, asyncio.Future)
        queued = [appender.submit(begin_of(log, [NOW_MS + i, NOW_MS + i]), settle) for i in range(1, 4)]
        assert all(isinstance(f, asyncio.Future) for f in queued)
        await asyncio.get_running_loop().run_in_executor(None, disk.started.wait, 60)
        ticks = 0
        for _ in range(50):                      # the loop serves other work meanwhile
            await asyncio.sleep(0)
            ticks += 1
        assert ticks == 50 and not first.done()
        assert log.log_end_offset == 0 and log.append_in_flight and all_records(log) == []
        with pytest.raises(KafkaStorageError):   # no second append begins beside it
            log.begin_append(batch([NOW_MS]), now_ms=NOW_MS)
        disk.gate.set()
        results = [await first] + [await f for f in queued]
        writers.close()
        return results

    results = asyncio.run(main())
    assert [(r.first_offset, r.last_offset) for r in results] == [(0, 0), (1, 2), (3, 4), (5, 6)]
    assert all_records(log) == [(0, NOW_MS), (1, NOW_MS + 1), (2, NOW_MS + 1), (3, NOW_MS + 2), (4, NOW_MS + 2),
                                (5, NOW_MS + 3), (6, NOW_MS + 3)]
    assert log.log_end_offset == 7 and not log.append_in_flight


def test_a_failed_write_leaves_the_log_as_before_and_the_next_append_takes_its_place(log):
    async def main():
        disk = GatedDisk()
        disk.gate.set()
        writers = AppendWriters(1, write=disk.write)
        appender = PartitionAppender(writers)
        ok = await appender.submit(begin_of(log, [NOW_MS]), settle)
        disk.fail_next = True
        failed = await appender.submit(begin_of(log, [NOW_MS + 1]), settle)
        after = await appender.submit(begin_of(log, [NOW_MS + 2]), settle)
        writers.close()
        return ok, failed, after

    ok, failed, after = asyncio.run(main())
    assert isinstance(ok, AppendResult) and ok.first_offset == 0
    assert isinstance(failed, KafkaStorageError)
    assert isinstance(after, AppendResult) and after.first_offset == 1
    assert all_records(log) == [(0, NOW_MS), (1, NOW_MS + 2)]


def test_an_append_that_writes_nothing_is_answered_at_once(log):
    async def main():
        writers = AppendWriters(1, write=GatedDisk().write)   # never opened: no write may happen
        appender = PartitionAppender(writers)
        out = appender.submit(lambda: (log, log.begin_append(b"", now_ms=NOW_MS)), settle)
        refused = appender.submit(lambda: (log, log.begin_append(b"\x00" * 70, now_ms=NOW_MS)), settle)
        writers.close()
        return out, refused

    out, refused = asyncio.run(main())
    assert isinstance(out, AppendResult) and out.record_count == 0
    assert isinstance(refused, Exception) and log.log_end_offset == 0 and not log.append_in_flight


@pytest.mark.parametrize("threads", [1, 4])
def test_the_native_writers_write_every_append_of_several_partitions(tmp_path, threads):
    pytest.importorskip("sundial.storage._fsync_worker")
    logs = [PartitionLog.create(str(tmp_path / f"t-{p}"), topic_config(segment_bytes=4096), topic="t",
                                partition=p, now_ms=NOW_MS) for p in range(3)]
    expected: list[list[tuple[int, int]]] = [[] for _ in logs]

    async def main():
        writers = AppendWriters(threads)
        appenders = [PartitionAppender(writers) for _ in logs]
        pending = []
        for i in range(150):
            p = i % 3
            stamps = [NOW_MS + i] * (1 + i % 4)
            pending.append(appenders[p].submit(begin_of(logs[p], stamps), settle))
            offset = len(expected[p])
            expected[p].extend((offset + k, ts) for k, ts in enumerate(stamps))
        for item in pending:
            result = await item if isinstance(item, asyncio.Future) else item
            assert isinstance(result, AppendResult)
        assert all(a.idle for a in appenders)
        writers.close()

    try:
        asyncio.run(main())
        for plog, want in zip(logs, expected):
            assert all_records(plog) == want          # rolls included (4 KiB segments)
            assert plog.log_end_offset == len(want)
    finally:
        for plog in logs:
            plog.close(flush=False)
