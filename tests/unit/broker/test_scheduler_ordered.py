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


class _HeldStart(Scheduler):
    """A scheduler whose thread-starting helper waits at a gate: the helper is still at work when
    ``close`` begins, as on a busy host where a server stops right after it started."""

    def __init__(self, threads: int, gate: threading.Event) -> None:
        self.gate = gate
        self.helper_done = threading.Event()
        super().__init__(threads)

    def _start_threads(self) -> None:
        self.gate.wait(10)
        try:
            super()._start_threads()
        finally:
            self.helper_done.set()


def test_close_waits_for_the_thread_starting_helper():
    gate = threading.Event()
    scheduler = _HeldStart(4, gate)
    errors: list[BaseException] = []

    def close() -> None:
        try:
            scheduler.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    closer = threading.Thread(target=close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive(), "close returned while the helper could still add threads"
    gate.set()
    closer.join(30)
    assert not closer.is_alive() and errors == []
    assert scheduler.helper_done.is_set()
    # no thread outlives close: the helper saw it and started none after it
    assert not scheduler.executor.live_threads() and not scheduler.ordered.live_threads()


def test_a_scheduler_closed_at_once_many_times_over():
    for _ in range(200):
        Scheduler(4).close()


def test_the_ordered_executor_never_has_two_threads():
    """A job submitted while the helper starts the threads must not start a second ordered thread
    (two threads ran the ordered jobs out of order on a busy host)."""
    for _ in range(100):
        scheduler = Scheduler(2)
        try:
            scheduler.ordered.submit(lambda: None).result(10)
            assert scheduler.started(10)
            assert len(scheduler.ordered.live_threads()) == 1
            assert len(scheduler.executor.live_threads()) == 2
        finally:
            scheduler.close()


def test_a_submit_never_starts_a_thread():
    """Jobs queued before any thread runs wait for the starter; the caller does not start one."""
    gate = threading.Event()
    scheduler = _HeldStart(2, gate)
    try:
        futures = [scheduler.ordered.submit(lambda i=i: i) for i in range(5)]
        futures += [scheduler.executor.submit(lambda: "x")]
        assert not scheduler.ordered.live_threads() and not scheduler.executor.live_threads()
        assert not any(f.done() for f in futures)
        gate.set()
        assert [f.result(30) for f in futures] == [0, 1, 2, 3, 4, "x"]
    finally:
        gate.set()
        scheduler.close()


def test_jobs_queued_before_a_close_that_stopped_the_start_still_run():
    gate = threading.Event()
    scheduler = _HeldStart(2, gate)
    ran = []
    futures = [scheduler.ordered.submit(ran.append, i) for i in range(3)]
    closer = threading.Thread(target=scheduler.close)
    closer.start()
    while not scheduler._closing:   # close has begun: the starter will start nothing
        threading.Event().wait(0.001)
    gate.set()
    closer.join(30)
    assert not closer.is_alive()
    assert ran == [0, 1, 2] and all(f.done() for f in futures)
    with pytest.raises(RuntimeError):
        scheduler.ordered.submit(lambda: None)


def test_a_failing_job_hands_its_exception_to_the_caller():
    scheduler = Scheduler(1)
    try:
        def boom():
            raise OSError("disk")
        with pytest.raises(OSError, match="disk"):
            scheduler.executor.submit(boom).result(10)
        assert scheduler.executor.submit(lambda: 7).result(10) == 7
    finally:
        scheduler.close()
