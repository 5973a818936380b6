"""Security metrics and the authentication-failure log against the real daemon.

* the authentication counters (per listener and mechanism) and the authorization-denial counter
  (per resource type and operation) move by exactly what the test did: raw PLAIN exchanges, a
  tool with a wrong password, a request before authentication, a mechanism that is not enabled,
  ACL refusals through kafka-python;
* ``authentication_failed`` is logged once per client address per
  ``sundial.authentication.failure.log.interval.ms``; the lines' ``suppressed`` counts add up to
  every failure (two loopback source addresses keep their own budgets);
* ``connection.failed.authentication.delay.ms`` delays the failed answer and the close (a lower
  bound, the setting's guarantee);
* internal topics have no per-partition series unless ``sundial.metrics.internal.topics.enabled``;
* ``sundial_build_info``.
"""

from __future__ import annotations

import platform
import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

from sundial.broker import __version__
from sundial.protocol import encode_request
from sundial.protocol.api_keys import ApiKey

from support.waiting import wait_for

from .auth_support import PASSWORDS, RawSasl, fail_plain, scrape, start_sasl_daemon, value
from .clients import create_topic
from .conftest import EXTERNAL_BOOTSTRAP
from .test_tools_cli import assert_one_line_error, sundial

pytestmark = pytest.mark.skipif(bool(EXTERNAL_BOOTSTRAP), reason="starts its own daemons on loopback listeners")

LOG_INTERVAL_MS = 5000
INTERNAL = ("__consumer_offsets", "__transaction_state", "__share_group_state")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    proc = start_sasl_daemon(tmp_path_factory.mktemp("auth-metrics") / "broker",
                             **{"sundial.authentication.failure.log.interval.ms": LOG_INTERVAL_MS})
    yield proc
    code = proc.stop()
    assert code == 0, proc.log_text()[-3000:]


def _auth(samples, outcome: str, mechanism: str) -> float:
    return value(samples, f"sundial_authentication_{outcome}_total", listener="SASL_PLAINTEXT", mechanism=mechanism)


def _failures_logged(daemon, client: str, since: int) -> list[dict]:
    return [e for e in daemon.log_lines()[since:] if e.get("event") == "authentication_failed"
            and e.get("client") == client]


def test_authentication_counters_move_by_exactly_what_the_test_did(daemon, tmp_path):
    before = scrape(daemon.metrics_port)
    for _ in range(3):                                   # 3 PLAIN failures
        fail_plain(daemon.sasl_port, "127.0.0.2")
    for _ in range(2):                                   # 2 PLAIN successes
        raw = RawSasl(daemon.sasl_port, "127.0.0.2")
        answer, _took = raw.plain("alice", PASSWORDS["alice"])
        assert answer.error_code == 0
        raw.close()
    config = tmp_path / "wrong.properties"               # 1 SCRAM-SHA-256 failure: the tool tries once
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.username=alice\n"
                      "sasl.password=wrong\n")
    result = sundial("topics", "list", "--bootstrap-server", f"127.0.0.1:{daemon.sasl_port}",
                     "--command-config", str(config), check=False, timeout_s=60)
    assert_one_line_error(result, "connected but authentication failed (mechanism SCRAM-SHA-256, user alice)")
    raw = RawSasl(daemon.sasl_port, "127.0.0.2")         # 1 request before authentication: mechanism "none"
    raw.sock.sendall(encode_request(ApiKey.METADATA, 1, 1, "auth-test", {"topics": []}))
    assert raw.closed()
    raw.close()
    raw = RawSasl(daemon.sasl_port, "127.0.0.2")         # 1 mechanism that is not enabled
    answer = raw.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    assert answer.error_code == 33
    raw.close()

    def moved() -> dict:
        after = scrape(daemon.metrics_port)
        return {(outcome, mechanism): _auth(after, outcome, mechanism) - _auth(before, outcome, mechanism)
                for outcome in ("failures", "successes")
                for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "none", "unsupported")}

    expected = {("failures", "PLAIN"): 3, ("successes", "PLAIN"): 2, ("failures", "SCRAM-SHA-256"): 1,
                ("failures", "none"): 1, ("failures", "unsupported"): 1}
    # Every count was made before the client saw its answer or the close; the handshake of the last
    # one closes after the answer, so wait for that one only.
    wait_for(lambda: moved()[("failures", "unsupported")] == 1, 30, "the unsupported mechanism counted")
    got = moved()
    assert got == {key: expected.get(key, 0) for key in got}, got


def test_authorization_denials_are_counted_by_resource_type_and_operation(daemon):
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    create_topic(daemon.bootstrap, topic, 1)
    before = scrape(daemon.metrics_port)
    bob = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{daemon.sasl_port}", security_protocol="SASL_PLAINTEXT",
                           sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password=PASSWORDS["bob"],
                           request_timeout_ms=15000)
    try:
        for name in ("sec-a", "sec-b"):                  # CreateTopics: CREATE on TOPIC, refused twice
            result = bob.create_topics([NewTopic(f"{name}-{uuid.uuid4().hex[:6]}", 1, 1)], raise_errors=False)
            assert [t["error_code"] for t in result["topics"]] == [29]
        described = bob.describe_topics([topic])         # Metadata by name: DESCRIBE on TOPIC, refused once
        assert [t["error_code"] for t in described] == [29]
    finally:
        bob.close()
    after = scrape(daemon.metrics_port)
    series = {(labels["resource_type"], labels["operation"]): v
              for labels, v in after.get("sundial_authorization_denials_total", [])}
    old = {(labels["resource_type"], labels["operation"]): v
           for labels, v in before.get("sundial_authorization_denials_total", [])}
    moved = {key: v - old.get(key, 0) for key, v in series.items() if v - old.get(key, 0)}
    assert moved == {("TOPIC", "CREATE"): 2, ("TOPIC", "DESCRIBE"): 1}, moved
    denied = [e for e in daemon.log_lines() if e.get("event") == "authorization_denied"
              and e.get("principal") == "User:bob" and e.get("resource") == topic]
    assert denied and denied[-1]["operation"] == "DESCRIBE"


def test_authentication_failure_log_is_limited_per_address(daemon):
    since = len(daemon.log_lines())
    started = time.monotonic()
    burst = 12
    for _ in range(burst):
        fail_plain(daemon.sasl_port, "127.0.0.5")
    fail_plain(daemon.sasl_port, "127.0.0.6")            # another address: logged on its own budget
    caused = burst
    # Go on failing until the limit lets a line through again: it carries the count held back.
    deadline = time.monotonic() + 120
    while len(_failures_logged(daemon, "127.0.0.5", since)) < 2:
        assert time.monotonic() < deadline, "no second line within 120 s"
        fail_plain(daemon.sasl_port, "127.0.0.5")
        caused += 1
    span_s = time.monotonic() - started
    lines = _failures_logged(daemon, "127.0.0.5", since)
    other = _failures_logged(daemon, "127.0.0.6", since)
    print(f"{caused} failures from one address in {span_s:.1f} s: {len(lines)} log lines, "
          f"suppressed counts {[e['suppressed'] for e in lines]}")
    assert [e["suppressed"] for e in other] == [0]
    assert lines[0]["suppressed"] == 0 and lines[0]["user"] == "alice" and lines[0]["mechanism"] == "PLAIN"
    assert lines[0]["listener"] == "SASL_PLAINTEXT" and "Invalid username or password" in lines[0]["reason"]
    # Every failure is either a line or counted in the next line of its address.
    assert sum(1 + e["suppressed"] for e in lines) == caused
    # At most one line per interval (the daemon saw the failures within the test's span).
    assert len(lines) <= 1 + span_s / (LOG_INTERVAL_MS / 1000)
    assert len(lines) < caused


def test_failed_authentication_delays_the_answer_and_the_close(daemon, tmp_path):
    # Default (Kafka's 100 ms) on the module's daemon.
    assert fail_plain(daemon.sasl_port, "127.0.0.9") >= 0.1
    slow = start_sasl_daemon(tmp_path / "slow", **{"connection.failed.authentication.delay.ms": 1500,
                                                   "sundial.authentication.failure.log.interval.ms": 0,
                                                   "sundial.metrics.internal.topics.enabled": "true"})
    try:
        since = len(slow.log_lines())
        took = [fail_plain(slow.sasl_port, "127.0.0.9") for _ in range(3)]
        print(f"failed answers with connection.failed.authentication.delay.ms=1500 took {took}")
        assert min(took) >= 1.5
        # interval 0: every failure is a line of its own
        assert [e["suppressed"] for e in _failures_logged(slow, "127.0.0.9", since)] == [0, 0, 0]
        # a successful exchange is not delayed by the setting's wait (it is answered, and works)
        raw = RawSasl(slow.sasl_port)
        answer, _ = raw.plain("alice", PASSWORDS["alice"])
        assert answer.error_code == 0
        raw.close()
        _internal_topic_series(slow, expect_internal=True)
    finally:
        assert slow.stop() == 0


def _internal_topic_series(daemon, *, expect_internal: bool) -> None:
    """A group commits an offset (so __consumer_offsets exists and is open); the scrape has the
    user topic's series, and the internal topics' only when enabled."""
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    create_topic(daemon.bootstrap, topic, 1)
    consumer = KafkaConsumer(bootstrap_servers=daemon.bootstrap, group_id=f"sec-g-{uuid.uuid4().hex[:6]}",
                             enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(0, "", -1)})
    finally:
        consumer.close()

    def topics_in_scrape() -> set[str]:
        return {labels["topic"] for labels, _v in scrape(daemon.metrics_port).get("sundial_log_end_offset", [])}

    if expect_internal:
        wait_for(lambda: "__consumer_offsets" in topics_in_scrape() and topic in topics_in_scrape(), 30,
                 "__consumer_offsets and the topic in the per-partition series")
    else:
        wait_for(lambda: topic in topics_in_scrape(), 30, "the topic in the per-partition series")
        seen = topics_in_scrape()
        assert not seen & set(INTERNAL), seen
        for name in ("sundial_log_start_offset", "sundial_log_size_bytes", "sundial_log_segments",
                     "sundial_log_last_stable_offset"):
            assert not {labels["topic"] for labels, _ in scrape(daemon.metrics_port).get(name, [])} & set(INTERNAL)


def test_internal_topics_stay_out_of_partition_series_by_default(daemon):
    _internal_topic_series(daemon, expect_internal=False)


def test_build_info(daemon):
    samples = scrape(daemon.metrics_port)
    assert value(samples, "sundial_build_info", version=__version__, python=platform.python_version()) == 1
