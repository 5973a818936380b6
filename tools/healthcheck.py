"""``python -m sundial.tools.healthcheck [HOST:PORT]``: is a broker answering Kafka requests there?

The container image's HEALTHCHECK. It sends one ApiVersions request (v0, the version
every Kafka broker answers) and exits 0 when the answer carries the request's
correlation id and error code 0; otherwise it prints one line saying why and exits 1.
An open port alone is not enough: a broker that accepts connections but does not
answer them is unhealthy. The address defaults to ``127.0.0.1:9092`` (the image's
default listener); give the address of any listener the container can reach itself on.

Standard library only, so that a probe every few seconds costs one short Python start;
for that reason it is a module of its own rather than a ``sundial`` subcommand, whose
start imports every tool and its client library.
"""

from __future__ import annotations

import socket
import struct
import sys

DEFAULT_ADDRESS = "127.0.0.1:9092"
TIMEOUT_S = 5.0
API_VERSIONS_KEY = 18
CORRELATION_ID = 0x5D1A1
CLIENT_ID = b"sundial-healthcheck"


def request_bytes() -> bytes:
    """An ApiVersions v0 request with its size prefix (header v1: key, version, id, client id)."""
    body = struct.pack(">hhih", API_VERSIONS_KEY, 0, CORRELATION_ID, len(CLIENT_ID)) + CLIENT_ID
    return struct.pack(">i", len(body)) + body


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection before answering")
        data += chunk
    return data


def probe(host: str, port: int, timeout_s: float = TIMEOUT_S) -> str | None:
    """None when the broker answers ApiVersions without error; otherwise the reason."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(request_bytes())
            (size,) = struct.unpack(">i", _read_exactly(sock, 4))
            if size < 6:
                return f"an ApiVersions response of {size} bytes"
            correlation_id, error_code = struct.unpack(">ih", _read_exactly(sock, 6))
    except (OSError, ConnectionError) as exc:
        return f"{host}:{port}: {exc}"
    if correlation_id != CORRELATION_ID:
        return f"{host}:{port}: the response carries correlation id {correlation_id}, not {CORRELATION_ID}"
    if error_code != 0:
        return f"{host}:{port}: ApiVersions answered error code {error_code}"
    return None


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0] in ("-h", "--help")):
        print(__doc__.strip().splitlines()[0])
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        host, port = parse_address(args[0] if args else DEFAULT_ADDRESS)
    except ValueError as exc:
        print(f"sundial.tools.healthcheck: {exc}")
        return 2
    reason = probe(host, port)
    if reason is not None:
        print(f"unhealthy: {reason}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
