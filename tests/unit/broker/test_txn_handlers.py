"""Transaction API handlers: per-version error translation (PRODUCER_FENCED vs INVALID_PRODUCER_EPOCH),
AddPartitionsToTxn's per-partition answers, FindCoordinator for transaction keys, Describe/List."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from sundial.broker.handlers import transactions as h
from sundial.broker.txn.coordinator import TransactionCoordinator
from sundial.protocol.api_keys import ApiKey
from sundial.protocol.errors import ErrorCode as E
from sundial.protocol.schema_codec import SCHEMA_CLASSES, build_message

from test_txn_coordinator import CONFIG, Clock, Ids, Markers, MemoryTxnLog


class _Logs:
    def __init__(self, existing):
        self.existing = existing

    def log_for(self, topic, partition):
        return object() if (topic, partition) in self.existing else None


def _broker(coord):
    node = SimpleNamespace(node_id=3, host="h.example", port=9092)
    return SimpleNamespace(transactions=coord, replica_manager=_Logs({("a", 0), ("a", 1), ("b", 0)}), node=node,
                           authorizer=None)


def _ctx(broker, api_key, version):
    return SimpleNamespace(broker=broker, api_key=api_key, api_version=version, listener_name="PLAINTEXT",
                           principal="User:ANONYMOUS", client_host="127.0.0.1")


def _req(api_key, version, value):
    return build_message(SCHEMA_CLASSES[api_key][0], version, value)


async def _setup():
    coord = TransactionCoordinator(CONFIG, MemoryTxnLog(), Markers(), Ids(), now_ms=Clock(), run_timers=False)
    await coord.start()
    return coord, _broker(coord)


async def _init(broker, txn_id="t", version=4, **extra):
    req = _req(ApiKey.INIT_PRODUCER_ID, version, {"transactional_id": txn_id, "transaction_timeout_ms": 60_000,
                                                  **extra})
    return await h.init_transactional_producer_id(_ctx(broker, ApiKey.INIT_PRODUCER_ID, version), req)


def _add(broker, version, pid, epoch, topics):
    req = _req(ApiKey.ADD_PARTITIONS_TO_TXN, version, {
        "v3_and_below_transactional_id": "t", "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": n, "partitions": ps} for n, ps in topics]})
    return h.handle_add_partitions_to_txn(_ctx(broker, ApiKey.ADD_PARTITIONS_TO_TXN, version), req)


def _codes(resp):
    return {(t["name"], p["partition_index"]): p["partition_error_code"]
            for t in resp["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_add_partitions_versions_and_errors(version):
    async def go():
        coord, broker = await _setup()
        r = await _init(broker)
        pid = r["producer_id"]
        ok = await _add(broker, version, pid, 0, [("a", [0, 1])])
        assert _codes(ok) == {("a", 0): 0, ("a", 1): 0}
        unknown = await _add(broker, version, pid, 0, [("a", [0]), ("zz", [0])])
        assert _codes(unknown) == {("a", 0): E.OPERATION_NOT_ATTEMPTED, ("zz", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
        fenced = await _add(broker, version, pid, 5, [("b", [0])])
        expected = E.PRODUCER_FENCED if version >= 2 else E.INVALID_PRODUCER_EPOCH
        assert _codes(fenced) == {("b", 0): expected}
        await coord.stop()
    asyncio.run(go())


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_end_txn_fenced_by_version(version):
    async def go():
        coord, broker = await _setup()
        r = await _init(broker)
        req = _req(ApiKey.END_TXN, version, {"transactional_id": "t", "producer_id": r["producer_id"],
                                             "producer_epoch": 7, "committed": True})
        resp = await h.handle_end_txn(_ctx(broker, ApiKey.END_TXN, version), req)
        assert resp["error_code"] == (E.PRODUCER_FENCED if version >= 2 else E.INVALID_PRODUCER_EPOCH)
        await coord.stop()
    asyncio.run(go())


@pytest.mark.parametrize("version", [3, 4])
def test_init_producer_id_fenced_by_version(version):
    async def go():
        coord, broker = await _setup()
        r = await _init(broker, version=version)
        assert (r["error_code"], r["producer_epoch"]) == (0, 0)
        stale = await _init(broker, version=version, producer_id=r["producer_id"] + 50, producer_epoch=0)
        assert stale["error_code"] == (E.PRODUCER_FENCED if version >= 4 else E.INVALID_PRODUCER_EPOCH)
        half = await _init(broker, version=version, producer_id=r["producer_id"], producer_epoch=-1)
        assert half["error_code"] == E.INVALID_REQUEST
        await coord.stop()
    asyncio.run(go())


def test_find_coordinator_describe_and_list():
    async def go():
        coord, broker = await _setup()
        ctx = _ctx(broker, ApiKey.FIND_COORDINATOR, 4)
        found = h.find_transaction_coordinator(ctx, "t")
        assert (found["error_code"], found["node_id"], found["host"], found["port"]) == (0, 3, "h.example", 9092)
        assert coord.log.exists  # created on first use
        assert h.find_transaction_coordinator(ctx, "")["error_code"] == E.INVALID_REQUEST
        r = await _init(broker)
        await _add(broker, 3, r["producer_id"], 0, [("a", [1, 0]), ("b", [0])])
        d = await h.handle_describe_transactions(_ctx(broker, ApiKey.DESCRIBE_TRANSACTIONS, 0),
                                                 _req(ApiKey.DESCRIBE_TRANSACTIONS, 0,
                                                      {"transactional_ids": ["t", "nope"]}))
        first, second = d["transaction_states"]
        assert (first["transaction_state"], first["producer_id"], first["topics"]) == (
            "Ongoing", r["producer_id"], [{"topic": "a", "partitions": [0, 1]}, {"topic": "b", "partitions": [0]}])
        assert second["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND
        lst = await h.handle_list_transactions(_ctx(broker, ApiKey.LIST_TRANSACTIONS, 1),
                                               _req(ApiKey.LIST_TRANSACTIONS, 1,
                                                    {"state_filters": ["Ongoing", "Nope"], "producer_id_filters": []}))
        assert lst["unknown_state_filters"] == ["Nope"]
        assert [(s["transactional_id"], s["transaction_state"]) for s in lst["transaction_states"]] == [
            ("t", "Ongoing")]
        await coord.stop()
    asyncio.run(go())
