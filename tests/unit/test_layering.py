"""The import rules of docs/architecture.md, checked by parsing every module with ast."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

STDLIB_NETWORK = {"socket", "asyncio", "uvloop", "ssl", "selectors", "http", "urllib"}

RULES = {
    # package: (forbidden top-level imports, extra third-party allowed)
    "config": ({"protocol", "storage", "broker", "pipeline", "kafka", "structlog"} | STDLIB_NETWORK, set()),
    "protocol": ({"storage", "broker", "pipeline", "structlog"} | STDLIB_NETWORK, set()),
    "storage": ({"protocol", "broker", "pipeline", "kafka"} | STDLIB_NETWORK, set()),
    # the Spark source is a wire client: it never reaches into the broker's packages
    "pipeline": ({"broker", "storage", "protocol", "config"}, set()),
}


def test_broker_never_imports_the_spark_pipeline():
    offenders = [str(m.relative_to(ROOT)) for m in _modules("broker") if {"pipeline", "pyspark"} & _imports(m)]
    assert not offenders, offenders


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _modules(package: str):
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(RULES))
def test_package_imports_respect_layering(package):
    forbidden, _ = RULES[package]
    offenders = {}
    for module in _modules(package):
        bad = _imports(module) & forbidden
        if bad:
            offenders[str(module.relative_to(ROOT))] = sorted(bad)
    assert not offenders, f"layering violated: {offenders}"


def test_only_schema_codec_imports_kafka_protocol():
    offenders = []
    for module in _modules("protocol"):
        if module.name == "schema_codec.py":
            continue
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            mod = None
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                mod = node.module or ""
            elif isinstance(node, ast.Import):
                mod = ",".join(a.name for a in node.names)
            if mod and "kafka.protocol" in mod:
                offenders.append(str(module.relative_to(ROOT)))
    assert not offenders, offenders
