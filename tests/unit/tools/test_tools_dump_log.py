"""``sundial dump-log`` over segment files written by Sundial's own storage.

Ground truth is what the test appended (records, offsets, timestamps); index entries
are checked against positions and maxima computed independently from the appended
batches. Corruptions chosen by Hypothesis must always be flagged (exit code 3).
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import shutil
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.log_helpers import topic_config

from sundial.cli import build_parser
from sundial.tools.common import EXIT_ERROR, EXIT_FINDINGS
from sundial.storage import PartitionLog
from sundial.records.builder import SimpleRecord, build_records

NOW = 1_795_000_000_000


@dataclasses.dataclass
class Written:
    dir: str
    records: list      # (offset, timestamp, timestamp_type, key, value, headers)
    batches: list      # (first offset, last offset, max timestamp)


def write_partition(path, seed: int, *, batches: int = 60, magic: int = 2, log_append_time: bool = False,
                    index_interval_bytes: int = 150, segment_bytes: int = 2500, close: bool = True) -> Written:
    rng = random.Random(seed)
    fmt = {2: "3.0-IV1", 1: "0.10.2", 0: "0.9.0"}[magic]
    cfg = topic_config(index_interval_bytes=index_interval_bytes, segment_bytes=segment_bytes,
                       message_format_version=fmt,
                       message_timestamp_type="LogAppendTime" if log_append_time else "CreateTime")
    log = PartitionLog.create(str(path), cfg, topic="t", partition=0, now_ms=NOW)
    records, batch_facts = [], []
    now = NOW
    for b in range(batches):
        now += rng.randint(1, 50)
        n = rng.randint(1, 4)
        recs = []
        for i in range(n):
            ts = NOW - 100_000 + b * 1000 + rng.randint(-3000, 3000)
            key = None if rng.random() < 0.2 else f"k{b}.{i}".encode()
            value = None if rng.random() < 0.1 else bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))
            headers = () if magic < 2 or rng.random() < 0.5 else ((f"h{i}", f"x{b}".encode()), ("n", None))
            recs.append(SimpleRecord(ts, key, value, headers))
        compression = rng.choice([0, 0, 1]) if magic >= 1 else 0
        result = log.append(build_records(magic, recs, compression=compression).buffer, now_ms=now)
        for i, r in enumerate(recs):
            if magic == 0:
                ts, ts_type = -1, -1
            elif log_append_time:
                ts, ts_type = now, 1
            else:
                ts, ts_type = r.timestamp, 0
            records.append((result.first_offset + i, ts, ts_type, r.key, r.value, r.headers))
        batch_facts.append((result.first_offset, result.last_offset,
                            max(t for o, t, *_ in records if result.first_offset <= o <= result.last_offset)))
    if close:
        log.close()
    return Written(str(path), records, batch_facts)


def run_dump(*argv) -> int:
    args = build_parser().parse_args(["dump-log", *argv])
    return args.func(args)


def segment_files(d: str, suffix: str) -> list[str]:
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(suffix))


_RECORD = re.compile(r"^\| offset: (\d+) (CreateTime|LogAppendTime|NoTimestampType): (-?\d+) keySize: (-?\d+) "
                     r"valueSize: (-?\d+)(?: sequence: (-?\d+) headerKeys: \[([^\]]*)\])?(?: isValid: \w+ crc: \d+)?"
                     r"(?: key: (.*?))? payload: (.*?)(?: headers: \[(.*)\])?$")


def text_of(data: bytes | None) -> str:
    return "null" if data is None else data.hex()


@pytest.mark.parametrize("magic, lat", [(2, False), (2, True), (1, False), (0, False)])
def test_dump_matches_what_was_written(tmp_path, capsys, magic, lat):
    w = write_partition(tmp_path / "t-0", seed=magic * 10 + lat, magic=magic, log_append_time=lat)
    logs = segment_files(w.dir, ".log")
    assert len(logs) > 2, "the test wants several segments"
    assert run_dump("--files", ",".join(logs), "--print-data-log", "--data-format", "hex") == 0
    out = capsys.readouterr().out
    seen = []
    names = {0: "CreateTime", 1: "LogAppendTime", -1: "NoTimestampType"}
    for line in out.splitlines():
        if line.startswith("|"):
            m = _RECORD.match(line)
            assert m, line
            seen.append(m)
    assert len(seen) == len(w.records)
    for m, (offset, ts, ts_type, key, value, headers) in zip(seen, w.records):
        assert int(m.group(1)) == offset
        assert m.group(2) == names[ts_type]
        assert int(m.group(3)) == ts
        assert int(m.group(4)) == (-1 if key is None else len(key))
        assert int(m.group(5)) == (-1 if value is None else len(value))
        assert (m.group(8) or "null") == text_of(key) if key is not None else m.group(8) is None
        assert m.group(9) == text_of(value)
        if magic == 2:
            assert m.group(7) == ",".join(h[0] for h in headers)
            if headers:
                assert m.group(10) == ",".join(f"{h[0]}={text_of(h[1])}" for h in headers)
    # One batch line per append, with the right offsets and a valid CRC.
    batch_lines = [l for l in out.splitlines() if l.startswith(("baseOffset:", "offset:"))]
    assert all("isvalid: true" in l for l in batch_lines)
    if magic == 2:
        got = [tuple(int(x) for x in re.match(r"baseOffset: (\d+) lastOffset: (\d+)", l).groups())
               for l in batch_lines]
        assert got == [(first, last) for first, last, _ in w.batches]


def test_index_entries_match_an_independent_reading(tmp_path, capsys):
    w = write_partition(tmp_path / "t-0", seed=7)
    for index in segment_files(w.dir, ".index"):
        assert run_dump("--files", index) == 0
        out = capsys.readouterr().out
        entries = [tuple(map(int, m)) for m in re.findall(r"^offset: (\d+) position: (\d+)$", out, re.M)]
        # Independent: walk the .log by its size fields only.
        data = open(index[:-len(".index")] + ".log", "rb").read()
        starts, pos = {}, 0
        while pos + 12 <= len(data):
            base, size = struct.unpack_from(">qi", data, pos)
            last = base + struct.unpack_from(">i", data, pos + 23)[0]
            starts[pos] = last
            pos += 12 + size
        assert entries, "index_interval_bytes=150 must give entries"
        for offset, position in entries:
            assert starts[position] == offset
    for tindex in segment_files(w.dir, ".timeindex"):
        assert run_dump("--files", tindex) == 0
        out = capsys.readouterr().out
        entries = [tuple(map(int, m)) for m in re.findall(r"^timestamp: (-?\d+) offset: (\d+)$", out, re.M)]
        running = -1
        by_last = {}
        base = int(os.path.basename(tindex).split(".")[0])
        for first, last, max_ts in w.batches:
            if first >= base:
                running = max(running, max_ts)
                by_last[last] = (max_ts, running)
        for ts, offset in entries:
            assert by_last[offset] == (ts, ts)


def test_verify_passes_on_intact_files_and_directories(tmp_path, capsys):
    w = write_partition(tmp_path / "t-0", seed=3)
    assert run_dump("--files", w.dir, "--verify-index-only") == 0
    out = capsys.readouterr()
    assert "offset:" not in out.out and "timestamp:" not in out.out
    assert out.err == ""
    assert run_dump("--files", w.dir, "--index-sanity-check") == 0
    assert "passed sanity check" in capsys.readouterr().out


def test_an_active_segment_whose_index_has_no_entry_yet_is_not_a_mismatch(tmp_path, capsys):
    """The pre-allocated index of a fresh active segment is all zeros: its first slot reads as
    (base offset, position 0), which only a batch ending at the base offset would have written."""
    cfg = topic_config(index_interval_bytes=4096)
    log = PartitionLog.create(str(tmp_path / "t-0"), cfg, topic="t", partition=0, now_ms=NOW)
    log.append(build_records(2, [SimpleRecord(NOW, b"k", b"v")] * 5).buffer, now_ms=NOW)   # offsets 0-4
    try:
        index = segment_files(str(tmp_path / "t-0"), ".index")[-1]
        assert os.path.getsize(index) > 0 and open(index, "rb").read().count(0) == os.path.getsize(index)
        assert run_dump("--files", str(tmp_path / "t-0"), "--verify-index-only") == 0
        out = capsys.readouterr()
        assert "Mismatches" not in out.out + out.err
        # a real first entry (base, 0) in a file of zeros would be a mismatch against a batch ending at 4
        assert run_dump("--files", index) == 0
        assert "is empty" in capsys.readouterr().out
    finally:
        log.close()


def test_active_segment_with_preallocated_indexes(tmp_path, capsys):
    w = write_partition(tmp_path / "t-0", seed=4, close=False)
    index = segment_files(w.dir, ".index")[-1]
    assert os.path.getsize(index) == 10_485_760          # pre-allocated, zero-filled tail
    assert run_dump("--files", w.dir, "--verify-index-only") == 0
    assert run_dump("--files", w.dir, "--index-sanity-check") == 0   # Kafka's tool fails the time index here
    capsys.readouterr()


corruptions = st.sampled_from(["offset", "position", "timestamp", "time_offset", "swap"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=corruptions, pick=st.integers(0, 10_000), delta=st.integers(1, 500), seed=st.integers(0, 3))
def test_verify_flags_any_corrupted_entry(tmp_path_factory, kind, pick, delta, seed):
    base = tmp_path_factory.mktemp("corrupt")
    w = write_partition(base / "t-0", seed=seed)
    suffix = ".index" if kind in ("offset", "position", "swap") else ".timeindex"
    files = [f for f in segment_files(w.dir, suffix) if os.path.getsize(f) >= (24 if suffix == ".timeindex" else 16)]
    path = files[pick % len(files)]
    raw = bytearray(open(path, "rb").read())
    size = 8 if suffix == ".index" else 12
    n = len(raw) // size
    i = pick % n
    if kind == "offset":
        rel, posn = struct.unpack_from(">ii", raw, i * 8)
        struct.pack_into(">ii", raw, i * 8, rel + (delta if i == n - 1 or delta % 2 else -delta), posn)
    elif kind == "position":
        rel, posn = struct.unpack_from(">ii", raw, i * 8)
        struct.pack_into(">ii", raw, i * 8, rel, posn + delta)
    elif kind == "swap":
        j = (i + 1) % n
        a, b = raw[i * 8:(i + 1) * 8], raw[j * 8:(j + 1) * 8]
        raw[i * 8:(i + 1) * 8], raw[j * 8:(j + 1) * 8] = b, a
    elif kind == "timestamp":
        ts, rel = struct.unpack_from(">qi", raw, i * 12)
        struct.pack_into(">qi", raw, i * 12, ts + (delta if delta % 2 else -delta), rel)
    else:
        ts, rel = struct.unpack_from(">qi", raw, i * 12)
        struct.pack_into(">qi", raw, i * 12, ts, rel + delta)
    open(path, "wb").write(bytes(raw))
    args = build_parser().parse_args(["dump-log", "--files", path, "--verify-index-only"])
    assert args.func(args) == EXIT_FINDINGS
    shutil.rmtree(base)


def test_problems_are_reported_in_kafkas_words(tmp_path, capsys):
    w = write_partition(tmp_path / "t-0", seed=5)
    index = segment_files(w.dir, ".index")[0]
    raw = bytearray(open(index, "rb").read())
    rel, pos = struct.unpack_from(">ii", raw, 8)
    struct.pack_into(">ii", raw, 8, rel + 1, pos)
    open(index, "wb").write(bytes(raw))
    tindex = segment_files(w.dir, ".timeindex")[0]
    raw = bytearray(open(tindex, "rb").read())
    ts, trel = struct.unpack_from(">qi", raw, 12)
    struct.pack_into(">qi", raw, 12, ts + 7, trel)
    open(tindex, "wb").write(bytes(raw))
    assert run_dump("--files", f"{index},{tindex}", "--verify-index-only") == EXIT_FINDINGS
    err = capsys.readouterr().err
    base = int(os.path.basename(index).split(".")[0])
    assert f"Mismatches in :{index}" in err
    assert f"  Index offset: {base + rel + 1}, log offset: {base + rel}" in err
    assert f"Found timestamp mismatch in :{tindex}" in err
    assert f"  Index timestamp: {ts + 7}, log timestamp: {ts}" in err
    assert err.rstrip().endswith("problem(s) found")


def test_sanity_check_failures(tmp_path, capsys):
    w = write_partition(tmp_path / "t-0", seed=6)
    index = segment_files(w.dir, ".index")[0]
    with open(index, "ab") as fh:
        fh.write(b"\x01\x02\x03")
    assert run_dump("--files", index, "--index-sanity-check") == EXIT_FINDINGS
    assert "neither positive nor a multiple of 8" in capsys.readouterr().err
    tindex = segment_files(w.dir, ".timeindex")[0]
    raw = bytearray(open(tindex, "rb").read())
    struct.pack_into(">q", raw, len(raw) - 12, 5)      # last timestamp below the first
    open(tindex, "wb").write(bytes(raw))
    assert run_dump("--files", tindex, "--index-sanity-check") == EXIT_FINDINGS
    assert "less than the first timestamp" in capsys.readouterr().err


def test_log_corruption_is_a_finding(tmp_path, capsys):
    w = write_partition(tmp_path / "t-0", seed=8)
    log = segment_files(w.dir, ".log")[0]
    raw = bytearray(open(log, "rb").read())
    raw[70] ^= 0xFF                                     # inside the first batch's records: CRC breaks
    open(log, "wb").write(bytes(raw) + b"\x00\x00\x00")
    assert run_dump("--files", log) == EXIT_FINDINGS
    out, err = capsys.readouterr()
    assert "isvalid: false" in out
    assert "invalid CRC" in err
    assert "Found 3 invalid bytes at the end of" in out


def test_progress_on_stderr(tmp_path, capsys):
    w = write_partition(tmp_path / "t-0", seed=9)
    log = segment_files(w.dir, ".log")[0]
    assert run_dump("--files", log, "--progress", "always") == 0
    err = capsys.readouterr().err
    assert "dump-log 00000000000000000000.log: done 100.0%" in err


def test_missing_files_are_one_line_errors(tmp_path, capsys):
    assert run_dump("--files", str(tmp_path / "nope.log")) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "file not found" in err
    w = write_partition(tmp_path / "t-0", seed=10)
    index = segment_files(w.dir, ".index")[0]
    os.remove(index[:-len(".index")] + ".log")
    assert run_dump("--files", index) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "log file not found" in err


def test_offsets_decoder_and_control_batches(tmp_path, capsys):
    from sundial.broker.groups.schema import OffsetValue, encode_offset_key, encode_offset_value

    cfg = topic_config()
    log = PartitionLog.create(str(tmp_path / "__consumer_offsets-0"), cfg, topic="__consumer_offsets", partition=0,
                              now_ms=NOW)
    key = encode_offset_key("billing", "orders", 3)
    value = encode_offset_value(OffsetValue(42, 0, "", NOW, -1))
    log.append(build_records(2, [SimpleRecord(NOW, key, value), SimpleRecord(NOW, key, None)]).buffer, now_ms=NOW)
    log.close()
    path = segment_files(str(tmp_path / "__consumer_offsets-0"), ".log")[0]
    assert run_dump("--files", path, "--offsets-decoder") == 0
    out = capsys.readouterr().out
    assert "key: offset_commit::group=billing,partition=orders-3 payload: offset=42,leaderEpoch=0" in out
    assert "payload: <DELETE>" in out
    control = build_records(2, [SimpleRecord(NOW, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 7))],
                            is_control=True, is_transactional=True, producer_id=5, producer_epoch=0).buffer
    cpath = tmp_path / "ctl" / "00000000000000000000.log"
    cpath.parent.mkdir()
    cpath.write_bytes(control)
    assert run_dump("--files", str(cpath), "--deep-iteration") == 0
    out = capsys.readouterr().out
    assert "isControl: true" in out and "endTxnMarker: COMMIT coordinatorEpoch: 7" in out


def test_offsets_decoder_prints_consumer_group_records_as_json(tmp_path, capsys):
    """KIP-848 records (types 3-8, 16) are decoded, with Kafka's camelCase names, not reported unknown."""
    import json
    import uuid

    from sundial.broker.groups.modern.records import (
        ConsumerGroupMetadataKey, ConsumerGroupMetadataValue, ConsumerGroupTargetAssignmentMemberKey,
        ConsumerGroupTargetAssignmentMemberValue, CoordinatorRecord, encode_record)

    topic_id = uuid.UUID(int=5)
    records = [encode_record(CoordinatorRecord(ConsumerGroupMetadataKey("cg"), ConsumerGroupMetadataValue(4))),
               encode_record(CoordinatorRecord(ConsumerGroupTargetAssignmentMemberKey("cg", "m1"),
                                               ConsumerGroupTargetAssignmentMemberValue({topic_id: frozenset({2, 0})}))),
               encode_record(CoordinatorRecord(ConsumerGroupMetadataKey("cg"), None))]
    log = PartitionLog.create(str(tmp_path / "__consumer_offsets-0"), topic_config(), topic="__consumer_offsets",
                              partition=0, now_ms=NOW)
    log.append(build_records(2, [SimpleRecord(NOW, k, v) for k, v in records]).buffer, now_ms=NOW)
    log.close()
    path = segment_files(str(tmp_path / "__consumer_offsets-0"), ".log")[0]
    assert run_dump("--files", path, "--offsets-decoder") == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if " key: " in line]
    assert len(lines) == 3
    key0, payload0 = lines[0].split(" key: ", 1)[1].split(" payload: ")
    assert json.loads(key0) == {"type": "3", "data": {"groupId": "cg"}}
    assert json.loads(payload0)["data"]["epoch"] == 4
    _, payload1 = lines[1].split(" key: ", 1)[1].split(" payload: ")
    assert json.loads(payload1)["data"]["topicPartitions"] == [{"topicId": str(topic_id), "partitions": [0, 2]}]
    assert lines[2].endswith("payload: <DELETE>")


# -- transactions: control batches and .txnindex ------------------------------------------------------------


def _txn_partition(path):
    cfg = topic_config(segment_bytes=600)
    log = PartitionLog.create(str(path), cfg, topic="t", partition=0, now_ms=1_700_000_000_000)
    seq = {}

    def data(pid):
        recs = [SimpleRecord(1_700_000_000_000, b"k", b"v" * 30)] * 2
        log.append(build_records(2, recs, producer_id=pid, producer_epoch=0, base_sequence=seq.get(pid, 0),
                                 is_transactional=True).buffer, now_ms=1_700_000_000_000)
        seq[pid] = seq.get(pid, 0) + 2

    def end(pid, commit):
        log.append_txn_marker(producer_id=pid, producer_epoch=0, coordinator_epoch=4, control_type=int(commit),
                              timestamp_ms=1_700_000_000_000, now_ms=1_700_000_000_000)

    data(1); data(2); end(1, False); data(3); end(2, True); data(1); end(3, False); end(1, False)
    log.close()
    return str(path)


def test_dump_txn_index_prints_and_verifies(tmp_path, capsys):
    d = _txn_partition(tmp_path / "t-0")
    txn_files = segment_files(d, ".txnindex")
    assert txn_files
    assert run_dump("--files", d) == 0
    out = capsys.readouterr().out
    assert "version: 0 producerId: 1 firstOffset: 0 lastOffset: 4 lastStableOffset: 2" in out
    assert re.search(r"isTransactional: true isControl: true", out)
    assert run_dump("--files", d, "--deep-iteration") == 0
    out = capsys.readouterr().out
    assert "endTxnMarker: ABORT coordinatorEpoch: 4" in out and "endTxnMarker: COMMIT coordinatorEpoch: 4" in out
    # a wrong last stable offset, then a missing entry, are problems
    path = txn_files[0]
    raw = bytearray(open(path, "rb").read())
    struct.pack_into(">q", raw, 26, 99)
    open(path, "wb").write(bytes(raw))
    assert run_dump("--files", path) == EXIT_FINDINGS
    assert "does not match" in capsys.readouterr().err
    open(path, "wb").write(bytes(raw[34:]))
    assert run_dump("--files", path) == EXIT_FINDINGS
    assert "is not indexed" in capsys.readouterr().err
