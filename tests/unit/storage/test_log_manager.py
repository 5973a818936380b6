"""LogManager: topics, lazy opening, checkpoints, clean-shutdown marker (74), deletion, retention."""

import json
import os

import pytest
from support.log_helpers import NOW_MS, batch
from support.unit_helpers import started_manager

from sundial.config import ConfigError
from sundial.storage import files
from sundial.storage.log_manager import LogManager
from sundial.storage.topics import (
    METADATA_FILE,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    read_partition_metadata,
    topic_id_to_str,
)

UNBOUNDED = {"message.timestamp.after.max.ms": "9223372036854775807"}


@pytest.fixture
def dirs(tmp_path):
    return [str(tmp_path / "d1"), str(tmp_path / "d2")]


def manager(dirs, **explicit):
    mgr = LogManager(dirs, {"log.segment.delete.delay.ms": 0, **explicit})
    mgr.startup()
    return mgr


def crash(mgr):
    mgr.close_without_marker()


def test_create_topic_persists_and_places_partitions(dirs):
    mgr = manager(dirs)
    meta = mgr.create_topic("orders", 4, {"retention.ms": "1000", **UNBOUNDED})
    assert len(meta.topic_id) == 16 and meta.partitions == 4
    assert meta.config.retention_ms == 1000 and meta.overrides["retention.ms"] == "1000"
    for d in dirs:
        doc = json.load(open(os.path.join(d, METADATA_FILE)))
        assert doc["topics"][0]["name"] == "orders"
    placed = {d: sorted(n for n in os.listdir(d) if n.startswith("orders-")) for d in dirs}
    assert [len(v) for v in placed.values()] == [2, 2]
    for d, names in placed.items():
        for n in names:
            assert read_partition_metadata(os.path.join(d, n)) == meta.topic_id
            text = open(os.path.join(d, n, files.PARTITION_METADATA_FILE)).read()
            assert text == f"version: 0\ntopic_id: {topic_id_to_str(meta.topic_id)}\n"
    assert not mgr.is_open("orders", 0)
    log = mgr.get_log("orders", 0)
    assert mgr.is_open("orders", 0) and log.log_end_offset == 0
    assert mgr.get_log("orders", 4) is None and mgr.get_log("nope", 0) is None
    assert mgr.topic_by_id(meta.topic_id) is mgr.topic("orders")
    mgr.shutdown()


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad name", "bad/name", "ü"])
def test_illegal_topic_names(dirs, name):
    mgr = manager(dirs)
    with pytest.raises(InvalidTopicError):
        mgr.create_topic(name, 1)


def test_topic_creation_errors(dirs):
    mgr = manager(dirs)
    mgr.create_topic("a.b", 1)
    with pytest.raises(TopicAlreadyExistsError):
        mgr.create_topic("a.b", 1)
    with pytest.raises(InvalidTopicError):
        mgr.create_topic("a_b", 1)   # collides with a.b
    with pytest.raises(InvalidPartitionsError):
        mgr.create_topic("zero", 0)
    with pytest.raises(ConfigError):
        mgr.create_topic("cfg", 1, {"retention.ms": "soon"})
    with pytest.raises(ConfigError):
        mgr.create_topic("cfg", 1, {"no.such.key": "1"})
    meta = mgr.create_topic("dry", 2, validate_only=True)
    assert meta.partitions == 2 and mgr.topic("dry") is None
    assert "a" * 249 == mgr.create_topic("a" * 249, 1).name
    mgr.shutdown()


def test_restart_keeps_topics_data_and_is_lazy(dirs):
    mgr = manager(dirs)
    meta = mgr.create_topic("t", 2, {"segment.bytes": "300", **UNBOUNDED})
    log = mgr.get_log("t", 1)
    for i in range(10):
        log.append(batch([NOW_MS + i]), now_ms=NOW_MS)
    mgr.shutdown()
    for d in dirs:
        marker = os.path.join(d, files.CLEAN_SHUTDOWN_FILE)
        assert json.load(open(marker)) == {"version": 0, "brokerEpoch": 0}
    again = manager(dirs)
    for d in dirs:
        assert not os.path.exists(os.path.join(d, files.CLEAN_SHUTDOWN_FILE))
    assert again.topic("t").topic_id == meta.topic_id
    assert again.topic("t").config.segment_bytes == 300
    assert list(again.open_logs()) == []
    log = again.get_log("t", 1)
    assert log.log_end_offset == 10 and log.recovery_point == 10
    assert log.fetch_offset_by_timestamp(NOW_MS + 5).offset == 5
    again.shutdown()


def test_checkpoint_files_format(dirs):
    mgr = manager(dirs)
    mgr.create_topic("t", 2, UNBOUNDED)
    for p in range(2):
        log = mgr.get_log("t", p)
        for i in range(3):
            log.append(batch([NOW_MS]), now_ms=NOW_MS)
        log.flush()
    mgr.get_log("t", 0).delete_records(2)
    mgr.checkpoint()
    contents = {}
    for d in dirs:
        contents[d] = open(os.path.join(d, files.RECOVERY_POINT_CHECKPOINT_FILE)).read()
    assert sorted(contents.values()) == ["0\n1\nt 0 3\n", "0\n1\nt 1 3\n"]
    starts = [open(os.path.join(d, files.LOG_START_OFFSET_CHECKPOINT_FILE)).read() for d in dirs]
    assert "0\n1\nt 0 2\n" in starts
    mgr.shutdown()


def test_clean_shutdown_marker_skips_recovery(dirs, monkeypatch):  # 74
    mgr = manager(dirs)
    mgr.create_topic("t", 1, UNBOUNDED)
    log = mgr.get_log("t", 0)
    for i in range(5):
        log.append(batch([NOW_MS]), now_ms=NOW_MS)
    mgr.shutdown()
    d = next(d for d in dirs if os.path.isdir(os.path.join(d, "t-0")))
    files.write_file_atomically(os.path.join(d, files.RECOVERY_POINT_CHECKPOINT_FILE), b"0\n1\nt 0 0\n")
    from sundial.storage import segment as segmod

    calls = []
    real = segmod.LogSegment.recover
    monkeypatch.setattr(segmod.LogSegment, "recover", lambda self, **kw: calls.append(1) or real(self, **kw))
    again = manager(dirs)
    assert again.get_log("t", 0).log_end_offset == 5
    assert calls == []
    crash(again)
    third = manager(dirs)   # no marker now: recovery at start-up, eagerly
    assert calls and third.is_open("t", 0)
    third.shutdown()


def test_unclean_start_recovers_torn_tail(dirs):
    mgr = manager(dirs)
    mgr.create_topic("t", 1, UNBOUNDED)
    log = mgr.get_log("t", 0)
    for i in range(5):
        log.append(batch([NOW_MS + i]), now_ms=NOW_MS)
    path = log.active_segment.log_path
    size = log.active_segment.size_bytes
    crash(mgr)
    with open(path, "r+b") as fh:
        fh.truncate(size - 3)
    again = manager(dirs)
    log = again.get_log("t", 0)
    assert log.log_end_offset == 4
    assert log.append(batch([NOW_MS]), now_ms=NOW_MS).first_offset == 4
    again.shutdown()


def test_corrupt_checkpoint_is_treated_as_empty(dirs):
    mgr = manager(dirs)
    mgr.create_topic("t", 1, UNBOUNDED)
    log = mgr.get_log("t", 0)
    log.append(batch([NOW_MS]), now_ms=NOW_MS)
    mgr.shutdown()
    for d in dirs:
        for name in (files.RECOVERY_POINT_CHECKPOINT_FILE, files.LOG_START_OFFSET_CHECKPOINT_FILE):
            with open(os.path.join(d, name), "w") as fh:
                fh.write("0\n7\ngarbage")
    again = manager(dirs)
    assert again.get_log("t", 0).log_end_offset == 1
    again.shutdown()


def _with_topic_gone_later(dirs):
    """A started manager whose deleted files wait 5 s, with a two-partition topic "gone"."""
    mgr = started_manager(dirs, **{"log.segment.delete.delay.ms": 5000})
    mgr.create_topic("gone", 2)
    return mgr


def test_delete_topic(dirs):
    mgr = _with_topic_gone_later(dirs)
    mgr.get_log("gone", 0)
    mgr.delete_topic("gone")
    assert mgr.topic("gone") is None and mgr.get_log("gone", 0) is None
    leftovers = [n for d in dirs for n in os.listdir(d) if n.startswith("gone-")]
    assert len(leftovers) == 2 and all(n.endswith("-delete") for n in leftovers)
    mgr.delete_expired_files(NOW_MS)
    assert len([n for d in dirs for n in os.listdir(d) if n.startswith("gone-")]) == 2
    mgr.delete_expired_files(NOW_MS + 5000)
    assert not [n for d in dirs for n in os.listdir(d) if n.startswith("gone-")]
    with pytest.raises(UnknownTopicOrPartitionError):
        mgr.delete_topic("gone")
    mgr.create_topic("gone", 1)   # the name can be reused at once
    mgr.shutdown()


def test_orphan_partition_dirs_and_delete_dirs_removed_at_start(dirs):
    mgr = manager(dirs)
    mgr.create_topic("keep", 1)
    mgr.shutdown()
    os.makedirs(os.path.join(dirs[0], "ghost-0"))
    os.makedirs(os.path.join(dirs[1], "keep-0.0123456789abcdef0123456789abcdef-delete"))
    again = manager(dirs)
    assert not os.path.exists(os.path.join(dirs[0], "ghost-0"))
    assert not os.path.exists(os.path.join(dirs[1], "keep-0.0123456789abcdef0123456789abcdef-delete"))
    assert again.topic("ghost") is None and again.topic("keep") is not None
    again.shutdown()


def test_topics_adopted_without_metadata_file(dirs):
    mgr = manager(dirs)
    meta = mgr.create_topic("old", 3)
    log = mgr.get_log("old", 2)
    log.append(batch([NOW_MS]), now_ms=NOW_MS)
    mgr.shutdown()
    for d in dirs:
        os.remove(os.path.join(d, METADATA_FILE))
    again = manager(dirs)
    assert again.topic("old").partitions == 3 and again.topic("old").topic_id == meta.topic_id
    assert again.get_log("old", 2).log_end_offset == 1
    again.shutdown()


def test_alter_config_and_create_partitions(dirs):
    mgr = manager(dirs)
    mgr.create_topic("t", 1, UNBOUNDED)
    log = mgr.get_log("t", 0)
    meta = mgr.alter_topic_config("t", {"message.timestamp.type": "LogAppendTime"})
    assert meta.config.is_log_append_time and log.config.is_log_append_time
    assert log.append(batch([1]), now_ms=NOW_MS).log_append_time_ms == NOW_MS
    with pytest.raises(InvalidPartitionsError):
        mgr.create_partitions("t", 1)
    mgr.create_partitions("t", 3)
    assert mgr.get_log("t", 2) is not None
    with pytest.raises(UnknownTopicOrPartitionError):
        mgr.alter_topic_config("nope", {})
    mgr.shutdown()
    again = manager(dirs)
    assert again.topic("t").partitions == 3 and again.topic("t").config.is_log_append_time
    again.shutdown()


def test_run_retention_with_consumed_upto(dirs):
    day = 86_400_000
    mgr = manager(dirs, **{"log.retention.commitoffset.enable": True, "log.retention.commitoffset.ms": day})
    mgr.create_topic("t", 2, UNBOUNDED)
    for p in range(2):
        log = mgr.get_log("t", p)
        for i in range(4):
            log.append(batch([NOW_MS - 2 * day]), now_ms=NOW_MS)
            log.roll(NOW_MS)
    asked = []

    def consumed_upto(topic, partition):
        asked.append((topic, partition))
        return {0: 2, 1: None}[partition]

    outcomes = mgr.run_retention(NOW_MS, consumed_upto)
    assert sorted(asked) == [("t", 0), ("t", 1)]
    by_partition = {o.partition: o for o in outcomes}
    assert [d.base_offset for d in by_partition[0].deleted] == [0, 1]
    assert [h.reason for h in by_partition[0].held] == ["not_consumed"]
    assert 1 not in by_partition
    assert mgr.get_log("t", 0).log_start_offset == 2
    mgr.shutdown()


def test_expired_files_are_handed_over_once_and_removed_elsewhere(dirs):
    """The broker takes due paths on its loop and unlinks them on a worker thread."""
    import threading

    from sundial.storage.log_manager import remove_expired

    mgr = _with_topic_gone_later(dirs)
    mgr.delete_topic("gone")
    assert mgr.take_expired_files(NOW_MS) == ([], [])          # schedules the delay
    due_files, due_dirs = mgr.take_expired_files(NOW_MS + 5000)
    assert due_files == [] and sorted(os.path.basename(p) for p in due_dirs) == sorted(
        n for d in dirs for n in os.listdir(d) if n.startswith("gone-"))
    assert mgr.take_expired_files(NOW_MS + 10_000) == ([], [])  # handed over only once
    removed = []
    worker = threading.Thread(target=lambda: removed.append(remove_expired(due_files, due_dirs)))
    worker.start()
    worker.join()
    assert removed == [2]
    assert not [n for d in dirs for n in os.listdir(d) if n.startswith("gone-")]
    mgr.shutdown()


def test_a_fresh_data_directory_starts_clean_and_a_used_one_without_marker_does_not(dirs, monkeypatch):
    """The first start on new directories is not an unclean one (nothing to recover), nor are the
    partitions created during it; a used directory without the clean-shutdown marker is."""
    import structlog
    from structlog.testing import CapturingLogger

    from sundial.storage import log_manager

    def starts():
        captured = CapturingLogger()
        monkeypatch.setattr(log_manager, "logger", structlog.wrap_logger(
            captured, processors=[], wrapper_class=structlog.BoundLogger, cache_logger_on_first_use=False))
        mgr = manager(dirs)
        (start,) = [c.kwargs for c in captured.calls if c.kwargs.get("event") == "log_manager_starting"]
        return mgr, start

    mgr, start = starts()
    assert start["unclean_log_dirs"] == []
    mgr.create_topic("fresh", 2, UNBOUNDED)
    for p in range(2):
        mgr.get_log("fresh", p).append(batch([NOW_MS]), now_ms=NOW_MS)
    crash(mgr)
    mgr, start = starts()
    assert sorted(start["unclean_log_dirs"]) == sorted(dirs)
    mgr.shutdown()
