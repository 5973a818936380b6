"""What the benchmark scripts share: a free port, a process's CPU time, and starting a daemon.

The scripts run as ``python benchmarks/NAME.py``, so this directory is on ``sys.path``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of ``pid`` from /proc, or None when unknown."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def start_sundial(data_dir: str, overrides: dict | None = None, *, env: dict | None = None,
                  log_path: str | None = None, cwd: str | None = None,
                  timeout_s: float = 30.0, port: int | None = None) -> tuple[subprocess.Popen, str]:
    """Start ``python -m broker serve`` on a loopback port (``port``, or a free one) with
    ``log.dirs=data_dir`` (plus ``overrides``, Kafka's dotted names) and wait until it accepts
    connections. Returns the process and its bootstrap address; exits the script if it does
    not start."""
    port = port or free_port()
    settings = {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": data_dir, **(overrides or {})}
    cmd = [sys.executable, "-m", "broker", "serve", "--log-level", "warning"]
    for key, value in settings.items():
        cmd += ["--override", f"{key}={value}"]
    out = open(log_path, "wb") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if log_path else subprocess.DEVNULL,
                            cwd=cwd, env=dict(os.environ, **(env or {})))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"sundial exited with {proc.returncode}" + (f"; see {log_path}" if log_path else ""))
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"sundial did not start within {timeout_s:.0f} s")
