"""Files written by Sundial parse with readers written here from the reference's byte tables
(§1.2 offset index, §1.3 time index, §2.1/§2.2/§2.5/§2.7 records), and with kafka-python's reader.

Nothing in this file imports Sundial's parsers: the readers below are independent.
"""

import os
import re
import struct
import zlib

import pytest
from crc32c import crc32c
from kafka.record.memory_records import MemoryRecords
from support.kafka_bytes_ref import read_zigzag
from support.log_helpers import NOW_MS, batch, topic_config

from sundial.records import codecs
from sundial.storage.log import PartitionLog

# ---------------------------------------------------------------- independent readers


def read_offset_index(path, base):
    raw = open(path, "rb").read()
    assert len(raw) % 8 == 0
    return [(base + rel, pos) for rel, pos in struct.iter_unpack(">ii", raw)]


def read_time_index(path, base):
    raw = open(path, "rb").read()
    assert len(raw) % 12 == 0
    return [(ts, base + rel) for ts, rel in struct.iter_unpack(">qi", raw)]


def read_txn_index(path):
    """``.txnindex``: 34-byte entries (version int16 0, producer id, first offset, last offset, LSO)."""
    raw = open(path, "rb").read()
    assert len(raw) % 34 == 0
    out = []
    for version, pid, first, last, lso in struct.iter_unpack(">hqqqq", raw):
        assert version == 0
        out.append((pid, first, last, lso))
    return out


def parse_log(raw):
    """Yield dicts per entry: position, magic, base/last offset, max timestamp, records [(offset, ts, value)]."""
    pos = 0
    while len(raw) - pos > 17:
        offset, size = struct.unpack_from(">qi", raw, pos)
        assert size >= 14
        end = pos + 12 + size
        assert end <= len(raw)
        magic = raw[pos + 16]
        entry = {"position": pos, "magic": magic, "size": 12 + size}
        if magic == 2:
            (epoch, _m, crc, attrs, last_delta, base_ts, max_ts, pid, pepoch, bseq,
             count) = struct.unpack_from(">ibIhiqqqhii", raw, pos + 12)
            assert crc == crc32c(raw[pos + 21:end]), "v2 CRC-32C covers attributes..end"
            entry.update(base_offset=offset, last_offset=offset + last_delta, max_timestamp=max_ts,
                         leader_epoch=epoch, attributes=attrs, count=count, producer_id=pid,
                         producer_epoch=pepoch, base_sequence=bseq, is_transactional=bool(attrs & 0x10),
                         is_control=bool(attrs & 0x20))
            payload = raw[pos + 61:end]
            codec = attrs & 7
            if codec == 1:
                payload = zlib.decompress(payload, 16 + zlib.MAX_WBITS)
            else:
                assert codec == 0
            recs, keys, p = [], [], 0
            for _ in range(count):
                length, p = read_zigzag(payload, p)
                stop = p + length
                p += 1  # attributes
                ts_delta, p = read_zigzag(payload, p)
                off_delta, p = read_zigzag(payload, p)
                klen, p = read_zigzag(payload, p)
                keys.append(payload[p:p + klen] if klen >= 0 else None)
                p += max(klen, 0)
                vlen, p = read_zigzag(payload, p)
                value = payload[p:p + vlen] if vlen >= 0 else None
                ts = max_ts if attrs & 0x08 else base_ts + ts_delta
                recs.append((offset + off_delta, ts, value))
                p = stop
            assert p == len(payload)
            entry["records"] = recs
            entry["keys"] = keys
            if attrs & 0x20:
                # control batch: one record, key (version int16 0, type int16 0 ABORT / 1 COMMIT),
                # value (version int16 0, coordinator epoch int32); transactional, base sequence -1
                assert count == 1 and attrs & 0x10 and bseq == -1
                kver, ctype = struct.unpack(">hh", keys[0])
                vver, coord = struct.unpack(">hi", recs[0][2])
                assert kver == 0 and vver == 0 and ctype in (0, 1)
                entry["marker"] = ("COMMIT" if ctype == 1 else "ABORT", coord)
        else:
            crc, = struct.unpack_from(">I", raw, pos + 12)
            assert crc == zlib.crc32(raw[pos + 16:end]) & 0xFFFFFFFF, "legacy CRC-32 covers magic..end"
            attrs = raw[pos + 17]
            ts = struct.unpack_from(">q", raw, pos + 18)[0] if magic == 1 else -1
            entry.update(base_offset=offset, last_offset=offset, max_timestamp=ts, attributes=attrs,
                         records=[(offset, ts, None)])
        yield entry
        pos = end
    assert pos == len(raw)


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def written(tmp_path):
    """A closed, rolled log with varied appends."""
    cfg = topic_config(segment_bytes=1500, index_interval_bytes=300)
    d = str(tmp_path / "fmt-0")
    log = PartitionLog.create(d, cfg, topic="fmt", partition=0, now_ms=NOW_MS)
    appended = []
    stamps = [NOW_MS + (i * 37) % 50 for i in range(120)]
    i = 0
    while i < len(stamps):
        n = 1 + i % 4
        chunk = stamps[i:i + n]
        codec = codecs.GZIP if i % 3 == 0 else codecs.NONE
        r = log.append(batch(chunk, compression=codec, value_size=20), now_ms=NOW_MS, leader_epoch=i % 2)
        appended.append((r.first_offset, r.last_offset, chunk))
        i += n
    log.close()
    return d, appended, stamps


def segment_bases(d):
    return sorted(int(n[:20]) for n in os.listdir(d) if n.endswith(".log"))


def segment_logs(d):
    """``(base offset, .log bytes, parsed entries)`` of every segment in ``d``, in offset order."""
    for base in segment_bases(d):
        with open(os.path.join(d, f"{base:020d}.log"), "rb") as fh:
            raw = fh.read()
        yield base, raw, list(parse_log(raw))


def test_segment_file_names_are_20_digit_base_offsets(written):
    d, _, _ = written
    names = os.listdir(d)
    for n in names:
        if n.endswith((".log", ".index", ".timeindex", ".snapshot")):
            assert re.fullmatch(r"\d{20}\.(log|index|timeindex|snapshot)", n), n
    assert segment_bases(d)[0] == 0 and len(segment_bases(d)) > 2


def test_log_files_parse_with_independent_reader_and_kafka_python(written):
    d, appended, stamps = written
    seen = []
    for base, raw, entries in segment_logs(d):
        assert entries[0]["base_offset"] == base
        for e in entries:
            seen.extend((o, ts) for o, ts, _ in e["records"])
        # kafka-python's reader agrees record by record
        kp = []
        records = MemoryRecords(raw)
        while records.has_next():
            b = records.next_batch()
            kp.extend((r.offset, r.timestamp) for r in b)
        assert kp == [(o, ts) for e in entries for o, ts, _ in e["records"]]
    assert seen == list(enumerate(stamps))


def test_offset_index_follows_kafka_rules(written):
    """Entries name the last offset of an append and point at its start; first append never indexed."""
    d, appended, _ = written
    for base, _raw, entries in segment_logs(d):
        index = read_offset_index(os.path.join(d, f"{base:020d}.index"), base)
        # replay §4.1 over the appends of this segment (one batch per append here)
        expected, since = [], 0
        for j, e in enumerate(entries):
            if j > 0 and since > 300:
                expected.append((e["last_offset"], e["position"]))
                since = 0
            since += e["size"]
        assert index == expected
        assert [o for o, _ in index] == sorted(set(o for o, _ in index))


def test_time_index_follows_kafka_rules(written):
    d, _, _ = written
    for base, _raw, entries in segment_logs(d):
        index = read_time_index(os.path.join(d, f"{base:020d}.timeindex"), base)
        expected, since = [], 0
        max_ts, max_off = -1, base
        for j, e in enumerate(entries):
            if e["max_timestamp"] > max_ts:
                max_ts, max_off = e["max_timestamp"], e["last_offset"]
            if j > 0 and since > 300:
                if not expected or max_ts > expected[-1][0]:
                    expected.append((max_ts, max_off))
                since = 0
            since += e["size"]
        if not expected or max_ts > expected[-1][0]:
            expected.append((max_ts, max_off))   # final entry at roll/close
        assert index == expected
        # the last entry holds the segment's true max timestamp
        assert index[-1][0] == max(e["max_timestamp"] for e in entries)


def test_indexes_are_trimmed_after_close(written):
    d, _, _ = written
    for base in segment_bases(d):
        n_oi = len(read_offset_index(os.path.join(d, f"{base:020d}.index"), base))
        assert os.path.getsize(os.path.join(d, f"{base:020d}.index")) == 8 * n_oi


def test_leader_epoch_and_log_append_time_layout(tmp_path):
    cfg = topic_config(message_timestamp_type="LogAppendTime")
    log = PartitionLog.create(str(tmp_path / "lat-0"), cfg, topic="lat", partition=0, now_ms=NOW_MS)
    log.append(batch([5, 6, 7]), now_ms=NOW_MS + 9, leader_epoch=4)
    log.close()
    raw = open(os.path.join(str(tmp_path / "lat-0"), f"{0:020d}.log"), "rb").read()
    (entry,) = list(parse_log(raw))
    assert entry["leader_epoch"] == 4
    assert entry["attributes"] & 0x08
    assert entry["max_timestamp"] == NOW_MS + 9
    assert [ts for _, ts, _ in entry["records"]] == [NOW_MS + 9] * 3
    kp = [r.timestamp for r in MemoryRecords(raw).next_batch()]
    assert kp == [NOW_MS + 9] * 3


def test_legacy_v1_topic_layout(tmp_path):
    cfg = topic_config(message_format_version="0.10.2", index_interval_bytes=0)
    d = str(tmp_path / "v1-0")
    log = PartitionLog.create(d, cfg, topic="v1", partition=0, now_ms=NOW_MS)
    log.append(batch([NOW_MS, NOW_MS + 3], magic=2), now_ms=NOW_MS)   # converted down to v1
    log.append(batch([NOW_MS + 1], magic=1), now_ms=NOW_MS)
    log.close()
    raw = open(os.path.join(d, f"{0:020d}.log"), "rb").read()
    entries = list(parse_log(raw))
    assert {e["magic"] for e in entries} == {1}
    assert [(e["last_offset"], e["max_timestamp"]) for e in entries] == [(0, NOW_MS), (1, NOW_MS + 3),
                                                                         (2, NOW_MS + 1)]
    assert read_time_index(os.path.join(d, f"{0:020d}.timeindex"), 0)[-1] == (NOW_MS + 3, 1)


def test_cleaned_segments_parse_with_independent_reader_and_kafka_python(tmp_path):
    """After compaction the segments are still Kafka's format: the independent reader and kafka-python
    accept them, tombstone batches carry the delete-horizon bit, and the indexes follow Kafka's
    per-batch rule of ``LogSegment.append`` (every entry points at a batch start)."""
    from support.cleaner_helpers import append, clean_until_done, compact_log

    from sundial.storage.cleaner_manager import LogCleanerManager
    from sundial.storage.offset_map import SkimpyOffsetMap

    log = compact_log(tmp_path / "c-0", segment_bytes=4000, index_interval_bytes=200)
    for r in range(12):
        for k in range(9):
            value = None if (k == 3 and r == 11) else b"v%d-%d-" % (k, r) + b"x" * 20
            append(log, [(b"k%d" % k, value, NOW_MS + 10 * r + k)], codec=codecs.GZIP if k % 2 else codecs.NONE)
    log.roll(NOW_MS)
    clean_until_done(log, LogCleanerManager([str(tmp_path)]), SkimpyOffsetMap(1 << 12), NOW_MS)
    d = log.dir
    log.close()
    survivors = []
    for base, raw, entries in segment_logs(d):
        kp = []
        records = MemoryRecords(raw) if raw else None
        while records is not None and records.has_next():
            kp.extend((r.offset, r.timestamp) for r in records.next_batch())
        assert kp == [(o, ts) for e in entries for o, ts, _ in e["records"]]
        survivors += [(o, v) for e in entries for o, _, v in e["records"]]
        if not raw and not os.path.exists(os.path.join(d, f"{base:020d}.index")):
            continue                              # the empty active segment never created its indexes
        index = read_offset_index(os.path.join(d, f"{base:020d}.index"), base)
        tindex = read_time_index(os.path.join(d, f"{base:020d}.timeindex"), base)
        expected, texpected, since = [], [], 0
        max_ts, max_off = -1, base
        for e in entries:
            if e["max_timestamp"] > max_ts:
                max_ts, max_off = e["max_timestamp"], e["last_offset"]
            if since > 200:
                expected.append((e["last_offset"], e["position"]))
                if not texpected or max_ts > texpected[-1][0]:
                    texpected.append((max_ts, max_off))
                since = 0
            since += e["size"]
        if max_ts > (texpected[-1][0] if texpected else -1):
            texpected.append((max_ts, max_off))
        assert index == expected and tindex == texpected
        for e in entries:
            if any(v is None for _, _, v in e["records"]):
                assert e["attributes"] & 0x40     # the delete horizon is set on a kept tombstone's batch
    keys_left = len(survivors)
    assert keys_left == 9 and (11 * 9 + 3, None) in survivors


def test_control_batches_and_txnindex_parse_with_independent_reader(tmp_path):
    """Transactional data, COMMIT/ABORT markers and the .txnindex, read without Sundial's parsers;
    the aborted-transaction entries equal what the independent reader derives from the .log."""
    from sundial.records.builder import SimpleRecord, build_records

    cfg = topic_config(segment_bytes=700)
    d = str(tmp_path / "txn-0")
    log = PartitionLog.create(d, cfg, topic="txn", partition=0, now_ms=NOW_MS)
    seqs = {}
    script = [(1, "d"), (2, "d"), (1, "d"), (2, "a"), (3, "d"), (1, "c"), (3, "a"), (2, "d"), (2, "a"), (1, "d"),
              (1, "a")]
    for pid, op in script:
        if op == "d":
            seq = seqs.get(pid, 0)
            recs = [SimpleRecord(NOW_MS, b"k", b"v" * 30) for _ in range(2)]
            log.append(build_records(2, recs, producer_id=pid, producer_epoch=0, base_sequence=seq,
                                     is_transactional=True).buffer, now_ms=NOW_MS)
            seqs[pid] = seq + 2
        else:
            log.append_txn_marker(producer_id=pid, producer_epoch=0, coordinator_epoch=7,
                                  control_type=0 if op == "a" else 1, timestamp_ms=NOW_MS + 1, now_ms=NOW_MS)
    log.close()
    bases = segment_bases(d)
    assert len(bases) > 1
    entries = []
    for _base, raw, segment_entries in segment_logs(d):
        entries.extend(segment_entries)
        kp = []
        records = MemoryRecords(raw)
        while records.has_next():
            b = records.next_batch()
            kp.append((b.base_offset, b.is_control_batch, b.is_transactional))
        assert kp == [(e["base_offset"], e["is_control"], e["is_transactional"]) for e in entries[-len(kp):]]
    # independent derivation of the aborted transactions, then compare with every .txnindex
    open_first, ongoing, expected = {}, {}, {b: [] for b in bases}
    for e in entries:
        pid = e["producer_id"]
        if not e["is_control"]:
            if pid not in open_first:
                open_first[pid] = e["base_offset"]
            continue
        assert e["marker"][1] == 7 and e["max_timestamp"] == NOW_MS + 1
        first = open_first.pop(pid, None)
        if first is not None and e["marker"][0] == "ABORT":
            others = [f for p, f in open_first.items() if p != pid]
            lso = min(others) if others else e["base_offset"] + 1
            seg = max(b for b in bases if b <= e["base_offset"])
            expected[seg].append((pid, first, e["base_offset"], lso))
    for base in bases:
        path = os.path.join(d, f"{base:020d}.txnindex")
        got = read_txn_index(path) if os.path.exists(path) else []
        assert got == expected[base]
    assert sum(len(v) for v in expected.values()) == 4
