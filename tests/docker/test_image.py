"""The runtime image from the host, with the docker CLI: the checks of docs/docker.md.

Run by scripts/test's compose suite, after the tests in the tests container, with
``SUNDIAL_DOCKER_IMAGE`` naming the runtime image it built, ``SUNDIAL_DOCKER_HOST_BOOTSTRAP``
the compose broker's published HOST listener, and ``SUNDIAL_DOCKER_LABEL`` (``key=value``)
the label that lets scripts/test remove what these tests leave behind. Without
``SUNDIAL_DOCKER_IMAGE`` the module skips.

* A client on the host follows what the compose broker advertises on its HOST listener.
* The image is lean and safe to run: non-root, no compiler or Node.js, the labels, the
  health check, SIGTERM as its stop signal, ``/data`` a volume.
* ``docker run -p 9092:9092`` of the image alone, with its default command, serves a
  kafka-python client on the host (produce, offsetsForTimes against brute force); after
  ``docker kill`` a new container on the same volume holds every acknowledged record; a
  ``docker stop`` exits 0.
* Bad input (a data directory that cannot be made, a volume the user cannot write, a
  read-only or full volume, a bad override, a port in use) ends the container with Sundial's
  one-line error in ``docker logs`` and a non-zero exit status.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import tomllib
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

IMAGE = os.environ.get("SUNDIAL_DOCKER_IMAGE")
HOST_BOOTSTRAP = os.environ.get("SUNDIAL_DOCKER_HOST_BOOTSTRAP")
LABEL = os.environ.get("SUNDIAL_DOCKER_LABEL", "sundial.tests=host")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEADLINE_S = 180

if not IMAGE:
    pytest.skip("the image checks run in scripts/test's compose suite (SUNDIAL_DOCKER_IMAGE names the image)",
                allow_module_level=True)
if shutil.which("docker") is None:
    pytest.skip("no docker command", allow_module_level=True)

pytestmark = pytest.mark.integration


def docker(*args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} exited with {result.returncode}: {result.stderr.strip()}")
    return result


@pytest.fixture
def made():
    """Names of containers and volumes a test creates; removed afterwards, whatever happened."""
    things = {"containers": [], "volumes": []}
    yield things
    for name in things["containers"]:
        docker("rm", "-f", "-v", name, check=False)
    for name in things["volumes"]:
        docker("volume", "rm", "-f", name, check=False)


def _name(prefix: str) -> str:
    return f"sundial-{prefix}-{uuid.uuid4().hex[:8]}"


def new_volume(made) -> str:
    name = _name("vol")
    docker("volume", "create", "--label", LABEL, name)
    made["volumes"].append(name)
    return name


def run_detached(made, *args: str) -> str:
    name = _name("c")
    docker("run", "-d", "--name", name, "--label", LABEL, *args)
    made["containers"].append(name)
    return name


def state(name: str) -> dict:
    return json.loads(docker("inspect", "-f", "{{json .State}}", name).stdout)


def wait_healthy(name: str) -> None:
    """The image's own HEALTHCHECK (an ApiVersions round trip) says healthy."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        s = state(name)
        assert s["Running"], f"{name} exited with {s['ExitCode']}:\n{docker('logs', name).stderr[-3000:]}"
        if s.get("Health", {}).get("Status") == "healthy":
            return
        time.sleep(0.5)
    raise AssertionError(f"{name} is not healthy after {DEADLINE_S} s: {state(name).get('Health')}")


def exit_status(name: str) -> int:
    return int(docker("wait", name, timeout=DEADLINE_S).stdout.strip())


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- what a client does ------------------------------------------------------------------------------------------
def create_topic(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"retention.ms": "-1"})])
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, count: int, base_ts: int) -> dict[int, tuple[bytes, int]]:
    """Sends ``count`` records with CreateTime base_ts + 10 * i; {offset: (value, timestamp)} of those acknowledged."""
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, request_timeout_ms=30000)
    futures = [(b"v-%05d" % i, base_ts + 10 * i, p.send(topic, value=b"v-%05d" % i, partition=0,
                                                        timestamp_ms=base_ts + 10 * i)) for i in range(count)]
    p.flush()
    acked = {}
    for value, ts, fut in futures:
        acked[fut.get(timeout=60).offset] = (value, ts)
    p.close()
    return acked


def consume(bootstrap: str, topic: str, count: int) -> dict[int, tuple[bytes, int]]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      consumer_timeout_ms=2000)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got: dict[int, tuple[bytes, int]] = {}
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < deadline:
        for batch in c.poll(timeout_ms=1000).values():
            for r in batch:
                got[r.offset] = (r.value, r.timestamp)
    c.close()
    return got


def offsets_for_times(bootstrap: str, topic: str, timestamps: list[int]) -> list[int | None]:
    c = KafkaConsumer(bootstrap_servers=bootstrap)
    tp = TopicPartition(topic, 0)
    try:
        out = []
        for ts in timestamps:
            found = c.offsets_for_times({tp: ts})[tp]
            out.append(None if found is None else found.offset)
        return out
    finally:
        c.close()


def check_round_trip(bootstrap: str, topic: str) -> dict[int, tuple[bytes, int]]:
    """Produce, consume and offsetsForTimes, each against what the test computes itself."""
    create_topic(bootstrap, topic)
    base_ts = int(time.time() * 1000) - 600_000
    acked = produce(bootstrap, topic, 200, base_ts)
    assert sorted(acked) == list(range(200))
    assert consume(bootstrap, topic, len(acked)) == acked
    targets = [base_ts - 1, base_ts, base_ts + 5, base_ts + 995, base_ts + 1990, base_ts + 1991]
    expected = [min((o for o, (_, ts) in acked.items() if ts >= t), default=None) for t in targets]
    assert offsets_for_times(bootstrap, topic, targets) == expected
    return acked


# -- the compose broker, from the host -------------------------------------------------------------------------
@pytest.mark.skipif(not HOST_BOOTSTRAP, reason="SUNDIAL_DOCKER_HOST_BOOTSTRAP (the published HOST listener) unset")
def test_host_client_follows_the_compose_brokers_host_listener():
    c = KafkaConsumer(bootstrap_servers=HOST_BOOTSTRAP)
    try:
        c.topics()                          # a metadata round trip
        brokers = c._client.cluster.brokers()
    finally:
        c.close()
    host, port = HOST_BOOTSTRAP.rsplit(":", 1)
    assert [(b.host, b.port) for b in brokers] == [(host, int(port))]   # the HOST listener, not sundial:29092
    check_round_trip(HOST_BOOTSTRAP, f"host-{uuid.uuid4().hex[:8]}")


# -- the image -----------------------------------------------------------------------------------------------------
def test_runtime_image_is_non_root_without_compiler_or_node():
    config = json.loads(docker("image", "inspect", "-f", "{{json .Config}}", IMAGE).stdout)
    assert config["User"] == "sundial"
    assert config["StopSignal"] == "SIGTERM"
    assert "/data" in config["Volumes"]
    assert config["Healthcheck"]["Test"][:4] == ["CMD", "python", "-m", "sundial.tools.healthcheck"]
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        version = tomllib.load(fh)["project"]["version"]
    assert config["Labels"]["org.opencontainers.image.version"] == version
    probe = docker("run", "--rm", "--label", LABEL, IMAGE, "sh", "-c",
                   "id -u; for c in gcc cc g++ make node npm kcat; do command -v $c; done; "
                   "ls /opt/sundial/lib/python3*/site-packages | grep -ciE '^(pytest|hypothesis|aiokafka)' || true")
    lines = probe.stdout.split()
    assert lines[0] != "0", "the image runs as root"
    assert lines[1:] == ["0"], f"tools or test packages in the runtime image: {lines[1:]}"


def test_image_alone_serves_host_clients_and_keeps_acknowledged_records_across_docker_kill(made):
    volume = new_volume(made)
    if _port_is_free(9092):
        port, command = 9092, []          # the README's `docker run -p 9092:9092`, default command
    else:
        port = _free_port()                # 9092 busy on this host: the same, advertising the port published
        command = ["sundial", "serve", "--override", "listeners=PLAINTEXT://0.0.0.0:9092",
                   "--override", f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}", "--override", "log.dirs=/data"]
    bootstrap = f"127.0.0.1:{port}"
    first = run_detached(made, "-p", f"{port}:9092", "-v", f"{volume}:/data", IMAGE, *command)
    wait_healthy(first)
    topic = f"img-{uuid.uuid4().hex[:8]}"
    acked = check_round_trip(bootstrap, topic)

    docker("kill", first)                  # SIGKILL: no clean shutdown
    assert exit_status(first) == 137
    docker("rm", first)
    second = run_detached(made, "-p", f"{port}:9092", "-v", f"{volume}:/data", IMAGE, *command)
    wait_healthy(second)
    after = consume(bootstrap, topic, len(acked))
    assert {o: after.get(o) for o in acked} == acked, "acknowledged records lost after docker kill"

    docker("stop", "-t", "60", second)     # STOPSIGNAL SIGTERM: a clean shutdown
    assert exit_status(second) == 0, docker("logs", second).stderr[-3000:]


def _one_line_failure(made, *run_args: str) -> tuple[int, list[str]]:
    name = _name("bad")
    made["containers"].append(name)
    docker("run", "--name", name, "--label", LABEL, *run_args, check=False, timeout=DEADLINE_S)
    code = exit_status(name)
    logs = docker("logs", name)
    return code, (logs.stdout + logs.stderr).strip().splitlines()


SERVE = ["sundial", "serve", "--override", "listeners=PLAINTEXT://0.0.0.0:9092",
         "--override", "advertised.listeners=PLAINTEXT://127.0.0.1:9092"]


@pytest.mark.parametrize("case", ["bad-override", "no-data-dir", "unwritable-bind-mount", "read-only-volume",
                                  "full-volume", "port-in-use"])
def test_bad_input_ends_the_container_with_one_line_and_a_non_zero_status(made, tmp_path, case):
    expected = "sundial: error: "
    if case == "bad-override":
        args = [IMAGE, "sundial", "serve", "--override", "log.segment.bytes=lots"]
        expected = "sundial: configuration error: log.segment.bytes: "
    elif case == "no-data-dir":
        args = [IMAGE, *SERVE, "--override", "log.dirs=/nonexistent/data"]
    elif case == "unwritable-bind-mount":
        host_dir = tmp_path / "root-owned"
        host_dir.mkdir(mode=0o755)
        if os.geteuid() != 0:
            pytest.skip("needs a host directory the image's user cannot write: run as root")
        args = ["-v", f"{host_dir}:/data", IMAGE]
    elif case == "read-only-volume":
        args = ["-v", f"{new_volume(made)}:/data:ro", IMAGE]
    elif case == "full-volume":
        args = ["--tmpfs", "/data:size=64k,uid=1000,mode=0755", IMAGE, "sh", "-c",
                "head -c 1000000 /dev/zero > /data/filler 2>/dev/null; exec \"$@\"", "fill", *SERVE,
                "--override", "log.dirs=/data"]
    else:  # port-in-use: a second broker in the first one's network namespace
        first = run_detached(made, IMAGE)
        wait_healthy(first)
        args = ["--network", f"container:{first}", IMAGE]
    code, lines = _one_line_failure(made, *args)
    assert code in (1, 2), (code, lines)
    assert len(lines) == 1 and lines[0].startswith(expected), lines
