"""ApiVersions (18): the versions this broker serves, exactly what it implements.

Unsupported request versions never reach this handler: the connection answers them
with a v0 body carrying UNSUPPORTED_VERSION (35) and this table, so the client can
retry with a version both sides know. v3+ requests carry the client's software name
and version, which must match Kafka's pattern, else INVALID_REQUEST (42). The v3+
answer carries no feature tagged fields (they would hold their defaults, and
librdkafka 2.0.2 — Debian's kcat 1.7.1 — cannot skip tagged fields).
"""

from __future__ import annotations

import re

import structlog

from sundial.protocol.api_keys import ApiKey
from sundial.protocol.codec import encode_response_body
from sundial.protocol.errors import ErrorCode

logger = structlog.get_logger(__name__)

_SOFTWARE_RE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


async def handle_api_versions(ctx, request):
    error = ErrorCode.NONE
    if ctx.api_version >= 3:
        name = getattr(request, "client_software_name", None) or ""
        version = getattr(request, "client_software_version", None) or ""
        if not (_SOFTWARE_RE.match(name) and _SOFTWARE_RE.match(version)):
            logger.info("api_versions_bad_software_name", client=ctx.client_host, name=name, version=version)
            error = ErrorCode.INVALID_REQUEST
        elif ctx.connection is not None:
            ctx.connection.client_software = (name, version)
    dispatcher = ctx.broker.dispatcher
    cache = dispatcher.api_versions_bodies
    key = (ctx.api_version, error)
    body = cache.get(key)
    if body is None:  # the table is fixed once the broker runs: encode each version once
        body = cache[key] = encode_response_body(ApiKey.API_VERSIONS, ctx.api_version, {
            "error_code": error,
            "api_keys": dispatcher.api_versions_table(),
            "throttle_time_ms": 0,
        })
    return body
