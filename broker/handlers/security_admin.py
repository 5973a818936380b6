"""ACLs and SCRAM users over the admin API: CreateAcls, DescribeAcls, DeleteAcls (v0-3),
DescribeUserScramCredentials and AlterUserScramCredentials (v0).

They work on the same files as ``sundial acls`` and ``sundial credentials``
(``sundial.acls.file``, ``sundial.credentials.file``), through the same stores, so a
rule or user added either way is seen by the other. Every change holds the store's
update lock and replaces the file atomically (:mod:`broker.store_lock`); the running
broker applies it at once, without a restart.

As Kafka answers them (``AclApis``, ``AclControlManager``, ``ScramControlManager``):

* Authorization first: CreateAcls and DeleteAcls need ALTER on the CLUSTER resource,
  DescribeAcls DESCRIBE (which ALTER implies), DescribeUserScramCredentials DESCRIBE and
  AlterUserScramCredentials ALTER; a refusal is CLUSTER_AUTHORIZATION_FAILED (31) for the
  whole request (every creation, filter or user of it). One deviation: a refused
  DescribeUserScramCredentials carries the error per user (an empty user name when all
  were asked for), not at the request level as Kafka does, because librdkafka 2.x frees
  a pointer it does not own on a request-level error there and the client aborts.
* The ACL APIs need an authorizer (``authorizer.class.name``): without one they answer
  SECURITY_DISABLED (54) "No Authorizer is configured." and change nothing. The SCRAM
  APIs work either way (users are stored for SASL listeners, present or future).
* CreateAcls: each binding succeeds or fails alone with INVALID_REQUEST (42) and Kafka's
  message (a CLUSTER resource not named ``kafka-cluster``, an empty resource name, an
  UNKNOWN/ANY resource type or operation, a pattern type other than LITERAL/PREFIXED, a
  permission other than ALLOW/DENY, a principal without ``:``); creating an existing
  binding succeeds. Version 3 adds the USER resource type (rules on users, for delegation
  tokens, which Sundial stores and lists but has no use for).
* DescribeAcls / DeleteAcls take Kafka's binding filters (:class:`broker.authorizer.AclFilter`;
  ANY, MATCH, null names). An unknown element in a filter is INVALID_REQUEST ("Unknown
  patternFilter." / "Unknown entryFilter."). DeleteAcls reports, per filter, the rules it
  matched; all matched rules go in one atomic change. Version 0 has no pattern type: its
  filters mean LITERAL.
* DescribeUserScramCredentials: no users (null or empty) lists every user with a
  credential; a user named twice is DUPLICATE_RESOURCE (92), an unknown one
  RESOURCE_NOT_FOUND (91). Mechanisms are 1 (SCRAM-SHA-256) and 2 (SCRAM-SHA-512).
* AlterUserScramCredentials: one alteration per user per request (a second is
  DUPLICATE_RESOURCE for that user); an empty name or too few/many iterations (4096..16384)
  is UNACCEPTABLE_CREDENTIAL (93), an unknown mechanism UNSUPPORTED_SASL_MECHANISM (33),
  deleting a credential that does not exist RESOURCE_NOT_FOUND. An upsertion carries the
  client's salt and SaltedPassword; the store keeps the salt, StoredKey and ServerKey
  derived from them, never a password. The valid alterations are applied together.
"""

from __future__ import annotations

import asyncio

import structlog

from sundial.protocol.errors import ErrorCode

from ..authorizer import (
    CLUSTER_NAME,
    AclError,
    AclFilter,
    AclOperation,
    AclRule,
    PatternType,
    Permission,
    ResourceType,
    is_authorized,
)
from ..sasl import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    credential_from_salted_password,
)

logger = structlog.get_logger(__name__)

NO_AUTHORIZER = "No Authorizer is configured."
CLUSTER_DENIED = "Cluster authorization failed."
MECHANISM_CODES = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
MECHANISMS_BY_CODE = {code: name for name, code in MECHANISM_CODES.items()}


def _cluster_allowed(ctx, operation: AclOperation) -> bool:
    return is_authorized(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def _name(enum_cls, code: int) -> str:
    try:
        return enum_cls(code).name
    except ValueError:
        return "UNKNOWN"


# -- ACLs --------------------------------------------------------------------------------------
def rule_from_creation(c) -> AclRule:
    """An AclCreation → a rule; AclError carrying Kafka's message when it is not valid."""
    if c.resource_type == ResourceType.CLUSTER and c.resource_name != CLUSTER_NAME:
        raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not c.resource_name:
        raise AclError("Invalid empty resource name")
    if c.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY) or _name(ResourceType, c.resource_type) == "UNKNOWN":
        raise AclError(f"Invalid resourceType {_name(ResourceType, c.resource_type)}")
    if c.resource_pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError(f"Invalid patternType {_pattern_name(c.resource_pattern_type)}")
    if c.operation in (AclOperation.UNKNOWN, AclOperation.ANY) or _name(AclOperation, c.operation) == "UNKNOWN":
        raise AclError(f"Invalid operation {_name(AclOperation, c.operation)}")
    if c.permission_type not in (Permission.DENY, Permission.ALLOW):
        raise AclError(f"Invalid permissionType {_permission_name(c.permission_type)}")
    if ":" not in c.principal:
        raise AclError(f"Could not parse principal from `{c.principal}` (no colon is present separating the "
                       f"principal type from the principal name)")
    return AclRule.make(c.principal, ResourceType(c.resource_type), c.resource_name, AclOperation(c.operation),
                        Permission(c.permission_type), c.host, PatternType(c.resource_pattern_type))


def _pattern_name(code: int) -> str:
    return {1: "ANY", 2: "MATCH", 3: "LITERAL", 4: "PREFIXED"}.get(code, "UNKNOWN")


def _permission_name(code: int) -> str:
    return {1: "ANY", 2: "DENY", 3: "ALLOW"}.get(code, "UNKNOWN")


def _binding(rule: AclRule) -> dict:
    return {"resource_type": int(rule.resource_type), "resource_name": rule.resource_name,
            "pattern_type": int(rule.pattern_type), "principal": rule.principal, "host": rule.host,
            "operation": int(rule.operation), "permission_type": int(rule.permission)}


async def handle_create_acls(ctx, request):
    creations = list(request.creations or [])

    def all_failed(code, message):
        return {"throttle_time_ms": 0, "results": [{"error_code": code, "error_message": message} for _ in creations]}

    if not _cluster_allowed(ctx, AclOperation.ALTER):
        return all_failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return all_failed(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    results, valid = [], []
    for c in creations:
        try:
            rule = rule_from_creation(c)
        except AclError as exc:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc)})
            continue
        valid.append(rule)
        results.append({"error_code": ErrorCode.NONE, "error_message": None})
    if valid:
        added = await asyncio.to_thread(authorizer.store.add, valid)
        logger.info("acls_created", principal=ctx.principal, client_id=ctx.client_id, client=ctx.client_host,
                    new=added, rules=[r.describe() for r in valid])
    return {"throttle_time_ms": 0, "results": results}


def _filter(f, api_version: int) -> AclFilter:
    pattern = f.pattern_type_filter if api_version >= 1 else PatternType.LITERAL
    return AclFilter.from_codes(f.resource_type_filter, f.resource_name_filter, pattern, f.principal_filter,
                                f.host_filter, f.operation, f.permission_type)


async def handle_describe_acls(ctx, request):
    def failed(code, message):
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "resources": []}

    if not _cluster_allowed(ctx, AclOperation.DESCRIBE):
        return failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return failed(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    try:
        acl_filter = _filter(request, ctx.api_version)
    except AclError as exc:
        return failed(ErrorCode.INVALID_REQUEST, str(exc))
    grouped: dict[tuple, list[dict]] = {}
    for rule in await asyncio.to_thread(authorizer.store.matching, acl_filter):
        key = (int(rule.resource_type), rule.resource_name, int(rule.pattern_type))
        grouped.setdefault(key, []).append({"principal": rule.principal, "host": rule.host,
                                            "operation": int(rule.operation),
                                            "permission_type": int(rule.permission)})
    resources = [{"resource_type": rt, "resource_name": name, "pattern_type": pt, "acls": acls}
                 for (rt, name, pt), acls in sorted(grouped.items())]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "resources": resources}


async def handle_delete_acls(ctx, request):
    filters = list(request.filters or [])

    def all_failed(code, message):
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": code, "error_message": message, "matching_acls": []} for _ in filters]}

    if not _cluster_allowed(ctx, AclOperation.ALTER):
        return all_failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return all_failed(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    parsed: list[AclFilter | AclError] = []
    for f in filters:
        try:
            parsed.append(_filter(f, ctx.api_version))
        except AclError as exc:
            parsed.append(exc)
    valid = [f for f in parsed if isinstance(f, AclFilter)]
    matched = iter(await asyncio.to_thread(authorizer.store.remove_matching, valid) if valid else [])
    results, removed = [], set()
    for f in parsed:
        if isinstance(f, AclError):
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(f), "matching_acls": []})
            continue
        rules = next(matched)
        removed.update(rules)
        results.append({"error_code": ErrorCode.NONE, "error_message": None, "matching_acls": [
            {"error_code": ErrorCode.NONE, "error_message": None, **_binding(r)} for r in rules]})
    if removed:
        logger.info("acls_deleted", principal=ctx.principal, client_id=ctx.client_id, client=ctx.client_host,
                    rules=sorted(r.describe() for r in removed))
    return {"throttle_time_ms": 0, "filter_results": results}


# -- SCRAM users -------------------------------------------------------------------------------
async def handle_describe_user_scram_credentials(ctx, request):
    if not _cluster_allowed(ctx, AclOperation.DESCRIBE):
        # Kafka answers with a request-level error. librdkafka (confluent-kafka) frees memory it
        # does not own when that error is set and the client process aborts, so the error goes
        # into the per-user results instead: one per user asked for, or one with an empty user
        # name when all users were asked for.
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        names = dict.fromkeys(u.name for u in (request.users or [])) or {"": None}
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "results": [
            {"user": name, "error_code": code, "error_message": CLUSTER_DENIED, "credential_infos": []}
            for name in names]}
    users = await asyncio.to_thread(ctx.broker.credentials.users)
    wanted = [u.name for u in (request.users or [])]
    if not wanted:
        names = {u: False for u, mechs in users.items() if mechs}
    else:
        names = {}
        for name in wanted:
            names[name] = name in names  # True: asked twice
    results = []
    for name, twice in names.items():
        entry = {"user": name, "error_code": ErrorCode.NONE, "error_message": None, "credential_infos": []}
        if twice:
            entry["error_code"] = ErrorCode.DUPLICATE_RESOURCE
            entry["error_message"] = f"Cannot describe SCRAM credentials for the same user twice in a single " \
                                     f"request: {name}"
        elif not users.get(name):
            entry["error_code"] = ErrorCode.RESOURCE_NOT_FOUND
            entry["error_message"] = f"Attempt to describe a user credential that does not exist: {name}"
        else:
            entry["credential_infos"] = [{"mechanism": MECHANISM_CODES[m], "iterations": i}
                                         for m, i in users[name] if m in MECHANISM_CODES]
        results.append(entry)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "results": results}


def _check_alteration(name: str, mechanism_code: int, iterations: int | None = None):
    """(error code, message) when an alteration is invalid on its face, else None."""
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism_code not in MECHANISMS_BY_CODE:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if iterations is not None:
        if iterations < MIN_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
        if iterations > MAX_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return None


def plan_alterations(deletions, upsertions) -> tuple[dict, dict, dict]:
    """Kafka's per-user bookkeeping: (user → deletion, user → upsertion, user → (code, message))."""
    to_delete, to_upsert, errors = {}, {}, {}
    duplicate = (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
    for d in deletions:
        if d.name in errors:
            continue
        if to_delete.pop(d.name, None) is not None:
            errors[d.name] = duplicate
            continue
        problem = _check_alteration(d.name, d.mechanism)
        if problem:
            errors[d.name] = problem
        else:
            to_delete[d.name] = d
    for u in upsertions:
        if u.name in errors:
            continue
        if to_delete.pop(u.name, None) is not None or to_upsert.pop(u.name, None) is not None:
            errors[u.name] = duplicate
            continue
        problem = _check_alteration(u.name, u.mechanism, u.iterations)
        if problem:
            errors[u.name] = problem
        else:
            to_upsert[u.name] = u
    return to_delete, to_upsert, errors


async def handle_alter_user_scram_credentials(ctx, request):
    deletions = list(request.deletions or [])
    upsertions = list(request.upsertions or [])
    if not _cluster_allowed(ctx, AclOperation.ALTER):
        names = dict.fromkeys([d.name for d in deletions] + [u.name for u in upsertions])
        return {"throttle_time_ms": 0, "results": [
            {"user": n, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": CLUSTER_DENIED}
            for n in names]}
    to_delete, to_upsert, errors = plan_alterations(deletions, upsertions)
    new = {name: (MECHANISMS_BY_CODE[u.mechanism],
                  credential_from_salted_password(MECHANISMS_BY_CODE[u.mechanism], u.salt, u.salted_password,
                                                  u.iterations))
           for name, u in to_upsert.items()}

    def change(users):
        done = []
        for name, d in to_delete.items():
            mechanism = MECHANISMS_BY_CODE[d.mechanism]
            if mechanism not in users.get(name, {}):
                errors[name] = (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
                continue
            del users[name][mechanism]
            done.append((name, "deleted", mechanism))
        for name, (mechanism, credential) in new.items():
            users.setdefault(name, {})[mechanism] = credential
            done.append((name, "stored", mechanism))
        return done, bool(done)

    done = await asyncio.to_thread(ctx.broker.credentials.update, change) if (to_delete or new) else []
    results = [{"user": name, "error_code": ErrorCode.NONE, "error_message": None} for name, _what, _m in done]
    results += [{"user": name, "error_code": code, "error_message": message} for name, (code, message) in errors.items()]
    for name, what, mechanism in done:
        logger.info("scram_credential_altered", user=name, change=what, mechanism=mechanism,
                    principal=ctx.principal, client_id=ctx.client_id, client=ctx.client_host)
    return {"throttle_time_ms": 0, "results": results}
