"""The user documentation covers what a user configures and sees (and links what it should)."""

from __future__ import annotations

import os
import re

from sundial.config import BROKER_CONFIGS, TOPIC_CONFIGS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(*parts: str) -> str:
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as fh:
        return fh.read()


def test_readme_links_every_user_document():
    readme = _read("README.md")
    for doc in ("docs/tools.md", "docs/retention.md", "docs/spark.md", "docs/compaction.md"):
        assert f"({doc}" in readme, doc


def test_retention_doc_names_every_consumed_retention_key_and_event():
    doc = _read("docs", "retention.md")
    keys = [d.name for d in list(BROKER_CONFIGS) + list(TOPIC_CONFIGS) if "commitoffset" in d.name]
    assert len(keys) >= 7
    for key in keys:
        base = key.rsplit(".", 1)[0]
        assert key in doc or f"`{base}.ms` (or `.minutes`, `.hours`)" in doc, key
    sources = "".join(_read(*path.split("/")) for path in ("storage/log.py", "storage/log_retention.py",
                                                            "broker/replica_manager.py", "storage/log_manager.py"))
    for event in re.findall(r"^\| `([a-z_]+)` \| (?:info|warning|error) \|", doc, re.M):
        assert f'"{event}"' in sources, f"docs/retention.md names a log event the code never logs: {event}"
    for metric in ("sundial_retention_deleted_segments_total", "sundial_consumed_retention_holds_total"):
        assert metric in doc


def test_tools_doc_covers_every_command_and_exit_code():
    doc = _read("docs", "tools.md")
    for command in ("topics", "get-offsets", "dump-log", "consumer-groups", "failover", "mirror", "credentials",
                    "acls"):
        assert f"`{command}" in doc, command
    for code in ("`0`", "`1`", "`2`", "`3`", "`130`"):
        assert f"| {code} |" in doc, code
    assert "seed 0" not in doc and "seed 0" not in _read("README.md")


def test_compaction_doc_names_every_cleaner_key_event_and_metric():
    doc = _read("docs", "compaction.md")
    keys = [d.name for d in list(BROKER_CONFIGS) + list(TOPIC_CONFIGS)
            if d.name.startswith("log.cleaner.") or d.name in (
                "cleanup.policy", "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "max.compaction.lag.ms",
                "delete.retention.ms", "segment.ms")]
    assert len(keys) >= 16
    for key in keys:
        assert f"`{key}`" in doc, key
    sources = "".join(_read(*path.split("/")) for path in (
        "broker/log_cleaner.py", "storage/cleaner.py", "storage/log_cleaning.py", "storage/cleaner_manager.py"))
    for event in re.findall(r"`([a-z]+_[a-z_]+)`", doc.split("## Observability")[1].split("Prometheus")[0]):
        assert f'"{event}"' in sources, f"docs/compaction.md names a log event the code never logs: {event}"
    metrics = _read("broker", "metrics.py")
    for metric in re.findall(r"`(sundial_log_cleaner_[a-z_]+)`", doc):
        assert metric.removesuffix("_total") in metrics, metric
