"""Moving a partition between log directories (AlterReplicaLogDirs; Kafka's future replica).

The move, as Kafka's ``ReplicaManager.alterReplicaLogDirs`` / ``ReplicaAlterLogDirsThread`` /
``LogManager.replaceCurrentWithFutureLog`` make it, for one node:

1. **Future.** A new log, the *future replica*, is created in the target directory as
   ``<topic>-<p>.<32 hex>-future`` (:func:`future_dir_name`), starting at the current log's log
   start offset (:func:`create_future_log`).
2. **Copy.** Chunks of the current log are read (the owner thread picks the byte ranges and
   duplicates their descriptors; :func:`copy_slices` reads them on a worker thread) and appended
   to the future log with their offsets (``PartitionLog.append_as_follower``; a control batch
   goes alone), while the current log keeps serving produce and fetch.
3. **Swap** (:func:`commit_move`), once the future is close behind: appends to the partition
   stop for the swap; the rest is copied, the future log gets the current log start offset, is
   closed and fsynced; then the current directory is renamed to ``-delete`` and its parent
   fsynced, then the future directory is renamed to ``<topic>-<p>`` and its parent fsynced;
   the log is opened again from there and appends resume.

Crash safety rests on one invariant: **the current directory is renamed away only after the
future is complete and durable**, and the future is renamed to the live name only after that
rename is durable. So after a crash at any point, the directories of a partition are one of:

* a live ``<topic>-<p>`` (maybe with ``-future`` copies): the live one is the partition; the
  futures are discarded (the move did not complete; the operator asks again);
* no live directory and exactly one ``-future``: the swap was cut between its two renames;
  the future is complete, so it is renamed to the live name (the move completes at start);
* ``-delete`` directories: removed, as always.

:func:`resolve_leftovers` is that decision (pure, tested over every crash point);
:class:`storage.log_manager.LogManager` applies it at start-up. Two live copies never exist,
and no live copy is ever dropped for a future.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import structlog

from sundial.config.topic import TopicConfig
from sundial.records.framing import iter_batches

from . import disk, files
from .errors import KafkaStorageError, OffsetOutOfRangeError
from .index import MappedIndexes
from .log import PartitionLog
from .log_search import BatchIndexCache
from .topics import InvalidTopicError, write_partition_metadata

logger = structlog.get_logger(__name__)

TopicPartition = tuple[str, int]

_FUTURE_DIR_RE = re.compile(r"^(.+)-(\d+)\.([0-9a-f]{32})" + re.escape(files.FUTURE_DIR_SUFFIX) + "$")


class LogDirNotFoundError(Exception):
    """The directory asked for is not one of ``log.dirs`` (Kafka ``LogDirNotFoundException``)."""


def future_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<p>.<32 hex>-future``; InvalidTopicError when longer than a file name may be
    (Kafka refuses such a move with INVALID_TOPIC_EXCEPTION: the name must keep the topic)."""
    name = f"{topic}-{partition}.{uuid.uuid4().hex}{files.FUTURE_DIR_SUFFIX}"
    if len(name.encode()) > files.MAX_FILE_NAME_BYTES:
        raise InvalidTopicError(f"the topic name is too long to move '{topic}' between log directories")
    return name


def parse_future_dir_name(name: str) -> TopicPartition | None:
    m = _FUTURE_DIR_RE.match(name)
    if m is None or (len(m.group(2)) > 1 and m.group(2).startswith("0")):
        return None
    return m.group(1), int(m.group(2))


@dataclass(slots=True)
class LogMove:
    """One move under way, as the owner thread knows it (the future log itself is owned by the
    thread that copies; these numbers are what the last copy step reported)."""

    topic: str
    partition: int
    source_dir: str
    target_dir: str
    future_path: str
    future_log_end_offset: int | None = None
    future_size_bytes: int = 0
    cancelled: bool = False
    future_log: PartitionLog | None = field(default=None, repr=False)   # touched by the copying thread only

    @property
    def tp(self) -> TopicPartition:
        return self.topic, self.partition


# -- start-up -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Leftovers:
    """What start-up does with ``-future`` directories (:func:`resolve_leftovers`)."""

    promote: dict[TopicPartition, tuple[str, str]]   # partition -> (log dir, future dir name)
    discard: list[str]                                # paths of futures to remove


def resolve_leftovers(live: dict[TopicPartition, str],
                      futures: dict[TopicPartition, list[tuple[str, str]]]) -> Leftovers:
    """Decide the fate of each future: discarded when the partition has a live directory,
    promoted when it has none and exactly one future; several futures and no live directory
    cannot come from a move (one future at a time) and stop the start (KafkaStorageError)."""
    promote: dict[TopicPartition, tuple[str, str]] = {}
    discard: list[str] = []
    for tp, found in sorted(futures.items()):
        if tp in live:
            discard.extend(os.path.join(d, name) for d, name in found)
        elif len(found) == 1:
            promote[tp] = found[0]
        else:
            raise KafkaStorageError(
                f"several future directories and no current one for {tp[0]}-{tp[1]}: "
                + ", ".join(os.path.join(d, n) for d, n in found))
    return Leftovers(promote, discard)


def promote_future(log_dir: str, name: str, tp: TopicPartition) -> str:
    """Rename a future left by a swap cut short to the live name (fsynced); its new path."""
    target = os.path.join(log_dir, files.partition_dir_name(*tp))
    try:
        os.rename(os.path.join(log_dir, name), target)
        files.fsync_dir(log_dir)
    except OSError as exc:
        raise KafkaStorageError.from_os_error(exc, f"cannot complete the move of {tp[0]}-{tp[1]}") from exc
    return target


# -- the file work (any thread) ----------------------------------------------------------------------


def create_future_log(path: str, topic_id: bytes, config: TopicConfig, *, topic: str, partition: int,
                      start_offset: int, producer_id_expiration_ms: int, now_ms: int,
                      mapped_indexes: MappedIndexes | None = None) -> PartitionLog:
    """The empty future log in ``path`` (``partition.metadata`` included)."""
    disk.current().pause("move")
    try:
        os.makedirs(path, exist_ok=False)
        write_partition_metadata(path, topic_id, sync=False)
        return PartitionLog.create(path, config, topic=topic, partition=partition, start_offset=start_offset,
                                   producer_id_expiration_ms=producer_id_expiration_ms, now_ms=now_ms,
                                   mapped_indexes=mapped_indexes)
    except OSError as exc:
        raise KafkaStorageError.from_os_error(exc, f"cannot create the future log {path}") from exc


def _read_all(fd: int, position: int, size: int) -> bytes:
    parts = []
    while size > 0:
        data = os.pread(fd, size, position)
        if not data:
            break
        parts.append(data)
        position += len(data)
        size -= len(data)
    return b"".join(parts)


def copy_slices(future: PartitionLog, slices: list[tuple[int, int, int]], now_ms: int) -> None:
    """Append the batches of ``slices`` (``(fd, position, size)``, descriptors owned by this call
    and closed by it) to ``future``; a trailing partial batch is left for the next step. Batches
    below the future's end offset (read again after a retry) are skipped."""
    try:
        for fd, position, size in slices:
            disk.current().pause("move")
            data = _read_all(fd, position, size)
            run_start = run_end = None
            for view in iter_batches(data):
                if view.last_offset < future.log_end_offset:
                    continue
                if view.base_offset < future.log_end_offset and run_start is None and future.size_bytes == 0:
                    # The log start offset falls inside this batch (DeleteRecords): the empty future
                    # starts at the batch, as Kafka's does; the swap gives it the log start offset.
                    future.truncate_fully_and_start_at(view.base_offset)
                if view.is_control:
                    if run_start is not None:
                        future.append_as_follower(memoryview(data)[run_start:run_end], now_ms=now_ms)
                        run_start = None
                    future.append_as_follower(memoryview(data)[view.position:view.end], now_ms=now_ms)
                    continue
                if run_start is None:
                    run_start = view.position
                run_end = view.end
            if run_start is not None:
                future.append_as_follower(memoryview(data)[run_start:run_end], now_ms=now_ms)
    except OSError as exc:
        raise KafkaStorageError.from_os_error(exc, f"cannot copy into {future.dir}") from exc
    finally:
        for fd, _p, _s in slices:
            try:
                os.close(fd)
            except OSError:
                pass


def slices_from(log: PartitionLog, from_offset: int, max_bytes: int | None) -> list[tuple[int, int, int]]:
    """Owner thread of ``log``: ``(fd, position, size)`` of its bytes from ``from_offset`` on, about
    ``max_bytes`` (None: up to the log end offset), each ``fd`` a duplicate the caller owns (and
    :func:`copy_slices` closes). In-memory look-ups only. OffsetOutOfRangeError below the log start."""
    if from_offset < log.log_start_offset:
        raise OffsetOutOfRangeError(f"offset {from_offset} is below the log start offset {log.log_start_offset}")
    out: list[tuple[int, int, int]] = []
    total = 0
    try:
        segments = log.segments
        for i, seg in enumerate(segments):
            upper = segments[i + 1].base_offset if i + 1 < len(segments) else log.log_end_offset
            if upper <= from_offset or seg.size_bytes == 0:
                continue
            if max_bytes is not None and total >= max_bytes:
                break
            limit = seg.size_bytes if max_bytes is None else min(seg.size_bytes, max_bytes - total)
            info = log.read(max(from_offset, seg.base_offset), limit, min_one_message=True)
            for piece in info.slices:
                out.append((piece.dup_fd(), piece.position, piece.size))
                total += piece.size
    except BaseException:
        close_fds(out)
        raise
    return out


def close_fds(slices: list[tuple[int, int, int]]) -> None:
    for fd, _p, _s in slices:
        try:
            os.close(fd)
        except OSError:
            pass


def discard_future(future: PartitionLog | None, path: str) -> None:
    """Drop a move's future log and its directory (cancelled, failed, or found at start)."""
    if future is not None and not future.closed:
        future.close_handles()
    disk.current().pause("unlink")
    shutil.rmtree(path, ignore_errors=True)


def future_job(move: LogMove, log: PartitionLog, topic_id: bytes, config: TopicConfig,
               producer_id_expiration_ms: int, now_ms: int,
               mapped_indexes: MappedIndexes | None = None) -> Callable[[], None]:
    """Owner thread of ``log`` (the current log): the job creating the future log at its log start
    offset and recording it in ``move``."""
    start = log.log_start_offset

    def job() -> None:
        move.future_log = create_future_log(move.future_path, topic_id, config, topic=move.topic,
                                            partition=move.partition, start_offset=start,
                                            producer_id_expiration_ms=producer_id_expiration_ms, now_ms=now_ms,
                                            mapped_indexes=mapped_indexes)
        move.future_log_end_offset, move.future_size_bytes = start, 0

    return job


def copy_job(move: LogMove, log: PartitionLog, max_bytes: int, now_ms: int) -> Callable[[], int]:
    """Owner thread of ``log``: the job copying its next ``max_bytes`` into the future log; the job
    returns the bytes read (below ``max_bytes``: the future reached the current end). When the
    current log start offset passed what was copied (retention, DeleteRecords), the job starts the
    future again there and returns ``max_bytes`` (not caught up)."""
    future = move.future_log
    if future is None:
        raise KafkaStorageError(f"the future log of {move.topic}-{move.partition} is not open")
    try:
        slices = slices_from(log, move.future_log_end_offset or 0, max_bytes)
    except OffsetOutOfRangeError:
        start = log.log_start_offset

        def restart() -> int:
            future.truncate_fully_and_start_at(start)
            move.future_log_end_offset, move.future_size_bytes = start, future.size_bytes
            return max_bytes

        return restart

    def job() -> int:
        copy_slices(future, slices, now_ms)
        future.flush()   # step by step, so that the swap only has the tail to fsync
        move.future_log_end_offset, move.future_size_bytes = future.log_end_offset, future.size_bytes
        return sum(size for _fd, _pos, size in slices)

    return job


def swap_job(move: LogMove, log: PartitionLog, topic_id: bytes, config: TopicConfig, now_ms: int,
             producer_id_expiration_ms: int, batch_indexes: BatchIndexCache | None = None,
             mapped_indexes: MappedIndexes | None = None) -> tuple[Callable[[], tuple], Callable[[Any], None]]:
    """Owner thread of ``log``, which takes no more appends from now on: ``(job, after)``. ``job``
    (any thread) is :func:`commit_move` with the rest of ``log`` and an fsync of it first; it
    returns ``(log now serving, topic id, its log dir, CommitOutcome)``. ``after(future of job)``
    (owner thread, once done) marks ``log`` flushed, so producers waiting for its fsync are
    answered, and closes it."""
    tail = slices_from(log, move.future_log_end_offset or 0, None)
    try:
        flush_job = log.prepare_flush()
    except BaseException:
        close_fds(tail)
        raise
    lso, leo = log.log_start_offset, log.log_end_offset

    def job() -> tuple:
        outcome = commit_move(move, tail=tail, log_start_offset=lso, current_log_end_offset=leo, config=config,
                              now_ms=now_ms, producer_id_expiration_ms=producer_id_expiration_ms,
                              before_swap=flush_job.run if flush_job is not None else None,
                              batch_indexes=batch_indexes, mapped_indexes=mapped_indexes)
        return outcome.log, topic_id, outcome.log_dir, outcome

    def after(fut) -> None:
        try:
            outcome = fut.result()[3]
        except BaseException:  # noqa: BLE001 - reported by finish_open
            outcome = None
        if outcome is not None and outcome.error is None and flush_job is not None:
            log.mark_flushed(flush_job)
        log.close_handles()

    return job, after


@dataclass(slots=True)
class CommitOutcome:
    """What :func:`commit_move` left: the log now serving and where; ``deleted`` is the renamed
    former current directory, to remove (None when the move was rolled back)."""

    log: PartitionLog
    log_dir: str
    deleted: str | None
    error: BaseException | None = None


def commit_move(move: LogMove, *, tail: list[tuple[int, int, int]], log_start_offset: int,
                current_log_end_offset: int, config: TopicConfig, now_ms: int,
                producer_id_expiration_ms: int, before_swap=None,
                batch_indexes: BatchIndexCache | None = None,
                mapped_indexes: MappedIndexes | None = None) -> CommitOutcome:
    """The swap (see module doc), on a worker thread, while appends to the partition wait.

    ``tail`` is the rest of the current log (descriptors owned by this call). ``before_swap``
    (optional) runs first (the caller's fsync of the current log). When anything fails before
    the current directory is renamed away, the move is rolled back: the future is discarded and
    the current log is opened again where it was (``error`` says why). A failure after that
    rename raises KafkaStorageError: the partition is then offline until a restart, which
    completes the swap (the future is complete and durable by then)."""
    tp = move.tp
    current_path = os.path.join(move.source_dir, files.partition_dir_name(*tp))
    final_path = os.path.join(move.target_dir, files.partition_dir_name(*tp))
    future = move.future_log
    try:
        if before_swap is not None:
            before_swap()
        if future is None:
            raise KafkaStorageError("the future log is not open")
        copy_slices(future, tail, now_ms)
        tail = []
        if future.log_end_offset < current_log_end_offset:
            # The current log ends in a gap (its last records were compacted away under an empty
            # active segment): the future's active segment starts where the current one ends,
            # which is the log end offset it has once reopened.
            future.roll(expected_next_offset=current_log_end_offset, reason="log_dir_move")
        if max(future.log_end_offset, future.active_segment.base_offset) != current_log_end_offset:
            raise KafkaStorageError(
                f"the future log ends at {future.log_end_offset}, the current one at {current_log_end_offset}")
        if log_start_offset > future.log_start_offset:
            future.delete_records(log_start_offset)
        future.close(flush=True)
        disk.current().pause("move")
        files.fsync_dir(move.future_path)
    except Exception as exc:  # noqa: BLE001 - rolled back; reported to the caller
        close_fds(tail)
        logger.error("log_move_swap_failed", topic=tp[0], partition=tp[1], error=str(exc))
        discard_future(future, move.future_path)
        # Its files were not closed cleanly (the old log object is closed after this): recover.
        log = PartitionLog.open(current_path, config, topic=tp[0], partition=tp[1], clean=False,
                                log_start_offset=log_start_offset,
                                producer_id_expiration_ms=producer_id_expiration_ms, batch_indexes=batch_indexes,
                                mapped_indexes=mapped_indexes)
        return CommitOutcome(log, move.source_dir, None, exc)
    # The commit point: the current directory goes away only now that the future is durable.
    deleted = os.path.join(move.source_dir, files.delete_dir_name(*tp))
    slow = disk.current()
    try:
        slow.pause("move")
        os.rename(current_path, deleted)
        files.fsync_dir(move.source_dir)
        slow.pause("move")
        os.rename(move.future_path, final_path)
        files.fsync_dir(move.target_dir)
        slow.pause("move")
    except OSError as exc:
        raise KafkaStorageError.from_os_error(exc, f"cannot swap in the moved log of {tp[0]}-{tp[1]}") from exc
    log = PartitionLog.open(final_path, config, topic=tp[0], partition=tp[1], clean=True,
                            log_start_offset=log_start_offset, recovery_point=current_log_end_offset,
                            producer_id_expiration_ms=producer_id_expiration_ms, batch_indexes=batch_indexes,
                            mapped_indexes=mapped_indexes)
    return CommitOutcome(log, move.target_dir, deleted)


__all__ = ["CommitOutcome", "LogDirNotFoundError", "LogMove", "Leftovers", "close_fds", "commit_move", "copy_job",
           "copy_slices", "create_future_log", "discard_future", "future_dir_name", "future_job",
           "parse_future_dir_name", "promote_future", "resolve_leftovers", "slices_from", "swap_job"]
