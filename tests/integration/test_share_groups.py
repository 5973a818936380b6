"""Share groups (KIP-932) end to end: the real daemon driven by confluent-kafka's ShareConsumer.

Ground truth is what the test produced (the producer's delivery reports give every offset) and
what each consumer was handed (topic, partition, offset, delivery count). Waits end on conditions
with generous deadlines; the lock-duration checks compare the broker-independent wall clock of
this process with the configured duration ("not before"), never an upper bound on speed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer  # noqa: E402
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,  # noqa: E402
                                   NewTopic, ResourceType)

from sundial.protocol.api_keys import ApiKey  # noqa: E402

from .clients import connect_raw, read_frame  # noqa: E402
from sundial.protocol import decode_response, encode_request  # noqa: E402

TIMEOUT_S = 60
LOCK_MS = 3000

#: Heartbeats every second so that members are assigned quickly; locks of 3 s for the expiry tests.
FAST_SHARE_GROUPS = {
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "1000",
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.min.record.lock.duration.ms": "1000",
}


def _share_routed(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    s = connect_raw(host, int(port))
    try:
        s.sendall(encode_request(ApiKey.API_VERSIONS, 3, 1, "probe", {"client_software_name": "probe",
                                                                      "client_software_version": "1"}))
        _, body = decode_response(ApiKey.API_VERSIONS, 3, read_frame(s))
    finally:
        s.close()
    keys = {k.api_key for k in body.api_keys}
    return {ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE} <= keys


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    from . import conftest
    if conftest.DAEMONS_UNAVAILABLE is not None:   # in compose, daemons are containers of the image
        pytest.skip(conftest.DAEMONS_UNAVAILABLE)
    proc = conftest.SundialProcess(tmp_path_factory.mktemp("share-broker"), dict(FAST_SHARE_GROUPS))
    proc.start()
    if not _share_routed(proc.bootstrap):
        proc.stop()
        pytest.skip("share-group APIs are not served by this build")
    yield proc
    code = proc.stop()
    assert code == 0, f"sundial exited with {code}:\n{proc.log_text()[-3000:]}"


def share_daemon(broker_factory, **settings):
    """A started daemon of the test's own with FAST_SHARE_GROUPS and ``settings``; the test skips where
    this build does not serve the share-group APIs."""
    proc = broker_factory(**{**FAST_SHARE_GROUPS, **settings}).start()
    if not _share_routed(proc.bootstrap):
        pytest.skip("share-group APIs are not served by this build")
    return proc


def new_share_group(bootstrap: str, configs: dict[str, str] | None = None) -> tuple[str, str]:
    """A new one-partition topic and a new share group that starts at the earliest offset (and has
    ``configs``): (topic, group)."""
    topic, group = unique("share"), unique("sg")
    create_topic(bootstrap, topic)
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest", **(configs or {})})
    return topic, group


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT_S)


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """As confluent-kafka-python's own share tests do: IncrementalAlterConfigs on the GROUP resource."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT_S)


def produce(bootstrap: str, topic: str, count: int, *, partition: int = 0, prefix: str = "v",
            timestamp_ms: int | None = None) -> list[int]:
    """Produce ``count`` records; their offsets (from the delivery reports)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    offsets: list[int] = []

    def report(err, msg):
        assert err is None, err
        offsets.append(msg.offset())

    for i in range(count):
        kw = {"timestamp": timestamp_ms} if timestamp_ms is not None else {}
        p.produce(topic, value=f"{prefix}{i}".encode(), partition=partition, on_delivery=report, **kw)
    assert p.flush(TIMEOUT_S) == 0
    assert len(offsets) == count
    return sorted(offsets)


def share_consumer(bootstrap: str, group: str, topic: str, *, explicit: bool = False, **extra) -> ShareConsumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, **extra}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    c = ShareConsumer(conf)
    c.subscribe([topic])
    return c


def poll_records(c: ShareConsumer, timeout_s: float = 0.5) -> list:
    out = []
    for m in c.poll(timeout_s) or []:
        if m.error() is None:
            out.append(m)
    return out


def collect(consumers: dict, want: int, *, explicit_ack=None, deadline_s: float = TIMEOUT_S) -> dict[str, list]:
    """Poll every consumer in turn until ``want`` records arrived in all; each message as
    (partition, offset, delivery count, value)."""
    seen: dict[str, list] = {name: [] for name in consumers}
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and sum(len(v) for v in seen.values()) < want:
        for name, c in consumers.items():
            for m in poll_records(c, 0.2):
                seen[name].append((m.partition(), m.offset(), m.delivery_count(), m.value()))
                if explicit_ack is not None:
                    c.acknowledge(m, explicit_ack(name, m))
    return seen


def close_all(*consumers) -> None:
    for c in consumers:
        try:
            c.close()
        except Exception:
            pass


@pytest.mark.parametrize("members", [2, 3])
def test_consumers_share_one_partition_and_consume_each_record_once(daemon, members):
    topic, group = new_share_group(daemon.bootstrap)
    consumers = {f"m{i}": share_consumer(daemon.bootstrap, group, topic) for i in range(members)}
    try:
        offsets = produce(daemon.bootstrap, topic, 300)
        seen = collect(consumers, len(offsets))
        got = [(p, o) for v in seen.values() for p, o, _, _ in v]
        assert sorted(o for _, o in got) == offsets                 # each record once, none missing
        # keep polling a while: nothing is delivered again once accepted (implicit acknowledgement)
        more = collect(consumers, 1, deadline_s=3)
        assert sum(len(v) for v in more.values()) == 0
    finally:
        close_all(*consumers.values())


def test_release_redelivers_with_count_plus_one_and_reject_never(daemon):
    topic, group = new_share_group(daemon.bootstrap)
    c = share_consumer(daemon.bootstrap, group, topic, explicit=True)
    try:
        produce(daemon.bootstrap, topic, 2)
        # offset 0: released once then accepted; offset 1: rejected
        deliveries: list[tuple[int, int]] = []

        def decide(_name, m):
            deliveries.append((m.offset(), m.delivery_count()))
            if m.offset() == 1:
                return AcknowledgeType.REJECT
            return AcknowledgeType.RELEASE if m.delivery_count() == 1 else AcknowledgeType.ACCEPT

        collect({"c": c}, 3, explicit_ack=decide)
        more = collect({"c": c}, 1, explicit_ack=decide, deadline_s=3)
        assert sum(len(v) for v in more.values()) == 0
        assert sorted(deliveries) == [(0, 1), (0, 2), (1, 1)]
    finally:
        close_all(c)


def test_unacknowledged_records_move_after_the_lock_duration_and_not_before(daemon):
    topic, group = new_share_group(daemon.bootstrap)
    a = share_consumer(daemon.bootstrap, group, topic, explicit=True)
    b = None
    try:
        offsets = produce(daemon.bootstrap, topic, 5)
        got: list = []
        end = time.monotonic() + TIMEOUT_S
        while not got and time.monotonic() < end:
            got = poll_records(a)
        acquired_at = time.monotonic()
        assert got
        held = sorted(m.offset() for m in got)
        # A keeps its session (its client stays connected and heartbeats) but never acknowledges.
        b = share_consumer(daemon.bootstrap, group, topic, explicit=True)
        seen: dict[int, tuple[int, float]] = {}
        end = time.monotonic() + TIMEOUT_S
        while len(seen) < len(offsets) and time.monotonic() < end:
            for m in poll_records(b, 0.2):
                seen[m.offset()] = (m.delivery_count(), time.monotonic())
                b.acknowledge(m, AcknowledgeType.ACCEPT)
        assert sorted(seen) == offsets
        for offset in held:
            count, when = seen[offset]
            assert count == 2
            assert when - acquired_at >= LOCK_MS / 1000 - 0.05    # the lock ran out first (timer slack)
    finally:
        close_all(*(x for x in (a, b) if x is not None))


_HOLDER = textwrap.dedent("""
    import sys, time
    from confluent_kafka import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([sys.argv[3]])
    end = time.monotonic() + 60
    while time.monotonic() < end:
        got = [m for m in (c.poll(0.5) or []) if m.error() is None]
        if got:
            print(" ".join(str(m.offset()) for m in got), flush=True)
            break
    time.sleep(600)   # holds its records until killed
""")


def test_connection_drop_releases_records_at_once(broker_factory):
    proc = share_daemon(broker_factory, **{"group.share.record.lock.duration.ms": "60000"})
    topic, group = new_share_group(proc.bootstrap)
    offsets = produce(proc.bootstrap, topic, 5)
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, proc.bootstrap, group, topic],
                              stdout=subprocess.PIPE, text=True)
    b = None
    try:
        line = holder.stdout.readline()
        assert line.strip(), "the holder got no records"
        held = sorted(int(x) for x in line.split())
        holder.kill()                                   # its connections drop; nothing is closed cleanly
        holder.wait(TIMEOUT_S)
        killed_at = time.monotonic()
        b = share_consumer(proc.bootstrap, group, topic, explicit=True)
        seen: dict[int, int] = {}
        end = time.monotonic() + TIMEOUT_S
        while len(seen) < len(offsets) and time.monotonic() < end:
            for m in poll_records(b, 0.2):
                seen[m.offset()] = m.delivery_count()
                b.acknowledge(m, AcknowledgeType.ACCEPT)
        assert sorted(seen) == offsets
        assert time.monotonic() - killed_at < 50        # released on the drop, not at the 60 s lock expiry
        assert all(seen[o] == 1 for o in held)         # given back, not processed: the count is not raised
    finally:
        if holder.poll() is None:
            holder.kill()
        if b is not None:
            close_all(b)


def test_delivery_count_limit_archives(daemon):
    topic, group = new_share_group(daemon.bootstrap)
    c = share_consumer(daemon.bootstrap, group, topic, explicit=True)
    try:
        produce(daemon.bootstrap, topic, 1)
        counts: list[int] = []
        collect({"c": c}, 5, explicit_ack=lambda _n, m: (counts.append(m.delivery_count()),
                                                        AcknowledgeType.RELEASE)[1], deadline_s=20)
        assert counts == [1, 2, 3, 4, 5]            # group.share.delivery.count.limit 5, then archived
    finally:
        close_all(c)


@pytest.mark.parametrize("reset", ["latest", "earliest", "by_duration:PT1H"])
def test_auto_offset_reset(daemon, reset):
    topic, group = unique("share"), unique("sg")
    create_topic(daemon.bootstrap, topic)
    now = int(time.time() * 1000)
    old = produce(daemon.bootstrap, topic, 3, prefix="old", timestamp_ms=now - 3 * 3_600_000)
    recent = produce(daemon.bootstrap, topic, 3, prefix="recent", timestamp_ms=now - 60_000)
    if reset != "latest":
        set_group_configs(daemon.bootstrap, group, {"share.auto.offset.reset": reset})
    c = share_consumer(daemon.bootstrap, group, topic)
    try:
        later: list[int] = []
        if reset == "latest":
            # the partition starts where the log ends when the group first fetches it
            end = time.monotonic() + TIMEOUT_S
            while time.monotonic() < end and not later:
                poll_records(c, 0.3)
                later = produce(daemon.bootstrap, topic, 1, prefix="new")
                got = collect({"c": c}, 1, deadline_s=5)["c"]
                if got:
                    assert all(v.startswith(b"new") for _, _, _, v in got)
                    break
                later = []
            assert later
            return
        want = old + recent if reset == "earliest" else recent
        got = collect({"c": c}, len(want))["c"]
        assert sorted(o for _, o, _, _ in got) == want
    finally:
        close_all(c)


def test_read_committed_skips_aborted_and_waits_at_open_transaction(daemon):
    topic, group = new_share_group(daemon.bootstrap, {"share.isolation.level": "read_committed"})
    tx = Producer({"bootstrap.servers": daemon.bootstrap, "transactional.id": unique("tx")})
    tx.init_transactions(TIMEOUT_S)
    tx.begin_transaction()
    for i in range(3):
        tx.produce(topic, value=b"aborted%d" % i, partition=0)
    tx.abort_transaction(TIMEOUT_S)
    tx.begin_transaction()
    for i in range(3):
        tx.produce(topic, value=b"committed%d" % i, partition=0)
    tx.commit_transaction(TIMEOUT_S)
    tx.begin_transaction()
    tx.produce(topic, value=b"open", partition=0)
    tx.flush(TIMEOUT_S)
    produce(daemon.bootstrap, topic, 1, prefix="after-open")
    c = share_consumer(daemon.bootstrap, group, topic)
    try:
        got = collect({"c": c}, 3)["c"]
        assert sorted(v for _, _, _, v in got) == [b"committed0", b"committed1", b"committed2"]
        assert not collect({"c": c}, 1, deadline_s=3)["c"]               # stalled at the open transaction
        tx.commit_transaction(TIMEOUT_S)
        rest = collect({"c": c}, 2)["c"]
        assert sorted(v for _, _, _, v in rest) == [b"after-open0", b"open"]
    finally:
        close_all(c)


def test_classic_and_consumer_groups_on_the_same_topic_are_unaffected(daemon):
    topic, group = new_share_group(daemon.bootstrap)
    offsets = produce(daemon.bootstrap, topic, 50)
    s = share_consumer(daemon.bootstrap, group, topic)
    try:
        shared = collect({"s": s}, len(offsets))["s"]
        assert sorted(o for _, o, _, _ in shared) == offsets
    finally:
        close_all(s)
    for protocol in ("classic", "consumer"):
        conf = {"bootstrap.servers": daemon.bootstrap, "group.id": unique(protocol), "auto.offset.reset": "earliest",
                "group.protocol": protocol}
        c = Consumer(conf)
        c.subscribe([topic])
        got: list[int] = []
        end = time.monotonic() + TIMEOUT_S
        try:
            while len(got) < len(offsets) and time.monotonic() < end:
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    got.append(m.offset())
        finally:
            c.close()
        assert sorted(got) == offsets, protocol


def test_kill_and_restart_keeps_acknowledged_state(broker_factory):
    proc = share_daemon(broker_factory)
    topic, group = new_share_group(proc.bootstrap)
    offsets = produce(proc.bootstrap, topic, 10)
    a = share_consumer(proc.bootstrap, group, topic, explicit=True)
    accepted: set[int] = set()
    end = time.monotonic() + TIMEOUT_S
    while len(accepted) < 5 and time.monotonic() < end:
        for m in poll_records(a, 0.3):
            if m.offset() < 5:
                a.acknowledge(m, AcknowledgeType.ACCEPT)
                accepted.add(m.offset())
            else:
                a.acknowledge(m, AcknowledgeType.RELEASE if m.offset() % 2 else AcknowledgeType.ACCEPT)
                if m.offset() % 2 == 0:
                    accepted.add(m.offset())
        if accepted:
            a.commit_sync()                       # the acknowledgements are answered once durable
    assert {o for o in offsets if o < 5} <= accepted
    proc.kill()                                   # kill -9: nothing flushed on the way out
    proc.start()
    b = share_consumer(proc.bootstrap, group, topic, explicit=True)
    try:
        want = sorted(set(offsets) - accepted)
        seen: list[int] = []
        end = time.monotonic() + TIMEOUT_S
        while len(seen) < len(want) and time.monotonic() < end:
            for m in poll_records(b, 0.3):
                seen.append(m.offset())
                b.acknowledge(m, AcknowledgeType.ACCEPT)
        assert sorted(seen) == want               # nothing acknowledged comes back, the rest does
        extra = collect({"b": b}, 1, explicit_ack=lambda _n, _m: AcknowledgeType.ACCEPT, deadline_s=3)
        assert not extra["b"]
    finally:
        close_all(b, a)


def test_share_metrics_count_what_the_consumers_did(broker_factory):
    from .conftest import free_port
    from .test_metrics import scrape, value
    port = free_port()
    proc = share_daemon(broker_factory, **{"sundial.metrics.listener": f"127.0.0.1:{port}"})
    topic, group = new_share_group(proc.bootstrap)
    produce(proc.bootstrap, topic, 4)
    c = share_consumer(proc.bootstrap, group, topic, explicit=True)
    kinds = {0: AcknowledgeType.ACCEPT, 1: AcknowledgeType.REJECT, 2: AcknowledgeType.ACCEPT}
    try:
        # offset 3 is released once, then accepted: 5 deliveries, 1 redelivery
        collect({"c": c}, 5, explicit_ack=lambda _n, m: kinds.get(m.offset(), AcknowledgeType.RELEASE
                                                                 if m.delivery_count() == 1
                                                                 else AcknowledgeType.ACCEPT))
        c.commit_sync()
    finally:
        close_all(c)

    def counted():
        s = scrape(port)
        return (value(s, "sundial_share_acquired_records_total", group=group),
                value(s, "sundial_share_redelivered_records_total", group=group),
                value(s, "sundial_share_acknowledged_records_total", group=group),
                value(s, "sundial_share_archived_records_total", group=group),
                value(s, "sundial_share_released_records_total", group=group),
                value(s, "sundial_share_lag", group=group, topic=topic, partition=0))

    end = time.monotonic() + TIMEOUT_S
    while counted() != (5, 1, 3, 1, 1, 0) and time.monotonic() < end:
        time.sleep(0.2)
    assert counted() == (5, 1, 3, 1, 1, 0)
