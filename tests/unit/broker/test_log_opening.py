"""OffsetForLeaderEpoch, DescribeProducers and DescribeShareGroupOffsets open the partitions they
name off the event loop, as Produce, ListOffsets and DeleteRecords do: the route's ``prepare`` step
hands the opens to the scheduler, the loop keeps running while a slow disk holds the open, and the
handler then answers from the open log. Requests go through the real codec; the answers are checked
against what the test appended."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from sundial.broker.dispatch import ROUTES
from sundial.broker.scheduler import Scheduler
from sundial.protocol.api_keys import ApiKey
from sundial.protocol.codec import decode_request, encode_request
from sundial.protocol.header import parse_request_header
from sundial.records.builder import build_records, SimpleRecord

from test_broker_off_the_loop import UNBOUNDED, HeldDisk, build, seam, served_while  # noqa: F401 (fixture)

ROUTE = {route.api_key: route for route in ROUTES}


def decoded(api_key: ApiKey, version: int, body: dict):
    frame = encode_request(api_key, version, 7, "t", body)
    view = memoryview(frame)[4:]
    return decode_request(parse_request_header(view), view)


def epoch_request(partitions):
    return decoded(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [
        {"topic": topic, "partitions": [{"partition": p, "current_leader_epoch": -1, "leader_epoch": 0}
                                        for p in ps]} for topic, ps in partitions.items()]})


def producers_request(partitions):
    return decoded(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": topic, "partition_indexes": ps} for topic, ps in partitions.items()]})


def idempotent_batch(producer_id: int, count: int) -> bytes:
    now = int(time.time() * 1000)
    return build_records(2, [SimpleRecord(now, None, b"v")] * count, producer_id=producer_id, producer_epoch=0,
                         base_sequence=0).buffer


def reopen(tmp_path, scheduler):
    """A LogManager over the same directory, started again: its partitions are not open yet."""
    logs, rm = build(tmp_path, scheduler)
    assert not logs.is_open("t", 0) and not logs.is_open("t", 1)
    return logs, rm


@pytest.mark.parametrize("api_key", [ApiKey.OFFSET_FOR_LEADER_EPOCH, ApiKey.DESCRIBE_PRODUCERS])
def test_the_named_partitions_open_on_the_scheduler_while_the_loop_serves(tmp_path, seam, api_key):
    scheduler = Scheduler(2)
    logs, rm = build(tmp_path, scheduler)
    logs.create_topic("t", 2, UNBOUNDED)
    asyncio.run(_append(rm, "t", 0, idempotent_batch(42, 3)))
    logs.shutdown()
    logs, rm = reopen(tmp_path, scheduler)
    held = seam(HeldDisk(held={"open"}))
    ctx = SimpleNamespace(broker=SimpleNamespace(replica_manager=rm, authorizer=None), api_version=0)
    request = epoch_request({"t": [0, 1], "nope": [0]}) if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH \
        else producers_request({"t": [0, 1], "nope": [0]})
    route = ROUTE[api_key]

    async def main():
        waiting = route.prepare(ctx, request)
        assert waiting is not None, "the partitions were not open: the prepare step must open them"
        ticks, _ = await served_while(waiting, held)
        assert ticks > 0, "the loop ran while the disk held the open"
        assert logs.is_open("t", 0) and logs.is_open("t", 1)
        assert route.prepare(ctx, request) is None       # open already: nothing to wait for
        return await route.handler(ctx, request)

    answer = asyncio.run(main())
    by_partition = {(t["topic"] if "topic" in t else t["name"], p["partition"] if "partition" in p
                     else p["partition_index"]): p for t in answer["topics"] for p in t["partitions"]}
    if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
        assert {k: (v["error_code"], v["end_offset"]) for k, v in by_partition.items()} == {
            ("t", 0): (0, 3), ("t", 1): (0, 0), ("nope", 0): (3, -1)}
    else:
        assert {k: (v["error_code"], [d["producer_id"] for d in v["active_producers"]])
                for k, v in by_partition.items()} == {("t", 0): (0, [42]), ("t", 1): (0, []), ("nope", 0): (3, [])}
    logs.shutdown()
    scheduler.close()


async def _append(rm, topic, partition, batch):
    out = rm.append_one(topic, partition, batch, int(time.time() * 1000))
    assert out.error_code == 0


def share_offsets_request(group_id, topics):
    return decoded(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, {"groups": [
        {"group_id": group_id, "topics": None if topics is None else [
            {"topic_name": topic, "partitions": ps} for topic, ps in topics.items()]}]})


@pytest.mark.parametrize("named", [True, False], ids=["topics-named", "every-share-partition"])
def test_describe_share_group_offsets_opens_its_partitions_on_the_scheduler(tmp_path, seam, named):
    """The lag of DescribeShareGroupOffsets asks the partition's latest offset: the partitions it
    names (or, for a group named without topics, the ones with share state) open off the loop."""
    from sundial.broker.share.state_store import ShareStateStore
    from sundial.config import BrokerConfig

    config = BrokerConfig({"group.share.enable": "true"})
    now_ms = lambda: int(time.time() * 1000)  # noqa: E731
    scheduler = Scheduler(2)
    logs, rm = build(tmp_path, scheduler)
    logs.create_topic("t", 2, UNBOUNDED)
    asyncio.run(_append(rm, "t", 0, idempotent_batch(42, 3)))
    store = ShareStateStore.open(logs, config, now_ms=now_ms)
    store.mark_loaded()
    asyncio.run(store.initialize("g", "t", 0, 1))
    logs.shutdown()
    logs, rm = reopen(tmp_path, scheduler)
    store = ShareStateStore.open(logs, config, now_ms=now_ms)
    store.replay()
    store.mark_loaded()
    assert not logs.is_open("t", 0)
    held = seam(HeldDisk(held={"open"}))
    ctx = SimpleNamespace(broker=SimpleNamespace(replica_manager=rm, authorizer=None, share_state=store, logs=logs,
                                                 config=config), api_version=0)
    request = share_offsets_request("g", {"t": [0, 1], "nope": [0]} if named else None)
    route = ROUTE[ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS]

    async def main():
        waiting = route.prepare(ctx, request)
        assert waiting is not None, "the partitions were not open: the prepare step must open them"
        ticks, _ = await served_while(waiting, held)
        assert ticks > 0, "the loop ran while the disk held the open"
        assert logs.is_open("t", 0)
        assert route.prepare(ctx, request) is None       # open already: nothing to wait for
        return await route.handler(ctx, request)

    answer = asyncio.run(main())
    found = {(t["topic_name"], p["partition_index"]): (p["error_code"], p["start_offset"], p["lag"])
             for g in answer["groups"] for t in g["topics"] for p in t["partitions"]}
    expected = {("t", 0): (0, 1, 2)}          # 3 records, started at 1, none delivered: lag 2
    if named:
        expected.update({("t", 1): (0, -1, -1), ("nope", 0): (0, -1, -1)})
    assert found == expected
    logs.shutdown()
    scheduler.close()
