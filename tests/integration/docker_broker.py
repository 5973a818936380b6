"""Daemons in containers, for the integration tests run by docker-compose (docs/docker.md).

In the compose suite the tests run in the ``tests`` container and share one broker, the
``sundial`` service. A test that starts, stops, kills or restarts a daemon of its own gets
a container of the runtime image instead of a subprocess: :class:`ContainerSundialProcess`
has the interface of ``conftest.SundialProcess`` and drives its container through the
Docker Engine API (on the socket docker-compose.yml mounts): ``start()`` creates and
starts a container, ``stop()`` is ``docker stop`` (SIGTERM, the image's STOPSIGNAL, then a
wait), ``kill()`` is ``docker kill`` (SIGKILL), ``restart()`` a stop and a new container on
the same data directory. Its output goes to the log file a subprocess would write.

The daemon's container joins the tests container's network and process namespaces and
mounts the volume that holds the tests' temporary directories at the same path, so what
the tests see is what they see of a subprocess: ``127.0.0.1:PORT`` reaches the daemon,
``proc.pid`` names it in ``/proc``, and ``data_dir`` is its data directory. It runs as the
tests' user (the image's ``sundial`` in docker-compose.yml), so both may write the files.

:func:`docker_daemons` says whether this is possible here: it needs the Docker socket, the
tests' own container, the broker image (``SUNDIAL_BROKER_IMAGE``) and a volume under the
temporary directory; otherwise it gives the reason, and such tests skip with it.
Containers carry the label ``sundial.tests`` (the tests container's compose project) so that
scripts/test can remove whatever a killed run leaves.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import time
import urllib.parse

SOCKET_PATH = os.environ.get("SUNDIAL_DOCKER_SOCKET", "/var/run/docker.sock")
LABEL = "sundial.tests"


class DockerError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Docker API {status}: {message}")
        self.status = status


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class DockerEngine:
    """The few Engine API calls the tests need (https://docs.docker.com/engine/api/)."""

    def __init__(self, socket_path: str = SOCKET_PATH) -> None:
        self.socket_path = socket_path

    def call(self, method: str, path: str, query: dict | None = None, body: dict | None = None,
             timeout_s: float = 60.0) -> bytes:
        if query:
            path += "?" + urllib.parse.urlencode(query)
        conn = _UnixConnection(self.socket_path, timeout_s)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        if response.status >= 400:
            try:
                message = json.loads(data).get("message", "")
            except ValueError:
                message = data.decode("utf-8", "replace")
            raise DockerError(response.status, message)
        return data

    def json(self, method: str, path: str, **kwargs):
        data = self.call(method, path, **kwargs)
        return json.loads(data) if data else None

    def inspect(self, container: str) -> dict:
        return self.json("GET", f"/containers/{container}/json")

    def remove(self, container: str) -> None:
        try:
            self.call("DELETE", f"/containers/{container}", {"force": 1, "v": 1})
        except DockerError as exc:
            if exc.status != 404:
                raise


class DockerDaemons:
    """Where and how test daemons run as containers: the image, the namespaces, the mounts."""

    def __init__(self, engine: DockerEngine, image: str, self_container: dict) -> None:
        self.engine = engine
        self.image = image
        self.self_id = self_container["Id"]
        self.project = self_container["Config"]["Labels"].get("com.docker.compose.project", self.self_id[:12])
        self.mounts = self_container.get("Mounts", [])
        self.created: list[str] = []

    def mount_for(self, path: str) -> dict | None:
        """The tests container's volume (or bind mount) that holds ``path``, as a mount for another container."""
        best = None
        for m in self.mounts:
            dest = m["Destination"].rstrip("/")
            if (path == dest or path.startswith(dest + "/")) and (best is None or len(dest) > len(best["Target"])):
                if m["Type"] == "volume":
                    best = {"Type": "volume", "Source": m["Name"], "Target": dest}
                elif m["Type"] == "bind":
                    best = {"Type": "bind", "Source": m["Source"], "Target": dest}
        return best

    def run(self, command: list[str], env: dict[str, str], workdir: str) -> str:
        mount = self.mount_for(workdir)
        if mount is None:
            raise RuntimeError(f"{workdir} is on no volume of the tests container: a daemon container cannot see it")
        config = {
            "Image": self.image,
            "Cmd": command,
            "Env": [f"{k}={v}" for k, v in env.items()],
            "WorkingDir": workdir,
            "User": f"{os.getuid()}:{os.getgid()}",
            "Labels": {LABEL: self.project},
            "Healthcheck": {"Test": ["NONE"]},   # the image's probes port 9092; test daemons listen elsewhere
            "HostConfig": {
                "NetworkMode": f"container:{self.self_id}",
                "PidMode": f"container:{self.self_id}",
                "Mounts": [mount],
            },
        }
        created = self.engine.json("POST", "/containers/create", body=config)
        container = created["Id"]
        self.created.append(container)
        self.engine.call("POST", f"/containers/{container}/start")
        return container

    def remove_all(self) -> None:
        for container in self.created:
            self.engine.remove(container)
        self.created.clear()


def docker_daemons() -> DockerDaemons | str:
    """A :class:`DockerDaemons` when tests can run daemons as containers here, else the reason they cannot."""
    image = os.environ.get("SUNDIAL_BROKER_IMAGE")
    if not image:
        return "SUNDIAL_BROKER_IMAGE (the broker image for test daemons) is not set"
    if not os.path.exists(SOCKET_PATH):
        return f"no Docker socket at {SOCKET_PATH}"
    engine = DockerEngine()
    try:
        engine.call("GET", "/_ping", timeout_s=10)
        engine.json("GET", f"/images/{urllib.parse.quote(image, safe='')}/json")
        me = engine.inspect(socket.gethostname())
    except (OSError, DockerError) as exc:
        return f"Docker is not usable from the tests container: {exc}"
    return DockerDaemons(engine, image, me)


class ContainerProcess:
    """What a test holds of a daemon's process (``SundialProcess.proc``), backed by a container."""

    def __init__(self, daemons: DockerDaemons, container: str) -> None:
        self._daemons = daemons
        self.container = container
        self.returncode: int | None = None
        self._pid: int | None = None

    @property
    def pid(self) -> int:
        """The daemon's pid in this (shared) process namespace, found by its container's cgroup."""
        if self._pid is None:
            deadline = time.monotonic() + 30
            while self._pid is None:
                self._pid = _pid_in_container(self.container)
                if self._pid is None:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"no process of container {self.container[:12]} in /proc")
                    time.sleep(0.05)
        return self._pid

    def poll(self) -> int | None:
        if self.returncode is None:
            state = self._daemons.engine.inspect(self.container)["State"]
            if not state["Running"] and state["Status"] != "created":
                self.returncode = state["ExitCode"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        try:
            result = self._daemons.engine.json("POST", f"/containers/{self.container}/wait",
                                               timeout_s=timeout if timeout is not None else 24 * 3600)
        except (TimeoutError, socket.timeout) as exc:
            raise subprocess.TimeoutExpired(f"container {self.container[:12]}", timeout) from exc
        self.returncode = result["StatusCode"]
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                self._daemons.engine.call("POST", f"/containers/{self.container}/kill",
                                          {"signal": signal.Signals(sig).name})
            except DockerError as exc:
                if exc.status != 409:   # 409: it stopped meanwhile
                    raise

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def stop(self, timeout_s: float) -> int:
        """``docker stop``: the image's STOPSIGNAL (SIGTERM), then SIGKILL after ``timeout_s``."""
        if self.poll() is None:
            self._daemons.engine.call("POST", f"/containers/{self.container}/stop", {"t": int(timeout_s)},
                                      timeout_s=timeout_s + 60)
        return self.wait(60)


def _pid_in_container(container: str) -> int | None:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cgroup", encoding="utf-8") as fh:
                if container in fh.read():
                    return int(entry)
        except OSError:
            continue
    return None
