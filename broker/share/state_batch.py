"""Record states of a share-partition and the state that is persisted (Kafka ``RecordState``,
``PersisterStateBatch``, the ``ShareSnapshot``/``ShareUpdate`` values of ``__share_group_state``).

Every record of a share-partition from its start offset (SPSO) on is in one of four states:

* AVAILABLE (0): may be acquired by the next fetch;
* ACQUIRED (1): handed to one member under an acquisition lock;
* ACKNOWLEDGED (2): accepted by the member that held it; final;
* ARCHIVED (4): rejected, past the delivery-count limit, before the log start offset, or part of an
  aborted transaction; final.

The ids are Kafka's (``RecordState.id``, the ``DeliveryState`` byte of a persisted state batch).
What is persisted is the start offset, the state epoch and the state batches: ranges of offsets
with one state and one delivery count. "The Acquired state is not recorded because it is
transient" (KIP-932): an acquired record is persisted as it was before it was acquired, AVAILABLE
with its delivery count less one, so a restart delivers it again with the same count it was
delivered with. Offsets in no state batch between the start offset and the last state batch were
acquired and never acknowledged: a restarted partition delivers them again too.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable


class RecordState(IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4

    @property
    def is_terminal(self) -> bool:
        """Acknowledged or archived: the record is never delivered again."""
        return self is RecordState.ACKNOWLEDGED or self is RecordState.ARCHIVED


def valid_transition(current: RecordState, new: RecordState) -> bool:
    """Kafka ``RecordState.validateTransition``: AVAILABLE → ACQUIRED, ACQUIRED → any other state;
    nothing leaves ACKNOWLEDGED or ARCHIVED."""
    if current is new or current.is_terminal:
        return False
    if current is RecordState.AVAILABLE:
        return new is RecordState.ACQUIRED
    return True


@dataclass(frozen=True, slots=True)
class StateBatch:
    """Offsets ``first_offset..last_offset`` in one state with one delivery count (Kafka
    ``PersisterStateBatch``; ``StateBatches`` of ``ShareSnapshotValue``/``ShareUpdateValue``)."""

    first_offset: int
    last_offset: int
    delivery_state: RecordState
    delivery_count: int

    @property
    def record_count(self) -> int:
        return self.last_offset - self.first_offset + 1


@dataclass(frozen=True, slots=True)
class StateChange:
    """What one operation asks the share coordinator to write (Kafka ``WriteShareGroupState``): the
    start offset after the operation and the state batches it changed. An operation that changed
    no persisted state has no batches; the start offset may still have moved."""

    start_offset: int
    state_batches: tuple[StateBatch, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareStateSnapshot:
    """The whole persisted state of a share-partition (Kafka ``ShareSnapshotValue``: ``StateEpoch``,
    ``StartOffset``, ``StateBatches``), sorted by offset, non-overlapping."""

    state_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...] = ()


def coalesce(batches: Iterable[StateBatch]) -> tuple[StateBatch, ...]:
    """``batches`` sorted by first offset with neighbours of one state and count merged (offsets
    ``a..b`` and ``b+1..c`` alike become ``a..c``). The batches must not overlap."""
    out: list[StateBatch] = []
    for b in sorted(batches, key=lambda b: b.first_offset):
        if out:
            prev = out[-1]
            if b.first_offset <= prev.last_offset:
                raise ValueError(f"state batches overlap: {prev} and {b}")
            if (prev.last_offset + 1 == b.first_offset and prev.delivery_state is b.delivery_state
                    and prev.delivery_count == b.delivery_count):
                out[-1] = StateBatch(prev.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                continue
        out.append(b)
    return tuple(out)
