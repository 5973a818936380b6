"""Index files of ``sundial dump-log``: dump ``.index``/``.timeindex`` and verify them against the log.

The rules an entry must follow are in :mod:`tools.dump_log`'s docstring ("Verification");
this module holds what checks them: one walk over the ``.log`` next to the index
(:func:`walk_log`) and the dumpers of each index kind, Kafka's load-time sanity checks,
the :class:`Findings` they report (printed in kafka-dump-log.sh's wording), the
:class:`Options` of a run, and the segment file names (``00000000000000000000.log``,
also with a ``.deleted``, ``.cleaned`` or ``.swap`` suffix). Entry layouts are those of
:mod:`records.index_entries`.
"""

from __future__ import annotations

import bisect
import os
import re
import struct
from dataclasses import dataclass, field
from typing import TextIO

from sundial.records.framing import iter_file_batches, iter_records
from sundial.records.index_entries import OFFSET_ENTRY as _OFFSET_ENTRY
from sundial.records.index_entries import TIME_ENTRY as _TIME_ENTRY
from sundial.storage.errors import CorruptRecordError, StorageError

from .common import Progress, ToolError

TEMP_SUFFIXES = (".deleted", ".cleaned", ".swap")
#: The segment file kinds dump-log reads, in the order it prints a segment's files.
SEGMENT_KIND_ORDER = {"log": 0, "index": 1, "timeindex": 2, "txnindex": 3}
_SEGMENT_NAME = re.compile(r"^(\d{20})\.(log|index|timeindex|snapshot|txnindex)$")


# -- results ---------------------------------------------------------------------------------------


@dataclass
class Findings:
    """Problems found, grouped as Kafka's tool prints them (all go to stderr)."""

    offset_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_offset_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    other: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def count(self) -> int:
        return (sum(len(v) for v in self.offset_mismatches.values())
                + sum(len(v) for v in self.time_mismatches.values())
                + sum(len(v) for v in self.time_out_of_order.values())
                + sum(len(v) for v in self.time_offset_not_found.values())
                + len(self.other))

    def add(self, table: dict, path: str, pair: tuple[int, int]) -> None:
        table.setdefault(path, []).append(pair)

    def print(self, err: TextIO) -> None:
        # Kafka's tool's wording: per table, a heading per file, then a line per (a, b) pair
        for table, heading, line in (
                (self.offset_mismatches, "Mismatches in :{path}", "  Index offset: {0}, log offset: {1}"),
                (self.time_mismatches, "Found timestamp mismatch in :{path}",
                 "  Index timestamp: {0}, log timestamp: {1}"),
                (self.time_out_of_order, "Found out of order timestamp in :{path}",
                 "  Index timestamp: {0}, Previously indexed timestamp: {1}"),
                (self.time_offset_not_found, "The following indexed offsets are not found in the log ({path}).",
                 "Indexed offset: {0}, found log offset: {1}"),
                (self.non_consecutive, "Non-consecutive offsets in {path}", "  {0} is followed by {1}")):
            for path, pairs in table.items():
                print(heading.format(path=path), file=err)
                for first, second in pairs:
                    print(line.format(first, second), file=err)
        for line in self.other:
            print(line, file=err)
        for line in self.notes:
            print(f"note: {line}", file=err)


@dataclass
class Options:
    deep: bool = False
    print_data: bool = False
    offsets_decoder: bool = False
    data_format: str = "text"
    verify_only: bool = False
    sanity_only: bool = False
    max_bytes: int | None = None
    progress: str = "auto"


# -- segment file names ------------------------------------------------------------------------------


def _strip_temp(name: str) -> str:
    for suffix in TEMP_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def segment_kind(name: str) -> str | None:
    base = _strip_temp(os.path.basename(name))
    m = _SEGMENT_NAME.match(base)
    if m:
        return m.group(2)
    for kind in SEGMENT_KIND_ORDER:
        if base.endswith("." + kind):
            return kind
    return None


def base_offset_of(path: str) -> int:
    base = _strip_temp(os.path.basename(path))
    prefix = base.split(".")[0]
    if not prefix.isdigit():
        raise ToolError(f"cannot read the base offset from the file name {path} (expected 20 digits, e.g. "
                        f"00000000000000000000.log)")
    return int(prefix)


def sibling_file(path: str, kind: str) -> str:
    """The file of the same segment with another suffix (keeps a temporary suffix if the sibling has it)."""
    directory = os.path.dirname(path)
    prefix = _strip_temp(os.path.basename(path)).split(".")[0]
    plain = os.path.join(directory, f"{prefix}.{kind}")
    if os.path.exists(plain):
        return plain
    for suffix in TEMP_SUFFIXES:
        if os.path.exists(plain + suffix):
            return plain + suffix
    return plain


def read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror or exc}") from None


# -- the log walk used by index verification ------------------------------------------------------------


@dataclass
class BatchFacts:
    position: int
    base_offset: int
    last_offset: int
    magic: int
    record_max_ts: int | None = None     # largest record timestamp (only for batches a time entry names)
    running_max_ts: int = -1             # largest batch max timestamp of the segment up to this batch
    previous_max_ts: int = -1            # the same, before this batch


@dataclass
class LogWalk:
    size_bytes: int
    at_position: dict[int, BatchFacts]
    ending_at: dict[int, BatchFacts]
    last_offsets: list[int]              # last offset of every batch, in file order (for "found log offset")
    max_timestamp: int
    problem: str | None = None


def walk_log(log_path: str, positions: set[int], offsets: set[int], *, record_max_for: set[int] = frozenset(),
             progress_mode: str = "auto") -> LogWalk:
    """One pass over a ``.log`` recording the batches at ``positions`` and those ending at ``offsets``."""
    try:
        fd = os.open(log_path, os.O_RDONLY)
    except FileNotFoundError:
        raise ToolError(f"log file not found: {log_path} (needed to verify its index files)") from None
    except OSError as exc:
        raise ToolError(f"cannot read {log_path}: {exc.strerror or exc}") from None
    at_position: dict[int, BatchFacts] = {}
    ending_at: dict[int, BatchFacts] = {}
    last_offsets: list[int] = []
    running_max = -1
    problem = None
    try:
        size = os.fstat(fd).st_size
        progress = Progress(f"dump-log {os.path.basename(log_path)}", size, mode=progress_mode)
        done = 0
        try:
            for view in iter_file_batches(fd, 0, size):
                previous_max = running_max
                running_max = max(running_max, view.max_timestamp)
                last = view.last_offset
                last_offsets.append(last)
                if view.position in positions or last in offsets:
                    facts = BatchFacts(view.position, view.base_offset, last, view.magic, running_max_ts=running_max,
                                       previous_max_ts=previous_max)
                    if last in record_max_for:
                        try:
                            facts.record_max_ts = max((r.timestamp for r in iter_records(view)), default=-1)
                        except StorageError:
                            facts.record_max_ts = None
                    if view.position in positions:
                        at_position[view.position] = facts
                    if last in offsets:
                        ending_at[last] = facts
                done = view.position + view.size_bytes
                progress.update(done)
        except CorruptRecordError as exc:
            problem = f"corrupt entry in {log_path} after position {done}: {exc}"
        progress.finish(done)
    finally:
        os.close(fd)
    return LogWalk(size, at_position, ending_at, last_offsets, running_max, problem)


def _first_last_offset_at_or_after(walk: LogWalk, offset: int) -> int:
    offsets = walk.last_offsets
    i = bisect.bisect_left(offsets, offset)
    return offsets[i] if i < len(offsets) else -1


def _zero_from(raw: bytes, start: int, end: int) -> bool:
    """True when ``raw[start:end]`` is all zero bytes: the unused, pre-allocated tail of an index."""
    return raw.count(0, start, end) == end - start


# -- .index ------------------------------------------------------------------------------------------


def _read_slots(path: str, layout: struct.Struct, relative_at: int) -> tuple[int, list[tuple], int]:
    """(base offset, the entries as stored up to the first unused slot, file length). A slot past the
    first whose relative offset (field ``relative_at``) is 0 and from which the file is all zeros was
    pre-allocated and never written (Kafka's tool stops there too)."""
    base = base_offset_of(path)
    raw = read_file(path)
    usable = len(raw) - len(raw) % layout.size
    entries = []
    for i, entry in enumerate(layout.iter_unpack(raw[:usable])):
        if i > 0 and entry[relative_at] == 0 and _zero_from(raw, i * layout.size, usable):
            break
        entries.append(entry)
    return base, entries, len(raw)


def _dump_start(path: str, what: str, layout: struct.Struct, length: int, entries: list, sanity_check,
                opts: Options, findings: Findings, out: TextIO) -> bool:
    """What the dumps of both index kinds begin with: ``--index-sanity-check`` alone (``sanity_check()``:
    the problem or None), a length that is not a whole number of entries, an index with no entry.
    False when the dump ends there."""
    if opts.sanity_only:
        problem = sanity_check()
        if problem:
            findings.other.append(problem)
        else:
            print(f"{path} passed sanity check.", file=out)
        return False
    if length % layout.size:
        findings.other.append(f"{what} file {path} is corrupt: its length {length} is not a multiple of "
                              f"{layout.size}")
    if not entries:
        print(f"{path} is empty.", file=out)
        return False
    return True


def _walk_index_log(path: str, positions: set[int], offsets: set[int], findings: Findings, opts: Options,
                    **kwargs) -> LogWalk:
    """The walk of the log an index at ``path`` belongs to; a problem reading it is a finding."""
    walk = walk_log(sibling_file(path, "log"), positions, offsets, progress_mode=opts.progress, **kwargs)
    if walk.problem:
        findings.other.append(walk.problem[0].upper() + walk.problem[1:])
    return walk


def read_offset_index(path: str) -> tuple[int, list[tuple[int, int]], int]:
    """(base offset, entries (offset, position) up to the first unused slot, file length)."""
    base, slots, length = _read_slots(path, _OFFSET_ENTRY, 0)
    return base, [(base + rel, pos) for rel, pos in slots], length


def dump_offset_index(path: str, opts: Options, findings: Findings, out: TextIO) -> None:
    base, entries, length = read_offset_index(path)
    if not _dump_start(path, "Index", _OFFSET_ENTRY, length, entries,
                       lambda: sanity_check_offset_index(path, base, length, entries), opts, findings, out):
        return
    walk = _walk_index_log(path, {p for _, p in entries}, {o for o, _ in entries}, findings, opts)
    if entries == [(base, 0)] and length >= _OFFSET_ENTRY.size and _zero_from(read_file(path), 0, length):
        # A file of zeros is the pre-allocated index of an active segment with no entry written yet,
        # unless the first batch ends at the base offset (then (base, 0) is its real first entry).
        first = walk.at_position.get(0)
        if first is None or first.last_offset != base:
            print(f"{path} is empty.", file=out)
            return
    prev: tuple[int, int] | None = None
    for offset, position in entries:
        if prev is not None and not (offset > prev[0] and position > prev[1]):
            findings.other.append(f"Index entries out of order in {path}: offset {offset} position {position} "
                                  f"follows offset {prev[0]} position {prev[1]}")
        prev = (offset, position)
        batch = walk.at_position.get(position)
        if offset < base:
            findings.add(findings.offset_mismatches, path, (offset, -1))
        elif position >= walk.size_bytes:
            findings.other.append(f"Index entry in {path} points past the end of the log: offset {offset} "
                                  f"position {position} (log size {walk.size_bytes})")
        elif batch is None:
            findings.other.append(f"Index entry in {path} does not point at the start of a batch: offset {offset} "
                                  f"position {position}")
        elif batch.last_offset != offset:
            end = walk.ending_at.get(offset)
            legacy_append = (batch.magic < 2 and batch.base_offset <= offset and end is not None
                             and end.position >= position)
            if not legacy_append:
                findings.add(findings.offset_mismatches, path, (offset, batch.last_offset))
        if not opts.verify_only:
            print(f"offset: {offset} position: {position}", file=out)


def sanity_check_offset_index(path: str, base: int, length: int, entries: list[tuple[int, int]]) -> str | None:
    """Kafka's ``OffsetIndex.sanityCheck`` over the written entries (an all-zero, pre-allocated tail
    is free space, as the broker counts it, not entries)."""
    if length % _OFFSET_ENTRY.size:
        return (f"Index file {path} is corrupt, found {length} bytes which is neither positive nor a "
                f"multiple of {_OFFSET_ENTRY.size}.")
    if entries and entries[-1][0] < base:
        return (f"Corrupt index found, index file ({path}) has non-zero size but the last offset is "
                f"{entries[-1][0]} which is less than the base offset {base}.")
    return None


# -- .timeindex --------------------------------------------------------------------------------------


def read_time_index(path: str) -> tuple[int, list[tuple[int, int]], int]:
    """(base offset, entries (timestamp, offset) up to the first unused slot, file length)."""
    base, slots, length = _read_slots(path, _TIME_ENTRY, 1)
    return base, [(ts, base + rel) for ts, rel in slots], length


def dump_time_index(path: str, opts: Options, findings: Findings, out: TextIO) -> None:
    base, entries, length = read_time_index(path)
    if not _dump_start(path, "Time index", _TIME_ENTRY, length, entries,
                       lambda: sanity_check_time_index(path, base, length, entries), opts, findings, out):
        return
    offsets = {o for _, o in entries}
    walk = _walk_index_log(path, set(), offsets, findings, opts, record_max_for=offsets)
    if entries == [(0, base)] and _zero_from(read_file(path), 0, length):
        # A file of zeros is the pre-allocated time index of an active segment with no entry yet,
        # unless a batch ending at the base offset has the largest timestamp 0 (a real first entry).
        first = walk.ending_at.get(base)
        if first is None or first.record_max_ts != 0:
            print(f"{path} is empty.", file=out)
            return
    prev_ts = -1
    prev_offset = base
    for timestamp, offset in entries:
        batch = walk.ending_at.get(offset)
        if offset < prev_offset:
            findings.other.append(f"Time index entries out of order in {path}: offset {offset} follows {prev_offset}")
        if batch is None:
            findings.add(findings.time_offset_not_found, path, (offset, _first_last_offset_at_or_after(walk, offset)))
        else:
            if batch.record_max_ts is not None and batch.record_max_ts != timestamp:
                findings.add(findings.time_mismatches, path, (timestamp, batch.record_max_ts))
            elif batch.running_max_ts != timestamp or batch.previous_max_ts >= timestamp:
                findings.other.append(
                    f"Time index entry in {path} (timestamp {timestamp}, offset {offset}) does not name the first "
                    f"batch reaching the segment's largest timestamp so far (up to that batch: "
                    f"{batch.running_max_ts}, before it: {batch.previous_max_ts})")
            if prev_ts >= timestamp:
                findings.add(findings.time_out_of_order, path, (timestamp, prev_ts))
        if not opts.verify_only:
            print(f"timestamp: {timestamp} offset: {offset}", file=out)
        prev_ts = max(prev_ts, timestamp)
        prev_offset = max(prev_offset, offset)
    last_ts = entries[-1][0]
    if walk.max_timestamp > last_ts:
        findings.notes.append(f"{path}: the last entry's timestamp {last_ts} is below the segment's largest "
                              f"timestamp {walk.max_timestamp} (normal for the active segment; a rolled segment "
                              f"gets a final entry)")


def sanity_check_time_index(path: str, base: int, length: int, entries: list[tuple[int, int]]) -> str | None:
    """Kafka's ``TimeIndex.sanityCheck`` over the written entries (see :func:`sanity_check_offset_index`)."""
    if length % _TIME_ENTRY.size:
        return (f"Time index file {path} is corrupt, found {length} bytes which is neither positive nor a "
                f"multiple of {_TIME_ENTRY.size}.")
    if entries:
        first_ts = entries[0][0]
        last_ts, last_offset = entries[-1]
        if last_ts < first_ts:
            return (f"Corrupt time index found, time index file ({path}) has non-zero size but the last timestamp "
                    f"is {last_ts} which is less than the first timestamp {first_ts}.")
        if last_offset < base:
            return (f"Corrupt time index found, time index file ({path}) has non-zero size but the last offset "
                    f"is {last_offset} which is less than the base offset {base}.")
    return None
