"""Helpers shared by the compaction tests: logs, appends, cleaning passes and brute-force models."""

from __future__ import annotations

import os
from typing import NamedTuple

from .log_helpers import NOW_MS, topic_config

from sundial.records.builder import SimpleRecord, build_records
from sundial.records.framing import iter_batches, iter_file_batches, iter_records
from sundial.storage.cleaner import Cleaner
from sundial.storage.cleaner_manager import LogCleanerManager, cleanable_bytes, cleanable_offsets
from sundial.storage.log import PartitionLog
from sundial.storage.offset_map import SkimpyOffsetMap


class Rec(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()


def compact_log(path, **cfg) -> PartitionLog:
    cfg.setdefault("cleanup_policy", ("compact",))
    cfg.setdefault("retention_ms", -1)
    cfg.setdefault("min_cleanable_dirty_ratio", 0.0)
    return PartitionLog.create(str(path), topic_config(**cfg), topic="t", partition=0, now_ms=NOW_MS)



def append(log, records, *, codec: int = 0, magic: int = 2, now_ms: int = NOW_MS, **kwargs) -> list[Rec]:
    """Append one batch of ``(key, value, timestamp[, headers])`` tuples at the LEO (no validation)."""
    simple = [SimpleRecord(r[2], r[0], r[1], tuple(r[3]) if len(r) > 3 else ()) for r in records]
    base = log.log_end_offset
    buf = build_records(magic, simple, base_offset=base, compression=codec, **kwargs).buffer
    log.append_as_follower(buf, now_ms=now_ms)
    return [Rec(base + i, s.timestamp if magic else -1, s.key, s.value, s.headers) for i, s in enumerate(simple)]


def read_all(log) -> list[Rec]:
    """Every record a consumer reading from the log start offset gets (Fetch semantics)."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20)
        if not info.slices:
            break
        data = b"".join(s.read() for s in info.slices)
        nxt = offset
        for view in iter_batches(data):
            for r in iter_records(view):
                if r.offset >= offset:
                    out.append(Rec(r.offset, r.timestamp, r.key, r.value, r.headers))
            nxt = max(nxt, view.next_offset)
        if nxt == offset:
            break
        offset = nxt
    return out


def batches_on_disk(log):
    """(segment base offset, BatchView) of every batch of every segment."""
    out = []
    for seg in log.segments:
        for view in iter_file_batches(seg.fd, 0, seg.size_bytes):
            out.append((seg.base_offset, view))
    return out


class Pass(NamedTuple):
    first_dirty: int
    first_uncleanable: int
    end_offset: int
    stats: object


def clean_pass(log, manager: LogCleanerManager, offset_map: SkimpyOffsetMap, now_ms: int, *,
               swap=None, load_factor: float = 0.9, io_buffer_bytes: int = 4096) -> Pass | None:
    """One pass as the broker runs it: choose (ratio 0 in these tests), snapshot, clean, swap, checkpoint."""
    ltc = manager.grab_filthiest_log([(log.topic, log.partition, log)], now_ms)
    if ltc is None:
        return None
    job = log.cleaning_job(ltc.first_dirty_offset, ltc.first_uncleanable_offset, now_ms)
    cleaner = Cleaner(offset_map, io_buffer_bytes=io_buffer_bytes, load_factor=load_factor)
    end = None
    try:
        end, stats = cleaner.clean(job, swap or (lambda c: log.replace_segments(c, now_ms)))
    finally:
        job.close()
        manager.done_cleaning(ltc, end)
    return Pass(ltc.first_dirty_offset, ltc.first_uncleanable_offset, end, stats)


def clean_until_done(log, manager, offset_map, now_ms, **kwargs) -> list[Pass]:
    """Passes until the whole cleanable range is clean (the checkpoint reaches the first uncleanable offset)."""
    passes = []
    for _ in range(1000):
        first_dirty, uncleanable, _ = cleanable_offsets(log, manager.all_checkpoints().get(("t", 0)), now_ms)
        if cleanable_bytes(log, first_dirty, uncleanable)[1] == 0:
            break
        p = clean_pass(log, manager, offset_map, now_ms, **kwargs)
        if p is None:
            break
        passes.append(p)
    return passes


def model_after_clean(records: list[Rec], end_offset: int, tombstones_expired_below: int = -1) -> list[Rec]:
    """Brute force: records at or after ``end_offset`` stay; below it, the last record of each key stays,
    a tombstone only if it is not below ``tombstones_expired_below`` (its horizon has passed)."""
    last: dict[bytes, int] = {}
    for r in records:
        if r.offset < end_offset and r.key is not None:
            last[r.key] = r.offset
    out = []
    for r in records:
        if r.offset >= end_offset:
            out.append(r)
        elif r.key is not None and last[r.key] == r.offset:
            if r.value is not None or r.offset >= tombstones_expired_below:
                out.append(r)
    return out


def dir_files(log) -> set[str]:
    return set(os.listdir(log.dir))
