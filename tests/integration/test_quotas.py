"""Client quotas against the real daemon, with real clients (docs/quotas.md).

* Set, described, removed through kafka-python's ``KafkaAdminClient`` (version 3.0.12 has no
  client-quota methods, so the test sends kafka-python's own DescribeClientQuotas and
  AlterClientQuotas request classes over the admin client's connection) and through
  ``sundial configs``; every entity kind (user, client-id, user+client-id, with defaults); the
  quotas survive a restart (SIGTERM) and a kill -9. confluent-kafka 2.16's AdminClient has no
  client-quota API (librdkafka has none), so it cannot drive these APIs.
* Kafka's refusals: an unknown key, a fractional byte rate, an unknown entity type, a bad filter.
* A kafka-python producer over its ``producer_byte_rate`` is throttled: over about 10 s its
  acknowledged bytes stay within twice the quota (a generous bound; benchmarks/quota_bench.py
  measures the achieved rate against the quota precisely), the producer saw throttle times, and
  the broker's throttle metrics count it.
* A kafka-python consumer over its ``consumer_byte_rate``, the same way: at most twice its quota
  over about 10 s, throttle times seen by the consumer and counted by the broker.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from .clients import admin, consumer, create_topic, producer
from .conftest import free_port, unique_topic

Entry = AlterClientQuotasRequest.EntryData
Component = DescribeClientQuotasRequest.ComponentData


def _send(client, request):
    async def ask():
        return await client._manager.send(request)

    return client._manager.run(ask)


def alter(client, entity: dict, set_: dict | None = None, remove: tuple = (), validate_only: bool = False):
    ops = [Entry.OpData(key=k, value=float(v), remove=False) for k, v in (set_ or {}).items()]
    ops += [Entry.OpData(key=k, value=0.0, remove=True) for k in remove]
    request = AlterClientQuotasRequest(entries=[Entry(entity=[Entry.EntityData(entity_type=t, entity_name=n)
                                                              for t, n in entity.items()], ops=ops)],
                                       validate_only=validate_only)
    entry = _send(client, request).entries[0]
    return entry.error_code, entry.error_message


def set_quotas(bootstrap: str, entity: dict, quotas: dict) -> None:
    """``quotas`` set on ``entity`` through a new admin client; the broker's answer asserted a success."""
    client = admin(bootstrap)
    try:
        assert alter(client, entity, quotas) == (0, None)
    finally:
        client.close()


def describe(client, components=(), strict=False):
    request = DescribeClientQuotasRequest(components=[Component(entity_type=t, match_type=m, match=n)
                                                      for t, m, n in components], strict=strict)
    response = _send(client, request)
    if response.error_code:
        return response.error_code, response.error_message
    return {tuple(sorted(((e.entity_type, e.entity_name) for e in entry.entity), key=lambda p: p[0])):
            {v.key: v.value for v in entry.values} for entry in response.entries}


def _cli(bootstrap: str, *args: str, code: int = 0) -> str:
    proc = subprocess.run([sys.executable, "-m", "sundial", "configs", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    return proc.stdout + proc.stderr


EXPECTED = {
    (("user", "alice"),): {"producer_byte_rate": 1048576.0, "request_percentage": 25.5},
    (("user", None),): {"consumer_byte_rate": 2097152.0},
    (("client-id", "app"),): {"producer_byte_rate": 4096.0},
    (("client-id", None),): {"request_percentage": 200.0},
    (("client-id", "app"), ("user", "alice")): {"consumer_byte_rate": 1000.0},
    (("client-id", None), ("user", None)): {"producer_byte_rate": 3000.0},
}


def test_quotas_set_described_removed_and_durable(broker_factory):
    node = broker_factory().start()
    client = admin(node.bootstrap)
    try:
        assert describe(client) == {}
        assert alter(client, {"user": "alice"}, {"producer_byte_rate": 1048576, "request_percentage": 25.5}) == (0, None)
        assert alter(client, {"user": None}, {"consumer_byte_rate": 2097152}) == (0, None)
        assert alter(client, {"client-id": "app"}, {"producer_byte_rate": 4096}) == (0, None)
        assert alter(client, {"client-id": None}, {"request_percentage": 200}) == (0, None)
        assert alter(client, {"user": "alice", "client-id": "app"}, {"consumer_byte_rate": 1000}) == (0, None)
        assert alter(client, {"user": None, "client-id": None}, {"producer_byte_rate": 3000}) == (0, None)
        assert alter(client, {"user": "bob"}, {"producer_byte_rate": 5}, validate_only=True) == (0, None)
        assert describe(client) == EXPECTED
        # Kafka's filters: exact, default, any; strict keeps only entities of exactly those types.
        assert set(describe(client, [("user", 0, "alice")])) == {(("user", "alice"),),
                                                                (("client-id", "app"), ("user", "alice"))}
        assert set(describe(client, [("user", 0, "alice")], strict=True)) == {(("user", "alice"),)}
        assert set(describe(client, [("user", 1, None), ("client-id", 2, None)], strict=True)) == {
            (("client-id", None), ("user", None))}
        assert set(describe(client, [("client-id", 2, None)], strict=True)) == {
            (("client-id", "app"),), (("client-id", None),)}
        # Refusals, with Kafka's codes and messages.
        assert alter(client, {"user": "x"}, {"producer_byte_rate_typo": 1}) == (
            42, "Invalid configuration key producer_byte_rate_typo")
        assert alter(client, {"user": "x"}, {"consumer_byte_rate": 1.5}) == (
            42, "consumer_byte_rate cannot be a fractional value.")
        assert alter(client, {"group": "g"}, {"producer_byte_rate": 1})[0] == 42
        assert describe(client, [("user", 0, None)])[0] == 42
        assert describe(client, [("topic", 2, None)])[0] == 35
    finally:
        client.close()
    # the tool, in kafka-configs.sh's words
    out = _cli(node.bootstrap, "--entity-type", "users", "--entity-name", "alice", "--describe")
    assert out.strip() == "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0, " \
                          "request_percentage=25.5"
    out = _cli(node.bootstrap, "--entity-type", "users", "--entity-default", "--entity-type", "clients",
               "--entity-default", "--describe")
    assert out.strip() == "Quota configs for the default user-principal, the default client-id are " \
                          "producer_byte_rate=3000.0"
    assert "Completed updating config for client app." in _cli(
        node.bootstrap, "--entity-type", "clients", "--entity-name", "app", "--alter", "--delete-config",
        "producer_byte_rate")
    assert "Completed updating default config for users in the cluster." in _cli(
        node.bootstrap, "--entity-type", "users", "--entity-default", "--alter", "--add-config",
        "consumer_byte_rate=2097152,producer_byte_rate=512")
    assert "cannot be a fractional value" in _cli(node.bootstrap, "--entity-type", "users", "--entity-name", "x",
                                                  "--alter", "--add-config", "producer_byte_rate=0.5", code=1)
    expected = dict(EXPECTED)
    del expected[(("client-id", "app"),)]
    expected[(("user", None),)] = {"consumer_byte_rate": 2097152.0, "producer_byte_rate": 512.0}
    node.stop()
    node.start()
    client = admin(node.bootstrap)
    try:
        assert describe(client) == expected
        assert alter(client, {"user": "alice"}, remove=("producer_byte_rate", "request_percentage")) == (0, None)
        del expected[(("user", "alice"),)]
        assert describe(client) == expected
    finally:
        client.close()
    node.kill()                                    # kill -9: what was acknowledged is on disk
    node.start()
    client = admin(node.bootstrap)
    try:
        assert describe(client) == expected
    finally:
        client.close()


def test_a_producer_over_its_byte_rate_is_throttled(broker_factory):
    metrics_port = free_port()
    node = broker_factory(**{"sundial.metrics.listener": f"127.0.0.1:{metrics_port}"}).start()
    topic = unique_topic("quota")
    create_topic(node.bootstrap, topic)
    quota = 200_000
    set_quotas(node.bootstrap, {"client-id": "throttled-producer"}, {"producer_byte_rate": quota})
    value = b"x" * 10_000
    acked = [0]
    room = threading.Semaphore(32)      # at most 32 records unacknowledged: sent is what the broker let through

    def on_ack(_metadata):
        acked[0] += len(value)
        room.release()

    def on_error(_exc):
        room.release()

    prod = producer(node.bootstrap, client_id="throttled-producer", acks=1, linger_ms=5, batch_size=65536)
    try:
        started = time.monotonic()
        while time.monotonic() - started < 10.0:
            if room.acquire(timeout=1.0):
                prod.send(topic, value).add_callback(on_ack).add_errback(on_error)
        prod.flush(timeout=60)
        elapsed = time.monotonic() - started
        throttle_max = _throttle_time_max(prod)
    finally:
        prod.close()
    assert_throttled(metrics_port, "produce", "throttled-producer", quota, acked[0], elapsed, throttle_max)


def test_a_consumer_over_its_byte_rate_is_throttled(broker_factory):
    """A kafka-python consumer reading a topic of 4 MB under a 100 kB/s consumer_byte_rate: over
    about 10 s it receives at most twice its quota (unthrottled it would read the 4 MB in well
    under a second), sees throttle times, and the broker's fetch throttle metric counts it."""
    metrics_port = free_port()
    node = broker_factory(**{"sundial.metrics.listener": f"127.0.0.1:{metrics_port}"}).start()
    topic = unique_topic("quota-fetch")
    create_topic(node.bootstrap, topic)
    value = b"y" * 10_000
    # Batches of one record: a response cut at max_bytes wastes at most one batch of the quota.
    prod = producer(node.bootstrap, acks=1, batch_size=16384)
    try:
        for _ in range(400):
            prod.send(topic, value)
        prod.flush(timeout=60)
    finally:
        prod.close()
    quota = 100_000
    set_quotas(node.bootstrap, {"client-id": "throttled-consumer"}, {"consumer_byte_rate": quota})
    cons = consumer(node.bootstrap, client_id="throttled-consumer")
    received = 0
    try:
        cons.subscribe([topic])
        started = time.monotonic()
        while time.monotonic() - started < 10.0:
            for records in cons.poll(timeout_ms=500).values():
                received += sum(len(r.value) for r in records)
        elapsed = time.monotonic() - started
        throttle_max = _throttle_time_max(cons)
    finally:
        cons.close()
    assert_throttled(metrics_port, "fetch", "throttled-consumer", quota, received, elapsed, throttle_max)


def assert_throttled(metrics_port: int, quota_type: str, client_id: str, quota: int, taken_bytes: int,
                     elapsed_s: float, throttle_max: float) -> None:
    """A client that moved ``taken_bytes`` in ``elapsed_s`` stayed within twice its ``quota`` (bytes a
    second) and saw a throttle time, and the broker's throttle counter of ``quota_type`` counts it."""
    achieved = taken_bytes / elapsed_s
    assert taken_bytes > 0
    assert achieved <= 2 * quota, f"{client_id} moved {achieved:.0f} B/s against a quota of {quota} B/s"
    assert throttle_max > 0
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    lines = [line for line in text.splitlines()
             if line.startswith("sundial_quota_throttled_requests_total{") and f'quota_type="{quota_type}"' in line]
    assert lines and f'client_id="{client_id}"' in lines[0] and float(lines[0].rsplit(" ", 1)[1]) > 0


def _throttle_time_max(client) -> float:
    """The largest throttle time a kafka-python client saw (0 if none)."""
    return max((v for name, v in _client_metrics(client).items() if "throttle-time-max" in name), default=0.0)


def _client_metrics(client) -> dict:
    out = {}
    for group, values in client.metrics().items():
        for name, value in values.items():
            if isinstance(value, (int, float)):
                out[f"{group}.{name}"] = float(value)
    return out


@pytest.mark.parametrize("api", ["describe", "alter"])
def test_quota_apis_need_cluster_authorization(broker_factory, api):
    node = broker_factory(**{"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                             "allow.everyone.if.no.acl.found": "false"}).start()
    client = admin(node.bootstrap)
    try:
        if api == "describe":
            assert describe(client)[0] == 31
        else:
            assert alter(client, {"user": "alice"}, {"producer_byte_rate": 10})[0] == 31
    finally:
        client.close()
