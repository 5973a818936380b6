"""One writer at a time for the broker's small JSON stores (ACL rules, SCRAM credentials).

The stores are read-modify-write files edited by two kinds of writer: ``sundial acls`` /
``sundial credentials`` (offline commands, any process) and the running broker (the
admin API). Each update holds an exclusive ``flock`` on ``<store>.lock`` beside the store
while it reads, changes and atomically replaces the file, so two writers never lose each
other's change. Readers take no lock: the file is always whole (written to a temp file,
fsynced and renamed). The lock file is created once (mode 0600) and left in place.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager


@contextmanager
def update_lock(path: str):
    """Hold the exclusive update lock of the store at ``path`` (blocks until it is free)."""
    lock_path = os.path.abspath(path) + ".lock"
    os.makedirs(os.path.dirname(lock_path), exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
