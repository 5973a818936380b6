"""Refusals an operator can see: one info line per connection and kind of refusal.

When a client asks for something Sundial does not serve, the client gets Kafka's error
code (or, for an API or version that is not advertised, the closed connection Kafka gives
it) and the broker logs one ``info`` line naming the client, its ``client_id`` (and
software, when ApiVersions v3 told it), the API and the reason, so that nobody needs a
client's debug logs to learn why it fails. Clients retry what fails, so a kind of refusal
is logged once per connection, not once per request: the connections seen are kept in a
weak map and forgotten with them.

Kinds used: ``api:<key>:v<version>`` (an API or version not advertised; event
``request_version_unsupported``), ``find_coordinator:key_type:<n>`` (no coordinator of
that type), ``config_resource:<api>:<type>`` (a config resource type not handled),
``alter_broker_config`` (broker settings are static).
"""

from __future__ import annotations

import weakref

import structlog

from sundial.protocol.api_keys import ApiKey

logger = structlog.get_logger(__name__)

_seen: "weakref.WeakKeyDictionary[object, set[str]]" = weakref.WeakKeyDictionary()


def log_refusal(connection, kind: str, *, client_host: str, client_id: str | None, reason: str,
                event: str = "request_refused", **fields) -> bool:
    """Log one info line for ``kind`` unless this connection already had one; True if logged.

    ``connection`` is the client's connection object (None: always log)."""
    if connection is not None:
        try:
            kinds = _seen.setdefault(connection, set())
        except TypeError:  # not weak-referenceable: log every time rather than never
            kinds = set()
        if kind in kinds:
            return False
        kinds.add(kind)
    conn_id = getattr(connection, "conn_id", None)
    if conn_id is not None:
        fields["conn_id"] = conn_id
    software = getattr(connection, "client_software", None)
    if software:
        fields["client_software"] = f"{software[0]}/{software[1]}"
    logger.info(event, client=client_host, client_id=client_id, kind=kind, reason=reason, **fields)
    return True


def refuse(ctx, kind: str, reason: str, **fields) -> bool:
    """:func:`log_refusal` for a request handler's context."""
    return log_refusal(getattr(ctx, "connection", None), kind, client_host=getattr(ctx, "client_host", ""),
                       client_id=getattr(ctx, "client_id", None), reason=reason, **fields)


def unsupported_api(connection, header, advertised: tuple[int, int] | None, client_host: str) -> None:
    """The line for a request of an API or version this broker does not advertise (the
    connection is then closed, as Kafka does)."""
    key, version = header.api_key, header.api_version
    try:
        name = f"{ApiKey(key).name} ({key})"
    except ValueError:
        name = None
    if name is None:
        reason = f"unknown API key {key}"
    elif advertised is None:
        reason = f"{name} is not served by Sundial (not in its ApiVersions answer)"
    else:
        reason = f"{name} v{version} is not served (Sundial serves v{advertised[0]}-v{advertised[1]})"
    log_refusal(connection, f"api:{key}:v{version}", client_host=client_host, client_id=header.client_id,
                reason=reason, event="request_version_unsupported", api_key=key, api_version=version,
                error="connection closed")
