"""Fuzzing the real connection path in process: mutated frames into ``broker.connection.Connection``
of a started :class:`broker.server.BrokerServer` (real storage in a temporary directory,
real dispatcher, handlers, group coordinator and encoder). Only the socket is replaced
by an in-memory transport, so a million frames take minutes instead of hours.

What counts as a finding (the run fails on the first one):

* an exception logged by the connection (``request_failed``, ``connection_failed``,
  ``response_encoding_failed``) or a periodic task (``periodic_task_failed``): bad
  input must get a specific error code or a closed connection, never an unexpected
  exception in a handler;
* a malformed response stream: a frame shorter than a correlation id, a partial frame
  left when the connection closes, or a response that does not answer the requests of
  that connection in order (:class:`StreamCheck`: the requests are the frames the
  broker sees, cut from the bytes sent by Kafka's size-prefix framing, so a lying
  prefix changes what the requests are, not whether they are checked);
* a broker that stops answering: every ``health_every`` frames a fresh connection must
  get ApiVersions and Metadata answered.

Inputs (seeded RNG; the seed is printed; made in ``fuzz_inputs.py``): valid requests of every API and version
(``tests/support/protocol_cases.py``), Produce requests with real record batches for
topics with CreateTime, LogAppendTime, compaction and no timestamp bounds, Fetch and
ListOffsets of those topics; then mutations: bytes flipped, truncated, extended,
spliced, int16/int32/varint fields overwritten with boundary values, other API key or
version, lying size prefixes. Record batches are also mutated *inside* (count, length,
offset delta, timestamps, attributes/codec, varints of records, compressed payloads,
decompression bombs) with the CRC recomputed, so the mutation reaches the validator.

Used by ``tests/integration/test_hostile_input.py`` (CI size),
``benchmarks/fuzz_long.py`` (10^6 frames and more) and
``tests/integration/test_connection_fuzz.py`` (``replay`` of fixed frame sequences, and
the checker's own tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import struct
import tempfile
import time
import traceback
from dataclasses import dataclass, field

import structlog

from sundial.protocol import encode_request

from .fuzz_inputs import MAX_FRAME_BYTES, TOPICS, mutate, produce_frame, read_frame, schema_corpus, with_prefix


class Finding(AssertionError):
    pass


# -- the in-memory transport --------------------------------------------------------------------------
class FakeTransport(asyncio.Transport):
    """What Connection needs of a transport; responses are parsed as they are written."""

    def __init__(self, loop, tracker: "StreamCheck") -> None:
        super().__init__()
        self._loop = loop
        self.protocol = None
        self.closed = False
        self.paused = False
        self.check = tracker

    def get_extra_info(self, name, default=None):
        return {"peername": ("10.0.0.7", 40000)}.get(name, default)

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data) -> None:
        if not self.closed:
            self.check.feed(bytes(data))

    def writelines(self, parts) -> None:
        for p in parts:
            self.write(p)

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._loop.call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()


class StreamCheck:
    """Response framing and correlation order of one connection.

    Requests: the bytes the client sent, framed as the broker frames them (Kafka's
    ``[size int32][size bytes]``), not as the client meant them. After a size prefix that
    lies, the bytes that follow make up frames nobody wrote, with whatever correlation
    ids they happen to carry, and the broker rightly answers those that parse. A
    negative or oversized prefix ends the stream (the broker closes the connection), as
    does any frame the broker refuses; frames of fewer than 8 bytes carry no correlation
    id and are never answered.

    Order (the invariant checked on every response): the responses answer requests of
    this connection in the order they were sent, and only a Produce may go unanswered
    while the connection stays open (acks=0; every other API answers or closes the
    connection). Correlation ids repeat (the corpus uses 7 throughout), so a response may
    fit several pending requests; ``heads`` keeps every position in ``requests``
    consistent with the responses so far, and a response that fits none is a finding.
    """

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.buf = bytearray()  # response bytes not yet framed
        self.out = bytearray()  # sent bytes not yet framed
        self.out_ended = False  # a prefix the broker refuses: nothing after it is a request
        self.requests: list[tuple[int, int]] = []  # (api key, correlation id) of the frames the broker sees
        self.heads = {0}  # indexes into requests of the next request to answer, one per consistent reading
        self.answered: list[int] = []  # correlation ids of the responses, in order
        self.responses = 0

    def sent(self, data: bytes) -> None:
        """Bytes written to the connection (any split): registers the frames they complete."""
        if self.out_ended:
            return
        out = self.out
        out += data
        while len(out) >= 4:
            size = struct.unpack_from(">i", out)[0]
            if size < 0 or size > self.max_frame_bytes:
                self.out_ended = True
                out.clear()
                return
            if len(out) < 4 + size:
                return
            if size >= 8:
                self.requests.append(struct.unpack_from(">hxxi", out, 4))
            del out[:4 + size]

    def feed(self, data: bytes) -> None:
        """Bytes the broker wrote: frames them and checks each response against the requests."""
        self.buf += data
        while len(self.buf) >= 4:
            size = struct.unpack_from(">i", self.buf)[0]
            if size < 4 or size > 256 * MAX_FRAME_BYTES:
                raise Finding(f"response frame size {size}")
            if len(self.buf) < 4 + size:
                return
            corr = struct.unpack_from(">i", self.buf, 4)[0]
            del self.buf[:4 + size]
            self.responses += 1
            self.answered.append(corr)
            self._match(corr)

    def _match(self, corr: int) -> None:
        requests = self.requests
        heads = set()
        for j in self.heads:
            while j < len(requests):
                api_key, request_corr = requests[j]
                if request_corr == corr:
                    heads.add(j + 1)
                if api_key != 0:  # only a Produce (acks=0) may be passed over unanswered
                    break
                j += 1
        if not heads:
            first = min(self.heads)
            raise Finding(f"response with correlation id {corr} answers no pending request in order "
                          f"(responses so far {self.answered[-6:]}, pending (api key, correlation id) "
                          f"{requests[first:first + 6]})")
        self.heads = heads

    def finish(self) -> None:
        if self.buf:
            raise Finding(f"{len(self.buf)} bytes of a partial response frame")


class Recorder:
    """Stands in for a module's structlog logger: records error/exception events, forwards all."""

    WATCHED = {"request_failed", "connection_failed", "response_encoding_failed", "periodic_task_failed",
               "append_io_error", "fetch_slice_short_read"}

    def __init__(self, real, findings: list) -> None:
        self._real = real
        self._findings = findings

    def __getattr__(self, name):
        return getattr(self._real, name)

    def exception(self, event, *args, **kwargs):
        if event in self.WATCHED:
            self._findings.append(f"{event} {kwargs}\n{traceback.format_exc()}")
        return self._real.exception(event, *args, **kwargs)

    def error(self, event, *args, **kwargs):
        if event in self.WATCHED:
            self._findings.append(f"{event} {kwargs}")
        return self._real.error(event, *args, **kwargs)


# -- the campaign -------------------------------------------------------------------------------------------
@dataclass
class Stats:
    seed: int
    frames: int = 0
    connections: int = 0
    closed_by_broker: int = 0
    responses: int = 0
    abandoned_busy: int = 0
    health_checks: int = 0
    elapsed_s: float = 0.0
    findings: list = field(default_factory=list)

    def line(self) -> str:
        rate = self.frames / self.elapsed_s if self.elapsed_s else 0
        return (f"connection fuzz: seed={self.seed} frames={self.frames:,} connections={self.connections:,} "
                f"closed_by_broker={self.closed_by_broker:,} responses={self.responses:,} "
                f"abandoned_long_polls={self.abandoned_busy} health_checks={self.health_checks} "
                f"findings={len(self.findings)} elapsed={self.elapsed_s:.1f}s ({rate:,.0f} frames/s)")


class Client:
    def __init__(self, server, listener, loop) -> None:
        from sundial.broker.connection import Connection

        self.check = StreamCheck()
        self.transport = FakeTransport(loop, self.check)
        self.conn = Connection(server, listener)
        self.transport.protocol = self.conn
        self.conn.connection_made(self.transport)
        self.busy_since: float | None = None

    def send(self, rng: random.Random, stream: bytes) -> None:
        """Write ``stream`` in random pieces (all of it is registered with the checker first)."""
        self.check.sent(stream)
        pos = 0
        while pos < len(stream) and not self.transport.closed:
            n = len(stream) if rng.random() < 0.7 else rng.randint(1, 512)
            self.conn.data_received(stream[pos:pos + n])
            pos += n


async def _health(server, listener, loop, corr: int, timeout_s: float = 30.0) -> None:
    c = Client(server, listener, loop)
    body = encode_request(18, 0, corr, "health", {})[4:] + b""
    meta = encode_request(3, 1, corr + 1, "health", {"topics": None})[4:]
    c.send(random.Random(0), struct.pack(">i", len(body)) + body + struct.pack(">i", len(meta)) + meta)
    deadline = time.monotonic() + timeout_s  # generous: the loop is shared with every other fuzz client
    while c.check.responses < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.001)
    if c.check.responses < 2:
        raise Finding(f"the broker stopped answering ApiVersions/Metadata on a fresh connection ({timeout_s:.0f}s)")
    c.transport.close()


@contextlib.asynccontextmanager
async def fuzz_broker(data_dir: str | None = None):
    """A started in-process broker with the fuzz topics: yields ``(server, listener, findings)``.

    While it runs, the connection, server and replica-manager loggers append every
    internal error they log to ``findings`` (structlog output is muted); both are
    restored and the broker shut down on exit.
    """
    from sundial.broker import connection as connection_mod
    from sundial.broker import replica_manager as rm_mod
    from sundial.broker import server as server_mod
    from sundial.broker.server import BrokerServer
    from sundial.broker.topics import create_topic
    from sundial.config import BrokerConfig

    own_dir = None
    if data_dir is None:
        own_dir = tempfile.TemporaryDirectory(prefix="sundial-fuzz-")
        data_dir = own_dir.name
    old_config = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL),
                        cache_logger_on_first_use=False)
    findings: list = []
    saved = (connection_mod.logger, server_mod.logger, rm_mod.logger)
    connection_mod.logger = Recorder(saved[0], findings)
    server_mod.logger = Recorder(saved[1], findings)
    rm_mod.logger = Recorder(saved[2], findings)
    server = BrokerServer(BrokerConfig({
        "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": os.path.join(data_dir, "data"),
        "socket.request.max.bytes": str(MAX_FRAME_BYTES), "group.initial.rebalance.delay.ms": "0",
        "log.segment.bytes": str(256 * 1024), "connections.max.idle.ms": "0",
        "group.min.session.timeout.ms": "10", "offsets.topic.segment.bytes": str(1 << 20)}))
    try:
        await server.start()
        for name, overrides in TOPICS.items():
            create_topic(server.broker, name, 2, -1, overrides)
        yield server, server.config.listeners[0], findings
    finally:
        try:
            await server.shutdown()
        finally:
            connection_mod.logger, server_mod.logger, rm_mod.logger = saved
            structlog.configure(**old_config)
            if own_dir is not None:
                own_dir.cleanup()


async def replay(pieces: list[bytes], timeout_s: float = 30.0) -> tuple[StreamCheck, list]:
    """Write ``pieces`` to one connection of a fresh fuzz broker, each whole and in order, letting
    the broker handle everything it can between them; returns the connection's checker (its
    ``requests`` as the broker framed them, its ``answered`` correlation ids) and the findings,
    a checker's :class:`Finding` included. Deterministic: no RNG, no timing in the result."""
    async with fuzz_broker() as (server, listener, findings):
        client = Client(server, listener, asyncio.get_running_loop())
        try:
            for piece in pieces:
                client.check.sent(piece)
                if not client.transport.closed:
                    client.conn.data_received(piece)
                deadline = time.monotonic() + timeout_s
                while client.conn.busy and not client.transport.closed and time.monotonic() < deadline:
                    await asyncio.sleep(0.001)
                await asyncio.sleep(0)
            client.check.finish()
        except Finding as exc:
            findings.append(f"{exc}")
        finally:
            client.transport.close()
            await asyncio.sleep(0)
    return client.check, findings


async def run_campaign(frames: int, seed: int | None = None, *, data_dir: str | None = None,
                       health_every: int = 2000, progress_every: int = 0, max_clients: int = 8) -> Stats:
    seed = random.SystemRandom().randrange(2**32) if seed is None else seed
    rng = random.Random(seed)
    stats = Stats(seed)
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    async with fuzz_broker(data_dir) as (server, listener, findings):
        try:
            await _campaign(server, listener, loop, rng, stats, findings, frames, health_every=health_every,
                            progress_every=progress_every, max_clients=max_clients, started=started)
        except Finding as exc:
            findings.append(f"{exc}")
        stats.elapsed_s = time.perf_counter() - started
    stats.findings = findings
    return stats


async def _campaign(server, listener, loop, rng: random.Random, stats: Stats, findings: list, frames: int, *,
                    health_every: int, progress_every: int, max_clients: int, started: float) -> None:
    corpus = schema_corpus()
    now_ms = int(time.time() * 1000)
    clients: list[Client] = []
    corr = 0
    next_progress = progress_every
    while stats.frames < frames:
        # retire closed clients and long-polling ones
        for c in list(clients):
            if c.transport.closed:
                if c.check.buf and not findings:
                    c.check.finish()
                stats.closed_by_broker += 1
                stats.responses += c.check.responses
                clients.remove(c)
            elif c.conn.busy:
                c.busy_since = c.busy_since or time.monotonic()
                if time.monotonic() - c.busy_since > 0.2:
                    stats.abandoned_busy += 1
                    stats.responses += c.check.responses
                    c.transport.close()
                    clients.remove(c)
            else:
                c.busy_since = None
        if len(clients) < max_clients or rng.random() < 0.02:
            clients.append(Client(server, listener, loop))
            stats.connections += 1
        client = rng.choice(clients)
        if client.transport.paused or client.transport.closed:
            await asyncio.sleep(0)
            continue
        # 1-3 frames, ending early at a lying size prefix; the client goes on writing to this
        # connection later, so the broker frames what follows differently (the checker follows)
        stream = b""
        for _ in range(rng.randint(1, 3)):
            corr += 1
            r = rng.random()
            if r < 0.3:
                body = produce_frame(rng, corr & 0x7FFFFFFF, now_ms)
            elif r < 0.45:
                body = read_frame(rng, corr & 0x7FFFFFFF)
            else:
                body = rng.choice(corpus)
            if rng.random() < 0.45:
                body = mutate(rng, body, corpus)
            if rng.random() < 0.02:
                body = rng.randbytes(rng.randint(0, 64))
            piece, honest = with_prefix(rng, body)
            stream += piece
            stats.frames += 1
            if not honest:
                break
        client.send(rng, stream)
        for _ in range(2):
            await asyncio.sleep(0)
        if findings:
            return
        if health_every and stats.frames // health_every > stats.health_checks:
            stats.health_checks += 1
            await _health(server, listener, loop, 2**30 + stats.health_checks * 2)
        if progress_every and stats.frames >= next_progress:
            next_progress += progress_every
            print(f"  {stats.frames:,}/{frames:,} frames, {time.perf_counter() - started:.0f}s, "
                  f"{stats.connections:,} connections", flush=True)
    for c in clients:
        await asyncio.sleep(0)
        stats.responses += c.check.responses
        c.transport.close()
    if not findings:
        await _health(server, listener, loop, 2**30 - 2)
        stats.health_checks += 1
