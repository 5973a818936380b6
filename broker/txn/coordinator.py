"""The transaction coordinator (Kafka ``TransactionCoordinator`` + the marker part of
``TransactionMarkerChannelManager``), for one node.

Request flow, as Kafka 3.x without KIP-890 (transaction version 0):

* **InitProducerId** with a transactional id: a new id gets a fresh producer id at epoch
  -1 in memory and is bumped to epoch 0; a completed transaction bumps the epoch (a
  fresh producer id with epoch 0 when the epoch is exhausted); an Ongoing transaction
  is fenced (epoch + 1, PrepareEpochFence), aborted at the new epoch and the request
  answered CONCURRENT_TRANSACTIONS so the client retries (and bumps again). KIP-360:
  a request carrying producer id/epoch is checked (PRODUCER_FENCED when it is not the
  current id or, for an exhausted epoch, the previous one).
* **AddPartitionsToTxn / AddOffsetsToTxn** move to Ongoing with the union of partitions
  (already-added partitions of an Ongoing transaction answer at once).
* **EndTxn**: PrepareCommit/PrepareAbort is made durable and the client answered; the
  markers are then written to every partition of the transaction (the control batches
  carry the producer id, epoch and the coordinator epoch); once all are durable,
  CompleteCommit/CompleteAbort is written. Until then the transaction's pending state
  answers CONCURRENT_TRANSACTIONS to further requests of that transactional id.
  Partitions whose topic was deleted are dropped from the marker set, as Kafka's
  marker channel does on UNKNOWN_TOPIC_OR_PARTITION.
* **Timers**: every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``
  Ongoing transactions older than their timeout are fenced and aborted (the producer's
  epoch is bumped, so it is fenced); every
  ``transaction.remove.expired.transaction.cleanup.interval.ms`` completed
  transactional ids idle for ``transactional.id.expiration.ms`` are tombstoned.
* **Load**: at start the metadata of every transactional id is read from
  ``__transaction_state``; a transaction found in PrepareCommit/PrepareAbort has its
  markers written again (they are idempotent for the partition's producer state).

Collaborators, so the class can be tested alone: ``log`` (:class:`broker.txn.log.TransactionLog`
or a stand-in with ``exists``, ``ensure_topic``, ``load``, ``write``), ``markers`` (an
object with ``async write_markers(producer_id, producer_epoch, coordinator_epoch, commit,
partitions) -> dict[(topic, partition), ErrorCode]``) and ``producer_ids``
(``next_id()``). Offsets added with AddOffsetsToTxn live in a ``__consumer_offsets``
partition of the transaction: the markers written there complete the pending group
offsets (the groups offset manager's part).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import structlog

from sundial.config.components import TransactionConfig
from sundial.protocol.errors import ErrorCode

from .log import COORDINATOR_EPOCH
from .metrics import TxnStats
from .state import (
    COMPLETED,
    IllegalTransition,
    TopicPartition,
    TransactionMetadata,
    TxnError,
    TxnState,
    TxnTransit,
    is_epoch_exhausted,
)

logger = structlog.get_logger(__name__)

S = TxnState
#: Backoff between marker write attempts that failed (Kafka retries markers until they land).
MARKER_RETRY_BACKOFF_MS = 100


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class TransactionCoordinator:
    def __init__(self, config: TransactionConfig, log, markers, producer_ids, *, now_ms: Callable[[], int] = _wall_clock_ms,
                 run_timers: bool = True) -> None:
        self.config = config
        self.log = log
        self.markers = markers
        self.producer_ids = producer_ids
        self.now_ms = now_ms
        self.max_timeout_ms = config.max_timeout_ms
        self.abort_interval_ms = config.abort_timed_out_cleanup_interval_ms
        self.expire_interval_ms = config.remove_expired_cleanup_interval_ms
        self.expiration_ms = config.transactional_id_expiration_ms
        self.txns: dict[str, TransactionMetadata] = {}
        self.active = False
        self.loading = False
        self._run_timers = run_timers
        self._tasks: list[asyncio.Task] = []
        self._background: set[asyncio.Task] = set()
        self._stopping = False
        #: Completed, timed-out and expired counts (read by :mod:`broker.txn.metrics`).
        self.stats = TxnStats()

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        self.loading = True
        t0 = time.monotonic()
        self.txns = self.log.load()
        self.loading = False
        self.active = True
        resumed = 0
        for md in self.txns.values():
            if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                self._begin_markers(md)
                resumed += 1
        logger.info("transaction_coordinator_started", transactional_ids=len(self.txns), resumed=resumed,
                    seconds=round(time.monotonic() - t0, 3))
        if self._run_timers:
            loop = asyncio.get_running_loop()
            self._tasks.append(loop.create_task(self._periodic(self.abort_interval_ms, self.abort_timed_out),
                                                name="txn-abort-timed-out"))
            self._tasks.append(loop.create_task(self._periodic(self.expire_interval_ms, self.remove_expired),
                                                name="txn-remove-expired"))

    async def stop(self) -> None:
        self._stopping = True
        self.active = False
        tasks = [*self._tasks, *self._background]
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _periodic(self, interval_ms: int, job) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await job()
            except Exception:
                logger.exception("transaction_timer_failed", job=job.__name__)

    def coordinator_error(self) -> ErrorCode | None:
        """COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE while not serving, else None."""
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return None

    def ensure_topic(self) -> None:
        """Create ``__transaction_state`` if needed (FindCoordinator for a transaction key does this)."""
        self.log.ensure_topic()

    # -- writes ---------------------------------------------------------------------------------
    async def _write(self, md: TransactionMetadata, transit: TxnTransit) -> ErrorCode:
        """Make the transit durable, then apply it; on failure drop the pending transition."""
        try:
            self.log.ensure_topic()
            error = await self.log.write(md.transactional_id, transit)
        except Exception as exc:  # storage failure of any kind: the client retries with the coordinator
            logger.error("transaction_log_write_failed", transactional_id=md.transactional_id, error=str(exc))
            error = ErrorCode.NOT_COORDINATOR
        if error != ErrorCode.NONE:
            md.abort_transition()
            return error
        md.complete_transition(transit)
        return ErrorCode.NONE

    def valid_timeout(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.max_timeout_ms

    # -- InitProducerId ------------------------------------------------------------------------
    async def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_producer_id: int = -1,
                               expected_epoch: int = -1) -> InitResult:
        if transactional_id == "":
            return InitResult(ErrorCode.INVALID_REQUEST)
        if not self.valid_timeout(timeout_ms):
            return InitResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        if (err := self.coordinator_error()) is not None:
            return InitResult(err)
        now = self.now_ms()
        md = self.txns.get(transactional_id)
        if md is None:
            md = TransactionMetadata.new(transactional_id, self.producer_ids.next_id(), timeout_ms, now)
            self.txns[transactional_id] = md
        expected = (expected_producer_id, expected_epoch) if expected_producer_id >= 0 else None
        try:
            transit = self._prepare_init(md, timeout_ms, expected, now)
        except TxnError as exc:
            return InitResult(ErrorCode[exc.error])
        if transit.state == S.PREPARE_EPOCH_FENCE:
            error = await self._end(md, transit.producer_id, transit.producer_epoch, commit=False, from_client=False)
            if md.pending_state == S.PREPARE_EPOCH_FENCE:
                md.abort_transition()
            logger.info("transaction_fenced_by_init", transactional_id=transactional_id,
                        producer_id=transit.producer_id, producer_epoch=transit.producer_epoch, error=error.name)
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS if error == ErrorCode.NONE else error)
        error = await self._write(md, transit)
        if error != ErrorCode.NONE:
            return InitResult(error)
        logger.info("transactional_producer_initialized", transactional_id=transactional_id,
                    producer_id=md.producer_id, producer_epoch=md.producer_epoch)
        return InitResult(ErrorCode.NONE, md.producer_id, md.producer_epoch)

    def _prepare_init(self, md: TransactionMetadata, timeout_ms: int, expected: tuple[int, int] | None,
                      now: int) -> TxnTransit:
        if md.pending_transition_in_progress:
            raise TxnError("CONCURRENT_TRANSACTIONS")
        if expected is not None:
            pid, epoch = expected
            valid = (md.producer_epoch == -1 or pid == md.producer_id
                     or (pid == md.last_producer_id and is_epoch_exhausted(epoch)))
            if not valid:
                raise TxnError("PRODUCER_FENCED")
        if md.state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            raise TxnError("CONCURRENT_TRANSACTIONS")
        if md.state in COMPLETED:
            if md.is_producer_epoch_exhausted and (expected is None or expected[1] == md.producer_epoch):
                return md.prepare_producer_id_rotation(self.producer_ids.next_id(), timeout_ms, now,
                                                       expected is not None)
            return md.prepare_increment_producer_epoch(timeout_ms, None if expected is None else expected[1], now)
        if md.state == S.ONGOING:
            return md.prepare_fence_producer_epoch()
        raise IllegalTransition(f"{md.transactional_id} found in {md.state.name}")

    # -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------
    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition]) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        if (err := self.coordinator_error()) is not None:
            return err
        md = self.txns.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if md.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if md.pending_transition_in_progress or md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        added = set(partitions)
        if md.state == S.ONGOING and added <= md.partitions:
            return ErrorCode.NONE
        transit = md.prepare_add_partitions(added, self.now_ms())
        return await self._write(md, transit)

    # -- EndTxn ---------------------------------------------------------------------------------
    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              commit: bool) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        if (err := self.coordinator_error()) is not None:
            return err
        md = self.txns.get(transactional_id)
        if md is None:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        return await self._end(md, producer_id, producer_epoch, commit=commit, from_client=True)

    async def _end(self, md: TransactionMetadata, producer_id: int, producer_epoch: int, *, commit: bool,
                   from_client: bool) -> ErrorCode:
        if md.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if (from_client and producer_epoch != md.producer_epoch) or producer_epoch < md.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if md.pending_transition_in_progress and md.pending_state != S.PREPARE_EPOCH_FENCE:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        now = self.now_ms()
        state = md.state
        if state == S.ONGOING:
            if not commit and md.pending_state == S.PREPARE_EPOCH_FENCE:
                transit = md.begin_abort_after_fence(now)
            else:
                transit = md.prepare_abort_or_commit(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now)
        elif state == S.COMPLETE_COMMIT:
            return ErrorCode.NONE if commit else self._invalid_state(md, commit)
        elif state == S.COMPLETE_ABORT:
            return ErrorCode.NONE if not commit else self._invalid_state(md, commit)
        elif state == S.PREPARE_COMMIT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if commit else self._invalid_state(md, commit)
        elif state == S.PREPARE_ABORT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if not commit else self._invalid_state(md, commit)
        elif state == S.EMPTY:
            return self._invalid_state(md, commit)
        else:
            raise IllegalTransition(f"{md.transactional_id} found in {state.name}")
        error = await self._write(md, transit)
        if error != ErrorCode.NONE:
            return error
        logger.info("transaction_ending", transactional_id=md.transactional_id, producer_id=md.producer_id,
                    producer_epoch=md.producer_epoch, result="COMMIT" if commit else "ABORT",
                    partitions=len(md.partitions))
        self._begin_markers(md)
        return ErrorCode.NONE

    @staticmethod
    def _invalid_state(md: TransactionMetadata, commit: bool) -> ErrorCode:
        logger.info("transaction_end_invalid_state", transactional_id=md.transactional_id, state=md.state.name,
                    result="COMMIT" if commit else "ABORT")
        return ErrorCode.INVALID_TXN_STATE

    # -- markers --------------------------------------------------------------------------------
    def _begin_markers(self, md: TransactionMetadata) -> None:
        """PrepareX is durable: reserve the CompleteX transition (pending) and write the markers."""
        commit = md.state == S.PREPARE_COMMIT
        complete = md.prepare_complete(self.now_ms())
        self._spawn(self._send_markers(md, complete, commit, set(md.partitions)))

    async def _send_markers(self, md: TransactionMetadata, complete: TxnTransit, commit: bool,
                            partitions: set[TopicPartition]) -> None:
        remaining = set(partitions)
        attempt = 0
        while remaining and not self._stopping:
            attempt += 1
            try:
                results = await self.markers.write_markers(md.producer_id, md.producer_epoch, COORDINATOR_EPOCH,
                                                           commit, sorted(remaining))
            except Exception as exc:
                logger.error("transaction_markers_failed", transactional_id=md.transactional_id, error=str(exc))
                results = {}
            for tp, code in results.items():
                if code == ErrorCode.NONE:
                    remaining.discard(tp)
                elif code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    logger.info("transaction_marker_partition_gone", transactional_id=md.transactional_id,
                                topic=tp[0], partition=tp[1])
                    remaining.discard(tp)
            if remaining:
                if attempt % 50 == 1:
                    logger.warning("transaction_markers_retrying", transactional_id=md.transactional_id,
                                   partitions=len(remaining), attempt=attempt)
                await asyncio.sleep(MARKER_RETRY_BACKOFF_MS / 1000)
        while not self._stopping:
            error = await self._write(md, complete)
            if error == ErrorCode.NONE:
                if commit:
                    self.stats.committed += 1
                else:
                    self.stats.aborted += 1
                logger.info("transaction_completed", transactional_id=md.transactional_id,
                            producer_id=md.producer_id, producer_epoch=md.producer_epoch,
                            result="COMMIT" if commit else "ABORT", partitions=len(partitions))
                return
            # Kafka retries the CompleteX append until it lands (or the coordinator moves).
            complete = md.prepare_complete(self.now_ms())
            await asyncio.sleep(MARKER_RETRY_BACKOFF_MS / 1000)

    # -- timers ---------------------------------------------------------------------------------
    def timed_out(self, now_ms: int) -> list[TransactionMetadata]:
        return [md for md in self.txns.values()
                if md.state == S.ONGOING and md.pending_state is None
                and md.txn_start_timestamp_ms + md.txn_timeout_ms < now_ms]

    async def abort_timed_out(self) -> int:
        """Fence and abort every Ongoing transaction past its timeout; returns how many were started."""
        if self.coordinator_error() is not None:
            return 0
        started = 0
        for md in self.timed_out(self.now_ms()):
            if md.pending_transition_in_progress or md.state != S.ONGOING:
                continue
            transit = md.prepare_fence_producer_epoch()
            logger.info("transaction_timed_out", transactional_id=md.transactional_id, producer_id=md.producer_id,
                        producer_epoch=md.producer_epoch, timeout_ms=md.txn_timeout_ms)
            error = await self._end(md, transit.producer_id, transit.producer_epoch, commit=False, from_client=False)
            if error == ErrorCode.NONE:
                started += 1
                self.stats.timed_out += 1
            elif md.pending_state == S.PREPARE_EPOCH_FENCE:
                md.abort_transition()
        return started

    async def remove_expired(self) -> int:
        """Tombstone transactional ids idle for ``transactional.id.expiration.ms``; returns how many."""
        if self.coordinator_error() is not None:
            return 0
        now = self.now_ms()
        removed = 0
        for txn_id, md in list(self.txns.items()):
            if md.state not in COMPLETED or md.pending_transition_in_progress:
                continue
            if md.txn_last_update_timestamp_ms + self.expiration_ms > now:
                continue
            md.prepare_dead()
            try:
                error = await self.log.write(txn_id, None)
            except Exception as exc:
                logger.error("transaction_log_write_failed", transactional_id=txn_id, error=str(exc))
                error = ErrorCode.NOT_COORDINATOR
            if error != ErrorCode.NONE:
                md.abort_transition()
                continue
            if self.txns.get(txn_id) is md and md.pending_state == S.DEAD:
                del self.txns[txn_id]
                removed += 1
                self.stats.expired += 1
                logger.info("transactional_id_expired", transactional_id=txn_id, producer_id=md.producer_id)
        return removed

    # -- admin ----------------------------------------------------------------------------------
    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        return self.txns.get(transactional_id)

    def list(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), duration_ms: int = -1
             ) -> tuple[list[str], list[TransactionMetadata]]:
        """(unknown state filters, matching metadata), Kafka ``TransactionStateManager.listTransactionStates``."""
        wanted: set[TxnState] = set()
        unknown: list[str] = []
        for name in states:
            state = TxnState.from_kafka_name(name)
            if state is None:
                unknown.append(name)
            else:
                wanted.add(state)
        if states and not wanted:
            return unknown, []
        pids = set(producer_ids)
        now = self.now_ms()
        out = []
        for md in self.txns.values():
            if md.state == S.DEAD:
                continue
            if wanted and md.state not in wanted:
                continue
            if pids and md.producer_id not in pids:
                continue
            if duration_ms >= 0 and now - md.txn_start_timestamp_ms <= duration_ms:
                continue
            out.append(md)
        return unknown, out
