"""What an installed Sundial adds to site-packages: one top-level name, ``sundial``, and the Spark shim.

The wheel is built from this checkout and installed into a fresh virtual environment
that already holds PyPI's ``records`` and ``config`` packages (names Sundial's own
layers carried before they moved under ``sundial``). All three must import and work
side by side. Sundial's runtime dependencies come from the test environment (a path
entry), so the check installs nothing of Sundial's but its own wheel.
"""

from __future__ import annotations

import pathlib
import site
import subprocess
import sys
import venv
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: What the wheel may put at the top of site-packages (besides its .dist-info).
ALLOWED_TOP_LEVEL = {"sundial", "pyspark_sundial.py"}


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("wheel")
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)])
    assert built.returncode == 0, built.stderr[-3000:]
    (found,) = out.glob("sundial_broker-*.whl")
    return found


def test_the_wheel_adds_only_the_sundial_namespace_and_the_spark_shim(wheel):
    with zipfile.ZipFile(wheel) as zf:
        tops = {name.split("/")[0] for name in zf.namelist()}
        names = zf.namelist()
    tops = {t for t in tops if not t.endswith(".dist-info")}
    assert tops == ALLOWED_TOP_LEVEL
    # every layer is inside, the C accelerators under their namespaced names
    for layer in ("records", "protocol", "storage", "config", "broker", "tools", "pipeline"):
        assert f"sundial/{layer}/__init__.py" in names, layer
    assert "sundial/cli.py" in names and "sundial/__main__.py" in names
    with zipfile.ZipFile(wheel) as zf:
        entry_points = next(n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt"))
        assert "sundial = sundial.cli:main" in zf.read(entry_points).decode()


def test_the_wheel_installs_beside_pypis_records_and_config(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    others = _run([str(python), "-m", "pip", "install", "--quiet", "records==0.6.0", "config==0.5.1"])
    if others.returncode != 0 and ("No matching distribution" in others.stderr or "connection" in others.stderr.lower()):
        pytest.skip(f"PyPI's records/config could not be fetched: {others.stderr.strip().splitlines()[-1]}")
    assert others.returncode == 0, others.stderr[-3000:]
    ours = _run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)])
    assert ours.returncode == 0, ours.stderr[-3000:]
    # Sundial's runtime dependencies (kafka-python, crc32c, cramjam, structlog, ...) from this
    # test environment, appended after the new environment's own site-packages.
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    deps = [p for p in site.getsitepackages() if pathlib.Path(p).is_dir()]
    (pathlib.Path(purelib) / "zz_test_deps.pth").write_text("".join(f"{p}\n" for p in deps))

    check = """
import pathlib, sys
import records, config
import sundial.records, sundial.config, sundial.broker.server, sundial.cli
env = pathlib.Path(sys.prefix).resolve()
for mod in (records, config, sundial.records, sundial.config):
    assert env in pathlib.Path(mod.__file__).resolve().parents, (mod.__name__, mod.__file__)
# PyPI's packages are theirs ...
assert hasattr(records, "Database") and hasattr(config, "Config")
# ... and Sundial's layers work: a v2 batch round trip and a broker setting's default
from sundial.records.builder import SimpleRecord, build_batch
from sundial.config import load_broker_config
batch = build_batch(2, [SimpleRecord(1700000000000, b"k", b"v", ())])
cfg, _ = load_broker_config(None, ())
print("ok", cfg["log.segment.bytes"], len(batch) > 61)
"""
    result = _run([str(python), "-c", check], cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["ok", "1073741824", "True"]
