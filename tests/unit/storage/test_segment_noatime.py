"""A segment's ``.log`` is read without updating its atime (``O_NOATIME``): under ``relatime`` a read
after a write would otherwise change the inode, which waits for the journal on the event loop.
Ground truth: the atime the kernel reports after reads, with a plain descriptor as the control."""

import os

import pytest
from support.log_helpers import NOW_MS, batch

from sundial.storage.segment import LogSegment

pytestmark = pytest.mark.skipif(not hasattr(os, "O_NOATIME"), reason="O_NOATIME is Linux's")

OLD_S = 1_000_000_000   # 2001: older than the mtime, so relatime updates the atime on the next read


def _age_atime(path: str) -> None:
    os.utime(path, ns=(OLD_S * 10**9, os.stat(path).st_mtime_ns))


def _read_all(fd: int) -> None:
    os.pread(fd, 4096, 0)
    sink = os.open(os.devnull, os.O_WRONLY)
    try:
        os.sendfile(sink, fd, 0, 64)
    finally:
        os.close(sink)


def test_reads_of_a_segment_leave_its_atime_alone(tmp_path):
    seg = LogSegment.create(str(tmp_path), 0)
    try:
        data = batch([NOW_MS])
        seg.append(0, NOW_MS, 0, data)
        # control: a plain descriptor's read does update it on this file system (else nothing to show)
        _age_atime(seg.log_path)
        plain = os.open(seg.log_path, os.O_RDONLY)
        try:
            _read_all(plain)
        finally:
            os.close(plain)
        if os.stat(seg.log_path).st_atime_ns == OLD_S * 10**9:
            pytest.skip("this file system does not update atimes (noatime)")
        _age_atime(seg.log_path)
        _read_all(seg.fd)
        assert os.stat(seg.log_path).st_atime_ns == OLD_S * 10**9
        reopened = LogSegment.open(str(tmp_path), 0)   # the descriptor opened lazily: the same
        try:
            _read_all(reopened.fd)
            assert os.stat(seg.log_path).st_atime_ns == OLD_S * 10**9
        finally:
            reopened.close()
    finally:
        seg.close()
