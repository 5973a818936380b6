"""``sundial --version`` prints the release that pyproject.toml declares."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

from sundial import broker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_version_matches_pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        assert broker.__version__ == tomllib.load(fh)["project"]["version"]


def test_sundial_version_prints_it_and_exits_zero():
    result = subprocess.run([sys.executable, "-m", "sundial", "--version"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0
    assert result.stdout == f"sundial {broker.__version__}\n"
    assert result.stderr == ""
