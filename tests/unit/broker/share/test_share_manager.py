"""The share fetch path over real logs: the share-partition manager (acquire, acknowledge, lock
timers, long poll, releases, start position, read_committed) and the ShareFetch/ShareAcknowledge
handlers with their share sessions. Ground truth is what the test wrote to the log and did."""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace

import pytest

from sundial.broker.handlers import share_fetch as h
from sundial.broker.purgatory import FetchPurgatory
from sundial.broker.replica_manager import ReplicaManager
from sundial.broker.share.acknowledgement import AcknowledgementBatch
from sundial.broker.share.manager import (FetchSettings, MemoryShareStateStore, SharePartitionManager,
                                          merge_state)
from sundial.broker.share.sessions import ShareSessionCache, next_epoch
from sundial.broker.share.state_batch import RecordState, ShareStateSnapshot, StateBatch, StateChange
from sundial.config import BrokerConfig
from sundial.config.group import ShareAutoOffsetReset
from sundial.protocol.api_keys import ApiKey
from sundial.protocol.codec import decode_response, encode_response
from sundial.protocol.errors import ErrorCode as E
from sundial.protocol.header import RequestHeader
from sundial.protocol.schema_codec import SCHEMA_CLASSES, build_message
from sundial.records.builder import SimpleRecord, build_batch, build_records
from sundial.storage import LogManager
from sundial.storage.files import FileSlice

ACCEPT, RELEASE, REJECT = 1, 2, 3
G = "g"


class _Metrics:
    def time_index_lookup(self):
        pass

    def appended(self, *args):
        pass


class Env:
    def __init__(self, tmp_path, *, lock_ms=30_000, reset="earliest", isolation="read_uncommitted",
                 limit=5, max_locks=2000, partitions=1):
        self.logs = LogManager([str(tmp_path)], {}, now_ms=lambda: int(time.time() * 1000))
        self.logs.startup()
        self.meta = self.logs.create_topic("t", partitions)
        self.topic_id = uuid.UUID(bytes=bytes(self.meta.topic_id))
        self.rm = ReplicaManager(BrokerConfig({}), self.logs, purgatory=FetchPurgatory(), metrics=_Metrics(),
                                 now_ms=lambda: int(time.time() * 1000))
        self.store = MemoryShareStateStore()
        self.settings = FetchSettings(lock_ms, limit, max_locks, ShareAutoOffsetReset.parse(reset), isolation)
        self.manager = SharePartitionManager(replica_manager=self.rm, store=self.store,
                                             settings=lambda group: self.settings,
                                             now_ms=lambda: int(time.time() * 1000))
        self.broker = SimpleNamespace(share_partitions=self.manager, logs=self.logs, authorizer=None)

    def produce(self, count, *, partition=0, timestamp=None, **kwargs):
        ts = int(time.time() * 1000) if timestamp is None else timestamp
        out = self.rm.append_one("t", partition, build_records(
            2, [SimpleRecord(ts, None, b"v%d" % i) for i in range(count)], **kwargs).buffer, int(time.time() * 1000))
        assert out.error_code == E.NONE
        return out

    async def fetch(self, member, *, max_records=500, wait_ms=0, partitions=((("t", 0)),), **kw):
        return await self.manager.fetch(G, member, list(partitions), max_wait_ms=wait_ms, min_bytes=1,
                                        max_bytes=1 << 20, max_records=max_records, batch_size=500, **kw)

    async def ack(self, member, first, last, kind, partition=0):
        return await self.manager.acknowledge(G, member, "t", partition,
                                              [AcknowledgementBatch(first, last, (kind,))])

    def ctx(self, api_key, version, conn="c1"):
        return SimpleNamespace(broker=self.broker, api_key=api_key, api_version=version, principal="User:ANONYMOUS",
                               client_host="127.0.0.1", connection_id=conn, listener_name="PLAINTEXT")

    def close(self):
        self.logs.shutdown()


@pytest.fixture
def env_factory(tmp_path):
    made = []

    def make(**kw):
        env = Env(tmp_path / str(len(made)), **kw)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


def ranges(result):
    return [(a.first_offset, a.last_offset, a.delivery_count) for a in result.acquired]


def offsets_in(result) -> list[int]:
    """The record offsets of the log bytes answered (ground truth: the batches' headers)."""
    from sundial.records.framing import iter_batches, iter_records
    data = result.records.read() if isinstance(result.records, FileSlice) else result.records
    return [r.offset for r in iter_records(data)]


@pytest.mark.asyncio
async def test_two_members_share_a_partition_each_record_once(env_factory):
    env = env_factory()
    for _ in range(3):
        env.produce(10)
    a = (await env.fetch("A", max_records=10))[("t", 0)]
    b = (await env.fetch("B", max_records=10))[("t", 0)]
    assert ranges(a) == [(0, 9, 1)] and ranges(b) == [(10, 19, 1)]
    assert offsets_in(a) == list(range(10)) and offsets_in(b) == list(range(10, 20))
    assert await env.ack("A", 0, 9, ACCEPT) == E.NONE
    assert await env.ack("B", 10, 19, ACCEPT) == E.NONE
    c = (await env.fetch("A"))[("t", 0)]
    assert ranges(c) == [(20, 29, 1)]
    assert await env.ack("A", 20, 29, ACCEPT) == E.NONE
    assert env.manager.start_offset(G, "t", 0) == 30
    assert env.store.states[(G, "t", 0)].start_offset == 30          # durable before the answer
    # B may not acknowledge A's records; nothing is left to fetch
    assert (await env.fetch("B"))[("t", 0)].acquired == ()
    assert env.manager.lag(G, "t", 0) == 0


@pytest.mark.asyncio
async def test_release_redelivers_reject_never(env_factory):
    env = env_factory()
    env.produce(4)
    a = (await env.fetch("A"))[("t", 0)]
    assert ranges(a) == [(0, 3, 1)]
    assert await env.manager.acknowledge(G, "A", "t", 0, [AcknowledgementBatch(0, 3, (RELEASE, REJECT, ACCEPT,
                                                                                      RELEASE))]) == E.NONE
    b = (await env.fetch("B"))[("t", 0)]
    assert ranges(b) == [(0, 0, 2), (3, 3, 2)]
    assert await env.ack("A", 0, 0, ACCEPT) == E.INVALID_RECORD_STATE      # B holds it now
    assert await env.ack("B", 0, 0, REJECT) == E.NONE
    assert await env.ack("B", 3, 3, ACCEPT) == E.NONE
    assert env.manager.start_offset(G, "t", 0) == 4
    assert (await env.fetch("A"))[("t", 0)].acquired == ()


@pytest.mark.asyncio
async def test_lock_expiry_hands_records_to_another_member_after_the_duration(env_factory):
    env = env_factory(lock_ms=300)
    env.produce(5)
    t0 = int(time.time() * 1000)
    assert ranges((await env.fetch("A"))[("t", 0)]) == [(0, 4, 1)]
    b = (await env.fetch("B", wait_ms=5000))[("t", 0)]     # parked until the lock runs out
    t1 = int(time.time() * 1000)
    assert ranges(b) == [(0, 4, 2)]
    assert t1 >= t0 + 300
    assert env.manager.stats[G].lock_expired_records == 5


@pytest.mark.asyncio
async def test_delivery_count_limit_archives(env_factory):
    env = env_factory(limit=2)
    env.produce(1)
    assert ranges((await env.fetch("A"))[("t", 0)]) == [(0, 0, 1)]
    assert await env.ack("A", 0, 0, RELEASE) == E.NONE
    assert ranges((await env.fetch("A"))[("t", 0)]) == [(0, 0, 2)]
    assert await env.ack("A", 0, 0, RELEASE) == E.NONE              # at the limit: archived
    assert (await env.fetch("A"))[("t", 0)].acquired == ()
    assert env.manager.start_offset(G, "t", 0) == 1


@pytest.mark.asyncio
async def test_long_poll_wakes_on_append_and_on_release(env_factory):
    env = env_factory()
    waiting = asyncio.ensure_future(env.fetch("A", wait_ms=10_000))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    env.produce(3)
    assert ranges((await asyncio.wait_for(waiting, 5))[("t", 0)]) == [(0, 2, 1)]
    waiting = asyncio.ensure_future(env.fetch("B", wait_ms=10_000))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    assert await env.ack("A", 0, 2, RELEASE) == E.NONE
    assert ranges((await asyncio.wait_for(waiting, 5))[("t", 0)]) == [(0, 2, 2)]


@pytest.mark.asyncio
async def test_member_release_on_departure_and_connection_drop(env_factory):
    env = env_factory()
    env.produce(3)
    # A opens a session on connection c1 and acquires everything
    resp = await h.handle_share_fetch(env.ctx(ApiKey.SHARE_FETCH, 1, "c1"), fetch_request(env, "A", 0))
    assert resp["error_code"] == E.NONE
    assert resp["responses"][0]["partitions"][0]["acquired_records"] == [(0, 2, 1)]
    env.manager.connection_closed("c1")
    await asyncio.sleep(0)
    assert env.manager.sessions.get(G, "A") is None
    b = (await env.fetch("B"))[("t", 0)]
    assert ranges(b) == [(0, 2, 1)]                   # given back, not processed: count not raised
    env.manager.on_member_departed(G, "B")
    assert ranges((await env.fetch("C"))[("t", 0)]) == [(0, 2, 1)]


@pytest.mark.asyncio
@pytest.mark.parametrize("reset,expected", [("earliest", 0), ("latest", 6), ("by_duration:PT30M", 3)])
async def test_auto_offset_reset(env_factory, reset, expected):
    env = env_factory(reset=reset)
    now = int(time.time() * 1000)
    env.produce(3, timestamp=now - 3_600_000)           # an hour old
    env.produce(3, timestamp=now - 60_000)              # a minute old
    first = (await env.fetch("A"))[("t", 0)]
    assert env.manager.start_offset(G, "t", 0) == expected
    assert [a.first_offset for a in first.acquired][:1] == ([expected] if expected < 6 else [])
    assert env.store.states[(G, "t", 0)].start_offset == expected   # initialized durably


@pytest.mark.asyncio
async def test_read_committed_skips_aborted_and_waits_at_open_transaction(env_factory):
    env = env_factory(isolation="read_committed")
    env.produce(2)                                                     # 0-1
    env.produce(2, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)   # 2-3 aborted
    await env.rm.write_txn_markers(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False,
                                   partitions=[("t", 0)])               # marker 4
    env.produce(2)                                                     # 5-6
    env.produce(2, producer_id=8, producer_epoch=0, base_sequence=0, is_transactional=True)   # 7-8 open
    env.produce(1)                                                     # 9, after the open transaction
    got = (await env.fetch("A"))[("t", 0)]
    delivered = [o for a in got.acquired for o in range(a.first_offset, a.last_offset + 1)]
    assert 2 not in delivered and 3 not in delivered
    assert {0, 1, 5, 6} <= set(delivered) and max(delivered) < 7        # stalled at the open transaction
    waiting = asyncio.ensure_future(env.fetch("B", wait_ms=10_000))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await env.rm.write_txn_markers(producer_id=8, producer_epoch=0, coordinator_epoch=0, commit=True,
                                   partitions=[("t", 0)])              # marker 10
    more = (await asyncio.wait_for(waiting, 5))[("t", 0)]
    delivered = {o for a in more.acquired for o in range(a.first_offset, a.last_offset + 1)}
    assert {7, 8, 9} <= delivered


@pytest.mark.asyncio
async def test_forget_reloads_from_the_store(env_factory):
    env = env_factory()
    env.produce(4)
    await env.fetch("A")
    assert await env.ack("A", 0, 1, ACCEPT) == E.NONE
    env.manager.forget(G, "t", 0)                     # acquired 2-3 are not persisted as acquired
    assert ranges((await env.fetch("B"))[("t", 0)]) == [(2, 3, 1)]


def test_merge_state_replaces_named_offsets_and_trims():
    snap = ShareStateSnapshot(0, 0, (StateBatch(0, 9, RecordState.AVAILABLE, 1),))
    out = merge_state(snap, StateChange(3, (StateBatch(3, 4, RecordState.ACKNOWLEDGED, 1),)))
    assert out.start_offset == 3
    assert out.state_batches == (StateBatch(3, 4, RecordState.ACKNOWLEDGED, 1),
                                 StateBatch(5, 9, RecordState.AVAILABLE, 1))


# --- handlers and sessions ------------------------------------------------------------------------

def fetch_request(env, member, epoch, *, acks=None, partitions=(0,), version=1, **extra):
    topic = {"topic_id": env.topic_id, "partitions": [
        {"partition_index": p, "acknowledgement_batches": (acks or {}).get(p, [])} for p in partitions]}
    value = {"group_id": G, "member_id": member, "share_session_epoch": epoch, "max_wait_ms": 0, "min_bytes": 1,
             "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500, "topics": [topic],
             "forgotten_topics_data": [], **extra}
    return build_message(SCHEMA_CLASSES[ApiKey.SHARE_FETCH][0], version, value)


def ack_request(env, member, epoch, acks, version=1):
    value = {"group_id": G, "member_id": member, "share_session_epoch": epoch, "topics": [
        {"topic_id": env.topic_id, "partitions": [{"partition_index": p, "acknowledgement_batches": b}
                                                   for p, b in acks.items()]}]}
    return build_message(SCHEMA_CLASSES[ApiKey.SHARE_ACKNOWLEDGE][0], version, value)


def roundtrip(api_key, version, response):
    """Encode as the connection would and decode as a client would."""
    for t in response.get("responses", ()):
        for p in t["partitions"]:
            if isinstance(p.get("records"), FileSlice):
                p["records"] = p["records"].read()
    frame = b"".join(bytes(b) for b in encode_response(RequestHeader(api_key, version, 7, None, 0), response))
    return decode_response(api_key, version, frame)[1]


def batch(first, last, kind):
    return {"first_offset": first, "last_offset": last, "acknowledge_types": [kind]}


@pytest.mark.asyncio
async def test_share_session_epochs_and_errors(env_factory):
    env = env_factory()
    env.produce(2)
    fetch = lambda member, epoch, **kw: h.handle_share_fetch(env.ctx(ApiKey.SHARE_FETCH, 1),
                                                             fetch_request(env, member, epoch, **kw))
    assert (await fetch("A", 1))["error_code"] == E.SHARE_SESSION_NOT_FOUND
    assert (await fetch("A", 0, acks={0: [batch(0, 0, ACCEPT)]}))["error_code"] == E.INVALID_REQUEST
    assert (await fetch("", 0))["error_code"] == E.INVALID_REQUEST
    first = await fetch("A", 0)
    assert first["error_code"] == E.NONE and first["acquisition_lock_timeout_ms"] == 30_000
    assert first["responses"][0]["partitions"][0]["acquired_records"] == [(0, 1, 1)]
    assert (await fetch("A", 5))["error_code"] == E.INVALID_SHARE_SESSION_EPOCH
    # epoch 1: acknowledge piggy-backed; nothing new to fetch; the acked partition is answered
    second = await fetch("A", 1, acks={0: [batch(0, 1, ACCEPT)]})
    part = second["responses"][0]["partitions"][0]
    assert (part["acknowledge_error_code"], part["acquired_records"]) == (E.NONE, ())
    # a bad acknowledgement (nothing in flight there) is refused per partition
    third = await fetch("A", 2, acks={0: [batch(2, 2, ACCEPT)]})
    assert third["responses"][0]["partitions"][0]["acknowledge_error_code"] == E.INVALID_RECORD_STATE
    ack = h.handle_share_acknowledge
    assert (await ack(env.ctx(ApiKey.SHARE_ACKNOWLEDGE, 1), ack_request(env, "A", 0, {0: []})))["error_code"] \
        == E.INVALID_SHARE_SESSION_EPOCH
    env.produce(1)
    fourth = await fetch("A", 3)
    assert fourth["responses"][0]["partitions"][0]["acquired_records"] == [(2, 2, 1)]
    out = await ack(env.ctx(ApiKey.SHARE_ACKNOWLEDGE, 1), ack_request(env, "A", 4, {0: [batch(2, 2, ACCEPT)]}))
    assert out["error_code"] == E.NONE and out["responses"][0]["partitions"][0]["error_code"] == E.NONE
    decoded = roundtrip(ApiKey.SHARE_ACKNOWLEDGE, 1, out)
    assert decoded.error_code == 0
    closed = await ack(env.ctx(ApiKey.SHARE_ACKNOWLEDGE, 1), ack_request(env, "A", -1, {}))
    assert closed["error_code"] == E.NONE and env.manager.sessions.get(G, "A") is None
    assert env.manager.start_offset(G, "t", 0) == 3


@pytest.mark.asyncio
async def test_close_releases_and_responses_encode(env_factory):
    env = env_factory()
    env.produce(3)
    out = await h.handle_share_fetch(env.ctx(ApiKey.SHARE_FETCH, 2), fetch_request(env, "A", 0, version=2))
    decoded = roundtrip(ApiKey.SHARE_FETCH, 2, out)
    assert decoded.error_code == 0
    closing = await h.handle_share_fetch(env.ctx(ApiKey.SHARE_FETCH, 1),
                                         fetch_request(env, "A", -1, acks={0: [batch(0, 0, ACCEPT)]}))
    assert closing["responses"][0]["partitions"][0]["acknowledge_error_code"] == E.NONE
    assert closing["responses"][0]["partitions"][0]["acquired_records"] == ()
    got = (await env.fetch("B"))[("t", 0)]
    assert [(o, a.delivery_count) for a in got.acquired for o in range(a.first_offset, a.last_offset + 1)] \
        == [(1, 1), (2, 1)]                           # released, not processed: count not raised


@pytest.mark.asyncio
async def test_renew_needs_is_renew_ack(env_factory):
    env = env_factory()
    env.produce(1)
    await h.handle_share_fetch(env.ctx(ApiKey.SHARE_FETCH, 2), fetch_request(env, "A", 0, version=2))
    bad = await h.handle_share_fetch(env.ctx(ApiKey.SHARE_FETCH, 2),
                                     fetch_request(env, "A", 1, version=2, acks={0: [batch(0, 0, 4)]}))
    assert bad["responses"][0]["partitions"][0]["acknowledge_error_code"] == E.INVALID_REQUEST
    ok = await h.handle_share_fetch(env.ctx(ApiKey.SHARE_FETCH, 2), fetch_request(
        env, "A", 2, version=2, acks={0: [batch(0, 0, 4)]}, is_renew_ack=True, max_wait_ms=0, min_bytes=0,
        max_bytes=0, max_records=0))
    assert ok["error_code"] == E.NONE
    assert ok["responses"][0]["partitions"][0]["acknowledge_error_code"] == E.NONE


def test_session_cache_limit_and_epochs():
    cache = ShareSessionCache(1)
    s = cache.open("g", "a", "c", [(uuid.uuid4(), 0)])
    assert s.epoch == 1
    with pytest.raises(Exception) as err:
        cache.open("g", "b", "c", [])
    assert err.value.error_code == E.SHARE_SESSION_LIMIT_REACHED
    cache.open("g", "a", "c2", [])                  # replacing one's own session is allowed
    assert next_epoch(2**31 - 1) == 1 and next_epoch(-1) == -1
    assert [x.member_id for x in cache.close_connection("c2")] == ["a"] and len(cache) == 0


@pytest.mark.asyncio
async def test_metrics_rows_count_what_happened(env_factory):
    from prometheus_client import CollectorRegistry, generate_latest
    from sundial.broker.share.metrics import ShareCollector, share_rows
    env = env_factory()
    env.produce(4)
    await env.fetch("A")
    await env.manager.acknowledge(G, "A", "t", 0, [AcknowledgementBatch(0, 3, (ACCEPT, RELEASE, REJECT, RELEASE))])
    await env.fetch("B")
    registry = CollectorRegistry()
    registry.register(ShareCollector(lambda: share_rows(env.manager)))
    text = generate_latest(registry).decode()
    assert 'sundial_share_acquired_records_total{group="g"} 6.0' in text
    assert 'sundial_share_redelivered_records_total{group="g"} 2.0' in text
    assert 'sundial_share_acknowledged_records_total{group="g"} 1.0' in text
    assert 'sundial_share_released_records_total{group="g"} 2.0' in text
    assert 'sundial_share_archived_records_total{group="g"} 1.0' in text
    assert 'sundial_share_in_flight_records{group="g"} 3.0' in text   # SPSO 1 to end 3 (2 archived)
    assert 'sundial_share_lag{group="g",partition="0",topic="t"} 2.0' in text


@pytest.mark.asyncio
async def test_topic_deleted_and_made_again_is_a_new_share_partition(env_factory):
    env = env_factory()
    env.produce(5)
    await env.fetch("A")
    assert await env.ack("A", 0, 4, ACCEPT) == E.NONE
    assert env.manager.start_offset(G, "t", 0) == 5
    env.logs.delete_topic("t")
    await env.store.delete(G, "t", 0)     # the durable store keys state by topic id and drops a deleted topic's
    assert (await env.fetch("A"))[("t", 0)].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    env.logs.create_topic("t", 1)
    env.produce(2)
    assert ranges((await env.fetch("A"))[("t", 0)]) == [(0, 1, 1)]


@pytest.mark.asyncio
async def test_departure_before_the_closing_acknowledgement_keeps_them(env_factory):
    """librdkafka's close sends the leave heartbeat, then the ShareAcknowledge (epoch -1) with the
    last acknowledgements: they must still apply."""
    env = env_factory()
    env.produce(3)
    await h.handle_share_fetch(env.ctx(ApiKey.SHARE_FETCH, 1), fetch_request(env, "A", 0))
    env.manager.on_member_departed(G, "A")
    out = await h.handle_share_acknowledge(env.ctx(ApiKey.SHARE_ACKNOWLEDGE, 1),
                                           ack_request(env, "A", -1, {0: [batch(0, 1, ACCEPT)]}))
    assert out["error_code"] == E.NONE and out["responses"][0]["partitions"][0]["error_code"] == E.NONE
    assert env.manager.start_offset(G, "t", 0) == 2
    assert ranges((await env.fetch("B"))[("t", 0)]) == [(2, 2, 1)]     # the rest released by the close


@pytest.mark.asyncio
async def test_lock_expiry_of_a_deleted_topic_writes_nothing_for_its_successor(env_factory):
    """A topic deleted while records were acquired, then made again: the old locks run out but
    their state must not be written for the new topic (the store finds state by topic name)."""
    env = env_factory(lock_ms=200)
    env.produce(3)
    assert ranges((await env.fetch("A"))[("t", 0)]) == [(0, 2, 1)]
    env.logs.delete_topic("t")
    await env.store.delete(G, "t", 0)
    env.logs.create_topic("t", 1)
    writes = env.store.writes
    await asyncio.sleep(0.5)                       # the old locks' deadline passes
    assert env.store.writes == writes and (G, "t", 0) not in env.store.states
    env.produce(2)
    assert ranges((await env.fetch("B"))[("t", 0)]) == [(0, 1, 1)]


@pytest.mark.asyncio
async def test_v2_record_limit_mode_is_strict(env_factory):
    env = env_factory()
    env.produce(5)                                   # one batch of 5
    out = await h.handle_share_fetch(env.ctx(ApiKey.SHARE_FETCH, 2), fetch_request(
        env, "A", 0, version=2, max_records=2, share_acquire_mode=1))
    assert out["responses"][0]["partitions"][0]["acquired_records"] == [(0, 1, 1)]
    out = await h.handle_share_fetch(env.ctx(ApiKey.SHARE_FETCH, 1), fetch_request(env, "B", 0, max_records=2))
    got = out["responses"][0]["partitions"][0]["acquired_records"]
    assert [o for f, l, _ in got for o in range(f, l + 1)] == [2, 3, 4]   # batch-optimized: may exceed 2


class _Deny:
    def __init__(self, denied):
        self.denied = denied

    def authorize(self, principal, host, operation, resource_type, name, *, log_denied=True):
        return (resource_type.name, name) not in self.denied


@pytest.mark.asyncio
async def test_acls_group_and_topic_read(env_factory):
    env = env_factory()
    env.produce(2)
    env.broker.authorizer = _Deny({("GROUP", G)})
    out = await h.handle_share_fetch(env.ctx(ApiKey.SHARE_FETCH, 1), fetch_request(env, "A", 0))
    assert out["error_code"] == E.GROUP_AUTHORIZATION_FAILED
    out = await h.handle_share_acknowledge(env.ctx(ApiKey.SHARE_ACKNOWLEDGE, 1), ack_request(env, "A", 1, {}))
    assert out["error_code"] == E.GROUP_AUTHORIZATION_FAILED
    env.broker.authorizer = _Deny({("TOPIC", "t")})
    out = await h.handle_share_fetch(env.ctx(ApiKey.SHARE_FETCH, 1), fetch_request(env, "A", 0))
    part = out["responses"][0]["partitions"][0]
    assert (out["error_code"], part["error_code"], part["acquired_records"]) == \
        (E.NONE, E.TOPIC_AUTHORIZATION_FAILED, ())
    assert env.manager.start_offset(G, "t", 0) is None            # nothing was read or loaded
    # an unknown topic id answers UNKNOWN_TOPIC_ID
    env.broker.authorizer = None
    req = fetch_request(env, "B", 0)
    req.topics[0].topic_id = uuid.uuid4()
    out = await h.handle_share_fetch(env.ctx(ApiKey.SHARE_FETCH, 1), req)
    assert out["responses"][0]["partitions"][0]["error_code"] == E.UNKNOWN_TOPIC_ID


@pytest.mark.asyncio
async def test_cold_pages_are_read_in_off_the_loop_before_acquiring(env_factory, monkeypatch):
    from sundial.broker import page_cache
    env = env_factory()
    env.produce(3)
    warmed = []

    class Scheduler:
        async def run(self, fn, *args):
            warmed.append(args)
            return await asyncio.to_thread(fn, *args)

    env.rm.scheduler = Scheduler()
    monkeypatch.setattr(page_cache, "cached", lambda fd, position, size: False)   # every page cold
    got = (await env.fetch("A"))[("t", 0)]
    assert ranges(got) == [(0, 2, 1)] and offsets_in(got) == [0, 1, 2]
    # the header walk's range first (then read again, as it is), then the answer's slice; then acquired
    assert len(warmed) == 2 and env.manager.header_warms == 1
    ((_, position, size),) = warmed[0][0]            # from the refused header to the answer's end at least
    ((_, answer_position, answer_size),) = warmed[1][0]
    assert position <= answer_position and position + size >= answer_position + answer_size


def test_list_offsets_timestamp_of_each_reset_strategy():
    """share.auto.offset.reset as the ListOffsets lookup of a new share-partition's start: Kafka's
    sentinels -2 (earliest) and -1 (latest), or the duration's start time."""
    from sundial.broker.share.manager import list_offsets_timestamp
    now = 1_700_000_000_123
    assert list_offsets_timestamp(ShareAutoOffsetReset.parse("earliest"), now) == -2
    assert list_offsets_timestamp(ShareAutoOffsetReset.parse("latest"), now) == -1
    assert list_offsets_timestamp(ShareAutoOffsetReset.parse("by_duration:PT1H"), now) == now - 3_600_000
    assert list_offsets_timestamp(ShareAutoOffsetReset.parse("by_duration:P100000D"), now) == 0
