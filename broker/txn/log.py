"""The ``__transaction_state`` topic: where transaction metadata is made durable and loaded from.

Layout (Kafka ``TransactionStateManager``): ``transaction.state.log.num.partitions``
partitions (default 50), a transactional id living in partition
``abs(java_hash(id)) % partitions`` (:func:`broker.txn.schema.partition_for`). Topic
settings as Kafka enforces them: ``cleanup.policy=compact``, ``compression.type`` of
records none (the batches are built uncompressed), ``segment.bytes`` =
``transaction.state.log.segment.bytes``; v2 record batches whatever the broker's
message format default. The topic is created when the first transactional request
arrives (Kafka auto-creates it on the first FindCoordinator for a transaction key);
its partition count is fixed from then on, whatever the setting says later (Kafka
uses the partition count the topic has).

Writes go through the broker's normal append path
(:meth:`broker.replica_manager.ReplicaManager.append_one`) and are awaited until fsynced
(:meth:`~broker.replica_manager.ReplicaManager.wait_durable`): a transition is applied
in memory and answered only once it is on disk. Load replays every partition from its
log start offset; the last value of a key wins and a tombstone removes it (what
compaction keeps is exactly that). A record that does not decode is skipped with a
warning; a key of another record type (version != 0) is skipped silently, as Kafka does.

The coordinator epoch written into markers is the leader epoch of the transaction
log partition, as in Kafka; this node leads every partition at epoch 0 (see
:mod:`broker.replica_manager` and OffsetForLeaderEpoch), so it is 0.
"""

from __future__ import annotations

from typing import Callable, Iterator

import structlog

from sundial.config.components import TransactionConfig
from sundial.protocol.errors import ErrorCode
from sundial.records.builder import SimpleRecord, build_batch
from sundial.records.framing import iter_records
from sundial.records.layout import MAGIC_V2

from ..topics import TRANSACTION_STATE_TOPIC
from .schema import SchemaError, TxnLogValue, decode_key, decode_value, encode_key, encode_value, partition_for
from .state import TransactionMetadata, TxnTransit

logger = structlog.get_logger(__name__)

COORDINATOR_EPOCH = 0
#: How long a durable write of one transition may wait for its fsync.
WRITE_TIMEOUT_MS = 30_000


def topic_overrides(config: TransactionConfig) -> dict[str, str]:
    """The topic configs ``__transaction_state`` is created with."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "segment.bytes": str(config.state_log_segment_bytes),
        "message.timestamp.type": "CreateTime",
        "message.format.version": "3.0-IV1",
    }


def value_of(t: TxnTransit) -> TxnLogValue:
    return TxnLogValue(t.producer_id, t.producer_epoch, t.txn_timeout_ms, t.state, t.partitions,
                       t.txn_last_update_timestamp_ms, t.txn_start_timestamp_ms)


class TransactionLog:
    """``__transaction_state`` over the broker's logs and replica manager."""

    def __init__(self, config: TransactionConfig, logs, replica_manager, *, now_ms: Callable[[], int]) -> None:
        self._logs = logs
        self._rm = replica_manager
        self._config = config
        self._now_ms = now_ms
        self._read_chunk_bytes = config.state_log_load_buffer_bytes

    @property
    def exists(self) -> bool:
        return self._logs.topic(TRANSACTION_STATE_TOPIC) is not None

    @property
    def num_partitions(self) -> int:
        meta = self._logs.topic(TRANSACTION_STATE_TOPIC)
        if meta is None:
            return self._config.state_log_num_partitions
        return meta.partitions

    def ensure_topic(self) -> None:
        if self.exists:
            return
        n = self._config.state_log_num_partitions
        self._logs.create_topic(TRANSACTION_STATE_TOPIC, n, topic_overrides(self._config))
        logger.info("transaction_state_topic_created", topic=TRANSACTION_STATE_TOPIC, partitions=n)

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    # -- load -----------------------------------------------------------------------------------
    def _records(self, partition: int) -> Iterator[tuple[bytes | None, bytes | None]]:
        log = self._logs.get_log(TRANSACTION_STATE_TOPIC, partition)
        if log is None:
            return
        start = log.log_start_offset
        for _view, batch in log.batches_from(start, self._read_chunk_bytes):
            for rec in iter_records(batch):
                if rec.offset >= start:
                    yield rec.key, rec.value

    def load(self) -> dict[str, TransactionMetadata]:
        """Every transactional id with its last durable metadata."""
        found: dict[str, TxnLogValue] = {}
        if not self.exists:
            return {}
        for partition in range(self.num_partitions):
            for key, value in self._records(partition):
                if key is None:
                    continue
                try:
                    txn_id = decode_key(key)
                    if txn_id is None:
                        continue
                    if value is None:
                        found.pop(txn_id, None)
                    else:
                        found[txn_id] = decode_value(value)
                except SchemaError as exc:
                    logger.warning("transaction_log_record_skipped", partition=partition, error=str(exc))
        out = {}
        for txn_id, v in found.items():
            out[txn_id] = TransactionMetadata.from_transit(txn_id, TxnTransit(
                v.producer_id, -1, v.producer_epoch, -1, v.transaction_timeout_ms, v.state, v.partitions,
                v.start_timestamp_ms, v.last_update_timestamp_ms))
        return out

    # -- writes ---------------------------------------------------------------------------------
    async def write(self, transactional_id: str, transit: TxnTransit | None) -> ErrorCode:
        """Append the transit (None = tombstone) and wait until it is on disk; Kafka's error mapping."""
        rm = self._rm
        partition = self.partition_for(transactional_id)
        value = None if transit is None else encode_value(value_of(transit))
        now = self._now_ms()
        batch = build_batch(MAGIC_V2, [SimpleRecord(now, encode_key(transactional_id), value)])
        out = rm.append_one(TRANSACTION_STATE_TOPIC, partition, batch, now)
        if out.error_code == ErrorCode.NONE:
            appended = [(TRANSACTION_STATE_TOPIC, partition, out)]
            await rm.wait_durable(appended, WRITE_TIMEOUT_MS)
        return _coordinator_error(ErrorCode(out.error_code))


def _coordinator_error(code: ErrorCode) -> ErrorCode:
    """Kafka ``TransactionStateManager.appendTransactionToLog``'s error mapping."""
    if code == ErrorCode.NONE:
        return code
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code
