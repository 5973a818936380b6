"""``scripts/serve`` installs only when needed: its decision, on a project laid out in a temp dir.

The script runs as it is (a copy of the real file) in a directory that has the project's
build files and a ``.venv`` whose ``python`` and ``sundial`` are small shell programs: the
``python`` records each call and, for ``-m pip install``, writes the ``dist-info`` that a
real editable install leaves; ``sundial`` prints its arguments. The real install and the
start time are covered by tests/integration/test_serve_script.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FAKE_PYTHON = textwrap.dedent("""\
    #!/bin/sh
    echo "$*" >> "$CALLS"
    if [ "$1 $2 $3" = "-m pip install" ]; then
      d=.venv/lib/python3.11/site-packages/sundial_broker-0.1.0.dist-info
      mkdir -p "$d"
      printf '{"dir_info": {"editable": true}, "url": "file://%s"}' "$(pwd -P)" > "$d/direct_url.json"
      touch "$d"
    fi
    """)

FAKE_SUNDIAL = "#!/bin/sh\necho \"sundial $*\"\n"


def _write(path, text: str, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)
    os.chmod(path, mode)


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "proj"
    os.makedirs(root / "scripts")
    shutil.copy(os.path.join(REPO, "scripts", "serve"), root / "scripts" / "serve")
    _write(str(root / "pyproject.toml"), "[project]\nname = 'sundial-broker'\n")
    _write(str(root / "setup.py"), "from setuptools import setup\nsetup()\n")
    _write(str(root / "records" / "_speedups.c"), "/* C */\n")
    _write(str(root / ".venv" / "bin" / "python"), FAKE_PYTHON, 0o755)
    _write(str(root / ".venv" / "bin" / "sundial"), FAKE_SUNDIAL, 0o755)
    old = 1_700_000_000  # build inputs older than any install the fake pip makes
    for name in ("pyproject.toml", "setup.py", "records/_speedups.c"):
        os.utime(root / name, (old, old))
    return root


def run_serve(project, *args: str) -> tuple[str, list[str]]:
    calls = project / "calls.log"
    if calls.exists():
        calls.unlink()
    result = subprocess.run(["bash", str(project / "scripts" / "serve"), *args], capture_output=True, text=True,
                            env=dict(os.environ, CALLS=str(calls)), cwd="/", timeout=60)
    assert result.returncode == 0, result.stderr
    pip = [line for line in (calls.read_text().splitlines() if calls.exists() else []) if "pip" in line]
    return result.stdout, pip


def _dist_info(project):
    return project / ".venv" / "lib" / "python3.11" / "site-packages" / "sundial_broker-0.1.0.dist-info"


def test_first_start_installs_in_a_mode_without_deprecation_and_later_starts_do_not(project):
    out, pip = run_serve(project, "server.properties", "--override", "log.retention.hours=1")
    assert pip == ["-m pip install --quiet -e ."], pip       # no editable_mode=compat (deprecated)
    assert out.strip() == "sundial serve server.properties --override log.retention.hours=1"
    out, pip = run_serve(project)
    assert pip == [] and out.strip() == "sundial serve"
    out, pip = run_serve(project)
    assert pip == []


@pytest.mark.parametrize("changed", ["pyproject.toml", "setup.py", "records/_speedups.c"])
def test_a_newer_build_input_reinstalls(project, changed):
    run_serve(project)
    info = _dist_info(project)
    past = os.stat(info).st_mtime - 100
    os.utime(info, (past, past))
    assert run_serve(project)[1] == []                      # inputs are still older than the install
    os.utime(project / changed, None)                        # now: newer than the install
    assert run_serve(project)[1] == ["-m pip install --quiet -e ."]
    assert run_serve(project)[1] == []


def test_an_install_of_another_checkout_or_a_non_editable_one_is_replaced(project):
    run_serve(project)
    info = _dist_info(project)
    (info / "direct_url.json").write_text('{"dir_info": {"editable": true}, "url": "file:///elsewhere"}')
    os.utime(info, None)
    assert run_serve(project)[1] == ["-m pip install --quiet -e ."]
    (info / "direct_url.json").write_text('{"dir_info": {}, "url": "file://%s"}' % os.path.realpath(project))
    os.utime(info, None)
    assert run_serve(project)[1] == ["-m pip install --quiet -e ."]
    shutil.rmtree(info)
    assert run_serve(project)[1] == ["-m pip install --quiet -e ."]
