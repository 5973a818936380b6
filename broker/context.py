"""What a request handler sees: the request's header facts and the broker's parts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .node import Broker


@dataclass(slots=True)
class RequestContext:
    """Per-request facts. ``broker`` gives access to config, logs, groups and the replica manager."""

    broker: Broker
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
    #: Client quotas (broker.quotas): the request's size, the time its handler ran (set by the
    #: connection while request quotas are configured), and the throttle a handler decided.
    request_bytes: int = 0
    handler_timer: Any = None
    throttle_time_ms: int = 0

    def now_ms(self) -> int:
        return self.broker.now_ms()
