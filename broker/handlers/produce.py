"""Produce (0): append each partition's records, answer per partition.

Request-level checks of Produce v3+ (Kafka ``ProduceRequest.validateRecords``): each
partition must carry exactly one batch of magic 2 with records, else INVALID_RECORD
(87); zstd needs v7+, else UNSUPPORTED_COMPRESSION_TYPE (76). v0–v2 carry legacy
message sets (magic 0/1), up-converted to the topic's format by storage.
``acks`` must be -1, 0 or 1 (INVALID_REQUIRED_ACKS, 21). A request carrying transactional
batches needs a transactional id the principal may WRITE, else every partition answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53), as Kafka's ``handleProduceRequest``. As in Kafka
3.x without KIP-890's verification, a transactional batch to a partition that was never
added to the transaction (AddPartitionsToTxn) is appended all the same: the partition's
producer state opens a transaction there that no marker will close (a "hanging"
transaction that holds the last stable offset back; docs/transactions.md). Internal topics refuse client
appends (INVALID_TOPIC_EXCEPTION). Unknown topics are not created by Produce (as in
Kafka): UNKNOWN_TOPIC_OR_PARTITION. With an authorizer, a topic the principal may not
WRITE gets TOPIC_AUTHORIZATION_FAILED (29) and nothing is appended (checked before
existence, so the answer does not reveal whether the topic exists).

Client quotas (:mod:`broker.quotas`): the request's size counts against ``producer_byte_rate``
and the time of the appends against ``request_percentage`` (not with acks=0, as in Kafka); the
throttle goes into ``throttle_time_ms`` and ``ctx.throttle_time_ms`` (the connection mutes).

acks=0 sends no answer; if any partition failed the connection is closed, which is
how Kafka tells such a producer something went wrong. acks=1 answers once the bytes are
written (off the loop), acks=-1 once they are fsynced;
the connection may begin the requests behind it meanwhile (:func:`begin_produce`).
"""

from __future__ import annotations

import asyncio
import time

import structlog

from sundial.protocol.errors import ErrorCode

from ..authorizer import AclOperation, ResourceType, is_authorized
from ..errors import CloseConnection
from ..appender import PENDING
from ..replica_manager import AppendOutcome
from ..topics import INTERNAL_TOPICS

logger = structlog.get_logger(__name__)


def _partition_entry(index: int, out: AppendOutcome) -> dict:
    return {
        "index": index,
        "error_code": out.error_code,
        "base_offset": out.base_offset,
        "log_append_time_ms": out.log_append_time_ms,
        "log_start_offset": out.log_start_offset,
        "record_errors": [{"batch_index": i, "batch_index_error_message": m} for i, m in out.record_errors],
        "error_message": out.error_message,
    }


def begin_produce(ctx, request):
    """Begin the append of every partition now, in the caller's order; return the :class:`ProduceAnswer`.

    Each append takes its place in its partition's queue before this returns (its bytes may
    still be written off the loop, :mod:`broker.appender`), so a connection that calls it for
    each Produce in arrival order keeps Kafka's order of offsets and idempotent sequences.
    Its ``result()`` waits for durability (acks=-1) and yields the response body. The
    connection may await it later, after beginning the requests behind it (pipelined
    durable produce, :mod:`broker.connection`).
    """
    started = time.perf_counter()
    broker = ctx.broker
    rm = broker.replica_manager
    acks = request.acks
    version = ctx.api_version
    now_ms = ctx.now_ms()
    appended: list[tuple[str, int, AppendOutcome]] = []
    writes: _Writes | None = None
    responses = []
    failed = False
    bad_acks = acks not in (-1, 0, 1)
    transactional_id = getattr(request, "transactional_id", None)
    transactional = rm.carries_transactional_batch(
        (p.records for t in request.topic_data for p in t.partition_data), version) and not (
        transactional_id is not None
        and is_authorized(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id))
    for topic in request.topic_data:
        name = topic.name
        parts = []
        may_write = is_authorized(ctx, AclOperation.WRITE, ResourceType.TOPIC, name)
        for p in topic.partition_data:
            if bad_acks:
                out = AppendOutcome(error_code=ErrorCode.INVALID_REQUIRED_ACKS)
            elif transactional:
                out = AppendOutcome(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            elif not may_write:
                out = AppendOutcome(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif name in INTERNAL_TOPICS:
                out = AppendOutcome(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION)
            else:
                code, message = rm.produce_records_error(p.records, version)
                if code != ErrorCode.NONE:
                    logger.info("produce_refused", topic=name, partition=p.index, error=ErrorCode(code).name,
                                reason=message, client=ctx.client_host)
                    out = AppendOutcome(error_code=code, error_message=message)
                else:
                    if writes is None:
                        writes = _Writes(appended, rm, acks, request.timeout_ms)
                    out = rm.append(name, p.index, p.records, now_ms,
                                    on_done=writes.slot(name, p.index, parts, len(parts)))
                    if out is PENDING:            # its write is in flight: the slot is filled when it ends
                        writes.expect()
                        parts.append((p.index, None))
                        continue
                    appended.append((name, p.index, out))
            if out.error_code != ErrorCode.NONE:
                failed = True
            parts.append((p.index, out))
        responses.append((name, parts))
    quotas = broker.quotas
    if quotas is not None:
        ctx.throttle_time_ms = quotas.record_produce(ctx, ctx.request_bytes, time.perf_counter() - started, acks)
    if writes is not None and writes.expected:
        return ProduceAnswer(acks, None, responses, failed, ctx.throttle_time_ms, writes=writes)
    durable = rm.start_durable(appended, request.timeout_ms) if acks == -1 and appended else None
    return ProduceAnswer(acks, durable, responses, failed, ctx.throttle_time_ms)


class _Writes:
    """The appends of one Produce whose writes are in flight (:meth:`ReplicaManager.append`).

    As each ends, its outcome takes its place in the answer; once all have, acks=all asks
    the flushers for the fsync (:meth:`ReplicaManager.start_durable`) of every successful
    append of the request, as ``begin_produce`` does when nothing was in flight."""

    __slots__ = ("_left", "_appended", "_rm", "_acks", "_timeout_ms", "failed", "durable", "_done",
                 "_discarded", "expected")

    def __init__(self, appended, rm, acks: int, timeout_ms: int) -> None:
        self._left = 0
        self.expected = 0
        self._appended = appended
        self._rm, self._acks, self._timeout_ms = rm, acks, timeout_ms
        self.failed = False
        self.durable = None
        self._discarded = False
        self._done: asyncio.Future | None = None   # made when someone waits

    def slot(self, name: str, index: int, parts: list, slot: int):
        """The callback that puts the outcome of ``parts[slot]`` in place."""
        return lambda out: self._one(name, index, parts, slot, out)

    def expect(self) -> None:
        self._left += 1
        self.expected += 1

    def _one(self, name: str, index: int, parts: list, slot: int, out) -> None:
        parts[slot] = (index, out)
        self._appended.append((name, index, out))
        if out.error_code != ErrorCode.NONE:
            self.failed = True
        self._left -= 1
        if self._left == 0:
            if self._acks == -1 and not self._discarded:
                self.durable = self._rm.start_durable(self._appended, self._timeout_ms)
            if self._done is not None and not self._done.done():
                self._done.set_result(None)

    def ready(self) -> bool:
        return self._left == 0 and (self.durable is None or self.durable.done())

    async def wait(self) -> None:
        if self._left:
            self._done = asyncio.get_running_loop().create_future()
            try:
                await self._done
            except asyncio.CancelledError:
                self.discard()
                raise

    def discard(self) -> None:
        self._discarded = True
        if self.durable is not None:
            self.durable.discard()


class ProduceAnswer:
    """The answer owed to a begun Produce: ``ready()`` tells without waiting whether
    ``result()`` can complete at once (no write or fsync left to wait for); ``discard()``
    drops the wait of an answer nobody will read (the connection went away)."""

    __slots__ = ("_acks", "_durable", "_responses", "_failed", "_throttle_time_ms", "_writes")

    def __init__(self, acks: int, durable, responses, failed: bool, throttle_time_ms: int = 0, *,
                 writes: _Writes | None = None) -> None:
        self._acks, self._durable, self._responses, self._failed = acks, durable, responses, failed
        self._throttle_time_ms = throttle_time_ms
        self._writes = writes

    def ready(self) -> bool:
        if self._writes is not None:
            return self._writes.ready()
        return self._durable is None or self._durable.done()

    def discard(self) -> None:
        if self._writes is not None:
            self._writes.discard()
        if self._durable is not None:
            self._durable.discard()

    async def result(self):
        """The response body (None for acks=0); raises CloseConnection when an acks=0 produce failed."""
        writes = self._writes
        if writes is not None:
            await writes.wait()
            self._take_writes()
        if self._durable is not None:
            await self._durable.wait()
        return self.response()

    def _take_writes(self) -> None:
        writes, self._writes = self._writes, None
        self._durable = writes.durable
        self._failed = self._failed or writes.failed

    def response(self):
        """:meth:`result` once :meth:`ready` (nothing left to wait for), without suspending."""
        if self._writes is not None:
            self._take_writes()
        durable = self._durable
        if durable is not None:
            self._durable = None
            durable.settle()
        if self._acks == 0:
            if self._failed:
                raise CloseConnection("a partition of an acks=0 produce failed")
            return None
        return {
            "responses": [{"name": name, "partition_responses": [_partition_entry(i, o) for i, o in parts]}
                          for name, parts in self._responses],
            "throttle_time_ms": self._throttle_time_ms,
        }


async def handle_produce(ctx, request):
    return await begin_produce(ctx, request).result()
