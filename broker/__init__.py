"""Sundial's daemon: an asyncio server wiring the wire protocol to the storage engine.

Layout (mini-redis style map of the package):

* ``server.py`` – lifecycle: bind, lock data dirs, recover logs, listen, periodic tasks,
  clean shutdown (what it takes is given back in reverse order).
* ``node.py`` – the composition root: :func:`~broker.node.build_broker` builds the
  daemon's parts once, in order, each handed what it uses; :class:`~broker.node.Broker`
  is what connections and handlers see (every attribute set at construction).
* ``connection.py`` – one socket: frames in, requests handled in order, responses
  (and sendfile) out; ``produce_pipeline.py`` – Produce answers owed while the
  requests behind them begin.
* ``dispatch.py`` – the static table API key → handler, version narrowing, pipelined start.
* ``handlers/`` – one module per API family; thin: decoded request → core call → response.
* ``replica_manager.py`` – per-partition append/fetch/list-offsets, acks, long polls,
  retention pass (logs, purgatory, metrics, clock, groups handed in).
* ``purgatory.py`` – parked long-poll fetches, woken by appends.
* ``flusher.py`` – group commit of fsyncs for acks=all.
* ``groups/`` – consumer groups: membership (``GroupCoordinator``) apart from the
  offset manager (``GroupMetadataManager``), as in Kafka.
* ``log_cleaner.py`` – the compaction task and its thread.
* ``security.py``, ``sasl.py``, ``authorizer.py`` – TLS/SASL, credentials, ACLs.
* ``errors.py`` – the single exception → Kafka error code table, and ``CloseConnection``.
* ``metrics.py`` – Prometheus metrics; ``logsetup.py`` – structlog configuration.

Only this package does network I/O; ``records``, ``protocol`` and ``storage`` are pure.
No module here imports :mod:`sundial.tools`: the ``sundial`` command (:mod:`sundial.cli`) sits above both.
"""

__version__ = "0.1.0"  # the release; pyproject.toml carries the same (tests/unit/broker/test_version.py)
