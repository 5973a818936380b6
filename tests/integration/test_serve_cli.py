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
