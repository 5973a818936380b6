"""Test certificates made with the ``openssl`` command: a CA, a server and two clients.

``make_pki(directory)`` returns a :class:`Pki` of file paths (PEM). The server
certificate is valid for ``localhost`` and ``127.0.0.1``; ``server_keystore`` holds
its chain and key in one file (what ``ssl.keystore.location`` takes), and
``server_keystore_encrypted`` the same with the key encrypted under ``KEY_PASSWORD``.
Client certificates: ``alice`` (``CN=alice,OU=eng,O=Sundial Test``) signed by the
CA, and ``mallory`` signed by a second, untrusted CA. EC P-256 keys keep generation
fast (well under a second for the whole set).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

KEY_PASSWORD = "keystore-secret"


@dataclass(frozen=True)
class Pki:
    ca: str
    server_cert: str
    server_key: str
    server_keystore: str
    server_keystore_encrypted: str
    alice_cert: str
    alice_key: str
    mallory_cert: str
    mallory_key: str


def openssl_available() -> bool:
    return shutil.which("openssl") is not None


def _run(*args: str, cwd: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(d: str, name: str, subject: str) -> None:
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "3", "-subj", subject,
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)


def _leaf(d: str, name: str, subject: str, ca: str, extensions: list[str]) -> None:
    args = ["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject]
    for ext in extensions:
        args += ["-addext", ext]
    _run(*args, cwd=d)
    _run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
         "-out", f"{name}.pem", "-days", "2", "-copy_extensions", "copy", cwd=d)


def make_pki(directory) -> Pki:
    d = str(directory)
    os.makedirs(d, exist_ok=True)
    _ca(d, "ca", "/CN=Sundial Test CA")
    _ca(d, "rogue-ca", "/CN=Rogue CA")
    _leaf(d, "server", "/CN=localhost", "ca",
          ["subjectAltName=DNS:localhost,IP:127.0.0.1", "extendedKeyUsage=serverAuth"])
    _leaf(d, "alice", "/O=Sundial Test/OU=eng/CN=alice", "ca", ["extendedKeyUsage=clientAuth"])
    _leaf(d, "mallory", "/CN=mallory", "rogue-ca", ["extendedKeyUsage=clientAuth"])
    p = lambda n: os.path.join(d, n)  # noqa: E731
    with open(p("server.keystore.pem"), "w") as out:
        for part in ("server.pem", "server.key"):
            with open(p(part)) as fh:
                out.write(fh.read())
    _run("pkey", "-in", "server.key", "-out", "server.enc.key", "-aes256", "-passout", f"pass:{KEY_PASSWORD}", cwd=d)
    with open(p("server.keystore.enc.pem"), "w") as out:
        for part in ("server.pem", "server.enc.key"):
            with open(p(part)) as fh:
                out.write(fh.read())
    return Pki(p("ca.pem"), p("server.pem"), p("server.key"), p("server.keystore.pem"),
               p("server.keystore.enc.pem"), p("alice.pem"), p("alice.key"), p("mallory.pem"), p("mallory.key"))
