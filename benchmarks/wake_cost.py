"""What a wake-up costs on this host: the floor under every request a broker answers at a low rate.

    python benchmarks/wake_cost.py             # 3 repetitions of each measurement
    python benchmarks/wake_cost.py --repeat 5

A broker answering a request that arrives after an idle gap pays twice: the wake-up
itself (the thread leaves its sleep, the kernel switches to it) and the work done on a
cold CPU (caches and predictors refilled after whatever ran there meanwhile). In a small
VM both are large, and they are paid per request whatever the broker's language, so a
per-request CPU figure taken at 160 requests/s is not the same quantity as one taken back
to back. This script measures them with nothing but the standard library:

* ``sleep``: CPU (user + system, this process) per ``time.sleep(gap)`` for gaps of
  0.2, 1 and 6 ms (6 ms is the gap between the Produce requests of the 100 B lz4 run);
* ``work``: the same pure-Python work (building an 800-entry dict) back to back and after
  each of those gaps: wall time of the work alone, and CPU per iteration;
* ``ping-pong``: two threads handing a token back and forth through eventfds (the shape
  of a hand-off to an fsync thread and back): CPU and wall time per round trip.

Each line is printed as it is measured; the table gives the median and [min-max].
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import threading
import time

GAPS_S = (0.0002, 0.001, 0.006)


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def sleep_cost(gap_s: float, seconds: float = 1.0) -> float:
    n = max(50, int(seconds / gap_s))
    c0 = cpu_s()
    for _ in range(n):
        time.sleep(gap_s)
    return (cpu_s() - c0) / n * 1e6


def work() -> int:
    d = {}
    for i in range(800):
        d[i] = str(i)
    return len(d)


def work_cost(gap_s: float, n: int = 600) -> tuple[float, float]:
    """(wall us of the work alone, CPU us per iteration, sleep included) after ``gap_s`` idle."""
    wall = 0.0
    c0 = cpu_s()
    for _ in range(n):
        if gap_s:
            time.sleep(gap_s)
        t0 = time.perf_counter()
        work()
        wall += time.perf_counter() - t0
    return wall / n * 1e6, (cpu_s() - c0) / n * 1e6


def ping_pong(rounds: int = 20_000) -> tuple[float, float]:
    """(CPU us, wall us) per round trip between two threads through eventfds."""
    to_other, to_me = os.eventfd(0), os.eventfd(0)

    def other() -> None:
        for _ in range(rounds):
            os.eventfd_read(to_other)
            os.eventfd_write(to_me, 1)

    thread = threading.Thread(target=other)
    thread.start()
    c0, t0 = cpu_s(), time.perf_counter()
    for _ in range(rounds):
        os.eventfd_write(to_other, 1)
        os.eventfd_read(to_me)
    thread.join()
    cpu_us, wall_us = (cpu_s() - c0) / rounds * 1e6, (time.perf_counter() - t0) / rounds * 1e6
    os.close(to_other)
    os.close(to_me)
    return cpu_us, wall_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="repetitions of each measurement (default 3)")
    args = parser.parse_args()
    print("command: python benchmarks/wake_cost.py " + " ".join(sys.argv[1:]))
    print("load average (1, 5, 15 min): %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    rows: dict[str, list[float]] = {}

    def note(name: str, value: float) -> None:
        rows.setdefault(name, []).append(value)
        print(f"[rep {rep + 1}] {name}: {value:.1f}", flush=True)

    for rep in range(args.repeat):
        for gap in GAPS_S:
            note(f"sleep {gap * 1e3:g} ms: CPU us per wake-up", sleep_cost(gap))
        wall, cpu = work_cost(0.0)
        note("work back to back: wall us", wall)
        note("work back to back: CPU us per iteration", cpu)
        for gap in GAPS_S:
            wall, cpu = work_cost(gap)
            note(f"work after {gap * 1e3:g} ms idle: wall us", wall)
            note(f"work after {gap * 1e3:g} ms idle: CPU us per iteration (sleep included)", cpu)
        cpu, wall = ping_pong()
        note("thread ping-pong: CPU us per round trip", cpu)
        note("thread ping-pong: wall us per round trip", wall)
    print()
    width = max(len(name) for name in rows)
    print(f"{'measurement':<{width}}  median [min-max]")
    for name, values in rows.items():
        print(f"{name:<{width}}  {statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]")
    print("load average (1, 5, 15 min): %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
