"""Settings for every test directory.

``SUNDIAL_HYPOTHESIS_PROFILE=ci`` (scripts/test sets it) runs every Hypothesis test on the
same examples each time (derandomized, no example database, no deadline): the suite's answer
on a clean clone does not depend on the draw, and a failure there is reproduced by running
the same command. Without it, Hypothesis explores new examples on every run, as in
development.
"""

from __future__ import annotations

import os

_PROFILE = os.environ.get("SUNDIAL_HYPOTHESIS_PROFILE")

if _PROFILE:
    # Imported only when asked for: the compose suite's integration tests do not load Hypothesis.
    from hypothesis import settings

    settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
    settings.load_profile(_PROFILE)
