"""Append origins have one home, :class:`storage.origin.AppendOrigin`: no module passes an origin
as a string or compares one with a string (read on the ast), and each origin gets the checks its
member documents."""

import ast
import pathlib

import pytest

from sundial.config.topic import TopicConfig
from sundial.records.builder import SimpleRecord, build_records
from sundial.records.control import build_end_txn_marker
from sundial.records.errors import InvalidRecordError
from sundial.records.layout import CONTROL_TYPE_ABORT, MAGIC_V2
from sundial.storage import AppendOrigin
from sundial.storage.errors import InvalidProducerEpochError
from sundial.storage.log import PartitionLog

ROOT = pathlib.Path(__file__).resolve().parents[3]
NOW_MS = 1_700_000_000_000
PACKAGES = ("storage", "broker", "records", "tools")


def _string_origins(path: pathlib.Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.keyword) and node.arg == "origin" and isinstance(node.value, ast.Constant):
            found.append(f"{node.value.lineno}: origin={node.value.value!r}")
        elif isinstance(node, ast.arg) and node.arg == "origin" and isinstance(node.annotation, ast.Name) \
                and node.annotation.id == "str":
            found.append(f"{node.lineno}: origin: str")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            names = {s.id for s in sides if isinstance(s, ast.Name)}
            if "origin" in names and any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_origin_is_a_string():
    offenders = {}
    for package in PACKAGES:
        for module in sorted((ROOT / package).rglob("*.py")):
            found = _string_origins(module)
            if found:
                offenders[str(module.relative_to(ROOT))] = found
    assert not offenders, offenders


def _log(directory) -> PartitionLog:
    return PartitionLog.create(str(directory / "t-0"), TopicConfig(), topic="t", partition=0, now_ms=NOW_MS)


def _txn_data(producer_epoch: int) -> bytes:
    return build_records(MAGIC_V2, [SimpleRecord(NOW_MS, b"k", b"v")], producer_id=7,
                         producer_epoch=producer_epoch, base_sequence=0, is_transactional=True).buffer


def _abort(producer_epoch: int, base_offset: int = 0) -> bytes:
    return build_end_txn_marker(producer_id=7, producer_epoch=producer_epoch, coordinator_epoch=0,
                                control_type=CONTROL_TYPE_ABORT, timestamp_ms=NOW_MS, base_offset=base_offset)


def test_a_client_may_not_append_a_marker_a_coordinator_may(tmp_path):
    log = _log(tmp_path)
    log.append(_txn_data(3), now_ms=NOW_MS)
    with pytest.raises(InvalidRecordError):
        log.append(_abort(3), now_ms=NOW_MS)
    result = log.append(_abort(3), now_ms=NOW_MS, origin=AppendOrigin.COORDINATOR)
    assert result.first_offset == 1 and log.ongoing_transactions() == []
    log.close()


def test_a_stale_marker_fails_from_the_coordinator_and_is_kept_from_the_leader(tmp_path):
    log = _log(tmp_path)
    log.append(_txn_data(3), now_ms=NOW_MS)
    with pytest.raises(InvalidProducerEpochError):
        log.append(_abort(2), now_ms=NOW_MS, origin=AppendOrigin.COORDINATOR)
    assert log.log_end_offset == 1
    follower = _log(tmp_path / "follower")
    follower.append_as_follower(_txn_data(3), now_ms=NOW_MS)
    follower.append_as_follower(_abort(2, base_offset=1), now_ms=NOW_MS)
    assert follower.log_end_offset == 2
    log.close()
    follower.close()
