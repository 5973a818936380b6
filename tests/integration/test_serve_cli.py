"""``sundial serve`` as an operator runs it: bad settings, failed starts, signals, ``--version``.

Each case starts the real daemon as a subprocess and asserts what the operator sees:
the exit code, the lines on stderr (one ``sundial: ...`` line for a refused start, never
a traceback) and what was left in the data directory.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from .clients import admin
from .conftest import free_port

pytestmark = pytest.mark.integration


def serve(tmp_path, *overrides: str, port: int | None = None, data_dir: str | None = None,
          timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    """Run ``sundial serve`` to completion (for starts that must fail) and capture its output."""
    port = port or free_port()
    data_dir = data_dir or str(tmp_path / "data")
    cmd = [sys.executable, "-m", "broker", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
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
    result = subprocess.run([sys.executable, "-m", "broker", "serve", "--override", "listeners=PLAINTEXT://192.0.2.1:9092",
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
