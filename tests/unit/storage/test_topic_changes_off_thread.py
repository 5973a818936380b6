"""Topic creation and deletion split in a decision on the owner thread and file work that runs on
any thread (:meth:`LogManager.prepare_create_topic`, :meth:`LogManager.prepare_delete_topic`).

Ground truth is the data directory as a fresh LogManager reads it after a crash: what the
topic list on disk holds, and which partition directories exist.
"""

import json
import os

import pytest
from support.log_helpers import NOW_MS, batch
from support.unit_helpers import started_manager

from sundial.storage import files
from sundial.storage.log_manager import LogManager
from sundial.storage.topics import METADATA_FILE, TopicAlreadyExistsError, UnknownTopicOrPartitionError


def on_disk(dirs) -> dict[str, int]:
    """Topic -> partitions in the newest copy of the topic list."""
    best = None
    for d in dirs:
        with open(os.path.join(d, METADATA_FILE), encoding="utf-8") as fh:
            data = json.load(fh)
        if best is None or data["generation"] > best["generation"]:
            best = data
    return {t["name"]: t["partitions"] for t in best["topics"]}


def reopened(dirs) -> LogManager:
    return started_manager(dirs)


def test_a_topic_being_created_is_not_served_and_its_name_is_taken(dirs):
    mgr = started_manager(dirs)
    pending = mgr.prepare_create_topic("t", 3)
    assert mgr.topic("t") is None and mgr.get_log("t", 0) is None
    with pytest.raises(TopicAlreadyExistsError):
        mgr.prepare_create_topic("t", 1)
    with pytest.raises(TopicAlreadyExistsError):
        mgr.create_topic("t", 1)
    pending.run()
    assert on_disk(dirs) == {"t": 3}
    meta = mgr.finish_create_topic(pending)
    assert mgr.topic("t") is meta and mgr.get_log("t", 2) is not None
    # spread over both dirs as before: each partition counted when the next one is placed
    placed = sorted(len([n for n in os.listdir(d) if n.startswith("t-")]) for d in dirs)
    assert placed == [1, 2]
    mgr.shutdown()


def test_an_abandoned_creation_leaves_nothing_behind(dirs):
    mgr = started_manager(dirs)
    mgr.create_topic("keep", 1)
    pending = mgr.prepare_create_topic("lost", 2)
    mgr.abandon_create_topic(pending)        # its run failed (or never ran)
    assert mgr.topic("lost") is None
    mgr.create_topic("other", 1)             # the next write drops it
    assert on_disk(dirs) == {"keep": 1, "other": 1}
    again = mgr.prepare_create_topic("lost", 1)   # and the name is free again
    again.run()
    mgr.finish_create_topic(again)
    mgr.shutdown()
    assert sorted(reopened(dirs).topics(), key=lambda m: m.name)[1].name == "lost"


def test_topic_list_writes_in_any_order_leave_the_newest(dirs):
    mgr = started_manager(dirs)
    first = mgr.prepare_create_topic("a", 1)
    second = mgr.prepare_create_topic("b", 1)   # its list holds both
    second.run()
    first.run()                                  # older generation: writes nothing
    assert on_disk(dirs) == {"a": 1, "b": 1}
    mgr.finish_create_topic(first)
    mgr.finish_create_topic(second)
    mgr.shutdown()


def test_a_crash_before_the_deletion_ran_keeps_the_topic_and_after_it_does_not(dirs):
    mgr = started_manager(dirs)
    mgr.create_topic("t", 2)
    _append_one(mgr, "t", 0)
    pending = mgr.prepare_delete_topic("t")
    assert mgr.topic("t") is None and mgr.get_log("t", 0) is None   # gone at once for requests
    with pytest.raises(UnknownTopicOrPartitionError):
        mgr.prepare_delete_topic("t")
    mgr.close_without_marker()                   # crash before the file work
    again = reopened(dirs)
    assert again.topic("t") is not None and again.get_log("t", 0).log_end_offset == 1
    pending = again.prepare_delete_topic("t")
    pending.run()
    again.finish_delete_topic(pending)
    again.close_without_marker()                 # crash after it
    assert reopened(dirs).topic("t") is None
    assert not [n for d in dirs for n in os.listdir(d) if n.startswith("t-")]


def test_delete_then_create_of_one_name_in_order_keeps_the_new_directories(dirs):
    mgr = started_manager(dirs, **{"log.segment.delete.delay.ms": 60_000})
    mgr.create_topic("t", 2)
    _append_one(mgr, "t", 0)
    old_id = mgr.topic("t").topic_id
    deletion = mgr.prepare_delete_topic("t")
    creation = mgr.prepare_create_topic("t", 2)   # allowed at once: the name is free
    deletion.run()                                # the order the broker's ordered thread keeps
    creation.run()
    mgr.finish_delete_topic(deletion)
    meta = mgr.finish_create_topic(creation)
    assert meta.topic_id != old_id
    assert mgr.get_log("t", 0).log_end_offset == 0
    renamed = [n for d in dirs for n in os.listdir(d) if files.is_delete_dir(n)]
    assert len(renamed) == 2
    mgr.shutdown()
    again = reopened(dirs)
    assert again.topic("t").topic_id == meta.topic_id and again.get_log("t", 0).log_end_offset == 0


def _append_one(mgr, topic: str, partition: int) -> None:
    mgr.get_log(topic, partition).append(batch([NOW_MS]), now_ms=NOW_MS)
