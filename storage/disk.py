"""The disk seam: a hook storage calls before each blocking file operation the broker
hands to its scheduler threads, so a test can make the disk slow.

Storage reaches the file system directly (``os.*``); the operations that are known to
stall on a slow or busy disk and that the broker runs off the event loop call
:func:`current` ``().pause(op)`` first:

``unlink``
    removing a ``.deleted`` segment file or a ``-delete`` directory (housekeeping)
``rename``
    renaming a segment's files to ``.deleted``
``open``
    opening a partition (loading and, after a crash, recovering its segments)
``read``
    warming the page cache behind a Fetch answer before ``sendfile``
``checkpoint``
    writing a checkpoint file
``metadata``
    writing the topic list (``sundial-topics.json``) when a topic is created or deleted
``move``
    each step of an AlterReplicaLogDirs move: creating the future log, each chunk copied into
    it, the swap (:mod:`storage.log_move`)
``write``
    writing the bytes of an append (Produce, transaction markers) on an append-writer thread
    (:mod:`broker.appender`; with it slow the broker writes on its Python threads, since the
    native ones cannot call back into this hook)

The default :class:`Disk` does nothing. :class:`SlowDisk` sleeps, counts, and logs
``slow_disk_wait_started``/``slow_disk_wait_ended`` around each sleep; the
daemon installs one when the **test-only** environment variable
``SUNDIAL_TEST_SLOW_DISK`` is set, as ``<ms>`` (every operation above) or groups of
``<op>,<op>:<ms>`` separated by ``;`` (those operations only), e.g.
``open,read:500;unlink:20``. A daemon running with it logs ``slow_disk_injected`` at
start. Nothing else reads it.
"""

from __future__ import annotations

import os
import threading
import time

import structlog

logger = structlog.get_logger(__name__)

OPERATIONS = ("unlink", "rename", "open", "read", "checkpoint", "metadata", "move", "write")

#: Environment variable that installs a :class:`SlowDisk` (tests only).
SLOW_DISK_ENV = "SUNDIAL_TEST_SLOW_DISK"


class Disk:
    """The real disk: no delay."""

    def pause(self, op: str) -> None:
        """Called on the thread about to do ``op`` (one of :data:`OPERATIONS`)."""

    def is_slow(self, op: str) -> bool:
        """Whether ``op`` is made slow (a probe that cannot see the delay treats the data as cold)."""
        return False


class SlowDisk(Disk):
    """Sleeps before each operation of ``delays_ms`` (operation → milliseconds); counts
    started and finished pauses and the threads they ran on."""

    def __init__(self, delays_ms: dict[str, int]) -> None:
        unknown = set(delays_ms) - set(OPERATIONS)
        if unknown:
            raise ValueError(f"unknown disk operations: {sorted(unknown)}")
        if any(ms < 0 for ms in delays_ms.values()):
            raise ValueError("a delay must not be negative")
        self.delays_ms = dict(delays_ms)
        self._lock = threading.Lock()
        self.started: dict[str, int] = dict.fromkeys(OPERATIONS, 0)
        self.finished: dict[str, int] = dict.fromkeys(OPERATIONS, 0)
        self.threads: set[str] = set()

    def is_slow(self, op: str) -> bool:
        return op in self.delays_ms

    def pause(self, op: str) -> None:
        delay_ms = self.delays_ms.get(op)
        if delay_ms is None:
            return
        thread = threading.current_thread().name
        with self._lock:
            self.started[op] += 1
            self.threads.add(thread)
        # logged (tests read the daemon's log): what is in progress when a request is answered
        logger.info("slow_disk_wait_started", op=op, thread=thread, delay_ms=delay_ms)
        time.sleep(delay_ms / 1000)
        with self._lock:
            self.finished[op] += 1
        logger.info("slow_disk_wait_ended", op=op, thread=thread)


_current: Disk = Disk()


def current() -> Disk:
    return _current


def install(disk: Disk) -> Disk:
    """Make ``disk`` the one storage pauses on; returns the previous one."""
    global _current
    previous, _current = _current, disk
    return previous


def parse_slow_disk(text: str) -> SlowDisk:
    """``"500"`` or ``"open,read:500;unlink:20"`` → :class:`SlowDisk` (ValueError when malformed)."""
    delays: dict[str, int] = {}
    for group in text.split(";"):
        if not group.strip():
            continue
        ops_text, sep, ms_text = group.strip().rpartition(":")
        delay_ms = int(ms_text)
        ops = [o.strip() for o in ops_text.split(",") if o.strip()] if sep else list(OPERATIONS)
        for op in ops:
            delays[op] = delay_ms
    if not delays:
        raise ValueError("no delay given")
    return SlowDisk(delays)


def install_from_environment(environ=os.environ) -> Disk:
    """Install a :class:`SlowDisk` when :data:`SLOW_DISK_ENV` is set; returns the disk in force."""
    text = environ.get(SLOW_DISK_ENV)
    if text:
        disk = parse_slow_disk(text)
        install(disk)
        logger.warning("slow_disk_injected", delays_ms=disk.delays_ms,
                       reason=f"{SLOW_DISK_ENV} is set (tests only)")
    return _current


__all__ = ["Disk", "SlowDisk", "OPERATIONS", "SLOW_DISK_ENV", "current", "install", "parse_slow_disk",
           "install_from_environment"]
