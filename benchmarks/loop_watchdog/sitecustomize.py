"""Event-loop stall watchdog for a daemon under test (``benchmarks/soak.py --loop-watchdog``).

Not part of the broker: the soak puts this directory on the daemon's ``PYTHONPATH``, so
Python imports this module at start-up. It wraps ``uvloop.new_event_loop`` and
``asyncio.new_event_loop`` so that the first loop created schedules a heartbeat every
``HEARTBEAT_S``; a thread checks the heartbeat just as often. When it is more than
``STALL_S`` late the loop thread is stuck in one callback: the thread samples the loop
thread's Python stack every ``HEARTBEAT_S`` until the heartbeat comes back, then writes
one line to stderr (the daemon's log)::

    LOOP_STALL ms=<stall> cpu_ms=<on a CPU> runq_ms=<waiting for a CPU> samples=<n> kernel=<syscall>/<wchan> stack=<frames>

``cpu_ms`` and ``runq_ms`` are the loop thread's time on a CPU and waiting in the run queue
during the stall (/proc/self/task/<tid>/schedstat): the rest it was blocked (a system
call, a lock). ``runq_ms`` close to ``ms`` means the host starved the daemon; ``cpu_ms``
close to it means the daemon was computing. ``kernel`` is the most common system call
the thread was in (``running`` when on a CPU; from /proc/self/task/<tid>/syscall, x86-64
numbers) with the kernel function it waited in (``wchan``). The stack is the most common
Python stack, innermost frames, oldest first, separated by " > " (the import machinery's
frozen frames left out); a stack ending in the event loop's own frame means the time went
inside the loop's C code (a callback of its own, or a system call it made).
"""

import asyncio
import collections
import os
import sys
import threading
import time
import traceback

HEARTBEAT_S = 0.01
STALL_S = 0.05
_beat = [0.0]
_started = [False]


def _heartbeat(loop) -> None:
    _beat[0] = time.monotonic()
    loop.call_later(HEARTBEAT_S, _heartbeat, loop)


def _schedstat_ms(tid: int) -> tuple[float, float]:
    """(ms on a CPU, ms waiting for a CPU) of thread ``tid`` so far."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as fh:
            on_cpu, runq = fh.read().split()[:2]
        return int(on_cpu) / 1e6, int(runq) / 1e6
    except (OSError, ValueError):
        return 0.0, 0.0


_SYSCALLS = {0: "read", 1: "write", 2: "open", 3: "close", 4: "stat", 5: "fstat", 7: "poll", 8: "lseek",
             9: "mmap", 11: "munmap", 17: "pread64", 18: "pwrite64", 20: "writev", 23: "select",
             26: "msync", 28: "madvise", 40: "sendfile", 44: "sendto", 45: "recvfrom", 46: "sendmsg",
             47: "recvmsg", 74: "fsync", 75: "fdatasync", 76: "truncate", 77: "ftruncate", 82: "rename",
             83: "mkdir", 84: "rmdir", 87: "unlink", 202: "futex", 217: "getdents64", 230: "clock_nanosleep",
             232: "epoll_wait", 257: "openat", 262: "newfstatat", 263: "unlinkat", 264: "renameat",
             281: "epoll_pwait", 285: "fallocate", 316: "renameat2", 332: "statx"}


def _kernel_state(tid: int) -> str:
    try:
        with open(f"/proc/self/task/{tid}/syscall") as fh:
            head = fh.read().split()[0]
        with open(f"/proc/self/task/{tid}/wchan") as fh:
            wchan = fh.read().strip() or "-"
    except (OSError, IndexError):
        return "?"
    if head == "running":
        return "running"
    try:
        return f"{_SYSCALLS.get(int(head), 'syscall' + head)}/{wchan}"
    except ValueError:
        return f"{head}/{wchan}"


def _stack(frame) -> str:
    frames = [f for f in traceback.extract_stack(frame) if not f.filename.startswith("<frozen")][-7:]
    return " > ".join(f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}" for f in frames)


def _watch(ident: int, tid: int) -> None:
    while True:
        time.sleep(HEARTBEAT_S)
        beat = _beat[0]
        if not beat or time.monotonic() - beat < STALL_S:
            continue
        cpu0, runq0 = _schedstat_ms(tid)
        stacks = collections.Counter()
        kernel = collections.Counter()
        while _beat[0] == beat:
            frame = sys._current_frames().get(ident)
            if frame is None:
                return
            stacks[_stack(frame)] += 1
            kernel[_kernel_state(tid)] += 1
            time.sleep(HEARTBEAT_S)
        stall_ms = (_beat[0] - beat - HEARTBEAT_S) * 1000
        top = stacks.most_common(1)[0][0] if stacks else "?"
        state = kernel.most_common(1)[0][0] if kernel else "?"
        cpu1, runq1 = _schedstat_ms(tid)
        sys.stderr.write(f"LOOP_STALL ms={stall_ms:.0f} cpu_ms={cpu1 - cpu0:.0f} runq_ms={runq1 - runq0:.0f} "
                         f"samples={sum(stacks.values())} kernel={state} stack={top}\n")
        sys.stderr.flush()


def _wrap(factory):
    def new_event_loop(*args, **kwargs):
        loop = factory(*args, **kwargs)
        if not _started[0]:
            _started[0] = True
            loop.call_soon(_heartbeat, loop)
            threading.Thread(target=_watch, args=(threading.get_ident(), threading.get_native_id()),
                             name="loop-watchdog", daemon=True).start()
        return loop
    return new_event_loop


asyncio.new_event_loop = _wrap(asyncio.new_event_loop)
try:
    import uvloop

    uvloop.new_event_loop = _wrap(uvloop.new_event_loop)
except ImportError:
    pass
