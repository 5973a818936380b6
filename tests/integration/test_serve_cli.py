"""``sundial serve`` as an operator runs it: bad settings, failed starts, signals, ``--version``.

Each case starts the real daemon as a subprocess and asserts what the operator sees:
the exit code, the lines on stderr (one ``sundial: ...`` line for a refused start, never
a traceback) and what was left in the data directory.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest
from kafka import KafkaProducer

from sundial.protocol import encode_request
from sundial.protocol.api_keys import ApiKey

from support.waiting import wait_for

from .clients import admin, create_topic
from .conftest import free_port, unique_topic

pytestmark = pytest.mark.integration


def serve(tmp_path, *overrides: str, port: int | None = None, data_dir: str | None = None,
          timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    """Run ``sundial serve`` to completion (for starts that must fail) and capture its output."""
    port = port or free_port()
    data_dir = data_dir or str(tmp_path / "data")
    cmd = [sys.executable, "-m", "sundial", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", f"log.dirs={data_dir}"]
    for item in overrides:
        cmd += ["--override", item]
    env = dict(os.environ, SUNDIAL_LOG_FORMAT="json", SUNDIAL_LOG_LEVEL="info")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=str(tmp_path))


def stderr_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


# -- item 1: a bad metrics listener is a configuration error -------------------------------------
@pytest.mark.parametrize("value, fragment", [
    ("garbage", "expected host:port"),
    ("127.0.0.1:70000", "above 65535"),
    ("127.0.0.1:99999999999999999999", "above 65535"),
])
def test_bad_metrics_listener_is_one_configuration_error_line(tmp_path, value, fragment):
    result = serve(tmp_path, f"sundial.metrics.listener={value}")
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    lines = stderr_lines(result)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"sundial: configuration error: sundial.metrics.listener: invalid value {value!r}: ")
    assert fragment in lines[0]
    assert not os.path.exists(tmp_path / "data"), "the data directory was touched"


# -- item 2: a failed start is one line, and the listeners are bound first ------------------------
def assert_failed_start(result: subprocess.CompletedProcess, line: str) -> None:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    assert stderr_lines(result) == [line], result.stderr


def test_busy_port_fails_before_the_data_dir_is_created(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve(tmp_path, port=port)
    assert_failed_start(result, f"sundial: error: cannot listen on 127.0.0.1:{port}: address already in use")
    assert not os.path.exists(tmp_path / "data"), "the data directory was created before the port was checked"


def test_busy_metrics_port_fails_before_the_data_dir_is_created(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve(tmp_path, f"sundial.metrics.listener=127.0.0.1:{port}")
    assert_failed_start(result, f"sundial: error: cannot listen on 127.0.0.1:{port} (sundial.metrics.listener): "
                                f"address already in use")
    assert not os.path.exists(tmp_path / "data")


def test_address_not_on_this_host_is_one_line(tmp_path):
    # 192.0.2.0/24 is TEST-NET-1: never assigned to a local interface.
    result = subprocess.run([sys.executable, "-m", "sundial", "serve", "--override", "listeners=PLAINTEXT://192.0.2.1:9092",
                             "--override", f"log.dirs={tmp_path / 'data'}"], capture_output=True, text=True,
                            timeout=120, cwd=str(tmp_path))
    assert_failed_start(result, "sundial: error: cannot listen on 192.0.2.1:9092: cannot assign requested address")
    assert not os.path.exists(tmp_path / "data")


def test_locked_data_dir_is_one_line_and_the_running_broker_is_untouched(broker_factory, tmp_path):
    running = broker_factory().start()
    port = free_port()
    result = serve(tmp_path, port=port, data_dir=running.data_dir)
    assert_failed_start(result, f"sundial: error: data directory {running.data_dir} is locked by another Sundial "
                                f"or Kafka process")
    assert running.running
    client = admin(running.bootstrap)
    try:
        assert "__consumer_offsets" in client.list_topics()
    finally:
        client.close()


def test_data_dir_that_cannot_be_created_is_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = serve(tmp_path, data_dir=str(blocker / "data"))
    assert_failed_start(result, f"sundial: error: cannot create data directory {blocker / 'data'}: not a directory")
    result = serve(tmp_path, data_dir=str(blocker))
    assert_failed_start(result, f"sundial: error: data directory {blocker} is not a directory")


def test_missing_keystore_is_a_configuration_error_before_anything_is_written(tmp_path):
    result = serve(tmp_path, f"listeners=SSL://127.0.0.1:{free_port()}",
                   f"ssl.keystore.location={tmp_path / 'missing.pem'}")
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    assert stderr_lines(result) == [f"sundial: configuration error: ssl.keystore.location: "
                                    f"{tmp_path / 'missing.pem'} does not exist"], result.stderr
    assert not os.path.exists(tmp_path / "data")


# -- item 3: repeated SIGTERM does not abort a clean shutdown; a second SIGINT forces the exit -----
MARKER = ".kafka_cleanshutdown"
MiB = 1 << 20


def _events(node, name: str) -> list[dict]:
    return [e for e in node.log_lines() if e.get("event") == name]


def _server_side_unread_bytes(server_port: int, client_port: int) -> int | None:
    """rx_queue of the broker's end of one loopback connection (/proc/net/tcp), None if not found."""
    with open("/proc/net/tcp") as fh:
        next(fh)
        for line in fh:
            fields = line.split()
            local, remote, queues = fields[1], fields[2], fields[4]
            if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == client_port:
                return int(queues.split(":")[1], 16)
    return None


def _broker_holding_a_response(broker_factory):
    """A broker whose clean shutdown waits (up to a long grace) for a response a client does not read.

    A long-poll Fetch asks for more than the partition holds, so it parks; the shutdown
    wakes it and it answers with the 8 MB there are, which a client that stops reading
    cannot take: the response stays in flight and the shutdown waits for it, as it waits
    for any request in flight, until ``sundial.shutdown.grace.ms``.
    """
    node = broker_factory(**{"sundial.shutdown.grace.ms": "600000"}).start()
    topic = unique_topic("held")
    create_topic(node.bootstrap, topic)
    p = KafkaProducer(bootstrap_servers=node.bootstrap, acks=1, linger_ms=20, batch_size=1 << 20,
                      max_request_size=2 << 20)
    for _ in range(80):
        p.send(topic, value=os.urandom(100_000), partition=0)
    p.flush()
    p.close()
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect((node.host, node.port))
    client.sendall(encode_request(ApiKey.FETCH, 11, 1, "slow-reader", {
        "replica_id": -1, "max_wait_ms": 600_000, "min_bytes": 64 * MiB, "max_bytes": 16 * MiB,
        "isolation_level": 0, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 16 * MiB}]}]}))
    # Once the broker has read the request off the socket it handles it before any later signal.
    client_port = client.getsockname()[1]
    wait_for(lambda: _server_side_unread_bytes(node.port, client_port) == 0, 60, "the broker to read the fetch")
    return node, client


def test_repeated_sigterm_does_not_abort_the_clean_shutdown(broker_factory):
    node, client = _broker_holding_a_response(broker_factory)
    try:
        node.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: _events(node, "broker_stopping"), 60, "the shutdown to begin")
        for repeat in (1, 2):                  # `timeout` signals the process, then its group; users retry
            node.proc.send_signal(signal.SIGTERM)
            wait_for(lambda: len(_events(node, "signal_ignored")) == repeat, 60, "the repeat to be ignored")
        assert node.running, "a repeated SIGTERM ended the process"
    finally:
        client.close()                         # the response in flight is gone: the shutdown goes on
    assert node.proc.wait(120) == 0, node.log_text()[-3000:]
    assert os.path.exists(os.path.join(node.data_dir, MARKER))
    assert _events(node, "broker_stopped") and not _events(node, "forced_exit")


def test_two_quick_sigterms_leave_the_clean_shutdown_marker(broker_factory):
    node = broker_factory().start()
    os.kill(node.proc.pid, signal.SIGTERM)
    os.kill(node.proc.pid, signal.SIGTERM)
    assert node.proc.wait(120) == 0, node.log_text()[-3000:]
    assert os.path.exists(os.path.join(node.data_dir, MARKER))
    assert not _events(node, "forced_exit")


def test_second_sigint_forces_the_exit(broker_factory):
    node, client = _broker_holding_a_response(broker_factory)
    try:
        node.proc.send_signal(signal.SIGINT)
        wait_for(lambda: _events(node, "broker_stopping"), 60, "the shutdown to begin")
        node.proc.send_signal(signal.SIGINT)   # Ctrl-C again
        assert node.proc.wait(120) == 130, node.log_text()[-3000:]
    finally:
        client.close()
    assert not os.path.exists(os.path.join(node.data_dir, MARKER))
    assert _events(node, "forced_exit") and not _events(node, "broker_stopped")
    # The next start recovers and serves.
    node.start()
    starting = _events(node, "log_manager_starting")
    assert starting[-1]["unclean_log_dirs"] == [node.data_dir] and _events(node, "logs_recovered")
