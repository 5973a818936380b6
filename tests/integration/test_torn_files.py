"""Start-up after torn and corrupt files: the daemon starts, logs what it repaired, loses nothing
written before the damage, answers offsetsForTimes exactly, and never deletes a segment
early because of a bad index.

Each case writes ~300 records (non-monotonic CreateTime timestamps within the last hour,
several segments of 4 KiB, an index entry every 512 bytes), stops the daemon (SIGTERM,
or SIGKILL for the unclean cases), damages the files, restarts it with a retention pass
every 200 ms (topic retention: 2 days), and checks:

* records: every record before the damage is read back, in order, exactly once; after
  a torn ``.log`` the log ends at the last whole batch before the cut (expected offsets
  computed by walking the file's batch headers in the test);
* offsetsForTimes for 40 targets equals brute force over what was read back;
* no segment was deleted by retention (after three passes were seen to run), the repair was logged, and the log accepts
  appends at the right offset afterwards.
"""

from __future__ import annotations

import glob
import os
import random
import struct
import time

import pytest
from kafka import KafkaConsumer, TopicPartition

from .clients import create_topic, first_offset_at_or_after, producer, wait_for_retention_passes

TOPIC = "torn"
N = 300
REPAIR_EVENTS = {"segment_indexes_rebuilding", "segment_indexes_rebuilt", "log_recovery_started",
                 "segment_truncated_during_recovery", "checkpoint_unreadable", "checkpoint_corrupt_ignored",
                 "segment_corruption_found", "orphan_index_removed", "log_recovery_finished"}


def start(broker_factory):
    # No recovery-point checkpoint before the kill (its first write is an hour away): recovery after
    # a kill then starts at the first segment, so a segment torn in the middle is always recovered.
    # With the default minute, a slow run checkpointed past it first, and a torn segment below the
    # recovery point is outside what a crash can do (it was fsynced), so nothing looks at its tail.
    b = broker_factory(**{"log.retention.check.interval.ms": "200", "log.initial.task.delay.ms": "0",
                          "log.segment.delete.delay.ms": "0", "log.flush.offset.checkpoint.interval.ms": "3600000"})
    return b.start()


def populate(b) -> list[tuple[int, int, bytes]]:
    create_topic(b.bootstrap, TOPIC, configs={"segment.bytes": "4096", "index.interval.bytes": "512",
                                              "retention.ms": str(2 * 86_400_000)})
    base = int(time.time() * 1000) - 3_600_000
    p = producer(b.bootstrap, acks="all", linger_ms=2)
    futures = []
    for i in range(N):
        ts = base + ((i * 7919) % N) * 1000
        futures.append((p.send(TOPIC, value=b"%05d-" % i + b"x" * 60, partition=0, timestamp_ms=ts), ts, i))
        if i % 7 == 6:
            p.flush()
    p.flush()
    p.close()
    out = [(f.get(timeout=30).offset, ts, b"%05d-" % i + b"x" * 60) for f, ts, i in futures]
    assert [o for o, _, _ in out] == list(range(N))
    return out


def read_all(b) -> list[tuple[int, int, bytes]]:
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    tp = TopicPartition(TOPIC, 0)
    c.assign([tp])
    end = c.end_offsets([tp])[tp]
    c.seek_to_beginning(tp)
    got = []
    deadline = time.monotonic() + 60
    while (not got or got[-1][0] < end - 1) and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            got.extend((r.offset, r.timestamp, r.value) for r in recs)
    c.close()
    return got


def check_offsets_for_times(b, records) -> None:
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False)
    tp = TopicPartition(TOPIC, 0)
    stamps = sorted(ts for _, ts, _ in records)
    if not stamps:
        return
    targets = [stamps[0] - 1, stamps[-1], stamps[-1] + 1] + random.Random(5).sample(stamps, min(37, len(stamps)))
    for target in targets:
        ans = c.offsets_for_times({tp: target})[tp]
        want = first_offset_at_or_after([(o, ts) for o, ts, _ in records], target)
        got = None if ans is None else (ans.offset, ans.timestamp)
        assert got == want, f"target {target}: broker {got}, brute force {want}"
    c.close()


def partition_dir(b) -> str:
    return os.path.join(b.data_dir, f"{TOPIC}-0")


def segments(b) -> list[str]:
    return sorted(glob.glob(os.path.join(partition_dir(b), "*.log")))


def batches_in(path: str) -> list[tuple[int, int, int]]:
    """(start position, end position, last offset) of every whole batch in a .log file."""
    data = open(path, "rb").read()
    out, pos = [], 0
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        end = pos + 12 + length
        if end > len(data):
            break
        out.append((pos, end, base + struct.unpack_from(">i", data, pos + 23)[0]))
        pos = end
    return out


def verify(b, produced, expect_until: int, since_line: int, *, repaired: bool = True) -> None:
    """Restarted daemon: records [0, expect_until) intact, oft exact, no early deletion, appends work."""
    wait_for_retention_passes(b, 3)  # seen to run, not guessed
    got = read_all(b)
    assert got == produced[:expect_until], (len(got), expect_until)
    check_offsets_for_times(b, got)
    events = [e for e in b.log_lines()[since_line:]]
    names = {e.get("event") for e in events}
    assert not any(e.get("event") == "segment_deleted" and e.get("topic") == TOPIC for e in events), \
        "a segment was deleted after the damage"
    if repaired:
        assert names & REPAIR_EVENTS, sorted(names)
    p = producer(b.bootstrap, acks="all")
    md = p.send(TOPIC, value=b"after", partition=0).get(timeout=30)
    p.close()
    assert md.offset == expect_until


# -- the cases ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["active", "middle", "first"])
def test_log_truncated_at_a_random_byte_after_a_crash(broker_factory, which):
    b = start(broker_factory)
    produced = populate(b)
    b.kill()
    segs = segments(b)
    assert len(segs) >= 4
    path = {"active": segs[-1], "middle": segs[len(segs) // 2], "first": segs[0]}[which]
    rng = random.Random(hash(which) & 0xFFFF)
    size = os.path.getsize(path)
    cut = rng.randrange(1, size)
    whole = [bt for bt in batches_in(path) if bt[1] <= cut]
    first_lost = whole[-1][2] + 1 if whole else int(os.path.basename(path)[:-4])
    os.truncate(path, cut)
    since = len(b.log_lines())
    b.start()
    verify(b, produced, first_lost, since)
    b.stop()


@pytest.mark.parametrize("kind", ["index", "timeindex"])
@pytest.mark.parametrize("damage", ["zero-filled", "deleted", "torn", "untrimmed"])
def test_bad_indexes_are_rebuilt_after_a_clean_shutdown(broker_factory, kind, damage):
    b = start(broker_factory)
    produced = populate(b)
    assert b.stop() == 0
    for log in segments(b):
        path = log[:-4] + "." + kind
        if not os.path.exists(path):
            continue
        size = os.path.getsize(path)
        if damage == "zero-filled":
            with open(path, "r+b") as fh:
                fh.write(b"\0" * size)
        elif damage == "deleted":
            os.remove(path)
        elif damage == "torn" and size > 3:
            os.truncate(path, size - 3)
        elif damage == "untrimmed":  # KAFKA-10207: a pre-allocated file never trimmed
            os.truncate(path, 10 * 1024 * 1024)
    since = len(b.log_lines())
    b.start()
    verify(b, produced, N, since)
    b.stop()


def test_missing_clean_shutdown_marker_means_recovery_and_no_loss(broker_factory):
    b = start(broker_factory)
    produced = populate(b)
    assert b.stop() == 0
    os.remove(os.path.join(b.data_dir, ".kafka_cleanshutdown"))
    since = len(b.log_lines())
    b.start()
    verify(b, produced, N, since)
    b.stop()


@pytest.mark.parametrize("garbage", [b"", b"not a checkpoint\n", b"0\n1\ntorn 0 999999999\n",
                                     b"0\n1\ntorn 0 -5\n", b"0\n5\ntorn 0 3\n", b"\xff\xfe\x00garbage"])
def test_corrupt_recovery_checkpoint(broker_factory, garbage):
    b = start(broker_factory)
    produced = populate(b)
    b.kill()  # unclean: the recovery point matters
    with open(os.path.join(b.data_dir, "recovery-point-offset-checkpoint"), "wb") as fh:
        fh.write(garbage)
    since = len(b.log_lines())
    b.start()
    verify(b, produced, N, since, repaired=False)
    b.stop()


def test_corrupt_log_start_offset_checkpoint(broker_factory):
    b = start(broker_factory)
    produced = populate(b)
    assert b.stop() == 0
    with open(os.path.join(b.data_dir, "log-start-offset-checkpoint"), "wb") as fh:
        fh.write(b"0\n1\ntorn 0 banana\n")
    since = len(b.log_lines())
    b.start()
    verify(b, produced, N, since, repaired=False)
    b.stop()


def test_crash_mid_segment_with_a_stale_time_index_never_deletes_early(broker_factory):
    """The first time index entry says 'very old' (a torn page of an old file): retention must
    look at the records, not trust the index, and keep every segment."""
    b = start(broker_factory)
    produced = populate(b)
    b.kill()
    for log in segments(b)[:-1]:
        path = log[:-4] + ".timeindex"
        if os.path.exists(path) and os.path.getsize(path) >= 12:
            with open(path, "r+b") as fh:
                fh.write(struct.pack(">qi", 1000, 0))  # timestamp 1 s after the epoch
    since = len(b.log_lines())
    b.start()
    verify(b, produced, N, since)
    b.stop()
