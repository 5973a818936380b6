"""Sundial's daemon: an asyncio server wiring the wire protocol to the storage engine.

Layout (mini-redis style map of the package):

* ``cli.py`` – the ``sundial`` command; ``serve`` runs the daemon, the rest are tools (``tools/``).
* ``server.py`` – lifecycle: lock data dirs, recover logs, listen, periodic tasks, clean shutdown.
* ``connection.py`` – one socket: frames in, requests handled in order, responses (and sendfile) out.
* ``dispatch.py`` – API key → handler table; the advertised versions.
* ``handlers/`` – one module per API family; thin: decoded request → core call → response.
* ``replica_manager.py`` – per-partition append/fetch/list-offsets, acks, long polls, retention pass.
* ``purgatory.py`` – parked long-poll fetches, woken by appends.
* ``flusher.py`` – group commit of fsyncs for acks=all.
* ``groups/`` – consumer-group coordinator and durable committed offsets.
* ``errors.py`` – the single exception → Kafka error code table.
* ``metrics.py`` – Prometheus metrics; ``logsetup.py`` – structlog configuration.

Only this package does network I/O; ``protocol`` and ``storage`` are pure.
"""

__version__ = "0.1.0"  # the release; pyproject.toml carries the same (tests/unit/broker/test_version.py)
