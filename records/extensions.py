"""The optional C accelerators: whether they may be used.

Each accelerator has a Python fallback that gives the same answers: ``records._speedups``
(records/walks.py), ``storage._cleaner_speedups`` (storage/offset_map.py) and
``storage._fsync_worker`` (storage/files.py, whose native fsync threads broker/flusher.py
uses). ``SUNDIAL_NO_EXTENSIONS`` set to ``1``, ``true`` or ``yes`` turns every one of them
off at import time; setup.py reads the same variable (its own copy of the rule, as it runs
before this package can be imported) and then does not build them.
Each module imports its own accelerator by name (imports stay static), guarded by
:func:`extensions_enabled` and an ``ImportError`` handler for a build without it.
"""

from __future__ import annotations

import os


def extensions_enabled() -> bool:
    """False when ``SUNDIAL_NO_EXTENSIONS`` asks for the fallbacks."""
    return os.environ.get("SUNDIAL_NO_EXTENSIONS", "") not in ("1", "true", "yes")

