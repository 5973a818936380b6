"""docker-compose.yml, the Dockerfile and .dockerignore, checked without a container engine.

* docker-compose.yml is read by a real YAML parser (PyYAML) and, where Debian's
  ``docker-compose`` is installed, rendered by ``docker-compose config`` (which validates
  it against the Compose schema without an engine). On what that gives, the test checks
  what the setup relies on: the broker's command is a valid Sundial configuration (the
  real loader), with one listener advertised under the service name for containers and
  one advertised on 127.0.0.1 at the port published to the host; the tests service
  bootstraps from the former; the health check probes a listener; the data volume exists.
* The Dockerfile's default command is a valid configuration that advertises a routable
  address, and its layers install the dependencies before the code is copied.
* .dockerignore keeps nested build products (``records/_speedups*.so``, egg-info,
  node_modules) out of the build context and keeps the sources in.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from sundial.config import load_broker_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(name: str) -> str:
    with open(os.path.join(ROOT, name), encoding="utf-8") as fh:
        return fh.read()


def _overrides(command: list[str]) -> list[str]:
    assert command[:2] == ["sundial", "serve"], command
    args = command[2:]
    assert len(args) % 2 == 0 and all(a == "--override" for a in args[::2]), args
    return list(args[1::2])


def _published(ports) -> dict[int, int]:
    """{container port: host port} from the short ("9092:9092") or long (published/target) syntax."""
    out = {}
    for entry in ports or []:
        if isinstance(entry, dict):
            out[int(entry["target"])] = int(entry["published"])
        else:
            host, _, container = str(entry).rpartition(":")
            out[int(container)] = int(host.rpartition(":")[2] or container)
    return out


def _check_compose(doc: dict) -> None:
    services = doc["services"]
    broker, tests = services["sundial"], services["tests"]
    assert broker["build"] and tests["build"]
    config, unknown = load_broker_config(None, _overrides(broker["command"]))
    assert unknown == {}
    listeners = {l.name: l for l in config.listeners}
    advertised = {l.name: l for l in config.advertised_listeners}
    assert set(advertised) == set(listeners) and len(listeners) == 2
    published = _published(broker.get("ports"))
    for_containers = [a for a in advertised.values() if a.host == "sundial"]
    for_host = [a for a in advertised.values() if a.host in ("127.0.0.1", "localhost")]
    assert len(for_containers) == 1 and len(for_host) == 1, advertised
    inside, outside = for_containers[0], for_host[0]
    assert inside.port == listeners[inside.name].port          # containers connect to the port itself
    assert published.get(listeners[outside.name].port) == outside.port  # the host reaches the published port
    assert listeners[inside.name].port not in published
    env = tests["environment"]
    bootstrap = env["SUNDIAL_BOOTSTRAP"] if isinstance(env, dict) else dict(e.split("=", 1) for e in env)[
        "SUNDIAL_BOOTSTRAP"]
    assert bootstrap == f"sundial:{inside.port}"
    probe = " ".join(broker["healthcheck"]["test"])
    assert re.search(rf"\b({'|'.join(str(l.port) for l in listeners.values())})\)", probe), probe
    assert tests["depends_on"]["sundial"]["condition"] == "service_healthy"
    volume = broker["volumes"][0]
    name = volume["source"] if isinstance(volume, dict) else volume.split(":")[0]
    assert name in doc["volumes"]
    assert "log.dirs=/data" in _overrides(broker["command"])


def test_compose_file_parsed_by_pyyaml():
    _check_compose(yaml.safe_load(_read("docker-compose.yml")))


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="Debian's docker-compose is not installed")
def test_compose_file_rendered_by_docker_compose_config():
    result = subprocess.run(["docker-compose", "-f", os.path.join(ROOT, "docker-compose.yml"), "config"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    _check_compose(yaml.safe_load(result.stdout))


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", _read("Dockerfile"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_default_command_is_a_valid_configuration_that_advertises_a_routable_address():
    cmd = json.loads(dict(_dockerfile_instructions())["CMD"])
    config, unknown = load_broker_config(None, _overrides(cmd))
    assert unknown == {}
    assert [l.host for l in config.listeners] == ["0.0.0.0"]
    assert [(l.host, l.port) for l in config.advertised_listeners] == [("127.0.0.1", 9092)]
    assert ("EXPOSE", "9092") in _dockerfile_instructions()


def test_dockerfile_installs_dependencies_before_copying_the_code():
    steps = _dockerfile_instructions()
    copy_all = steps.index(("COPY", ". ."))
    before = steps[:copy_all]
    assert [s for s in before if s[0] == "COPY" and "pyproject.toml" in s[1]], "pyproject.toml is not copied first"
    installs = [i for i, s in enumerate(steps) if s[0] == "RUN" and "pip install" in s[1]]
    assert installs and installs[0] < copy_all, "dependencies are installed after the code is copied"
    deps = steps[installs[0]][1]
    assert "optional-dependencies" in deps and "'test'" in deps
    after = [s for s in steps[copy_all + 1:] if s[0] == "RUN"]
    assert len(after) == 1 and "--no-deps" in after[0][1], after  # only the project itself after the code
    assert [s for s in before if s[0] == "RUN" and "npm" in s[1]], "kafkajs is installed after the code"


def _dockerignore_patterns() -> list[str]:
    return [line.strip() for line in _read(".dockerignore").splitlines()
            if line.strip() and not line.startswith("#")]


def _excluded(path: str, patterns: list[str]) -> bool:
    """Docker's rule: a pattern matches the path or one of its parent directories; `**` spans directories."""
    parts = path.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        pattern = pattern.strip("/")
        regex = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*")
        regex = regex.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        if any(re.fullmatch(regex, c) for c in candidates):
            excluded = not negate
    return excluded


@pytest.mark.parametrize("path", [
    "storage/_speedups.cpython-311-x86_64-linux-gnu.so", "records/_speedups.cpython-312-x86_64-linux-gnu.so",
    "sundial_broker.egg-info/PKG-INFO", "pipeline/x.egg-info/PKG-INFO", "broker/__pycache__/server.cpython-311.pyc",
    "tests/integration/js/node_modules/kafkajs/index.js", ".venv/bin/python", "sundial-data/meta.properties",
    "build/lib/storage/log.py", ".git/HEAD",
])
def test_dockerignore_keeps_build_products_out(path):
    assert _excluded(path, _dockerignore_patterns()), path


@pytest.mark.parametrize("path", [
    "broker/server.py", "records/_speedups.c", "pyproject.toml", "setup.py", "README.md",
    "tests/integration/js/package.json", "tests/integration/js/package-lock.json", "scripts/serve",
])
def test_dockerignore_keeps_the_sources_in(path):
    assert not _excluded(path, _dockerignore_patterns()), path


def test_every_tracked_file_the_image_needs_is_in_the_context():
    listed = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    patterns = _dockerignore_patterns()
    dropped = [p for p in listed.stdout.splitlines() if _excluded(p, patterns)]
    assert dropped == [], dropped
