"""The pre-flight check every wire tool makes before it builds a kafka-python client.

kafka-python retries a bootstrap that fails until its timeout (15 s by default) and keeps
the reason in its log: a refused port, a wrong password and a listener that wants SASL all
end as "Unable to bootstrap". One short connection made here tells them apart, in the
order Kafka's clients meet them:

1. TCP to every bootstrap address at once; the first that connects is used. When every
   one refuses or does not resolve, or none answers within the timeout:
   ``cannot connect to HOST:PORT (reason)``.
2. TLS when ``security.protocol`` is SSL or SASL_SSL, with the tool's ``ssl.*`` settings.
   A server certificate the client does not trust: ``cannot connect``; a handshake the
   broker refuses (no or a rejected client certificate): ``connected but authentication
   failed (TLS client certificate)``.
3. ApiVersions v0 (every Kafka since 0.10 answers it). An error code:
   ``unsupported version (ApiVersions: ...)``. The connection closed instead of an answer
   (a TLS listener spoken to in clear text, or not a Kafka broker): ``cannot connect``.
4. SaslHandshake v1 and SaslAuthenticate, with the tool's mechanism and credentials,
   through kafka-python's own mechanism classes (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
   SASL_AUTHENTICATION_FAILED (58): ``connected but authentication failed (mechanism M,
   user U): <the broker's message>``. Without SASL settings the handshake is asked all the
   same: a listener that answers it (rather than ILLEGAL_SASL_STATE, Kafka's answer on a
   listener without SASL) requires SASL, and the line says so, with the mechanisms the
   broker offers.

No answer within the timeout to a request of steps 2-4: ``timed out after N s (...)``.
Authorization ("not authorized") is checked by the broker on the tool's real requests,
after this check; :mod:`tools.common` words those errors.

The module raises :class:`PreflightError` (its message is the line) and knows nothing of
the tools' exit codes.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import ssl
import struct
import time
from typing import Sequence

from kafka.errors import KafkaConfigurationError
from kafka.net.sasl import get_sasl_mechanism

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey
from sundial.protocol.errors import ErrorCode

#: Mechanisms the check runs itself; others (GSSAPI, OAUTHBEARER) are left to kafka-python.
PROBED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
#: Asked of a listener when the tool has no SASL settings, only to learn whether it wants SASL.
_ANY_MECHANISM = "PLAIN"
_CLIENT_ID = "sundial-tools-preflight"
_SIZE = struct.Struct(">i")


class PreflightError(Exception):
    """The check failed; the message is the one line a tool prints."""


def seconds_text(timeout_ms: int) -> str:
    """``15000`` → ``15 s``, ``1500`` → ``1.5 s``."""
    return f"{timeout_ms / 1000:g} s"


def address_text(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def reason_text(exc: OSError) -> str:
    text = exc.strerror or str(exc) or type(exc).__name__
    return text[:1].lower() + text[1:]


def preflight(servers: Sequence[tuple[str, int]], timeout_ms: int, settings: dict) -> None:
    """Run the whole check (module doc) with kafka-python keyword ``settings``; raise PreflightError."""
    deadline = time.monotonic() + timeout_ms / 1000
    sock, host, port = connect_any(servers, timeout_ms, deadline)
    try:
        _Probe(sock, host, port, timeout_ms, deadline, settings).run()
    finally:
        sock.close()


def connect_any(servers: Sequence[tuple[str, int]], timeout_ms: int,
                deadline: float) -> tuple[socket.socket, str, int]:
    """A TCP connection to the first bootstrap address that accepts one, tried all at once."""
    failures: dict[str, str] = {}
    selector = selectors.DefaultSelector()
    pending: dict[socket.socket, tuple[str, int]] = {}
    won: tuple[socket.socket, str, int] | None = None
    try:
        for host, port in servers:
            name = address_text(host, port)
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except socket.gaierror as exc:
                failures[name] = reason_text(exc)
                continue
            for family, type_, proto, _canon, addr in infos:
                try:
                    sock = socket.socket(family, type_, proto)
                except OSError as exc:
                    failures.setdefault(name, reason_text(exc))
                    continue
                sock.setblocking(False)
                code = sock.connect_ex(addr)
                if code == 0:
                    won = (sock, host, port)
                    return won
                if code in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
                    pending[sock] = (host, port)
                    selector.register(sock, selectors.EVENT_WRITE)
                else:
                    sock.close()
                    failures.setdefault(name, reason_text(OSError(code, os.strerror(code))))
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                names = ", ".join(dict.fromkeys(address_text(h, p) for h, p in pending.values()))
                raise PreflightError(f"cannot connect to {names} (no answer to connect within "
                                     f"{seconds_text(timeout_ms)})")
            for key, _events in selector.select(remaining):
                sock = key.fileobj
                selector.unregister(sock)
                host, port = pending.pop(sock)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code == 0:
                    won = (sock, host, port)
                    return won
                sock.close()
                failures.setdefault(address_text(host, port), reason_text(OSError(code, os.strerror(code))))
    finally:
        selector.close()
        for sock in pending:
            if won is None or sock is not won[0]:
                sock.close()
    raise PreflightError("cannot connect to " + ", ".join(f"{name} ({why})" for name, why in failures.items()))


class _Probe:
    """One connection's TLS, ApiVersions and SASL steps (module doc)."""

    def __init__(self, sock: socket.socket, host: str, port: int, timeout_ms: int, deadline: float,
                 settings: dict) -> None:
        self.sock = sock
        self.host, self.port = host, port
        self.where = address_text(host, port)
        self.timeout_ms = timeout_ms
        self.deadline = deadline
        self.settings = settings
        self.protocol = str(settings.get("security_protocol") or "PLAINTEXT").upper()
        self.mechanism = str(settings.get("sasl_mechanism") or "PLAIN").upper()
        self.user = settings.get("sasl_plain_username")
        self.correlation_id = 0
        self.step = "connect"

    # -- steps -------------------------------------------------------------------------------
    def run(self) -> None:
        if self.protocol in TLS_PROTOCOLS:
            self._tls()
        versions = self._api_versions()
        if self.protocol in SASL_PROTOCOLS:
            if self.mechanism in PROBED_MECHANISMS:
                self._authenticate(versions)
        elif ApiKey.SASL_HANDSHAKE in versions:
            self._sasl_not_wanted()

    def _tls(self) -> None:
        self.step = "the TLS handshake"
        s = self.settings
        context = ssl.create_default_context(cafile=s.get("ssl_cafile"))
        context.check_hostname = bool(s.get("ssl_check_hostname", True))
        if s.get("ssl_certfile"):
            try:
                context.load_cert_chain(s["ssl_certfile"], s.get("ssl_keyfile"), s.get("ssl_password"))
            except (OSError, ssl.SSLError) as exc:
                raise PreflightError(f"bad client settings: cannot load ssl.certificate.location "
                                     f"{s['ssl_certfile']}: {exc}") from None
        self.sock.setblocking(True)
        self.sock.settimeout(self._remaining())
        try:
            tls = context.wrap_socket(self.sock, server_hostname=self.host)
        except ssl.SSLCertVerificationError as exc:
            raise PreflightError(f"cannot connect to {self.where} (TLS: the broker's certificate is not trusted: "
                                 f"{exc.verify_message or exc.reason}; check ssl.ca.location)") from None
        except ssl.SSLError as exc:
            raise PreflightError(f"connected but authentication failed (TLS client certificate): the broker "
                                 f"refused the TLS handshake ({exc.reason or exc}); check "
                                 f"ssl.certificate.location and ssl.key.location") from None
        except socket.timeout:
            raise self._timed_out() from None
        except OSError as exc:
            raise PreflightError(f"cannot connect to {self.where} (TLS handshake: {reason_text(exc)})") from None
        self.sock = tls

    def _api_versions(self) -> dict[int, tuple[int, int]]:
        self.step = "ApiVersions"
        response = self._call(ApiKey.API_VERSIONS, 0, {})
        if response.error_code != ErrorCode.NONE:
            raise PreflightError(f"unsupported version (ApiVersions: the broker at {self.where} answered "
                                 f"{_error_name(response.error_code)})")
        return {a.api_key: (a.min_version, a.max_version) for a in response.api_keys}

    def _sasl_not_wanted(self) -> None:
        """No SASL settings: a listener that takes part in a SaslHandshake wants SASL."""
        self.step = "SaslHandshake"
        response = self._call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": _ANY_MECHANISM}, closed_ok=True)
        if response is None or response.error_code == ErrorCode.ILLEGAL_SASL_STATE:
            return
        offered = ", ".join(response.mechanisms or ()) or "none"
        sasl = "SASL_SSL" if self.protocol == "SSL" else "SASL_PLAINTEXT"
        raise PreflightError(f"connected but authentication failed (mechanism none, user none): the listener at "
                             f"{self.where} requires SASL (it offers {offered}); give security.protocol={sasl}, "
                             f"sasl.mechanism, sasl.username and sasl.password with --command-config")

    def _authenticate(self, versions: dict[int, tuple[int, int]]) -> None:
        who = f"mechanism {self.mechanism}, user {self.user if self.user else 'none'}"
        try:
            mechanism = get_sasl_mechanism(self.mechanism)(host=self.host, **self.settings)
        except (KafkaConfigurationError, KeyError) as exc:
            raise PreflightError(f"bad client settings for {self.mechanism}: {exc}; give sasl.username and "
                                 f"sasl.password") from None
        if self.user is None or self.settings.get("sasl_plain_password") is None:
            raise PreflightError(f"bad client settings for {self.mechanism}: give sasl.username and "
                                 f"sasl.password")
        self.step = "SaslHandshake"
        handshake = self._call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": self.mechanism})
        if handshake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            raise PreflightError(f"connected but authentication failed ({who}): the broker does not offer "
                                 f"{self.mechanism} (it offers {', '.join(handshake.mechanisms or ()) or 'none'})")
        if handshake.error_code == ErrorCode.ILLEGAL_SASL_STATE:
            raise PreflightError(f"connected but authentication failed ({who}): the listener at {self.where} does "
                                 f"not use SASL (ILLEGAL_SASL_STATE); check security.protocol and the port")
        if handshake.error_code != ErrorCode.NONE:
            raise PreflightError(f"connected but authentication failed ({who}): SaslHandshake answered "
                                 f"{_error_name(handshake.error_code)}")
        low, high = versions.get(ApiKey.SASL_AUTHENTICATE, (0, -1))
        version = min(high, 2)
        if version < max(low, 0):
            raise PreflightError(f"unsupported version (SaslAuthenticate: the broker at {self.where} does not "
                                 f"offer it)")
        self.step = "SaslAuthenticate"
        while not mechanism.is_done():
            answer = self._call(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": mechanism.auth_bytes()})
            if answer.error_code != ErrorCode.NONE:
                message = answer.error_message or _error_name(answer.error_code)
                raise PreflightError(f"connected but authentication failed ({who}): {message}")
            try:
                mechanism.receive(answer.auth_bytes)
            except Exception as exc:  # noqa: BLE001 - a malformed server message is a failed exchange
                raise PreflightError(f"connected but authentication failed ({who}): bad answer from the broker "
                                     f"({exc})") from None
        if not mechanism.is_authenticated():
            raise PreflightError(f"connected but authentication failed ({who}): the broker's final message did "
                                 f"not verify")

    # -- one request ---------------------------------------------------------------------------
    def _call(self, api_key: int, version: int, body: dict, *, closed_ok: bool = False):
        self.correlation_id += 1
        frame = encode_request(api_key, version, self.correlation_id, _CLIENT_ID, body)
        try:
            self.sock.setblocking(True)
            self.sock.settimeout(self._remaining())
            self.sock.sendall(frame)
            head = self._recv(4)
            data = head + self._recv(_SIZE.unpack(head)[0])
        except socket.timeout:
            raise self._timed_out() from None
        except (ConnectionError, OSError) as exc:
            if closed_ok:
                return None
            raise self._closed(exc) from None
        _correlation, response = decode_response(api_key, version, data)
        return response

    def _recv(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            self.sock.settimeout(self._remaining())
            chunk = self.sock.recv(n - got)
            if not chunk:
                raise ConnectionResetError(errno.ECONNRESET, "the broker closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _remaining(self) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout()
        return remaining

    def _timed_out(self) -> PreflightError:
        return PreflightError(f"timed out after {seconds_text(self.timeout_ms)} (no answer to {self.step} from "
                              f"{self.where})")

    def _closed(self, exc: OSError) -> PreflightError:
        hint = ""
        if self.step == "ApiVersions" and self.protocol not in TLS_PROTOCOLS:
            hint = "; a TLS listener needs security.protocol=SSL or SASL_SSL"
        elif self.step == "ApiVersions":
            hint = "; is it a Kafka broker?"
        return PreflightError(f"cannot connect to {self.where} (the connection closed during {self.step}: "
                              f"{reason_text(exc)}{hint})")


def _error_name(code: int) -> str:
    try:
        return f"{ErrorCode(code).name} ({code})"
    except ValueError:
        return f"error {code}"
