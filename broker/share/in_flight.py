"""One in-flight record batch of a share-partition (Kafka ``InFlightBatch`` and ``InFlightState``).

Records are acquired as whole record batches of the log where possible, and a batch keeps one
state for all its offsets (state, delivery count, holding member, acquisition lock) for as long as
its offsets move together. When they part (an acknowledgement of some of its offsets, a fetch that
takes only some of them, a record limit, the start offset moving into it) the batch is *split*:
from then on each offset has its own state, started as a copy of the batch's, and the batch stays
split until the start offset passes it. Which representation a batch has is visible to clients:
an acquisition of a split batch answers one range per offset, as Kafka does.
"""

from __future__ import annotations

from enum import Enum
from typing import Iterator

from .locks import AcquisitionLocks, LockTimer
from .state_batch import RecordState, valid_transition

#: The member id of a record no member holds (Kafka ``SharePartition.EMPTY_MEMBER_ID``).
EMPTY_MEMBER_ID = ""


class DeliveryCountOps(Enum):
    """What a state transition does to the delivery count (Kafka ``DeliveryCountOps``)."""

    INCREASE = 1
    DECREASE = -1
    NO_OP = 0


class InFlightState:
    """State, delivery count, holder and acquisition lock of a batch or of one offset."""

    __slots__ = ("state", "delivery_count", "member_id", "lock")

    def __init__(self, state: RecordState, delivery_count: int, member_id: str = EMPTY_MEMBER_ID,
                 lock: LockTimer | None = None) -> None:
        self.state = state
        self.delivery_count = delivery_count
        self.member_id = member_id
        self.lock = lock

    def try_update(self, new_state: RecordState, ops: DeliveryCountOps, max_delivery_count: int,
                   member_id: str) -> bool:
        """Kafka ``InFlightState.tryUpdateState``: move to ``new_state`` if the transition is valid.

        A record made AVAILABLE again whose delivery count has reached ``max_delivery_count`` is
        archived instead, except when the count is being decreased (records released because their
        member left were fetched, not delivered). An archived record keeps its delivery count.
        Nothing changes when the transition is invalid (False).
        """
        if (new_state is RecordState.AVAILABLE and ops is not DeliveryCountOps.DECREASE
                and self.delivery_count >= max_delivery_count):
            new_state = RecordState.ARCHIVED
        if not valid_transition(self.state, new_state):
            return False
        self.state = new_state
        if new_state is not RecordState.ARCHIVED:
            self.delivery_count += ops.value
        self.member_id = member_id
        return True

    def archive(self) -> None:
        """Kafka ``InFlightState.archive``: ARCHIVED whatever the state, lock cancelled."""
        self.state = RecordState.ARCHIVED
        self.member_id = EMPTY_MEMBER_ID
        self.cancel_lock()

    def set_lock(self, lock: LockTimer) -> None:
        if self.lock is not None and not self.lock.cancelled:
            raise ValueError(f"{self} already has a live acquisition lock")
        self.lock = lock

    def cancel_lock(self) -> None:
        if self.lock is not None:
            self.lock.cancel()
            self.lock = None

    def saved(self) -> tuple[RecordState, int, str]:
        """What :meth:`restore` puts back (the lock is not part of it: Kafka's rollback keeps it)."""
        return self.state, self.delivery_count, self.member_id

    def restore(self, saved: tuple[RecordState, int, str]) -> None:
        self.state, self.delivery_count, self.member_id = saved

    def __repr__(self) -> str:
        return f"InFlightState({self.state.name}, {self.delivery_count}, {self.member_id!r})"


class InFlightBatch:
    """Offsets ``first_offset..last_offset`` of the log, tracked whole or per offset."""

    __slots__ = ("first_offset", "last_offset", "_batch_state", "_offset_states")

    def __init__(self, first_offset: int, last_offset: int, state: InFlightState) -> None:
        if last_offset < first_offset:
            raise ValueError(f"empty in-flight batch {first_offset}-{last_offset}")
        self.first_offset = first_offset
        self.last_offset = last_offset
        self._batch_state: InFlightState | None = state
        self._offset_states: dict[int, InFlightState] | None = None

    @property
    def is_split(self) -> bool:
        return self._offset_states is not None

    @property
    def batch_state(self) -> InFlightState:
        """The state of the whole batch; only for a batch that is not split."""
        if self._batch_state is None:
            raise ValueError(f"batch {self.first_offset}-{self.last_offset} is tracked per offset")
        return self._batch_state

    @property
    def offset_states(self) -> dict[int, InFlightState]:
        """Offset → state, in offset order; only for a split batch."""
        if self._offset_states is None:
            raise ValueError(f"batch {self.first_offset}-{self.last_offset} is tracked whole")
        return self._offset_states

    def split(self, locks: AcquisitionLocks) -> None:
        """Track this batch per offset from now on (Kafka ``maybeInitializeOffsetStateUpdate()``):
        each offset starts as a copy of the batch's state; an acquired batch's lock becomes one lock
        per offset with the same deadline."""
        if self._offset_states is not None:
            return
        whole = self.batch_state
        lock = whole.lock
        states: dict[int, InFlightState] = {}
        for offset in range(self.first_offset, self.last_offset + 1):
            per_offset = None
            if lock is not None:
                per_offset = locks.schedule(whole.member_id, offset, offset, lock.deadline_ms)
            states[offset] = InFlightState(whole.state, whole.delivery_count, whole.member_id, per_offset)
        whole.cancel_lock()
        self._offset_states = states
        self._batch_state = None

    def split_acquired_prefix(self, last_acquired: int, locks: AcquisitionLocks, deadline_ms: int) -> None:
        """Split a newly acquired batch of which only ``first_offset..last_acquired`` are taken
        (Kafka ``maybeInitializeOffsetStateUpdate(targetOffset, delayMs)``, record-limit mode): those
        keep the batch's state under a lock each; the rest are AVAILABLE with one delivery less."""
        whole = self.batch_state
        states: dict[int, InFlightState] = {}
        for offset in range(self.first_offset, self.last_offset + 1):
            if offset <= last_acquired:
                lock = locks.schedule(whole.member_id, offset, offset, deadline_ms)
                states[offset] = InFlightState(whole.state, whole.delivery_count, whole.member_id, lock)
            else:
                states[offset] = InFlightState(RecordState.AVAILABLE, whole.delivery_count - 1)
        whole.cancel_lock()
        self._offset_states = states
        self._batch_state = None

    def ranges(self) -> Iterator[tuple[int, int, InFlightState]]:
        """(first, last, state): the whole batch once, or each offset of a split batch."""
        if self._offset_states is None:
            yield self.first_offset, self.last_offset, self.batch_state
        else:
            for offset, state in self._offset_states.items():
                yield offset, offset, state

    def __repr__(self) -> str:
        inner = self._batch_state if self._offset_states is None else f"{len(self._offset_states)} offsets"
        return f"InFlightBatch({self.first_offset}-{self.last_offset}, {inner})"
