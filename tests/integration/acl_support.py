"""A daemon with the ACL authorizer, set up before its start with ``sundial credentials`` and ``sundial
acls`` run on its data directory.

:func:`acl_daemon` gives one with Kafka's ``StandardAuthorizer``, a PLAINTEXT listener whose
``User:ANONYMOUS`` is a super user (the tests' own set-up: topics, records, rules) and a
SASL_PLAINTEXT listener (PLAIN unless the settings say otherwise) for the users under test.
"""

from __future__ import annotations

import subprocess
import sys

from .conftest import SundialProcess, free_port

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def sundial_cli(data_dir: str, *args: str, stdin: str | None = None, code: int = 0) -> str:
    """``sundial ARGS --data-dir DATA_DIR``, asserted to exit with ``code``; its standard output."""
    out = subprocess.run([sys.executable, "-m", "sundial", *args, "--data-dir", data_dir], input=stdin,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == code, out.stderr
    return out.stdout


def acl_daemon(base_dir, users: dict[str, str], settings: dict[str, str] | None = None) -> SundialProcess:
    """Not started yet: ``users`` (name: password) are added with ``sundial credentials``; ``settings``
    add to (or replace) the listeners, ``sasl.enabled.mechanisms`` (PLAIN), the authorizer and
    ``super.users`` (``User:ANONYMOUS``). ``proc.port`` is the PLAINTEXT listener, ``proc.sasl_bootstrap``
    the SASL_PLAINTEXT one, ``proc.ports`` both by name."""
    ports = {"PLAINTEXT": free_port(), "SASL_PLAINTEXT": free_port()}
    proc = SundialProcess(base_dir, {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "sasl.enabled.mechanisms": "PLAIN",
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:ANONYMOUS",
        **(settings or {}),
    }, port=ports["PLAINTEXT"])
    for user, password in users.items():
        sundial_cli(proc.data_dir, "credentials", "add", user, stdin=password + "\n")
    proc.ports = ports
    proc.sasl_bootstrap = f"127.0.0.1:{ports['SASL_PLAINTEXT']}"
    return proc
