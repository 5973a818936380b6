"""AlterReplicaLogDirs' move (storage.log_move, LogManager's move API): the copy, the swap, and
what a restart makes of a crash at any step.

The oracle is the source log itself: the bytes of its batches from the log start offset to the
log end offset, read before the move, must be what the partition holds afterwards, from exactly
one live directory, whatever step a crash interrupted (every step is a ``disk.pause("move")``
call; the crash is an exception no handler of the move catches, after which the descriptors are
dropped without any writing, as a kill -9 leaves them).
"""

from __future__ import annotations

import concurrent.futures
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.log_helpers import NOW_MS, batch

from sundial.storage import disk, files
from sundial.storage.errors import KafkaStorageError
from sundial.storage.log_dirs import measure_log_dirs
from sundial.storage.log_manager import LogManager
from sundial.storage.log_move import (
    LogDirNotFoundError,
    future_dir_name,
    parse_future_dir_name,
    resolve_leftovers,
)
from sundial.storage.topics import InvalidTopicError, UnknownTopicOrPartitionError

BROKER = {"message.timestamp.after.max.ms": "9223372036854775807", "log.segment.delete.delay.ms": 0,
          "log.segment.bytes": 4096}
TOPIC = "moves"


class Crash(BaseException):
    """A kill -9 at a step of the move: nothing of the move handles it."""


class CrashingDisk(disk.Disk):
    def __init__(self, at: int) -> None:
        self.at = at
        self.calls = 0

    def pause(self, op: str) -> None:
        if op != "move":
            return
        self.calls += 1
        if self.calls == self.at:
            raise Crash()


@pytest.fixture
def dirs(tmp_path):
    return [str(tmp_path / "d1"), str(tmp_path / "d2")]


def _manager(dirs) -> LogManager:
    mgr = LogManager(dirs, BROKER)
    mgr.startup()
    return mgr


def _fill(mgr: LogManager, batches: int, *, delete_below: int = 0) -> bytes:
    log = mgr.get_log(TOPIC, 0)
    for i in range(batches):
        log.append(batch([NOW_MS + i] * (1 + i % 3), value_size=100), now_ms=NOW_MS)
    if delete_below:
        log.delete_records(min(delete_below, log.log_end_offset))
    log.flush()
    return _content(mgr)


def _filled(dirs, batches: int):
    """A manager whose topic's one partition holds ``batches`` batches; its log dir, and another."""
    mgr = _manager(dirs)
    mgr.create_topic(TOPIC, 1)
    source = _live_dirs(dirs)[0]
    target = next(d for d in dirs if d != source)
    _fill(mgr, batches)
    return mgr, source, target


def _content(mgr: LogManager) -> bytes:
    """Every batch from the log start offset on (the whole batch holding it), as stored."""
    log = mgr.get_log(TOPIC, 0)
    out = []
    for _view, data in log.batches_from(log.log_start_offset, 1 << 20):
        out.append(bytes(data))
    return b"".join(out)


def _live_dirs(dirs) -> list[str]:
    return [d for d in dirs if os.path.isdir(os.path.join(d, files.partition_dir_name(TOPIC, 0)))]


def _leftover_futures(dirs) -> list[str]:
    return [n for d in dirs for n in os.listdir(d) if parse_future_dir_name(n) is not None]


def _run_move(mgr: LogManager, target: str, chunk_bytes: int = 1500, started: list | None = None) -> None:
    """The mover's steps, on this thread (``started`` receives the move)."""
    move, _cancelled = mgr.begin_move(TOPIC, 0, target)
    assert move is not None
    if started is not None:
        started.append(move)
    mgr.move_future_job(move, NOW_MS)()
    while mgr.move_copy_job(move, chunk_bytes, NOW_MS)() >= chunk_bytes:
        pass
    results = []

    def submit(job):
        results.append(job())   # a Crash leaves here, past every handler
        fut = concurrent.futures.Future()
        fut.set_result(results[-1])
        return fut

    fut, after = mgr.start_swap(move, NOW_MS, submit)
    assert mgr.finish_open(TOPIC, 0) is not None
    after()
    mgr.end_move(move)


def test_a_move_copies_every_batch_and_leaves_one_directory(dirs):
    mgr = _manager(dirs)
    mgr.create_topic(TOPIC, 1)
    source = _live_dirs(dirs)[0]
    target = next(d for d in dirs if d != source)
    before = _fill(mgr, 60, delete_below=7)
    lso = mgr.get_log(TOPIC, 0).log_start_offset
    _run_move(mgr, target)
    assert _live_dirs(dirs) == [target]
    assert _leftover_futures(dirs) == []
    assert _content(mgr) == before
    log = mgr.get_log(TOPIC, 0)
    assert log.log_start_offset == lso
    assert log.dir == os.path.join(target, files.partition_dir_name(TOPIC, 0))
    # it keeps serving appends where it is now, and a clean restart finds it there
    log.append(batch([NOW_MS]), now_ms=NOW_MS)
    after_append = _content(mgr)
    mgr.shutdown()
    mgr2 = _manager(dirs)
    assert _content(mgr2) == after_append
    assert [p.log_dir for p in mgr2.replica_placements()] == [target]
    mgr2.shutdown()


def test_describe_sees_the_future_replica_during_the_copy(dirs):
    mgr, source, target = _filled(dirs, 40)
    move, _ = mgr.begin_move(TOPIC, 0, target)
    mgr.move_future_job(move, NOW_MS)()
    mgr.move_copy_job(move, 1000, NOW_MS)()
    placements = {p.is_future: p for p in mgr.replica_placements()}
    assert placements[False].log_dir == source
    assert placements[True].log_dir == target and placements[True].is_future
    current_leo = mgr.get_log(TOPIC, 0).log_end_offset
    assert 0 < placements[True].log_end_offset < current_leo
    assert placements[True].partition_dir == move.future_path
    assert os.path.basename(move.future_path).endswith("-future")
    # DescribeLogDirs' facts: the future in the target with its lag, its size the bytes it holds
    reports = {r.log_dir: r for r in measure_log_dirs(mgr.log_dirs, mgr.replica_placements())}
    (future,) = reports[target].replicas
    (current,) = reports[source].replicas
    assert (future.is_future, current.is_future) == (True, False)
    assert future.offset_lag == current_leo - placements[True].log_end_offset > 0 and current.offset_lag == 0
    future_dir_bytes = sum(os.path.getsize(os.path.join(move.future_path, n)) for n in os.listdir(move.future_path)
                           if n.endswith(".log"))
    assert 0 < future.size_bytes <= future_dir_bytes
    mgr.close_without_marker()


def test_errors_and_no_ops(dirs, tmp_path):
    mgr = _manager(dirs)
    mgr.create_topic(TOPIC, 1)
    source = _live_dirs(dirs)[0]
    target = next(d for d in dirs if d != source)
    with pytest.raises(LogDirNotFoundError):
        mgr.begin_move(TOPIC, 0, str(tmp_path / "elsewhere"))
    with pytest.raises(LogDirNotFoundError):
        mgr.begin_move(TOPIC, 0, os.path.relpath(target))
    with pytest.raises(UnknownTopicOrPartitionError):
        mgr.begin_move(TOPIC, 1, target)
    with pytest.raises(UnknownTopicOrPartitionError):
        mgr.begin_move("nope", 0, target)
    assert mgr.begin_move(TOPIC, 0, source) == (None, None)       # already there
    move, cancelled = mgr.begin_move(TOPIC, 0, target)
    assert move is not None and cancelled is None
    assert mgr.begin_move(TOPIC, 0, target) == (None, None)       # already moving there
    again, cancelled = mgr.begin_move(TOPIC, 0, source)           # back: the move is cancelled
    assert again is None and cancelled is move and move.cancelled
    with pytest.raises(KafkaStorageError):
        mgr.move_copy_job(move, 100, NOW_MS)
    mgr.close_without_marker()


def test_a_topic_name_too_long_for_a_future_directory():
    with pytest.raises(InvalidTopicError):
        future_dir_name("t" * 249, 0)
    name = future_dir_name("orders-eu", 12)
    assert parse_future_dir_name(name) == ("orders-eu", 12)
    assert files.parse_partition_dir_name(name) is None


def test_retention_past_the_copy_restarts_the_future(dirs):
    mgr, source, target = _filled(dirs, 50)
    move, _ = mgr.begin_move(TOPIC, 0, target)
    mgr.move_future_job(move, NOW_MS)()
    mgr.move_copy_job(move, 500, NOW_MS)()
    log = mgr.get_log(TOPIC, 0)
    log.delete_records(log.log_end_offset - 5)
    before = _content(mgr)
    while mgr.move_copy_job(move, 1500, NOW_MS)() >= 1500:
        pass

    def submit(job):
        fut = concurrent.futures.Future()
        fut.set_result(job())
        return fut

    _fut, after = mgr.start_swap(move, NOW_MS, submit)
    mgr.finish_open(TOPIC, 0)
    after()
    assert _content(mgr) == before
    assert _live_dirs(dirs) == [target]
    mgr.shutdown()


# -- start-up decisions -----------------------------------------------------------------------------

TPS = st.tuples(st.sampled_from(["a", "b-c"]), st.integers(0, 2))


@given(live=st.dictionaries(TPS, st.sampled_from(["/d1", "/d2"]), max_size=4),
       futures=st.dictionaries(TPS, st.lists(st.sampled_from(["/d1", "/d2"]), min_size=1, max_size=2), max_size=4))
def test_resolve_leftovers_never_two_copies_never_the_live_one_dropped(live, futures):
    named = {tp: [(d, f"{tp[0]}-{tp[1]}.{i:032x}-future") for i, d in enumerate(ds)] for tp, ds in futures.items()}
    ambiguous = [tp for tp, ds in named.items() if tp not in live and len(ds) > 1]
    if ambiguous:
        with pytest.raises(KafkaStorageError):
            resolve_leftovers(live, named)
        return
    out = resolve_leftovers(live, named)
    for tp, found in named.items():
        paths = {os.path.join(d, n) for d, n in found}
        if tp in live:
            assert paths <= set(out.discard) and tp not in out.promote
        else:
            assert out.promote[tp] == found[0] and not paths & set(out.discard)
    assert set(out.promote).isdisjoint(live)


# -- crashes at every step --------------------------------------------------------------------------

def _crash_scenario(root, batches: int, crash_at: int, chunk: int) -> tuple[bool, list[str], int]:
    """Fill, move with a crash at the ``crash_at``-th step, restart; (crashed, live dirs, steps seen)."""
    dirs = [str(root / "d1"), str(root / "d2")]
    mgr = _manager(dirs)
    mgr.create_topic(TOPIC, 1)
    source = _live_dirs(dirs)[0]
    target = next(d for d in dirs if d != source)
    before = _fill(mgr, batches)
    crashing = CrashingDisk(crash_at)
    previous = disk.install(crashing)
    crashed = False
    started: list = []
    try:
        _run_move(mgr, target, chunk, started)
    except Crash:
        crashed = True
    finally:
        disk.install(previous)
    for move in started:
        if move.future_log is not None:
            move.future_log.close_handles()
    mgr.close_without_marker()   # the kill: no flush, no marker, descriptors dropped
    again = _manager(dirs)
    live = _live_dirs(dirs)
    assert len(live) == 1
    assert _leftover_futures(dirs) == []
    assert _content(again) == before
    if not crashed:
        assert live == [target]
    again.shutdown()
    return crashed, live, crashing.calls


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.integers(1, 40), crash_at=st.integers(1, 30), chunk=st.sampled_from([700, 3000]))
def test_a_crash_at_any_step_leaves_the_partition_whole_in_one_directory(tmp_path_factory, batches, crash_at,
                                                                          chunk):
    _crash_scenario(tmp_path_factory.mktemp("crash"), batches, crash_at, chunk)


def test_a_crash_at_each_step_of_the_swap(tmp_path_factory):
    """The last four steps are the swap's: after the future is closed, before the current
    directory's rename, between the two renames (no live directory: the restart completes the
    move) and after them. The partition is created in d1 and moved to d2."""
    crashed, live, steps = _crash_scenario(tmp_path_factory.mktemp("count"), 30, 10_000, 2000)
    assert not crashed and os.path.basename(live[0]) == "d2"
    where = []
    for step in range(steps - 3, steps + 1):
        crashed, live, _ = _crash_scenario(tmp_path_factory.mktemp("swap"), 30, step, 2000)
        assert crashed
        where.append(os.path.basename(live[0]))
    assert where == ["d1", "d1", "d2", "d2"]


def test_a_future_left_by_a_deleted_topic_is_removed_at_start(dirs):
    mgr, source, target = _filled(dirs, 20)
    move, _ = mgr.begin_move(TOPIC, 0, target)
    mgr.move_future_job(move, NOW_MS)()
    mgr.delete_topic(TOPIC)
    assert move.cancelled
    with pytest.raises(KafkaStorageError):
        mgr.move_copy_job(move, 100, NOW_MS)
    move.future_log.close_handles()
    mgr.close_without_marker()      # killed before the mover removed the future
    assert _leftover_futures(dirs) and not _live_dirs(dirs)
    again = _manager(dirs)
    assert again.topic(TOPIC) is None
    assert _leftover_futures(dirs) == [] and _live_dirs(dirs) == []
    again.shutdown()


def test_a_log_ending_in_a_gap_keeps_its_log_end_offset(dirs):
    mgr, source, target = _filled(dirs, 10)
    log = mgr.get_log(TOPIC, 0)
    end = log.log_end_offset
    log.roll(expected_next_offset=end + 5)   # an empty active segment past the last record
    mgr.shutdown()
    mgr = _manager(dirs)
    before = _content(mgr)
    assert mgr.get_log(TOPIC, 0).log_end_offset == end + 5
    _run_move(mgr, target)
    assert _live_dirs(dirs) == [target]
    assert mgr.get_log(TOPIC, 0).log_end_offset == end + 5
    assert _content(mgr) == before
    mgr.shutdown()


def test_transactions_move_with_their_state(dirs):
    """Aborted and committed transactions, one still open: the moved log answers the same last
    stable offset, aborted-transaction list and producer descriptions (the oracle: the source log)."""
    from sundial.records.builder import SimpleRecord, build_records
    from sundial.records.control import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT

    mgr = _manager(dirs)
    mgr.create_topic(TOPIC, 1)
    source = _live_dirs(dirs)[0]
    target = next(d for d in dirs if d != source)
    log = mgr.get_log(TOPIC, 0)
    seq = {}
    for round_ in range(6):
        for pid in (1000, 2000, 3000):
            records = [SimpleRecord(NOW_MS + round_, None, b"t" * 50) for _ in range(2)]
            data = build_records(2, records, producer_id=pid, producer_epoch=0, base_sequence=seq.get(pid, 0),
                                 is_transactional=True).buffer
            seq[pid] = seq.get(pid, 0) + 2
            log.append(data, now_ms=NOW_MS)
        for pid, control in ((1000, CONTROL_TYPE_ABORT), (2000, CONTROL_TYPE_COMMIT)):
            log.append_txn_marker(producer_id=pid, producer_epoch=0, coordinator_epoch=0, control_type=control,
                                  timestamp_ms=NOW_MS, now_ms=NOW_MS)
        log.append(batch([NOW_MS]), now_ms=NOW_MS)
    log.flush()

    def facts(m):
        lg = m.get_log(TOPIC, 0)
        return (lg.log_end_offset, lg.last_stable_offset,
                [(a.producer_id, a.first_offset) for a in lg.collect_aborted_transactions(0, lg.log_end_offset)],
                sorted((p.producer_id, p.last_sequence, p.current_txn_start_offset) for p in lg.describe_producers()))

    before = facts(mgr)
    content = _content(mgr)
    assert before[2]   # there are aborted transactions to carry
    _run_move(mgr, target, chunk_bytes=900)
    assert _live_dirs(dirs) == [target]
    assert facts(mgr) == before and _content(mgr) == content
    mgr.shutdown()
    again = _manager(dirs)
    assert facts(again) == before
    again.shutdown()
