"""``sundial credentials`` and ``sundial acls``: manage SASL users and ACL rules offline.

Both edit files under the data directory (or where ``sundial.credentials.file`` /
``sundial.acls.file`` point), located from the same ``server.properties`` and
``--override`` options as ``sundial serve``, or ``--data-dir``. They need no running
broker and take no lock: each change is an atomic file replacement, and a running
broker picks it up on its next check (credentials at the next login, ACLs within a
second).

    sundial credentials add alice [--password PW | --password-file F] [--mechanism SCRAM-SHA-256] [--iterations 8192]
    sundial credentials list
    sundial credentials delete alice [--mechanism SCRAM-SHA-512]

    sundial acls add --allow-principal User:alice --operation Read --topic orders [--resource-pattern-type prefixed]
    sundial acls add --allow-principal User:app --producer --topic orders
    sundial acls add --allow-principal User:app --consumer --topic orders --group billing
    sundial acls list [--principal User:alice] [--topic orders]
    sundial acls remove --allow-principal User:alice --operation Read --topic orders

Without ``--password`` the password is read from standard input (first line) when it
is not a terminal, else prompted for twice. Passwords never appear in the files:
only SCRAM salts and derived keys (:mod:`broker.sasl`). ``--producer`` and
``--consumer`` expand as in Kafka's ``kafka-acls``: producer = WRITE, DESCRIBE and
CREATE on the topic (plus IDEMPOTENT_WRITE on the cluster); consumer = READ and
DESCRIBE on the topic and READ on the group.
"""

from __future__ import annotations

import argparse
import functools
import getpass
import os
import sys

from sundial.broker.authorizer import CLUSTER_NAME, AclError, AclRule, AclStore, Permission, ResourceType, parse_operation
from sundial.broker.logsetup import configure_logging
from sundial.broker.sasl import DEFAULT_ITERATIONS, SCRAM_MECHANISMS, CredentialsError, CredentialStore
from sundial.config import ConfigError, load_broker_config


CREDENTIALS_EPILOG = """examples:
  sundial credentials add alice --config server.properties          (prompts for the password twice)
  printf '%s\\n' "$PW" | sundial credentials add app --data-dir ./sundial-data --mechanism SCRAM-SHA-512
  sundial credentials list --data-dir ./sundial-data
  sundial credentials delete alice --data-dir ./sundial-data

The store is sundial.credentials.file (default <first log dir>/credentials.json). It holds
SCRAM salts and derived keys, never passwords; a running broker uses a change at the next
login. PLAIN logins are checked against the same SCRAM entries. Kafka admin clients change
the same store over the wire (AlterUserScramCredentials).
exit codes: 0 done, 1 error (one line on stderr), 2 bad command line."""

ACLS_EPILOG = """examples:
  sundial acls add --allow-principal User:alice --operation Read --operation Describe --topic orders \\
      --data-dir ./sundial-data
  sundial acls add --allow-principal User:app --producer --topic orders --data-dir ./sundial-data
  sundial acls add --allow-principal User:app --consumer --topic orders --group billing --data-dir ./sundial-data
  sundial acls add --allow-principal User:etl --operation Read --topic logs. --resource-pattern-type prefixed \\
      --data-dir ./sundial-data
  sundial acls list --principal User:alice --data-dir ./sundial-data
  sundial acls remove --allow-principal User:alice --operation Read --topic orders --data-dir ./sundial-data

Rules are enforced when the broker sets authorizer.class.name (any value); super.users
bypass them and allow.everyone.if.no.acl.found opens resources without rules. The file is
sundial.acls.file (default <first log dir>/acls.json); a running broker reloads it within
a second. Kafka admin clients change the same rules over the wire (CreateAcls, DeleteAcls).
exit codes: 0 done, 1 error or no matching rule (one line on stderr), 2 bad command line."""


def _common(p) -> None:
    p.add_argument("--config", dest="config_file", default=None, metavar="FILE",
                   help="server.properties of the broker (to find its data directory)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker setting, as for sundial serve (repeatable)")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="data directory (default: the broker's first log dir)")


def _store_parser(subparsers, name: str, epilog: str, **texts):
    """The parser of an offline store's command and the ACTION sub-commands under it (each
    action's parser: ``actions.add_parser(name, **texts)``, with the same epilog)."""
    parser = subparsers.add_parser(name, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter, **texts)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=functools.partial(
        argparse.ArgumentParser, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter))
    actions.required = True
    return parser, actions


def add_credentials_parser(subparsers) -> None:
    """``sundial credentials``: the SCRAM users of the credentials store."""
    c, csub = _store_parser(subparsers, "credentials", CREDENTIALS_EPILOG,
                            help="manage SASL/SCRAM users (offline, no broker needed)",
                            description="Add, list and delete SASL users in the broker's credentials store. "
                                        "Works on the files; no running broker is needed.")
    add = csub.add_parser("add", help="add a user or change its password",
                          description="Store SCRAM credentials for a user (a new user, or a new password).")
    add.add_argument("user", help="the user name (the principal is User:<name>)")
    add.add_argument("--password", default=None,
                     help="the password (default: the first line of stdin, or a prompt on a terminal)")
    add.add_argument("--password-file", default=None, metavar="FILE",
                     help="read the password from the first line of this file")
    add.add_argument("--mechanism", action="append", choices=sorted(SCRAM_MECHANISMS), default=None,
                     help="SCRAM mechanism to store (repeatable; default both); PLAIN logins use these too")
    add.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS, metavar="N",
                     help=f"PBKDF2 iterations, 4096-16384 (default {DEFAULT_ITERATIONS})")
    _common(add)
    lst = csub.add_parser("list", help="list users and their mechanisms",
                          description="List the users of the credentials store and their SCRAM mechanisms.")
    _common(lst)
    dele = csub.add_parser("delete", help="delete a user (or only some of its mechanisms)",
                           description="Delete a user, or only its credentials for the given mechanisms.")
    dele.add_argument("user", help="the user name")
    dele.add_argument("--mechanism", action="append", choices=sorted(SCRAM_MECHANISMS), default=None,
                      help="delete only this mechanism's credentials (repeatable; default: the whole user)")
    _common(dele)
    c.set_defaults(func=run)


def add_acls_parser(subparsers) -> None:
    """``sundial acls``: the rules of the ACL store."""
    a, asub = _store_parser(subparsers, "acls", ACLS_EPILOG, help="manage ACL rules (offline, no broker needed)",
                            description="Add, list and remove ACL rules, with kafka-acls.sh's options. Works on "
                                        "the files; no running broker is needed.")
    for name, helptext in (("add", "add rules"), ("list", "list rules"), ("remove", "remove rules")):
        p = asub.add_parser(name, help=helptext, description=f"{helptext[0].upper()}{helptext[1:]} "
                                                             f"(kafka-acls.sh --{name}).")
        p.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL",
                       help="principal allowed, e.g. User:alice (repeatable)")
        p.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL",
                       help="principal denied; a DENY rule wins over any ALLOW (repeatable)")
        p.add_argument("--principal", action="append", default=[], metavar="PRINCIPAL",
                       help="list: only the rules of this principal (repeatable)")
        p.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                       help="host the ALLOW rules apply to (default: * every host)")
        p.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                       help="host the DENY rules apply to (default: * every host)")
        p.add_argument("--operation", action="append", default=[],
                       help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                            "AlterConfigs, IdempotentWrite, All (repeatable)")
        p.add_argument("--topic", action="append", default=[], help="a topic resource (repeatable)")
        p.add_argument("--group", action="append", default=[], help="a consumer group resource (repeatable)")
        p.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                       help="a transactional id resource (repeatable)")
        p.add_argument("--cluster", action="store_true", help="the cluster resource")
        p.add_argument("--resource-pattern-type", default="literal", choices=["literal", "prefixed"],
                       help="literal (default): the exact name; prefixed: every name starting with it")
        p.add_argument("--producer", action="store_true",
                       help="WRITE, DESCRIBE and CREATE on --topic, IDEMPOTENT_WRITE on the cluster")
        p.add_argument("--consumer", action="store_true", help="READ and DESCRIBE on --topic, READ on --group")
        _common(p)
    a.set_defaults(func=run)


def _locate(args, key: str, default_name: str) -> str:
    if args.data_dir:
        overrides = list(args.override) + [f"log.dirs={args.data_dir}"]
    else:
        overrides = list(args.override)
    config, _unknown = load_broker_config(args.config_file, overrides)
    return config[key] or os.path.join(os.path.abspath(config.log_dirs[0]), default_name)


def _read_password(args) -> str:
    if args.password is not None:
        return args.password
    if args.password_file:
        with open(args.password_file, encoding="utf-8") as fh:
            return fh.readline().rstrip("\r\n")
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass(f"Password for {args.user}: ")
    if getpass.getpass("Again: ") != first:
        raise CredentialsError("the passwords differ")
    return first


def run(args) -> int:
    configure_logging("warning")
    try:
        if args.command == "credentials":
            return _run_credentials(args)
        return _run_acls(args)
    except (CredentialsError, AclError, ConfigError, OSError) as exc:
        print(f"sundial {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"sundial {args.command}: error: interrupted", file=sys.stderr)
        return 130


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror[:1].lower()}{exc.strerror[1:]}{where}"
    return " ".join(str(exc).split())


def _run_credentials(args) -> int:
    store = CredentialStore(_locate(args, "sundial.credentials.file", "credentials.json"))
    if args.action == "add":
        mechanisms = tuple(args.mechanism or sorted(SCRAM_MECHANISMS))
        store.set_user(args.user, _read_password(args), mechanisms, args.iterations)
        print(f"stored {', '.join(mechanisms)} credentials for {args.user} ({args.iterations} iterations) "
              f"in {store.path}")
        return 0
    if args.action == "delete":
        if not store.delete_user(args.user, args.mechanism):
            print(f"sundial credentials: error: no user {args.user!r}", file=sys.stderr)
            return 1
        print(f"deleted {args.user}" + (f" ({', '.join(args.mechanism)})" if args.mechanism else ""))
        return 0
    users = store.users()
    if not users:
        print(f"no users in {store.path}")
    for user, mechs in users.items():
        print(f"{user}\t" + ", ".join(f"{m} (iterations={i})" for m, i in mechs))
    return 0


def _resources(args) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic]
    out += [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _rules_from_args(args) -> list[AclRule]:
    pattern = args.resource_pattern_type.upper()
    wanted: list[tuple[ResourceType, str, str]] = []  # (type, name, operation)
    resources = _resources(args)
    if args.producer:
        if not args.topic:
            raise AclError("--producer needs --topic")
        for t in args.topic:
            wanted += [(ResourceType.TOPIC, t, op) for op in ("WRITE", "DESCRIBE", "CREATE")]
        wanted.append((ResourceType.CLUSTER, CLUSTER_NAME, "IDEMPOTENT_WRITE"))
    if args.consumer:
        if not args.topic or not args.group:
            raise AclError("--consumer needs --topic and --group")
        for t in args.topic:
            wanted += [(ResourceType.TOPIC, t, op) for op in ("READ", "DESCRIBE")]
        wanted += [(ResourceType.GROUP, g, "READ") for g in args.group]
    if args.operation:
        if not resources:
            raise AclError("give a resource: --topic, --group, --transactional-id or --cluster")
        for rt, name in resources:
            wanted += [(rt, name, op) for op in args.operation]
    if not wanted:
        raise AclError("give --operation (with a resource), --producer or --consumer")
    rules = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, Permission.ALLOW),
                                          (args.deny_principal, args.deny_host, Permission.DENY)):
        for principal in principals:
            for host in hosts or ["*"]:
                for rt, name, op in wanted:
                    pt = "LITERAL" if rt == ResourceType.CLUSTER else pattern
                    rules.append(AclRule.make(principal, rt, name, op, permission, host, pt))
    if not rules:
        raise AclError("give --allow-principal or --deny-principal")
    return rules


def _run_acls(args) -> int:
    store = AclStore(_locate(args, "sundial.acls.file", "acls.json"))
    if args.action == "add":
        rules = _rules_from_args(args)
        added = store.add(rules)
        for r in rules:
            print(f"added: {r.describe()}")
        print(f"{added} new rule(s) in {store.path}")
        return 0
    if args.action == "remove":
        rules = set(_rules_from_args(args))
        removed = store.remove(lambda r: r in rules)
        for r in removed:
            print(f"removed: {r.describe()}")
        if not removed:
            print("sundial acls: error: no matching rule", file=sys.stderr)
            return 1
        return 0
    principals = set(args.principal) | set(args.allow_principal) | set(args.deny_principal)
    resources = set(_resources(args))
    ops = {parse_operation(o) for o in args.operation} if args.operation else None
    shown = 0
    for r in store.rules(force=True):
        if principals and r.principal not in principals:
            continue
        if resources and (r.resource_type, r.resource_name) not in resources:
            continue
        if ops and r.operation not in ops:
            continue
        print(r.describe())
        shown += 1
    if not shown:
        print(f"no rules in {store.path}" if not (principals or resources or ops) else "no matching rules")
    return 0
