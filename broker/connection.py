"""One client connection: frames in, requests handled strictly in order, responses out.

Kafka clients pipeline requests on a connection and expect the answers in the
order they were sent, so each connection runs one request at a time (a parked
long-poll Fetch blocks only its own connection, as in Kafka); concurrency comes
from many connections.

Pipelined durable produce (:mod:`broker.produce_pipeline`): a Produce with acks 1 or
all is appended at once, in arrival order, and its answer is written later, strictly in
request order, while the loop goes on with the Produce requests behind it; any other
request waits until every answer before it is written.

Flow control, both directions:

* Reading: frames are decoded as bytes arrive (``FrameDecoder`` refuses a size
  prefix above ``socket.request.max.bytes`` before buffering its body). When
  ``queued.max.requests`` frames are waiting, reading pauses until the queue
  drains to half of it.
* Writing: a response of plain buffers goes out as one joined write (one send()
  call; the copy of a small answer costs less than a second syscall), file slices
  as described below; when the transport's buffer passes
  its high-water mark (a client that stops reading), no further request of that
  connection is processed until the buffer drains. A fetch slice that does not fit
  is not read into memory at once: it is kept as a duplicated file descriptor and
  fed to the socket in ``DEFERRED_CHUNK_BYTES`` pieces as the client reads (zero copy
  when the buffer is empty), so a client that stops reading holds at most the high
  water mark plus one chunk, however large its responses.
* Request bytes: reading also pauses while the frames queued on this connection
  hold more than ``sundial.connection.max.queued.bytes``, and while the broker-wide
  pool of ``queued.max.request.bytes`` (:mod:`broker.limits`) refuses to admit the
  body of a new frame. Memory per connection is thus bounded by one frame being
  read, the queued frames, and the high water mark of the response buffer.

The kernel's buffers are Kafka's: ``socket.send.buffer.bytes`` (SO_SNDBUF, set here)
and ``socket.receive.buffer.bytes`` (SO_RCVBUF, set on the listening socket and
inherited), 100 KiB each by default, -1 for the OS's autotuning. Bounded buffers are what
lets a producer that outruns the broker feel it early and send fewer, larger batches,
instead of megabytes of small requests queued in the kernel.

Fetch payloads arrive as storage file slices. When the transport has nothing
buffered, the slice goes straight from the segment file to the socket with
``os.sendfile`` (no copy through Python); whatever the socket does not take at
once is read with ``pread`` and written through the transport. TLS connections
always use the copy path.

Idle connections (``connections.max.idle.ms``) are closed by the server's sweep; a
connection blocked on a client that does not read counts as idle once nothing has
moved for that long.

Client quotas (:mod:`broker.quotas`, KIP-219): a response that carries a throttle time is
followed by a mute of the connection for that long (:meth:`Connection.throttle`): reading stops
and queued requests wait until a timer ends it. While request quotas are configured, each
handler runs under a :class:`~broker.quotas.HandlerTimer`, which adds up the time its own steps
take on the loop.

SASL listeners (:mod:`broker.security`): until the connection is authenticated only
ApiVersions, SaslHandshake and SaslAuthenticate are served; after a SaslHandshake v0
the frames are raw SASL tokens, answered without a response header.

Bad input closes the connection after a log line, as Kafka does: an oversized or
negative frame length, an unreadable header, an unknown API key, a request version
this broker does not serve (except ApiVersions, which gets a v0 answer with error
35 so the client can retry), or a body that does not parse.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import time
from collections import deque
from typing import Any, Protocol

import structlog

from sundial.protocol import decode_request, encode_response
from sundial.protocol.api_keys import ApiKey
from sundial.protocol.errors import (
    FrameTooLargeError,
    InvalidFrameError,
    ProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from sundial.protocol.framing import FrameDecoder
from sundial.protocol.header import parse_request_header

from .context import RequestContext
from .node import Broker
from .errors import CloseConnection
from .produce_pipeline import ProducePipeline, is_produce
from .quotas import SELF_THROTTLED, HandlerTimer
from .refusals import unsupported_api

logger = structlog.get_logger(__name__)

_conn_ids = itertools.count(1)

#: Above this many buffered bytes the transport asks us to stop writing.
WRITE_HIGH_WATER_BYTES = 1024 * 1024
#: A fetch slice with more than this left after sendfile is deferred, not read at once.
DEFERRED_CHUNK_BYTES = 256 * 1024


class ConnectionOwner(Protocol):
    """What a connection uses of the server that accepted it (:class:`broker.server.BrokerServer`)."""

    broker: Broker
    metrics: Any
    request_pool: Any
    sendfile_enabled: bool

    def admit(self, conn: "Connection") -> bool: ...
    def forget(self, conn: "Connection") -> None: ...


class Connection(asyncio.Protocol):
    """asyncio protocol for one socket; a task per connection processes its requests."""

    def __init__(self, server: ConnectionOwner, listener) -> None:
        self._server = server
        self._broker = server.broker
        self._listener = listener
        sockets = server.broker.config.sockets
        self._decoder = FrameDecoder(sockets.request_max_bytes)
        self._max_queued = max(1, sockets.queued_max_requests)
        self._max_queued_bytes = sockets.connection_max_queued_bytes
        self._send_buffer_bytes = sockets.send_buffer_bytes
        self._pool = server.request_pool
        self._queued_bytes = 0  # bodies of frames queued or being handled
        self._partial_bytes = 0  # grant held by the frame being received (0: none)
        self._waiting_bytes = 0  # declared size of a frame waiting for a grant
        self._deferred: deque = deque()  # response pieces waiting for the client to read
        self._frames: deque = deque()
        self._wakeup: asyncio.Future | None = None
        self._drained: asyncio.Future | None = None
        self._write_paused = False
        self._read_paused = False
        self._closed = False
        self._closing = False
        self._task: asyncio.Task | None = None
        self._in_request = False
        self._pipeline = ProducePipeline(self, sockets.max_pending_produce_requests,
                                         sockets.max_pending_produce_bytes)
        self.transport: asyncio.Transport | None = None
        self.conn_id = f"{listener.name}-{next(_conn_ids)}"
        self.peer_host = "?"
        self.peer_port = 0
        self.last_active_monotonic = time.monotonic()
        self.sock_fd = -1
        self.tls = False
        self.principal = "User:ANONYMOUS"
        self.authenticated = True
        self.sasl = None  # set by the security layer on SASL listeners
        self.client_software = None
        self._muted = False  # throttled by a client quota: read nothing until the timer ends it
        self._unmute_at = 0.0
        self._unmute_timer: asyncio.TimerHandle | None = None
        self._mute_waiter: asyncio.Future | None = None

    # -- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername") or ("?", 0)
        self.peer_host, self.peer_port = peer[0], peer[1]
        sock = transport.get_extra_info("socket")
        self.tls = transport.get_extra_info("sslcontext") is not None
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self._send_buffer_bytes != -1:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer_bytes)
                self.sock_fd = sock.fileno()
            except (OSError, AttributeError):
                self.sock_fd = -1
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES)
        if not self._server.admit(self):
            self._closed = True
            transport.abort()
            return
        security = self._broker.security
        if security is not None:
            security.on_connect(self)
        self._task = asyncio.get_running_loop().create_task(self._run())

    def data_received(self, data: bytes) -> None:
        self.last_active_monotonic = time.monotonic()
        try:
            frames = self._decoder.feed(data)
        except (FrameTooLargeError, InvalidFrameError) as exc:
            logger.warning("frame_refused", conn_id=self.conn_id, client=self.peer_host, reason=str(exc))
            self._server.metrics.bad_frame()
            self.close()
            return
        pool = self._pool
        if frames:
            n = 0
            for f in frames:
                n += len(f)
            self._frames.extend(frames)
            self._queued_bytes += n
            pool.charge(n - self._partial_bytes)  # the granted frame in progress is among them
            self._partial_bytes = 0
        decoder = self._decoder
        buffered = decoder.buffered_bytes
        if buffered >= 4 and not self._partial_bytes and not self._waiting_bytes:
            body = buffered + decoder.frame_length_needed() - 4
            if pool.try_grant(body):
                self._partial_bytes = body
            else:
                self._waiting_bytes = body
                pool.wait(self)
                logger.debug("request_memory_wait", conn_id=self.conn_id, frame_bytes=body,
                             pool_used_bytes=pool.used_bytes)
        self._update_reading()
        if frames:
            self._wake()

    def grant_arrived(self) -> None:
        """The request pool admitted the body this connection was waiting to receive."""
        if self._waiting_bytes and not self._closed:
            self._pool.charge(self._waiting_bytes)
            self._partial_bytes = self._waiting_bytes
        self._waiting_bytes = 0
        self._update_reading()

    def _update_reading(self) -> None:
        """Pause or resume reading from the queue length, queued bytes and the pool (with hysteresis)."""
        transport = self.transport
        if transport is None or self._closed:
            return
        if self._read_paused:
            if (not self._closing and not self._muted and not self._waiting_bytes
                    and len(self._frames) <= self._max_queued // 2
                    and self._queued_bytes <= self._max_queued_bytes // 2):
                self._read_paused = False
                try:
                    transport.resume_reading()
                except RuntimeError:
                    pass
        elif (self._waiting_bytes or len(self._frames) >= self._max_queued
              or self._queued_bytes >= self._max_queued_bytes):
            self._read_paused = True
            try:
                transport.pause_reading()
            except RuntimeError:
                pass

    def _release_frame(self, n: int) -> None:
        self._queued_bytes -= n
        self._pool.release(n)

    def _release_all(self) -> None:
        held = self._queued_bytes + self._partial_bytes
        self._queued_bytes = self._partial_bytes = 0
        if self._waiting_bytes:
            self._waiting_bytes = 0
            self._pool.forget(self)
        self._pool.release(held)

    def eof_received(self) -> bool:
        # The client half-closed: finish what is queued, then close (TLS cannot half-close).
        self._closing = True
        self._wake()
        return not self.tls

    def connection_lost(self, exc) -> None:
        self._closed = True
        self._wake()
        self._frames.clear()
        self._release_all()
        self._drop_deferred()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._pipeline.signal_progress()
        self._end_mute()
        self._server.forget(self)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self.last_active_monotonic = time.monotonic()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """True while a request is being handled, waiting to be, or owed an answer."""
        return self._in_request or bool(self._frames) or bool(self._deferred) or bool(self._pipeline)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def write_paused(self) -> bool:
        """The transport's buffer is past its high-water mark (the client is not reading)."""
        return self._write_paused

    @property
    def server_metrics(self):
        return self._server.metrics

    @property
    def write_blocked(self) -> bool:
        """True while responses wait for the client to read (idle sweep: it may be closed)."""
        return self._write_paused or bool(self._deferred)

    def close(self) -> None:
        if not self._closed and self.transport is not None:
            self._closed = True
            self.transport.close()
        self._wake()

    def stop_after_current(self) -> None:
        """Shutdown: answer the request in progress, read nothing more, then close."""
        self._closing = True
        for frame in self._frames:
            self._release_frame(len(frame))
        self._frames.clear()
        if self.transport is not None and not self._read_paused:
            try:
                self.transport.pause_reading()
            except RuntimeError:
                pass
        if not self._in_request and not self._pipeline:
            self.close()
        self._wake()

    def _wake(self) -> None:
        w = self._wakeup
        if w is not None and not w.done():
            w.set_result(None)

    async def _run(self) -> None:
        structlog.contextvars.bind_contextvars(conn_id=self.conn_id)
        loop = asyncio.get_running_loop()
        try:
            while not self._closed:
                if not self._frames:
                    if self._closing:
                        await self._pipeline.drain()  # closing cleanly: answer what was appended
                        break
                    self._wakeup = loop.create_future()
                    await self._wakeup
                    self._wakeup = None
                    continue
                if self._muted:  # throttled (KIP-219): queued requests wait for the mute to end
                    self._mute_waiter = loop.create_future()
                    await self._mute_waiter
                    self._mute_waiter = None
                    continue
                frame = self._frames.popleft()
                self._in_request = True
                try:
                    if self._pipeline and not is_produce(frame):
                        await self._pipeline.drain()  # not a Produce: answer the ones before it first
                    keep_open = await self._handle(frame) if not self._closed else False
                finally:
                    self._in_request = False
                    self.last_active_monotonic = time.monotonic()
                    if not self._closed:
                        self._release_frame(len(frame))
                    self._update_reading()
                if self._deferred and not self._closed:
                    await self._send_deferred()
                if not keep_open:
                    await self._pipeline.drain()  # answers owed to earlier requests still go out
                    break
                if self._write_paused and not self._closed:
                    await self.wait_writable()
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug must cost this connection only, never the daemon
            logger.exception("connection_failed", client=self.peer_host)
        finally:
            self.close()
            self._drop_deferred()
            self._pipeline.drop()

    async def wait_writable(self) -> None:
        """Wait until the transport drains below its low-water mark (or the connection is lost)."""
        if self._drained is None or self._drained.done():
            self._drained = asyncio.get_running_loop().create_future()
        await self._drained

    # -- one request ------------------------------------------------------------------------
    async def _handle(self, frame: memoryview) -> bool:
        """Handle one frame; False means close the connection."""
        server = self._server
        broker = self._broker
        started = time.perf_counter()
        sasl = self.sasl
        if sasl is not None and sasl.raw_tokens and not self.authenticated:
            answer = await broker.security.raw_token(self, frame)  # SaslHandshake v0 framing
            if answer is None:
                return False
            self.write_buffers([answer])
            return True
        try:
            header = parse_request_header(frame)
        except ProtocolError as exc:
            logger.warning("request_header_invalid", client=self.peer_host, reason=str(exc))
            server.metrics.bad_frame()
            return False
        dispatcher = broker.dispatcher
        api_key, api_version = header.api_key, header.api_version
        advertised = dispatcher.advertised.get(api_key)
        if advertised is None or not advertised[0] <= api_version <= advertised[1]:
            if api_key == ApiKey.API_VERSIONS:
                # Unknown ApiVersions version: v0 body, error 35, our ranges; the client retries.
                self.write_buffers(dispatcher.api_versions_fallback(header.correlation_id))
                return True
            unsupported_api(self, header, advertised, self.peer_host)
            server.metrics.bad_frame()
            return False
        if not self.authenticated and not broker.security.allowed_before_auth(api_key):
            broker.security.request_before_authentication(self, api_key)
            return False
        try:
            request = decode_request(header, frame)
        except (ProtocolError, UnsupportedVersionError, UnknownApiKeyError) as exc:
            logger.warning("request_invalid", client=self.peer_host, api_key=api_key, api_version=api_version,
                           client_id=header.client_id, reason=str(exc))
            server.metrics.bad_frame()
            return False
        ctx = RequestContext(broker, api_key, api_version, header.correlation_id, header.client_id,
                             self.peer_host, self.peer_port, self._listener.name, self.conn_id,
                             self.principal, header)
        ctx.connection = self
        ctx.request_bytes = len(frame)
        prepare = dispatcher.prepare.get(api_key)
        if prepare is not None:
            waiting = prepare(ctx, request)   # e.g. open the partitions it names, off the loop
            if waiting is not None:
                await waiting
                if self._closed:
                    return False
        begin = dispatcher.pipelined.get(api_key)
        if begin is not None:
            pipeline = self._pipeline
            if pipeline.enabled and getattr(request, "acks", 0) != 0:
                if pipeline.full():
                    await pipeline.wait_room()
                if self._closed:
                    return False
                try:
                    pipeline.begin(begin, ctx, request, header, started, len(frame))
                    if ctx.throttle_time_ms > 0:
                        self.throttle(ctx.throttle_time_ms)
                except Exception:
                    logger.exception("request_failed", client=self.peer_host, api_key=api_key,
                                     api_version=api_version, correlation_id=header.correlation_id,
                                     client_id=header.client_id)
                    server.metrics.request_done(api_key, api_version, time.perf_counter() - started, error=True)
                    return False
                return True
            await self._pipeline.drain()  # acks=0 or pipelining off: as one request at a time
            if self._closed:
                return False
        handler = dispatcher.handlers[api_key]
        quotas = broker.quotas
        if quotas is not None and quotas.times_request(api_key, self.authenticated):
            ctx.handler_timer = HandlerTimer(handler(ctx, request))
        try:
            response = await (ctx.handler_timer or handler(ctx, request))
        except CloseConnection as exc:
            logger.info("connection_closed_by_handler", client=self.peer_host, reason=str(exc))
            return False
        except Exception:
            logger.exception("request_failed", client=self.peer_host, api_key=api_key, api_version=api_version,
                             correlation_id=header.correlation_id, client_id=header.client_id)
            server.metrics.request_done(api_key, api_version, time.perf_counter() - started, error=True)
            return False
        throttle_ms = ctx.throttle_time_ms
        if ctx.handler_timer is not None and api_key not in SELF_THROTTLED:
            throttle_ms = max(throttle_ms, quotas.record_request(ctx, response))
        if response is not None and not self._closed:
            try:
                buffers = encode_response(header, response)
            except Exception:
                logger.exception("response_encoding_failed", api_key=api_key, api_version=api_version)
                return False
            self.write_buffers(buffers)
        server.metrics.request_done(api_key, api_version, time.perf_counter() - started)
        if throttle_ms > 0:
            self.throttle(throttle_ms)
        if ctx.close_after_response:
            return False
        return True

    # -- client quotas ----------------------------------------------------------------------
    def throttle(self, throttle_ms: int) -> None:
        """Mute the connection for ``throttle_ms`` from now (KIP-219: called once the throttled
        response is written or owed): nothing is read and no queued request is handled until the
        timer ends the mute. A longer throttle extends a running one; a shorter one changes nothing."""
        if throttle_ms <= 0 or self._closed or self.transport is None:
            return
        until = time.monotonic() + throttle_ms / 1000.0
        if until <= self._unmute_at:
            return
        self._unmute_at = until
        if self._unmute_timer is not None:
            self._unmute_timer.cancel()
        self._unmute_timer = asyncio.get_running_loop().call_later(throttle_ms / 1000.0, self._end_mute)
        self._muted = True
        if not self._read_paused:
            self._read_paused = True
            try:
                self.transport.pause_reading()
            except RuntimeError:
                pass

    def _end_mute(self) -> None:
        if self._unmute_timer is not None:
            self._unmute_timer.cancel()
            self._unmute_timer = None
        self._muted = False
        self._unmute_at = 0.0
        self._update_reading()
        waiter = self._mute_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- writing ----------------------------------------------------------------------------
    def write_buffers(self, buffers) -> None:
        """Write a response: plain buffers via writelines, file slices via sendfile/pread."""
        transport = self.transport
        if transport is None or self._closed:
            return
        deferred = self._deferred
        if not deferred and all(type(b) in (bytes, bytearray, memoryview) for b in buffers):
            # The common case: a small answer in a few buffers. One joined write is one
            # send() call; writelines of several small buffers costs more than the copy.
            data = buffers[0] if len(buffers) == 1 else b"".join(buffers)
            transport.write(data)
            self._server.metrics.bytes_out_added(len(data))
            return
        pending: list = []
        for item in buffers:
            if isinstance(item, (bytes, bytearray, memoryview)):
                if len(item):
                    if deferred:
                        deferred.append(bytes(item))
                    else:
                        pending.append(item)
                continue
            if pending:
                transport.writelines(pending)
                pending = []
            if deferred:
                self._defer_slice(item, item.position, item.size)
            else:
                self._send_slice(item)
        if pending:
            transport.writelines(pending)
        self._server.metrics.bytes_out_added(sum(len(b) if isinstance(b, (bytes, bytearray, memoryview))
                                                 else b.size for b in buffers))

    def _send_slice(self, file_slice) -> None:
        """Send a storage file slice: zero-copy when the socket takes it, pread for the rest."""
        transport = self.transport
        position, remaining = file_slice.position, file_slice.size
        if (remaining > 0 and self.sock_fd >= 0 and not self.tls and self._server.sendfile_enabled
                and transport.get_write_buffer_size() == 0):
            sent = self._sendfile_now(file_slice.fd, position, remaining)
            position += sent
            remaining -= sent
        if remaining > DEFERRED_CHUNK_BYTES:
            # The client is not taking it all now: keep a file descriptor, not the bytes.
            self._defer_slice(file_slice, position, remaining)
        elif remaining > 0:
            data = os.pread(file_slice.fd, remaining, position)
            if len(data) < remaining:  # file shrank under us: never send a short frame
                logger.error("fetch_slice_short_read", expected_bytes=remaining, got_bytes=len(data))
                self.close()
                return
            transport.write(data)

    def _sendfile_now(self, fd: int, position: int, size: int) -> int:
        """Send up to ``size`` bytes of ``fd`` from ``position`` straight to the socket, as
        much as it takes without blocking; returns the bytes sent (0 on any error: the
        caller falls back to copying or deferring)."""
        total = 0
        while total < size:
            try:
                sent = os.sendfile(self.sock_fd, fd, position + total, size - total)
            except OSError:  # includes BlockingIOError and InterruptedError
                break
            if sent <= 0:
                break
            total += sent
        if total:
            self._server.metrics.sendfile_bytes_added(total)
        return total

    def _defer_slice(self, file_slice, position: int, size: int) -> None:
        try:
            fd = file_slice.dup_fd() if hasattr(file_slice, "dup_fd") else os.dup(file_slice.fd)
        except OSError as exc:
            logger.error("fetch_slice_dup_failed", error=str(exc))
            self.close()
            return
        self._deferred.append(_DeferredSlice(fd, position, size))

    async def _send_deferred(self) -> None:
        """Feed deferred response pieces to the socket as the client reads them (bounded memory)."""
        deferred = self._deferred
        transport = self.transport
        while deferred and not self._closed:
            if self._write_paused:
                await self.wait_writable()
                continue
            item = deferred[0]
            if isinstance(item, bytes):
                transport.write(item)
                deferred.popleft()
                continue
            if (not self.tls and self.sock_fd >= 0 and self._server.sendfile_enabled
                    and transport.get_write_buffer_size() == 0):
                sent = self._sendfile_now(item.fd, item.position, item.remaining)
                if sent:
                    item.position += sent
                    item.remaining -= sent
                    self.last_active_monotonic = time.monotonic()
            if item.remaining > 0:
                n = min(item.remaining, DEFERRED_CHUNK_BYTES)
                data = os.pread(item.fd, n, item.position)
                if len(data) < n:
                    logger.error("fetch_slice_short_read", expected_bytes=n, got_bytes=len(data))
                    self.close()
                    break
                item.position += n
                item.remaining -= n
                transport.write(data)
                if not self._write_paused and item.remaining > 0 and transport.get_write_buffer_size() > 0:
                    await asyncio.sleep(0)  # let the loop write; keeps other connections moving
            if item.remaining <= 0:
                item.close()
                deferred.popleft()
        self._drop_deferred()

    def _drop_deferred(self) -> None:
        while self._deferred:
            item = self._deferred.popleft()
            if not isinstance(item, bytes):
                item.close()


class _DeferredSlice:
    """Part of a fetch response still to send: an owned (duplicated) fd, position and size."""

    __slots__ = ("fd", "position", "remaining")

    def __init__(self, fd: int, position: int, remaining: int) -> None:
        self.fd, self.position, self.remaining = fd, position, remaining

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1
