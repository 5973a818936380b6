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
        coordinator_epoch       int32   (-1: Sundial has no transaction coordinator)
        current_txn_first_offset int64  (-1)

A snapshot covers offsets below ``<offset>``. One is written at every roll and at clean
shutdown; after a restart the state is the newest snapshot at or below the log end
offset plus a header-only scan of the batches after it. Like Kafka, a snapshot keeps
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

from . import files
from .errors import InvalidProducerEpochError, OutOfOrderSequenceError

logger = structlog.get_logger(__name__)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 0x7FFFFFFF
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
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(meta)
        self.last_timestamp_ms = meta.timestamp_ms


def decrement_sequence(seq: int, decrement: int) -> int:
    """Kafka ``DefaultRecordBatch.decrementSequence`` (sequences wrap at 2^31)."""
    if seq < decrement:
        return INT32_MAX - (decrement - seq) + 1
    return seq - decrement


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
        self.map_end_offset = 0

    # -- checks on the append path -------------------------------------------------------------------
    def check(self, batches: Iterable, *, origin: str = "client") -> DuplicateBatch | None:
        """Validate the producer fields of the batches about to be appended.

        Returns a :class:`DuplicateBatch` for an idempotent retry (nothing must be
        appended); raises :class:`InvalidProducerEpochError` or
        :class:`OutOfOrderSequenceError`. Nothing is changed; call :meth:`update` after
        the append succeeded.
        """
        pending: dict[int, ProducerEntry] = {}
        for b in batches:
            pid = b.producer_id
            if pid is None or pid < 0:
                continue
            epoch = _field(b, "producer_epoch")
            first_seq = _field(b, "base_sequence")
            last_seq = _field(b, "last_sequence")
            current = self.producers.get(pid)
            if origin == "client" and current is not None:
                dup = current.find_duplicate(epoch, first_seq, last_seq)
                if dup is not None:
                    return DuplicateBatch(dup.first_offset, dup.last_offset, dup.timestamp_ms)
            if origin != "client":
                continue
            updated = pending.get(pid)
            if updated is None:
                updated = ProducerEntry(pid, current.producer_epoch if current else NO_PRODUCER_EPOCH)
                pending[pid] = updated
            current_epoch = current.producer_epoch if current else NO_PRODUCER_EPOCH
            first_offset = _field(b, "first_offset", -1)
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
        return None

    def update(self, batches: Iterable) -> None:
        """Record appended batches (client or log origin)."""
        last = None
        for b in batches:
            pid = b.producer_id
            last_offset = b.last_offset
            if last_offset is not None and last_offset >= 0:
                last = last_offset
            if pid is None or pid < 0:
                continue
            entry = self.producers.get(pid)
            if entry is None:
                entry = self.producers[pid] = ProducerEntry(pid)
            entry.add_batch(_field(b, "producer_epoch"), BatchMetadata(
                _field(b, "base_sequence"), _field(b, "last_sequence"), _field(b, "first_offset", -1),
                last_offset, _field(b, "max_timestamp", -1)))
        if last is not None:
            self.map_end_offset = max(self.map_end_offset, last + 1)

    def update_from_view(self, view) -> None:
        """Record one batch read from the log (a ``records.BatchView`` of magic 2)."""
        if view.magic < 2:
            self.map_end_offset = max(self.map_end_offset, view.last_offset + 1)
            return
        pid = view.producer_id
        if pid >= 0 and not view.is_control:
            entry = self.producers.get(pid)
            if entry is None:
                entry = self.producers[pid] = ProducerEntry(pid)
            base = view.last_offset - view.last_offset_delta
            last_seq = NO_SEQUENCE if view.base_sequence < 0 else (view.base_sequence + view.last_offset_delta) % (1 << 31)
            entry.add_batch(view.producer_epoch, BatchMetadata(view.base_sequence, last_seq, base,
                                                               view.last_offset, view.max_timestamp))
        self.map_end_offset = max(self.map_end_offset, view.last_offset + 1)

    # -- expiry and truncation ----------------------------------------------------------------------
    def remove_expired(self, now_ms: int) -> int:
        expired = [pid for pid, e in self.producers.items()
                   if now_ms - e.last_timestamp_ms >= self.producer_id_expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def truncate_head(self, log_start_offset: int) -> None:
        """Forget producers whose last batch lies below the log start offset (Kafka ``truncateHead``)."""
        gone = [pid for pid, e in self.producers.items() if 0 <= e.last_offset < log_start_offset]
        for pid in gone:
            del self.producers[pid]

    def clear(self, map_end_offset: int = 0) -> None:
        self.producers.clear()
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
            body += _ENTRY.pack(pid, e.producer_epoch, last_seq, last_offset, delta, ts, e.coordinator_epoch, -1)
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
            pid, epoch, last_seq, last_offset, delta, ts, coord, _txn = _ENTRY.unpack_from(
                body, _COUNT.size + i * _ENTRY.size)
            e = ProducerEntry(pid, epoch, coordinator_epoch=coord, last_timestamp_ms=ts)
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
                if now_ms is not None and now_ms - e.last_timestamp_ms >= self.producer_id_expiration_ms:
                    continue
                self.producers[e.producer_id] = e
            self.map_end_offset = off
            return off
        return None

    def delete_snapshots_below(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off < offset:
                files.remove_quietly(files.snapshot_file(self.dir, off))

    def delete_snapshots_above(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off > offset:
                files.remove_quietly(files.snapshot_file(self.dir, off))

    def retain_latest_snapshots(self, keep: int = 2) -> None:
        offs = self.snapshot_offsets()
        for off in offs[:-keep] if keep > 0 else offs:
            files.remove_quietly(files.snapshot_file(self.dir, off))


__all__ = ["ProducerStateManager", "ProducerEntry", "BatchMetadata", "DuplicateBatch", "CorruptSnapshotError",
           "decrement_sequence"]
