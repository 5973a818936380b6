"""Disk full: an append that cannot be written fails with KafkaStorageError, leaves the log
readable and consistent, and appends resume once space returns.

Two ways to run out of space:

* fault injection: ``os.pwrite``/``os.pwritev`` (the ``.log``) or ``os.posix_fallocate``
  (index pages) raise ENOSPC for a while;
* a real 1 MiB tmpfs (needs root and ``mount``; skipped otherwise), where a store into
  a sparse, memory-mapped index page used to kill the process with SIGBUS. That case
  runs in a subprocess, so a regression shows up as a signal exit, not a dead pytest.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

import support
from sundial.storage.errors import KafkaStorageError
from sundial.storage.log import PartitionLog
from sundial.records import iter_records
from support.log_helpers import NOW_MS, batch, topic_config


def read_offsets(log) -> list[int]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20)
        data = b"".join(s.read() for s in info.slices)
        got = [r.offset for r in iter_records(data) if r.offset >= offset]
        if not got:
            break
        out += got
        offset = got[-1] + 1
    return out


def enospc(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def small_log(tmp_path):
    log = PartitionLog.create(str(tmp_path / "t-0"), topic_config(index_interval_bytes=0, segment_bytes=4096),
                              topic="t", partition=0, now_ms=NOW_MS)
    yield log
    if not log.closed:
        log.close_handles()


@pytest.mark.parametrize("failing", [("pwrite", "pwritev"), ("posix_fallocate",)], ids=["log", "index"])
def test_enospc_fails_the_append_and_the_log_stays_consistent(small_log, monkeypatch, failing, tmp_path):
    log = small_log
    for i in range(40):  # several segments, an index entry per batch
        log.append(batch([NOW_MS + i, NOW_MS + i]), now_ms=NOW_MS)
    before = read_offsets(log)
    assert before == list(range(80))
    leo, size = log.log_end_offset, log.size_bytes
    with monkeypatch.context() as m:
        for name in failing:
            m.setattr(os, name, enospc)
        # the index pages of the next entry may already be backed: push until one needs a new page
        failures = 0
        for i in range(600):
            try:
                log.append(batch([NOW_MS, NOW_MS]), now_ms=NOW_MS)
            except KafkaStorageError as exc:
                assert "No space left" in str(exc)
                failures += 1
                break
        assert failures == 1
        stuck_leo = log.log_end_offset
        assert read_offsets(log) == list(range(stuck_leo))  # readable, contiguous
        with pytest.raises(KafkaStorageError):
            log.append(batch([NOW_MS]), now_ms=NOW_MS)
        assert log.log_end_offset == stuck_leo
    assert stuck_leo >= leo and log.size_bytes >= size
    # space is back: appends resume at the next offset, nothing lost or doubled
    result = log.append(batch([NOW_MS + 1]), now_ms=NOW_MS)
    assert result.first_offset == stuck_leo
    assert read_offsets(log) == list(range(stuck_leo + 1))
    log.close()
    reopened = PartitionLog.open(log.dir, topic_config(index_interval_bytes=0, segment_bytes=4096), topic="t",
                                 partition=0, clean=True)
    try:
        assert read_offsets(reopened) == list(range(stuck_leo + 1))
        for seg in reopened.segments:
            assert seg.check_indexes() == []
        assert reopened.fetch_offset_by_timestamp(NOW_MS + 1).offset == 2  # time index still right
    finally:
        reopened.close_handles()


def test_partial_log_write_is_overwritten_not_kept(small_log, monkeypatch):
    """A short pwrite followed by ENOSPC leaves bytes past the log end; they must never be read."""
    log = small_log
    log.append(batch([NOW_MS]), now_ms=NOW_MS)
    real_pwrite = os.pwrite
    calls = {"n": 0}

    def short_then_full(fd, data, offset):
        calls["n"] += 1
        if calls["n"] == 1:
            flat = b"".join(bytes(c) for c in data) if isinstance(data, (list, tuple)) else bytes(data)
            return real_pwrite(fd, flat[:7], offset)
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(os, "pwrite", short_then_full)
        m.setattr(os, "pwritev", short_then_full)
        with pytest.raises(KafkaStorageError):
            log.append(batch([NOW_MS + 5]), now_ms=NOW_MS)
    assert read_offsets(log) == [0]
    log.append(batch([NOW_MS + 6]), now_ms=NOW_MS)
    assert read_offsets(log) == [0, 1]
    path = log.dir
    log.close()
    reopened = PartitionLog.open(path, topic_config(index_interval_bytes=0, segment_bytes=4096), topic="t",
                                 partition=0, clean=False)
    try:
        assert read_offsets(reopened) == [0, 1]
    finally:
        reopened.close_handles()


# -- a real full filesystem -------------------------------------------------------------------------------
SCRIPT = textwrap.dedent('''
    import os, sys, time
    from sundial.storage.errors import KafkaStorageError
    from sundial.storage.log import PartitionLog
    from sundial.records import iter_records
    from support.log_helpers import NOW_MS, batch, topic_config

    root = sys.argv[1]
    cfg = topic_config(index_interval_bytes=0)
    log = PartitionLog.create(os.path.join(root, "t-0"), cfg, topic="t", partition=0, now_ms=NOW_MS)
    for i in range(511):                       # 511 offset-index entries: the first index page is full
        log.append(batch([NOW_MS + i]), now_ms=NOW_MS)
    fd = os.open(os.path.join(root, "filler"), os.O_WRONLY | os.O_CREAT)
    for chunk in (65536, 4096, 1):             # take every free byte
        try:
            while True:
                os.write(fd, b"x" * chunk)
        except OSError:
            pass
    failed = 0
    for i in range(50):                        # small batches still fit the .log's last page
        try:
            log.append(batch([NOW_MS + 1000 + i]), now_ms=NOW_MS)
        except KafkaStorageError:
            failed += 1
    leo = log.log_end_offset
    os.close(fd)
    os.remove(os.path.join(root, "filler"))    # space returns
    log.append(batch([NOW_MS + 5000]), now_ms=NOW_MS)
    log.close()
    log = PartitionLog.open(os.path.join(root, "t-0"), cfg, topic="t", partition=0, clean=True)
    offsets, off = [], 0
    while off < log.log_end_offset:
        data = b"".join(s.read() for s in log.read(off, 1 << 20).slices)
        got = [r.offset for r in iter_records(data) if r.offset >= off]
        offsets += got
        off = got[-1] + 1
    assert offsets == list(range(leo + 1)), (offsets[-3:], leo)
    assert all(seg.check_indexes() == [] for seg in log.segments)
    print("failed", failed, "leo", leo)
''')


def _can_mount_tmpfs() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs root to mount a small tmpfs")
def test_full_tmpfs_never_kills_the_process_with_sigbus():
    mnt = tempfile.mkdtemp(prefix="sundial-full-")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt], capture_output=True).returncode:
        os.rmdir(mnt)
        pytest.skip("mount -t tmpfs failed")
    try:
        # the child imports the helpers as the tests do: the directory that holds the support package
        path = os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(support.__file__)),
                                             os.environ.get("PYTHONPATH")]))
        out = subprocess.run([sys.executable, "-c", SCRIPT, mnt], capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, SUNDIAL_LOG_LEVEL="warning", PYTHONPATH=path))
        assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
        failed = int(out.stdout.split("failed")[1].split()[0])
        assert failed > 0, out.stdout  # the filesystem really was full
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True)
        os.rmdir(mnt)
