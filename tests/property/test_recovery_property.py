"""Hypothesis: after truncation, index damage or a torn tail, recovery keeps every record
before the damage and timestamp search still equals brute force over what survived.

Scenarios drawn per example:

* ``torn``: crash (no close), then cut the active segment at a random byte; unclean start.
* ``index``: clean shutdown, then delete / zero-fill / truncate / scramble random index
  files of random segments; clean start (the beyond-Kafka check must find and rebuild them).
* ``truncate``: ``truncate_to`` a random offset, append more, crash; unclean start.
"""

import contextlib
import os
import random
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.log_helpers import NOW_MS, batch, topic_config
from support.unit_helpers import records_on_disk

from sundial.storage.log import PartitionLog
from sundial.records import iter_records

BASE = NOW_MS


def check_search(log, records):
    lso = log.log_start_offset
    targets = {BASE - 100, BASE + 10_000}
    for _, t in records:
        targets.update((t - 1, t, t + 1))
    for target in sorted(targets):
        expect = None
        for seg in log.segments:
            mine = [(o, t) for o, t in records if seg.base_offset <= o < seg.next_offset]
            largest = max((t for _, t in mine), default=-1)
            if largest < 0:
                largest = seg.last_modified_ms()
            if largest >= target:
                expect = next(((o, t) for o, t in mine if t >= target and o >= lso), None)
                break
        got = log.fetch_offset_by_timestamp(target)
        assert ((got.offset, got.timestamp_ms) if got else None) == expect, target


def write_log(d, cfg, sizes, stamps_rng):
    log = PartitionLog.create(d, cfg, topic="r", partition=0, now_ms=BASE)
    written = []
    for n in sizes:
        stamps = [BASE + stamps_rng.randrange(-200, 200) for _ in range(n)]
        r = log.append(batch(stamps, value_size=stamps_rng.randrange(1, 80)), now_ms=BASE)
        written.append((r.first_offset, stamps))
    return log, written


def flat(written):
    return [(o + i, t) for o, stamps in written for i, t in enumerate(stamps)]


@contextlib.contextmanager
def written_log(seed, sizes, **cfg):
    """A log of one batch per entry of ``sizes`` (that many records, timestamps and value sizes
    drawn from ``seed``) in a fresh directory, removed afterwards. Yields the random generator
    (for the rest of the example), the log's directory, its config, the log and what was written."""
    rng = random.Random(seed)
    d = tempfile.mkdtemp(prefix="sundial-rec-")
    try:
        path = os.path.join(d, "r-0")
        config = topic_config(**cfg)
        log, written = write_log(path, config, sizes, rng)
        yield rng, path, config, log, written
    finally:
        shutil.rmtree(d, ignore_errors=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(1, 5), min_size=1, max_size=40), interval=st.integers(0, 300),
       segment_bytes=st.integers(600, 3000), seed=st.integers(0, 2**32 - 1))
def test_torn_tail_recovery(sizes, interval, segment_bytes, seed):
    with written_log(seed, sizes, index_interval_bytes=interval, segment_bytes=segment_bytes) as (
            rng, path, config, log, written):
        all_records = flat(written)
        active = log.active_segment
        # batch boundaries of the active segment, to know what must survive the tear
        data = os.pread(active.fd, active.size_bytes, 0)
        log.close_handles()   # crash
        cut = rng.randrange(0, active.size_bytes + 1) if active.size_bytes else 0
        with open(active.log_path, "r+b") as fh:
            fh.truncate(cut)
        intact = [(r.offset, r.timestamp) for r in iter_records(data[:cut])] if cut else []
        kept_before = [(o, t) for o, t in all_records if o < active.base_offset]
        again = PartitionLog.open(path, config, topic="r", partition=0, clean=False, recovery_point=0)
        survived = records_on_disk(again)
        # every complete batch before the tear is still there, nothing after it
        assert survived == kept_before + intact
        assert again.log_end_offset == (survived[-1][0] + 1 if survived else again.log_start_offset)
        check_search(again, survived)
        # and the log accepts appends at the right offset
        r = again.append(batch([BASE]), now_ms=BASE)
        assert r.first_offset == again.log_end_offset - 1
        again.close_handles()


DAMAGES = ["delete", "zero_fill_tail", "zero_whole", "truncate_to_zero", "scramble", "garbage_bytes", "swap_entries"]


def damage(path, how, rng):
    if not os.path.exists(path):
        return
    size = os.path.getsize(path)
    if how == "delete":
        os.remove(path)
    elif how == "zero_fill_tail":
        with open(path, "ab") as fh:
            fh.write(b"\0" * (rng.randrange(1, 40) * 12 * 8))
    elif how == "zero_whole":
        with open(path, "r+b") as fh:
            fh.write(b"\0" * size)
    elif how == "truncate_to_zero":
        os.truncate(path, 0)
    elif how == "scramble":
        with open(path, "r+b") as fh:
            fh.write(bytes(rng.randrange(256) for _ in range(size)))
    elif how == "garbage_bytes":
        with open(path, "ab") as fh:
            fh.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 7))))
    elif how == "swap_entries":
        raw = open(path, "rb").read()
        width = 12 if path.endswith(".timeindex") else 8
        n = len(raw) // width
        if n >= 2:
            i = rng.randrange(n - 1)
            entries = [raw[k * width:(k + 1) * width] for k in range(n)]
            entries[i], entries[i + 1] = entries[i + 1], entries[i]
            open(path, "wb").write(b"".join(entries))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(1, 5), min_size=3, max_size=40), interval=st.integers(0, 200),
       segment_bytes=st.integers(600, 2000), seed=st.integers(0, 2**32 - 1),
       hows=st.lists(st.sampled_from(DAMAGES), min_size=1, max_size=4))
def test_index_damage_is_repaired_on_clean_start(sizes, interval, segment_bytes, seed, hows):
    with written_log(seed, sizes, index_interval_bytes=interval, segment_bytes=segment_bytes,
                     retention_ms=10**12) as (rng, path, config, log, written):
        all_records = flat(written)
        segments = [(s.offset_index.path, s.time_index.path) for s in log.segments]
        log.close()
        for how in hows:
            oi, ti = rng.choice(segments)
            damage(rng.choice([oi, ti]), how, rng)
        again = PartitionLog.open(path, config, topic="r", partition=0, clean=True)
        assert records_on_disk(again) == all_records   # never lose data because of an index
        check_search(again, all_records)
        for seg in again.segments:   # the max timestamp of each segment is right again
            mine = [t for o, t in all_records if seg.base_offset <= o < seg.next_offset]
            assert seg.max_timestamp_so_far == max(mine, default=-1)
        assert not again.delete_old_segments(BASE).deleted   # nothing looks ancient
        again.close_handles()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(1, 5), min_size=2, max_size=30), more=st.lists(st.integers(1, 4), max_size=10),
       interval=st.integers(0, 200), segment_bytes=st.integers(600, 2000), point=st.floats(0, 1),
       seed=st.integers(0, 2**32 - 1))
def test_truncation_then_crash(sizes, more, interval, segment_bytes, point, seed):
    with written_log(seed, sizes, index_interval_bytes=interval, segment_bytes=segment_bytes) as (
            rng, path, config, log, written):
        records = flat(written)
        target = int(point * log.log_end_offset)
        log.truncate_to(target)
        # batch-granular: every batch whose last offset >= target is gone
        kept = []
        for first, stamps in written:
            if first + len(stamps) - 1 < target:
                kept.extend((first + i, t) for i, t in enumerate(stamps))
        assert records_on_disk(log) == kept
        check_search(log, kept)
        for n in more:
            stamps = [BASE + rng.randrange(-200, 200) for _ in range(n)]
            r = log.append(batch(stamps), now_ms=BASE)
            kept.extend((r.first_offset + i, t) for i, t in enumerate(stamps))
        log.close_handles()
        again = PartitionLog.open(path, config, topic="r", partition=0, clean=False, recovery_point=0)
        assert records_on_disk(again) == kept
        check_search(again, kept)
        again.close_handles()
        del records
