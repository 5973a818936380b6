"""What the daemon advertises: docker-compose.yml's two listeners, and the wildcard refusal.

* The broker command of docker-compose.yml, run as it is (its ports replaced by free
  ones, its data directory by a temp one): a client that comes in on the containers'
  listener is told ``sundial:<port>``, one that comes in on the host's listener is told
  ``127.0.0.1:<port>``, and a real client on the host produces and consumes through it.
* A listener bound to 0.0.0.0 without advertised.listeners is a configuration error (one
  line, exit 2, nothing written), as in Kafka; an empty host advertises the host's name.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest
import yaml

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey

from .clients import connect_raw, consume_all, create_topic, producer, read_frame
from .conftest import free_port, unique_topic

pytestmark = pytest.mark.integration

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def advertised_brokers(host: str, port: int) -> list[tuple[str, int]]:
    """(host, port) of every broker in a Metadata v12 answer received on ``host:port``."""
    s = connect_raw(host, port)
    try:
        s.sendall(encode_request(ApiKey.METADATA, 12, 7, "listener-test", {
            "topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}))
        _cid, body = decode_response(ApiKey.METADATA, 12, read_frame(s))
    finally:
        s.close()
    return [(b.host, b.port) for b in body.brokers]


def compose_overrides(ports: dict[int, int], data_dir: str) -> dict[str, str]:
    with open(os.path.join(ROOT, "docker-compose.yml"), encoding="utf-8") as fh:
        text = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", fh.read())   # ${VAR:-default}: the default
    command = yaml.safe_load(text)["services"]["sundial"]["command"]
    settings = dict(item.split("=", 1) for item in command[3::2])
    for key in ("listeners", "advertised.listeners"):
        settings[key] = re.sub(r":(\d+)(?=,|$)", lambda m: f":{ports[int(m.group(1))]}", settings[key])
    settings["log.dirs"] = data_dir
    return settings


def test_compose_listeners_tell_each_client_its_own_address(broker_factory):
    node = broker_factory()
    inside = free_port()
    node.overrides.update(compose_overrides({9092: node.port, 29092: inside}, node.data_dir))
    assert f"HOST://127.0.0.1:{node.port}" in node.overrides["advertised.listeners"], node.overrides
    assert f"DOCKER://sundial:{inside}" in node.overrides["advertised.listeners"], node.overrides
    node.start()
    assert advertised_brokers("127.0.0.1", inside) == [("sundial", inside)]
    assert advertised_brokers("127.0.0.1", node.port) == [("127.0.0.1", node.port)]
    topic = unique_topic("listeners")
    create_topic(node.bootstrap, topic)
    p = producer(node.bootstrap, acks="all")
    for i in range(5):
        p.send(topic, value=f"v{i}".encode(), partition=0)
    p.flush()
    p.close()
    assert [r.value for r in consume_all(node.bootstrap, topic, [0], 5)] == [f"v{i}".encode() for i in range(5)]


def _serve(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "sundial", "serve", "--override", f"log.dirs={tmp_path / 'data'}"]
    for item in overrides:
        cmd += ["--override", item]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
                          env=dict(os.environ, SUNDIAL_LOG_FORMAT="json"))


@pytest.mark.parametrize("listeners, advertised, fragment", [
    ("PLAINTEXT://0.0.0.0:{port}", None, "listener PLAINTEXT binds 0.0.0.0, which clients cannot connect to; "
                                         "set advertised.listeners=PLAINTEXT://HOST:{port}"),
    ("PLAINTEXT://0.0.0.0:{port}", "PLAINTEXT://0.0.0.0:{port}", "uses the non-routable address 0.0.0.0"),
    ("PLAINTEXT://127.0.0.1:{port}", "OUTSIDE://example.com:{port}", "listener name OUTSIDE is not in listeners"),
])
def test_unroutable_advertised_listener_is_one_configuration_error(tmp_path, listeners, advertised, fragment):
    port = free_port()
    overrides = [f"listeners={listeners.format(port=port)}",
                 "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,OUTSIDE:PLAINTEXT"]
    if advertised:
        overrides.append(f"advertised.listeners={advertised.format(port=port)}")
    result = _serve(tmp_path, *overrides)
    assert result.returncode == 2, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("sundial: configuration error: advertised.listeners: "), lines
    assert fragment.format(port=port) in lines[0], lines
    assert not os.path.exists(tmp_path / "data")


def test_empty_listener_host_advertises_the_host_name(broker_factory):
    node = broker_factory()
    node.overrides["listeners"] = f"PLAINTEXT://:{node.port}"
    node.start()
    assert advertised_brokers("127.0.0.1", node.port) == [(socket.getfqdn(), node.port)]
