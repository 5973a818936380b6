"""DescribeClientQuotas (48) and AlterClientQuotas (49), v0-v1, as Kafka 4 answers them.

Authorization first, as Kafka: DescribeClientQuotas needs DESCRIBE_CONFIGS on the CLUSTER (a
refusal is CLUSTER_AUTHORIZATION_FAILED for the request, no entries), AlterClientQuotas
ALTER_CONFIGS on the CLUSTER (a refusal is CLUSTER_AUTHORIZATION_FAILED on every entry, nothing
changed). Matching, validation, the durable store and the enforcement are in
:mod:`broker.quotas_store` and :mod:`broker.quotas`; a bad filter answers its error code and
Kafka's message at the request level with null entries.
"""

from __future__ import annotations

import structlog

from sundial.protocol.errors import ErrorCode

from ..authorizer import CLUSTER_NAME, AclOperation, ResourceType, is_authorized
from ..quotas_store import Alteration, Component, QuotaRequestError, describe_entity, make_entity

logger = structlog.get_logger(__name__)

CLUSTER_DENIED = "Cluster authorization failed."


async def handle_describe_client_quotas(ctx, request):
    def failed(code: int, message: str):
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "entries": None}

    if not is_authorized(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
    components = [Component(c.entity_type, c.match_type, c.match) for c in (request.components or [])]
    try:
        found = ctx.broker.quotas.describe(components, bool(request.strict))
    except QuotaRequestError as exc:
        logger.info("describe_client_quotas_refused", error=ErrorCode(exc.code).name, reason=exc.message,
                    principal=ctx.principal, client=ctx.client_host)
        return failed(exc.code, exc.message)
    entries = [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
               for entity, values in found]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "entries": entries}


async def handle_alter_client_quotas(ctx, request):
    alterations = [Alteration(tuple((e.entity_type, e.entity_name) for e in (entry.entity or [])),
                              tuple((op.key, op.value, bool(op.remove)) for op in (entry.ops or [])))
                   for entry in (request.entries or [])]

    def entity_rows(pairs):
        return [{"entity_type": t, "entity_name": n} for t, n in pairs]

    if not is_authorized(ctx, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"throttle_time_ms": 0, "entries": [
            {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": CLUSTER_DENIED,
             "entity": entity_rows(a.pairs)} for a in alterations]}
    validate_only = bool(request.validate_only)
    results = await ctx.broker.quotas.alter(alterations, validate_only)
    for alt, result in zip(alterations, results):
        if result.code == ErrorCode.NONE and not validate_only:
            logger.info("client_quota_altered", entity=describe_entity(make_entity(alt.pairs)),
                        set={k: v for k, v, remove in alt.ops if not remove},
                        removed=[k for k, _v, remove in alt.ops if remove],
                        principal=ctx.principal, client_id=ctx.client_id, client=ctx.client_host)
        elif result.code != ErrorCode.NONE:
            logger.info("client_quota_alteration_refused", error=ErrorCode(result.code).name,
                        reason=result.message, principal=ctx.principal, client=ctx.client_host)
    return {"throttle_time_ms": 0, "entries": [
        {"error_code": r.code, "error_message": r.message, "entity": entity_rows(r.pairs)} for r in results]}
