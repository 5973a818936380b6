"""What a log directory holds and how full its volume is (DescribeLogDirs' facts; Kafka
``ReplicaManager.describeLogDirs``).

Two halves, split by who may run them:

* :class:`ReplicaPlacement` – one replica's directory and what the broker knows of it in memory
  (size and offsets of an open log). The :class:`~storage.log_manager.LogManager` lists them
  (``replica_placements``) on the event loop; nothing here touches the disk for that.
* :func:`measure_log_dirs` – the disk work: ``statvfs`` of each log directory (Kafka's
  ``FileStore.getTotalSpace``/``getUsableSpace``) and, for a replica whose log is not open yet
  (logs open lazily after a clean shutdown), the size of its segment files on disk. It blocks on
  the file system, so the broker runs it on a worker thread.

Sizes follow Kafka's ``UnifiedLog.size``: the bytes of the live ``.log`` segment files of the
partition (indexes, snapshots and files being deleted or swapped in are not counted). An open
log answers from memory (its segments' logical sizes), a closed one from ``stat`` of its
``NNNNNNNNNNNNNNNNNNNN.log`` files; the two agree, since a log closed cleanly has its
preallocated active segment trimmed.

Offset lag (Kafka ``ReplicaManager.getLogEndOffsetLag``): a current replica reports
``max(high watermark - log end offset, 0)`` (0 on this node, where the high watermark is the
log end offset); a future replica (AlterReplicaLogDirs) reports how far its log end offset is
behind the current replica's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable

from . import files

#: Kafka's ``DescribeLogDirsResponse.INVALID_OFFSET_LAG``: the lag is not known.
INVALID_OFFSET_LAG = -1


@dataclass(frozen=True, slots=True)
class ReplicaPlacement:
    """One replica of a partition in one log directory, as the broker knows it in memory."""

    topic: str
    partition: int
    log_dir: str                     # absolute path of the log directory
    partition_dir: str               # absolute path of the partition's directory
    is_future: bool = False          # the copy AlterReplicaLogDirs is building
    size_bytes: int | None = None    # None: the log is not open; measure the files
    log_end_offset: int | None = None
    high_watermark: int | None = None


@dataclass(slots=True)
class ReplicaSize:
    topic: str
    partition: int
    size_bytes: int
    offset_lag: int
    is_future: bool


@dataclass(slots=True)
class LogDirReport:
    """One log directory: its replicas, its volume's total and usable bytes, or the OS error."""

    log_dir: str
    replicas: list[ReplicaSize] = field(default_factory=list)
    total_bytes: int = -1
    usable_bytes: int = -1
    error: OSError | None = None


def volume_bytes(log_dir: str) -> tuple[int, int]:
    """(total, usable) bytes of the volume holding ``log_dir``; raises OSError.

    Usable is what an unprivileged process may still write (``f_bavail``), as Java's
    ``FileStore.getUsableSpace``.
    """
    st = os.statvfs(log_dir)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def segment_bytes_on_disk(partition_dir: str) -> int:
    """Bytes of the live ``.log`` segment files in ``partition_dir`` (0 if it is gone)."""
    total = 0
    try:
        entries = os.scandir(partition_dir)
    except FileNotFoundError:
        return 0
    with entries:
        for entry in entries:
            parsed = files.parse_segment_file_name(entry.name)
            if parsed is None or parsed.suffix != files.LOG_SUFFIX or parsed.temp_suffix:
                continue
            try:
                total += entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:   # deleted by retention while we listed
                continue
    return total


def offset_lag(placement: ReplicaPlacement, current_leo: int | None) -> int:
    """Kafka's offset lag of a replica (see module doc); ``current_leo`` is the current replica's."""
    if placement.is_future:
        if current_leo is None or placement.log_end_offset is None:
            return INVALID_OFFSET_LAG
        return current_leo - placement.log_end_offset
    if placement.high_watermark is None or placement.log_end_offset is None:
        return 0   # a closed log: nothing appended since it closed, its high watermark is its end
    return max(placement.high_watermark - placement.log_end_offset, 0)


def measure_log_dirs(log_dirs: Iterable[str], placements: Iterable[ReplicaPlacement]) -> list[LogDirReport]:
    """Blocking: one report per log directory, in ``log_dirs`` order (see module doc).

    A directory whose volume cannot be read (missing, I/O error) gets its ``error`` and no
    replicas, as Kafka answers KAFKA_STORAGE_ERROR for an offline log directory.
    """
    placements = list(placements)
    current_leo = {(p.topic, p.partition): p.log_end_offset for p in placements if not p.is_future}
    reports = []
    for log_dir in log_dirs:
        report = LogDirReport(log_dir)
        reports.append(report)
        try:
            report.total_bytes, report.usable_bytes = volume_bytes(log_dir)
            for p in placements:
                if p.log_dir != log_dir:
                    continue
                size = p.size_bytes if p.size_bytes is not None else segment_bytes_on_disk(p.partition_dir)
                report.replicas.append(ReplicaSize(p.topic, p.partition, size,
                                                   offset_lag(p, current_leo.get((p.topic, p.partition))),
                                                   p.is_future))
        except OSError as exc:
            report.error = exc
            report.replicas = []
            report.total_bytes = report.usable_bytes = -1
    return reports


__all__ = ["INVALID_OFFSET_LAG", "LogDirReport", "ReplicaPlacement", "ReplicaSize", "measure_log_dirs",
           "offset_lag", "segment_bytes_on_disk", "volume_bytes"]
