"""A crash at each step of a cleaning pass, then an unclean start: the loader completes or rolls back
the swap (Kafka ``LocalLog.replaceSegments`` / ``LogLoader``), so the log is exactly what it was before
the interrupted group or exactly what it is after it — never a mix, never a lost record."""

import contextlib
import os
import shutil

import pytest
from support.cleaner_helpers import append, clean_pass, compact_log, model_after_clean, read_all
from support.log_helpers import NOW_MS, topic_config

from sundial.storage import cleaned_segment
from sundial.storage.cleaner_manager import LogCleanerManager
from sundial.storage.log import PartitionLog
from sundial.storage.offset_map import SkimpyOffsetMap


class Crash(BaseException):
    """The process dies here (BaseException: nothing on the way up may handle it)."""


def build(path):
    """A compacted log of several small segments; closed cleanly. Returns its records."""
    log = compact_log(path, segment_bytes=600, file_delete_delay_ms=0)
    records = []
    for r in range(4):
        for k in range(6):
            records += append(log, [(b"k%d" % k, b"v%d-%d" % (k, r), NOW_MS + len(records))])
    records += append(log, [(b"k0", None, NOW_MS + 100)])
    log.roll(NOW_MS)
    records += append(log, [(b"tail", b"1", NOW_MS + 200)])
    log.close()
    return records


@contextlib.contextmanager
def reopened(path):
    """The log after a kill -9: an unclean start that recovers from offset 0; its handles are
    closed when the block ends."""
    cfg = topic_config(cleanup_policy=("compact",), segment_bytes=600, file_delete_delay_ms=0,
                       min_cleanable_dirty_ratio=0.0)
    log = PartitionLog.open(str(path), cfg, topic="t", partition=0, clean=False, recovery_point=0)
    try:
        yield log
    finally:
        log.close_handles()


def run_pass(path, tmp_path, states=None):
    with reopened(path) as log:
        def swap(cleaned):
            ok = log.replace_segments(cleaned, NOW_MS)
            if states is not None:
                states.append(read_all(log))
            return ok

        return clean_pass(log, LogCleanerManager([str(tmp_path)]), SkimpyOffsetMap(1 << 14), NOW_MS, swap=swap)


@pytest.fixture
def pristine(tmp_path):
    path = tmp_path / "pristine" / "t-0"
    records = build(path)
    return path, records


def test_every_rename_of_the_swap_is_a_safe_crash_point(pristine, tmp_path, monkeypatch):
    path, records = pristine
    # a reference run: the renames it makes, and the log after each group is swapped in
    ref = tmp_path / "ref" / "t-0"
    shutil.copytree(path, ref)
    calls = []
    real_rename = os.rename

    def counting(src, dst, *a, **k):
        calls.append((os.path.basename(str(src)), os.path.basename(str(dst))))
        return real_rename(src, dst, *a, **k)

    states = [records_in(ref)]
    monkeypatch.setattr(os, "rename", counting)
    p = run_pass(ref, tmp_path / "ref", states)
    monkeypatch.setattr(os, "rename", real_rename)
    assert len(states) >= 3, "the scenario must have several groups"
    assert states[-1] == model_after_clean(records, p.end_offset)
    assert len(calls) >= 10

    for k in range(len(calls) + 1):
        work = tmp_path / f"crash{k}" / "t-0"
        shutil.copytree(path, work)
        seen = [0]

        def crashing(src, dst, *a, **kw):
            if seen[0] == k:
                raise Crash(f"killed before rename {k}")
            seen[0] += 1
            return real_rename(src, dst, *a, **kw)

        monkeypatch.setattr(os, "rename", crashing)
        with pytest.raises(Crash) if k < len(calls) else _nothing():
            run_pass(work, tmp_path / f"crash{k}")
        monkeypatch.setattr(os, "rename", real_rename)
        swapped = sum(1 for src, dst in calls[:k] if src.endswith(".log.cleaned") and dst.endswith(".log.swap"))
        with reopened(work) as log:
            assert read_all(log) == states[swapped], f"crash before rename {k} ({calls[k] if k < len(calls) else '-'})"
            assert all(seg.check_indexes() == [] for seg in log.segments)
            assert log.log_end_offset == records[-1].offset + 1 and log.log_start_offset == 0
            left = [n for n in os.listdir(work) if n.endswith((".cleaned", ".swap", ".deleted"))]
            assert not left, left


def test_a_crash_while_writing_the_cleaned_segment_loses_nothing(pristine, tmp_path, monkeypatch):
    path, records = pristine
    work = tmp_path / "w" / "t-0"
    shutil.copytree(path, work)

    def dying_finish(self, last_modified_ms):
        self.write_pending()
        raise Crash("killed while writing")

    monkeypatch.setattr(cleaned_segment.CleanedSegmentWriter, "finish", dying_finish)
    # a dead process cleans nothing up
    monkeypatch.setattr(cleaned_segment.CleanedSegmentWriter, "abandon", lambda self: None)
    with pytest.raises(Crash):
        run_pass(work, tmp_path / "w")
    assert any(n.endswith(".log.cleaned") for n in os.listdir(work))
    monkeypatch.undo()
    with reopened(work) as log:
        assert read_all(log) == records
        assert not [n for n in os.listdir(work) if n.endswith(".cleaned")]


def test_recovery_then_a_full_pass_gives_the_model(pristine, tmp_path, monkeypatch):
    path, records = pristine
    work = tmp_path / "w" / "t-0"
    shutil.copytree(path, work)
    real_rename = os.rename
    seen = [0]

    def crashing(src, dst, *a, **kw):
        seen[0] += 1
        if seen[0] == 7:
            raise Crash()
        return real_rename(src, dst, *a, **kw)

    monkeypatch.setattr(os, "rename", crashing)
    with pytest.raises(Crash):
        run_pass(work, tmp_path / "w")
    monkeypatch.undo()
    p = run_pass(work, tmp_path / "w2")
    with reopened(work) as log:
        assert read_all(log) == model_after_clean(records, p.end_offset)


def records_in(path):
    with reopened(path) as log:
        return read_all(log)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
