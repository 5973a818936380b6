"""Event-loop stall watchdog for a daemon under test (``benchmarks/soak.py --loop-watchdog``).

Not part of the broker: the soak puts this directory on the daemon's ``PYTHONPATH``, so
Python imports this module at start-up. It wraps ``uvloop.new_event_loop`` and
``asyncio.new_event_loop`` so that the first loop created schedules a heartbeat every
``HEARTBEAT_S``; a thread checks the heartbeat just as often. When it is more than
``STALL_S`` late the loop thread is stuck in one callback: the thread samples the loop
thread's Python stack every ``HEARTBEAT_S`` until the heartbeat comes back, then writes
one line to stderr (the daemon's log)::

    LOOP_STALL ms=<stall> at=<unix time it began> cpu_ms=<on a CPU> runq_ms=<waiting for a CPU>
        steal_ms=<the hypervisor's> major_faults=<n> samples=<n> kernel=<syscall>/<wchan>
        holder=<thread> holder_cpu_ms=<n> holder_runq_ms=<n> holder_kernel=<syscall>/<wchan>
        others_in_syscalls=<thread>:<syscall>/<wchan>,... stack=<frames> holder_stack=<frames>

(on one line). ``cpu_ms`` and ``runq_ms`` are the loop thread's time on a CPU and waiting in
the run queue over the whole stall: the watchdog reads every thread's
/proc/self/task/<tid>/schedstat on each tick (descriptors kept open) and takes the
difference from the last reading before the late heartbeat was due, because it may itself
only notice the stall at its end (it needs the GIL to run). The rest of the stall the loop
thread was blocked: in a system call, or waiting for the GIL or a lock another thread held.
``steal_ms`` is the steal time (/proc/stat) of the CPU the loop thread last ran on over the
same window: a virtual machine's CPU taken by the hypervisor shows in no thread's times.
``major_faults`` counts the loop thread's page faults that read from the disk meanwhile
(a cold page of a memory-mapped index, say): such a wait holds the GIL, so the watchdog
cannot sample it (``samples=0``, ``kernel=?``).
``holder`` is the other thread that was busiest meanwhile (on a CPU or waiting for one),
with its times, its most common system call and kernel wait (sampled like the loop
thread's) and its most common Python stack; ``others_in_syscalls`` lists the other threads
seen mostly in a system call that is not an idle wait (an fsync thread in ``fdatasync``, say): when the loop waited for the GIL or a lock,
that thread held it, and its ``holder_runq_ms`` tells whether it was itself kept off the CPU
by the host. ``runq_ms`` close to ``ms`` means the host starved the daemon; ``cpu_ms`` close
to it means the daemon was computing. ``kernel`` is the most common system call the loop
thread was in (``running`` when on a CPU; from /proc/self/task/<tid>/syscall, x86-64
numbers) with the kernel function it waited in (``wchan``). The stack is the most common
Python stack, innermost frames, oldest first, separated by " > " (the import machinery's
frozen frames left out); a stack ending in the event loop's own frame means the time went
inside the loop's C code (a callback of its own, a system call it made, or waiting for the GIL).
``gc_ms`` is the time the cyclic garbage collector ran during the stall (any thread: it holds
the GIL, so neither the loop nor the watchdog runs meanwhile, which leaves ``samples=0``) and
``gc_gen`` the oldest generation it collected then (-1 when it did not run).
"""

import asyncio
import collections
import gc
import os
import sys
import threading
import time
import traceback

HEARTBEAT_S = 0.01
STALL_S = 0.05
_beat = [0.0]
_started = [False]


_late: collections.deque = collections.deque()   # (previous beat, late beat) found by the heartbeat
_collections: collections.deque = collections.deque(maxlen=256)   # (start, end, generation) of recent GCs
_gc_began = [0.0]


def _on_gc(phase: str, info: dict) -> None:
    if phase == "start":
        _gc_began[0] = time.monotonic()
    else:
        _collections.append((_gc_began[0], time.monotonic(), info.get("generation", -1)))


def _gc_during(begin: float, end: float) -> tuple[float, int]:
    """Milliseconds of garbage collection within ``[begin, end]`` and the oldest generation collected."""
    ms, gen = 0.0, -1
    for start, stop, generation in list(_collections):
        overlap = min(stop, end) - max(start, begin)
        if overlap > 0:
            ms += overlap * 1000
            gen = max(gen, generation)
    return ms, gen


def _heartbeat(loop) -> None:
    now = time.monotonic()
    previous = _beat[0]
    if previous and now - previous - HEARTBEAT_S >= STALL_S:
        _late.append((previous, now))   # the watchdog may not have seen it: it needs the GIL too
    _beat[0] = now
    loop.call_later(HEARTBEAT_S, _heartbeat, loop)


_SYSCALLS = {0: "read", 1: "write", 2: "open", 3: "close", 4: "stat", 5: "fstat", 7: "poll", 8: "lseek",
             9: "mmap", 11: "munmap", 17: "pread64", 18: "pwrite64", 20: "writev", 23: "select",
             26: "msync", 28: "madvise", 40: "sendfile", 44: "sendto", 45: "recvfrom", 46: "sendmsg",
             47: "recvmsg", 74: "fsync", 75: "fdatasync", 76: "truncate", 77: "ftruncate", 82: "rename",
             83: "mkdir", 84: "rmdir", 87: "unlink", 202: "futex", 217: "getdents64", 230: "clock_nanosleep",
             232: "epoll_wait", 257: "openat", 262: "newfstatat", 263: "unlinkat", 264: "renameat",
             281: "epoll_pwait", 285: "fallocate", 316: "renameat2", 332: "statx"}


#: System calls a thread waits in when it has nothing to do.
_IDLE_WAITS = ("futex", "epoll_wait", "epoll_pwait", "poll", "select", "clock_nanosleep", "running", "?",
               "recvfrom", "recvmsg", "read")


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


class _Threads:
    """The process's threads' schedstat, read through descriptors kept open (one ``pread`` each)."""

    def __init__(self, skip: int) -> None:
        self.skip = skip          # the watchdog's own thread
        self.fds: dict[int, int] = {}
        self.names: dict[int, str] = {}

    def refresh(self) -> None:
        try:
            tids = {int(t) for t in os.listdir("/proc/self/task")} - {self.skip}
        except OSError:
            return
        for tid in set(self.fds) - tids:
            os.close(self.fds.pop(tid))
            self.names.pop(tid, None)
        for tid in tids - set(self.fds):
            try:
                self.fds[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
            except OSError:
                continue
        python_names = {t.native_id: t.name for t in threading.enumerate()}
        for tid in self.fds:
            name = python_names.get(tid)
            if name is None:
                try:
                    with open(f"/proc/self/task/{tid}/comm") as fh:
                        name = fh.read().strip()
                except OSError:
                    name = str(tid)
            self.names[tid] = name

    def snap(self) -> dict[int, bytes]:
        out = {}
        for tid, fd in self.fds.items():
            try:
                out[tid] = os.pread(fd, 64, 0)
            except OSError:
                pass
        return out


_TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


class _ProcFile:
    """A /proc file opened once and read again from its start on each ``snap()`` (up to ``size``
    bytes; empty where it could not be opened or read)."""

    def __init__(self, path: str, size: int) -> None:
        self.size = size
        try:
            self.fd = os.open(path, os.O_RDONLY)
        except OSError:
            self.fd = -1

    def snap(self) -> bytes:
        try:
            return os.pread(self.fd, self.size, 0) if self.fd >= 0 else b""
        except OSError:
            return b""


class _Steal(_ProcFile):
    """Per-CPU steal time (/proc/stat): the time the hypervisor ran something else while this
    virtual CPU had work, which no thread's schedstat shows."""

    def __init__(self) -> None:
        super().__init__("/proc/stat", 4096)

    @staticmethod
    def per_cpu_ms(raw: bytes) -> dict[int, float]:
        out = {}
        for line in raw.split(b"\n"):
            if line.startswith(b"cpu") and line[3:4].isdigit():
                fields = line.split()
                if len(fields) > 8:
                    out[int(fields[0][3:])] = int(fields[8]) * _TICK_MS
        return out


class _LoopStat(_ProcFile):
    """The loop thread's /proc stat line: major page faults so far and the CPU it last ran on."""

    def __init__(self, tid: int) -> None:
        super().__init__(f"/proc/self/task/{tid}/stat", 1024)

    @staticmethod
    def fields(raw: bytes) -> list[bytes]:
        return raw.rsplit(b")", 1)[1].split() if b")" in raw else []

    @classmethod
    def major_faults(cls, raw: bytes) -> int:
        f = cls.fields(raw)
        return int(f[9]) if len(f) > 9 else 0

    @classmethod
    def cpu(cls, raw: bytes) -> int:
        f = cls.fields(raw)
        return int(f[36]) if len(f) > 36 else -1


def _ms_pair(raw: bytes) -> tuple[float, float]:
    on_cpu, runq = raw.split()[:2]
    return int(on_cpu) / 1e6, int(runq) / 1e6


def _deltas(before: dict[int, bytes], after: dict[int, bytes]) -> dict[int, tuple[float, float]]:
    """tid -> (ms on a CPU, ms waiting for one) between two snapshots."""
    out = {}
    for tid, raw in after.items():
        if tid in before:
            (c0, r0), (c1, r1) = _ms_pair(before[tid]), _ms_pair(raw)
            out[tid] = (c1 - c0, r1 - r0)
    return out


def _watch(ident: int, tid: int) -> None:
    me = threading.get_ident()
    threads = _Threads(threading.get_native_id())
    threads.refresh()
    steal = _Steal()
    loop_stat = _LoopStat(tid)
    history: collections.deque = collections.deque(maxlen=64)   # (monotonic time, snapshot)
    ticks = 0
    sampled_beat = None
    stacks = kernel = others = others_kernel = None
    while True:
        time.sleep(HEARTBEAT_S)
        ticks += 1
        if ticks % 50 == 0:   # threads come and go (executors start theirs lazily)
            threads.refresh()
        beat = _beat[0]
        if beat and time.monotonic() - beat >= STALL_S:
            # a stall under way: sample the loop thread (and the others) until the heartbeat is back
            if sampled_beat != beat:
                sampled_beat = beat
                stacks, kernel = collections.Counter(), collections.Counter()
                others = collections.defaultdict(collections.Counter)
                others_kernel = collections.defaultdict(collections.Counter)
            frames = sys._current_frames()
            frame = frames.get(ident)
            if frame is None:
                return
            stacks[_stack(frame)] += 1
            kernel[_kernel_state(tid)] += 1
            for thread_ident, other in frames.items():
                if thread_ident not in (ident, me):
                    others[thread_ident][_stack(other)] += 1
            for other_tid in threads.fds:   # native threads too (fsync), which have no Python stack
                if other_tid != tid:
                    others_kernel[other_tid][_kernel_state(other_tid)] += 1
            continue
        while _late:
            previous, late = _late.popleft()
            if sampled_beat == previous:
                _report(threads, steal, loop_stat, history, tid, previous, late, stacks, kernel, others,
                        others_kernel)
            else:   # over before the watchdog could look (it waited for the GIL too)
                _report(threads, steal, loop_stat, history, tid, previous, late, collections.Counter(),
                        collections.Counter(), {}, {})
        sampled_beat = None
        history.append((time.monotonic(), (threads.snap(), steal.snap(), loop_stat.snap())))


def _report(threads, steal, loop_stat, history, tid, previous, late, stacks, kernel, others, others_kernel) -> None:
    # the last snapshot taken before the heartbeat that came late was due: the whole stall
    before, steal_before, stat_before = next((snap for at, snap in reversed(history) if at <= previous),
                                             history[0][1] if history else ({}, b"", b""))
    after, steal_after, stat_after = threads.snap(), steal.snap(), loop_stat.snap()
    faults = _LoopStat.major_faults(stat_after) - _LoopStat.major_faults(stat_before)
    # steal of the CPU the loop thread last ran on (its timer or its wake-up waited there)
    cpu_before, cpu_after = _Steal.per_cpu_ms(steal_before), _Steal.per_cpu_ms(steal_after)
    where = _LoopStat.cpu(stat_after)
    stolen = cpu_after.get(where, 0.0) - cpu_before.get(where, 0.0)
    stall_ms = (late - previous - HEARTBEAT_S) * 1000
    top = stacks.most_common(1)[0][0] if stacks else "?"
    state = kernel.most_common(1)[0][0] if kernel else "?"
    deltas = _deltas(before, after)
    cpu, runq = deltas.get(tid, (0.0, 0.0))
    # the other thread busiest during the stall (on a CPU or waiting for one): the one that held the
    # GIL, or a lock the loop waited for, when the loop itself was neither running nor runnable
    holder, (h_cpu, h_runq) = max(((t, d) for t, d in deltas.items() if t != tid),
                                  key=lambda td: td[1][0] + td[1][1], default=(0, (0.0, 0.0)))
    native_to_ident = {t.native_id: t.ident for t in threading.enumerate()}
    h_stacks = others.get(native_to_ident.get(holder, -1))
    h_stack = h_stacks.most_common(1)[0][0] if h_stacks else "-"
    h_kernels = others_kernel.get(holder)
    h_kernel = h_kernels.most_common(1)[0][0] if h_kernels else "?"
    # other threads seen in a system call that is not an idle wait: what the loop may wait behind
    waits = sorted(f"{str(threads.names.get(t, t)).replace(' ', '_')}:{k}" for t, counts in others_kernel.items()
                   for k in [counts.most_common(1)[0][0]] if k.split("/")[0] not in _IDLE_WAITS)
    busy = ",".join(waits[:4]) or "-"
    if holder and holder not in threads.names:
        threads.refresh()   # a thread started since the last refresh
    name = str(threads.names.get(holder, holder)).replace(" ", "_")
    began = time.time() - (time.monotonic() - previous)   # wall clock, for the harness's phases
    gc_ms, gc_gen = _gc_during(previous, late)
    sys.stderr.write(f"LOOP_STALL ms={stall_ms:.0f} at={began:.3f} cpu_ms={cpu:.0f} runq_ms={runq:.0f} "
                     f"steal_ms={stolen:.0f} major_faults={faults} gc_ms={gc_ms:.0f} gc_gen={gc_gen} "
                     f"samples={sum(stacks.values())} kernel={state} holder={name} "
                     f"holder_cpu_ms={h_cpu:.0f} holder_runq_ms={h_runq:.0f} holder_kernel={h_kernel} others_in_syscalls={busy} "
                     f"stack={top} holder_stack={h_stack}\n")
    sys.stderr.flush()


def _wrap(factory):
    def new_event_loop(*args, **kwargs):
        loop = factory(*args, **kwargs)
        if not _started[0]:
            _started[0] = True
            gc.callbacks.append(_on_gc)
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
