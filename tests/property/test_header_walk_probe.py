"""Hypothesis: a header walk given a page-cache probe (:func:`records.framing.walk_headers`).

For random batch sizes, start batches, chunk sizes and sets of "cold" pages (a model of the
page cache, the probe's only source), the walk either yields exactly what the plain walk
yields, or yields a prefix of it and then raises :class:`NotInPageCache` naming the range
of the probe's first refusal, so that nothing the probe refused was read.
"""

import os
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

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
