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
  (:mod:`tools.dump_txn_index`). Control batches print ``isControl: true`` and, with
  ``--deep-iteration``, ``endTxnMarker: COMMIT|ABORT coordinatorEpoch: N``.

Verification (:mod:`tools.dump_index`). Dumping an index always checks every entry
against the ``.log`` next to it (``--verify-index-only`` checks without printing the entries):

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
import dataclasses
import json
import os
import sys
import uuid
from typing import TextIO

from sundial.broker.groups import schema
from sundial.broker.groups.modern import records as group_records
from sundial.records.batch import last_sequence_of
from sundial.records.codecs import CODEC_NAMES
from sundial.records.framing import iter_file_batches, iter_records
from sundial.records.layout import CONTROL_RECORD_KEY, DELETE_HORIZON_FLAG_MASK, END_TXN_MARKER_VALUE
from sundial.storage.errors import CorruptRecordError, StorageError

from .common import EXIT_FINDINGS, Progress, ToolError, tool_command
from .dump_index import (SEGMENT_KIND_ORDER, TEMP_SUFFIXES, Findings, Options, base_offset_of, dump_offset_index,
                         dump_time_index, segment_kind)
from .dump_txn_index import dump_txn_index

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
                # A directory means the partition's live log: files renamed .deleted (waiting for
                # file.delete.delay.ms), .cleaned or .swap are not part of it (name them to dump them).
                entries = sorted(e for e in os.listdir(name) if segment_kind(e) in SEGMENT_KIND_ORDER
                                 and not e.endswith(TEMP_SUFFIXES))
                if not entries:
                    raise ToolError(f"no segment files in directory {name}")
                # .log first, then its indexes, segment by segment.
                entries.sort(key=lambda e: (e.split(".")[0], SEGMENT_KIND_ORDER[segment_kind(e)]))
                paths.extend(os.path.join(name, e) for e in entries)
            elif os.path.exists(name):
                paths.append(name)
            else:
                raise ToolError(f"file not found: {name}")
    if not paths:
        raise ToolError("no files given")
    return paths


def dump_file(path: str, opts: Options, findings: Findings, out: TextIO) -> None:
    kind = segment_kind(path)
    print(f"Dumping {path}", file=out)
    if kind == "log":
        dump_log_file(path, opts, findings, out)
    elif kind == "index":
        dump_offset_index(path, opts, findings, out)
    elif kind == "timeindex":
        dump_time_index(path, opts, findings, out)
    elif kind == "txnindex":
        if not opts.sanity_only:
            dump_txn_index(path, opts, findings, out, segment_kind, base_offset_of)
    else:
        print(f"Ignoring unknown file {path}", file=sys.stderr)


# -- .log --------------------------------------------------------------------------------------------


def _bytes_text(data: bytes | None, fmt: str) -> str:
    if data is None:
        return "null"
    if fmt == "hex":
        return bytes(data).hex()
    return bytes(data).decode("utf-8", "backslashreplace")


def _batch_line(view) -> str:
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
        seq = last_sequence_of(view.base_sequence, record.offset - view.base_offset) if view.base_sequence >= 0 else -1
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


def _json(value) -> str:
    """A consumer-group record's key or value as JSON, with Kafka's camelCase names
    (``kafka-dump-log.sh --offsets-decoder`` prints these records the same way)."""
    def plain(v):
        if dataclasses.is_dataclass(v):
            return {_camel(f.name): plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, dict):
            return [{"topicId": str(k), "partitions": sorted(p)} for k, p in sorted(v.items(), key=lambda kv: str(kv[0]))]
        if isinstance(v, (tuple, list, frozenset, set)):
            return [plain(x) for x in (sorted(v) if isinstance(v, (frozenset, set)) else v)]
        if isinstance(v, bytes):
            return v.hex()
        if isinstance(v, uuid.UUID):
            return str(v)
        return v
    return json.dumps(plain(value), separators=(",", ":"))


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


def _consumer_group_text(record) -> str:
    try:
        decoded = group_records.decode_record(record.key, record.value)
    except schema.SchemaError as exc:
        return f" key: Error at offset {record.offset}, skipping. {exc}"
    record_type = group_records.record_type_of(record.key)
    key_text = f'{{"type":"{record_type}","data":{_json(decoded.key)}}}'
    if decoded.value is None:
        return f" key: {key_text} payload: <DELETE>"
    return f' key: {key_text} payload: {{"version":"0","data":{_json(decoded.value)}}}'


def _offsets_text(record) -> str:
    if record.key is not None and group_records.is_consumer_group_key(record.key):
        return _consumer_group_text(record)
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
    if opts.sanity_only:
        return                                  # the sanity check reads index files only
    # With only index verification asked for, a .log is checked (CRCs, framing) without printing it.
    quiet = opts.verify_only
    base = base_offset_of(path)
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
