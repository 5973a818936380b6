"""Waiting on an observable condition: the one polling loop the integration tests share.

A test waits for what it can see (an answer from the broker, a file on disk, a metric) with
a generous deadline, never for a fixed time. ``wait_for`` asks the predicate until it returns a
true value and returns that value, so a test can wait for a result and use it:

    offsets = wait_for(lambda: committed(group) or None, 60, f"the commits of {group}")

Past the deadline it fails with what it waited for and the last value the predicate returned.
The predicate is always asked at least once, and once more after the deadline has passed, so a
predicate that takes long itself is not cut short.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout_s: float, what: str, *, interval_s: float = 0.05) -> T:
    """``predicate()``'s first true value; AssertionError if none comes within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}; last seen: {value!r}")
        time.sleep(interval_s)
