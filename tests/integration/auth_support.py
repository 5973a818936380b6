"""A daemon with a SASL listener and the ACL authorizer, and a raw SASL client that can choose its
source address (any 127.0.0.x is this host on Linux), for the authentication tests of the tools
and the metrics.

Users (added with ``sundial credentials`` before the start): ``admin`` (a super user), ``alice``
(every operation on topics and groups prefixed ``sec-``) and ``bob`` (no rule: every request that
needs one is refused). ``User:ANONYMOUS`` on the PLAINTEXT listener is a super user too, so the
tests set things up without SASL.
"""

from __future__ import annotations

import time

from sundial.protocol.api_keys import ApiKey

from .acl_support import sundial_cli
from .clients import RawConnection
from .conftest import SundialProcess, free_port
from .test_metrics import scrape  # noqa: F401  (re-exported for the security metric tests)
from .test_metrics import value as metric_value

PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}


def start_sasl_daemon(base_dir, **overrides) -> SundialProcess:
    """Started; ``proc.sasl_port``, ``proc.metrics_port``; PLAINTEXT is ``proc.port``."""
    plain, sasl, metrics = free_port(), free_port(), free_port()
    settings = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "sundial.metrics.listener": f"127.0.0.1:{metrics}",
        "group.initial.rebalance.delay.ms": "0",
        **{k: str(v) for k, v in overrides.items()},
    }
    proc = SundialProcess(base_dir, settings, port=plain)
    for user, password in PASSWORDS.items():
        sundial_cli(proc.data_dir, "credentials", "add", user, stdin=password + "\n")
    sundial_cli(proc.data_dir, "acls", "add", "--allow-principal", "User:alice", "--operation", "All",
                "--topic", "sec-", "--group", "sec-", "--resource-pattern-type", "prefixed")
    proc.start()
    proc.sasl_port = sasl
    proc.metrics_port = metrics
    return proc


class RawSasl(RawConnection):
    """One raw connection to the SASL listener from ``source`` (127.0.0.x)."""

    def __init__(self, port: int, source: str = "127.0.0.1") -> None:
        super().__init__("127.0.0.1", port, "auth-test", source=source, timeout_s=60)

    def plain(self, user: str, password: str):
        """SaslHandshake v1 + one PLAIN SaslAuthenticate v2: (answer, seconds the answer took)."""
        hs = self.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert hs.error_code == 0, hs
        started = time.monotonic()
        answer = self.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{user}\0{password}".encode()})
        return answer, time.monotonic() - started


def fail_plain(port: int, source: str = "127.0.0.1", user: str = "alice") -> float:
    """One failed PLAIN authentication (wrong password); checks the answer and the close; the
    seconds the answer took."""
    raw = RawSasl(port, source)
    try:
        answer, took = raw.plain(user, "wrong-password")
        assert answer.error_code == 58, answer
        assert raw.closed()
        return took
    finally:
        raw.close()


def value(samples: dict, name: str, **labels) -> float:
    """The sample with these labels (0 when absent: a counter not yet moved)."""
    found = metric_value(samples, name, **labels)
    return 0.0 if found is None else found
