"""What a request handler sees: the request's header facts and the broker's parts."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .server import Broker


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class RequestContext:
    """Per-request facts. ``broker`` gives access to config, logs, groups and the replica manager."""

    broker: "Broker"
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    client_port: int
    listener_name: str
    connection_id: str
    principal: str = "User:ANONYMOUS"
    header: Any = None
    connection: Any = None
    close_after_response: bool = False

    def now_ms(self) -> int:
        return self.broker.now_ms()

    def authorized(self, operation: int, resource_type: int, name: str, *, log_denied: bool = True) -> bool:
        """ACL check (:mod:`broker.authorizer`); always True when no authorizer is configured."""
        authorizer = getattr(self.broker, "authorizer", None)
        if authorizer is None:
            return True
        return authorizer.authorize(self.principal, self.client_host, operation, resource_type, name,
                                    log_denied=log_denied)

    def authorized_any(self, operation: int, resource_type: int) -> bool:
        """May the principal do ``operation`` on some resource of this type (Kafka's authorizeByResourceType)?"""
        authorizer = getattr(self.broker, "authorizer", None)
        if authorizer is None:
            return True
        return authorizer.authorize_any(self.principal, self.client_host, operation, resource_type)
