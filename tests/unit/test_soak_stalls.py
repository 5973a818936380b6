"""The soak's loop watchdog (benchmarks/loop_watchdog) and how the summary classes its stalls.

The watchdog runs in a child interpreter whose loop is made to stall on purpose: a callback
that sleeps (the loop blocked in a system call), a thread that holds the GIL in one long C
call (the loop waits for the GIL: the report must name that thread) and a full garbage
collection on the loop (the report must say it ran). The classes are checked
on lines built by hand.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

from soak_checks import loop_stalls
from soak_report import stall_class, stall_phase

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"

CHILD = textwrap.dedent("""
    import asyncio, gc, threading, time, uvloop

    go, hogged, finish = threading.Event(), threading.Event(), threading.Event()

    def hog():
        go.wait()
        sum(range(60_000_000))          # one C call: the GIL is not released until it returns
        hogged.set()
        finish.wait()                   # alive until the watchdog has reported (it reads its times)

    def sleepy():
        time.sleep(0.3)                 # the loop blocked in clock_nanosleep

    def collecting():
        junk = [[i] for i in range(1_000_000)]   # a million objects the collector tracks
        gc.collect()                    # a full collection on the loop
        return len(junk)

    async def main():
        t = threading.Thread(target=hog, name="gil-hog")
        t.start()
        await asyncio.sleep(1.0)        # the watchdog lists the threads twice a second
        sleepy()
        await asyncio.sleep(0.3)
        go.set()
        while not hogged.is_set():
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)        # the watchdog reports within a tick once the loop runs again
        finish.set()
        t.join()
        collecting()
        await asyncio.sleep(0.3)

    uvloop.new_event_loop().run_until_complete(main())
""")


def test_the_watchdog_names_a_blocking_call_and_the_thread_holding_the_gil(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(BENCH / "loop_watchdog"))
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    log = tmp_path / "child.log"
    log.write_text(done.stderr)
    stalls = loop_stalls([str(log)])
    slept = [s for s in stalls if "sleepy" in s["stack"]]
    assert slept and slept[0]["kernel"].startswith("clock_nanosleep"), stalls
    held = [s for s in stalls if s["holder"] == "gil-hog"]
    assert held, stalls
    assert all(s["at"] > 0 for s in stalls)
    collected = [s for s in stalls if s["gc_gen"] == 2 and s["gc_ms"] > 0]
    assert collected, stalls


def _line(**kv) -> dict:
    base = {"ms": 100.0, "at": 0.0, "cpu_ms": 0.0, "runq_ms": 0.0, "steal_ms": 0.0, "major_faults": 0, "kernel": "?", "stack": "?",
            "holder": "-", "holder_cpu_ms": 0.0, "holder_runq_ms": 0.0, "holder_kernel": "?",
            "others_in_syscalls": "-", "holder_stack": "-"}
    base.update(kv)
    return base


def test_stall_classes():
    assert stall_class(_line(runq_ms=60)).startswith("waiting for a CPU (host)")
    assert stall_class(_line(runq_ms=20, steal_ms=40)).startswith("waiting for a CPU (host)")
    assert stall_class(_line(cpu_ms=70)) == "computing"
    assert stall_class(_line(kernel="fsync/folio_wait_bit", holder_runq_ms=90)) == "blocked"   # its own system call
    assert stall_class(_line(kernel="futex/futex_do_wait", holder_runq_ms=90)).startswith("waiting for a CPU (host)")
    assert stall_class(_line(kernel="running", holder_cpu_ms=90)) == "GIL held by a computing thread"
    assert stall_class(_line(kernel="futex/futex_do_wait", holder_runq_ms=10, holder_cpu_ms=10)) == "blocked"
    assert stall_class(_line(major_faults=3)) == "blocked: page faults read from the disk"
    assert stall_class(_line(cpu_ms=90, gc_ms=60, gc_gen=2)) == "computing: garbage collection (generation 2)"
    assert stall_class(_line(runq_ms=60, gc_ms=60, gc_gen=2)).startswith("waiting for a CPU (host)")


def test_stall_phases():
    serving = [[100.0, 200.0], [210.0, None]]
    assert stall_phase(_line(at=99.0), serving, 1) == "start-up"
    assert stall_phase(_line(at=150.0), serving, 1) == "serving"
    assert stall_phase(_line(at=200.5), serving, 1) == "shutdown"
    assert stall_phase(_line(at=205.0), serving, 2) == "start-up"
    assert stall_phase(_line(at=500.0), serving, 2) == "serving"
    assert stall_phase(_line(at=0.0), serving, 2) == "serving"   # a line without a time
