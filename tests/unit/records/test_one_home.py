"""Constants shared by the layers have one home, read on the ast: no production module binds
one of these names except its home."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
PACKAGES = ("records", "storage", "protocol", "config", "broker", "tools", "pipeline")

#: name -> the one module that defines it
HOMES = {
    "INT32_MAX": "records/layout.py",
    "EARLIEST_TIMESTAMP": "records/timestamps.py",
    "LATEST_TIMESTAMP": "records/timestamps.py",
}


def _bound_names(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            for leaf in ast.walk(target):
                if isinstance(leaf, ast.Name) and isinstance(leaf.ctx, ast.Store):
                    names.add(leaf.id)
    return names


@pytest.mark.parametrize("name", sorted(HOMES))
def test_constant_has_one_home(name):
    home = HOMES[name]
    assert name in _bound_names(ROOT / home)
    others = sorted(str(m.relative_to(ROOT)) for package in PACKAGES for m in (ROOT / package).rglob("*.py")
                    if str(m.relative_to(ROOT)) != home and name in _bound_names(m))
    assert not others, f"{name} is defined in {home}; import it from there: {others}"
