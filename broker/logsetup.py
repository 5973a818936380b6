"""structlog configuration for the daemon and the tools.

Logs are JSON lines when stderr is not a terminal (files, pipes, containers) and
coloured key=value lines on a terminal. Every event carries ``timestamp`` (ISO-8601,
UTC), ``level`` and ``event``; request handling binds ``conn_id``, ``client_id``,
``api`` and ``correlation_id`` through contextvars, storage events carry
``topic``/``partition``/``offset`` fields. The module is named ``logsetup`` because
in a broker "log" means the commit log.

Debug events on hot paths are dropped before any formatting work: the level filter
is compiled into the bound logger (``make_filtering_bound_logger``).
"""

from __future__ import annotations

import logging
import os
import sys

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR, "critical": logging.CRITICAL}


def configure_logging(level: str | None = None, *, json: bool | None = None, stream=None) -> None:
    """Configure structlog (and route stdlib ``logging`` through the same output).

    ``level`` defaults to ``$SUNDIAL_LOG_LEVEL`` or ``info``; ``json`` defaults to
    "stderr is not a TTY" (``$SUNDIAL_LOG_FORMAT=json|console`` overrides).
    """
    stream = stream or sys.stderr
    level_name = (level or os.environ.get("SUNDIAL_LOG_LEVEL") or "info").lower()
    level_no = _LEVELS.get(level_name, logging.INFO)
    fmt = os.environ.get("SUNDIAL_LOG_FORMAT")
    if json is None:
        json = fmt == "json" if fmt in ("json", "console") else not stream.isatty()
    processors = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
    ]
    renderer = (structlog.processors.JSONRenderer() if json
                else structlog.dev.ConsoleRenderer(colors=stream.isatty()))
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level_no),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=True,
    )
    # Third-party libraries (kafka-python in the tools, asyncio) log through stdlib logging.
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(level_no, logging.WARNING))
