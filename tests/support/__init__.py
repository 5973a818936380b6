"""Helpers the tests share: builders, reference parsers, oracles, fakes and waiting.

Importable as ``support`` in every way the tests run (the host suite, the compose suite's
tests container, scripts/sanitize): pytest puts ``tests/`` on ``sys.path`` through the
``pythonpath`` setting in pyproject.toml, beside ``benchmarks/`` (the soak and crash-loop
rules their tests check) and ``tests/fuzz/`` (the differential checks the corpus replays).
A helper used by tests in more than one directory lives here, never next to one of them.

    from support.log_helpers import NOW_MS, batch, topic_config
    from support.waiting import wait_for
"""
