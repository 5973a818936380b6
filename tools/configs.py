"""``sundial configs``: client quotas of users and client ids, as kafka-configs.sh manages them.

    sundial configs --bootstrap-server HOST:PORT --entity-type users --entity-name alice --describe
    sundial configs --bootstrap-server HOST:PORT --entity-type users --entity-default \\
        --alter --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
    sundial configs --bootstrap-server HOST:PORT --entity-type users --entity-name alice \\
        --entity-type clients --entity-name app --alter --delete-config request_percentage

Entities are built as kafka-configs.sh builds them: each ``--entity-type`` (``users`` or
``clients``) pairs with the ``--entity-name`` or ``--entity-default`` at the same position.
``--describe`` sends DescribeClientQuotas with a strict filter (only entities with exactly the
given types; a type without a name matches every entity of that type, defaults included) and
prints kafka-configs.sh's lines::

    Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0
    Quota configs for the default user-principal, client-id 'app' are request_percentage=25.0

``--alter`` sends AlterClientQuotas (one name per type) and prints ``Completed updating config
for user alice.`` (``Completed updating default config for users in the cluster.`` for a
default). Values are numbers (Kafka reads them as doubles); the keys are
``producer_byte_rate``, ``consumer_byte_rate`` and ``request_percentage``; SCRAM users are managed
with ``sundial credentials``. The broker's refusal (INVALID_REQUEST with Kafka's message, or
"not authorized") is one line and exit code 1.
"""

from __future__ import annotations

import argparse
import math
from decimal import Decimal

from kafka.errors import KafkaError
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from sundial.config.quotas import CLIENT_QUOTA_KEYS, UNSUPPORTED_QUOTA_KEYS

from .common import EXIT_USAGE, ClientSettings, ToolError, add_bootstrap_argument, add_client_arguments, \
    parse_key_values, read_client_properties, refusal, split_names, tool_command

EPILOG = """examples:
  sundial configs --bootstrap-server 127.0.0.1:9092 --entity-type users --describe
  sundial configs --bootstrap-server 127.0.0.1:9092 --entity-type users --entity-name alice \\
      --alter --add-config producer_byte_rate=1048576,request_percentage=50
  sundial configs --bootstrap-server 127.0.0.1:9092 --entity-type clients --entity-default \\
      --alter --add-config consumer_byte_rate=10485760
  sundial configs --bootstrap-server 127.0.0.1:9092 --entity-type users --entity-name alice \\
      --entity-type clients --entity-name app --alter --delete-config producer_byte_rate

keys: producer_byte_rate and consumer_byte_rate (bytes/s, whole numbers), request_percentage
(percent of one request handler per quota window). docs/quotas.md has the rules."""

#: kafka-configs.sh's entity types → the wire's entity types, and their words in its output.
ENTITY_TYPES = {"users": "user", "clients": "client-id"}
WORDS = {"user": "user-principal", "client-id": "client-id"}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "configs", help="client quotas of users and client ids (kafka-configs.sh --entity-type users|clients)",
        description="Describe or alter client quotas, like kafka-configs.sh with --entity-type users or clients.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bootstrap_argument(p)
    p.add_argument("--entity-type", action="append", required=True, choices=sorted(ENTITY_TYPES),
                   dest="entity_types", help="users or clients (twice for a user and client-id pair)")
    p.add_argument("--entity-name", action="append", dest="entity_names", metavar="NAME",
                   help="the user principal's name or the client id (pairs with --entity-type in order)")
    p.add_argument("--entity-default", action="append_const", const="", dest="entity_names",
                   help="the default user or client id instead of a name")
    actions = p.add_mutually_exclusive_group(required=True)
    actions.add_argument("--describe", action="store_true", help="print the quotas of the matching entities")
    actions.add_argument("--alter", action="store_true", help="set (--add-config) or remove (--delete-config)")
    p.add_argument("--add-config", action="append", metavar="K=V[,K=V...]", help="quotas to set")
    p.add_argument("--delete-config", action="append", metavar="K[,K...]", help="quotas to remove")
    add_client_arguments(p)
    p.set_defaults(func=run)


def entity_components(types: list[str], names: list[str]) -> list[tuple[str, str | None, bool]]:
    """(wire type, name or None for the default, named?) per --entity-type, kafka-configs.sh's pairing."""
    if len(names) > len(types):
        raise ToolError("more entity names specified than entity types", EXIT_USAGE)
    if len(set(types)) != len(types):
        raise ToolError("an --entity-type may be given once (users, clients, or both)", EXIT_USAGE)
    out = []
    for i, t in enumerate(types):
        if i < len(names):
            out.append((ENTITY_TYPES[t], names[i] or None, True))
        else:
            out.append((ENTITY_TYPES[t], None, False))
    return out


def java_double(value: float) -> str:
    """A double as Java's ``Double.toString`` writes it (what kafka-configs.sh prints): plain
    decimals from 10^-3 to 10^7, else the shortest digits in ``d.dddE<n>`` form."""
    value = float(value)
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{len(digits) - 1 + exponent}"


def describe_line(entity: list[tuple[str, str | None]], values: list[tuple[str, float]]) -> str:
    names = dict(entity)
    parts = [f"{WORDS[t]} '{names[t]}'" if names[t] is not None else f"the default {WORDS[t]}"
             for t in ("user", "client-id") if t in names]
    parts += [f"{t} '{n}'" if n is not None else f"the default {t}" for t, n in entity if t not in WORDS]
    return f"Quota configs for {', '.join(parts)} are {', '.join(f'{k}={java_double(v)}' for k, v in values)}"


def _send(admin, request):
    async def ask():
        return await admin._manager.send(request)

    return admin._manager.run(ask)


def describe(admin, components) -> list[str]:
    component = DescribeClientQuotasRequest.ComponentData
    request = DescribeClientQuotasRequest(
        components=[component(entity_type=t, match_type=(0 if n is not None else 1) if named else 2, match=n)
                    for t, n, named in components], strict=True)
    try:
        response = _send(admin, request)
    except KafkaError as exc:
        raise refusal(exc, operation="DESCRIBE_CONFIGS", resource="the cluster", doing="describe client quotas") \
            from None
    if response.error_code:
        raise refusal(response.error_code, operation="DESCRIBE_CONFIGS", resource="the cluster",
                      doing="describe client quotas", message=response.error_message)
    lines = []
    for entry in response.entries or []:
        entity = [(e.entity_type, e.entity_name) for e in entry.entity]
        lines.append(describe_line(entity, [(v.key, v.value) for v in entry.values]))
    return lines


def parse_ops(add: list[str] | None, delete: list[str] | None) -> list[tuple[str, float, bool]]:
    to_add = parse_key_values(add, "config") if add else {}
    to_delete = split_names(delete) if delete else []
    if not to_add and not to_delete:
        raise ToolError("--alter needs --add-config or --delete-config", EXIT_USAGE)
    known = set(CLIENT_QUOTA_KEYS) | set(UNSUPPORTED_QUOTA_KEYS)
    unknown = [k for k in [*to_add, *to_delete] if k not in known]
    if unknown:
        raise ToolError(f"only quota configs can be altered here; unexpected config names: {', '.join(unknown)} "
                        f"(quota keys: {', '.join(CLIENT_QUOTA_KEYS)}; SCRAM users: sundial credentials)",
                        EXIT_USAGE)
    both = sorted(set(to_add) & set(to_delete))
    if both:
        raise ToolError(f"a config cannot be both added and deleted: {', '.join(both)}", EXIT_USAGE)
    ops = []
    for key, text in to_add.items():
        try:
            value = float(text)
        except ValueError:
            raise ToolError(f"the value of {key} must be a number, not {text!r}", EXIT_USAGE) from None
        if not math.isfinite(value):
            raise ToolError(f"the value of {key} must be a finite number", EXIT_USAGE)
        ops.append((key, value, False))
    ops += [(key, 0.0, True) for key in to_delete]
    return ops


def alter(admin, components, ops) -> None:
    entry = AlterClientQuotasRequest.EntryData
    request = AlterClientQuotasRequest(entries=[entry(
        entity=[entry.EntityData(entity_type=t, entity_name=n) for t, n, _named in components],
        ops=[entry.OpData(key=k, value=v, remove=r) for k, v, r in ops])], validate_only=False)
    try:
        response = _send(admin, request)
    except KafkaError as exc:
        raise refusal(exc, operation="ALTER_CONFIGS", resource="the cluster", doing="alter client quotas") from None
    for entry in response.entries:
        if entry.error_code:
            raise refusal(entry.error_code, operation="ALTER_CONFIGS", resource="the cluster",
                          doing="alter client quotas", message=entry.error_message)


@tool_command("configs")
def run(args) -> int:
    components = entity_components(args.entity_types, args.entity_names or [])
    if args.alter:
        if not all(named for _t, _n, named in components):
            raise ToolError("--alter needs an --entity-name or --entity-default for every --entity-type", EXIT_USAGE)
        ops = parse_ops(args.add_config, args.delete_config)
    elif args.add_config or args.delete_config:
        raise ToolError("--add-config and --delete-config go with --alter", EXIT_USAGE)
    settings = ClientSettings(args.bootstrap_server, timeout_ms=args.timeout_ms,
                              extra=read_client_properties(args.command_config), client_id="configs-tool")
    with settings.admin_session() as admin:
        if args.describe:
            for line in describe(admin, components):
                print(line)
            return 0
        alter(admin, components, ops)
    head_type = args.entity_types[0]
    head_name = components[0][1]
    if head_name is not None:
        print(f"Completed updating config for {head_type[:-1]} {head_name}.")
    else:
        print(f"Completed updating default config for {head_type} in the cluster.")
    return 0
