"""The import rules of docs/architecture.md, checked by parsing every module with ast."""

import ast
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

STDLIB_NETWORK = {"socket", "asyncio", "uvloop", "ssl", "selectors", "http", "urllib"}

RULES = {
    # package: (forbidden top-level imports, extra third-party allowed)
    "config": ({"protocol", "storage", "broker", "pipeline", "records", "kafka", "structlog"} | STDLIB_NETWORK,
               set()),
    "protocol": ({"storage", "broker", "pipeline", "structlog"} | STDLIB_NETWORK, set()),
    "storage": ({"protocol", "broker", "pipeline", "kafka"} | STDLIB_NETWORK, set()),
    # the Spark source is a wire client: it never reaches into the broker's packages
    # (the record format package is shared with it, as Kafka's clients share theirs)
    "pipeline": ({"broker", "storage", "protocol", "config"}, set()),
}

#: The record format package sits at the bottom: the standard library and these only.
RECORDS_ALLOWED = {"crc32c", "cramjam"}


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


# -- the record format package -----------------------------------------------------------------


def test_record_package_imports_only_the_standard_library_crc32c_and_cramjam():
    offenders = {}
    for module in _modules("records"):
        bad = {name for name in _imports(module)
               if name not in sys.stdlib_module_names and name not in RECORDS_ALLOWED and name != "records"}
        if bad:
            offenders[str(module.relative_to(ROOT))] = sorted(bad)
    assert not offenders, f"records/ must import nothing of Sundial or other third parties: {offenders}"


def test_the_v2_header_layout_is_written_in_one_python_module():
    """Only records/layout.py packs or unpacks a v2 batch header (the C accelerator walks records only)."""
    header_formats = (">qiib", ">hiqqqhii", ">qhi\"")
    offenders = []
    for package in ("records", "storage", "protocol", "broker", "pipeline"):
        for module in _modules(package):
            if module == ROOT / "records" / "layout.py":
                continue
            text = module.read_text(encoding="utf-8")
            if any(fmt in text for fmt in header_formats):
                offenders.append(str(module.relative_to(ROOT)))
    assert not offenders, offenders
