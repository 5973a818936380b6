"""Is a Fetch answer's file range in the page cache? And reading it in when it is not.

``sendfile`` keeps a Fetch zero-copy, but when the pages it sends are not in the page
cache the kernel reads them from the disk first, and the event loop thread that called
it waits (70–270 ms measured on a busy shared disk). So before a file slice is sent,
:func:`cached` asks the kernel, without waiting on the disk, whether every page of it
is resident; when one is not, the broker's scheduler reads the range (:func:`warm`,
which is what the kernel would have done inside ``sendfile``) and the loop sends it
afterwards, still with ``sendfile``.

How to ask, measured on Linux 6.18 / ext4 (one 2-core VM, cached file, µs per probe):

==================  ========  =======
probe               16 KiB    1 MiB
==================  ========  =======
preadv2 RWF_NOWAIT  6         366
mmap + mincore      35        116
==================  ========  =======

``preadv2(RWF_NOWAIT)`` copies the bytes it finds (cheap for small ranges, and it
fails with EAGAIN or a short read as soon as a page is missing); ``mincore`` on a
throw-away mapping copies nothing but costs three system calls and a vector. Ranges up
to :data:`RWF_PROBE_MAX_BYTES` use the first, larger ones the second. Neither waits on
the disk: a page fault never happens (the mapping is not touched) and RWF_NOWAIT
refuses to block. When neither probe is available (no RWF_NOWAIT and no ``mincore``),
:func:`cached` answers True and the loop sends as before.

Linux 6.5 and later answer the question in one system call, ``cachestat(2)``: it counts
the resident pages of a file range and reads no data (µs per probe, same host, Linux
6.18, cached file: 1.7 for 1 MiB, against 90 for ``mmap`` + ``mincore`` and 11 for a
16 KiB ``preadv2``). It is tried first; when the kernel does not have it (``ENOSYS``) or
a seccomp filter refuses it (``EPERM``, as container runtimes may), it is not tried again
and the probes above answer.

Which way keeps the loop from waiting (``benchmarks/sendfile_cold.py``: 4 MiB answers
from evicted pages, the same VM, three runs, median per run; the time the calling
thread spends):

=======================================  ===============
plain ``sendfile``                        11–16 ms
``posix_fadvise(WILLNEED)``, ``sendfile`` 4.6–6 ms
probe, read on a thread, ``sendfile``     1.6–4 ms
=======================================  ===============

WILLNEED only starts the read-ahead (and itself blocks while it queues it), so the
``sendfile`` after it still waits for part of the reads; with the probe the loop only
probes and sends cached pages, whatever the disk's latency (this VM's disk is fast: on a
slow shared disk the first two rows grow with it, the last does not). ``sendfile`` from
a thread was not chosen: the socket's writes would then have to be ordered with the
transport's across threads.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os

from sundial.storage import disk

#: Ranges up to this size are probed with preadv2(RWF_NOWAIT), larger ones with mincore.
RWF_PROBE_MAX_BYTES = 64 * 1024
#: Chunk in which :func:`warm` reads a range (per call, on a scheduler thread).
WARM_CHUNK_BYTES = 1024 * 1024
#: Read in from a Fetch's first batch header that is not resident: the walk from the offset
#: index's entry to the batch it looks for, and usually the start of the answer itself.
HEADER_WARM_BYTES = 256 * 1024

_PAGE = mmap.PAGESIZE
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", None)
_probe_buffer = bytearray(RWF_PROBE_MAX_BYTES)   # loop thread only


def _load_libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
        libc.syscall.restype = ctypes.c_long
        return libc
    except (OSError, AttributeError):
        return None


_libc = _load_libc()
_MAP_FAILED = ctypes.c_void_p(-1).value


# cachestat(2), Linux >= 6.5; new system calls have one number on every architecture.
_CACHESTAT_NR = 451


class _CachestatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Cachestat(ctypes.Structure):
    _fields_ = [("nr_cache", ctypes.c_uint64), ("nr_dirty", ctypes.c_uint64), ("nr_writeback", ctypes.c_uint64),
                ("nr_evicted", ctypes.c_uint64), ("nr_recently_evicted", ctypes.c_uint64)]


class _CachestatProbe:
    """``cachestat(2)`` through libc's ``syscall``; its structures are reused (loop thread only).
    :attr:`available` turns False for good after the kernel or a seccomp filter refuses it."""

    def __init__(self, libc) -> None:
        self.available = libc is not None and hasattr(libc, "syscall") and os.uname().sysname == "Linux"
        if not self.available:
            return
        self._syscall = libc.syscall
        self._range = _CachestatRange()
        self._stat = _Cachestat()
        self._range_ref = ctypes.byref(self._range)
        self._stat_ref = ctypes.byref(self._stat)

    def cached(self, fd: int, position: int, size: int) -> bool | None:
        self._range.off = position
        self._range.len = size
        if self._syscall(_CACHESTAT_NR, fd, self._range_ref, self._stat_ref, 0) != 0:
            if ctypes.get_errno() in (errno.ENOSYS, errno.EPERM):
                self.available = False
            return None
        pages = (position + size + _PAGE - 1) // _PAGE - position // _PAGE
        return self._stat.nr_cache >= pages


def _cached_rwf(fd: int, position: int, size: int) -> bool | None:
    try:
        got = os.preadv(fd, [memoryview(_probe_buffer)[:size]], position, _RWF_NOWAIT)
    except BlockingIOError:
        return False
    except OSError:  # EOPNOTSUPP/EINVAL: this file system cannot tell
        return None
    return got == size


def _cached_mincore(fd: int, position: int, size: int) -> bool | None:
    start = position - position % _PAGE
    length = size + (position - start)
    addr = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
    if addr is None or addr == _MAP_FAILED:
        return None
    try:
        vec = ctypes.create_string_buffer((length + _PAGE - 1) // _PAGE)
        if _libc.mincore(addr, length, vec) != 0:
            return None
        return vec.raw.count(0) == 0   # bit 0 of each byte: the page is resident
    finally:
        _libc.munmap(addr, length)


_cachestat = _CachestatProbe(_libc)


def cached(fd: int, position: int, size: int) -> bool:
    """True when every page of ``size`` bytes of ``fd`` from ``position`` is in the page cache
    (or this system cannot tell); never waits on the disk."""
    if size <= 0:
        return True
    if disk.current().is_slow("read"):   # an injected slow disk (tests): every range counts as cold
        return False
    answer = _cachestat.cached(fd, position, size) if _cachestat.available else None
    if answer is None and size <= RWF_PROBE_MAX_BYTES and _RWF_NOWAIT is not None:
        answer = _cached_rwf(fd, position, size)
    if answer is None and _libc is not None:
        answer = _cached_mincore(fd, position, size)
    return True if answer is None else answer


def own(ranges: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """``(fd, position, size)`` ranges with duplicated descriptors the caller owns (for :func:`warm`,
    which closes them): the slices' own descriptors are storage's and may close meanwhile."""
    return [(os.dup(fd), position, size) for fd, position, size in ranges]


def warm(ranges: list[tuple[int, int, int]]) -> None:
    """Scheduler thread: read each range into the page cache, then close its descriptor."""
    slow = disk.current()
    for fd, position, size in ranges:
        try:
            slow.pause("read")
            end = position + size
            while position < end:
                n = min(WARM_CHUNK_BYTES, end - position)
                got = len(os.pread(fd, n, position))
                if got <= 0:
                    break
                position += got
        except OSError:
            pass   # the loop's own read reports it
        finally:
            os.close(fd)


__all__ = ["cached", "own", "warm", "RWF_PROBE_MAX_BYTES", "HEADER_WARM_BYTES"]
