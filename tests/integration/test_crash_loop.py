"""kill -9 under load, a few cycles in CI: zero lost or duplicated acknowledged records.

Runs the harness of ``benchmarks/crash_loop.py`` (see its docstring for every check:
acknowledged records exactly once at their acknowledged offsets, contiguous offsets,
offsetsForTimes against brute force, committed offsets, ``dump-log --verify-index-only``
after a clean stop). ``SUNDIAL_CRASH_CYCLES`` sets the number of cycles (default 5); the
50-cycle run is ``python benchmarks/crash_loop.py``.
"""

from __future__ import annotations

import io
import os

import crash_loop


def test_kill_9_under_load_loses_and_duplicates_nothing(tmp_path):
    cycles = int(os.environ.get("SUNDIAL_CRASH_CYCLES", "5"))
    seed = int(os.environ.get("SUNDIAL_CRASH_SEED", "1234"))
    out = io.StringIO()
    results = crash_loop.run(cycles, seed=seed, workdir=str(tmp_path / "crash"), verify_every=cycles // 2 or 1,
                             out=out)
    print("\n" + out.getvalue())
    assert len(results) == cycles, out.getvalue()
    assert all(not r.problems for r in results), out.getvalue()
    assert sum(r.index_verified for r in results) >= 2
    assert results[-1].acked > 0 and results[-1].records >= results[-1].acked
