"""ACL authorizer: Kafka's ``AclAuthorizer`` rules over a small rules file.

Turned on by any non-empty ``authorizer.class.name`` (Kafka's
``kafka.security.authorizer.AclAuthorizer`` or
``org.apache.kafka.metadata.authorizer.StandardAuthorizer`` both mean "this one").
Without it every request is allowed, as in Kafka.

A rule (Kafka's ``AclBinding``) is: principal (``User:alice`` or ``User:*``), host
(an IP or ``*``), resource type (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID), pattern
type (LITERAL, where the name ``*`` matches every resource, or PREFIXED), resource
name, operation and permission (ALLOW or DENY). A request is decided as Kafka does:

1. principals in ``super.users`` (``User:a;User:b``) are allowed everything;
2. the rules *for the resource* are those whose pattern matches it, whatever their
   principal; if there are none, ``allow.everyone.if.no.acl.found`` decides
   (default false: DENY by default);
3. a matching DENY rule (principal or ``User:*``, host or ``*``, operation or ALL)
   wins;
4. otherwise a matching ALLOW rule allows; DESCRIBE is implied by READ, WRITE,
   DELETE and ALTER, DESCRIBE_CONFIGS by ALTER_CONFIGS, and ALL covers everything.

Rules file (``sundial.acls.file``, default ``<first log dir>/acls.json``), JSON,
written atomically by ``sundial acls``::

    {"version": 1, "acls": [{"principal": "User:alice", "host": "*", "resource_type": "TOPIC",
                             "pattern_type": "LITERAL", "resource_name": "orders",
                             "operation": "READ", "permission": "ALLOW"}]}

The broker re-reads the file when it changes (checked at most once a second), so
rules added while it runs apply within a second. Denials are logged
(``authorization_denied``) with principal, host, operation and resource, like
Kafka's authorizer log, and counted per resource type and operation
(:meth:`Authorizer.denial_counts`, the metric ``sundial_authorization_denials_total``).
Checks that only filter what a response shows (``log_denied=False``: Metadata leaving out
topics the principal may not describe, authorized-operations fields) are neither logged nor
counted, as Kafka's ``logIfDenied=false`` checks are not logged.
"""

from __future__ import annotations

import enum
import json
import os
import threading
import time
from dataclasses import asdict, dataclass

import structlog

from sundial.config.components import AuthorizerConfig
from sundial.storage.files import write_file_atomically

from .store_lock import update_lock

logger = structlog.get_logger(__name__)

STORE_VERSION = 1
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
REFRESH_INTERVAL_S = 1.0


class ResourceType(enum.IntEnum):
    """Kafka's ``ResourceType`` codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclOperation(enum.IntEnum):
    """Kafka's ``AclOperation`` codes (also the bit positions of authorized-operations fields)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PatternType(enum.IntEnum):
    LITERAL = 3
    PREFIXED = 4


class Permission(enum.IntEnum):
    DENY = 2
    ALLOW = 3


#: Filter-only codes (Kafka's ``PatternType.ANY``/``MATCH`` and ``AclPermissionType.ANY``).
PATTERN_ANY, PATTERN_MATCH = 1, 2
PERMISSION_ANY = 1


_IMPLIED_BY = {
    AclOperation.DESCRIBE: {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                            AclOperation.ALTER},
    AclOperation.DESCRIBE_CONFIGS: {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS},
}


class AclError(Exception):
    """A rule or the rules file is invalid."""


def _enum_value(enum_cls, text, what: str):
    if isinstance(text, enum_cls):
        return text
    key = str(text).strip().upper().replace("-", "_")
    key = {"IDEMPOTENTWRITE": "IDEMPOTENT_WRITE", "DESCRIBECONFIGS": "DESCRIBE_CONFIGS",
           "ALTERCONFIGS": "ALTER_CONFIGS", "CLUSTERACTION": "CLUSTER_ACTION",
           "TRANSACTIONALID": "TRANSACTIONAL_ID", "CREATETOKENS": "CREATE_TOKENS",
           "DESCRIBETOKENS": "DESCRIBE_TOKENS", "DELEGATIONTOKEN": "DELEGATION_TOKEN"}.get(key, key)
    try:
        return enum_cls[key]
    except KeyError:
        names = ", ".join(m.name for m in enum_cls if m.name not in ("UNKNOWN", "ANY"))
        raise AclError(f"unknown {what} {text!r} (choose from {names})") from None


def parse_operation(text) -> AclOperation:
    """``Read``, ``IdempotentWrite``, ``DESCRIBE_CONFIGS`` … → AclOperation (raises AclError)."""
    return _enum_value(AclOperation, text, "operation")


def check_principal(principal: str) -> str:
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise AclError(f"principal {principal!r} must look like User:<name> (or User:*)")
    return principal


@dataclass(frozen=True, slots=True)
class AclRule:
    principal: str
    host: str
    resource_type: ResourceType
    pattern_type: PatternType
    resource_name: str
    operation: AclOperation
    permission: Permission

    @classmethod
    def make(cls, principal: str, resource_type, resource_name: str, operation, permission="ALLOW",
             host: str = WILDCARD, pattern_type="LITERAL") -> "AclRule":
        rt = _enum_value(ResourceType, resource_type, "resource type")
        if rt in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise AclError(f"resource type {rt.name} cannot be used in a rule")
        pt = _enum_value(PatternType, pattern_type, "pattern type")
        op = _enum_value(AclOperation, operation, "operation")
        if op in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise AclError(f"operation {op.name} cannot be used in a rule")
        perm = _enum_value(Permission, permission, "permission")
        if not resource_name:
            raise AclError("resource name must not be empty")
        if rt == ResourceType.CLUSTER and resource_name != CLUSTER_NAME:
            raise AclError(f"the cluster resource is named {CLUSTER_NAME!r}")
        if pt == PatternType.PREFIXED and resource_name == WILDCARD:
            raise AclError("a PREFIXED rule cannot use the name '*'")
        return cls(check_principal(principal), host or WILDCARD, rt, pt, resource_name, op, perm)

    def to_json(self) -> dict:
        d = asdict(self)
        for key in ("resource_type", "pattern_type", "operation", "permission"):
            d[key] = d[key].name
        return d

    @classmethod
    def from_json(cls, obj: dict) -> "AclRule":
        try:
            return cls.make(obj["principal"], obj["resource_type"], obj["resource_name"], obj["operation"],
                            obj.get("permission", "ALLOW"), obj.get("host", WILDCARD),
                            obj.get("pattern_type", "LITERAL"))
        except (KeyError, TypeError) as exc:
            raise AclError(f"malformed rule {obj!r}: {exc}") from None

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name == WILDCARD or self.resource_name == name
        return name.startswith(self.resource_name)

    def describe(self) -> str:
        return (f"{self.permission.name} {self.principal} from host {self.host} to {self.operation.name} "
                f"{self.resource_type.name} {self.pattern_type.name}:{self.resource_name}")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's ``AclBindingFilter`` (DescribeAcls, DeleteAcls): which rules a request means.

    ``resource_type`` ANY, ``operation`` ANY, ``permission`` ANY (1) and a None name,
    principal or host match every rule. ``pattern_type`` ANY (1) matches rules of either
    pattern type by exact name; MATCH (2) matches the rules that would apply to a resource
    of that name (the literal name, the literal ``*`` and every prefix of it); LITERAL (3)
    and PREFIXED (4) match that pattern type only.
    """

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: int

    @classmethod
    def from_codes(cls, resource_type: int, resource_name, pattern_type: int, principal, host,
                   operation: int, permission: int) -> "AclFilter":
        """From wire codes; AclError with Kafka's words for an unknown element."""
        try:
            rt = ResourceType(resource_type)
        except ValueError:
            rt = ResourceType.UNKNOWN
        if rt == ResourceType.UNKNOWN or pattern_type not in (PATTERN_ANY, PATTERN_MATCH, PatternType.LITERAL,
                                                                PatternType.PREFIXED):
            raise AclError("Unknown patternFilter.")
        try:
            op = AclOperation(operation)
        except ValueError:
            op = AclOperation.UNKNOWN
        if op == AclOperation.UNKNOWN or permission not in (PERMISSION_ANY, Permission.DENY, Permission.ALLOW):
            raise AclError("Unknown entryFilter.")
        return cls(rt, resource_name, pattern_type, principal, host, op, permission)

    def matches(self, rule: AclRule) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != rule.resource_type:
            return False
        if self.pattern_type not in (PATTERN_ANY, PATTERN_MATCH) and self.pattern_type != rule.pattern_type:
            return False
        name = self.resource_name
        if name is not None:
            if self.pattern_type == PATTERN_ANY or self.pattern_type == rule.pattern_type:
                if name != rule.resource_name:
                    return False
            elif rule.pattern_type == PatternType.LITERAL:
                if name != rule.resource_name and rule.resource_name != WILDCARD:
                    return False
            elif not name.startswith(rule.resource_name):
                return False
        return ((self.principal is None or self.principal == rule.principal)
                and (self.host is None or self.host == rule.host)
                and (self.operation == AclOperation.ANY or self.operation == rule.operation)
                and (self.permission == PERMISSION_ANY or self.permission == rule.permission))


class AclStore:
    """The rules file: load (refreshing on change), add, remove, list.

    Changes hold the store's update lock (:mod:`broker.store_lock`) from reading the file
    to replacing it, so the broker's admin API and ``sundial acls`` never lose each
    other's rules; the broker sees a change made through it at once, and a change made
    by another process within a second.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        self._rules: tuple[AclRule, ...] = ()
        self._by_type: dict[ResourceType, tuple[AclRule, ...]] = {}

    def _file_stamp(self):
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def rules(self, *, force: bool = False) -> tuple[AclRule, ...]:
        now = time.monotonic()
        if force or now - self._checked >= REFRESH_INTERVAL_S or self._checked == 0.0:
            self._checked = now
            stamp = self._file_stamp()
            if stamp != self._stamp:
                with self._lock:
                    self._reload(stamp)
        return self._rules

    def rules_for_type(self, resource_type: ResourceType) -> tuple[AclRule, ...]:
        self.rules()
        return self._by_type.get(resource_type, ())

    def _reload(self, stamp) -> None:
        if stamp is None:
            rules: list[AclRule] = []
        else:
            try:
                rules = self._parse(self._read())
            except AclError as exc:
                # Keep the previous rules: a half-edited file must not open or close everything.
                logger.error("acls_file_unreadable", path=self.path, error=str(exc))
                self._stamp = stamp
                return
        self._rules = tuple(rules)
        by_type: dict[ResourceType, list[AclRule]] = {}
        for r in rules:
            by_type.setdefault(r.resource_type, []).append(r)
        self._by_type = {k: tuple(v) for k, v in by_type.items()}
        if self._stamp is not None or rules:
            logger.info("acls_loaded", path=self.path, rules=len(rules))
        self._stamp = stamp

    def _read(self):
        try:
            with open(self.path, "rb") as fh:
                return json.loads(fh.read().decode("utf-8"))
        except (OSError, ValueError) as exc:
            raise AclError(f"cannot read {self.path}: {exc}") from None

    @staticmethod
    def _parse(doc) -> list[AclRule]:
        if not isinstance(doc, dict) or doc.get("version") != STORE_VERSION:
            raise AclError("unsupported ACL file version")
        raw = doc.get("acls") or []
        if not isinstance(raw, list):
            raise AclError("'acls' must be a list")
        return [AclRule.from_json(r) for r in raw]

    def _current_for_update(self) -> list[AclRule]:
        if not os.path.exists(self.path):
            return []
        return self._parse(self._read())

    def _save(self, rules: list[AclRule]) -> None:
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        data = json.dumps({"version": STORE_VERSION, "acls": [r.to_json() for r in rules]}, indent=2).encode() + b"\n"
        write_file_atomically(self.path, data, mode=0o600)
        self._stamp = None
        self._checked = 0.0

    def add(self, new_rules: list[AclRule]) -> int:
        """Add the rules that are not there yet (one atomic replacement); how many were new."""
        with update_lock(self.path):
            rules = self._current_for_update()
            added = 0
            for r in new_rules:
                if r not in rules:
                    rules.append(r)
                    added += 1
            if added or not os.path.exists(self.path):
                self._save(rules)
        return added

    def remove(self, predicate) -> list[AclRule]:
        with update_lock(self.path):
            rules = self._current_for_update()
            removed = [r for r in rules if predicate(r)]
            if removed:
                self._save([r for r in rules if not predicate(r)])
        return removed

    def remove_matching(self, filters: list[AclFilter]) -> list[list[AclRule]]:
        """DeleteAcls: the rules each filter matches (a rule may be matched by several), all
        removed in one atomic replacement."""
        with update_lock(self.path):
            rules = self._current_for_update()
            matched = [[r for r in rules if f.matches(r)] for f in filters]
            gone = {r for group in matched for r in group}
            if gone:
                self._save([r for r in rules if r not in gone])
        return matched

    def matching(self, acl_filter: AclFilter) -> list[AclRule]:
        """DescribeAcls: the current rules the filter matches."""
        return [r for r in self.rules(force=True) if acl_filter.matches(r)]


class Authorizer:
    """Decides ``(principal, host, operation, resource)`` with Kafka's rules (module doc)."""

    def __init__(self, store: AclStore, *, super_users: str | None = None,
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.store = store
        self.super_users = frozenset(p.strip() for p in (super_users or "").split(";") if p.strip())
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._denials: dict[tuple[str, str], int] = {}   # (resource type, operation) -> denials
        store.rules(force=True)

    @classmethod
    def from_config(cls, config: AuthorizerConfig, data_dir: str) -> "Authorizer":
        """The authorizer of ``config`` (the broker's ``authorizer`` view), its rules in ``acls_path``."""
        path = config.acls_path(data_dir)
        auth = cls(AclStore(path), super_users=config.super_users,
                   allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found)
        logger.info("authorizer_enabled", acls_file=path, rules=len(auth.store.rules()),
                    super_users=sorted(auth.super_users),
                    allow_everyone_if_no_acl_found=auth.allow_everyone_if_no_acl_found)
        return auth

    @staticmethod
    def _principal_matches(rule: AclRule, principal: str) -> bool:
        return rule.principal == principal or rule.principal == WILDCARD_PRINCIPAL

    @staticmethod
    def _host_matches(rule: AclRule, host: str) -> bool:
        return rule.host == WILDCARD or rule.host == host

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str, *, log_denied: bool = True) -> bool:
        if principal in self.super_users:
            return True
        rules = [r for r in self.store.rules_for_type(resource_type) if r.matches_resource(resource_type, name)]
        if not rules:
            allowed = self.allow_everyone_if_no_acl_found
        else:
            allowed = self._decide(rules, principal, host, operation)
        if not allowed and log_denied:
            self.denied(principal, host, operation, resource_type, name)
        return allowed

    def denied(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
               name: str) -> None:
        """Log and count one refusal (also for a handler that decides from several checks)."""
        key = (resource_type.name, operation.name)
        self._denials[key] = self._denials.get(key, 0) + 1
        logger.info("authorization_denied", principal=principal, client=host, operation=operation.name,
                    resource_type=resource_type.name, resource=name)

    def denial_counts(self) -> list[tuple[str, str, int]]:
        """(resource type, operation, denials) for the metrics (call on the loop)."""
        return [(rt, op, n) for (rt, op), n in sorted(self._denials.items())]

    def _decide(self, rules, principal: str, host: str, operation: AclOperation) -> bool:
        for r in rules:
            if (r.permission == Permission.DENY and self._principal_matches(r, principal)
                    and self._host_matches(r, host) and r.operation in (operation, AclOperation.ALL)):
                return False
        allowed_ops = _IMPLIED_BY.get(operation, {operation})
        for r in rules:
            if (r.permission == Permission.ALLOW and self._principal_matches(r, principal)
                    and self._host_matches(r, host)
                    and (r.operation == AclOperation.ALL or r.operation in allowed_ops)):
                return True
        return False

    def authorize_any(self, principal: str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """Kafka's ``authorizeByResourceType``: may the principal do ``operation`` on *some* resource
        of this type? (Used for IdempotentWrite: WRITE on any topic implies it, KIP-679.)"""
        if principal in self.super_users:
            return True
        rules = self.store.rules_for_type(resource_type)
        if not rules:
            return self.allow_everyone_if_no_acl_found

        def applies(r: AclRule) -> bool:
            return (self._principal_matches(r, principal) and self._host_matches(r, host)
                    and r.operation in (operation, AclOperation.ALL))

        denies = [r for r in rules if r.permission == Permission.DENY and applies(r)]
        if any(r.pattern_type == PatternType.LITERAL and r.resource_name == WILDCARD for r in denies):
            return False
        for r in rules:
            if r.permission != Permission.ALLOW or not applies(r):
                continue
            name = r.resource_name
            if r.pattern_type == PatternType.LITERAL and name != WILDCARD:
                if not any(d.matches_resource(resource_type, name) for d in denies):
                    return True
            elif r.pattern_type == PatternType.PREFIXED:
                if not any(d.pattern_type == PatternType.PREFIXED and name.startswith(d.resource_name)
                           for d in denies):
                    return True
            else:  # literal wildcard allow
                return True
        return False


def is_authorized(ctx, operation: AclOperation, resource_type: ResourceType, name: str, *,
                  log_denied: bool = True) -> bool:
    """The check handlers make: True when no authorizer is configured (any context-like object)."""
    authorizer = getattr(getattr(ctx, "broker", None), "authorizer", None)
    if authorizer is None:
        return True
    return authorizer.authorize(getattr(ctx, "principal", "User:ANONYMOUS"), getattr(ctx, "client_host", ""),
                                operation, resource_type, name, log_denied=log_denied)


#: Kafka's ``AclEntry.supportedOperations``: the operations an authorized-operations field
#: (KIP-430) reports on, per resource type. GROUP's config operations came with group configs.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}

#: Kafka's int32 for an authorized-operations field the client did not ask for.
OPERATIONS_NOT_REQUESTED = -(2**31)


def authorized_operations(ctx, resource_type: ResourceType, name: str) -> int:
    """Kafka's ``AuthHelper.authorizedOperations``: the bit set (bit = AclOperation code) of the
    resource type's supported operations the principal may perform on this resource; every
    supported operation when no authorizer is configured."""
    bits = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if is_authorized(ctx, operation, resource_type, name, log_denied=False):
            bits |= 1 << operation
    return bits


def record_denial(ctx, operation: AclOperation, resource_type: ResourceType, name: str) -> None:
    """A handler refused a request from checks made with ``log_denied=False``: log and count it once."""
    authorizer = getattr(getattr(ctx, "broker", None), "authorizer", None)
    if authorizer is not None:
        authorizer.denied(getattr(ctx, "principal", "User:ANONYMOUS"), getattr(ctx, "client_host", ""), operation,
                          resource_type, name)


def is_authorized_any(ctx, operation: AclOperation, resource_type: ResourceType) -> bool:
    authorizer = getattr(getattr(ctx, "broker", None), "authorizer", None)
    if authorizer is None:
        return True
    return authorizer.authorize_any(getattr(ctx, "principal", "User:ANONYMOUS"), getattr(ctx, "client_host", ""),
                                    operation, resource_type)
