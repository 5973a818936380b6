"""Hypothesis: a header walk given a page-cache probe (:func:`records.framing.walk_headers`).

For random batch sizes, start batches, chunk sizes and sets of "cold" pages (a model of the
page cache, the probe's only source), the walk either yields exactly what the plain walk
yields, or yields a prefix of it and then raises :class:`NotInPageCache` naming the range
of the probe's first refusal, so that nothing the probe refused was read.
"""

import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.cleaner_helpers import append, compact_log
from support.log_helpers import NOW_MS

from sundial.records.builder import SimpleRecord, build_records
from sundial.records.framing import NotInPageCache, walk_headers

MODEL_PAGE_BYTES = 512


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=25),
       start=st.integers(0, 24),
       chunk_bytes=st.sampled_from([61, 512, 4096, 16 * 1024]),
       cold=st.sets(st.integers(0, 160), max_size=20))
def test_a_probed_walk_is_the_plain_walk_or_stops_at_the_first_refused_range(sizes, start, chunk_bytes, cold):
    data = b""
    positions = []
    offset = 0
    for i, size in enumerate(sizes):
        batch = build_records(2, [SimpleRecord(1_000 + i, None, b"x" * size)], base_offset=offset)
        positions.append(len(data))
        data += batch.buffer
        offset = batch.last_offset + 1
    begin = positions[min(start, len(positions) - 1)]
    asked: list[tuple[int, int, bool]] = []

    def probe(fd, position, size):
        pages = range(position // MODEL_PAGE_BYTES, (position + size - 1) // MODEL_PAGE_BYTES + 1)
        resident = not any(p in cold for p in pages)
        asked.append((position, size, resident))
        return resident

    fd, path = tempfile.mkstemp()
    try:
        os.write(fd, data)
        plain = list(walk_headers(fd, begin, len(data), chunk_bytes))
        seen = []
        try:
            for header in walk_headers(fd, begin, len(data), chunk_bytes, probe=probe):
                seen.append(header)
        except NotInPageCache as miss:
            assert asked and not asked[-1][2], "raised although the probe said resident"
            assert [r for _, _, r in asked[:-1]] == [True] * (len(asked) - 1)
            assert (miss.fd, miss.position, miss.size) == (fd, asked[-1][0], asked[-1][1])
            assert seen == plain[:len(seen)]
        else:
            assert seen == plain
            assert all(r for _, _, r in asked)
    finally:
        os.close(fd)
        os.unlink(path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(st.integers(0, 5_000), min_size=1, max_size=6), min_size=1, max_size=30),
       rolls=st.sets(st.integers(0, 29), max_size=4),
       value_bytes=st.sampled_from([10, 700, 3000]),
       target=st.integers(-10, 5_010),
       cold=st.sets(st.integers(0, 200), max_size=40))
def test_a_probed_timestamp_search_refuses_cold_ranges_and_then_answers_as_the_plain_one(
        tmp_path_factory, batches, rolls, value_bytes, target, cold):
    """:meth:`PartitionLog.fetch_offset_by_timestamp` with a page-cache probe (a model: pages of
    every segment file, some cold): it raises :class:`NotInPageCache` only for a range the probe
    refused; once each refused range is read in (made resident in the model) the search
    answers, and the answer is the plain search's and brute force's (the first record at or
    after the target)."""
    log = compact_log(tmp_path_factory.mktemp("search") / "t-0", index_interval_bytes=512)
    try:
        records = []
        for i, timestamps in enumerate(batches):
            if i in rolls and records:
                log.roll(NOW_MS)
            recs = [(b"k%d" % len(records), b"v" * value_bytes, NOW_MS - 10_000 + ts) for ts in timestamps]
            append(log, recs)
            records += [(len(records) + j, ts) for j, (_, _, ts) in enumerate(recs)]
        t_ms = NOW_MS - 10_000 + target
        want = next(((off, ts) for off, ts in records if ts >= t_ms), None)
        warmed: set[tuple[int, int]] = set()
        refused: list[tuple[int, int, int]] = []

        def probe(fd, position, size):
            pages = range(position // MODEL_PAGE_BYTES, (position + size - 1) // MODEL_PAGE_BYTES + 1)
            resident = all(p not in cold or (fd, p) in warmed for p in pages)
            if not resident:
                refused.append((fd, position, size))
            return resident

        for _ in range(1000):
            try:
                found = log.fetch_offset_by_timestamp(t_ms, probe=probe)
                break
            except NotInPageCache as miss:
                assert refused and refused[-1] == (miss.fd, miss.position, miss.size)
                warmed.update((miss.fd, p) for p in range(miss.position // MODEL_PAGE_BYTES,
                                                           (miss.position + miss.size - 1) // MODEL_PAGE_BYTES + 1))
        else:
            raise AssertionError("the search kept refusing ranges already read in")
        plain = log.fetch_offset_by_timestamp(t_ms)
        assert found == plain
        assert (None if found is None else (found.offset, found.timestamp_ms)) == want
    finally:
        log.close_handles()
