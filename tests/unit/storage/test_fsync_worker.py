"""The native fsync worker (storage/_fsync_worker.c) against ground truth the test reads
from the kernel: after a job is reported every one of its descriptors is closed (fstat
fails with EBADF, or the number now names another file: threads of other tests' clients
may still open sockets in this process; /proc/self/fd lists no descriptor of the test's
files any more), a descriptor that cannot
be synced reports its errno and the others are still closed, every job is reported exactly
once whatever thread submitted it, and close() runs what is still queued.
"""

from __future__ import annotations

import errno
import os
import resource
import select
import threading
import time

import pytest

_fsync_worker = pytest.importorskip("sundial.storage._fsync_worker")
FsyncWorker = _fsync_worker.FsyncWorker


#: (st_dev, st_ino) of each descriptor the tests made, by number.
_IDENT: dict[int, tuple[int, int]] = {}


def remember(fd: int) -> int:
    st = os.fstat(fd)
    _IDENT[fd] = (st.st_dev, st.st_ino)
    return fd


def is_closed(fd: int) -> bool:
    """``fd`` no longer names the file it was made for: closed (EBADF), or closed and its
    number taken since by another thread of this process for something else."""
    try:
        st = os.fstat(fd)
    except OSError as exc:
        assert exc.errno == errno.EBADF
        return True
    return fd in _IDENT and (st.st_dev, st.st_ino) != _IDENT[fd]


def collect(worker, count: int, deadline_s: float = 60.0) -> list[tuple[int, int]]:
    """Wait on the eventfd (as the loop does) until ``count`` completions were collected."""
    out: list[tuple[int, int]] = []
    deadline = time.monotonic() + deadline_s
    while len(out) < count and time.monotonic() < deadline:
        select.select([worker.fileno()], [], [], 1.0)
        out.extend(worker.completed())
    return out


def unused_fd() -> int:
    """A descriptor number no file is open under (high, so nothing opens it meanwhile)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    for fd in range(min(soft, 4096) - 1, 2, -1):
        if is_closed(fd):
            return fd
    raise AssertionError("no free descriptor number")


@pytest.fixture
def files(tmp_path):
    """``dup(n)`` → n new descriptors of files with unsynced data in them."""
    base = []

    def dup(n: int) -> tuple[int, ...]:
        fds = []
        for i in range(n):
            fd = remember(os.open(str(tmp_path / f"f{len(base)}-{i}"), os.O_RDWR | os.O_CREAT, 0o600))
            os.write(fd, b"x" * 100)
            fds.append(fd)
        base.extend(fds)
        return tuple(fds)

    return dup


def test_job_syncs_then_closes_every_descriptor(files):
    worker = FsyncWorker(2)
    try:
        fds = files(3)
        worker.submit(7, fds)
        assert collect(worker, 1) == [(7, 0)]
        assert all(is_closed(fd) for fd in fds)
        assert worker.completed() == []   # reported once
    finally:
        worker.close()


def test_bad_descriptor_reports_ebadf_and_the_others_are_closed(files):
    worker = FsyncWorker(1)
    try:
        good = files(2)
        bad = unused_fd()
        worker.submit(1, (good[0], bad, good[1]))
        assert collect(worker, 1) == [(1, errno.EBADF)]
        assert is_closed(good[0]) and is_closed(good[1])
        # A pipe cannot be fdatasynced (EINVAL): the error of the first failure is kept.
        r, w = os.pipe()
        remember(r), remember(w)
        more = files(1)
        worker.submit(2, (more[0], r, w))
        assert collect(worker, 1) == [(2, errno.EINVAL)]
        assert is_closed(more[0]) and is_closed(r) and is_closed(w)
    finally:
        worker.close()


def test_thousand_jobs_from_several_threads_complete_exactly_once(files, tmp_path, open_under):
    worker = FsyncWorker(4)
    jobs_per_thread, threads = 250, 4
    prepared = [[files(1 + (t + i) % 3) for i in range(jobs_per_thread)] for t in range(threads)]
    errors: list[BaseException] = []

    def submit_all(t: int) -> None:
        try:
            for i, fds in enumerate(prepared[t]):
                worker.submit(t * jobs_per_thread + i, fds)
        except BaseException as exc:  # reported below
            errors.append(exc)

    try:
        submitters = [threading.Thread(target=submit_all, args=(t,)) for t in range(threads)]
        for s in submitters:
            s.start()
        done = collect(worker, threads * jobs_per_thread, deadline_s=120)
        for s in submitters:
            s.join(60)
        assert not errors
        assert sorted(token for token, _ in done) == list(range(threads * jobs_per_thread))
        assert all(err == 0 for _, err in done)
        assert worker.completed() == []
        assert 1 <= worker.threads_started <= 4
    finally:
        worker.close()
    del worker
    assert open_under(tmp_path) == 0, "every descriptor of every job is closed"


def test_close_runs_the_queued_jobs_and_refuses_new_ones(files, tmp_path, open_under):
    worker = FsyncWorker(1)
    prepared = [files(2) for _ in range(200)]
    for token, fds in enumerate(prepared):
        worker.submit(token, fds)
    worker.close()              # returns once the queue is drained and the thread joined
    done = worker.completed()
    assert sorted(token for token, _ in done) == list(range(200))
    assert all(err == 0 for _, err in done)
    assert all(is_closed(fd) for fds in prepared for fd in fds)
    late = files(1)
    with pytest.raises(RuntimeError):
        worker.submit(999, late)
    assert not is_closed(late[0]), "a refused job leaves its descriptors to the caller"
    os.close(late[0])
    worker.close()              # idempotent
    del worker
    assert open_under(tmp_path) == 0


def test_one_job_at_a_time_keeps_one_warm_thread(files):
    worker = FsyncWorker(4)
    try:
        for token in range(30):
            worker.submit(token, files(1))
            assert collect(worker, 1) == [(token, 0)]
        assert worker.threads_started == 1
    finally:
        worker.close()


def test_bad_arguments_are_refused_without_taking_anything():
    with pytest.raises(ValueError):
        FsyncWorker(0)
    worker = FsyncWorker(1)
    try:
        with pytest.raises(TypeError):
            worker.submit(1, [3])         # a tuple is required
        with pytest.raises(ValueError):
            worker.submit(1, (-1,))
        with pytest.raises(TypeError):
            worker.submit(1, ("x",))
        assert worker.threads_started == 0
    finally:
        worker.close()


# -- write jobs (submit_write) --------------------------------------------------------------------


def test_write_job_writes_every_chunk_at_its_position_then_closes_the_descriptor(tmp_path):
    path = tmp_path / "seg.log"
    path.write_bytes(b"#" * 10)
    worker = FsyncWorker(2)
    try:
        chunks = (b"alpha", bytearray(b"-beta-"), memoryview(b"gamma!!")[:5], b"x" * 200_000)
        fd = remember(os.open(path, os.O_RDWR))
        worker.submit_write(7, fd, 4, chunks)
        assert collect(worker, 1) == [(7, 0)]
        assert is_closed(fd)
        want = b"####" + b"".join(bytes(c) for c in chunks)
        assert path.read_bytes() == want       # the bytes before the position stay, the rest is the chunks
    finally:
        worker.close()


def test_write_job_holds_its_buffers_until_reported_and_then_lets_them_go():
    import sys
    worker = FsyncWorker(1)
    try:
        data = bytearray(b"held" * 100)
        before = sys.getrefcount(data)
        fd = os.open(os.devnull, os.O_WRONLY)
        worker.submit_write(1, fd, 0, (data,))
        assert sys.getrefcount(data) == before + 1   # held by the job until completed() reports it
        assert collect(worker, 1) == [(1, 0)]
        assert sys.getrefcount(data) == before
        data.extend(b"resizable again")        # no buffer export left: a bytearray can grow
    finally:
        worker.close()


def test_write_job_to_a_bad_descriptor_reports_ebadf():
    worker = FsyncWorker(1)
    try:
        worker.submit_write(3, unused_fd(), 0, (b"x",))
        assert collect(worker, 1) == [(3, errno.EBADF)]
    finally:
        worker.close()


def test_bad_write_arguments_are_refused_without_taking_the_descriptor(tmp_path):
    worker = FsyncWorker(1)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(ValueError):
            worker.submit_write(1, fd, -1, (b"x",))
        with pytest.raises(ValueError):
            worker.submit_write(1, fd, 0, ())
        with pytest.raises(TypeError):
            worker.submit_write(1, fd, 0, ("text",))
        with pytest.raises(TypeError):
            worker.submit_write(1, fd, 0, [b"x"])    # a tuple is required
        with pytest.raises(ValueError):
            worker.submit_write(1, -1, 0, (b"x",))
        os.fstat(fd)                                  # still open: the caller's
        worker.close()
        with pytest.raises(RuntimeError):
            worker.submit_write(1, fd, 0, (b"x",))
        os.fstat(fd)
    finally:
        os.close(fd)
