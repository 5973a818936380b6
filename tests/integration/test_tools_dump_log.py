"""``sundial dump-log`` on a real daemon's data directory.

Records produced with kafka-python (keys, values, headers, CreateTimes, gzip) must come
out of the dump exactly; the index verification passes on the daemon's files (also
while it runs, on the active segment's pre-allocated indexes) and flags index entries
the test corrupted, with exit code 3.
"""

from __future__ import annotations

import os
import re
import struct
import time

import pytest

from .clients import create_topic
from .conftest import unique_topic
from .test_tools_cli import produce_records, sundial

pytestmark = pytest.mark.integration

_RECORD = re.compile(r"^\| offset: (\d+) CreateTime: (\d+) keySize: (-?\d+) valueSize: (-?\d+) sequence: (-?\d+) "
                     r"headerKeys: \[([^\]]*)\](?: key: (\S*))? payload: (\S*)(?: headers: \[(.*)\])?$")


def segments(directory: str, suffix: str) -> list[str]:
    return sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(suffix))


def test_dump_matches_produced_records_and_verify_flags_corruption(broker_factory):
    node = broker_factory().start()
    topic = unique_topic("tools-dump")
    create_topic(node.bootstrap, topic, 1, {"segment.bytes": "2000", "index.interval.bytes": "200"})
    now = int(time.time() * 1000)
    rows = []
    for i in range(90):
        headers = [("trace", f"t{i}".encode()), ("n", str(i).encode())] if i % 3 else []
        key = None if i % 7 == 0 else f"key-{i}".encode()
        rows.append((0, now - 600_000 + i * 1000 - (i % 4) * 1500, key, f"value-{i}".encode(), headers))
    metas = produce_records(node.bootstrap, topic, rows[:45], linger_ms=0, batch_size=64)
    metas += produce_records(node.bootstrap, topic, rows[45:], linger_ms=0, batch_size=200, compression_type="gzip")
    expected = {md.offset: row for md, row in zip(metas, rows)}
    pdir = os.path.join(node.data_dir, f"{topic}-0")
    logs = segments(pdir, ".log")
    assert len(logs) >= 3, logs

    # Dump while the daemon runs: reading is safe.
    out = sundial("dump-log", "--files", pdir, "--print-data-log").out
    seen = {}
    for line in out.splitlines():
        if line.startswith("|"):
            m = _RECORD.match(line)
            assert m, line
            seen[int(m.group(1))] = m
    assert sorted(seen) == sorted(expected)
    for offset, (_, ts, key, value, headers) in expected.items():
        m = seen[offset]
        assert int(m.group(2)) == ts
        assert int(m.group(3)) == (-1 if key is None else len(key))
        assert m.group(7) == (None if key is None else key.decode())
        assert m.group(8) == value.decode()
        assert m.group(6) == ",".join(h for h, _ in headers)
        if headers:
            assert m.group(9) == ",".join(f"{h}={v.decode()}" for h, v in headers)
    batch_lines = [line for line in out.splitlines() if line.startswith("baseOffset:")]
    assert any("compresscodec: gzip" in line for line in batch_lines)
    assert all("isvalid: true" in line for line in batch_lines)
    assert [line for line in out.splitlines() if line.startswith("Dumping ")] == [
        f"Dumping {f}" for f in sorted(segments(pdir, ".log") + segments(pdir, ".index") + segments(pdir, ".timeindex"),
                                       key=lambda f: (os.path.basename(f).split(".")[0],
                                                      {"log": 0, "index": 1, "timeindex": 2}[f.rsplit(".", 1)[1]]))]

    live = sundial("dump-log", "--files", pdir, "--verify-index-only", check=False)
    assert live.code == 0, live.err
    assert sundial("dump-log", "--files", pdir, "--index-sanity-check").code == 0

    assert node.stop() == 0
    assert sundial("dump-log", "--files", pdir, "--verify-index-only").code == 0

    # Corrupt one offset-index entry and one time-index entry of the first segment.
    index, tindex = segments(pdir, ".index")[0], segments(pdir, ".timeindex")[0]
    raw = bytearray(open(index, "rb").read())
    assert len(raw) >= 16
    rel, pos = struct.unpack_from(">ii", raw, 8)
    struct.pack_into(">ii", raw, 8, rel, pos + 3)
    open(index, "wb").write(bytes(raw))
    result = sundial("dump-log", "--files", index, "--verify-index-only", check=False)
    assert result.code == 3
    assert f"does not point at the start of a batch: offset {int(os.path.basename(index)[:20]) + rel}" in result.err

    raw = bytearray(open(tindex, "rb").read())
    ts, trel = struct.unpack_from(">qi", raw, 0)
    struct.pack_into(">qi", raw, 0, ts - 1, trel)
    open(tindex, "wb").write(bytes(raw))
    result = sundial("dump-log", "--files", tindex, check=False)
    assert result.code == 3
    assert f"Found timestamp mismatch in :{tindex}" in result.err
    assert f"  Index timestamp: {ts - 1}, log timestamp: {ts}" in result.err
    # the entries are still printed (dump mode), like kafka-dump-log.sh
    assert f"timestamp: {ts - 1} offset: {int(os.path.basename(tindex)[:20]) + trel}" in result.out
