"""The partition log's side of transactions: markers, the last stable offset, aborted lists.

Kafka's ``UnifiedLog`` (``lastStableOffset``, ``collectAbortedTransactions``, the
completed-transaction step of ``append``) and ``LogSegment.updateTxnIndex``, as a
collaborator of :class:`storage.log.PartitionLog`. It owns the log's
:class:`~storage.producer_state.ProducerStateManager` and whether it is loaded, reads the
log's :class:`~storage.segments.LogSegments`, and is handed the log start and end offsets
by each call that needs them.

* **Markers.** A control batch may be appended only with origin ``AppendOrigin.COORDINATOR``
  (or by ``append_as_follower``); clients get ``InvalidRecordError`` from the validator. Its one
  record must be an ABORT/COMMIT marker (else ``InvalidRecordError``). After the append,
  every transaction it completed is indexed: an ABORT adds
  ``AbortedTxn(producer_id, first_offset, marker offset, LSO after completion)`` to the
  ``.txnindex`` of the segment holding the marker; then the transaction leaves the
  ongoing set.
* **Last stable offset** = min(high watermark, max(first offset of the oldest open
  transaction, log start offset)); the high watermark when none is open.
* **Aborted transactions of a read** (read_committed Fetch): from the segment holding the
  fetch offset onward, the entries with ``last_offset >= fetch_offset`` and
  ``first_offset < upper_bound``, stopping at the first entry whose LSO reaches the upper
  bound. ``upper_bound`` is the first offset-index entry at or past the end of the bytes
  read (Kafka ``fetchUpperBoundOffset``), else the next segment's base offset, else the
  log end offset.
* **Producer state** is loaded lazily: the newest snapshot at or below the log end
  offset (or, after an unclean shutdown, at or below the first recovered segment) and a
  header scan of the batches after it (markers are parsed).
* **Rebuilding** (recovery of unflushed segments, truncation): :meth:`_index_completed`
  is driven by the producer-state scan of the log, which resets and refills the
  ``.txnindex`` of every segment it rebuilds.
"""

from __future__ import annotations

from typing import NamedTuple

import structlog

from sundial.records.batch import BatchView, last_sequence_of
from sundial.records.control import read_end_txn_marker
from sundial.records.errors import CorruptRecordError, InvalidRecordError
from sundial.records.framing import iter_batches, walk_headers
from sundial.records.layout import CONTROL_FLAG_MASK, MAGIC_V2, TRANSACTIONAL_FLAG_MASK

from .errors import KafkaStorageError
from .origin import AppendOrigin
from .producer_state import CompletedTxn, OngoingTxn, ProducerStateManager
from .segments import LogSegments
from .txn_index import AbortedTxn
from .validator import BatchInfo

logger = structlog.get_logger(__name__)


class AbortedTransaction(NamedTuple):
    """One entry of a Fetch response's ``aborted_transactions`` list."""

    producer_id: int
    first_offset: int


class ProducerDescription(NamedTuple):
    """One producer of the partition, with the fields of Kafka's DescribeProducers answer."""

    producer_id: int
    producer_epoch: int
    last_sequence: int                 # -1 when unknown
    last_timestamp_ms: int             # -1 when unknown
    coordinator_epoch: int             # -1 before any marker
    current_txn_start_offset: int      # -1 when no transaction is open


class LogTransactions:
    """Producer state and transaction bookkeeping of one log (see module doc)."""

    def __init__(self, dir_path: str, topic: str, partition: int, segments: LogSegments,
                 producers: ProducerStateManager, *, rebuild_from: int | None = None) -> None:
        self.dir = dir_path
        self.topic = topic
        self.partition = partition
        self._segments = segments
        self._producers = producers
        self._loaded = False
        self._rebuild_from = rebuild_from   # .txnindex files from here on are rebuilt by the scan

    @property
    def loaded(self) -> bool:
        return self._loaded

    @property
    def producers(self) -> ProducerStateManager:
        """The manager, loaded or not (callers that need it loaded call :meth:`ensure_loaded`)."""
        return self._producers

    def start_empty(self, offset: int) -> None:
        """A new log, or one reset at ``offset``: no producers, nothing to load (snapshots above
        ``offset`` are gone)."""
        self._producers.clear(offset)
        self._loaded = True

    # -- producer state (snapshot + scan) -----------------------------------------------------------------------------
    def ensure_loaded(self, now_ms: int | None, log_start_offset: int, log_end_offset: int) -> None:
        if self._loaded:
            return
        self._loaded = True
        self.load(now_ms, log_start_offset, log_end_offset)

    def load(self, now_ms: int | None, log_start_offset: int, log_end_offset: int) -> None:
        """Snapshot + header scan (markers parsed). After an unclean shutdown the state comes
        from the rebuild of the recovered segments' ``.txnindex`` (:meth:`_rebuild_txn_indexes`)."""
        rebuilt = None
        if self._rebuild_from is not None:
            rebuild_from, self._rebuild_from = self._rebuild_from, None
            rebuilt = self._rebuild_txn_indexes(rebuild_from, log_start_offset)
        psm = self._producers
        scanned = 0
        snap = None if rebuilt is not None else psm.load_latest_snapshot(log_end_offset, now_ms)
        if rebuilt is not None:
            # The rebuild scanned the log up to its end: its state is the state.
            psm.producers, psm.ongoing = rebuilt.producers, rebuilt.ongoing
        elif snap is None:
            # No snapshot (first start of an old directory): scan at most the last two segments.
            start = self._segments[max(0, len(self._segments) - 2)].base_offset
            psm.clear(start)
        else:
            start = snap
        if snap is not None or rebuilt is None:
            scanned = self._scan_producer_state(psm, max(start, log_start_offset), None)
        psm.map_end_offset = log_end_offset
        psm.truncate_head(log_start_offset)
        if now_ms is not None:
            psm.remove_expired(now_ms)
        psm.remove_stray_snapshots(self._segments.base_offsets())
        if scanned:
            logger.info("producer_state_loaded", topic=self.topic, partition=self.partition,
                        snapshot_offset=snap, batches_scanned=scanned, producers=len(psm.producers))

    def _rebuild_txn_indexes(self, rebuild_from: int, log_start_offset: int) -> ProducerStateManager:
        """Kafka ``LogSegment.recover``'s producer-state and transaction-index part: producer
        state as of the newest snapshot at or below ``rebuild_from`` (else the log start; newer
        snapshots are deleted), then a scan to the log end that refills the ``.txnindex`` of
        every segment from ``rebuild_from`` on (reset first). Returns that state."""
        psm = ProducerStateManager(self.dir, self._producers.producer_id_expiration_ms)
        # Snapshots above the first recovered segment may describe data the crash lost (Kafka's
        # recovery deletes them too): the state comes from the one at or below it plus the scan.
        snap = psm.load_latest_snapshot(rebuild_from, None)
        start = log_start_offset if snap is None else max(snap, log_start_offset)
        if snap is None:
            psm.clear(start)
        for seg in self._segments:
            if seg.base_offset >= rebuild_from:
                seg.txn_index.reset()
        self._scan_producer_state(psm, start, rebuild_from)
        logger.info("txn_indexes_rebuilt", topic=self.topic, partition=self.partition, from_offset=rebuild_from,
                    scanned_from=start, aborted=sum(len(s.txn_index.entries()) for s in self._segments
                                                    if s.base_offset >= rebuild_from))
        return psm

    def _scan_producer_state(self, psm, start: int, index_from: int | None) -> int:
        """Feed ``psm`` the batches from ``start`` to the log end; aborts whose marker is at or
        above ``index_from`` are appended to their segment's ``.txnindex``. Batches scanned."""
        scanned = 0
        for seg in self._segments[self._segments.index_for(start):]:
            if seg.size_bytes == 0 or seg.next_offset <= start:
                continue
            position = seg.offset_index.lookup(start).position if start > seg.base_offset else 0
            if position > seg.size_bytes:
                position = 0
            for h in walk_headers(seg.fd, position, seg.size_bytes, with_producer=True):
                if h.last_offset < start:
                    continue
                scanned += 1
                if h.magic < MAGIC_V2 or h.producer_id < 0:
                    continue
                if h.attributes & CONTROL_FLAG_MASK:
                    view = BatchView(seg.read_batch(h), 0, h.position)
                    try:
                        marker = read_end_txn_marker(view)
                    except (InvalidRecordError, CorruptRecordError) as exc:
                        logger.warning("unreadable_control_batch_skipped", topic=self.topic, partition=self.partition,
                                       offset=h.last_offset, error=str(exc))
                        marker = None
                    done = psm.update_from_view(view, marker)
                    if done is not None:
                        if index_from is not None and done.last_offset >= index_from:
                            self.index_completed([done], seg, psm)
                        else:
                            psm.complete_txn(done)
                    continue
                last_seq = last_sequence_of(h.base_sequence, h.last_offset - h.first_field)
                psm.update([BatchInfo(h.producer_id, h.producer_epoch, h.base_sequence, last_seq,
                                      h.first_field, h.last_offset, h.last_offset - h.first_field + 1,
                                      bool(h.attributes & TRANSACTIONAL_FLAG_MASK), h.max_timestamp)])
        return scanned

    def remove_expired_producers(self, now_ms: int) -> int:
        if not self._loaded:
            return 0
        return self._producers.remove_expired(now_ms)

    def truncate_head(self, log_start_offset: int) -> None:
        """The log start offset moved: forget producers below it (when loaded)."""
        if self._loaded:
            self._producers.truncate_head(log_start_offset)

    # -- markers ---------------------------------------------------------------------------------
    @staticmethod
    def marker_of(records, origin: AppendOrigin):
        """The EndTxnMarker of a control batch in ``records`` (None when there is none)."""
        for view in iter_batches(records):
            if view.magic >= 2 and view.is_control:
                marker = read_end_txn_marker(view)
                if marker is None:
                    raise InvalidRecordError("a control batch must hold one ABORT or COMMIT marker")
                return marker
        return None

    def index_abort_before_append(self, v, marker, segment) -> bool:
        """Write the ``.txnindex`` entry of an ABORT marker about to be appended (True when done).

        Written before the marker, so a failed index write (disk full) fails the append
        with nothing in the log; the caller removes the entry if the marker's own write
        then fails. Never is a marker in the log without its entry.
        """
        if marker is None or not marker.is_abort:
            return False
        info = next((b for b in v.batches if b.is_control), None)
        entry = self._producers.producers.get(info.producer_id) if info is not None else None
        if entry is None or entry.current_txn_first_offset < 0:
            return False
        txn = CompletedTxn(info.producer_id, entry.current_txn_first_offset, info.first_offset, True)
        lso = self._producers.last_stable_offset_after(txn)
        segment.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))
        return True

    def index_completed(self, completed: list[CompletedTxn], segment=None, psm=None, *,
                         indexed: bool = False) -> None:
        """Record completed transactions: aborts into the marker's segment ``.txnindex`` (unless
        ``indexed`` before the append), then out of the open set."""
        psm = self._producers if psm is None else psm
        for txn in completed:
            if txn.is_aborted and not indexed:
                seg = segment if segment is not None else self._segments[self._segments.index_for(txn.last_offset)]
                lso = psm.last_stable_offset_after(txn)
                try:
                    seg.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))
                except ValueError as exc:   # already indexed (a rebuild over an intact index)
                    logger.warning("txn_index_entry_skipped", topic=self.topic, partition=self.partition,
                                   error=str(exc))
            psm.complete_txn(txn)

    # -- offsets (producer state loaded by the caller) -------------------------------------------------------------
    def first_unstable_offset(self, log_start_offset: int) -> int | None:
        first = self._producers.first_unstable_offset()
        if first is None:
            return None
        return max(first, log_start_offset)

    def ongoing_transactions(self) -> list[OngoingTxn]:
        """Open transactions (producer id, first offset, start ms), oldest first."""
        return self._producers.ongoing_transactions()

    def describe_producers(self) -> list[ProducerDescription]:
        """Every producer the partition knows (Kafka ``activeProducers``), by producer id."""
        return [ProducerDescription(pid, e.producer_epoch, e.last_seq, e.last_timestamp_ms, e.coordinator_epoch,
                                    e.current_txn_first_offset)
                for pid, e in sorted(self._producers.producers.items())]

    def describe_producer(self, producer_id: int) -> ProducerDescription | None:
        """One producer of :meth:`describe_producers`, None when the partition does not know it."""
        e = self._producers.producers.get(producer_id)
        if e is None:
            return None
        return ProducerDescription(producer_id, e.producer_epoch, e.last_seq, e.last_timestamp_ms,
                                   e.coordinator_epoch, e.current_txn_first_offset)

    # -- reads -----------------------------------------------------------------------------------
    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTransaction]:
        """Kafka ``collectAbortedTransactions`` from the segment holding ``fetch_offset``."""
        out: list[AbortedTransaction] = []
        segments = self._segments
        i = segments.index_for(fetch_offset)
        try:
            while i < len(segments):
                found, complete = segments[i].txn_index.collect_aborted(fetch_offset, upper_bound_offset)
                out.extend(AbortedTransaction(t.producer_id, t.first_offset) for t in found)
                if complete:
                    break
                i += 1
        except OSError as exc:
            raise KafkaStorageError.from_os_error(exc, f"cannot read transaction index of {self.topic}-"
                                                       f"{self.partition}") from exc
        return out

    def fetch_upper_bound(self, segment_index: int, position: int, size: int, log_end_offset: int) -> int:
        seg = self._segments[segment_index]
        found = seg.offset_index.fetch_upper_bound_offset(position, size)
        if found is not None:
            return found.offset
        if segment_index + 1 < len(self._segments):
            return self._segments[segment_index + 1].base_offset
        return log_end_offset

    def position_limit(self, segment_index: int, max_offset: int) -> int | None:
        """File position in segment ``segment_index`` where offset ``max_offset`` starts (None: no limit)."""
        seg = self._segments[segment_index]
        if max_offset >= seg.next_offset:
            return None
        header = seg.translate_offset(max_offset)
        return seg.size_bytes if header is None else header.position


__all__ = ["LogTransactions", "AbortedTransaction", "ProducerDescription"]
