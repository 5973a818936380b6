"""File and directory names of a Kafka log directory, atomic small-file writes, and ``FileSlice``.

Layout (Kafka's, ``LocalLog.scala`` / ``LogFileUtils.java``)::

    <log.dir>/
        <topic>-<partition>/                    partition directory; topic = text before the LAST '-'
            00000000000000000000.log            records of the segment whose base offset is 0
            00000000000000000000.index          offset index (8-byte entries)
            00000000000000000000.timeindex      time index (12-byte entries)
            00000000000000000000.txnindex       aborted transactions (34-byte entries, created on first abort)
            00000000000000001234.snapshot       producer state up to offset 1234 (exclusive)
            partition.metadata                  "version: 0\\ntopic_id: <base64url uuid>\\n"
        <topic>-<partition>.<32 hex>-delete/    a partition being deleted (removed after a delay)
        recovery-point-offset-checkpoint
        log-start-offset-checkpoint
        .kafka_cleanshutdown

A segment file name is the base offset written in decimal, left-padded with zeros to
20 digits. The temporary suffixes ``.deleted`` (waiting for physical removal),
``.cleaned`` and ``.swap`` are appended after the normal suffix
(``00000000000000000000.log.deleted``).

``pwrite_all``/``pwritev_all`` write a whole append at a position. ``FileSlice`` is what
a read returns: a range of a ``.log`` file. Its ``fd`` belongs to
storage and stays valid only until the next storage call on the same log (a later
retention pass may close it); a caller that needs the bytes later either reads them at
once (:meth:`FileSlice.read`) or takes its own descriptor (:meth:`FileSlice.dup_fd`).
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass

from sundial.records.extensions import extensions_enabled

_fsync_worker = None
if extensions_enabled():
    try:
        from . import _fsync_worker  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - depends on the build (Linux only)
        _fsync_worker = None

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"

PARTITION_METADATA_FILE = "partition.metadata"
RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

#: Longest file name most file systems accept; Kafka caps "-delete" dir names to it.
MAX_FILE_NAME_BYTES = 255

_DELETE_DIR_RE = re.compile(r"^(.+)-(\d+)\.([0-9a-f]{32})-(delete|future|stray)$")
_PARTITION_DIR_RE = re.compile(r"^(.+)-(\d+)$")
_SEGMENT_FILE_RE = re.compile(r"^(\d{20})(\.[a-z]+)((?:\.deleted|\.cleaned|\.swap)?)$")


def filename_prefix(offset: int) -> str:
    """The 20-digit zero-padded decimal prefix of a segment's files."""
    return f"{offset:020d}"


def segment_file(dir_path: str, base_offset: int, suffix: str) -> str:
    return os.path.join(dir_path, filename_prefix(base_offset) + suffix)


def log_file(dir_path: str, base_offset: int) -> str:
    return segment_file(dir_path, base_offset, LOG_SUFFIX)


def index_file(dir_path: str, base_offset: int) -> str:
    return segment_file(dir_path, base_offset, INDEX_SUFFIX)


def txn_index_file(dir_path: str, base_offset: int) -> str:
    return segment_file(dir_path, base_offset, TXN_INDEX_SUFFIX)


def time_index_file(dir_path: str, base_offset: int) -> str:
    return segment_file(dir_path, base_offset, TIME_INDEX_SUFFIX)


def snapshot_file(dir_path: str, offset: int) -> str:
    return segment_file(dir_path, offset, SNAPSHOT_SUFFIX)


@dataclass(frozen=True, slots=True)
class SegmentFileName:
    """A parsed segment-related file name: ``<base><suffix><temp suffix>``."""

    base_offset: int
    suffix: str          # ".log", ".index", ".timeindex", ".snapshot", ...
    temp_suffix: str     # "", ".deleted", ".cleaned" or ".swap"


def parse_segment_file_name(name: str) -> SegmentFileName | None:
    """Parse ``00000000000000000042.log.deleted`` style names; None for anything else."""
    m = _SEGMENT_FILE_RE.match(name)
    if m is None:
        return None
    return SegmentFileName(int(m.group(1)), m.group(2), m.group(3))


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """``orders-3`` → ("orders", 3); the topic is everything before the last '-'.

    Returns None for names that are not partition directories (including
    ``-delete``/``-future``/``-stray`` directories and names with a bad partition).
    """
    if _DELETE_DIR_RE.match(name):
        return None
    m = _PARTITION_DIR_RE.match(name)
    if m is None:
        return None
    topic, part = m.group(1), m.group(2)
    if not topic or (len(part) > 1 and part.startswith("0")):
        return None
    return topic, int(part)


def delete_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<p>.<32 hex uuid>-delete``, shortened like Kafka's to fit 255 bytes."""
    suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    max_topic = MAX_FILE_NAME_BYTES - len(suffix.encode())
    return topic[:max_topic] + suffix


def is_delete_dir(name: str) -> bool:
    m = _DELETE_DIR_RE.match(name)
    return m is not None and m.group(4) == "delete"


#: Linux's O_NOATIME (0 elsewhere): reads through the descriptor never update the file's atime.
_O_NOATIME = getattr(os, "O_NOATIME", 0)


def open_segment_log(path: str, flags: int, mode: int = 0o644) -> int:
    """``os.open`` for a segment's ``.log``, with ``O_NOATIME`` when the file system lets us.

    Under ``relatime`` each read of a file written since its last read (a Fetch at the tail,
    its page-cache probe, its ``sendfile``) would update the atime: an inode change that
    waits for the journal, which the appends' fsyncs keep busy, on the event loop. Nothing
    reads a segment's atime. ``O_NOATIME`` needs the caller to own the file; without it
    (EPERM) the file is opened as usual."""
    if _O_NOATIME:
        try:
            return os.open(path, flags | _O_NOATIME, mode)
        except PermissionError:
            pass
    return os.open(path, flags, mode)


def fsync_dir(dir_path: str) -> None:
    """fsync a directory so renames and creations inside it are durable."""
    fd = os.open(dir_path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def native_fsync_built() -> bool:
    """Whether the native fsync worker (``storage/_fsync_worker.c``, Linux) is built and
    extensions are enabled (``SUNDIAL_NO_EXTENSIONS`` unset)."""
    return _fsync_worker is not None


def native_fsync_worker(threads: int):
    """Native fsync threads: up to ``threads`` threads, started on demand, that fdatasync and
    close the descriptors handed over by ``submit(token, fds)`` without taking the GIL and
    signal the eventfd ``fileno()``; ``completed()`` returns the ``(token, errno)`` pairs of
    the jobs finished since (errno 0: synced), ``close()`` stops the threads once every
    queued job has run. ``RuntimeError`` when :func:`native_fsync_built` is False."""
    if _fsync_worker is None:
        raise RuntimeError("the native fsync worker is not built (or SUNDIAL_NO_EXTENSIONS=1)")
    return _fsync_worker.FsyncWorker(threads)


def write_file_atomically(path: str, data: bytes, *, sync: bool = True, mode: int = 0o644) -> None:
    """Write ``path`` through ``<path>.tmp``: write, fsync, rename, fsync the directory.

    ``sync=False`` skips both fsyncs (the rename still makes the switch atomic); for
    files that are only a cache, such as producer snapshots taken at a roll. ``mode``
    applies to a newly created file (0o600 for credentials and ACLs).
    """
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".")


def pwrite_all(fd: int, data, position: int) -> None:
    """Write all of ``data`` at ``position`` (``pwrite`` until done); ``OSError`` escapes."""
    view = data if isinstance(data, memoryview) else memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        position += written
        view = view[written:]


def pwritev_all(fd: int, chunks, position: int, total: int) -> None:
    """Write ``chunks`` (``total`` bytes) one after the other from ``position`` with one
    ``pwritev``, finishing chunk by chunk if it comes up short; ``OSError`` escapes."""
    if len(chunks) == 1:
        pwrite_all(fd, chunks[0], position)
        return
    written = os.pwritev(fd, chunks, position)
    if written < total:  # rare: finish chunk by chunk
        done = 0
        for chunk in chunks:
            length = len(chunk)
            if done + length <= written:
                done += length
                continue
            skip = max(0, written - done)
            pwrite_all(fd, memoryview(chunk)[skip:], position + done + skip)
            done += length


def read_file_if_exists(path: str) -> bytes | None:
    """The whole content of ``path``, or None when it does not exist; other ``OSError`` escapes."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def remove_quietly(path: str) -> bool:
    """Remove a file if it exists; True if something was removed."""
    try:
        os.remove(path)
        return True
    except FileNotFoundError:
        return False


@dataclass(slots=True)
class FileSlice:
    """``size`` bytes of an open ``.log`` file starting at ``position``.

    ``fd`` is owned by storage and valid until the next storage call on the log it
    came from. :meth:`read` copies the bytes now; :meth:`dup_fd` returns a descriptor
    the caller owns (and must close), which keeps the bytes reachable even if the
    segment file is renamed or unlinked afterwards.
    """

    fd: int
    position: int
    size: int

    def read(self) -> bytes:
        """The slice's bytes (``os.pread``); short only if the file shrank underneath."""
        if self.size <= 0:
            return b""
        data = os.pread(self.fd, self.size, self.position)
        if len(data) == self.size:
            return data
        parts = [data]
        got = len(data)
        while got < self.size:
            more = os.pread(self.fd, self.size - got, self.position + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def dup_fd(self) -> int:
        """A duplicate of ``fd`` owned by the caller."""
        return os.dup(self.fd)

    def __len__(self) -> int:
        return self.size


__all__ = [
    "txn_index_file", "LOG_SUFFIX", "INDEX_SUFFIX", "TIME_INDEX_SUFFIX", "TXN_INDEX_SUFFIX", "SNAPSHOT_SUFFIX",
    "DELETED_SUFFIX", "CLEANED_SUFFIX", "SWAP_SUFFIX", "DELETE_DIR_SUFFIX", "PARTITION_METADATA_FILE",
    "RECOVERY_POINT_CHECKPOINT_FILE", "LOG_START_OFFSET_CHECKPOINT_FILE", "CLEAN_SHUTDOWN_FILE",
    "filename_prefix", "segment_file", "log_file", "index_file", "time_index_file", "snapshot_file",
    "SegmentFileName", "parse_segment_file_name", "partition_dir_name", "parse_partition_dir_name",
    "delete_dir_name", "is_delete_dir", "open_segment_log", "fsync_dir", "write_file_atomically", "pwrite_all",
    "pwritev_all",
    "remove_quietly", "FileSlice",
]
