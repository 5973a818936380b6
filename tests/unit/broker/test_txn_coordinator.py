"""TransactionCoordinator over an in-memory transaction log (real record codec) and a marker
recorder: Kafka's answers for init/add/end, fencing, timeouts, expiry and reload after a crash."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.broker.txn.coordinator import TransactionCoordinator
from sundial.broker.txn.log import value_of
from sundial.broker.txn.schema import decode_key, decode_value, encode_key, encode_value
from sundial.broker.txn.state import TransactionMetadata, TxnState, TxnTransit
from sundial.config import BrokerConfig
from sundial.protocol.errors import ErrorCode as E

S = TxnState
CONFIG = BrokerConfig({}).transactions   # Kafka's defaults: 15 min timeout, 10 s abort pass, 7 d expiry


class MemoryTxnLog:
    """Records as Kafka's bytes; ``durable`` counts records that survive a crash."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self.exists = False
        self.fail_next = 0
        self.block: asyncio.Event | None = None

    def ensure_topic(self) -> None:
        self.exists = True

    def load(self):
        found = {}
        for key, value in self.records:
            txn_id = decode_key(key)
            if value is None:
                found.pop(txn_id, None)
            else:
                found[txn_id] = decode_value(value)
        return {t: TransactionMetadata.from_transit(t, TxnTransit(
            v.producer_id, -1, v.producer_epoch, -1, v.transaction_timeout_ms, v.state, v.partitions,
            v.start_timestamp_ms, v.last_update_timestamp_ms)) for t, v in found.items()}

    async def write(self, txn_id, transit):
        if self.fail_next:
            self.fail_next -= 1
            return E.NOT_COORDINATOR
        self.records.append((encode_key(txn_id), None if transit is None else encode_value(value_of(transit))))
        return E.NONE


class Markers:
    def __init__(self) -> None:
        self.calls = []
        self.gate: asyncio.Event | None = None

    async def write_markers(self, pid, epoch, coordinator_epoch, commit, partitions):
        if self.gate is not None:
            await self.gate.wait()
        self.calls.append((pid, epoch, coordinator_epoch, commit, tuple(partitions)))
        return {tp: E.NONE for tp in partitions}


class Ids:
    def __init__(self) -> None:
        self.n = 1000

    def next_id(self):
        self.n += 1
        return self.n


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000_000

    def __call__(self):
        return self.t


async def _coordinator(log=None, clock=None):
    log = log or MemoryTxnLog()
    c = TransactionCoordinator(CONFIG, log, Markers(), Ids(), now_ms=clock or Clock(), run_timers=False)
    await c.start()
    return c


async def _settle(c):
    for _ in range(50):
        if not c._background:
            return
        await asyncio.sleep(0)
    await asyncio.gather(*list(c._background))


def run(coro):
    return asyncio.run(coro)


def test_init_commit_abort_cycle():
    async def go():
        c = await _coordinator()
        r = await c.init_producer_id("t1", 60_000)
        assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, 1001, 0)
        assert await c.add_partitions("t1", 1001, 0, [("a", 0), ("b", 1)]) == E.NONE
        assert await c.add_partitions("t1", 1001, 0, [("a", 0)]) == E.NONE  # already in: no write
        c.markers.gate = asyncio.Event()
        assert await c.end_transaction("t1", 1001, 0, True) == E.NONE
        md = c.describe("t1")
        assert md.state == S.PREPARE_COMMIT and md.pending_state == S.COMPLETE_COMMIT
        assert await c.add_partitions("t1", 1001, 0, [("a", 0)]) == E.CONCURRENT_TRANSACTIONS
        assert await c.end_transaction("t1", 1001, 0, True) == E.CONCURRENT_TRANSACTIONS
        assert (await c.init_producer_id("t1", 60_000)).error == E.CONCURRENT_TRANSACTIONS
        c.markers.gate.set()
        await _settle(c)
        assert c.markers.calls == [(1001, 0, 0, True, (("a", 0), ("b", 1)))]
        assert md.state == S.COMPLETE_COMMIT and not md.partitions
        assert await c.end_transaction("t1", 1001, 0, True) == E.NONE  # retry of a finished commit
        assert await c.end_transaction("t1", 1001, 0, False) == E.INVALID_TXN_STATE
        assert await c.add_partitions("t1", 1001, 0, [("a", 2)]) == E.NONE
        assert await c.end_transaction("t1", 1001, 0, False) == E.NONE
        await _settle(c)
        assert c.markers.calls[-1] == (1001, 0, 0, False, (("a", 2),))
        assert md.state == S.COMPLETE_ABORT
        await c.stop()
    run(go())


def test_errors_of_requests():
    async def go():
        c = await _coordinator()
        assert (await c.init_producer_id("", 60_000)).error == E.INVALID_REQUEST
        assert (await c.init_producer_id("t", 0)).error == E.INVALID_TRANSACTION_TIMEOUT
        assert (await c.init_producer_id("t", 900_001)).error == E.INVALID_TRANSACTION_TIMEOUT
        assert await c.add_partitions("nope", 1, 0, [("a", 0)]) == E.INVALID_PRODUCER_ID_MAPPING
        r = await c.init_producer_id("t", 900_000)
        assert await c.add_partitions("t", r.producer_id + 1, 0, [("a", 0)]) == E.INVALID_PRODUCER_ID_MAPPING
        assert await c.add_partitions("t", r.producer_id, 1, [("a", 0)]) == E.PRODUCER_FENCED
        assert await c.end_transaction("t", r.producer_id, 0, True) == E.INVALID_TXN_STATE  # Empty
        assert await c.end_transaction("nope", 1, 0, True) == E.INVALID_PRODUCER_ID_MAPPING
        await c.stop()
    run(go())


def test_second_producer_fences_the_first():
    async def go():
        c = await _coordinator()
        first = await c.init_producer_id("t", 60_000)
        assert await c.add_partitions("t", first.producer_id, 0, [("a", 0)]) == E.NONE
        r = await c.init_producer_id("t", 60_000)  # the ongoing transaction is fenced and aborted
        assert r.error == E.CONCURRENT_TRANSACTIONS
        await _settle(c)
        assert c.markers.calls == [(first.producer_id, 1, 0, False, (("a", 0),))]
        assert c.describe("t").state == S.COMPLETE_ABORT
        second = await c.init_producer_id("t", 60_000)
        assert (second.error, second.producer_id, second.producer_epoch) == (E.NONE, first.producer_id, 2)
        assert await c.end_transaction("t", first.producer_id, 0, True) == E.PRODUCER_FENCED
        assert await c.add_partitions("t", first.producer_id, 0, [("a", 0)]) == E.PRODUCER_FENCED
        # KIP-360: the old producer asks for a bump with its stale epoch.
        assert (await c.init_producer_id("t", 60_000, first.producer_id, 0)).error == E.PRODUCER_FENCED
        # ...and the current one with its own epoch gets epoch + 1.
        bumped = await c.init_producer_id("t", 60_000, second.producer_id, 2)
        assert (bumped.error, bumped.producer_epoch) == (E.NONE, 3)
        assert (await c.init_producer_id("t", 60_000, 999, 3)).error == E.PRODUCER_FENCED
        await c.stop()
    run(go())


def test_timed_out_transaction_is_aborted_with_an_epoch_bump():
    async def go():
        clock = Clock()
        c = await _coordinator(clock=clock)
        r = await c.init_producer_id("t", 1000)
        await c.add_partitions("t", r.producer_id, 0, [("a", 0)])
        clock.t += 1000
        assert await c.abort_timed_out() == 0  # start + timeout < now is strict
        clock.t += 1
        assert await c.abort_timed_out() == 1
        await _settle(c)
        md = c.describe("t")
        assert (md.state, md.producer_epoch) == (S.COMPLETE_ABORT, 1)
        assert c.markers.calls == [(r.producer_id, 1, 0, False, (("a", 0),))]
        assert await c.end_transaction("t", r.producer_id, 0, True) == E.PRODUCER_FENCED
        await c.stop()
    run(go())


def test_expired_transactional_ids_are_tombstoned():
    async def go():
        clock = Clock()
        log = MemoryTxnLog()
        c = await _coordinator(log, clock)
        await c.init_producer_id("old", 1000)
        r = await c.init_producer_id("busy", 1000)
        await c.add_partitions("busy", r.producer_id, 0, [("a", 0)])
        clock.t += 604_800_000
        assert await c.remove_expired() == 1
        assert c.describe("old") is None and c.describe("busy") is not None
        assert log.records[-1] == (encode_key("old"), None)
        c2 = await _coordinator(log, clock)
        assert set(c2.txns) == {"busy"}
        await c.stop()
        await c2.stop()
    run(go())


def test_failed_write_leaves_state_unchanged():
    async def go():
        log = MemoryTxnLog()
        c = await _coordinator(log)
        r = await c.init_producer_id("t", 1000)
        log.fail_next = 1
        assert await c.add_partitions("t", r.producer_id, 0, [("a", 0)]) == E.NOT_COORDINATOR
        md = c.describe("t")
        assert md.state == S.EMPTY and md.pending_state is None
        assert await c.add_partitions("t", r.producer_id, 0, [("a", 0)]) == E.NONE
        await c.stop()
    run(go())


@pytest.mark.parametrize("crash_after", ["prepare", "complete"])
def test_reload_resumes_markers_or_keeps_completed(crash_after):
    async def go():
        log = MemoryTxnLog()
        c = await _coordinator(log)
        r = await c.init_producer_id("t", 60_000)
        await c.add_partitions("t", r.producer_id, 0, [("a", 0)])
        if crash_after == "prepare":
            c.markers.gate = asyncio.Event()  # markers never get written before the "crash"
        await c.end_transaction("t", r.producer_id, 0, True)
        await _settle(c) if crash_after == "complete" else None
        await c.stop()
        c2 = await _coordinator(log)
        await _settle(c2)
        md = c2.describe("t")
        assert md.state == S.COMPLETE_COMMIT
        expected = [(r.producer_id, 0, 0, True, (("a", 0),))] if crash_after == "prepare" else []
        assert c2.markers.calls == expected
        nxt = await c2.init_producer_id("t", 60_000)
        assert (nxt.error, nxt.producer_epoch) == (E.NONE, 1)
        await c2.stop()
    run(go())


def test_list_filters():
    async def go():
        clock = Clock()
        c = await _coordinator(clock=clock)
        a = await c.init_producer_id("a", 60_000)
        await c.init_producer_id("b", 60_000)
        await c.add_partitions("a", a.producer_id, 0, [("x", 0)])
        clock.t += 5000
        unknown, found = c.list(["Ongoing", "Bogus"])
        assert unknown == ["Bogus"] and [m.transactional_id for m in found] == ["a"]
        assert [m.transactional_id for m in c.list(producer_ids=[a.producer_id])[1]] == ["a"]
        assert {m.transactional_id for m in c.list(duration_ms=4999)[1]} == {"a", "b"}
        assert {m.transactional_id for m in c.list(duration_ms=5000)[1]} == {"b"}  # b never started: -1
        assert c.list(["Bogus"]) == (["Bogus"], [])
        await c.stop()
    run(go())


class FlakyMarkers(Markers):
    """The first attempt fails on ("a", 1) (storage error) and ("gone", 0) never exists."""

    def __init__(self) -> None:
        super().__init__()
        self.failed_once = False

    async def write_markers(self, pid, epoch, coordinator_epoch, commit, partitions):
        self.calls.append((pid, epoch, coordinator_epoch, commit, tuple(partitions)))
        out = {}
        for tp in partitions:
            if tp == ("gone", 0):
                out[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif tp == ("a", 1) and not self.failed_once:
                self.failed_once = True
                out[tp] = E.KAFKA_STORAGE_ERROR
            else:
                out[tp] = E.NONE
        return out


def test_markers_retry_failed_partitions_and_drop_deleted_ones(monkeypatch):
    import sundial.broker.txn.coordinator as coordinator_module

    monkeypatch.setattr(coordinator_module, "MARKER_RETRY_BACKOFF_MS", 1)

    async def go():
        c = TransactionCoordinator(CONFIG, MemoryTxnLog(), FlakyMarkers(), Ids(), now_ms=Clock(), run_timers=False)
        await c.start()
        r = await c.init_producer_id("t", 60_000)
        await c.add_partitions("t", r.producer_id, 0, [("a", 0), ("a", 1), ("gone", 0)])
        assert await c.end_transaction("t", r.producer_id, 0, True) == E.NONE
        for _ in range(200):
            if c.describe("t").state == S.COMPLETE_COMMIT:
                break
            await asyncio.sleep(0.005)
        assert c.describe("t").state == S.COMPLETE_COMMIT
        assert [call[4] for call in c.markers.calls] == [(("a", 0), ("a", 1), ("gone", 0)), (("a", 1),)]
        await c.stop()
    run(go())


# -- the coordinator against a model (Hypothesis) ---------------------------------------------------

MODEL_OPS = st.lists(st.tuples(st.sampled_from(["init", "add", "commit", "abort", "tick"]), st.integers(0, 1),
                               st.integers(0, 2)), max_size=30)


@settings(max_examples=100, deadline=None)
@given(MODEL_OPS)
def test_two_producers_one_transactional_id_against_a_model(ops):
    """Two producer instances share one transactional id; every answer and every marker equals
    what a model of Kafka's rules predicts (epoch bumps, fencing, timeouts, idempotent EndTxn)."""
    async def go():
        clock = Clock()
        c = TransactionCoordinator(CONFIG, MemoryTxnLog(), Markers(), Ids(), now_ms=clock, run_timers=False)
        await c.start()
        handles: list[tuple[int, int] | None] = [None, None]
        epoch, state, parts = -1, "Empty", set()
        expected_markers = []
        pid = None
        for op, who, part in ops:
            clock.t += 10
            h = handles[who]
            if op == "init":
                r = await c.init_producer_id("t", 1000)
                pid = pid if pid is not None else r.producer_id
                if state == "Ongoing":
                    epoch += 1
                    expected_markers.append((pid, epoch, 0, False, tuple(sorted(parts))))
                    state, parts = "CompleteAbort", set()
                    assert r.error == E.CONCURRENT_TRANSACTIONS
                else:
                    epoch += 1
                    state = "Empty"  # prepareIncrementProducerEpoch: back to Empty
                    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, epoch)
                    handles[who] = (pid, epoch)
            elif h is None:
                continue
            elif op == "add":
                err = await c.add_partitions("t", h[0], h[1], [("p", part)])
                if h[1] != epoch:
                    assert err == E.PRODUCER_FENCED
                else:
                    assert err == E.NONE
                    state = "Ongoing"
                    parts.add(("p", part))
            elif op in ("commit", "abort"):
                commit = op == "commit"
                err = await c.end_transaction("t", h[0], h[1], commit)
                if h[1] != epoch:
                    assert err == E.PRODUCER_FENCED
                elif state == "Ongoing":
                    assert err == E.NONE
                    expected_markers.append((pid, epoch, 0, commit, tuple(sorted(parts))))
                    state, parts = ("CompleteCommit" if commit else "CompleteAbort"), set()
                elif (state, commit) in (("CompleteCommit", True), ("CompleteAbort", False)):
                    assert err == E.NONE
                else:
                    assert err == E.INVALID_TXN_STATE
            else:
                clock.t += 1001
                started = await c.abort_timed_out()
                if state == "Ongoing":
                    assert started == 1
                    epoch += 1
                    expected_markers.append((pid, epoch, 0, False, tuple(sorted(parts))))
                    state, parts = "CompleteAbort", set()
                else:
                    assert started == 0
            await _settle(c)
            md = c.describe("t")
            if md is not None and epoch >= 0:
                assert (md.state.kafka_name, md.producer_epoch, md.partitions) == (state, epoch, parts)
        assert c.markers.calls == expected_markers
        await c.stop()
    run(go())
