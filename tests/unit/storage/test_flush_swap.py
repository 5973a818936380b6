"""A cleaner's swap that lands while an acks=all group-commit fsync is in flight does not void
that fsync: the cleaned segment's files were fsynced by the cleaner thread before the swap, and
the swap moves no offset, so every offset below the job's target is durable when the job ends.
The waiting producer is answered after one fsync, not two."""

from __future__ import annotations

import asyncio

import pytest
from support.cleaner_helpers import append, clean_pass, compact_log
from support.log_helpers import NOW_MS

from sundial.broker.flusher import PartitionFlusher
from sundial.storage.cleaner_manager import LogCleanerManager
from sundial.storage.offset_map import SkimpyOffsetMap


class _CapturingThreads:
    """Flush threads that run nothing until the test says so."""

    def __init__(self) -> None:
        self.jobs = []

    def submit(self, job, loop, done) -> None:
        self.jobs.append((job, done))


@pytest.mark.asyncio
async def test_a_swap_during_an_acks_all_fsync_does_not_cost_a_second_fsync(tmp_path):
    log = compact_log(tmp_path / "t-0", segment_bytes=300)
    try:
        for i in range(12):
            append(log, [(b"k%d" % (i % 3), b"v%d" % i, NOW_MS + i)])
        assert len(log.segments) >= 3
        log.flush()
        append(log, [(b"k9", b"last", NOW_MS + 20)])      # an acks=all produce waits for this one
        threads = _CapturingThreads()
        flusher = PartitionFlusher(log, "t", 0, threads=threads)
        waiter = flusher.flushed_future(log.log_end_offset - 1)
        assert waiter is not None and len(threads.jobs) == 1

        # the cleaner swaps a segment in while that fsync runs
        done = clean_pass(log, LogCleanerManager([str(tmp_path)]), SkimpyOffsetMap(1 << 16), NOW_MS)
        assert done is not None and done.stats.segments_replaced >= 1

        job, job_done = threads.jobs[0]
        job.run()
        job_done(job, None)
        await asyncio.sleep(0)
        assert waiter.done(), "the producer still waits although its offset is on disk"
        assert len(threads.jobs) == 1, f"{len(threads.jobs)} fsync jobs for one produce"
    finally:
        for job, _ in threads.jobs[1:]:
            job.discard()
        log.close_handles()
