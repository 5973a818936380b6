"""``sundial dump-log``: print and verify segment files offline (kafka-dump-log.sh).

Reads ``.log``, ``.index`` and ``.timeindex`` files (also with a ``.deleted``,
``.cleaned`` or ``.swap`` suffix, and directories, which expand to their segment files)
with :mod:`records`; it never opens a file for writing, so it is safe on the
files of a running broker. Formats are those of :mod:`records.layout` and
:mod:`records.index_entries`.

Output (stdout), in kafka-dump-log.sh's words:

* ``.log``: ``Dumping FILE``, ``Log starting offset: BASE``, then one line per batch
  (v2: ``baseOffset: … lastOffset: … count: … baseSequence: … lastSequence: …
  producerId: … producerEpoch: … partitionLeaderEpoch: … isTransactional: …
  isControl: … deleteHorizonMs: … position: … CreateTime|LogAppendTime: MAX size: …
  magic: 2 compresscodec: … crc: … isvalid: …``; legacy: ``offset: … position: …``).
  ``--deep-iteration`` adds one ``| offset: …`` line per record (timestamp, key and
  value sizes, sequence, header keys); ``--print-data-log`` adds ``key:``/``payload:``
  (UTF-8, or ``--data-format hex``) and the header values; ``--offsets-decoder`` shows
  ``__consumer_offsets`` keys and values decoded.
* ``.index``: ``offset: O position: P`` per entry; ``.timeindex``: ``timestamp: T offset: O``;
  ``.txnindex``: aborted transactions, verified against a rebuild from the ``.log`` files
  (:mod:`broker.tools.dump_txn_index`). Control batches print ``isControl: true`` and, with
  ``--deep-iteration``, ``endTxnMarker: COMMIT|ABORT coordinatorEpoch: N``.

Verification. Dumping an index always checks every entry against the ``.log`` next to
it (``--verify-index-only`` checks without printing the entries):

* offset index entry ``(O, P)``: entries increase in offset and position; ``P`` is the
  start of a batch; that batch ends at ``O`` (Kafka writes the last offset of an append
  with the append's start position; a v2 append is one batch, a legacy append may hold
  several messages, which is accepted when one of them ends at ``O``);
* time index entry ``(T, O)``: timestamps strictly increase; a batch ends at ``O``; the
  largest record timestamp of that batch is ``T``; and that batch is the first of the
  segment to reach ``T`` as its largest timestamp so far (the KIP-33 meaning of an entry:
  the segment writes ``(max so far, offset of the max)`` only when the max grows);
* the slots of a pre-allocated (active) index after the last written entry read as
  ``(base offset, 0)`` and end the walk, as in Kafka's tool.

``--index-sanity-check`` runs only Kafka's load-time check (file length a multiple of
the entry size, last offset >= base offset, last timestamp >= first) without reading
the log; the all-zero tail of a pre-allocated index is free space, not entries (Kafka's
tool reads it as entries and fails an active segment's time index). Problems go to stderr in Kafka's wording; the exit code is **3** when any is
found (Kafka's tool exits 0), 1 for an unreadable or missing file. A ``.log`` with a bad
CRC, a corrupt entry or trailing bytes that are not a whole batch also counts as a
problem. Progress goes to stderr for files of 64 MiB or more (``--progress``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, field
from typing import TextIO

from records.index_entries import OFFSET_ENTRY as _OFFSET_ENTRY
from records.index_entries import TIME_ENTRY as _TIME_ENTRY
from records.layout import CONTROL_RECORD_KEY, DELETE_HORIZON_FLAG_MASK, END_TXN_MARKER_VALUE

from .common import EXIT_FINDINGS, Progress, ToolError, tool_command
from .dump_txn_index import dump_txn_index

_TEMP_SUFFIXES = (".deleted", ".cleaned", ".swap")
_ORDER = {"log": 0, "index": 1, "timeindex": 2, "txnindex": 3}
_SEGMENT_NAME = re.compile(r"^(\d{20})\.(log|index|timeindex|snapshot|txnindex)$")
_TS_TYPE = {0: "CreateTime", 1: "LogAppendTime", -1: "NoTimestampType"}
_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}

EPILOG = """examples:
  sundial dump-log --files data/orders-0/00000000000000000000.log --print-data-log
  sundial dump-log --files data/orders-0/00000000000000000000.index,data/orders-0/00000000000000000000.timeindex
  sundial dump-log --files data/orders-0 --verify-index-only
  sundial dump-log --files data/orders-0/00000000000000000000.timeindex --index-sanity-check

exit codes: 0 ok, 1 unreadable or missing file, 2 bad arguments, 3 problems found."""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "dump-log", help="print and verify .log/.index/.timeindex files (kafka-dump-log.sh)",
        description="Print the batches, records and index entries of segment files, and verify index "
                    "entries against the log. Reads files only; safe on a running broker's data. Exits 3 "
                    "when it finds index entries that do not match the log, bad CRCs or corrupt data.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", required=True, action="append", metavar="FILE[,FILE...]",
                   help=".log, .index or .timeindex files, or partition directories (repeatable, comma-separated)")
    p.add_argument("--print-data-log", action="store_true",
                   help="print each record's key, payload and headers (implies --deep-iteration)")
    p.add_argument("--deep-iteration", action="store_true", help="print one line per record, not only per batch")
    p.add_argument("--verify-index-only", action="store_true",
                   help="check index entries against the log without printing them")
    p.add_argument("--index-sanity-check", action="store_true",
                   help="only run Kafka's load-time index sanity check (no log read)")
    p.add_argument("--offsets-decoder", action="store_true",
                   help="decode __consumer_offsets keys and values (implies --print-data-log)")
    p.add_argument("--data-format", choices=("text", "hex"), default="text",
                   help="how --print-data-log shows keys, payloads and header values: UTF-8 text "
                        "(undecodable bytes as \\x escapes) or hex (default: text)")
    p.add_argument("--max-bytes", type=int, default=None, metavar="N",
                   help="read at most N bytes of each .log file (default: all)")
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="progress lines on stderr: auto (files of 64 MiB or more), always or never")
    p.set_defaults(func=run)


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
        for path, pairs in self.offset_mismatches.items():
            print(f"Mismatches in :{path}", file=err)
            for index_offset, log_offset in pairs:
                print(f"  Index offset: {index_offset}, log offset: {log_offset}", file=err)
        for path, pairs in self.time_mismatches.items():
            print(f"Found timestamp mismatch in :{path}", file=err)
            for index_ts, log_ts in pairs:
                print(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}", file=err)
        for path, pairs in self.time_out_of_order.items():
            print(f"Found out of order timestamp in :{path}", file=err)
            for index_ts, prev_ts in pairs:
                print(f"  Index timestamp: {index_ts}, Previously indexed timestamp: {prev_ts}", file=err)
        for path, pairs in self.time_offset_not_found.items():
            print(f"The following indexed offsets are not found in the log ({path}).", file=err)
            for index_offset, log_offset in pairs:
                print(f"Indexed offset: {index_offset}, found log offset: {log_offset}", file=err)
        for path, pairs in self.non_consecutive.items():
            print(f"Non-consecutive offsets in {path}", file=err)
            for first, second in pairs:
                print(f"  {first} is followed by {second}", file=err)
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


# -- entry -----------------------------------------------------------------------------------------


@tool_command("dump-log")
def run(args) -> int:
    opts = Options(deep=args.deep_iteration or args.print_data_log or args.offsets_decoder,
                   print_data=args.print_data_log or args.offsets_decoder, offsets_decoder=args.offsets_decoder,
                   data_format=args.data_format, verify_only=args.verify_index_only,
                   sanity_only=args.index_sanity_check, max_bytes=args.max_bytes, progress=args.progress)
    if opts.max_bytes is not None and opts.max_bytes < 0:
        raise ToolError("--max-bytes must not be negative")
    paths = expand_paths(args.files)
    findings = Findings()
    out = sys.stdout
    for path in paths:
        dump_file(path, opts, findings, out)
    out.flush()
    findings.print(sys.stderr)
    problems = findings.count()
    if problems:
        print(f"sundial dump-log: {problems} problem(s) found", file=sys.stderr)
        return EXIT_FINDINGS
    return 0


def expand_paths(values: list[str]) -> list[str]:
    """Comma-separated file names and directories → files, in order; missing → ToolError."""
    paths: list[str] = []
    for value in values:
        for name in value.split(","):
            name = name.strip()
            if not name:
                continue
            if os.path.isdir(name):
                entries = sorted(e for e in os.listdir(name) if _kind(e) in _ORDER)
                if not entries:
                    raise ToolError(f"no segment files in directory {name}")
                # .log first, then its indexes, segment by segment.
                entries.sort(key=lambda e: (e.split(".")[0], _ORDER[_kind(e)]))
                paths.extend(os.path.join(name, e) for e in entries)
            elif os.path.exists(name):
                paths.append(name)
            else:
                raise ToolError(f"file not found: {name}")
    if not paths:
        raise ToolError("no files given")
    return paths


def _strip_temp(name: str) -> str:
    for suffix in _TEMP_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _kind(name: str) -> str | None:
    base = _strip_temp(os.path.basename(name))
    m = _SEGMENT_NAME.match(base)
    if m:
        return m.group(2)
    for kind in _ORDER:
        if base.endswith("." + kind):
            return kind
    return None


def _base_offset(path: str) -> int:
    base = _strip_temp(os.path.basename(path))
    prefix = base.split(".")[0]
    if not prefix.isdigit():
        raise ToolError(f"cannot read the base offset from the file name {path} (expected 20 digits, e.g. "
                        f"00000000000000000000.log)")
    return int(prefix)


def _sibling(path: str, kind: str) -> str:
    """The file of the same segment with another suffix (keeps a temporary suffix if the sibling has it)."""
    directory = os.path.dirname(path)
    prefix = _strip_temp(os.path.basename(path)).split(".")[0]
    plain = os.path.join(directory, f"{prefix}.{kind}")
    if os.path.exists(plain):
        return plain
    for suffix in _TEMP_SUFFIXES:
        if os.path.exists(plain + suffix):
            return plain + suffix
    return plain


def dump_file(path: str, opts: Options, findings: Findings, out: TextIO) -> None:
    kind = _kind(path)
    print(f"Dumping {path}", file=out)
    if kind == "log":
        dump_log_file(path, opts, findings, out)
    elif kind == "index":
        dump_offset_index(path, opts, findings, out)
    elif kind == "timeindex":
        dump_time_index(path, opts, findings, out)
    elif kind == "txnindex":
        if not opts.sanity_only:
            dump_txn_index(path, opts, findings, out, _kind, _base_offset)
    else:
        print(f"Ignoring unknown file {path}", file=sys.stderr)


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror or exc}") from None


# -- .log --------------------------------------------------------------------------------------------


def _bytes_text(data: bytes | None, fmt: str) -> str:
    if data is None:
        return "null"
    if fmt == "hex":
        return bytes(data).hex()
    return bytes(data).decode("utf-8", "backslashreplace")


def _batch_line(view) -> str:
    from records.codecs import CODEC_NAMES

    ts_type = _TS_TYPE.get(view.timestamp_type, "NoTimestampType")
    codec = CODEC_NAMES.get(view.compression, str(view.compression))
    crc_ok = "true" if view.crc_valid() else "false"
    tail = (f" position: {view.position} {ts_type}: {view.max_timestamp} size: {view.size_bytes} "
            f"magic: {view.magic} compresscodec: {codec} crc: {view.crc} isvalid: {crc_ok}")
    if view.magic >= 2:
        horizon = (f"OptionalLong[{view.base_timestamp}]" if view.attributes & DELETE_HORIZON_FLAG_MASK
                   else "OptionalLong.empty")
        return (f"baseOffset: {view.base_offset} lastOffset: {view.last_offset} count: {view.record_count} "
                f"baseSequence: {view.base_sequence} lastSequence: {view.last_sequence} "
                f"producerId: {view.producer_id} producerEpoch: {view.producer_epoch} "
                f"partitionLeaderEpoch: {view.partition_leader_epoch} "
                f"isTransactional: {str(view.is_transactional).lower()} isControl: {str(view.is_control).lower()} "
                f"deleteHorizonMs: {horizon}" + tail)
    return f"offset: {view.last_offset}" + tail


def _record_line(view, record, opts: Options) -> str:
    ts_type = _TS_TYPE.get(view.timestamp_type, "NoTimestampType")
    key_size = -1 if record.key is None else len(record.key)
    value_size = -1 if record.value is None else len(record.value)
    parts = [f"| offset: {record.offset} {ts_type}: {record.timestamp} keySize: {key_size} valueSize: {value_size}"]
    if view.magic >= 2:
        if view.base_sequence >= 0:
            seq = (view.base_sequence + record.offset - view.base_offset) & 0x7FFFFFFF
        else:
            seq = -1
        keys = ",".join(h[0] if isinstance(h[0], str) else bytes(h[0]).decode("utf-8", "replace")
                        for h in record.headers)
        parts.append(f" sequence: {seq} headerKeys: [{keys}]")
    elif view.compression == 0:
        parts.append(f" isValid: {str(view.crc_valid()).lower()} crc: {view.crc}")
    if view.is_control:
        parts.append(_control_text(record))
    elif opts.print_data:
        if opts.offsets_decoder:
            parts.append(_offsets_text(record))
        else:
            if record.key is not None:
                parts.append(f" key: {_bytes_text(record.key, opts.data_format)}")
            parts.append(f" payload: {_bytes_text(record.value, opts.data_format)}")
            if record.headers:
                shown = ",".join(
                    f"{h[0]}={_bytes_text(h[1], opts.data_format)}" for h in record.headers)
                parts.append(f" headers: [{shown}]")
    return "".join(parts)


def _control_text(record) -> str:
    key = bytes(record.key or b"")
    if len(key) >= CONTROL_RECORD_KEY.size:
        _, type_id = CONTROL_RECORD_KEY.unpack(key[:CONTROL_RECORD_KEY.size])
        name = _CONTROL_TYPES.get(type_id)
        value = bytes(record.value or b"")
        if name is not None and len(value) >= END_TXN_MARKER_VALUE.size:
            _, epoch = END_TXN_MARKER_VALUE.unpack(value[:END_TXN_MARKER_VALUE.size])
            return f" endTxnMarker: {name} coordinatorEpoch: {epoch}"
        return f" controlType: {name or 'UNKNOWN'}({type_id})"
    return " controlType: UNKNOWN(-1)"


def _offsets_text(record) -> str:
    from broker.groups import schema

    try:
        key = schema.decode_key(record.key)
    except schema.SchemaError as exc:
        return f" key: Error at offset {record.offset}, skipping. {exc}"
    if isinstance(key, schema.OffsetKey):
        key_text = f"offset_commit::group={key.group},partition={key.topic}-{key.partition}"
    else:
        key_text = f"group_metadata::group={key.group}"
    if record.value is None:
        return f" key: {key_text} payload: <DELETE>"
    try:
        if isinstance(key, schema.OffsetKey):
            v = schema.decode_offset_value(record.value)
            value_text = (f"offset={v.offset},leaderEpoch={v.leader_epoch},metadata={v.metadata},"
                          f"commitTimestamp={v.commit_timestamp_ms},expireTimestamp={v.expire_timestamp_ms}")
        else:
            g = schema.decode_group_value(record.value)
            members = ",".join(m.member_id for m in g.members)
            value_text = (f"protocolType={g.protocol_type},generation={g.generation},protocol={g.protocol},"
                          f"leader={g.leader},currentStateTimestamp={g.current_state_timestamp_ms},"
                          f"members=[{members}]")
    except schema.SchemaError as exc:
        value_text = f"Error at offset {record.offset}, skipping. {exc}"
    return f" key: {key_text} payload: {value_text}"


def dump_log_file(path: str, opts: Options, findings: Findings, out: TextIO) -> None:
    from storage.errors import CorruptRecordError, StorageError
    from records.framing import iter_file_batches, iter_records

    if opts.sanity_only:
        return                                  # the sanity check reads index files only
    # With only index verification asked for, a .log is checked (CRCs, framing) without printing it.
    quiet = opts.verify_only
    base = _base_offset(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        size = os.fstat(fd).st_size
        limit = size if opts.max_bytes is None else min(size, opts.max_bytes)
        if not quiet:
            print(f"Log starting offset: {base}", file=out)
        progress = Progress(f"dump-log {os.path.basename(path)}", limit, mode=opts.progress)
        valid_bytes = 0
        last_offset = -1
        corrupt = False
        try:
            for view in iter_file_batches(fd, 0, limit):
                if not view.crc_valid():
                    findings.other.append(f"Batch with an invalid CRC in {path} at position {view.position} "
                                          f"(stored {view.crc}, computed {view.compute_crc()})")
                if not quiet:
                    print(_batch_line(view), file=out)
                if opts.deep and not quiet:
                    try:
                        for record in iter_records(view):
                            if last_offset != -1 and record.offset != last_offset + 1:
                                findings.add(findings.non_consecutive, path, (last_offset, record.offset))
                            last_offset = record.offset
                            print(_record_line(view, record, opts), file=out)
                    except StorageError as exc:
                        findings.other.append(f"Cannot read the records of the batch at position {view.position} "
                                              f"in {path}: {exc}")
                valid_bytes = view.position + view.size_bytes
                progress.update(valid_bytes)
        except CorruptRecordError as exc:
            corrupt = True
            findings.other.append(f"Corrupt entry in {path} after position {valid_bytes}: {exc}")
        progress.finish(valid_bytes)
        trailing = limit - valid_bytes
        if trailing > 0 and opts.max_bytes is None and not corrupt:
            if not quiet:
                print(f"Found {trailing} invalid bytes at the end of {os.path.basename(path)}", file=out)
            findings.other.append(f"Found {trailing} invalid bytes at the end of {path}")
    finally:
        os.close(fd)


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
    from storage.errors import CorruptRecordError, StorageError
    from records.framing import iter_file_batches, iter_records

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
    import bisect

    offsets = walk.last_offsets
    i = bisect.bisect_left(offsets, offset)
    return offsets[i] if i < len(offsets) else -1


def _zero_from(raw: bytes, start: int, end: int) -> bool:
    """True when ``raw[start:end]`` is all zero bytes: the unused, pre-allocated tail of an index."""
    return raw.count(0, start, end) == end - start


# -- .index ------------------------------------------------------------------------------------------


def read_offset_index(path: str) -> tuple[int, list[tuple[int, int]], int]:
    """(base offset, entries (offset, position) up to the first unused slot, file length)."""
    base = _base_offset(path)
    raw = _read_file(path)
    usable = len(raw) - len(raw) % _OFFSET_ENTRY.size
    entries = []
    for i, (rel, pos) in enumerate(_OFFSET_ENTRY.iter_unpack(raw[:usable])):
        if i > 0 and rel == 0 and _zero_from(raw, i * _OFFSET_ENTRY.size, usable):
            break                              # pre-allocated, never written (Kafka's tool stops here too)
        entries.append((base + rel, pos))
    return base, entries, len(raw)


def dump_offset_index(path: str, opts: Options, findings: Findings, out: TextIO) -> None:
    base, entries, length = read_offset_index(path)
    if opts.sanity_only:
        problem = sanity_check_offset_index(path, base, length, entries)
        if problem:
            findings.other.append(problem)
        else:
            print(f"{path} passed sanity check.", file=out)
        return
    if length % _OFFSET_ENTRY.size:
        findings.other.append(f"Index file {path} is corrupt: its length {length} is not a multiple of "
                              f"{_OFFSET_ENTRY.size}")
    if not entries:
        print(f"{path} is empty.", file=out)
        return
    log_path = _sibling(path, "log")
    walk = walk_log(log_path, {p for _, p in entries}, {o for o, _ in entries}, progress_mode=opts.progress)
    if walk.problem:
        findings.other.append(walk.problem[0].upper() + walk.problem[1:])
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
    base = _base_offset(path)
    raw = _read_file(path)
    usable = len(raw) - len(raw) % _TIME_ENTRY.size
    entries = []
    for i, (ts, rel) in enumerate(_TIME_ENTRY.iter_unpack(raw[:usable])):
        if i > 0 and rel == 0 and _zero_from(raw, i * _TIME_ENTRY.size, usable):
            break
        entries.append((ts, base + rel))
    return base, entries, len(raw)


def dump_time_index(path: str, opts: Options, findings: Findings, out: TextIO) -> None:
    base, entries, length = read_time_index(path)
    if opts.sanity_only:
        problem = sanity_check_time_index(path, base, length, entries)
        if problem:
            findings.other.append(problem)
        else:
            print(f"{path} passed sanity check.", file=out)
        return
    if length % _TIME_ENTRY.size:
        findings.other.append(f"Time index file {path} is corrupt: its length {length} is not a multiple of "
                              f"{_TIME_ENTRY.size}")
    if not entries:
        print(f"{path} is empty.", file=out)
        return
    log_path = _sibling(path, "log")
    offsets = {o for _, o in entries}
    walk = walk_log(log_path, set(), offsets, record_max_for=offsets, progress_mode=opts.progress)
    if walk.problem:
        findings.other.append(walk.problem[0].upper() + walk.problem[1:])
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
