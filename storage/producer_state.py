"""Idempotent-producer state of one partition (Kafka ``ProducerStateManager``).

For every producer id the partition remembers its epoch and the last five batches
appended (first/last sequence, first/last offset, max timestamp). An append from a
client is checked against it (Kafka ``ProducerAppendInfo``):

* epoch older than the stored one → :class:`InvalidProducerEpochError`;
* a new (larger) epoch must start at sequence 0 → :class:`OutOfOrderSequenceError`,
  unless the producer is unknown;
* same epoch: the first sequence must follow the last stored one (with the int32 wrap:
  ``MAX_INT32`` is followed by 0) → else :class:`OutOfOrderSequenceError`; a producer
  with no stored state is accepted at any sequence (Kafka 2.5+);
* a batch equal (same epoch, first and last sequence) to one of the five stored batches
  is a retry: it is not appended and the original offsets are returned.

Appends rebuilt from the log (recovery, follower-like loading) skip the checks.

Transactions (Kafka ``ProducerAppendInfo.appendDataBatch`` / ``appendEndTxnMarker``)
-----------------------------------------------------------------------------------
* A transactional data batch of a producer with no open transaction opens one at the
  batch's first offset (``current_txn_first_offset``); the partition remembers it in
  ``ongoing`` (first offset → :class:`OngoingTxn`). A non-transactional batch from a
  producer with an open transaction → :class:`InvalidTxnStateError` (any origin).
* A control batch (COMMIT/ABORT marker, from the coordinator, a follower append or the log) closes the open
  transaction and yields a :class:`CompletedTxn` (none when the producer had no open
  transaction: the marker is appended anyway). Its epoch older than the producer's →
  :class:`InvalidProducerEpochError`; its coordinator epoch older than the last one
  seen → :class:`TransactionCoordinatorFencedError` (both only logged for a follower's
  append, :attr:`AppendOrigin.REPLICATION`; appends rebuilt from the log are not checked). The producer takes the marker's epoch, coordinator epoch and
  timestamp; a marker adds no batch metadata (no sequence).
* :meth:`last_stable_offset_after` gives the LSO to record with a completed
  transaction: the first offset of the earliest open transaction of another producer,
  else the marker offset + 1. :meth:`first_unstable_offset` is the first offset of the
  earliest open transaction (None when none).
* A producer with an open transaction never expires and is kept by ``truncate_head``.

Snapshot file ``<offset>.snapshot`` (Kafka's format, version 1; all big-endian)::

    version                 int16   = 1
    crc                     uint32  CRC-32C of everything after this field
    producer_entries        int32 count, then per producer:
        producer_id             int64
        epoch                   int16
        last_sequence           int32
        last_offset             int64
        offset_delta            int32   last_offset - first offset of the last batch
        timestamp               int64   max timestamp of the last batch
        coordinator_epoch       int32   last coordinator epoch of a marker (-1: none)
        current_txn_first_offset int64  first offset of the open transaction (-1: none)

A snapshot covers offsets below ``<offset>``. One is written at every roll and at clean
shutdown; after a restart the state is the newest snapshot at or below the log end
offset plus a header-only scan of the batches after it (markers are parsed to close
transactions); open transactions come back from ``current_txn_first_offset``. Like Kafka, a snapshot keeps
only each producer's last batch, so after a restart duplicates are detected against
that batch and whatever the scan re-reads. Producers whose last timestamp is
``producer.id.expiration.ms`` old are dropped.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

import structlog
from crc32c import crc32c

from sundial.records.batch import decrement_sequence
from sundial.records.layout import INT32_MAX, NO_PRODUCER_EPOCH, NO_SEQUENCE

from . import files
from .errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from .origin import AppendOrigin

logger = structlog.get_logger(__name__)

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_VERSION = 1

_HEADER = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")


class CorruptSnapshotError(ValueError):
    """A producer snapshot file that does not parse or fails its CRC."""


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


class CompletedTxn(NamedTuple):
    """A transaction closed by a marker at ``last_offset`` (Kafka ``CompletedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class OngoingTxn(NamedTuple):
    """An open transaction: its producer, first offset and when it started (ms; the append's
    wall clock, or the first batch's max timestamp when rebuilt from the log, or the
    producer's last timestamp when restored from a snapshot)."""

    producer_id: int
    first_offset: int
    start_ms: int


class DuplicateBatch(NamedTuple):
    """An idempotent retry: where the original batch was appended."""

    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp_ms: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def add_batch(self, epoch: int, meta: BatchMetadata) -> None:
        self.maybe_update_epoch(epoch)
        self.batches.append(meta)
        self.last_timestamp_ms = meta.timestamp_ms

    def maybe_update_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def _field(b, name: str, default=None):
    return getattr(b, name, default) if not isinstance(b, dict) else b.get(name, default)


class ProducerStateManager:
    """Per-partition producer table with snapshots (see module doc)."""

    def __init__(self, dir_path: str, producer_id_expiration_ms: int = 86_400_000) -> None:
        self.dir = dir_path
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, OngoingTxn] = {}      # first offset -> open transaction
        self.map_end_offset = 0

    # -- checks on the append path -------------------------------------------------------------------
    def check(self, batches: Iterable, *, origin: AppendOrigin = AppendOrigin.CLIENT, marker=None) -> DuplicateBatch | None:
        """Validate the producer fields of the batches about to be appended.

        Returns a :class:`DuplicateBatch` for an idempotent retry (nothing must be
        appended); raises :class:`InvalidProducerEpochError`,
        :class:`OutOfOrderSequenceError`, :class:`InvalidTxnStateError` or
        :class:`TransactionCoordinatorFencedError`. ``marker`` is the
        :class:`records.control.EndTxnMarker` of a control batch. Nothing is changed;
        call :meth:`update` after the append succeeded.
        """
        pending: dict[int, ProducerEntry] = {}
        for b in batches:
            pid = b.producer_id
            if pid is None or pid < 0:
                continue
            epoch = _field(b, "producer_epoch")
            first_offset = _field(b, "first_offset", -1)
            current = self.producers.get(pid)
            if _field(b, "is_control", False):
                if marker is not None:
                    self._check_marker(pid, current, epoch, marker, first_offset, origin)
                continue
            first_seq = _field(b, "base_sequence")
            last_seq = _field(b, "last_sequence")
            if origin is AppendOrigin.CLIENT and current is not None:
                dup = current.find_duplicate(epoch, first_seq, last_seq)
                if dup is not None:
                    return DuplicateBatch(dup.first_offset, dup.last_offset, dup.timestamp_ms)
            txn_open = (pending[pid] if pid in pending else current)
            if (txn_open is not None and txn_open.current_txn_first_offset >= 0
                    and not _field(b, "is_transactional", False)):
                raise InvalidTxnStateError(f"expected transactional write from producer {pid} at offset "
                                           f"{first_offset}")
            if origin is not AppendOrigin.CLIENT:
                continue
            updated = pending.get(pid)
            if updated is None:
                updated = ProducerEntry(pid, current.producer_epoch if current else NO_PRODUCER_EPOCH,
                                        current_txn_first_offset=current.current_txn_first_offset if current else -1)
                pending[pid] = updated
            current_epoch = current.producer_epoch if current else NO_PRODUCER_EPOCH
            if epoch < updated.producer_epoch:
                raise InvalidProducerEpochError(
                    f"epoch of producer {pid} at offset {first_offset} is {epoch}, which is smaller than the "
                    f"last seen epoch {updated.producer_epoch}")
            if epoch != updated.producer_epoch:
                if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                    raise OutOfOrderSequenceError(
                        f"invalid sequence number for new epoch of producer {pid} at offset {first_offset}: "
                        f"{epoch} (request epoch), {first_seq} (seq. number), {updated.producer_epoch} "
                        "(current producer epoch)")
            else:
                if updated.batches:
                    current_last_seq = updated.last_seq
                elif current is not None and epoch == current.producer_epoch:
                    current_last_seq = current.last_seq
                else:
                    current_last_seq = NO_SEQUENCE
                if not (current_epoch == NO_PRODUCER_EPOCH or _in_sequence(current_last_seq, first_seq)):
                    raise OutOfOrderSequenceError(
                        f"out of order sequence number for producer {pid} at offset {first_offset}: "
                        f"{first_seq} (incoming seq. number), {current_last_seq} (current end sequence number)")
            updated.add_batch(epoch, BatchMetadata(first_seq, last_seq, first_offset,
                                                   _field(b, "last_offset", -1), _field(b, "max_timestamp", -1)))
            if updated.current_txn_first_offset < 0 and _field(b, "is_transactional", False):
                updated.current_txn_first_offset = first_offset
        return None

    @staticmethod
    def _check_marker(pid: int, current: ProducerEntry | None, epoch: int, marker, offset: int,
                      origin: AppendOrigin) -> None:
        if current is None:
            return
        if epoch < current.producer_epoch:
            message = (f"epoch of producer {pid} at offset {offset} is {epoch}, which is smaller than the last seen "
                       f"epoch {current.producer_epoch}")
            if origin is not AppendOrigin.REPLICATION:
                raise InvalidProducerEpochError(message)
            logger.warning("marker_with_old_producer_epoch", reason=message)
        if current.coordinator_epoch > marker.coordinator_epoch:
            message = (f"invalid coordinator epoch for producer {pid} at offset {offset}: "
                       f"{marker.coordinator_epoch} (zombie), {current.coordinator_epoch} (current)")
            if origin is not AppendOrigin.REPLICATION:
                raise TransactionCoordinatorFencedError(message)
            logger.info("marker_with_old_coordinator_epoch", reason=message)

    # -- state changes ------------------------------------------------------------------------------
    def update(self, batches: Iterable, *, marker=None, now_ms: int | None = None) -> list[CompletedTxn]:
        """Record appended batches (client, coordinator or log origin); the transactions they
        completed (the caller indexes aborts, then calls :meth:`complete_txn`)."""
        last = None
        completed = []
        for b in batches:
            last_offset = b.last_offset
            if last_offset is not None and last_offset >= 0:
                last = last_offset
            done = self.apply_batch(b.producer_id, _field(b, "producer_epoch"), _field(b, "base_sequence"),
                                    _field(b, "last_sequence"), _field(b, "first_offset", -1), last_offset,
                                    _field(b, "max_timestamp", -1), _field(b, "is_transactional", False),
                                    _field(b, "is_control", False), marker, now_ms)
            if done is not None:
                completed.append(done)
        if last is not None:
            self.map_end_offset = max(self.map_end_offset, last + 1)
        return completed

    def apply_batch(self, pid, epoch, first_seq, last_seq, first_offset, last_offset, max_timestamp,
                    is_transactional, is_control, marker, now_ms=None) -> CompletedTxn | None:
        """One batch's effect (no checks). A control batch without ``marker`` (no record, or
        not ABORT/COMMIT) changes nothing, as Kafka."""
        if pid is None or pid < 0:
            return None
        entry = self.producers.get(pid)
        if is_control:
            if marker is None:
                return None
            if entry is None:
                entry = self.producers[pid] = ProducerEntry(pid)
            done = None
            if entry.current_txn_first_offset >= 0:
                done = CompletedTxn(pid, entry.current_txn_first_offset, first_offset, marker.is_abort)
            entry.maybe_update_epoch(epoch)
            entry.current_txn_first_offset = -1
            entry.coordinator_epoch = marker.coordinator_epoch
            entry.last_timestamp_ms = max_timestamp
            return done
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid)
        entry.add_batch(epoch, BatchMetadata(first_seq, last_seq, first_offset, last_offset, max_timestamp))
        if is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            start = now_ms if now_ms is not None else max_timestamp
            self.ongoing[first_offset] = OngoingTxn(pid, first_offset, start)
        return None

    def complete_txn(self, txn: CompletedTxn) -> None:
        if self.ongoing.pop(txn.first_offset, None) is None:
            logger.debug("completed_transaction_not_ongoing", producer_id=txn.producer_id,
                         first_offset=txn.first_offset)

    def last_stable_offset_after(self, txn: CompletedTxn) -> int:
        """Kafka ``lastStableOffset(completedTxn)``: the LSO once ``txn`` is complete."""
        for first in sorted(self.ongoing):
            if self.ongoing[first].producer_id != txn.producer_id:
                return first
        return txn.last_offset + 1

    def first_unstable_offset(self) -> int | None:
        return min(self.ongoing) if self.ongoing else None

    def ongoing_transactions(self) -> list[OngoingTxn]:
        """Open transactions, oldest first."""
        return [self.ongoing[k] for k in sorted(self.ongoing)]

    def update_from_view(self, view, marker=None) -> CompletedTxn | None:
        """Record one batch read from the log (a ``records.BatchView``); ``marker`` for control batches."""
        done = None
        if view.magic >= 2:
            base = view.last_offset - view.last_offset_delta
            done = self.apply_batch(view.producer_id, view.producer_epoch, view.base_sequence, view.last_sequence, base,
                                    view.last_offset, view.max_timestamp, view.is_transactional, view.is_control,
                                    marker)
        self.map_end_offset = max(self.map_end_offset, view.last_offset + 1)
        return done

    # -- expiry and truncation ----------------------------------------------------------------------
    def remove_expired(self, now_ms: int) -> int:
        expired = [pid for pid, e in self.producers.items()
                   if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp_ms >= self.producer_id_expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def truncate_head(self, log_start_offset: int) -> None:
        """Forget producers whose last batch lies below the log start offset (Kafka ``truncateHead``);
        a producer with an open transaction stays (its marker is still to come)."""
        gone = [pid for pid, e in self.producers.items()
                if 0 <= e.last_offset < log_start_offset and e.current_txn_first_offset < 0]
        for pid in gone:
            del self.producers[pid]

    def clear(self, map_end_offset: int = 0) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.map_end_offset = map_end_offset

    # -- snapshots ----------------------------------------------------------------------------------
    def snapshot_offsets(self) -> list[int]:
        out = []
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return out
        for name in names:
            parsed = files.parse_segment_file_name(name)
            if parsed is not None and parsed.suffix == files.SNAPSHOT_SUFFIX and not parsed.temp_suffix:
                out.append(parsed.base_offset)
        return sorted(out)

    def encode_snapshot(self) -> bytes:
        body = bytearray(_COUNT.pack(len(self.producers)))
        for pid in sorted(self.producers):
            e = self.producers[pid]
            if e.batches:
                b = e.batches[-1]
                last_seq, last_offset, delta, ts = b.last_seq, b.last_offset, b.last_offset - b.first_offset, b.timestamp_ms
            else:
                last_seq, last_offset, delta, ts = NO_SEQUENCE, -1, 0, e.last_timestamp_ms
            body += _ENTRY.pack(pid, e.producer_epoch, last_seq, last_offset, delta, ts, e.coordinator_epoch,
                                e.current_txn_first_offset)
        return _HEADER.pack(SNAPSHOT_VERSION, crc32c(bytes(body))) + bytes(body)

    @staticmethod
    def decode_snapshot(data: bytes) -> list[ProducerEntry]:
        if len(data) < _HEADER.size + _COUNT.size:
            raise CorruptSnapshotError("snapshot file is too short")
        version, crc = _HEADER.unpack_from(data, 0)
        if version != SNAPSHOT_VERSION:
            raise CorruptSnapshotError(f"snapshot contained an unknown file version {version}")
        body = data[_HEADER.size:]
        if crc32c(body) != crc:
            raise CorruptSnapshotError("snapshot is corrupt (CRC is no longer valid)")
        (count,) = _COUNT.unpack_from(body, 0)
        if count < 0 or _COUNT.size + count * _ENTRY.size != len(body):
            raise CorruptSnapshotError(f"snapshot entry count {count} does not match its size")
        out = []
        for i in range(count):
            pid, epoch, last_seq, last_offset, delta, ts, coord, txn_first = _ENTRY.unpack_from(
                body, _COUNT.size + i * _ENTRY.size)
            e = ProducerEntry(pid, epoch, coordinator_epoch=coord, last_timestamp_ms=ts,
                              current_txn_first_offset=txn_first if txn_first >= 0 else -1)
            if last_offset >= 0:
                e.batches.append(BatchMetadata(decrement_sequence(last_seq, delta) if last_seq >= 0 else NO_SEQUENCE,
                                               last_seq, last_offset - delta, last_offset, ts))
            out.append(e)
        return out

    def take_snapshot(self, offset: int | None = None, *, sync: bool = True) -> str:
        """Write ``<offset>.snapshot`` (default: the map end offset).

        ``sync=False`` (at a roll) leaves durability to the next flush; a torn snapshot
        fails its CRC at load and an older one (or a log scan) is used instead.
        """
        offset = self.map_end_offset if offset is None else offset
        path = files.snapshot_file(self.dir, offset)
        files.write_file_atomically(path, self.encode_snapshot(), sync=sync)
        return path

    def load_latest_snapshot(self, max_offset: int, now_ms: int | None) -> int | None:
        """Load the newest readable snapshot at or below ``max_offset``; its offset or None.

        Snapshots above ``max_offset`` are deleted (they describe truncated data), as are
        corrupt ones (logged).
        """
        self.producers.clear()
        self.ongoing.clear()
        for off in reversed(self.snapshot_offsets()):
            path = files.snapshot_file(self.dir, off)
            if off > max_offset:
                files.remove_quietly(path)
                continue
            try:
                with open(path, "rb") as fh:
                    entries = self.decode_snapshot(fh.read())
            except (OSError, CorruptSnapshotError) as exc:
                logger.warning("producer_snapshot_unreadable", path=path, error=str(exc))
                files.remove_quietly(path)
                continue
            for e in entries:
                if (now_ms is not None and e.current_txn_first_offset < 0
                        and now_ms - e.last_timestamp_ms >= self.producer_id_expiration_ms):
                    continue
                self.producers[e.producer_id] = e
                if e.current_txn_first_offset >= 0:
                    self.ongoing[e.current_txn_first_offset] = OngoingTxn(
                        e.producer_id, e.current_txn_first_offset, e.last_timestamp_ms)
            self.map_end_offset = off
            return off
        return None

    def mark_snapshots_deleted(self, offsets: Iterable[int]) -> list[str]:
        """Rename the snapshots at ``offsets`` (those of segments that are gone) to ``.deleted``
        and return their new paths, for the caller's delayed removal (Kafka
        ``removeAndMarkSnapshotForDeletion``); a snapshot that does not exist is skipped."""
        out = []
        for off in offsets:
            path = files.snapshot_file(self.dir, off)
            try:
                os.rename(path, path + files.DELETED_SUFFIX)
            except FileNotFoundError:
                continue
            out.append(path + files.DELETED_SUFFIX)
        return out

    def delete_snapshots_below(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off < offset:
                files.remove_quietly(files.snapshot_file(self.dir, off))

    def delete_snapshots_above(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off > offset:
                files.remove_quietly(files.snapshot_file(self.dir, off))

    def remove_stray_snapshots(self, segment_bases: Iterable[int]) -> None:
        """Remove the snapshots that are not at a segment's base offset, except the newest one."""
        bases = set(segment_bases)
        for off in self.snapshot_offsets()[:-1]:
            if off not in bases:
                files.remove_quietly(files.snapshot_file(self.dir, off))

    def retain_latest_snapshots(self, keep: int = 2) -> None:
        offs = self.snapshot_offsets()
        for off in offs[:-keep] if keep > 0 else offs:
            files.remove_quietly(files.snapshot_file(self.dir, off))


__all__ = ["ProducerStateManager", "ProducerEntry", "BatchMetadata", "DuplicateBatch", "CorruptSnapshotError",
           "CompletedTxn", "OngoingTxn",
           "decrement_sequence"]
