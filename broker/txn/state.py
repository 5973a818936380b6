"""Transaction metadata and its state machine (Kafka ``TransactionMetadata``, ``TransactionState``).

One :class:`TransactionMetadata` per transactional id. A change is two steps, as in
Kafka: a ``prepare_*`` method checks the transition and returns a :class:`TxnTransit`
(the would-be next metadata) while recording it as the pending state; once the
transit is durable in ``__transaction_state``, :meth:`TransactionMetadata.complete_transition`
applies it (or :meth:`TransactionMetadata.abort_transition` drops it when the write
failed). While a transition is pending, other requests get CONCURRENT_TRANSACTIONS.

States and their byte in the log (Kafka's ids) and the states each may follow
(``VALID_PREVIOUS``, Kafka ``TransactionState.validPreviousStates``)::

    Empty (0)             <- Empty, CompleteCommit, CompleteAbort
    Ongoing (1)           <- Ongoing, Empty, CompleteCommit, CompleteAbort
    PrepareCommit (2)     <- Ongoing
    PrepareAbort (3)      <- Ongoing, PrepareEpochFence
    CompleteCommit (4)    <- PrepareCommit
    CompleteAbort (5)     <- PrepareAbort
    Dead (6)              <- Empty, CompleteCommit, CompleteAbort
    PrepareEpochFence (7) <- Ongoing      (never written to the log)

Invariants: ``partitions`` is empty in Empty, CompleteCommit and CompleteAbort;
``txn_start_timestamp_ms`` is -1 in Empty; the epoch never decreases for one producer
id; an epoch is "exhausted" at ``MAX_PRODUCER_EPOCH - 1`` (32766; the constant lives in
:mod:`records.layout`), after which InitProducerId rotates to a new producer id with epoch 0.

No I/O here: pure state, checked by tests/unit/broker/test_txn_state.py against a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum

from sundial.records.layout import MAX_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID


TopicPartition = tuple[str, int]


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions / ListTransactions use (Kafka ``TransactionState.name``)."""
        return _NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> "TxnState | None":
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {v: k for k, v in _NAMES.items()}

S = TxnState
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

#: States whose transaction is finished or not started (no partitions, can expire).
COMPLETED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class IllegalTransition(Exception):
    """A transition Kafka's table forbids: a coordinator bug, never a client error."""


class TxnError(Exception):
    """A prepare step refused with a Kafka error name (``broker.errors`` maps it)."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


def is_epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """The metadata a transition leads to (Kafka ``TxnTransitMetadata``): what gets written."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    txn_start_timestamp_ms: int
    txn_last_update_timestamp_ms: int


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp_ms: int = -1
    txn_last_update_timestamp_ms: int = -1
    pending_state: TxnState | None = None
    #: An epoch fence whose log write failed: the next fence does not bump again.
    has_failed_epoch_fence: bool = False
    _pending: TxnTransit | None = None
    _fencing: bool = False

    @classmethod
    def new(cls, transactional_id: str, producer_id: int, txn_timeout_ms: int, now_ms: int) -> "TransactionMetadata":
        """A transactional id seen for the first time: Empty with epoch -1 (bumped to 0 by InitProducerId)."""
        return cls(transactional_id, producer_id, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH,
                   txn_timeout_ms, TxnState.EMPTY, set(), -1, now_ms)

    @classmethod
    def from_transit(cls, transactional_id: str, t: TxnTransit) -> "TransactionMetadata":
        return cls(transactional_id, t.producer_id, t.last_producer_id, t.producer_epoch, t.last_producer_epoch,
                   t.txn_timeout_ms, t.state, set(t.partitions), t.txn_start_timestamp_ms,
                   t.txn_last_update_timestamp_ms)

    # -- queries ------------------------------------------------------------------------------
    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT)

    def snapshot(self) -> TxnTransit:
        return TxnTransit(self.producer_id, self.last_producer_id, self.producer_epoch, self.last_producer_epoch,
                          self.txn_timeout_ms, self.state, frozenset(self.partitions), self.txn_start_timestamp_ms,
                          self.txn_last_update_timestamp_ms)

    # -- transitions --------------------------------------------------------------------------
    def _prepare(self, state: TxnState, **changes) -> TxnTransit:
        if self.pending_state is not None:
            raise IllegalTransition(f"{self.transactional_id}: transition to {state.name} while "
                                    f"{self.pending_state.name} is pending")
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.name} -> {state.name} is not allowed")
        transit = replace(self.snapshot(), state=state, **changes)
        if transit.producer_epoch < 0 and state != S.EMPTY:
            raise IllegalTransition(f"{self.transactional_id}: {state.name} with no producer epoch")
        self.pending_state = state
        self._pending = transit
        return transit

    def prepare_increment_producer_epoch(self, timeout_ms: int, expected_epoch: int | None,
                                         now_ms: int) -> TxnTransit:
        """InitProducerId on a completed transaction: epoch + 1 (KIP-360 rules for ``expected_epoch``)."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransition(f"no more epochs for producer id {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch  # a retry of a bump that succeeded
        else:
            raise TxnError("PRODUCER_FENCED")
        return self._prepare(S.EMPTY, producer_epoch=epoch, last_producer_epoch=last, txn_timeout_ms=timeout_ms,
                             partitions=frozenset(), txn_start_timestamp_ms=-1, txn_last_update_timestamp_ms=now_ms)

    def prepare_producer_id_rotation(self, new_producer_id: int, timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> TxnTransit:
        """The epoch is exhausted: a new producer id with epoch 0."""
        if self.has_pending_transaction:
            raise IllegalTransition("cannot rotate the producer id of a pending transaction")
        return self._prepare(S.EMPTY, producer_id=new_producer_id, last_producer_id=self.producer_id,
                             producer_epoch=0,
                             last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             txn_timeout_ms=timeout_ms, partitions=frozenset(), txn_start_timestamp_ms=-1,
                             txn_last_update_timestamp_ms=now_ms)

    def prepare_fence_producer_epoch(self) -> TxnTransit:
        """InitProducerId (or the timeout) found an Ongoing transaction: bump the epoch to fence, then abort."""
        if self.producer_epoch == MAX_PRODUCER_EPOCH:
            raise IllegalTransition("cannot fence an epoch of Short.MaxValue")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(S.PREPARE_EPOCH_FENCE, producer_epoch=bumped, last_producer_epoch=NO_PRODUCER_EPOCH)

    def prepare_add_partitions(self, added: set[TopicPartition], now_ms: int) -> TxnTransit:
        start = now_ms if self.state in COMPLETED else self.txn_start_timestamp_ms
        return self._prepare(S.ONGOING, partitions=frozenset(self.partitions | set(added)),
                             txn_start_timestamp_ms=start, txn_last_update_timestamp_ms=now_ms)

    def prepare_abort_or_commit(self, state: TxnState, now_ms: int) -> TxnTransit:
        if state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalTransition(f"{state.name} is not a prepare state")
        return self._prepare(state, txn_last_update_timestamp_ms=now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self._prepare(state, partitions=frozenset(), txn_last_update_timestamp_ms=now_ms)

    def prepare_dead(self) -> TxnTransit:
        return self._prepare(S.DEAD, partitions=frozenset())

    def begin_abort_after_fence(self, now_ms: int) -> TxnTransit:
        """The fence's pending state becomes a PrepareAbort at the fenced epoch (Kafka ``endTransaction``
        with ``isFromClient = false`` after ``prepareFenceProducerEpoch``)."""
        if self.pending_state != S.PREPARE_EPOCH_FENCE or self._pending is None:
            raise IllegalTransition("no epoch fence pending")
        fenced_epoch = self._pending.producer_epoch
        self.pending_state = None
        self._pending = None
        self.producer_epoch = fenced_epoch
        self.last_producer_epoch = NO_PRODUCER_EPOCH
        self._fencing = True
        return self._prepare(S.PREPARE_ABORT, txn_last_update_timestamp_ms=now_ms)

    def complete_transition(self, transit: TxnTransit) -> None:
        """Apply a durable transit (Kafka ``completeTransitionTo``)."""
        if self._pending is None or transit is not self._pending:
            raise IllegalTransition(f"{self.transactional_id}: completing a transit that is not pending")
        if transit.state == S.PREPARE_EPOCH_FENCE:
            raise IllegalTransition("an epoch fence is never completed; it becomes PrepareAbort")
        if transit.producer_id == self.producer_id and transit.producer_epoch < self.producer_epoch:
            raise IllegalTransition(f"{self.transactional_id}: epoch would go back from "
                                    f"{self.producer_epoch} to {transit.producer_epoch}")
        self.producer_id = transit.producer_id
        self.last_producer_id = transit.last_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.txn_start_timestamp_ms = transit.txn_start_timestamp_ms
        self.txn_last_update_timestamp_ms = transit.txn_last_update_timestamp_ms
        self.pending_state = None
        self._pending = None
        self.has_failed_epoch_fence = False
        self._fencing = False

    def abort_transition(self) -> None:
        """The write of the pending transit failed: forget it (Kafka ``pendingState = None``)."""
        if self.pending_state == S.PREPARE_EPOCH_FENCE or self._fencing:
            self.has_failed_epoch_fence = True
        self.pending_state = None
        self._pending = None
        self._fencing = False
