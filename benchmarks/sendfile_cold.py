"""How long the calling thread (the event loop's, in the broker) waits to send a Fetch answer
whose pages are not in the page cache: plain ``sendfile``; ``posix_fadvise(WILLNEED)`` then
``sendfile``; the broker's way (:mod:`broker.page_cache`: probe, read the range on another thread
when cold, then ``sendfile``). Pages are evicted with ``POSIX_FADV_DONTNEED`` before each trial.

    python benchmarks/sendfile_cold.py [directory]

The file (64 MiB) is written in ``directory`` (default: the current one) and removed after.
"""
import os
import socket
import sys
import tempfile
import threading
import time

from sundial.broker import page_cache

SIZE = 4 << 20
path = tempfile.mktemp(prefix=".sendfile-cold-", dir=sys.argv[1] if len(sys.argv) > 1 else ".")
with open(path, "wb") as fh:
    fh.write(os.urandom(64 << 20)); fh.flush(); os.fsync(fh.fileno())
fd = os.open(path, os.O_RDONLY)

def drain(sock):
    while True:
        b = sock.recv(1 << 20)
        if not b: return

def sendfile_all(out, pos, size):
    sent = 0
    while sent < size:
        sent += os.sendfile(out.fileno(), fd, pos + sent, size - sent)

def trial(mode, pos):
    a, b = socket.socketpair()
    t = threading.Thread(target=drain, args=(b,)); t.start()
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    t0 = time.perf_counter()
    loop_s = 0.0
    if mode == "plain":
        sendfile_all(a, pos, SIZE); loop_s = time.perf_counter() - t0
    elif mode == "willneed":
        os.posix_fadvise(fd, pos, SIZE, os.POSIX_FADV_WILLNEED)
        sendfile_all(a, pos, SIZE); loop_s = time.perf_counter() - t0
    else:
        c0 = time.perf_counter(); cold = not page_cache.cached(fd, pos, SIZE); loop_s += time.perf_counter() - c0
        if cold:
            w = threading.Thread(target=page_cache.warm, args=(page_cache.own([(fd, pos, SIZE)]),)); w.start(); w.join()
        c0 = time.perf_counter(); sendfile_all(a, pos, SIZE); loop_s += time.perf_counter() - c0
    total = time.perf_counter() - t0
    a.close(); t.join(); b.close()
    return loop_s * 1000, total * 1000

for mode in ("plain", "willneed", "probe+warm"):
    res = [trial(mode, (i * 7 % 14) * SIZE) for i in range(16)]
    loop = sorted(r[0] for r in res); tot = sorted(r[1] for r in res)
    print(f"{mode:11s} loop-thread ms median {loop[len(loop) // 2]:7.2f} max {loop[-1]:7.2f}   "
          f"total ms median {tot[len(tot) // 2]:7.2f}")
os.close(fd); os.remove(path)
