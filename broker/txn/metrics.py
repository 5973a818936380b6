"""Prometheus series of the transaction coordinator, read at scrape time.

* ``sundial_transactions{state}``: transactional ids per state (Empty, Ongoing,
  PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort; 0 included), what Kafka's
  coordinator holds in ``TransactionStateManager``;
* ``sundial_transactions_committed_total`` / ``sundial_transactions_aborted_total``:
  transactions completed (CompleteCommit / CompleteAbort durable, every marker written);
  aborts include those the client asked for, fences by a new InitProducerId and timeouts;
* ``sundial_transactions_timed_out_total``: Ongoing transactions the timer found past their
  ``transaction.timeout.ms`` and aborted (Kafka logs these; it has no counter);
* ``sundial_transactional_ids_expired_total``: transactional ids removed after
  ``transactional.id.expiration.ms`` of idleness.

The counters are plain integers the coordinator owns (:class:`TxnStats`); :func:`txn_rows`
reads them and the states on the event loop, :class:`TransactionCollector` turns the rows
into families on the scrape thread.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..metrics import RowCollector
from .state import TxnState

#: States a transactional id is reported in (Dead ids are dropped; PrepareEpochFence is only pending).
REPORTED_STATES = (TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT,
                   TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

_COUNTERS = (
    ("committed", "sundial_transactions_committed", "Transactions committed (CompleteCommit written)"),
    ("aborted", "sundial_transactions_aborted", "Transactions aborted (CompleteAbort written): by the client, "
                                                "a fence or a timeout"),
    ("timed_out", "sundial_transactions_timed_out", "Ongoing transactions aborted by the coordinator after their "
                                                    "transaction.timeout.ms"),
    ("expired", "sundial_transactional_ids_expired", "Transactional ids removed after "
                                                     "transactional.id.expiration.ms"),
)


@dataclass(slots=True)
class TxnStats:
    """Counts kept by the transaction coordinator (loop thread only)."""

    committed: int = 0
    aborted: int = 0
    timed_out: int = 0
    expired: int = 0


def txn_rows(coordinator) -> list[tuple]:
    """``(family, labels, value)`` rows of the coordinator's state, taken on the event loop."""
    if coordinator is None:
        return []
    counts = Counter(md.state for md in list(coordinator.txns.values()))
    rows: list[tuple] = [("transactions", (state.kafka_name,), counts.get(state, 0)) for state in REPORTED_STATES]
    stats = coordinator.stats
    rows += [(name, (), getattr(stats, name)) for name, _, _ in _COUNTERS]
    return rows


def _families() -> dict:
    fams = {"transactions": GaugeMetricFamily("sundial_transactions", "Transactional ids by transaction state",
                                              labels=["state"])}
    for name, metric, doc in _COUNTERS:
        fams[name] = CounterMetricFamily(metric, doc)
    return fams


def TransactionCollector(snapshot: Callable[[], list[tuple]]) -> RowCollector:
    """The families above from ``snapshot()`` rows (:func:`txn_rows` run on the loop)."""
    return RowCollector(snapshot, _families)
