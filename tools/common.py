"""What every ``sundial`` tool shares: errors and exit codes, client connections,
argument helpers, aligned tables and progress lines.

Exit codes (every tool):

* ``0`` – done;
* ``1`` – an error the user can fix (unreachable broker, failed authentication, an ACL
  refusal, unknown topic or group, bad time format, missing file, a group that must be
  inactive first): **one line**
  on stderr, ``sundial <command>: error: <what and how to fix it>``, never a traceback;
* ``2`` – bad command line (argparse's usage message);
* ``3`` – the command ran and found problems (dump-log: index entries that do not
  match the log, batches with a bad CRC, corrupt entries);
* ``130`` – interrupted (Ctrl-C).

Wire tools use kafka-python 3.0.12 (``KafkaAdminClient``, ``KafkaConsumer``,
``KafkaProducer``) and therefore work against any Kafka-compatible broker. Bootstrap
addresses must be ``HOST:PORT`` (:func:`parse_bootstrap`, a usage error otherwise).
Before the first client is built, :mod:`tools.preflight` makes one short connection with
the tool's security settings (TCP to every address at once, TLS, ApiVersions, SASL) and
stops with one of these lines (exit 1) instead of kafka-python retrying its bootstrap
until the timeout::

    cannot connect to HOST:PORT (reason)
    connected but authentication failed (mechanism M, user U): <the broker's message>
    not authorized (<operation> on <resource>)
    unsupported version (<api>: ...)
    timed out after N s (...)

The last three also come from the tool's own requests (:func:`refusal` for an error code
in a response, :func:`kafka_error_line` for a kafka-python error). Security
settings come from ``--command-config FILE`` (Kafka's properties names, see
:data:`CLIENT_PROPERTY_NAMES`). The tools never print kafka-python's log lines unless
``SUNDIAL_TOOLS_DEBUG=1``; structlog (used by ``storage/``) is routed to stderr so
stdout carries only the tool's output.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import sys
import time
from typing import Callable, Iterable, Sequence

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import errors as kafka_errors
from kafka.errors import KafkaConfigurationError, KafkaError
import structlog

from sundial.records.timestamps import wall_clock_ms

from .preflight import PreflightError, preflight, seconds_text
from .timeparse import DATETIME_HELP, DURATION_HELP

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_FINDINGS = 3
EXIT_INTERRUPTED = 130

DEFAULT_TIMEOUT_MS = 15_000


class ToolError(Exception):
    """A failure the user can fix; printed as one line, exit code ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# -- process set-up ----------------------------------------------------------------------------


def prepare_tool() -> None:
    """Quiet client logging and send structlog to stderr (stdout is the tool's output).

    Leaves an existing structlog configuration alone (tests, an embedding program) and
    never replaces stdlib logging's root handlers unless ``SUNDIAL_TOOLS_DEBUG=1``.
    """
    debug = os.environ.get("SUNDIAL_TOOLS_DEBUG") == "1"
    logging.getLogger("kafka").setLevel(logging.DEBUG if debug else logging.CRITICAL + 1)
    if debug and not logging.getLogger().handlers:
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    try:
        if not structlog.is_configured():
            structlog.configure(
                processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True),
                            structlog.processors.JSONRenderer()],
                wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG if debug else logging.WARNING),
                logger_factory=lambda *_: structlog.PrintLogger(file=_Stderr()),
                cache_logger_on_first_use=False,
            )
    except Exception:  # pragma: no cover - logging set-up must never stop a tool
        pass


class _Stderr:
    """``sys.stderr`` looked up at each write (it may be replaced after set-up, e.g. by pytest)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def describe_error(exc: BaseException) -> str:
    """One readable line for an exception (kafka-python's errors repeat their class name)."""
    text = re.sub(r"^\[Error -?\d+\]\s*", "", str(exc).strip())
    name = type(exc).__name__
    if text.startswith(name + ":"):
        text = text[len(name) + 1:].strip()
    elif text == name:
        text = ""
    if not text:
        text = name
    text = " ".join(text.split())
    return text


def run_tool(command: str, body: Callable[[], int | None], *, timeout_ms: int | None = None) -> int:
    """Run ``body``; turn the errors a user can fix into one line on stderr and an exit code.

    A kafka-python error that escapes the tool is worded by :func:`kafka_error_line` (one of
    the five connection lines when it is one of those); ``timeout_ms`` is the tool's
    ``--timeout-ms``, named in a "timed out" line.
    """
    prepare_tool()
    try:
        code = body()
        return EXIT_OK if code is None else int(code)
    except ToolError as exc:
        _print_error(command, str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        _print_error(command, "interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # stdout closed early (``| head``): not an error of the tool.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks

        if isinstance(exc, KafkaError):
            _print_error(command, kafka_error_line(exc, timeout_ms=timeout_ms))
            return EXIT_ERROR
        if isinstance(exc, OSError):
            _print_error(command, describe_error(exc))
            return EXIT_ERROR
        if os.environ.get("SUNDIAL_TOOLS_DEBUG") == "1":
            raise
        _print_error(command, f"unexpected {type(exc).__name__}: {describe_error(exc)} "
                              f"(set SUNDIAL_TOOLS_DEBUG=1 for a traceback)")
        return EXIT_ERROR


# -- the five connection lines -------------------------------------------------------------------
#
# cannot connect to HOST:PORT (reason)          no TCP/TLS/Kafka connection (tools/preflight.py)
# connected but authentication failed (...)     SASL or the TLS client certificate refused
# not authorized (operation on resource)        an ACL refused a request (an authorization error code)
# unsupported version (api ...)                 the broker does not serve an API or version the tool needs
# timed out after N s (...)                     connected, but no answer in time
#
# Every one is a ToolError with exit code 1.

#: Kafka's authorization error codes → the resource type they are about.
AUTHORIZATION_RESOURCES = {
    kafka_errors.TopicAuthorizationFailedError.errno: "topic",
    kafka_errors.GroupAuthorizationFailedError.errno: "group",
    kafka_errors.ClusterAuthorizationFailedError.errno: "cluster",
    kafka_errors.TransactionalIdAuthorizationFailedError.errno: "transactional id",
    kafka_errors.DelegationTokenAuthorizationFailedError.errno: "delegation token",
}


def kafka_error_line(exc: BaseException, *, timeout_ms: int | None = None, where: str | None = None) -> str:
    """The one line for a kafka-python error: one of the five connection lines when it is one of
    those kinds, else ``ErrorName: message``."""
    text = describe_error(exc)
    if isinstance(exc, kafka_errors.AuthorizationError):
        resource = AUTHORIZATION_RESOURCES.get(getattr(exc, "errno", None), "resource")
        return f"not authorized ({resource}: {text})"
    if isinstance(exc, kafka_errors.SaslAuthenticationFailedError):
        return f"connected but authentication failed: {text}"
    if isinstance(exc, kafka_errors.UnsupportedVersionError):
        return f"unsupported version ({text})"
    if isinstance(exc, (kafka_errors.KafkaTimeoutError, kafka_errors.RequestTimedOutError)):
        after = f" after {seconds_text(timeout_ms)}" if timeout_ms else ""
        return f"timed out{after} ({text})"
    if isinstance(exc, (kafka_errors.KafkaConnectionError, kafka_errors.NodeNotReadyError)):
        return f"cannot connect to {where or 'the broker'} ({text})"
    return f"{type(exc).__name__}: {text}"


def refusal(error, *, operation: str, resource: str, doing: str, message: str | None = None) -> ToolError:
    """A ToolError for an error the broker answered (a code or a kafka-python error) to a request.

    An authorization code gives ``not authorized (<operation> on <resource>)``, UNSUPPORTED_VERSION
    ``unsupported version (<doing>)``, anything else ``cannot <doing>: <ErrorName>[: message]``.
    """
    if isinstance(error, int):
        code, name = error, kafka_errors.for_code(error).__name__
    else:
        code, name = getattr(error, "errno", None), type(error).__name__
        message = message or (describe_error(error) if describe_error(error) != name else None)
    if code in AUTHORIZATION_RESOURCES or isinstance(error, kafka_errors.AuthorizationError):
        return ToolError(f"not authorized ({operation} on {resource})")
    if code == kafka_errors.UnsupportedVersionError.errno or isinstance(error, kafka_errors.UnsupportedVersionError):
        return ToolError(f"unsupported version ({doing}: {message or name})")
    return ToolError(f"cannot {doing}: {name}" + (f": {message}" if message and message != name else ""))


def _print_error(command: str, message: str) -> None:
    print(f"sundial {command}: error: {message}", file=sys.stderr, flush=True)


def tool_command(command: str):
    """Decorator for a tool's ``run(args)``: errors become one line and an exit code."""

    def wrap(fn: Callable[..., int | None]) -> Callable[..., int]:
        @functools.wraps(fn)
        def runner(args) -> int:
            timeout_ms = getattr(args, "timeout_ms", None) or getattr(args, "request_timeout_ms", None)
            return run_tool(command, lambda: fn(args),
                            timeout_ms=timeout_ms if isinstance(timeout_ms, int) else None)

        return runner

    return wrap


# -- arguments ---------------------------------------------------------------------------------


def add_bootstrap_argument(parser, flag: str = "--bootstrap-server", *, required: bool = True,
                           what: str = "the broker to connect to") -> None:
    """``what`` is a phrase naming the cluster; the help adds the address format."""
    parser.add_argument(flag, required=required, metavar="HOST:PORT[,HOST:PORT...]",
                        help=f"{what} (HOST:PORT, several comma-separated; any Kafka-compatible broker)")


def add_command_config_argument(parser, *aliases: str) -> None:
    """``--command-config FILE``; ``aliases``: Kafka's older names of it for the tool (the console
    tools' ``--producer.config`` / ``--consumer.config``)."""
    parser.add_argument("--command-config", *aliases, dest="command_config", metavar="FILE",
                        help="properties file with client settings (security.protocol, sasl.mechanism, "
                             "sasl.username, sasl.password, sasl.jaas.config, ssl.ca.location, "
                             "ssl.certificate.location, ssl.key.location, client.id)")


def add_client_arguments(parser) -> None:
    add_command_config_argument(parser)
    parser.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                        help=f"how long to wait for the broker (connect and each request; default "
                             f"{DEFAULT_TIMEOUT_MS})")


def add_run_mode_arguments(parser, *, dry_run_help: str, execute_help: str) -> None:
    """``--dry-run`` (the default: only print) or ``--execute``, as Kafka's tools that change state take them."""
    run_mode = parser.add_mutually_exclusive_group()
    run_mode.add_argument("--dry-run", action="store_true", help=dry_run_help)
    run_mode.add_argument("--execute", action="store_true", help=execute_help)


#: The command line the group tools share (kafka-consumer-groups.sh, kafka-share-groups.sh's), in order:
#: (mutually exclusive group or None, flag, argparse settings). A tool has the flags it gives help for.
_GROUP_TOOL_ARGUMENTS = (
    ("mode", "--list", {"action": "store_true"}),
    ("mode", "--describe", {"action": "store_true"}),
    ("mode", "--reset-offsets", {"action": "store_true"}),
    ("mode", "--delete", {"action": "store_true"}),
    ("mode", "--delete-offsets", {"action": "store_true"}),
    (None, "--group", {"action": "append", "default": [], "metavar": "GROUP"}),
    (None, "--all-groups", {"action": "store_true"}),
    ("view", "--offsets", {"action": "store_true"}),
    ("view", "--members", {"action": "store_true"}),
    ("view", "--state", {"nargs": "?", "const": "", "default": None, "metavar": "STATES"}),
    (None, "--type", {"nargs": "?", "const": "", "default": None, "metavar": "TYPES"}),
    (None, "--verbose", {"action": "store_true"}),
    (None, "--topic", {"action": "append", "default": [], "metavar": "TOPIC[:PARTITIONS]"}),
    (None, "--all-topics", {"action": "store_true"}),
    ("scenario", "--to-earliest", {"action": "store_true"}),
    ("scenario", "--to-latest", {"action": "store_true"}),
    ("scenario", "--to-offset", {"type": int, "metavar": "OFFSET"}),
    ("scenario", "--to-datetime", {"metavar": "TIME"}),
    ("scenario", "--by-duration", {"metavar": "DURATION"}),
    ("scenario", "--shift-by", {"type": int, "metavar": "N"}),
    ("scenario", "--to-current", {"action": "store_true"}),
)

#: Help of the reset scenarios both group tools have.
GROUP_RESET_HELP = {
    "--to-earliest": "reset to the log start offset",
    "--to-latest": "reset to the log end offset",
    "--to-datetime": f"reset to the first record at or after TIME ({DATETIME_HELP})",
    "--by-duration": f"reset to the first record at or after now − DURATION ({DURATION_HELP})",
    "--dry-run": "only print the new offsets (the default)",
}


def add_group_tool_arguments(parser, help_for: dict[str, str]) -> None:
    """The arguments of a group tool: the broker, those of :data:`_GROUP_TOOL_ARGUMENTS` that
    ``help_for`` (flag -> help) names (one of --list, --describe ... required), --dry-run or
    --execute, and the client settings."""
    add_bootstrap_argument(parser)
    exclusive: dict[str, object] = {}
    for group, flag, settings in _GROUP_TOOL_ARGUMENTS:
        if flag not in help_for:
            continue
        if group is not None and group not in exclusive:
            exclusive[group] = parser.add_mutually_exclusive_group(required=group == "mode")
        (parser if group is None else exclusive[group]).add_argument(flag, help=help_for[flag], **settings)
    add_run_mode_arguments(parser, dry_run_help=help_for["--dry-run"], execute_help=help_for["--execute"])
    add_client_arguments(parser)


def check_reset_arguments(args, scenarios: Sequence[str], exit_code: int) -> None:
    """What both group tools check of --reset-offsets and its arguments (``scenarios``: the tool's scenario
    attributes, in its usage's order), and that --describe and --delete name their groups."""
    chosen = [s for s in scenarios if getattr(args, s) not in (None, False)]
    if args.reset_offsets:
        if not chosen:
            flags = [f"--{s.replace('_', '-')}" for s in scenarios]
            raise ToolError(f"--reset-offsets needs a scenario: {', '.join(flags[:-1])} or {flags[-1]}", exit_code)
        if not args.topic and not args.all_topics:
            raise ToolError("--reset-offsets needs --topic TOPIC[:PARTITIONS] or --all-topics", exit_code)
        if args.topic and args.all_topics:
            raise ToolError("give either --topic or --all-topics, not both", exit_code)
    else:
        if chosen:
            raise ToolError(f"--{chosen[0].replace('_', '-')} only goes with --reset-offsets", exit_code)
        if args.execute or args.dry_run:
            raise ToolError("--execute and --dry-run only go with --reset-offsets", exit_code)
        if args.all_topics:
            raise ToolError("--all-topics only goes with --reset-offsets", exit_code)
    if (args.describe or args.delete) and not args.group and not args.all_groups:
        raise ToolError(f"--{'describe' if args.describe else 'delete'} needs --group GROUP or --all-groups",
                        exit_code)


def check_view_arguments(args, exit_code: int) -> None:
    """What both group tools check of --group/--all-groups and the --describe views."""
    if args.group and args.all_groups:
        raise ToolError("give either --group or --all-groups, not both", exit_code)
    if (args.members or args.offsets) and not args.describe:
        raise ToolError("--members and --offsets only go with --describe", exit_code)
    if args.state is not None and not (args.describe or args.list):
        raise ToolError("--state only goes with --describe or --list", exit_code)
    if args.state and not args.list:
        raise ToolError("--state takes states only with --list", exit_code)


def delete_groups(admin, groups: list[str], *, noun: str, listed_as: str) -> int:
    """--delete of both group tools: DeleteGroups, then kafka-*-groups.sh's answer (``noun``: "group" or
    "share group" in the refusal of the first group not deleted; ``listed_as``: "consumer groups" or "share
    groups" in the success line)."""
    try:
        results = admin.delete_groups(groups)
    except KafkaError as exc:
        raise ToolError(f"deleting groups failed: {type(exc).__name__}: {describe_error(exc)}") from None
    failed = [(group, outcome) for group, outcome in sorted(results.items()) if outcome != "OK"]
    if failed:
        group, name = failed[0]
        hint = " (stop its consumers first)" if name == "NonEmptyGroupError" else ""
        raise ToolError(f"{noun} {group!r} could not be deleted: {name}{hint}")
    quoted = ", ".join(f"'{g}'" for g in groups)
    print(f"Deletion of requested {listed_as} ({quoted}) was successful.")
    return 0


def add_two_cluster_client_arguments(parser) -> None:
    """Client settings of a tool that talks to two clusters, A (the source) and B (the target)."""
    parser.add_argument("--source-command-config", metavar="FILE",
                        help="client settings file for A (see topics --help)")
    parser.add_argument("--target-command-config", metavar="FILE", help="client settings file for B")
    parser.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                        help=f"how long to wait for each broker (default {DEFAULT_TIMEOUT_MS})")


def parse_partitions(text: str | None) -> list[int] | None:
    """``0,1,4-6`` → [0, 1, 4, 5, 6]; None/empty → None (all partitions)."""
    if text is None or not text.strip():
        return None
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ToolError(f"bad partition list {text!r}; use e.g. 0,1,4-6")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ToolError(f"bad partition range {part!r} (end before start)")
        out.update(range(lo, hi + 1))
    return sorted(out)


def parse_key_values(items: Iterable[str] | None, what: str = "config") -> dict[str, str]:
    """``["a=1,b=2", "c=3"]`` → {"a": "1", "b": "2", "c": "3"}.

    A value holding commas can be given in square brackets, as with Kafka's tools:
    ``cleanup.policy=[compact,delete]``.
    """
    result: dict[str, str] = {}
    for item in items or ():
        for piece in _split_kv(item):
            if "=" not in piece:
                raise ToolError(f"bad {what} {piece!r}; use KEY=VALUE")
            key, value = piece.split("=", 1)
            key = key.strip()
            if not key:
                raise ToolError(f"bad {what} {piece!r}; the key is empty")
            value = value.strip()
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            result[key] = value
    return result


def _split_kv(text: str) -> list[str]:
    pieces, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        if ch == "," and depth == 0:
            pieces.append("".join(current))
            current = []
        else:
            current.append(ch)
    pieces.append("".join(current))
    return [p.strip() for p in pieces if p.strip()]


def parse_names(text: str | None, valid: Sequence[str], what: str) -> list[str]:
    """Comma-separated names, matched case-insensitively against ``valid`` (Kafka's spelling kept, each
    once, in the order given); [] for none. An unknown name is a usage error naming the valid ones."""
    by_lower = {v.lower(): v for v in valid}
    out: list[str] = []
    for raw in (text or "").split(","):
        name = raw.strip()
        if not name:
            continue
        if name.lower() not in by_lower:
            raise ToolError(f"invalid {what} {name!r}; valid {what}s are: {', '.join(valid)}", EXIT_USAGE)
        if by_lower[name.lower()] not in out:
            out.append(by_lower[name.lower()])
    return out


def split_names(values: Iterable[str] | None) -> list[str]:
    """Repeatable, comma-separated name options → a de-duplicated list in order."""
    out: list[str] = []
    for value in values or ():
        for name in value.split(","):
            name = name.strip()
            if name and name not in out:
                out.append(name)
    return out


# -- client settings ---------------------------------------------------------------------------

#: Kafka/librdkafka client property → kafka-python keyword.
CLIENT_PROPERTY_NAMES = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.cafile": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.endpoint.identification.algorithm": "ssl_check_hostname",
    "client.id": "client_id",
}

_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def read_client_properties(path: str | None) -> dict:
    """kafka-python keyword arguments from a Kafka-style client properties file."""
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise ToolError(f"cannot read --command-config {path}: {exc.strerror or exc}") from None
    props: dict[str, str] = {}
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            raise ToolError(f"bad line in {path}: {line!r} (expected key=value)")
        props[line[:sep].strip()] = line[sep + 1:].strip()
    kwargs: dict = {}
    for key, value in props.items():
        if key == "sasl.jaas.config":
            options = dict(_JAAS_OPTION.findall(value))
            if "username" in options:
                kwargs["sasl_plain_username"] = options["username"]
            if "password" in options:
                kwargs["sasl_plain_password"] = options["password"]
            continue
        target = CLIENT_PROPERTY_NAMES.get(key)
        if target is None:
            raise ToolError(f"unsupported client setting {key!r} in {path}; supported: "
                            f"{', '.join(sorted(CLIENT_PROPERTY_NAMES) + ['sasl.jaas.config'])}")
        if target == "ssl_check_hostname":
            kwargs[target] = value.strip().lower() == "https"
        elif target == "security_protocol" or target == "sasl_mechanism":
            kwargs[target] = value.strip().upper()
        else:
            kwargs[target] = value
    return kwargs


def parse_bootstrap(text: str | None, flag: str = "--bootstrap-server") -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` → [(host, port)]; a malformed address is a usage error (exit 2).

    The port is required (Kafka's tools require it too; kafka-python would quietly assume
    9092); an IPv6 address goes in brackets: ``[::1]:9092``.
    """
    if not text or not text.strip():
        raise ToolError(f"{flag}: no address given; use HOST:PORT, e.g. 127.0.0.1:9092", EXIT_USAGE)
    out = []
    for server in text.split(","):
        server = server.strip()
        host, port, why = _parse_address(server)
        if why:
            raise ToolError(f"{flag}: bad address {server!r}: {why}; use HOST:PORT, e.g. 127.0.0.1:9092",
                            EXIT_USAGE)
        out.append((host, port))
    return out


def _parse_address(server: str) -> tuple[str, int, str]:
    """(host, port, "") or ("", 0, what is wrong)."""
    if server.startswith("["):
        host, sep, rest = server[1:].partition("]")
        if not sep or not host or (rest and not rest.startswith(":")):
            return "", 0, "expected [IPv6]:PORT"
        port_text = rest[1:]
        if not re.fullmatch(r"[0-9a-fA-F:.]+", host):
            return "", 0, f"{host!r} is not an IPv6 address"
    else:
        host, sep, port_text = server.rpartition(":")
        if not sep:
            return "", 0, "the port is missing"
        if ":" in host:
            return "", 0, "write an IPv6 address in brackets, e.g. [::1]:9092"
        if not host or not re.fullmatch(r"[A-Za-z0-9._-]+", host):
            return "", 0, f"{host!r} is not a host name or address"
    if not port_text:
        return "", 0, "the port is missing"
    if not port_text.isdigit():
        return "", 0, f"the port {port_text!r} is not a number"
    port = int(port_text)
    if not 1 <= port <= 65535:
        return "", 0, f"the port {port} is not in 1-65535"
    return host, port, ""


class ClientSettings:
    """Where and how to connect: bootstrap servers, timeout and security settings."""

    def __init__(self, bootstrap: str, *, timeout_ms: int = DEFAULT_TIMEOUT_MS, extra: dict | None = None,
                 client_id: str = "sundial-tools", flag: str = "--bootstrap-server") -> None:
        self.servers = parse_bootstrap(bootstrap, flag)
        if timeout_ms <= 0:
            raise ToolError("--timeout-ms must be positive", EXIT_USAGE)
        self.bootstrap = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.servers)
        self.timeout_ms = timeout_ms
        self.extra = dict(extra or {})
        self.extra.setdefault("client_id", client_id)
        self._reachable = False

    @classmethod
    def from_args(cls, args, bootstrap: str | None = None) -> "ClientSettings":
        return cls(bootstrap if bootstrap is not None else args.bootstrap_server,
                   timeout_ms=getattr(args, "timeout_ms", DEFAULT_TIMEOUT_MS),
                   extra=read_client_properties(getattr(args, "command_config", None)))

    def _common(self) -> dict:
        if not self._reachable:
            try:
                preflight(self.servers, self.timeout_ms, self.extra)
            except PreflightError as exc:
                raise ToolError(str(exc)) from None
            self._reachable = True
        request_timeout = max(self.timeout_ms, 1000)
        return {"bootstrap_servers": self.bootstrap, "request_timeout_ms": request_timeout,
                "bootstrap_timeout_ms": self.timeout_ms, **self.extra}

    def _unreachable(self, exc: BaseException) -> ToolError:
        if isinstance(exc, kafka_errors.KafkaTimeoutError) and "bootstrap" in str(exc):
            return ToolError(f"timed out after {seconds_text(self.timeout_ms)} (no metadata from {self.bootstrap}: "
                             f"{describe_error(exc)})")
        return ToolError(kafka_error_line(exc, timeout_ms=self.timeout_ms, where=self.bootstrap))

    def _connect(self, client_class, kwargs: dict):
        """``client_class(**kwargs)``; bad settings and an unreachable broker become one-line ToolErrors."""
        try:
            return client_class(**kwargs)
        except KafkaConfigurationError as exc:
            raise ToolError(f"bad client settings: {describe_error(exc)}") from None
        except (KafkaError, OSError) as exc:
            raise self._unreachable(exc) from None

    def admin(self):
        return self._connect(KafkaAdminClient, self._common())

    @contextlib.contextmanager
    def admin_session(self):
        """An admin client for a ``with`` block, closed (quietly) when the block ends, however it ends."""
        admin = self.admin()
        try:
            yield admin
        finally:
            close_quietly(admin)

    def consumer(self, **overrides):
        kwargs = {"enable_auto_commit": False, "auto_offset_reset": "earliest", "fetch_max_wait_ms": 200,
                  **self._common(), **overrides}
        kwargs["request_timeout_ms"] = max(kwargs["request_timeout_ms"], kwargs["fetch_max_wait_ms"] + 1000)
        return self._connect(KafkaConsumer, kwargs)

    def producer(self, **overrides):
        return self._connect(KafkaProducer, {"max_block_ms": self.timeout_ms, **self._common(), **overrides})


def close_quietly(*clients) -> None:
    for client in clients:
        if client is None:
            continue
        try:
            if client.__class__.__name__ == "KafkaProducer":
                client.close(timeout=5)
            elif client.__class__.__name__ == "KafkaConsumer":
                client.close(autocommit=False)
            else:
                client.close()
        except Exception:  # noqa: BLE001 - closing must not hide the real outcome
            pass


def now_ms() -> int:
    """The wall clock in ms (:func:`records.timestamps.wall_clock_ms`)."""
    return wall_clock_ms()


# -- output ------------------------------------------------------------------------------------


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns padded to their widest cell and separated by one space (Kafka's tools' layout)."""
    body = [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(headers)] + body:
        lines.append(" ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return "\n".join(lines)


class Progress:
    """Progress lines on stderr for long work, at most one per ``interval_s``.

    ``mode``: ``always``, ``never`` or ``auto`` (only when the work is at least
    ``auto_min_total`` units and has run for more than ``interval_s``).
    """

    def __init__(self, label: str, total: int, *, unit: str = "bytes", mode: str = "auto",
                 interval_s: float = 1.0, auto_min_total: int = 64 << 20, stream=None) -> None:
        self.label = label
        self.total = max(total, 0)
        self.unit = unit
        self.interval_s = interval_s
        self.stream = stream or sys.stderr
        self.enabled = mode == "always" or (mode == "auto" and self.total >= auto_min_total)
        self.started = time.monotonic()
        self._last = self.started if mode == "auto" else self.started - interval_s
        self.lines = 0

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self.interval_s:
            return
        self._last = now
        self._emit(done, now)

    def finish(self, done: int) -> None:
        if self.enabled and self.lines:
            self._emit(done, time.monotonic(), final=True)

    def _emit(self, done: int, now: float, final: bool = False) -> None:
        elapsed = max(now - self.started, 1e-9)
        pct = 100.0 * done / self.total if self.total else 100.0
        rate = done / elapsed
        if self.unit == "bytes":
            amount = f"{_human_bytes(done)} of {_human_bytes(self.total)}, {_human_bytes(rate)}/s"
        else:
            amount = f"{done} of {self.total} {self.unit}, {rate:.0f}/s"
        eta = ""
        if not final and rate > 0 and self.total > done:
            eta = f", about {(self.total - done) / rate:.0f}s left"
        word = "done" if final else "progress"
        print(f"{self.label}: {word} {pct:5.1f}% ({amount}{eta})", file=self.stream, flush=True)
        self.lines += 1


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover
