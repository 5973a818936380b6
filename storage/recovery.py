"""Loading one partition directory at start-up, after a clean or an unclean shutdown.

Kafka's ``LogLoader`` (reference §8), per partition directory:

1. Leftovers: ``*.deleted`` and ``*.cleaned`` files are removed, ``*.tmp`` files (an
   interrupted atomic write) too; a ``<base>.log.swap`` (an interrupted swap) is
   completed — the segments it covers are removed and it takes their place with
   rebuilt indexes (its ``.txnindex`` is rebuilt from the log, as after recovery); index files without a ``.log`` are removed.
2. Every ``<base>.log`` becomes a segment (sorted by base offset). Opening reads
   nothing but the file size.
3. **Index checks on every load (beyond Kafka; KAFKA-10207, KAFKA-19200).** Each
   segment that will not be recovered anyway has its index files checked cheaply
   (:meth:`storage.segment.LogSegment.check_indexes`: missing files, lengths that are
   not a multiple of the entry size, entries that do not increase, a zero-filled tail,
   a last offset entry that does not point at its batch, an empty time index although
   the records carry timestamps). A failing segment gets both indexes rebuilt from its
   batches **without** touching its data: a bad index never causes data loss or an
   early deletion (an untrimmed, zero-filled time index would otherwise report a max
   timestamp of 0 and let retention delete the segment at once). Repairs are logged.
   A ``.txnindex`` that fails Kafka's sanity check (an entry of an unknown version, or
   a marker below the segment's base) is rebuilt from the log like a recovered one.
4. Unclean shutdown: every segment from the one holding the recovery point to the end
   is recovered (:meth:`~storage.segment.LogSegment.recover`: validate each batch,
   rebuild both indexes, cut a torn or corrupt tail, reload the max timestamp). When a
   segment loses bytes, every later segment is deleted. Progress is logged for every
   256 MiB scanned. The ``.txnindex`` files of the recovered segments are rebuilt by the
   producer-state scan of the log (``recovered_from``; :mod:`storage.log_transactions`),
   which knows where each aborted transaction started.
5. If the last segment ends below the log start offset, every segment is deleted; if
   none remains, an empty one is created at the log start offset.
6. Log start offset = max(checkpoint, first base offset); recovery point = LEO after a
   clean shutdown, else min(checkpoint, LEO) (it only moves with later flushes).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

import structlog

from sundial.config.topic import TopicConfig
from sundial.records.framing import walk_headers

from . import files
from .errors import CorruptIndexError, InvalidOffsetError, KafkaStorageError, LogSegmentOffsetOverflowError
from .index import MappedIndexes
from .offset_index import IndexFullError
from .segment import LogSegment
from .segments import SegmentFactory

logger = structlog.get_logger(__name__)

PROGRESS_EVERY_BYTES = 256 * 1024 * 1024


@dataclass(slots=True)
class LoadedLog:
    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    log_end_offset: int
    repaired: list[tuple[int, list[str]]] = field(default_factory=list)   # (base offset, problems)
    recovered_segments: int = 0
    truncated_bytes: int = 0
    recovered_from: int | None = None   # base offset of the first recovered segment (unclean shutdown)
    deleted_segments: int = 0
    created_segment: bool = False


def clean_leftovers(dir_path: str) -> tuple[list[int], list[int]]:
    """Remove stale files; return (sorted ``.log`` base offsets, ``.log.swap`` base offsets)."""
    names = os.listdir(dir_path)
    logs: set[int] = set()
    swaps: list[int] = []
    indexes: list[tuple[int, str]] = []
    for name in names:
        path = os.path.join(dir_path, name)
        if name.endswith(".tmp"):
            files.remove_quietly(path)
            continue
        parsed = files.parse_segment_file_name(name)
        if parsed is None:
            continue
        if parsed.temp_suffix in (files.DELETED_SUFFIX, files.CLEANED_SUFFIX):
            files.remove_quietly(path)
            logger.info("stale_file_removed", path=path)
        elif parsed.temp_suffix == files.SWAP_SUFFIX:
            if parsed.suffix == files.LOG_SUFFIX:
                swaps.append(parsed.base_offset)
            else:
                files.remove_quietly(path)  # swapped indexes are rebuilt
        elif parsed.suffix == files.LOG_SUFFIX:
            logs.add(parsed.base_offset)
        elif parsed.suffix in (files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX, files.TXN_INDEX_SUFFIX):
            indexes.append((parsed.base_offset, path))
    for base, path in indexes:
        if base not in logs and base not in swaps:
            files.remove_quietly(path)
            logger.info("orphan_index_removed", path=path)
    return sorted(logs), sorted(swaps)


def _scan_next_offset(path: str, base: int) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        last = base - 1
        for header in walk_headers(fd, 0, os.fstat(fd).st_size, 1 << 20):
            last = header.last_offset
        return last + 1
    finally:
        os.close(fd)


def _complete_swaps(dir_path: str, config: TopicConfig, logs: list[int], swaps: list[int],
                    rng: random.Random) -> list[int]:
    """Finish interrupted swaps (Kafka: replace the segments a ``.swap`` covers)."""
    for base in swaps:
        swap_path = files.log_file(dir_path, base) + files.SWAP_SUFFIX
        try:
            next_offset = _scan_next_offset(swap_path, base)
        except Exception as exc:  # unreadable swap: drop it, the originals stay
            files.remove_quietly(swap_path)
            logger.warning("swap_file_unreadable_removed", path=swap_path, error=str(exc))
            continue
        for other in list(logs):
            if base <= other < max(next_offset, base + 1):
                for suffix in (files.LOG_SUFFIX, files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX, files.TXN_INDEX_SUFFIX):
                    files.remove_quietly(files.segment_file(dir_path, other, suffix))
                logs.remove(other)
        for suffix in (files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX, files.TXN_INDEX_SUFFIX):
            files.remove_quietly(files.segment_file(dir_path, base, suffix))
        os.replace(swap_path, files.log_file(dir_path, base))
        logs.append(base)
        logger.info("swap_completed", path=swap_path, base_offset=base, next_offset=next_offset)
    return sorted(logs)


def _recover_segment(seg: LogSegment, topic: str, partition: int, *, truncate: bool) -> int:
    """Recover one segment with progress logging; bytes cut (an index error empties it, as Kafka)."""
    next_report = [PROGRESS_EVERY_BYTES]

    def progress(position: int) -> None:
        if position >= next_report[0]:
            next_report[0] += PROGRESS_EVERY_BYTES
            logger.info("segment_recovery_progress", topic=topic, partition=partition, base_offset=seg.base_offset,
                        scanned_bytes=position, size_bytes=seg.size_bytes)

    try:
        return seg.recover(truncate=truncate, progress=progress if seg.size_bytes > PROGRESS_EVERY_BYTES else None)
    except (InvalidOffsetError, IndexFullError, LogSegmentOffsetOverflowError) as exc:
        if not truncate:
            logger.error("segment_index_rebuild_failed", topic=topic, partition=partition,
                         base_offset=seg.base_offset, error=str(exc))
            return 0
        logger.error("segment_recovery_failed_truncating", topic=topic, partition=partition,
                     base_offset=seg.base_offset, error=str(exc))
        size = seg.size_bytes
        try:
            os.ftruncate(seg.fd, 0)
        except OSError as os_exc:
            raise KafkaStorageError.from_os_error(os_exc, f"cannot truncate {seg.log_path}") from os_exc
        seg.size_bytes = 0
        seg.recover(truncate=True)
        return size


def load_partition(dir_path: str, config: TopicConfig, *, topic: str, partition: int, clean: bool,
                   log_start_offset_checkpoint: int | None, recovery_point_checkpoint: int | None,
                   rng: random.Random | None = None, mapped_indexes: MappedIndexes | None = None) -> LoadedLog:
    """Load (and if needed recover) one partition directory; see the module doc. The segments'
    indexes count against ``mapped_indexes`` (the log manager's; a private one when None)."""
    rng = rng or random.Random()
    factory = SegmentFactory(dir_path, rng, mapped_indexes)
    try:
        logs, swaps = clean_leftovers(dir_path)
        if swaps:
            logs = _complete_swaps(dir_path, config, logs, swaps, rng)
        segments = [factory.open(config, base) for base in logs]
    except OSError as exc:
        raise KafkaStorageError.from_os_error(exc, f"cannot load log directory {dir_path}") from exc
    result = LoadedLog(segments, 0, 0, 0)
    if swaps:
        result.recovered_from = min(swaps)    # a completed swap's .txnindex is rebuilt from the log
    recovery_point = recovery_point_checkpoint if recovery_point_checkpoint is not None else 0
    start_recovery_at = len(segments)
    if not clean and segments:
        start_recovery_at = 0
        for i, seg in enumerate(segments):
            if seg.base_offset <= recovery_point:
                start_recovery_at = i
    # 3. cheap index checks of the segments that will not be recovered anyway
    for seg in segments[:start_recovery_at]:
        try:
            seg.txn_index.sanity_check()
        except (CorruptIndexError, KafkaStorageError) as exc:
            logger.warning("txn_index_rebuilding", topic=topic, partition=partition, base_offset=seg.base_offset,
                           error=str(exc))
            seg.txn_index.forget_cache()
            if result.recovered_from is None or seg.base_offset < result.recovered_from:
                result.recovered_from = seg.base_offset
        problems = seg.check_indexes()
        if problems:
            logger.warning("segment_indexes_rebuilding", topic=topic, partition=partition,
                           base_offset=seg.base_offset, size_bytes=seg.size_bytes, problems=problems)
            _recover_segment(seg, topic, partition, truncate=False)
            seg.indexes_durable = False
            result.repaired.append((seg.base_offset, problems))
            logger.info("segment_indexes_rebuilt", topic=topic, partition=partition, base_offset=seg.base_offset,
                        offset_index_entries=seg.offset_index.entries, time_index_entries=seg.time_index.entries,
                        max_timestamp_ms=seg.max_timestamp_so_far)
    # 4. unclean: recover from the segment holding the recovery point
    if start_recovery_at < len(segments):
        total = sum(s.size_bytes for s in segments[start_recovery_at:])
        logger.info("log_recovery_started", topic=topic, partition=partition, recovery_point=recovery_point,
                    segments=len(segments) - start_recovery_at, size_bytes=total)
        i = start_recovery_at
        first = segments[start_recovery_at].base_offset
        result.recovered_from = first if result.recovered_from is None else min(result.recovered_from, first)
        while i < len(segments):
            seg = segments[i]
            cut = _recover_segment(seg, topic, partition, truncate=True)
            seg.indexes_durable = False
            result.recovered_segments += 1
            if cut > 0:
                result.truncated_bytes += cut
                logger.warning("segment_truncated_during_recovery", topic=topic, partition=partition,
                               base_offset=seg.base_offset, truncated_bytes=cut, size_bytes=seg.size_bytes)
                later = segments[i + 1:]
                if later:
                    logger.warning("later_segments_deleted_after_corruption", topic=topic, partition=partition,
                                   base_offsets=[s.base_offset for s in later])
                for s in later:
                    s.delete_files()
                result.deleted_segments += len(later)
                del segments[i + 1:]
                break
            i += 1
        logger.info("log_recovery_finished", topic=topic, partition=partition,
                    segments=result.recovered_segments, truncated_bytes=result.truncated_bytes)
    # 5. log start offset vs what is left
    lso_checkpoint = log_start_offset_checkpoint if log_start_offset_checkpoint is not None else 0
    if segments and segments[-1].next_offset < lso_checkpoint:
        logger.warning("log_below_log_start_offset_deleted", topic=topic, partition=partition,
                       log_start_offset=lso_checkpoint, log_end_offset=segments[-1].next_offset)
        for s in segments:
            s.delete_files()
        result.deleted_segments += len(segments)
        segments.clear()
    if not segments:
        segments.append(factory.create(config, lso_checkpoint))
        result.created_segment = True
    leo = segments[-1].next_offset
    for seg in segments:   # descriptors opened while loading are reopened on demand
        seg.release_fd()
    result.log_start_offset = max(lso_checkpoint, segments[0].base_offset)
    result.log_end_offset = leo
    result.recovery_point = leo if clean else min(recovery_point, leo)
    return result


__all__ = ["load_partition", "LoadedLog", "clean_leftovers"]
