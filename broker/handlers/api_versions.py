"""ApiVersions (18): the versions this broker serves, exactly what it implements.

Unsupported request versions never reach this handler: the connection answers them
with a v0 body carrying UNSUPPORTED_VERSION (35) and this table, so the client can
retry with a version both sides know. v3+ requests carry the client's software name
and version, which must match Kafka's pattern, else INVALID_REQUEST (42).

Features (KIP-584): a v3+ answer carries the finalized ``group.version`` level 1 (the
consumer rebalance protocol, KIP-848, as a Kafka 4 broker reports it) in its tagged
fields, and a v4 answer also lists it among the supported features (Kafka leaves a
feature whose minimum is 0 out of v3 answers); ``share.version`` level 1 (share groups, KIP-932)
is finalized once ShareFetch is served. One exception, where Sundial is kinder
than Kafka: a client that names itself librdkafka older than 2.2.0 (Debian's kcat 1.7.1
runs 2.0.2) misreads any tagged field, so its v3 answer carries none; such a client
cannot use the consumer protocol anyway.
"""

from __future__ import annotations

import re

import structlog

from sundial.protocol.api_keys import ApiKey
from sundial.protocol.codec import encode_response_body
from sundial.protocol.errors import ErrorCode
from sundial.protocol.features import GROUP_VERSION, SHARE_VERSION, api_versions_feature_fields

logger = structlog.get_logger(__name__)

_SOFTWARE_RE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")
#: What this broker can run (the levels in force: :func:`finalized_features`).
SUPPORTED_FEATURES = {GROUP_VERSION: (0, 1), SHARE_VERSION: (0, 1)}
#: Bumped whenever the finalized set a build can answer changes (2: share.version added), since a Java
#: client keeps the set of the highest epoch it has seen across reconnections to an upgraded broker.
FINALIZED_FEATURES_EPOCH = 2


def finalized_features(broker) -> dict[str, int]:
    """``group.version`` 1 while the consumer protocol is enabled (``group.coordinator.rebalance.protocols``);
    ``share.version`` 1 once share groups are served whole: ShareFetch (78) has a route, not only the
    membership APIs (a Java client given share.version 1 would otherwise fetch from a broker that
    cannot answer)."""
    config = getattr(broker, "config", None)
    enabled = config is None or config.group_coordinator.consumer_protocol_enabled
    dispatcher = getattr(broker, "dispatcher", None)
    share = dispatcher is not None and int(ApiKey.SHARE_FETCH) in dispatcher.advertised
    return {GROUP_VERSION: 1 if enabled else 0, SHARE_VERSION: 1 if share else 0}
#: librdkafka releases before this one skip one byte too few per tagged field.
_FIRST_LIBRDKAFKA_READING_TAGS = (2, 2, 0)
_LIBRDKAFKA_VERSION_RE = re.compile(r"(?:^|-rdkafka-)(\d+)\.(\d+)\.(\d+)")


def _misreads_tagged_fields(name: str, version: str) -> bool:
    """A client announcing librdkafka (its own name, or a wrapper's ``...-rdkafka-X.Y.Z``)
    older than 2.2.0."""
    if name != "librdkafka" and "-rdkafka-" not in version:
        return False
    found = _LIBRDKAFKA_VERSION_RE.search(version)
    return found is not None and tuple(int(x) for x in found.groups()) < _FIRST_LIBRDKAFKA_READING_TAGS


async def handle_api_versions(ctx, request):
    error = ErrorCode.NONE
    features = ctx.api_version >= 3
    if ctx.api_version >= 3:
        name = getattr(request, "client_software_name", None) or ""
        version = getattr(request, "client_software_version", None) or ""
        if not (_SOFTWARE_RE.match(name) and _SOFTWARE_RE.match(version)):
            logger.info("api_versions_bad_software_name", client=ctx.client_host, name=name, version=version)
            error = ErrorCode.INVALID_REQUEST
        else:
            features = not _misreads_tagged_fields(name, version)
            if ctx.connection is not None:
                ctx.connection.client_software = (name, version)
    dispatcher = ctx.broker.dispatcher
    cache = dispatcher.api_versions_bodies
    key = (ctx.api_version, error, features)
    body = cache.get(key)
    if body is None:  # the table is fixed once the broker runs: encode each version once
        fields = api_versions_feature_fields(ctx.api_version, SUPPORTED_FEATURES, finalized_features(ctx.broker),
                                             FINALIZED_FEATURES_EPOCH) if features else {}
        body = cache[key] = encode_response_body(ApiKey.API_VERSIONS, ctx.api_version, {
            "error_code": error,
            "api_keys": dispatcher.api_versions_table(),
            "throttle_time_ms": 0,
            **fields,
        })
    return body
