"""``python -m sundial.tools.healthcheck``: healthy only when ApiVersions is answered without error.

The request is decoded by the broker's own protocol package; the answers come from a
one-shot fake server, so each verdict is known in advance.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading

import pytest

from sundial.protocol import decode_request, parse_request_header
from sundial.protocol.api_keys import ApiKey
from sundial.tools import healthcheck


class OneShotServer:
    """Accepts one connection, records the request frame, answers with ``reply(request)``."""

    def __init__(self, reply) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.request = b""
        self._reply = reply
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            size = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))[0]
            self.request = conn.recv(size, socket.MSG_WAITALL)
            answer = self._reply(self.request)
            if answer:
                conn.sendall(answer)

    def close(self) -> None:
        self._thread.join(10)
        self.sock.close()


def _response(correlation_id: int, error_code: int) -> bytes:
    body = struct.pack(">ih", correlation_id, error_code) + struct.pack(">i", 0)   # no api keys
    return struct.pack(">i", len(body)) + body


def _correlation(request: bytes) -> int:
    return struct.unpack_from(">i", request, 4)[0]


def test_request_is_api_versions_v0_the_broker_decodes():
    framed = healthcheck.request_bytes()
    assert struct.unpack_from(">i", framed)[0] == len(framed) - 4
    header = parse_request_header(framed[4:])
    assert (header.api_key, header.api_version) == (ApiKey.API_VERSIONS, 0)
    assert (header.correlation_id, header.client_id) == (healthcheck.CORRELATION_ID, healthcheck.CLIENT_ID.decode())
    decode_request(header, framed[4:])     # a complete v0 body: nothing left over, nothing missing


@pytest.mark.parametrize("reply, healthy", [
    (lambda req: _response(_correlation(req), 0), True),
    (lambda req: _response(_correlation(req), 35), False),        # UNSUPPORTED_VERSION
    (lambda req: _response(_correlation(req) + 1, 0), False),     # someone else's answer
    (lambda req: b"", False),                                     # closed without answering
])
def test_verdict_follows_the_answer(reply, healthy):
    server = OneShotServer(reply)
    try:
        reason = healthcheck.probe("127.0.0.1", server.port, timeout_s=10)
    finally:
        server.close()
    assert (reason is None) == healthy, reason
    assert server.request[:4] == struct.pack(">hh", ApiKey.API_VERSIONS, 0)


def test_nothing_listening_is_unhealthy_with_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]          # bound, not listening: connection refused
        result = subprocess.run([sys.executable, "-m", "sundial.tools.healthcheck", f"127.0.0.1:{port}"],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert len(result.stdout.splitlines()) == 1 and result.stdout.startswith("unhealthy: 127.0.0.1:")


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:9092", ("127.0.0.1", 9092)), ("[::1]:29092", ("::1", 29092)), (":9092", ("127.0.0.1", 9092)),
])
def test_address_parsing(text, expected):
    assert healthcheck.parse_address(text) == expected


def test_bad_address_exits_2():
    assert healthcheck.main(["no-port"]) == 2
    assert healthcheck.main(["a:1", "b:2"]) == 2
