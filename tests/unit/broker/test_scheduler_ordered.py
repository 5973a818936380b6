"""broker.scheduler.Scheduler: the ordered thread runs jobs one at a time in the order given,
also when a caller stops waiting; every thread is started at construction, not by the loop."""

import asyncio
import threading

import pytest

from sundial.broker.scheduler import Scheduler


@pytest.mark.asyncio
async def test_ordered_jobs_run_one_at_a_time_in_submission_order():
    scheduler = Scheduler(4)
    try:
        ran: list[int] = []
        running = [0, 0]   # now, most at once
        lock = threading.Lock()
        gate = threading.Event()

        def job(i: int) -> int:
            with lock:
                running[0] += 1
                running[1] = max(running[1], running[0])
            if i == 0:
                gate.wait(10)   # the first holds the thread: the others queue behind it
            with lock:
                ran.append(i)
                running[0] -= 1
            return i

        tasks = [asyncio.ensure_future(scheduler.run_ordered(job, i)) for i in range(20)]
        await asyncio.sleep(0)
        tasks[5].cancel()            # a caller that stops waiting does not stop its job
        gate.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert ran == list(range(20))
        assert running[1] == 1
        assert isinstance(results[5], asyncio.CancelledError)
        assert [r for i, r in enumerate(results) if i != 5] == [i for i in range(20) if i != 5]
    finally:
        scheduler.close()


def test_every_thread_is_started_without_a_job_from_the_caller():
    scheduler = Scheduler(3)
    try:
        deadline = threading.Event()
        for _ in range(1000):
            names = {t.name for t in threading.enumerate()}
            if (sum(n.startswith("sundial-scheduler_") for n in names) == 3
                    and any(n.startswith("sundial-scheduler-ordered") for n in names)):
                break
            deadline.wait(0.01)
        names = {t.name for t in threading.enumerate()}
        assert sum(n.startswith("sundial-scheduler_") for n in names) == 3, names
        assert any(n.startswith("sundial-scheduler-ordered") for n in names), names
    finally:
        scheduler.close()
