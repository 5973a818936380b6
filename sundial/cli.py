"""The ``sundial`` command: ``sundial serve`` runs the daemon; the other subcommands are tools.

    sundial serve [CONFIG_FILE] [--override KEY=VALUE ...]

starts the broker (defaults: ``listeners=PLAINTEXT://127.0.0.1:9092``,
``log.dirs=./sundial-data``). SIGTERM or SIGINT stops it cleanly: requests in
flight are answered, logs flushed, checkpoints and the clean-shutdown marker
written (exit 0). While that runs a repeated SIGTERM is ignored (``timeout``, init
systems and container runtimes may signal the process and then its group, as
Kafka's controlled shutdown ignores repeats); a SIGINT (Ctrl-C pressed again) exits
at once with code 130, without the marker, and the next start recovers the logs.
See :class:`ShutdownSignals`.

Exit codes of ``serve``: 0 stopped cleanly; 1 the start failed (one ``sundial: error:
...`` line on stderr: a busy port, a locked data directory ...); 2 a configuration
error (one ``sundial: configuration error: ...`` line, nothing touched); 130 forced
exit by a second Ctrl-C.

Tool subcommands live in :mod:`sundial.tools`; the daemon in :mod:`sundial.broker`. This module sits
above both, so that the daemon's package knows nothing of the client tools. :data:`SUBCOMMANDS` is the one table of
subcommand → the function that registers its parser (``add(subparsers)``, which sets
``func``: ``run(args) -> exit code``); adding a tool is one import and one row. Errors a user
can fix (bad config, unreachable broker, unknown topic, bad time format) print one
line and exit non-zero; they never print a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

import structlog

from sundial.broker import __version__
from sundial.broker.logsetup import configure_logging
from sundial.config import ConfigError, load_broker_config
from sundial.tools import console_consumer, console_producer, consumer_groups, credentials, dump_log, failover, \
    get_offsets, mirror, topics, transactions
from sundial.tools import log_dirs
from sundial.tools import share_groups
from sundial.tools import configs

logger = structlog.get_logger(__name__)


SERVE_EPILOG = """examples:
  sundial serve
  sundial serve server.properties --override log.retention.hours=24
  sundial serve --override listeners=PLAINTEXT://0.0.0.0:9092 \\
      --override advertised.listeners=PLAINTEXT://broker.example.com:9092 --override log.dirs=/var/lib/sundial

stopping: SIGTERM or Ctrl-C stops cleanly (requests in flight answered, logs flushed,
clean-shutdown marker written). A repeated SIGTERM during that shutdown is ignored;
Ctrl-C pressed again exits at once (code 130) and the next start recovers the logs.
exit codes: 0 stopped cleanly, 1 the start failed (one line on stderr), 2 configuration
error (one line on stderr), 130 forced exit by a second Ctrl-C."""

TOP_EPILOG = """Every command documents its options and examples: sundial COMMAND --help.
exit codes: 0 done; 1 an error you can fix, printed as one line on stderr; 2 bad command
line or configuration; 3 the command ran and found problems (dump-log); 130 interrupted.
Documentation: README.md; in docs/: tools.md, console.md, configuration.md, retention.md,
groups.md, share-groups.md, transactions.md, compaction.md, durability.md, log-dirs.md, quotas.md,
docker.md."""


def _add_serve(subparsers) -> None:
    p = subparsers.add_parser(
        "serve", help="run the broker daemon",
        description="Run the Sundial broker. Settings use Kafka's names (server.properties format); "
                    "every key is declared in config/ with its default.",
        epilog=SERVE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config_file", nargs="?", help="server.properties file (optional)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="set a broker setting, after the config file (repeatable)")
    p.add_argument("--log-level", default=None, choices=["debug", "info", "warning", "error"],
                   help="log level (default: $SUNDIAL_LOG_LEVEL or info)")
    p.set_defaults(func=serve_main)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sundial",
        description="Sundial: a Kafka-compatible broker whose speciality is time.",
        epilog=TOP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"sundial {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, add in SUBCOMMANDS.items():
        add(sub)
        if name not in sub.choices:
            raise RuntimeError(f"{add.__qualname__} did not register the subcommand {name!r}")
    return parser


#: subcommand → the function that adds its parser (in the order ``sundial --help`` lists them).
SUBCOMMANDS = {
    "serve": _add_serve,
    "topics": topics.add_parser,
    "get-offsets": get_offsets.add_parser,
    "console-producer": console_producer.add_parser,
    "console-consumer": console_consumer.add_parser,
    "dump-log": dump_log.add_parser,
    "consumer-groups": consumer_groups.add_parser,
    "share-groups": share_groups.add_parser,
    "transactions": transactions.add_parser,
    "log-dirs": log_dirs.add_parser,
    "configs": configs.add_parser,
    "failover": failover.add_parser,
    "mirror": mirror.add_parser,
    "credentials": credentials.add_credentials_parser,
    "acls": credentials.add_acls_parser,
}


def _command_parser(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` ran: ``sundial topics create``'s, not ``sundial``'s."""
    while True:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, actions[0].dest, None) if actions else None
        if name not in (actions[0].choices if actions else {}):
            return parser
        parser = actions[0].choices[name]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the command's own usage line, not sundial's: "sundial console-consumer: error: ..."
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        code = args.func(args)
    except KeyboardInterrupt:
        code = 130
    return int(code or 0)


# -- serve ------------------------------------------------------------------------------------


def _new_event_loop(choice: str):
    if choice in ("auto", "uvloop"):
        try:
            import uvloop

            return uvloop.new_event_loop()
        except ImportError:
            if choice == "uvloop":
                raise
    return asyncio.new_event_loop()


def serve_main(args) -> int:
    configure_logging(args.log_level)
    try:
        config, unknown = load_broker_config(args.config_file, args.override)
    except ConfigError as exc:
        print(f"sundial: configuration error: {exc}", file=sys.stderr)
        return 2
    loop = _new_event_loop(os.environ.get("SUNDIAL_EVENT_LOOP") or config["sundial.event.loop"])
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(_serve(config, unknown))
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


EXIT_FORCED = 130


class ShutdownSignals:
    """What SIGTERM and SIGINT mean to ``sundial serve`` (pure: :meth:`decide` returns the action).

    * the first SIGTERM or SIGINT: ``"stop"``, a clean shutdown;
    * SIGTERM during the shutdown: ``"ignore"``. ``timeout`` sends SIGTERM to the
      process and then to its process group, systemd and container runtimes may
      repeat it; none of them means "skip the flush" (Kafka's controlled shutdown
      ignores repeats too, and a supervisor that wants it dead sends SIGKILL);
    * SIGINT during the shutdown: ``"force"``, Ctrl-C pressed twice by someone at the
      terminal: exit at once with :data:`EXIT_FORCED`, no clean-shutdown marker.
    """

    def __init__(self) -> None:
        self.first: int | None = None

    def decide(self, signum: int) -> str:
        if self.first is None:
            self.first = signum
            return "stop"
        return "force" if signum == signal.SIGINT else "ignore"


async def _serve(config, unknown) -> int:
    # The daemon is imported by the command that runs it only: a tool starts without it.
    from sundial.broker.server import BrokerServer

    server = BrokerServer(config, unknown)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    policy = ShutdownSignals()

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        action = policy.decide(signum)
        if action == "stop":
            logger.info("signal_received", signal=name)
            stop.set()
        elif action == "ignore":
            logger.info("signal_ignored", signal=name, reason="a clean shutdown is already running; "
                                                              "Ctrl-C (SIGINT) forces an exit")
        else:
            logger.warning("forced_exit", signal=name, exit_code=EXIT_FORCED,
                           reason="second interrupt during shutdown: no clean-shutdown marker, the next "
                                  "start recovers the logs")
            try:
                sys.stderr.flush()
            finally:
                os._exit(EXIT_FORCED)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await server.start()
    except BaseException as exc:  # noqa: BLE001 - every failed start ends with one line, never a traceback
        code, line = _start_failure(exc)
        await server.shutdown()   # release what was taken: sockets, locks, loaded logs
        print(f"sundial: {line}", file=sys.stderr, flush=True)
        return code
    await stop.wait()
    await server.shutdown()
    return 0


def _start_failure(exc: BaseException) -> tuple[int, str]:
    """Exit code and the one line (after ``sundial: ``) for a start that failed."""
    from sundial.broker.server import StartupError, os_reason

    if isinstance(exc, StartupError):
        return 1, f"error: {exc}"
    if isinstance(exc, ConfigError):
        return 2, f"configuration error: {exc}"
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        return 1, f"error: cannot start: {os_reason(exc)}{where}"
    if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
        return 130, "error: interrupted during start-up"
    # A bug: the traceback goes to the log (one JSON event), the terminal gets one line.
    logger.error("broker_start_failed", exc_info=exc)
    return 1, f"error: cannot start: unexpected {type(exc).__name__}: {exc} (details in the log above)"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
