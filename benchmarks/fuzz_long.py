"""Long fuzzing run through the real connection path (10^6 frames by default).

    python benchmarks/fuzz_long.py                      # 1,000,000 frames, random seed
    python benchmarks/fuzz_long.py --frames 200000 --seed 42 --campaigns 4

Each campaign starts a fresh in-process broker (``tests/integration/connection_fuzz.py``:
real BrokerServer, storage in a temporary directory, real Connection objects with an
in-memory transport) and feeds it mutated frames; a finding (an internal exception, a
malformed or out-of-order response stream, a broker that stops answering) stops the
run with the seed and the traceback. Splitting the frames over several campaigns
keeps each broker's data directory small. Prints progress, one line per campaign and
a total, with the command used.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import random
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # a program, not a test: the tests' packages (integration, support)

from integration import connection_fuzz  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--campaigns", type=int, default=5)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(f"command: python benchmarks/fuzz_long.py {' '.join(sys.argv[1:])}  (seed {seed})", flush=True)
    per = -(-args.frames // args.campaigns)
    total = 0
    connections = 0
    responses = 0
    t0 = time.perf_counter()
    for i in range(args.campaigns):
        stats = asyncio.run(connection_fuzz.run_campaign(per, seed + i, progress_every=max(per // 5, 1000)))
        print(stats.line(), flush=True)
        total += stats.frames
        connections += stats.connections
        responses += stats.responses
        if stats.findings:
            print(f"FINDING (seed {stats.seed}):\n" + "\n".join(stats.findings[:3]), flush=True)
            return 1
    elapsed = time.perf_counter() - t0
    print(f"total: {total:,} frames, {connections:,} connections, {responses:,} responses, 0 findings, "
          f"{elapsed:.0f}s ({total / elapsed:,.0f} frames/s), python {sys.version.split()[0]}, pid {os.getpid()}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
