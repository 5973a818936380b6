"""Resource limits of the daemon: connections, idle time, buffered request and response bytes,
queued requests, and a full disk.

* 1,000 concurrent connections are served (ApiVersions + Metadata each, all open at once).
* ``max.connections`` / ``max.connections.per.ip`` (and its overrides) refuse the excess at
  once and count connections back down when they close.
* ``connections.max.idle.ms`` closes idle connections on time and leaves busy ones alone;
  a connection stuck behind a client that does not read counts as idle.
* 100 clients that stop reading fetch responses cost bounded memory: the daemon's RSS
  growth is compared with what buffering their responses would take.
* Request bytes: with every connection blocked behind a long-poll Fetch, pipelined 1 MiB
  requests stop being read at ``queued.max.request.bytes`` in total (the pool's peak is
  reported at shutdown) and at the per-connection bound; everything is answered, in
  order, once the long polls end.
* A full disk (a 4 MiB tmpfs; needs root): Produce gets KAFKA_STORAGE_ERROR (56), what
  was acknowledged stays readable, appends resume when the filesystem grows.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey

from support.waiting import wait_for

from .clients import create_topic
from .conftest import free_port, unique_topic

MiB = 1024 * 1024


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(4)
    return head + await reader.readexactly(struct.unpack(">i", head)[0])


def fetch_request(topic: str, offset: int, *, max_wait_ms: int = 0, min_bytes: int = 1,
                  max_bytes: int = MiB, corr: int = 1) -> bytes:
    return encode_request(ApiKey.FETCH, 11, corr, "limits", {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
        "isolation_level": 0, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": max_bytes}]}]})


def big_produce_request(topic: str, size: int, corr: int) -> bytes:
    """A Produce v7 frame of about ``size`` bytes whose records are junk (answered INVALID_RECORD)."""
    return encode_request(ApiKey.PRODUCE, 7, corr, "limits", {
        "transactional_id": None, "acks": 1, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": b"\x00" * size}]}]})


# -- connections ------------------------------------------------------------------------------------
def test_a_thousand_concurrent_connections_are_served(broker):
    async def one(i: int, opened: asyncio.Event, barrier: list):
        reader, writer = await asyncio.open_connection(broker.host, broker.port)
        writer.write(encode_request(18, 0, i, "storm", {}) + encode_request(3, 1, i + 1, "storm", {"topics": None}))
        a = decode_response(18, 0, await read_frame(reader))
        m = decode_response(3, 1, await read_frame(reader))
        barrier.append(i)
        await opened.wait()  # keep every connection open until all have been served
        writer.close()
        return a[0] == i and a[1].error_code == 0 and m[0] == i + 1

    async def storm():
        opened = asyncio.Event()
        served: list = []
        tasks = [asyncio.create_task(one(i * 2, opened, served)) for i in range(1000)]
        deadline = time.monotonic() + 240  # a hang guard: a quiet host serves them in well under a second
        while len(served) < 1000 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            if any(t.done() and t.exception() for t in tasks):
                break
        concurrent = len(served)
        opened.set()
        results = await asyncio.gather(*tasks)
        return concurrent, results

    concurrent, results = asyncio.run(storm())
    assert concurrent == 1000 and all(results)


def _answered(sock: socket.socket) -> bool:
    """True if the daemon answers on ``sock``; a refused connection is closed at once (30 s only bounds a hang)."""
    sock.settimeout(30)
    try:
        sock.sendall(encode_request(18, 0, 7, "cap", {}))
        return len(sock.recv(8)) > 0
    except OSError:
        return False


def _open_connections(metrics_port: int) -> float:
    """The daemon's ``sundial_connections`` gauge."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("sundial_connections "):
                return float(line.split()[1])
    raise AssertionError("no sundial_connections gauge")


def test_max_connections_and_per_ip_limits(broker_factory):
    metrics_port = free_port()
    b = broker_factory(**{"max.connections.per.ip": "10",
                          "sundial.metrics.listener": f"127.0.0.1:{metrics_port}"}).start()
    socks = [socket.create_connection((b.host, b.port)) for _ in range(15)]
    assert sum(_answered(s) for s in socks) == 10
    for s in socks:
        s.close()
    wait_for(lambda: _open_connections(metrics_port) == 0, 60, "the daemon to count the closed connections down")
    socks = [socket.create_connection((b.host, b.port)) for _ in range(10)]
    assert all(_answered(s) for s in socks), "closed connections must be counted down"
    for s in socks:
        s.close()
    refused = [e for e in b.log_lines() if e.get("event") == "connection_refused"]
    assert len(refused) == 5 and refused[0]["reason"] == "max.connections.per.ip"
    b.stop()
    b2 = broker_factory(**{"max.connections": "12", "max.connections.per.ip": "3",
                           "max.connections.per.ip.overrides": "127.0.0.1:100"}).start()
    socks = [socket.create_connection((b2.host, b2.port)) for _ in range(16)]
    assert sum(_answered(s) for s in socks) == 12
    for s in socks:
        s.close()
    assert any(e.get("reason") == "max.connections" for e in b2.log_lines() if e.get("event") == "connection_refused")


def test_idle_connections_close_on_time_busy_ones_stay(broker_factory):
    """Idle connections are closed, never before ``connections.max.idle.ms`` (by the client's clock
    from its connect, and by the daemon's own count in its log line); a connection that keeps
    sending stays open. The limit (3 s) is far above the active client's 50 ms pace, so a busy
    host cannot make the active connection look idle; how soon after the limit the sweep
    closes the others is the machine's speed and is not asserted."""
    idle_ms = 3000
    b = broker_factory(**{"connections.max.idle.ms": str(idle_ms)}).start()
    connected_at = []
    idle = []
    for _ in range(100):
        connected_at.append(time.monotonic())
        idle.append(socket.create_connection((b.host, b.port)))
    active = socket.create_connection((b.host, b.port))
    closed_at: dict[int, float] = {}
    corr = 0
    deadline = time.monotonic() + 120  # a hang guard
    while len(closed_at) < 100 and time.monotonic() < deadline:
        corr += 1
        active.sendall(encode_request(18, 0, corr, "busy", {}))
        assert active.recv(4096), "the active connection was closed"
        for i, s in enumerate(idle):
            if i in closed_at:
                continue
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    closed_at[i] = time.monotonic()
            except BlockingIOError:
                pass
            except ConnectionError:
                closed_at[i] = time.monotonic()
        time.sleep(0.05)
    assert len(closed_at) == 100, f"{100 - len(closed_at)} idle connections still open"
    early = {i: round(t - connected_at[i], 3) for i, t in closed_at.items() if t - connected_at[i] < idle_ms / 1000}
    assert not early, f"closed before {idle_ms} ms idle: {early}"
    logged = [e["idle_ms"] for e in b.log_lines() if e.get("event") == "connection_idle_closed"]
    assert len(logged) == 100 and min(logged) >= idle_ms, logged
    active.sendall(encode_request(18, 0, corr + 1, "busy", {}))
    assert active.recv(4096), "the active connection was closed"
    active.close()
    for s in idle:
        s.close()


# -- buffered bytes -----------------------------------------------------------------------------------
def test_clients_that_stop_reading_cost_bounded_memory(broker_factory):
    b = broker_factory(**{"connections.max.idle.ms": "6000"}).start()
    topic = unique_topic("slow")
    create_topic(b.bootstrap, topic)
    p = KafkaProducer(bootstrap_servers=b.bootstrap, acks=1, linger_ms=20, batch_size=1 << 20,
                      max_request_size=2 << 20)
    value = os.urandom(100_000)
    for i in range(160):  # 16 MB of data
        p.send(topic, value=value, partition=0)
    p.flush()
    p.close()
    base_rss = rss_bytes(b.proc.pid)
    clients = []
    for i in range(100):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((b.host, b.port))
        s.setblocking(False)
        clients.append(s)
    requests_each = 30  # 30 × 1 MiB responses per client that never reads: 3 GB if buffered
    for i, s in enumerate(clients):
        data = b"".join(fetch_request(topic, (i * 7 + k * 11) % 150, corr=k) for k in range(requests_each))
        try:
            s.send(data)
        except BlockingIOError:
            pass
    peak = base_rss
    t_end = time.monotonic() + 4
    while time.monotonic() < t_end:
        peak = max(peak, rss_bytes(b.proc.pid))
        time.sleep(0.1)
    growth_mb = (peak - base_rss) / MiB
    # each stuck connection may hold the write high-water mark (1 MiB) plus one 256 KiB chunk
    assert growth_mb < 100 * 1.25 + 60, f"RSS grew {growth_mb:.0f} MB"
    # the daemon still serves everyone else (within the client's request timeout, a hang guard)
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, request_timeout_ms=30000)
    tp = TopicPartition(topic, 0)
    assert c.end_offsets([tp])[tp] == 160
    c.close()
    # and the stuck connections count as idle once nothing moves for connections.max.idle.ms
    wait_for(lambda: sum(1 for e in b.log_lines() if e.get("event") == "connection_idle_closed") >= 100, 120,
             "the 100 stuck connections to be closed as idle")
    for s in clients:
        s.close()
    print(f"\nslow readers: base RSS {base_rss / MiB:.0f} MB, peak growth {growth_mb:.0f} MB for 100 clients "
          f"× {requests_each} unread 1 MiB fetch responses")


def test_request_bytes_are_bounded_per_connection_and_in_total(broker_factory):
    limit = 16 * MiB
    b = broker_factory(**{"queued.max.request.bytes": str(limit)}).start()
    topic = unique_topic("pool")
    create_topic(b.bootstrap, topic)
    base_rss = rss_bytes(b.proc.pid)
    frames_each, frame_size, clients_n = 8, MiB, 40

    async def client(i: int, sent_at_1s: list):
        reader, writer = await asyncio.open_connection(b.host, b.port)
        # a long poll keeps the connection busy, so everything after it queues in the broker
        writer.write(fetch_request(topic, 0, max_wait_ms=3000, corr=0))
        payload = b"".join(big_produce_request("no-such-topic", frame_size, k + 1) for k in range(frames_each))
        writer.write(payload)
        await asyncio.sleep(1.0)
        sent_at_1s.append(len(payload) - writer.transport.get_write_buffer_size())
        corrs = []
        for k in range(frames_each + 1):
            frame = await read_frame(reader)
            corrs.append(struct.unpack_from(">i", frame, 4)[0])
        writer.close()
        return corrs

    async def run():
        sent: list = []
        results = await asyncio.wait_for(asyncio.gather(*(client(i, sent) for i in range(clients_n))), 300)
        return sent, results

    async def sample_rss(stop: asyncio.Event, out: list):
        while not stop.is_set():
            out.append(rss_bytes(b.proc.pid))
            await asyncio.sleep(0.05)

    async def main():
        stop = asyncio.Event()
        samples: list = []
        sampler = asyncio.create_task(sample_rss(stop, samples))
        sent, results = await run()
        stop.set()
        await sampler
        return sent, results, max(samples)

    sent, results, peak_rss = asyncio.run(main())
    assert all(r == list(range(frames_each + 1)) for r in results), "every request answered, in order"
    offered = clients_n * frames_each * frame_size
    accepted_at_1s = sum(sent)
    assert b.stop() == 0
    stopping = next(e for e in b.log_lines() if e.get("event") == "broker_stopping")
    pool_peak = stopping["request_pool_peak_bytes"]
    # Kafka's non-strict pool: at most one frame over the limit, plus small frames read in one go
    assert pool_peak <= limit + frame_size + clients_n * 64 * 1024, pool_peak
    growth_mb = (peak_rss - base_rss) / MiB
    assert growth_mb < 3 * limit / MiB + 60, f"RSS grew {growth_mb:.0f} MB"
    print(f"\nrequest pool: {offered / MiB:.0f} MiB offered by {clients_n} blocked connections, "
          f"{accepted_at_1s / MiB:.0f} MiB left the clients within 1 s (kernel buffers included), pool peak "
          f"{pool_peak / MiB:.1f} MiB (limit {limit / MiB:.0f}), RSS growth {growth_mb:.0f} MB")


def test_per_connection_queue_bound_pauses_reading(broker_factory):
    b = broker_factory().start()
    topic = unique_topic("q")
    create_topic(b.bootstrap, topic)

    async def main():
        reader, writer = await asyncio.open_connection(b.host, b.port, limit=8 * MiB)
        # a long poll that only the test ends (by producing): the connection stays blocked,
        # however long a busy host takes to push the pipelined frames
        writer.write(fetch_request(topic, 0, max_wait_ms=120_000, corr=0))
        n = 48
        payload = b"".join(big_produce_request("no-such-topic", MiB, k + 1) for k in range(n))
        writer.write(payload)
        await asyncio.sleep(1.2)  # time to push: whatever the daemon takes in, it takes while blocked
        unsent = writer.transport.get_write_buffer_size()
        p = KafkaProducer(bootstrap_servers=b.bootstrap, acks=1)
        await asyncio.to_thread(lambda: p.send(topic, value=b"wake", partition=0).get(timeout=30))
        p.close()
        corrs = [struct.unpack_from(">i", await read_frame(reader), 4)[0] for _ in range(n + 1)]
        writer.close()
        return len(payload) - unsent, corrs

    sent, corrs = asyncio.run(main())
    assert corrs == list(range(49))
    # 16 MiB may queue in the broker, plus the kernel's socket buffers; never the whole 48 MiB
    assert sent < 40 * MiB, f"{sent / MiB:.1f} MiB were read while the connection was blocked"


def test_queued_max_requests_keeps_pipelined_requests_in_order(broker_factory):
    b = broker_factory(**{"queued.max.requests": "5"}).start()
    topic = unique_topic("qmr")
    create_topic(b.bootstrap, topic)
    s = socket.create_connection((b.host, b.port), timeout=60)
    s.sendall(fetch_request(topic, 0, max_wait_ms=1000, corr=0)
              + b"".join(encode_request(18, 0, k, "pipe", {}) for k in range(1, 301)))
    buf = b""
    got = []
    while len(got) < 301:
        chunk = s.recv(65536)
        assert chunk, "closed"
        buf += chunk
        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
            size = struct.unpack_from(">i", buf)[0]
            got.append(struct.unpack_from(">i", buf, 4)[0])
            buf = buf[4 + size:]
    assert got == list(range(301))
    s.close()


# -- disk full --------------------------------------------------------------------------------------------
def _mount_tmpfs(size: str) -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    mnt = tempfile.mkdtemp(prefix="sundial-disk-")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mnt], capture_output=True).returncode:
        os.rmdir(mnt)
        return None
    return mnt


def test_disk_full_gives_kafka_storage_error_and_recovers(broker_factory):
    mnt = _mount_tmpfs("4m")
    if mnt is None:
        pytest.skip("needs root to mount a small tmpfs (tests/unit/storage/test_disk_full.py injects faults)")
    try:
        b = broker_factory(**{"log.dirs": os.path.join(mnt, "data"), "log.segment.bytes": str(MiB),
                              "log.index.size.max.bytes": str(64 * 1024)}).start()
        topic = unique_topic("full")
        create_topic(b.bootstrap, topic)
        p = KafkaProducer(bootstrap_servers=b.bootstrap, acks=1, retries=0, linger_ms=0)
        acked = []
        error = None
        for i in range(10_000):
            try:
                acked.append(p.send(topic, value=b"%06d" % i + b"x" * 994, partition=0).get(timeout=30).offset)
            except Exception as exc:  # noqa: BLE001 - the first failure is what we want
                error = exc
                break
        assert error is not None and "KafkaStorageError" in type(error).__name__, repr(error)
        assert acked == list(range(len(acked)))
        # still full: more failures, the daemon alive, everything acknowledged readable
        with pytest.raises(Exception) as again:
            p.send(topic, value=b"y" * 1000, partition=0).get(timeout=30)
        assert "KafkaStorageError" in type(again.value).__name__
        c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        values = []
        deadline = time.monotonic() + 60
        while len(values) < len(acked) and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=300).values():
                values.extend(r.value[:6] for r in recs)
        assert values == [b"%06d" % i for i in range(len(acked))]
        assert any(e.get("error") == "KAFKA_STORAGE_ERROR" for e in b.log_lines() if e.get("event") == "append_rejected")
        # space returns: appends resume at the next offset
        subprocess.run(["mount", "-o", "remount,size=16m", mnt], check=True)
        n = len(acked)
        more = [p.send(topic, value=b"%06d" % (n + i) + b"z" * 10, partition=0).get(timeout=30).offset
                for i in range(50)]
        assert more == list(range(n, n + 50))
        p.close()
        c.close()
        assert b.stop() == 0
        b.start()  # clean restart: nothing lost, nothing doubled
        c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
        c.assign([tp])
        values = []
        deadline = time.monotonic() + 60
        while len(values) < n + 50 and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=300).values():
                values.extend(r.value[:6] for r in recs)
        c.close()
        assert values == [b"%06d" % i for i in range(n + 50)]
        assert b.stop() == 0
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True)
        os.rmdir(mnt)
