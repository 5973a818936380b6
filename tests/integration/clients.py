"""Small wrappers over real clients used by the integration tests (no broker logic here)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import time

import pytest

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey

from .conftest import unique_topic


def admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: dict | None = None) -> None:
    client = admin(bootstrap)
    try:
        client.create_topics([NewTopic(name, partitions, 1, topic_configs={k: str(v) for k, v in
                                                                          (configs or {}).items()})])
    finally:
        client.close()


def producer(bootstrap: str, **kwargs) -> KafkaProducer:
    kwargs.setdefault("linger_ms", 5)
    kwargs.setdefault("request_timeout_ms", 15000)
    return KafkaProducer(bootstrap_servers=bootstrap, **kwargs)


def consumer(bootstrap: str, **kwargs) -> KafkaConsumer:
    kwargs.setdefault("enable_auto_commit", False)
    kwargs.setdefault("auto_offset_reset", "earliest")
    kwargs.setdefault("request_timeout_ms", 15000)
    return KafkaConsumer(bootstrap_servers=bootstrap, **kwargs)


def consume_all(bootstrap: str, topic: str, partitions: list[int], expected: int, *, timeout_s: float = 30.0,
                **kwargs) -> list:
    """Assign every partition from the beginning and read until ``expected`` records arrived."""
    c = consumer(bootstrap, **kwargs)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        records = []
        deadline = time.monotonic() + timeout_s
        while len(records) < expected and time.monotonic() < deadline:
            for batch in c.poll(timeout_ms=500).values():
                records.extend(batch)
        return records
    finally:
        c.close()


def topic_with_deleted_records(bootstrap: str, prefix: str, produced: int, log_start: int) -> str:
    """A new one-partition topic of ``produced`` one-byte records, those below ``log_start`` then removed
    with DeleteRecords: its name."""
    topic = unique_topic(prefix)
    create_topic(bootstrap, topic)
    p = producer(bootstrap, acks=1)
    for _ in range(produced):
        p.send(topic, value=b"x", partition=0)
    p.flush()
    p.close()
    a = admin(bootstrap)
    try:
        a.delete_records({TopicPartition(topic, 0): log_start})
    finally:
        a.close()
    return topic


def first_offset_at_or_after(produced: list[tuple[int, int]], target_ms: int, log_start: int = 0):
    """Brute force: (offset, timestamp) of the lowest offset whose timestamp >= target, or None.

    ``produced`` holds (offset, timestamp) of every record in the partition.
    """
    best = None
    for offset, ts in produced:
        if offset >= log_start and ts >= target_ms and (best is None or offset < best[0]):
            best = (offset, ts)
    return best


# -- the raw wire (tests that send hand-made frames) ----------------------------------------------
def connect_raw(host: str, port: int, *, source: str | None = None, timeout_s: float = 30.0) -> socket.socket:
    """A plain TCP connection to the broker, Nagle off; from ``source`` (an address of this host) if given.
    The default timeout is generous: a busy host answers late."""
    s = socket.create_connection((host, port), timeout=timeout_s, source_address=(source, 0) if source else None)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def read_frame(s: socket.socket) -> bytes:
    """One whole response frame, size prefix included; ConnectionError if the broker closes."""
    head = _recv_exactly(s, 4)
    return head + _recv_exactly(s, struct.unpack(">i", head)[0])


class RawConnection:
    """One raw connection: requests encoded with the project's codec, answers decoded, each answer's
    correlation id checked against its request's."""

    def __init__(self, host: str, port: int, client_id: str = "raw-client", **connect) -> None:
        self.sock = connect_raw(host, port, **connect)
        self.client_id = client_id
        self.correlation_id = 0

    @classmethod
    def to(cls, bootstrap: str, client_id: str = "raw-client", **connect) -> "RawConnection":
        host, port = bootstrap.rsplit(":", 1)
        return cls(host, int(port), client_id, **connect)

    def call(self, api_key: int, version: int, body: dict):
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, self.client_id, body))
        correlation_id, response = decode_response(api_key, version, read_frame(self.sock))
        assert correlation_id == self.correlation_id
        return response

    def authenticate_plain(self, user: str, password: str):
        """SaslHandshake v1 (PLAIN, asserted accepted), then one PLAIN SaslAuthenticate v2: its answer."""
        handshake = self.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert handshake.error_code == 0 and "PLAIN" in handshake.mechanisms, handshake
        return self.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{user}\0{password}".encode()})

    def closed(self) -> bool:
        """Whether the broker closed the connection (read within the socket's timeout)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionError:
            return True

    def close(self) -> None:
        self.sock.close()


# -- waiting for the daemon's periodic work -------------------------------------------------------
def wait_for_retention_passes(daemon, count: int = 3, *, probe_configs: dict | None = None, tick=None,
                              timeout_s: float = 60.0) -> None:
    """Return once ``count`` retention passes have run after the call (``tick()`` runs while waiting).

    A test that asserts "retention deleted nothing" must first know that passes ran; a sleep
    only guesses. Each pass is seen through a probe topic of ``daemon``: one record three hours
    old is written under ``retention.ms`` = 1 h (or ``probe_configs``), and the next pass deletes
    its segment (rolling the log first) and logs ``segment_deleted``. A pass sweeps every
    partition in one synchronous step, so a deletion seen after the write means every other
    partition was looked at after it too. ``daemon`` needs ``bootstrap`` and ``log_lines()``.
    """
    import uuid

    probe = getattr(daemon, "retention_probe", None)
    if probe is None:
        probe = daemon.retention_probe = f"retention-probe-{uuid.uuid4().hex[:8]}"
        create_topic(daemon.bootstrap, probe, configs=probe_configs or {"retention.ms": 3_600_000})

    def deletions() -> int:
        return sum(1 for e in daemon.log_lines() if e.get("event") == "segment_deleted" and e.get("topic") == probe)

    p = producer(daemon.bootstrap, acks=1, linger_ms=0)
    try:
        for _ in range(count):
            seen = deletions()
            p.send(probe, value=b"probe", partition=0, timestamp_ms=int(time.time() * 1000) - 3 * 3_600_000) \
                .get(timeout=30)
            deadline = time.monotonic() + timeout_s
            while deletions() <= seen:
                assert time.monotonic() < deadline, f"no retention pass deleted the probe's segment in {timeout_s}s"
                if tick is not None:
                    tick()
                time.sleep(0.05)
    finally:
        p.close()


# -- kafkajs (node scripts in js/) ----------------------------------------------------------------
JS_DIR = os.path.join(os.path.dirname(__file__), "js")


def require_kafkajs() -> str:
    """The folder of the kafkajs scripts, kafkajs installed there (``npm install`` on first use); the
    test skips where node, or npm for a missing kafkajs, is not installed."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    if not os.path.isdir(os.path.join(JS_DIR, "node_modules", "kafkajs")):
        if shutil.which("npm") is None:
            pytest.skip("kafkajs is not installed and npm is missing")
        result = subprocess.run(["npm", "install", "--no-audit", "--no-fund"], cwd=JS_DIR, capture_output=True,
                                timeout=300)
        if result.returncode != 0:
            pytest.skip(f"npm install failed: {result.stderr.decode(errors='replace')[-500:]}")
    return JS_DIR


def run_js(script: str, *args: str, timeout_s: float) -> list[dict]:
    """``node js/SCRIPT ARGS``: the JSON lines it printed, the run asserted to exit 0 with a last line
    that says ``done``."""
    out = subprocess.run(["node", os.path.join(JS_DIR, script), *args], capture_output=True, timeout=timeout_s)
    lines = [json.loads(x) for x in out.stdout.decode().splitlines() if x.startswith("{")]
    assert out.returncode == 0 and lines and lines[-1].get("done"), out.stderr.decode(errors="replace")[-2000:]
    return lines
