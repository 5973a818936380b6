"""Pipelined durable produce: the answers one connection owes, written strictly in order.

A Produce with acks 1 or all is split in two (``Dispatcher.pipelined``): its appends
happen at once, in arrival order (so offsets and idempotent sequences are exactly those
of one-at-a-time handling), and its answer, ready once the data is fsynced for acks=all,
is kept here while the connection goes on reading, decoding and appending the Produce
requests behind it. One group-commit fsync (:mod:`broker.flusher`) then covers every
append made before it started, from this connection and all others.

Invariants:

* Answers leave in request order: the writer task answers pending requests oldest
  first; answers ready together (one fsync completes many) go out in one write, and
  written bytes go out before the writer waits for anything. The connection handles a
  request that is not such a Produce only after :meth:`ProducePipeline.drain`.
* At most ``max_requests`` requests and ``max_bytes`` bytes of them wait; past that
  :meth:`ProducePipeline.wait_room` holds the connection's request loop, its frames
  queue up and reading pauses (back-pressure reaches the client's socket).
* An fsync failure answers every waiting request KAFKA_STORAGE_ERROR, in order (the
  produce handler's answer carries it). A client that goes away while answers wait
  loses only the answers: its appends are complete batches in the log.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any, Protocol

import structlog

from sundial.protocol import encode_response

from .errors import CloseConnection

logger = structlog.get_logger(__name__)


class PipelineConnection(Protocol):
    """What the pipeline uses of its connection (:class:`broker.connection.Connection`)."""

    closed: bool
    write_paused: bool
    peer_host: str
    last_active_monotonic: float
    server_metrics: Any

    def write_buffers(self, buffers) -> None: ...
    def close(self) -> None: ...
    async def wait_writable(self) -> None: ...


def is_produce(frame) -> bool:
    """The frame's API key (int16 at the start of the request header) is Produce (0)."""
    return len(frame) >= 2 and frame[0] == 0 and frame[1] == 0


class _Pending:
    """A request begun in order whose answer is still owed: header, answer, accounting."""

    __slots__ = ("header", "answer", "started", "frame_bytes")

    def __init__(self, header, answer, started: float, frame_bytes: int) -> None:
        self.header, self.answer, self.started, self.frame_bytes = header, answer, started, frame_bytes


class ProducePipeline:
    """The answers one connection owes for begun Produce requests, and the task writing them.

    ``answer`` objects (from a handler's ``begin``) offer ``ready() -> bool`` (no wait
    left), ``async result()`` (the response body, or None for no answer), ``response()``
    (the same without suspending, once ``ready()``) and ``discard()`` (nobody will read
    it: drop what it waits for).
    """

    def __init__(self, conn: PipelineConnection, max_requests: int, max_bytes: int) -> None:
        self._conn = conn
        self._pending: deque[_Pending] = deque()
        self._bytes = 0
        self._max_requests = max_requests
        self._max_bytes = max_bytes
        self._writer: asyncio.Task | None = None
        self._idle: asyncio.Future | None = None  # the writer waits here for the next begin
        self._progress: asyncio.Future | None = None

    @property
    def enabled(self) -> bool:
        return self._max_requests > 1

    def __bool__(self) -> bool:
        return bool(self._pending)

    def __len__(self) -> int:
        return len(self._pending)

    def begin(self, begin, ctx, request, header, started: float, frame_bytes: int) -> None:
        """Do the in-order part of a request now and queue its answer for the writer."""
        answer = begin(ctx, request)  # appends happen here, in arrival order
        self._pending.append(_Pending(header, answer, started, frame_bytes))
        self._bytes += frame_bytes
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_all())
        else:
            idle = self._idle
            if idle is not None and not idle.done():
                idle.set_result(None)

    def full(self) -> bool:
        """True while another request may not wait (:meth:`wait_room` would suspend)."""
        return bool(self._pending) and (len(self._pending) >= self._max_requests or self._bytes >= self._max_bytes)

    async def wait_room(self) -> None:
        """Return once another request may wait (or the connection is gone)."""
        while self.full() and not self._conn.closed:
            await self._next_progress()

    async def drain(self) -> None:
        """Return once every owed answer is written (or the connection is gone)."""
        while self._pending and not self._conn.closed:
            await self._next_progress()

    async def _next_progress(self) -> None:
        if self._progress is None or self._progress.done():
            self._progress = asyncio.get_running_loop().create_future()
        await self._progress

    def signal_progress(self) -> None:
        p = self._progress
        if p is not None and not p.done():
            p.set_result(None)

    async def _write_all(self) -> None:
        """The writer: answer pending requests oldest first, joining answers ready together.

        It lives as long as the connection: with nothing owed it waits for the next
        :meth:`begin` (cheaper than a new task per request) and :meth:`drop` ends it."""
        conn = self._conn
        pending = self._pending
        metrics = conn.server_metrics
        loop = asyncio.get_running_loop()
        out: list = []
        try:
            while not conn.closed:
                if not pending:
                    if out:
                        conn.write_buffers(out)
                        out = []
                    conn.last_active_monotonic = time.monotonic()
                    self._idle = idle = loop.create_future()
                    await idle
                    self._idle = None
                    continue
                item = pending[0]
                header = item.header
                answer = item.answer
                if out and not answer.ready():
                    conn.write_buffers(out)
                    out = []
                try:
                    response = answer.response() if answer.ready() else await answer.result()
                except CloseConnection as exc:
                    logger.info("connection_closed_by_handler", client=conn.peer_host, reason=str(exc))
                    conn.close()
                    break
                except Exception:
                    logger.exception("request_failed", client=conn.peer_host, api_key=header.api_key,
                                     api_version=header.api_version, correlation_id=header.correlation_id,
                                     client_id=header.client_id)
                    metrics.request_done(header.api_key, header.api_version,
                                         time.perf_counter() - item.started, error=True)
                    conn.close()
                    break
                pending.popleft()
                self._bytes -= item.frame_bytes
                if response is not None and not conn.closed:
                    try:
                        out.extend(encode_response(header, response))
                    except Exception:
                        logger.exception("response_encoding_failed", api_key=header.api_key,
                                         api_version=header.api_version)
                        conn.close()
                        break
                metrics.request_done(header.api_key, header.api_version, time.perf_counter() - item.started)
                self.signal_progress()
                if conn.write_paused and not conn.closed:
                    conn.write_buffers(out)
                    out = []
                    await conn.wait_writable()
        finally:
            self._idle = None
            self.signal_progress()
            if conn.closed:
                self.drop()

    def drop(self) -> None:
        """The connection is gone: forget owed answers (their appends are complete in the log)."""
        writer = self._writer
        if writer is not None and not writer.done() and writer is not asyncio.current_task():
            writer.cancel()  # unwinds the answer it awaits; its own finally drops the rest
            return
        for item in self._pending:
            item.answer.discard()
        self._pending.clear()
        self._bytes = 0
        self.signal_progress()
