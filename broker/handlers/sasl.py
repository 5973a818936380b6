"""SaslHandshake (17, v0–v1) and SaslAuthenticate (36, v0–v2).

On a SASL listener the connection starts unauthenticated (:mod:`broker.security`):

* SaslHandshake names a mechanism. One of ``sasl.enabled.mechanisms`` moves the
  connection to the authenticate state and is answered with the enabled list; an
  unknown one gets UNSUPPORTED_SASL_MECHANISM (33) with the list, and the connection
  closes (Kafka closes after this answer too). v0 means the tokens that follow are
  raw frames without request headers (handled by the connection); v1 means they come
  in SaslAuthenticate requests.
* SaslAuthenticate carries one token of the exchange and answers with the next
  challenge. A failure answers SASL_AUTHENTICATION_FAILED (58) with Kafka's message,
  then closes. ``session_lifetime_ms`` (v1+) is 0: no re-authentication is required
  (``connections.max.reauth.ms`` = 0).

A handshake or authenticate that comes in the wrong state gets ILLEGAL_SASL_STATE (34);
before authentication that also closes the connection. On a listener without SASL,
both APIs answer ILLEGAL_SASL_STATE, as Kafka's ``KafkaApis`` does.
"""

from __future__ import annotations

import structlog

from sundial.protocol.errors import ErrorCode

from ..sasl import SaslAuthenticationError
from ..security import UNSUPPORTED_MECHANISM, SaslSession

logger = structlog.get_logger(__name__)


def _security(ctx):
    return getattr(ctx.broker, "security", None)


async def handle_sasl_handshake(ctx, request):
    conn = ctx.connection
    session = getattr(conn, "sasl", None)
    security = _security(ctx)
    if session is None or security is None:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
    if session.state != SaslSession.HANDSHAKE:
        logger.warning("sasl_handshake_unexpected", client=ctx.client_host, state=session.state)
        ctx.close_after_response = session.state != SaslSession.COMPLETE
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": list(security.mechanisms)}
    mechanism = request.mechanism or ""
    if mechanism not in security.mechanisms:
        security.authentication_failed(conn, UNSUPPORTED_MECHANISM, None,
                                       f"mechanism {mechanism!r} is not enabled (sasl.enabled.mechanisms: "
                                       f"{', '.join(security.mechanisms)})")
        ctx.close_after_response = True
        session.state = SaslSession.FAILED
        return {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": list(security.mechanisms)}
    security.start(session, mechanism, raw_tokens=ctx.api_version == 0)
    return {"error_code": ErrorCode.NONE, "mechanisms": list(security.mechanisms)}


def _auth_answer(code, message=None, auth_bytes=b""):
    return {"error_code": code, "error_message": message, "auth_bytes": auth_bytes, "session_lifetime_ms": 0}


async def handle_sasl_authenticate(ctx, request):
    conn = ctx.connection
    session = getattr(conn, "sasl", None)
    security = _security(ctx)
    if session is None or security is None:
        return _auth_answer(ErrorCode.ILLEGAL_SASL_STATE, "SASL is not enabled on this listener")
    if session.state == SaslSession.COMPLETE:
        return _auth_answer(ErrorCode.ILLEGAL_SASL_STATE,
                            "SaslAuthenticate request received after successful authentication")
    if session.state != SaslSession.AUTHENTICATE or session.raw_tokens:
        ctx.close_after_response = True
        return _auth_answer(ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request: send SaslHandshake "
                                                          "v1 first")
    try:
        challenge = await security.evaluate(conn, request.auth_bytes or b"")
    except SaslAuthenticationError as exc:
        ctx.close_after_response = True
        return _auth_answer(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc))
    return _auth_answer(ErrorCode.NONE, None, challenge)
