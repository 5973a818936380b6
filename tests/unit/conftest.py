"""Fixtures shared by the unit test packages."""

from __future__ import annotations

import os

import pytest


def _descriptors_open_under(directory) -> int:
    """Descriptors of this process open on files under ``directory``. Counting every
    descriptor of the process instead would also see the sockets that client threads
    left by other tests still open and close."""
    prefix = os.path.abspath(str(directory)) + os.sep
    n = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith(prefix):
                n += 1
        except OSError:
            pass  # closed meanwhile (the listing's own descriptor among them)
    return n


@pytest.fixture
def open_under():
    """``open_under(directory)`` → how many descriptors of this process name files under it."""
    return _descriptors_open_under
