"""docker-compose.yml, the Dockerfile, .dockerignore and their helpers, checked without a container engine.

* docker-compose.yml is read by a real YAML parser (PyYAML, with Compose's ``${VAR:-default}``
  interpolation) and, where Debian's ``docker-compose`` is installed, rendered by
  ``docker-compose config`` (which validates it against the Compose schema without an
  engine). On what that gives, the test checks what the setup relies on: the broker runs
  from the runtime stage and the tests from the test stage, each image built once; the
  broker's command is a valid Sundial configuration (the real loader), with one listener
  advertised under the service name for containers and one advertised on 127.0.0.1 at the
  port published to the host (also when SUNDIAL_HOST_PORT moves it); the tests service
  bootstraps from the former; the health check sends ApiVersions to a listener; the data
  volume is named; the tests' temporary directories are on a volume and the Docker socket
  is mounted, for the daemons tests start as containers.
* The Dockerfile: the base image is a build argument defaulting to the official slim
  image, the stages are builder, runtime and test; the runtime stage is non-root, carries
  no compiler, node or test package, has ``/data`` as a volume, SIGTERM as its stop
  signal, a health check and OCI labels with the project's version; its default command is
  a valid configuration advertising a routable address; dependencies are installed
  before the code is copied; every C accelerator of setup.py is checked at build; no
  install failure is ignored.
* .dockerignore keeps nested build products (``records/_speedups*.so``, egg-info,
  node_modules) out of the build context and keeps the sources in.
* tests/integration/js/install.py (kafkajs without npm) checks integrity and refuses
  tarball paths outside the package; scripts/base-image reads its default from the Dockerfile.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tomllib

import pytest
import yaml

from sundial.config import load_broker_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(name: str) -> str:
    with open(os.path.join(ROOT, name), encoding="utf-8") as fh:
        return fh.read()


def _interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR:-default}``, ``${VAR}`` and ``$$`` (enough for this file)."""
    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name, default = m.group(1), m.group(3)
        return env.get(name) or (default if default is not None else "")
    return re.sub(r"\$\$|\$\{(\w+)(:-([^}]*))?\}", sub, text)


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


def _dockerfile_base_default() -> str:
    return re.search(r"^ARG BASE_IMAGE=(\S+)$", _read("Dockerfile"), re.M).group(1)


def _version() -> str:
    return tomllib.loads(_read("pyproject.toml"))["project"]["version"]


def _check_compose(doc: dict, host_port: int = 9092) -> None:
    services = doc["services"]
    broker, tests = services["sundial"], services["tests"]
    # built once each, from the stages meant for them, on the same base
    assert broker["build"]["target"] == "runtime" and tests["build"]["target"] == "test"
    for service in (broker, tests):
        assert service["build"]["args"]["BASE_IMAGE"] == _dockerfile_base_default()
    assert broker["image"] != tests["image"]
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
    assert published.get(listeners[outside.name].port) == outside.port == host_port  # the host: the published port
    assert listeners[inside.name].port not in published
    env = tests["environment"]
    env = env if isinstance(env, dict) else dict(e.split("=", 1) for e in env)
    assert env["SUNDIAL_BOOTSTRAP"] == f"sundial:{inside.port}"
    assert env["SUNDIAL_BROKER_IMAGE"] == broker["image"]   # the daemons tests start: the broker's image
    probe = broker["healthcheck"]["test"]
    assert probe[:4] == ["CMD", "python", "-m", "sundial.tools.healthcheck"], probe
    assert probe[4] == f"127.0.0.1:{inside.port}"
    assert tests["depends_on"]["sundial"]["condition"] == "service_healthy"
    volume = broker["volumes"][0]
    name, target = (volume["source"], volume["target"]) if isinstance(volume, dict) else volume.split(":")[:2]
    assert name in doc["volumes"] and target == "/data"
    assert "log.dirs=/data" in _overrides(broker["command"])
    # the daemons tests start: the Docker socket, and the tests' temporary directories on a volume
    mounts = {}
    for v in tests["volumes"]:
        source, target = (v["source"], v["target"]) if isinstance(v, dict) else v.split(":")[:2]
        mounts[target] = source
    assert mounts["/var/run/docker.sock"] == "/var/run/docker.sock"
    basetemp = [a.split("=", 1)[1] for a in tests["command"] if a.startswith("--basetemp=")]
    assert len(basetemp) == 1
    scratch = [t for t in mounts if basetemp[0].startswith(t.rstrip("/") + "/")]
    assert len(scratch) == 1 and mounts[scratch[0]] in doc["volumes"], (basetemp, mounts)
    assert "tests/integration" in tests["command"]


def test_compose_file_parsed_by_pyyaml():
    _check_compose(yaml.safe_load(_interpolate(_read("docker-compose.yml"), {})))


def test_compose_host_port_moves_the_published_port_and_the_advertised_one_together():
    doc = yaml.safe_load(_interpolate(_read("docker-compose.yml"), {"SUNDIAL_HOST_PORT": "19092"}))
    _check_compose(doc, host_port=19092)


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="Debian's docker-compose is not installed")
@pytest.mark.parametrize("host_port", [None, "19092"])
def test_compose_file_rendered_by_docker_compose_config(host_port):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SUNDIAL_", "COMPOSE_"))}
    if host_port:
        env["SUNDIAL_HOST_PORT"] = host_port
    result = subprocess.run(["docker-compose", "-f", os.path.join(ROOT, "docker-compose.yml"), "config"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    _check_compose(yaml.safe_load(result.stdout), host_port=int(host_port or 9092))


# -- the Dockerfile ----------------------------------------------------------------------------------------------
def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", _read("Dockerfile"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _stages() -> dict[str, list[tuple[str, str]]]:
    """{stage name: its instructions}; "" holds what comes before the first FROM."""
    stages: dict[str, list[tuple[str, str]]] = {"": []}
    current = ""
    for word, rest in _dockerfile_instructions():
        if word == "FROM":
            image, _, name = rest.partition(" AS ")
            current = name.strip()
            stages[current] = [(word, image.strip())]
        else:
            stages[current].append((word, rest))
    return stages


def test_dockerfile_stages_build_on_a_base_image_argument():
    stages = _stages()
    assert list(stages) == ["", "builder", "runtime", "test"]
    assert stages[""] == [("ARG", "BASE_IMAGE=python:3.11-slim-bookworm")]
    assert stages["builder"][0] == ("FROM", "${BASE_IMAGE}") and stages["runtime"][0] == ("FROM", "${BASE_IMAGE}")
    assert stages["test"][0] == ("FROM", "runtime")


def test_runtime_stage_is_lean_non_root_and_labelled():
    runtime = _stages()["runtime"]
    text = " ".join(rest for _, rest in runtime)
    assert not re.search(r"\b(gcc|nodejs|npm|kcat|libc6-dev)\b", text), "build or test tools in the runtime stage"
    copies = [rest for word, rest in runtime if word == "COPY"]
    assert copies == ["--from=builder /opt/sundial /opt/sundial"], copies
    users = [rest for word, rest in runtime if word == "USER"]
    assert users == ["sundial"]
    assert ("VOLUME", '["/data"]') in runtime and ("STOPSIGNAL", "SIGTERM") in runtime
    health = [rest for word, rest in runtime if word == "HEALTHCHECK"]
    assert len(health) == 1 and 'CMD ["python", "-m", "sundial.tools.healthcheck", "127.0.0.1:9092"]' in health[0]
    assert ("ARG", f"VERSION={_version()}") in runtime
    labels = " ".join(rest for word, rest in runtime if word == "LABEL")
    assert 'org.opencontainers.image.version="${VERSION}"' in labels


def test_dockerfile_default_command_is_a_valid_configuration_that_advertises_a_routable_address():
    runtime = _stages()["runtime"]
    cmd = json.loads(dict(runtime)["CMD"])
    config, unknown = load_broker_config(None, _overrides(cmd))
    assert unknown == {}
    assert [l.host for l in config.listeners] == ["0.0.0.0"]
    assert [(l.host, l.port) for l in config.advertised_listeners] == [("127.0.0.1", 9092)]
    assert ("EXPOSE", "9092") in runtime
    assert "log.dirs=/data" in cmd


def test_builder_installs_dependencies_before_copying_the_code():
    steps = _stages()["builder"]
    copy_all = steps.index(("COPY", ". ."))
    before = steps[:copy_all]
    assert [s for s in before if s[0] == "COPY" and "pyproject.toml" in s[1]], "pyproject.toml is not copied first"
    installs = [i for i, s in enumerate(steps) if s[0] == "RUN" and "pip install" in s[1]]
    assert installs and installs[0] < copy_all, "dependencies are installed after the code is copied"
    deps = steps[installs[0]][1]
    assert "['dependencies']" in deps and "['test']" in deps
    after = [s for s in steps[copy_all + 1:] if s[0] == "RUN"]
    assert len(after) == 1 and "--no-deps" in after[0][1], after  # only the project itself after the code
    assert [s for s in before if s[0] == "RUN" and "install.py" in s[1]], "kafkajs is installed after the code"


def test_builder_checks_every_c_accelerator_of_setup_py():
    built = set(re.findall(r'Extension\("([\w.]+)"', _read("setup.py")))
    assert len(built) >= 3   # the record walks, the cleaner, the fsync worker
    after_copy = _stages()["builder"]
    check = after_copy[-1][1]
    imported = set(re.findall(r"\bsundial(?:\.\w+)+", check.split("-c", 1)[1]))
    assert imported == built


def test_no_install_failure_is_ignored():
    for word, rest in _dockerfile_instructions():
        if word == "RUN":
            assert "|| true" not in rest and "; true" not in rest, rest


def test_test_stage_holds_the_test_tools_and_runs_the_integration_suite():
    test = _stages()["test"]
    text = " ".join(rest for _, rest in test)
    assert re.search(r"apt-get install .*\bkcat\b.*\bnodejs\b", text)
    assert "/tmp/test-requirements.txt" in text
    assert ("HEALTHCHECK", "NONE") in test           # not a broker: the runtime's probe does not apply
    assert ("COPY", "--from=builder /src/tests/integration/js/node_modules tests/integration/js/node_modules") in test
    assert test[-2:] == [("USER", "sundial"), ("CMD", '["python", "-m", "pytest", "-q", "tests/integration", '
                                                     '"-m", "not spark"]')]
    # no package sources in the test image's working directory: imports find the installed wheel
    copied = [rest.split()[0] for word, rest in test if word == "COPY" and not rest.startswith("--from")]
    for layer in ("sundial", "broker", "storage", "records", "protocol", "config", "tools", "pipeline", "."):
        assert layer not in copied, copied


# -- .dockerignore -----------------------------------------------------------------------------------------------
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
    "tests/integration/js/package.json", "tests/integration/js/package-lock.json", "tests/integration/js/install.py",
    "scripts/serve", "tools/healthcheck.py", "docker-compose.yml", "benchmarks/crash_loop.py",
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


# -- kafkajs without npm -------------------------------------------------------------------------------------------
def _install_module():
    spec = importlib.util.spec_from_file_location("js_install", os.path.join(ROOT, "tests/integration/js/install.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tarball(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _sri(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def test_js_install_checks_the_lock_files_integrity_and_unpacks_the_package(tmp_path):
    install = _install_module()
    data = _tarball({"package/package.json": b"{}", "package/src/index.js": b"module.exports = 1\n"})
    install.check_integrity("x", data, _sri(data))
    with pytest.raises(install.InstallError):
        install.check_integrity("x", data, _sri(data + b"tampered"))
    target = tmp_path / "node_modules" / "x"
    install.unpack("x", data, str(target))
    assert (target / "src" / "index.js").read_bytes() == b"module.exports = 1\n"
    with pytest.raises(install.InstallError):
        install.unpack("evil", _tarball({"package/../../escaped.js": b""}), str(tmp_path / "node_modules" / "evil"))
    assert not (tmp_path / "escaped.js").exists()
    assert install.tarball_url("@scope/pkg", {"version": "1.2.3"}).endswith("/@scope/pkg/-/pkg-1.2.3.tgz")


def test_js_lock_file_pins_every_package_with_an_integrity_hash():
    lock = json.loads(_read("tests/integration/js/package-lock.json"))
    entries = {p: e for p, e in lock["packages"].items() if p.startswith("node_modules/")}
    assert "node_modules/kafkajs" in entries
    assert all(e.get("integrity", "").startswith("sha512-") and e.get("version") for e in entries.values())


# -- scripts/base-image ------------------------------------------------------------------------------------------
def test_base_image_script_reads_its_default_from_the_dockerfile():
    text = _read("scripts/base-image")
    assert "sed -n 's/^ARG BASE_IMAGE=//p' Dockerfile" in text
    result = subprocess.run([os.path.join(ROOT, "scripts", "base-image"), "--help"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and "scripts/base-image" in result.stdout, result.stderr
    bad = subprocess.run([os.path.join(ROOT, "scripts", "base-image"), "--bogus"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "unknown argument" in bad.stderr
