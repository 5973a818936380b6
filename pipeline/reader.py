"""Executor side: read one offset range ``[start, end)`` of one partition as columns.

:func:`read_range` yields :class:`pipeline.records.Columns` chunks (one per Fetch
response) until the range is read. Everything it needs travels in the pickled Spark
input partition (:class:`ReadConfig` + :class:`pipeline.resolve.OffsetRange`); it keeps
no state between tasks.

Two fetchers with the same semantics:

* ``wire`` (default for PLAINTEXT): :class:`pipeline.wire.BrokerConnection` to the
  partition leader found through Metadata, one Fetch kept in flight while the previous
  response is decoded by :func:`pipeline.records.decode_records`.
* ``consumer`` (SSL/SASL, or ``sundial.fetcher=consumer``): kafka-python's
  ``KafkaConsumer`` with ``assign`` + ``seek`` + ``poll``.

Failure handling (the connector's ``KafkaDataConsumer`` rules):

* Offset out of range because retention/DeleteRecords removed records below the
  position: data loss -> :class:`pipeline.errors.DataLossError` with
  ``failOnDataLoss=true``, else skip to the log start offset (logged).
* The log now ends before the range end (truncated, or the topic was deleted and
  recreated): data loss, same rule.
* Leader changes, connection loss, retriable error codes: reconnect with backoff; no
  progress for ``kafkaConsumer.pollTimeoutMs`` -> :class:`pipeline.errors.FetchError`
  (or data loss when the partition no longer exists).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator

import structlog

from sundial.records.layout import (
    INT32,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MIN_ENTRY_SIZE,
    OFFSET_SIZE,
)

from .errors import FetchError
from .offsets import TopicPartition
from .records import LOG_APPEND_TIME, AbortedTransactions, Columns, Window, decode_records
from .resolve import OffsetRange, report_data_loss
from .wire import (
    OFFSET_OUT_OF_RANGE,
    RETRIABLE,
    UNKNOWN_TOPIC_OR_PARTITION,
    BrokerConnection,
    BrokerUnavailable,
    error_name,
    parse_bootstrap,
)

logger = structlog.get_logger(__name__)

DEFAULT_PARTITION_FETCH_BYTES = 4 << 20
MAX_PARTITION_FETCH_BYTES = 256 << 20
FETCH_MAX_WAIT_MS = 500
RETRY_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)


@dataclass(frozen=True)
class ReadConfig:
    """Per-query settings every task needs (picklable, no live objects)."""

    bootstrap_servers: str
    include_headers: bool = False
    output_format: str = "arrow"
    arrow_batch_rows: int = 100_000
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000
    read_committed: bool = False
    use_wire: bool = True
    consumer_config: dict = field(default_factory=dict)
    partition_fetch_bytes: int = DEFAULT_PARTITION_FETCH_BYTES
    check_crcs: bool = True
    client_id: str = "sundial-spark"

    @classmethod
    def from_options(cls, opts) -> "ReadConfig":
        from .client import consumer_config

        config = consumer_config(opts.kafka_params, opts.bootstrap_servers, client_id="sundial-spark-executor")
        return cls(
            bootstrap_servers=opts.bootstrap_servers,
            include_headers=opts.include_headers,
            output_format=opts.output_format,
            arrow_batch_rows=opts.arrow_batch_rows,
            fail_on_data_loss=opts.fail_on_data_loss,
            poll_timeout_ms=opts.poll_timeout_ms,
            read_committed=opts.read_committed,
            use_wire=opts.use_wire_fetcher,
            consumer_config=config,
            partition_fetch_bytes=int(config.get("max_partition_fetch_bytes", DEFAULT_PARTITION_FETCH_BYTES)),
            check_crcs=bool(config.get("check_crcs", True)),
            client_id=str(config.get("client_id", "sundial-spark-executor")),
        )


def read_range(config: ReadConfig, rng: OffsetRange) -> Iterator[Columns]:
    """Columns for every kept record of ``rng``, in offset order."""
    if rng.size <= 0:
        return iter(())
    if config.use_wire:
        return _read_wire(config, rng)
    return _read_consumer(config, rng)


# --- wire fetcher ------------------------------------------------------------------------

def _connect_leader(config: ReadConfig, tp: TopicPartition) -> BrokerConnection:
    timeout_s = max(config.poll_timeout_ms / 1000, 1.0)
    failures = []
    for host, port in parse_bootstrap(config.bootstrap_servers):
        try:
            boot = BrokerConnection(host, port, client_id=config.client_id, timeout_s=timeout_s)
        except BrokerUnavailable as exc:
            failures.append(str(exc))
            continue
        try:
            code, leader = boot.leader_for(tp.topic, tp.partition)
        except BrokerUnavailable as exc:
            failures.append(str(exc))
            continue
        if code:
            boot.close()
            raise _RetriableCode(code)
        if leader is None:
            boot.close()
            raise _RetriableCode(5)
        if leader == (host, port):
            return boot
        boot.close()
        return BrokerConnection(leader[0], leader[1], client_id=config.client_id, timeout_s=timeout_s)
    raise BrokerUnavailable("; ".join(failures) or "no bootstrap server reachable")


class _RetriableCode(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(error_name(code))
        self.code = code


def _shallow_next_offset(records: bytes, pos: int) -> int | None:
    """The offset after the last complete batch in ``records`` (None if there is none)."""
    n = len(records)
    at = 0
    nxt = None
    while at + LOG_OVERHEAD <= n:
        base, length = OFFSET_SIZE.unpack_from(records, at)
        end = at + LOG_OVERHEAD + length
        if length < MIN_ENTRY_SIZE or end > n:
            break
        if records[at + MAGIC_OFFSET] == MAGIC_V2 and end >= at + LAST_OFFSET_DELTA_OFFSET + INT32.size:
            last = base + INT32.unpack_from(records, at + LAST_OFFSET_DELTA_OFFSET)[0]
        else:
            last = base                      # legacy entries carry their (last) offset
        nxt = max(pos, last + 1) if nxt is None else max(nxt, last + 1)
        at = end
    return nxt


def _read_wire(config: ReadConfig, rng: OffsetRange) -> Iterator[Columns]:
    tp = rng.tp
    pos = rng.start
    timeout_s = config.poll_timeout_ms / 1000
    last_progress = time.monotonic()
    max_bytes = config.partition_fetch_bytes
    failures = 0
    last_error = ""
    conn: BrokerConnection | None = None

    def waited_too_long() -> bool:
        return time.monotonic() - last_progress > timeout_s

    def backoff() -> None:
        time.sleep(RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S) - 1)])

    try:
        while pos < rng.end:
            if conn is None:
                try:
                    conn = _connect_leader(config, tp)
                except (BrokerUnavailable, _RetriableCode) as exc:
                    last_error = str(exc)
                    if waited_too_long():
                        if isinstance(exc, _RetriableCode) and exc.code == UNKNOWN_TOPIC_OR_PARTITION:
                            report_data_loss(config.fail_on_data_loss, (
                                f"Cannot fetch offsets [{pos}, {rng.end}) of {tp}: the partition no longer exists"),
                                topic=tp.topic, partition=tp.partition, offset=pos)
                            return
                        raise FetchError(f"Cannot fetch offset {pos} of {tp} within "
                                         f"kafkaConsumer.pollTimeoutMs={config.poll_timeout_ms}: {last_error}") from None
                    failures += 1
                    backoff()
                    continue
            try:
                if not conn.in_flight:
                    conn.send_fetch(tp.topic, tp.partition, pos, max_bytes=max_bytes, max_wait_ms=FETCH_MAX_WAIT_MS,
                                    read_committed=config.read_committed)
                part = conn.receive_fetch(tp.topic, tp.partition)
            except BrokerUnavailable as exc:
                conn, last_error = None, str(exc)
                failures += 1
                if waited_too_long():
                    raise FetchError(f"Cannot fetch offset {pos} of {tp} within "
                                     f"kafkaConsumer.pollTimeoutMs={config.poll_timeout_ms}: {last_error}") from None
                backoff()
                continue

            if part.error_code == OFFSET_OUT_OF_RANGE:
                pos = _out_of_range(conn, config, rng, pos)
                last_progress = time.monotonic()
                continue
            if part.error_code in RETRIABLE:
                last_error = error_name(part.error_code)
                conn.close()
                conn = None
                failures += 1
                if waited_too_long():
                    if part.error_code == UNKNOWN_TOPIC_OR_PARTITION:
                        report_data_loss(config.fail_on_data_loss, (
                            f"Cannot fetch offsets [{pos}, {rng.end}) of {tp}: the partition no longer exists"),
                            topic=tp.topic, partition=tp.partition, offset=pos)
                        return
                    raise FetchError(f"Cannot fetch offset {pos} of {tp} within "
                                     f"kafkaConsumer.pollTimeoutMs={config.poll_timeout_ms}: {last_error}")
                backoff()
                continue
            if part.error_code:
                raise FetchError(f"Fetch of {tp} at offset {pos} failed: {error_name(part.error_code)}")

            records = part.records
            nxt = _shallow_next_offset(records, pos)
            if nxt is not None and pos < nxt < rng.end:
                try:                                   # keep the broker busy while this response is decoded
                    conn.send_fetch(tp.topic, tp.partition, nxt, max_bytes=max_bytes,
                                    max_wait_ms=FETCH_MAX_WAIT_MS, read_committed=config.read_committed)
                except BrokerUnavailable as exc:
                    conn, last_error = None, str(exc)  # reconnect after decoding what we have
            cols = Columns()
            aborted = AbortedTransactions(part.aborted) if config.read_committed else None
            result = decode_records(records, Window(pos, rng.end, rng.min_timestamp_ms, rng.max_timestamp_ms),
                                    cols, check_crcs=config.check_crcs, include_headers=config.include_headers,
                                    aborted=aborted)
            if len(cols):
                yield cols
            if result.window_passed:
                return
            if result.batches == 0:
                if records:
                    # one batch is larger than the per-partition limit; ask for more
                    if max_bytes >= MAX_PARTITION_FETCH_BYTES:
                        raise FetchError(f"a record batch of {tp} at offset {pos} is larger than "
                                         f"{MAX_PARTITION_FETCH_BYTES} bytes")
                    max_bytes = min(max_bytes * 2, MAX_PARTITION_FETCH_BYTES)
                    continue
                log_end = part.last_stable_offset if config.read_committed else part.high_watermark
                if 0 <= log_end <= pos:
                    report_data_loss(config.fail_on_data_loss, (
                        f"Cannot fetch offsets [{pos}, {rng.end}) of {tp}: the log now ends at offset {log_end}"),
                        topic=tp.topic, partition=tp.partition, offset=pos, log_end_offset=log_end)
                    return
                if waited_too_long():
                    raise FetchError(f"Cannot fetch record for offset {pos} of {tp} in "
                                     f"kafkaConsumer.pollTimeoutMs={config.poll_timeout_ms} milliseconds")
                continue
            if result.next_offset > pos:
                last_progress = time.monotonic()
                failures = 0
            if conn is not None and nxt is not None and result.next_offset != nxt and conn.in_flight:
                # cannot happen for well-formed logs; never read the pipelined response out of order
                conn.close()
                conn = None
            pos = result.next_offset
    finally:
        if conn is not None:
            conn.close()


def _out_of_range(conn: BrokerConnection, config: ReadConfig, rng: OffsetRange, pos: int) -> int:
    """New position after OFFSET_OUT_OF_RANGE at ``pos`` (or raise for data loss)."""
    tp = rng.tp
    code, earliest = conn.list_offset(tp.topic, tp.partition, -2, read_committed=False)
    code2, latest = conn.list_offset(tp.topic, tp.partition, -1, read_committed=config.read_committed)
    if code or code2:
        raise FetchError(f"offset {pos} of {tp} is out of range and ListOffsets failed: "
                         f"{error_name(code or code2)}")
    if pos < earliest:
        report_data_loss(config.fail_on_data_loss, (
            f"Cannot fetch offset {pos} of {tp}: the log start offset is now {earliest}"),
            topic=tp.topic, partition=tp.partition, offset=pos, log_start_offset=earliest)
        return min(earliest, rng.end)
    if pos >= latest:
        report_data_loss(config.fail_on_data_loss, (
            f"Cannot fetch offsets [{pos}, {rng.end}) of {tp}: the log now ends at offset {latest}"),
            topic=tp.topic, partition=tp.partition, offset=pos, log_end_offset=latest)
        return rng.end
    return pos                              # in range again (a racing roll); fetch again


# --- KafkaConsumer fetcher ------------------------------------------------------------------

def _read_consumer(config: ReadConfig, rng: OffsetRange) -> Iterator[Columns]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.errors import OffsetOutOfRangeError

    tp = rng.tp
    ktp = KafkaTopicPartition(tp.topic, tp.partition)
    settings = dict(config.consumer_config)
    settings.update(auto_offset_reset="none", isolation_level="read_committed" if config.read_committed
                    else "read_uncommitted")
    settings.setdefault("max_poll_records", 10_000)
    consumer = KafkaConsumer(**settings)
    lo, hi = rng.min_timestamp_ms, rng.max_timestamp_ms
    timeout_s = config.poll_timeout_ms / 1000
    try:
        consumer.assign([ktp])
        consumer.seek(ktp, rng.start)
        last_progress = time.monotonic()
        while True:
            pos = consumer.position(ktp)
            if pos >= rng.end:
                return
            try:
                polled = consumer.poll(timeout_ms=FETCH_MAX_WAIT_MS)
            except OffsetOutOfRangeError:
                earliest = consumer.beginning_offsets([ktp])[ktp]
                latest = consumer.end_offsets([ktp])[ktp]
                if pos < earliest:
                    report_data_loss(config.fail_on_data_loss, (
                        f"Cannot fetch offset {pos} of {tp}: the log start offset is now {earliest}"),
                        topic=tp.topic, partition=tp.partition, offset=pos, log_start_offset=earliest)
                    if earliest >= rng.end:
                        return
                    consumer.seek(ktp, earliest)
                    continue
                report_data_loss(config.fail_on_data_loss, (
                    f"Cannot fetch offsets [{pos}, {rng.end}) of {tp}: the log now ends at offset {latest}"),
                    topic=tp.topic, partition=tp.partition, offset=pos, log_end_offset=latest)
                return
            records = polled.get(ktp, [])
            cols = Columns()
            done = False
            for rec in records:
                if rec.offset < rng.start:
                    continue
                if rec.offset >= rng.end:
                    done = True
                    break
                ts = rec.timestamp
                if hi is not None and rec.timestamp_type == LOG_APPEND_TIME and ts >= hi:
                    done = True
                    break
                if (lo is not None and ts < lo) or (hi is not None and ts >= hi):
                    continue
                cols.append(rec.key, rec.value, rec.offset, ts, rec.timestamp_type,
                            [(k, v) for k, v in rec.headers] if rec.headers and config.include_headers else None)
            if records:
                last_progress = time.monotonic()
            if len(cols):
                yield cols
            if done:
                return
            if not records and time.monotonic() - last_progress > timeout_s:
                latest = consumer.end_offsets([ktp])[ktp]
                if latest <= consumer.position(ktp):
                    report_data_loss(config.fail_on_data_loss, (
                        f"Cannot fetch offsets [{consumer.position(ktp)}, {rng.end}) of {tp}: "
                        f"the log now ends at offset {latest}"),
                        topic=tp.topic, partition=tp.partition, log_end_offset=latest)
                    return
                raise FetchError(f"Cannot fetch record for offset {consumer.position(ktp)} of {tp} in "
                                 f"kafkaConsumer.pollTimeoutMs={config.poll_timeout_ms} milliseconds")
    finally:
        consumer.close(autocommit=False)
