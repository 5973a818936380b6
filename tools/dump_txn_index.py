"""``sundial dump-log`` for ``.txnindex`` files: print the aborted transactions and verify them.

Output, as kafka-dump-log.sh: one line per entry,
``version: 0 producerId: P firstOffset: F lastOffset: L lastStableOffset: S``.
Format (34-byte entries) in :mod:`storage.txn_index`.

Verification (beyond Kafka's tool): the entries are rebuilt from the ``.log`` files of
the same directory, scanned in offset order from the first segment — a transactional
data batch opens its producer's transaction, a COMMIT/ABORT control batch closes it,
and an ABORT of an open transaction gives ``(producer, first offset, marker offset, LSO
after it)`` for the segment holding the marker — and compared with the file. An entry
whose transaction began before the first segment (removed by retention) is checked for
its producer and marker only, and its LSO only when no such older transaction can still
be open. Differences, an unreadable entry or a torn tail are problems (exit code 3).
"""

from __future__ import annotations

import os
from typing import TextIO

from sundial.records.control import CONTROL_TYPE_ABORT, read_end_txn_marker
from sundial.records.framing import iter_file_batches
from sundial.records.index_entries import ABORTED_TXN, ABORTED_TXN_SIZE

from .common import ToolError

_ENTRY_BYTES = ABORTED_TXN_SIZE


def read_txn_index(path: str) -> tuple[list[tuple[int, int, int, int, int]], int]:
    """(entries (version, pid, first, last, lso), trailing bytes that are not a whole entry)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror or exc}") from None
    whole = len(raw) - len(raw) % _ENTRY_BYTES
    return [ABORTED_TXN.unpack_from(raw, p) for p in range(0, whole, _ENTRY_BYTES)], len(raw) - whole


def rebuild_directory(directory: str, kind_of, base_of) -> tuple[dict[int, list[tuple]], int]:
    """Aborted transactions per segment base rebuilt from the ``.log`` files of ``directory``;
    also the first segment's base offset. Entries with an unknown first offset have first -1."""
    bases = sorted(base_of(n) for n in os.listdir(directory) if kind_of(n) == "log" and n.endswith(".log"))
    out: dict[int, list[tuple]] = {b: [] for b in bases}
    open_first: dict[int, int] = {}
    closed: set[int] = set()
    for base in bases:
        path = os.path.join(directory, f"{base:020d}.log")
        fd = os.open(path, os.O_RDONLY)
        try:
            for view in iter_file_batches(fd, 0, os.fstat(fd).st_size):
                pid = view.producer_id if view.magic >= 2 else -1
                if pid < 0:
                    continue
                if not view.is_control:
                    if view.is_transactional and pid not in open_first:
                        open_first[pid] = view.base_offset
                    continue
                marker = read_end_txn_marker(view)
                if marker is None:
                    continue
                first = open_first.pop(pid, None)
                if first is None and (pid in closed or bases[0] == 0):
                    continue                          # a marker without an open transaction
                closed.add(pid)
                if marker.control_type == CONTROL_TYPE_ABORT:
                    others = [f for p, f in open_first.items() if p != pid]
                    lso = min(others) if others else view.base_offset + 1
                    out[base].append((pid, -1 if first is None else first, view.base_offset, lso))
        finally:
            os.close(fd)
    return out, bases[0] if bases else 0


def dump_txn_index(path: str, opts, findings, out: TextIO, kind_of, base_of) -> None:
    entries, torn = read_txn_index(path)
    if not opts.verify_only:
        for version, pid, first, last, lso in entries:
            print(f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
                  f"lastStableOffset: {lso}", file=out)
    if torn:
        findings.other.append(f"{path}: {torn} trailing bytes are not a whole 34-byte entry")
    for version, pid, first, last, lso in entries:
        if version != 0:
            findings.other.append(f"{path}: unexpected aborted transaction version {version} (producer {pid})")
    directory = os.path.dirname(path) or "."
    try:
        rebuilt, _first_base = rebuild_directory(directory, kind_of, base_of)
    except (OSError, ValueError) as exc:
        findings.notes.append(f"{path}: not verified against the log ({exc})")
        return
    base = base_of(path)
    if base not in rebuilt:
        findings.notes.append(f"{path}: no {base:020d}.log next to it; not verified")
        return
    got = [(pid, first, last, lso) for _, pid, first, last, lso in entries]
    uncertain = any(first < 0 for entries_ in rebuilt.values() for _, first, _, _ in entries_)
    i = 0
    for w in rebuilt[base]:
        g = got[i] if i < len(got) else None
        if w[1] < 0 and (g is None or (g[0], g[2]) != (w[0], w[2])):
            continue          # began before the first segment, maybe as an empty transaction: optional
        if g is None:
            findings.other.append(f"{path}: the aborted transaction {w} of the log is not indexed")
            continue
        i += 1
        if not (g[0] == w[0] and g[2] == w[2] and (w[1] < 0 or g[1] == w[1]) and (uncertain or g[3] == w[3])):
            findings.other.append(f"{path}: aborted transaction {g} does not match the log's "
                                  f"(producerId, firstOffset, lastOffset, lastStableOffset) = {w}")
    for g in got[i:]:
        findings.other.append(f"{path}: aborted transaction {g} has no ABORT marker in the log")


__all__ = ["dump_txn_index", "read_txn_index", "rebuild_directory"]
