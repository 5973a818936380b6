"""The README's first command, ``scripts/serve``, run twice for real: the second start installs nothing.

Runs only where the tests themselves run from this checkout's ``.venv`` (what
``scripts/test`` sets up): the script installs into that ``.venv``. The first run may
install (when the ``.venv`` is older than pyproject.toml, setup.py or the C sources); the
second must not: the install's ``dist-info`` is untouched and pip prints nothing. Each
start is waited for on the ``broker_started`` line and ended with SIGTERM (exit 0).
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from .conftest import EXTERNAL_BOOTSTRAP, free_port

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.path.join(REPO, ".venv")


def _dist_info() -> str | None:
    found = glob.glob(os.path.join(VENV, "lib", "python3*", "site-packages", "sundial_broker-*.dist-info"))
    return found[0] if len(found) == 1 else None


def _start_and_stop(tmp_path, port: int, run: int) -> tuple[float, str]:
    out_path = tmp_path / f"serve{run}.out"
    env = dict(os.environ, SUNDIAL_LOG_FORMAT="json", SUNDIAL_LOG_LEVEL="info")
    started = time.monotonic()
    with open(out_path, "wb") as out:
        proc = subprocess.Popen([os.path.join(REPO, "scripts", "serve"),
                                 "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                                 "--override", f"log.dirs={tmp_path / 'data'}"],
                                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(tmp_path))
    try:
        deadline = started + 300  # a first run may install everything
        while time.monotonic() < deadline:
            text = out_path.read_text(errors="replace")
            if any(line.startswith("{") and json.loads(line).get("event") == "broker_started"
                   for line in text.splitlines()):
                break
            assert proc.poll() is None, f"scripts/serve exited with {proc.returncode}:\n{text[-3000:]}"
            time.sleep(0.05)
        else:
            pytest.fail(f"no broker_started within the deadline:\n{out_path.read_text()[-3000:]}")
        elapsed = time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    return elapsed, out_path.read_text(errors="replace")


@pytest.mark.skipif(EXTERNAL_BOOTSTRAP is not None, reason="runs against an external broker")
@pytest.mark.skipif(os.path.realpath(sys.prefix) != os.path.realpath(VENV),
                    reason="the tests do not run from this checkout's .venv (scripts/serve would install one)")
def test_second_start_installs_nothing(tmp_path):
    port = free_port()
    _start_and_stop(tmp_path, port, 1)
    info = _dist_info()
    assert info is not None, "scripts/serve left no install of sundial-broker in .venv"
    before = os.stat(info).st_mtime_ns
    elapsed, output = _start_and_stop(tmp_path, port, 2)
    assert os.stat(info).st_mtime_ns == before, "the second start reinstalled"
    assert [line for line in output.splitlines() if not line.startswith("{")] == [], output[:2000]
    assert "deprecat" not in output.lower()
    print(f"second start of scripts/serve: {elapsed:.2f} s to broker_started")
