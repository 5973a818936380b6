"""Helpers shared by the storage log tests: configs, batches and a brute-force model."""

from __future__ import annotations

import dataclasses
import os

from sundial.config.defs import LONG_MAX
from sundial.config.topic import TopicConfig
from sundial.records.builder import SimpleRecord, build_records

NOW_MS = 1_700_000_000_000


def topic_config(**overrides) -> TopicConfig:
    """A TopicConfig with unbounded timestamps (tests use arbitrary ones) plus ``overrides``."""
    base = dict(message_timestamp_before_max_ms=LONG_MAX, message_timestamp_after_max_ms=LONG_MAX,
                file_delete_delay_ms=0)
    base.update(overrides)
    return dataclasses.replace(TopicConfig(), **base)


def batch(timestamps, *, magic: int = 2, value_size: int = 10, compression: int = 0, base_offset: int = 0,
          producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1, keys=None,
          partition_leader_epoch: int = -1) -> bytes:
    """One batch (or legacy message set) holding one record per timestamp."""
    records = [SimpleRecord(ts, None if keys is None else keys[i], b"v" * value_size)
               for i, ts in enumerate(timestamps)]
    return build_records(magic, records, base_offset=base_offset, compression=compression,
                         producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                         partition_leader_epoch=partition_leader_epoch).buffer


class ProducerSequences:
    """The next base sequence of each producer id, for tests that append producers' batches themselves."""

    def __init__(self) -> None:
        self.next: dict[int, int] = {}

    def batch(self, records: list[SimpleRecord], producer_id: int, *, transactional: bool = True) -> bytes:
        """``records`` as one v2 batch of ``producer_id`` (epoch 0) at its next sequence, or a batch
        of no producer for a negative id."""
        if producer_id < 0:
            return build_records(2, records).buffer
        sequence = self.next.get(producer_id, 0)
        self.next[producer_id] = sequence + len(records)
        return build_records(2, records, producer_id=producer_id, producer_epoch=0, base_sequence=sequence,
                             is_transactional=transactional).buffer


def brute_force_search(records: list[tuple[int, int]], target_ms: int, log_start_offset: int = 0):
    """Kafka's answer by brute force, given (offset, timestamp) of every record in offset order.

    The first segment whose largest timestamp >= target is not modelled here: callers give
    the records of the whole log only when every segment is searched the same way, or use
    :func:`brute_force_search_segments`.
    """
    for offset, ts in records:
        if ts >= target_ms and offset >= log_start_offset:
            return offset, ts
    return None


def brute_force_search_segments(segments: list[list[tuple[int, int]]], target_ms: int, log_start_offset: int,
                                mtimes: list[int] | None = None):
    """Kafka's two-step answer: the first segment whose largest timestamp (max record
    timestamp, else mtime) >= target, then the first record >= target with offset >= LSO in it."""
    for i, seg in enumerate(segments):
        largest = max((ts for _, ts in seg), default=-1)
        if largest < 0 and mtimes is not None:
            largest = mtimes[i]
        if largest >= target_ms:
            for offset, ts in seg:
                if ts >= target_ms and offset >= log_start_offset:
                    return offset, ts
            return None
    return None


def files_in(path) -> set[str]:
    return set(os.listdir(path))
