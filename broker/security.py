"""Listener security: TLS contexts from Kafka's ``ssl.*`` keys, principals, and the SASL state
of each connection.

**TLS** (``SSL`` and ``SASL_SSL`` listeners). Keys, as Kafka names them (PEM files only):

* ``ssl.keystore.location``: PEM with the server's certificate chain and its private
  key (``ssl.key.password``, else ``ssl.keystore.password``, decrypts an encrypted key);
* ``ssl.truststore.location``: PEM CA bundle used to check client certificates;
* ``ssl.client.auth``: ``none`` (default), ``requested`` (a certificate is checked
  if the client sends one) or ``required`` (the handshake fails without one);
* ``ssl.enabled.protocols`` (``TLSv1.2,TLSv1.3``) bounds the TLS versions;
  ``ssl.cipher.suites`` takes OpenSSL cipher names.

**Principals** (Kafka's ``DefaultKafkaPrincipalBuilder``): ``User:ANONYMOUS`` on
PLAINTEXT and on SSL without a client certificate; ``User:<subject DN>`` on SSL with
one, the DN written as RFC 2253 (``CN=alice,OU=eng,O=Example,C=US``: most specific
first, ``,+"\\<>;`` escaped); ``User:<name>`` after SASL authentication (SASL wins
over the certificate on SASL_SSL).

**SASL** (``SASL_PLAINTEXT``/``SASL_SSL``), Kafka's ``SaslServerAuthenticator`` states:

``HANDSHAKE`` → (ApiVersions any number of times) → SaslHandshake → ``AUTHENTICATE``
→ SaslAuthenticate × n → ``COMPLETE``. Before ``COMPLETE`` only ApiVersions,
SaslHandshake and SaslAuthenticate are served; anything else closes the connection
(Kafka: "Unexpected Kafka request ... during SASL handshake"). A SaslHandshake v0
switches the connection to Kafka's original framing: the following frames are raw
SASL tokens (size-prefixed, no request header), answered the same way. A failed
authentication is answered with SASL_AUTHENTICATION_FAILED (58) after
``connection.failed.authentication.delay.ms`` (Kafka's key and default, 100 ms), and the
connection is closed after the answer, as Kafka delays the close of a failed
authentication (it slows down password guessing).

**Failed authentications** are counted and logged (``authentication_failed``, warning) in one
place, :meth:`SecurityManager.authentication_failed`: a failed exchange (the mechanism's
message), a mechanism that is not enabled, and a request other than ApiVersions, SaslHandshake
or SaslAuthenticate before authentication (a client without SASL settings), which Kafka also
counts as failed authentications. The log line is rate-limited per client address
(``sundial.authentication.failure.log.interval.ms``, :class:`~broker.sasl.FailureLogLimit`) and
carries ``suppressed``, the failures from that address not logged since its previous line.
Successes and failures are counted per listener and mechanism for the metrics
(:meth:`SecurityManager.authentication_counts`).
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from typing import Sequence

import structlog

from sundial.config import ConfigError
from sundial.config.broker import Listener
from sundial.config.components import SaslConfig, SslConfig
from sundial.protocol.api_keys import ApiKey

from .sasl import ALL_MECHANISMS, MAX_TOKEN_BYTES, CredentialStore, FailureLogLimit, SaslAuthenticationError, \
    new_server

logger = structlog.get_logger(__name__)

ANONYMOUS = "User:ANONYMOUS"
#: The ``mechanism`` of a failure before any mechanism was chosen (a request before SaslHandshake)
#: and of a SaslHandshake naming a mechanism that is not enabled (its name is the client's, unbounded).
NO_MECHANISM = "none"
UNSUPPORTED_MECHANISM = "unsupported"
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")

_TLS_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
                 "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


# -- TLS ---------------------------------------------------------------------------------------------
def build_server_ssl_context(cfg: SslConfig) -> ssl.SSLContext:
    """An ``ssl.SSLContext`` for SSL/SASL_SSL listeners from Kafka's ``ssl.*`` keys, typed (the
    broker's ``ssl`` view); raises ConfigError naming the key at fault."""
    keystore = cfg.keystore_location
    if not keystore:
        raise ConfigError("ssl.keystore.location", "an SSL or SASL_SSL listener needs a PEM keystore")
    for key, store_type in (("ssl.keystore.type", cfg.keystore_type), ("ssl.truststore.type", cfg.truststore_type)):
        if str(store_type).upper() != "PEM":
            raise ConfigError(key, f"Sundial reads PEM files only, not {store_type}")
    if cfg.truststore_password:
        # Kafka's DefaultSslEngineFactory refuses it for PEM too: a PEM bundle has no password
        raise ConfigError("ssl.truststore.password", "SSL trust store password cannot be specified for PEM format")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [v for v in cfg.enabled_protocols]
    unknown = [v for v in versions if v not in _TLS_VERSIONS]
    if unknown or not versions:
        raise ConfigError("ssl.enabled.protocols", f"unknown TLS versions {unknown or versions}; "
                                                   f"use {', '.join(_TLS_VERSIONS)}")
    chosen = sorted(_TLS_VERSIONS[v] for v in versions)
    try:
        ctx.minimum_version, ctx.maximum_version = chosen[0], chosen[-1]
    except (ValueError, ssl.SSLError) as exc:
        raise ConfigError("ssl.enabled.protocols", str(exc)) from None
    password = cfg.key_password or cfg.keystore_password or None
    try:
        ctx.load_cert_chain(keystore, password=password)
    except FileNotFoundError:
        raise ConfigError("ssl.keystore.location", f"{keystore} does not exist") from None
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError("ssl.keystore.location", f"cannot load certificate chain and key from {keystore}: "
                                                    f"{exc}") from None
    mode = _CLIENT_AUTH[cfg.client_auth]
    truststore = cfg.truststore_location
    if truststore:
        try:
            ctx.load_verify_locations(cafile=truststore)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError("ssl.truststore.location", f"cannot load CA certificates from {truststore}: "
                                                          f"{exc}") from None
    elif mode != ssl.CERT_NONE:
        raise ConfigError("ssl.client.auth", f"ssl.client.auth={cfg.client_auth} needs "
                                             f"ssl.truststore.location")
    ctx.verify_mode = mode
    suites = [s for s in cfg.cipher_suites if s]
    if suites:
        try:
            ctx.set_ciphers(":".join(suites))
        except ssl.SSLError:
            raise ConfigError("ssl.cipher.suites", "no usable cipher in the list (give OpenSSL cipher names)") \
                from None
    ctx.options |= ssl.OP_NO_COMPRESSION
    logger.info("tls_context_built", keystore=keystore, truststore=truststore, client_auth=cfg.client_auth,
                protocols=versions)
    return ctx


_DN_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
    "domainComponent": "DC", "userId": "UID", "emailAddress": "EMAILADDRESS",
}


def _escape_dn_value(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def subject_dn(peercert: dict) -> str | None:
    """RFC 2253 form of a certificate subject as ``getpeercert()`` returns it (None if absent)."""
    subject = peercert.get("subject") if peercert else None
    if not subject:
        return None
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_DN_KEYWORDS.get(k, k)}={_escape_dn_value(v)}" for k, v in rdn))
    return ",".join(rdns)


# -- SASL per connection ----------------------------------------------------------------------------
class SaslSession:
    """The SASL state of one connection (see module doc)."""

    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"

    __slots__ = ("state", "mechanism", "server", "raw_tokens")

    def __init__(self) -> None:
        self.state = self.HANDSHAKE
        self.mechanism: str | None = None
        self.server = None
        self.raw_tokens = False


class SecurityManager:
    """Principals and SASL for every connection; created when a listener is not PLAINTEXT."""

    def __init__(self, cfg: SaslConfig, listeners: Sequence[Listener], data_dir: str) -> None:
        """``cfg`` is the broker's ``sasl`` view, ``listeners`` its listeners."""
        self.config = cfg
        mechanisms = [m.strip().upper() for m in cfg.enabled_mechanisms if m.strip()]
        unsupported = [m for m in mechanisms if m not in ALL_MECHANISMS]
        if unsupported:
            raise ConfigError("sasl.enabled.mechanisms", f"Sundial does not implement {', '.join(unsupported)} "
                                                         f"(it offers {', '.join(ALL_MECHANISMS)})")
        self.mechanisms = mechanisms
        path = cfg.credentials_path(data_dir)
        self.credentials = CredentialStore(path)
        self.credentials.refresh()
        self.failed_authentication_delay_s = cfg.failed_authentication_delay_ms / 1000
        self._failure_log = FailureLogLimit(cfg.failure_log_interval_ms / 1000)
        #: (listener, mechanism) -> [successes, failures]
        self._counts: dict[tuple[str, str], list[int]] = {}
        if any(l.security_protocol in SASL_PROTOCOLS for l in listeners):
            logger.info("sasl_enabled", mechanisms=mechanisms, credentials_file=path,
                        users=len(self.credentials.users()))
        clear_text = [l.name for l in listeners if l.security_protocol == "SASL_PLAINTEXT"]
        if "PLAIN" in mechanisms and clear_text:
            # PLAIN sends the password itself; without TLS anyone on the path reads it.
            logger.warning("sasl_plain_without_tls", listeners=clear_text,
                           hint="PLAIN sends passwords in clear text on these listeners: use SASL_SSL, "
                                "or narrow sasl.enabled.mechanisms to SCRAM-SHA-256,SCRAM-SHA-512")

    # -- connection hooks ----------------------------------------------------------------------
    def on_connect(self, conn) -> None:
        listener = getattr(conn, "_listener", None)
        protocol = getattr(listener, "security_protocol", "PLAINTEXT")
        if protocol in TLS_PROTOCOLS:
            dn = None
            transport = conn.transport
            if transport is not None:
                try:
                    dn = subject_dn(transport.get_extra_info("peercert") or {})
                except (ValueError, AttributeError):
                    dn = None
            conn.principal = f"User:{dn}" if dn else ANONYMOUS
            if dn:
                logger.debug("tls_client_authenticated", conn_id=conn.conn_id, principal=conn.principal)
        if protocol in SASL_PROTOCOLS:
            conn.authenticated = False
            conn.sasl = SaslSession()

    @staticmethod
    def allowed_before_auth(api_key: int) -> bool:
        return api_key in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)

    # -- outcomes ----------------------------------------------------------------------------------
    def _count(self, conn, mechanism: str) -> list[int]:
        key = (_listener_name(conn), mechanism)
        counts = self._counts.get(key)
        if counts is None:
            counts = self._counts[key] = [0, 0]
        return counts

    def authentication_failed(self, conn, mechanism: str, user: str | None, reason: str) -> None:
        """Count one failed authentication and log it unless the per-address limit holds it back."""
        self._count(conn, mechanism)[1] += 1
        suppressed = self._failure_log.failure(conn.peer_host)
        if suppressed is not None:
            logger.warning("authentication_failed", conn_id=conn.conn_id, client=conn.peer_host,
                           listener=_listener_name(conn), mechanism=mechanism, user=user, reason=reason,
                           suppressed=suppressed)

    def request_before_authentication(self, conn, api_key: int) -> None:
        """A request that needs authentication came first: the connection is closed (Kafka's
        "Unexpected Kafka request ... during SASL handshake"), a failed authentication."""
        self.authentication_failed(conn, NO_MECHANISM, None,
                                   f"request {_api_name(api_key)} before SASL authentication (the client has no "
                                   f"SASL settings?)")

    def authentication_counts(self) -> list[tuple[str, str, int, int]]:
        """(listener, mechanism, successes, failures) for the metrics (call on the loop)."""
        return [(listener, mechanism, ok, failed)
                for (listener, mechanism), (ok, failed) in sorted(self._counts.items())]

    # -- the exchange ------------------------------------------------------------------------------
    def start(self, session: SaslSession, mechanism: str, *, raw_tokens: bool) -> None:
        session.mechanism = mechanism
        session.server = new_server(mechanism, self.credentials)
        session.raw_tokens = raw_tokens
        session.state = SaslSession.AUTHENTICATE

    async def evaluate(self, conn, token) -> bytes:
        """Run one token through the connection's mechanism; on success of the last step the
        connection becomes authenticated. Raises SaslAuthenticationError (after the delay)."""
        session: SaslSession = conn.sasl
        server = session.server
        try:
            if len(token) > MAX_TOKEN_BYTES:
                raise SaslAuthenticationError(f"SASL token of {len(token)} bytes is too large")
            if server.needs_thread:
                challenge = await asyncio.to_thread(server.evaluate, bytes(token))
            else:
                challenge = server.evaluate(bytes(token))
        except SaslAuthenticationError as exc:
            session.state = SaslSession.FAILED
            self.authentication_failed(conn, session.mechanism, server.username, str(exc))
            await asyncio.sleep(self.failed_authentication_delay_s)
            raise
        if server.complete:
            session.state = SaslSession.COMPLETE
            conn.principal = f"User:{server.username}"
            conn.authenticated = True
            self._count(conn, session.mechanism)[0] += 1
            logger.info("authenticated", conn_id=conn.conn_id, client=conn.peer_host, principal=conn.principal,
                        mechanism=session.mechanism)
        return challenge

    async def raw_token(self, conn, frame) -> bytes | None:
        """SaslHandshake v0 framing: one raw token in, the size-prefixed answer out (None: close)."""
        try:
            challenge = await self.evaluate(conn, frame)
        except SaslAuthenticationError:
            return None
        return struct.pack(">i", len(challenge)) + challenge


def _listener_name(conn) -> str:
    return getattr(getattr(conn, "_listener", None), "name", "") or ""


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)
