"""What the cleaner knows of transactions while it walks batches (Kafka ``CleanedTransactionMetadata``).

Used twice per pass by :mod:`storage.cleaner`: while building the offset map (keys of
aborted batches are not mapped) and while rewriting each group of segments (aborted
batches lose their records; markers go once their transaction is gone from the log).

* The aborted transactions overlapping a range come from the log's ``.txnindex`` files
  (``collect``: ``last_offset >= start`` and ``first_offset < upper``); they queue by
  first offset and a producer becomes *ongoing aborted* once a batch reaches that offset.
* A transactional data batch of an ongoing-aborted producer is aborted: it may be
  discarded, and the transaction is noted as having had a batch in this walk. Any other
  transactional data batch marks its producer's transaction *ongoing committed*.
* An ABORT marker ends its producer's ongoing aborted transaction: when a batch of it
  was seen, the marker stays (and the transaction is written to the cleaned segment's
  ``.txnindex``, ``cleaned_index``); otherwise the marker may be discarded. A COMMIT
  marker may be discarded when no batch of its transaction was seen. A control batch
  without records (already emptied) may be discarded. "May be discarded" is the input of
  the marker's delete-horizon rule (:mod:`storage.cleaner_batches`).
"""

from __future__ import annotations

import heapq

from sundial.records.control import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, parse_control_type
from sundial.records.v2 import iter_v2_records

from .txn_index import AbortedTxn


def collect(aborted: list[AbortedTxn], start: int, upper: int) -> list[AbortedTxn]:
    """The entries of ``aborted`` overlapping ``[start, upper)`` (Kafka ``collectAbortedTransactions``)."""
    return [t for t in aborted if t.last_offset >= start and t.first_offset < upper]


class CleanedTransactionMetadata:
    """Transaction state of one cleaner walk (see module doc)."""

    __slots__ = ("_queue", "_committed", "_aborted", "cleaned_index")

    def __init__(self, *, track_index: bool = False) -> None:
        self._queue: list[tuple[int, int, AbortedTxn]] = []
        self._committed: set[int] = set()
        self._aborted: dict[int, list] = {}         # producer id -> [AbortedTxn, last observed batch offset]
        self.cleaned_index: list[AbortedTxn] | None = [] if track_index else None

    def add_aborted(self, txns: list[AbortedTxn]) -> None:
        for t in txns:
            heapq.heappush(self._queue, (t.first_offset, t.last_offset, t))

    def _consume_up_to(self, offset: int) -> None:
        queue = self._queue
        while queue and queue[0][0] <= offset:
            txn = heapq.heappop(queue)[2]
            self._aborted.setdefault(txn.producer_id, [txn, None])

    def on_batch_read(self, view) -> bool:
        """A data batch; True when it belongs to an aborted transaction (discardable)."""
        self._consume_up_to(view.last_offset)
        if not view.is_transactional:
            return False
        ongoing = self._aborted.get(view.producer_id)
        if ongoing is not None:
            ongoing[1] = view.last_offset
            return True
        self._committed.add(view.producer_id)
        return False

    def on_control_batch_read(self, view) -> bool:
        """A control batch; True when it may be discarded (see module doc)."""
        self._consume_up_to(view.last_offset)
        record = next(iter(iter_v2_records(view)), None)
        if record is None:
            return True
        control_type = parse_control_type(record.key)
        pid = view.producer_id
        if control_type == CONTROL_TYPE_ABORT:
            ongoing = self._aborted.pop(pid, None)
            if ongoing is not None and ongoing[1] is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(ongoing[0])
                return False
            return True
        if control_type == CONTROL_TYPE_COMMIT:
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return False


__all__ = ["CleanedTransactionMetadata", "collect"]
