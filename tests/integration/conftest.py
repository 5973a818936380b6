"""Integration fixtures: the real ``sundial serve`` daemon as a subprocess on a free port.

* ``broker`` – a started daemon with default settings, shared by the session (tests use
  unique topic names), stopped with SIGTERM at the end; a clean exit (code 0) is asserted.
* ``broker_factory(**overrides)`` – an *unstarted* daemon; call ``.start()``. Keys are
  Kafka's dotted names: ``broker_factory(**{"log.segment.bytes": "4096"})``.

A daemon object offers ``bootstrap`` ("127.0.0.1:PORT"), ``host``, ``port``,
``data_dir``, ``start()``, ``stop()`` (SIGTERM, waits, returns the exit code),
``kill()`` (SIGKILL), ``restart()``, ``log_lines()`` (parsed JSON log events) and
``log_text()``.

With ``SUNDIAL_BOOTSTRAP=host:port`` set (the docker-compose test service), ``broker``
is that external daemon instead, and the rest run against it (tests use unique topic
names so they can share one daemon). The daemons tests start themselves then run as
containers of the broker image (``SUNDIAL_BROKER_IMAGE``), driven through the Docker API
(tests/integration/docker_broker.py): ``SundialProcess`` and ``broker_factory`` give
:class:`ContainerSundialProcess`, with the same interface. Where Docker cannot be used
from there, :data:`DAEMONS_UNAVAILABLE` says why and such tests skip with that reason.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest

pytestmark = pytest.mark.integration

EXTERNAL_BOOTSTRAP = os.environ.get("SUNDIAL_BOOTSTRAP")
#: How long a daemon's start may take (its ``broker_started`` and an open port) before the test
#: fails: the start compiles the protocol schemas (2-3 s of a core), which on a host running the
#: suite beside its busy loops and other work has been seen to pass 30 s.
START_TIMEOUT_S = 90.0
if EXTERNAL_BOOTSTRAP:
    from .docker_broker import DockerDaemons, docker_daemons

    _found = docker_daemons()
    #: How tests start daemons of their own beside the external one: containers (None: cannot).
    DOCKER_DAEMONS: "DockerDaemons | None" = _found if isinstance(_found, DockerDaemons) else None
    #: None when tests can start daemons of their own; otherwise why they cannot (their skip reason).
    DAEMONS_UNAVAILABLE: str | None = None if DOCKER_DAEMONS else (
        f"needs a daemon started by the test, here a container, but {_found}")
else:
    DOCKER_DAEMONS = None
    DAEMONS_UNAVAILABLE = None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/integration" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.integration)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class SundialProcess:
    """A ``sundial serve`` subprocess with its own data directory and port."""

    #: The ``sundial`` command: this interpreter's install.
    launcher = [sys.executable, "-m", "sundial"]

    def __init__(self, base_dir, overrides: dict | None = None, port: int | None = None) -> None:
        self.base_dir = str(base_dir)
        self.data_dir = os.path.join(self.base_dir, "data")
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.overrides = dict(overrides or {})
        self.env: dict[str, str] = {}      # extra environment of the daemon
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(self.base_dir, "sundial.log")
        self._log_fh = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        settings = {
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": self.data_dir,
            **self.overrides,
        }
        cmd = [*self.launcher, "serve"]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self, timeout_s: float = START_TIMEOUT_S) -> "SundialProcess":
        assert self.proc is None or self.proc.poll() is not None, "already running"
        os.makedirs(self.base_dir, exist_ok=True)
        self._log_fh = open(self.log_path, "ab")
        env = dict(os.environ, SUNDIAL_LOG_FORMAT="json", PYTHONUNBUFFERED="1", **self.env)
        env.setdefault("SUNDIAL_LOG_LEVEL", "info")
        self.proc = subprocess.Popen(self.command(), stdout=self._log_fh, stderr=subprocess.STDOUT, env=env,
                                     cwd=self.base_dir)
        self.starts += 1
        return self._await_start(timeout_s)

    def _await_start(self, timeout_s: float) -> "SundialProcess":
        """Wait for this start's ``broker_started`` event and the open port; kill the daemon on a timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sundial exited with {self.proc.returncode} during start:\n{self.log_text()[-4000:]}")
            if self._started_events() >= self.starts and self._port_open():
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"sundial did not start within {timeout_s}s:\n{self.log_text()[-4000:]}")

    def _started_events(self) -> int:
        return sum(1 for e in self.log_lines() if e.get("event") == "broker_started")

    def _port_open(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self, timeout_s: float = 30.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._close_log()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self._close_log()

    def restart(self, timeout_s: float = START_TIMEOUT_S) -> "SundialProcess":
        self.stop()
        return self.start(timeout_s)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _close_log(self) -> None:
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None

    def log_text(self) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_lines(self) -> list[dict]:
        events = []
        for line in self.log_text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass
        return events


class ContainerSundialProcess(SundialProcess):
    """A ``sundial serve`` container of the broker image, in place of a subprocess (compose suite).

    Each ``start()`` runs a new container on the same data directory (so a changed
    ``overrides`` or ``env`` applies, as with a new subprocess); ``stop()`` is ``docker
    stop``, ``kill()`` ``docker kill``. The daemon's output goes to ``log_path`` on the
    shared volume, as a subprocess's does: a test reads a line as soon as it is written
    (``docker logs`` passes through the log driver, a moment later).
    """

    launcher = ["sundial"]

    def start(self, timeout_s: float = START_TIMEOUT_S) -> "SundialProcess":
        from .docker_broker import ContainerProcess

        assert self.proc is None or self.proc.poll() is not None, "already running"
        os.makedirs(self.base_dir, exist_ok=True)   # by the tests' user: Docker would make a missing one as root
        env = {k: v for k, v in os.environ.items() if k.startswith("SUNDIAL_")
               and k not in ("SUNDIAL_BOOTSTRAP", "SUNDIAL_BROKER_IMAGE")}
        env.update(SUNDIAL_LOG_FORMAT="json", PYTHONUNBUFFERED="1", **self.env)
        env.setdefault("SUNDIAL_LOG_LEVEL", "info")
        # `exec`: the daemon itself is the container's process, which docker stop and kill signal
        command = ["sh", "-c", 'exec "$@" >>"$0" 2>&1', self.log_path, *self.command()]
        container = DOCKER_DAEMONS.run(command, env, self.base_dir)
        self.proc = ContainerProcess(DOCKER_DAEMONS, container)
        self.starts += 1
        return self._await_start(timeout_s)

    def stop(self, timeout_s: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        return self.proc.stop(timeout_s)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(60)


if DOCKER_DAEMONS is not None:
    # Every daemon a test starts, through broker_factory or by name, is a container.
    SundialProcess = ContainerSundialProcess  # noqa: F811


class ExternalBroker:
    """A daemon started elsewhere (docker-compose); it cannot be configured or restarted."""

    def __init__(self, bootstrap: str) -> None:
        self.host, port = bootstrap.rsplit(":", 1)
        self.port = int(port)
        self.data_dir = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def _unsupported(self, *args, **kwargs):
        pytest.skip("needs a daemon started by the test (SUNDIAL_BOOTSTRAP points at an external one)")

    start = stop = kill = restart = log_lines = log_text = _unsupported


@pytest.fixture
def broker_factory(tmp_path):
    if DAEMONS_UNAVAILABLE:
        pytest.skip(DAEMONS_UNAVAILABLE)
    made: list[SundialProcess] = []

    def make(**overrides) -> SundialProcess:
        proc = SundialProcess(tmp_path / f"broker{len(made)}", {k: str(v) for k, v in overrides.items()})
        made.append(proc)
        return proc

    yield make
    for proc in made:
        if proc.running:
            code = proc.stop()
            assert code == 0, f"sundial exited with {code} on SIGTERM:\n{proc.log_text()[-3000:]}"


@pytest.fixture(scope="session", autouse=True)
def _remove_daemon_containers():
    """The containers of test-started daemons go at the end of the session (their volume stays)."""
    yield
    if DOCKER_DAEMONS is not None:
        DOCKER_DAEMONS.remove_all()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """One daemon with default settings shared by the whole session (tests use unique topics)."""
    if EXTERNAL_BOOTSTRAP:
        yield ExternalBroker(EXTERNAL_BOOTSTRAP)
        return
    proc = SundialProcess(tmp_path_factory.mktemp("shared-broker"))
    proc.start()
    yield proc
    assert proc.running, f"the shared daemon died during the session:\n{proc.log_text()[-3000:]}"
    code = proc.stop()
    assert code == 0, f"sundial exited with {code} on SIGTERM:\n{proc.log_text()[-3000:]}"


@pytest.fixture
def topic_name():
    return unique_topic()
