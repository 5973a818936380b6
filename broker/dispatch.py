"""The handler table: API key → handler, and the versions the broker advertises.

Each module under ``broker/handlers`` exposes ``HANDLERS: dict[int, handler]`` and
optionally ``VERSIONS: dict[int, (min, max)]`` narrowing what the protocol package
can decode. The advertised range of an API is the intersection of the protocol's
``SUPPORTED_VERSIONS`` and the handler's ``VERSIONS``; an API without a handler is
not advertised at all (librdkafka, for one, sends whatever is advertised).
A module may also expose ``PIPELINED: dict[int, begin]``: ``begin(ctx, request)`` does
the in-order part of a request at once and returns an awaitable of its response, so
the connection can go on with the requests behind it (Produce with acks != 0).
"""

from __future__ import annotations

import importlib

import structlog

from protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from protocol.schema_codec import encode_api_versions_fallback

logger = structlog.get_logger(__name__)

HANDLER_MODULES = (
    "broker.handlers.api_versions",
    "broker.handlers.metadata",
    "broker.handlers.produce",
    "broker.handlers.fetch",
    "broker.handlers.list_offsets",
    "broker.handlers.admin",
    "broker.handlers.producer",
    "broker.handlers.groups",
    "broker.handlers.security_admin",
)


class Dispatcher:
    def __init__(self, modules=HANDLER_MODULES, extra_modules=()) -> None:
        self.handlers: dict[int, object] = {}
        self.advertised: dict[int, tuple[int, int]] = {}
        self.pipelined: dict[int, object] = {}
        for name in (*modules, *extra_modules):
            module = importlib.import_module(name)
            narrowed = getattr(module, "VERSIONS", {})
            for api_key, handler in module.HANDLERS.items():
                supported = SUPPORTED_VERSIONS.get(ApiKey(api_key))
                if supported is None:
                    logger.warning("handler_without_codec", api_key=api_key, module=name)
                    continue
                lo, hi = supported
                if api_key in narrowed:
                    lo, hi = max(lo, narrowed[api_key][0]), min(hi, narrowed[api_key][1])
                if lo > hi:
                    continue
                self.handlers[int(api_key)] = handler
                self.advertised[int(api_key)] = (lo, hi)
                begin = getattr(module, "PIPELINED", {}).get(api_key)
                if begin is not None:
                    self.pipelined[int(api_key)] = begin

    def api_versions_table(self) -> list[dict]:
        return [{"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in sorted(self.advertised.items())]

    def api_versions_fallback(self, correlation_id: int):
        """Frame for an ApiVersions request of a version we do not serve (v0 body, error 35)."""
        return encode_api_versions_fallback(correlation_id, self.api_versions_table())
