"""Transaction-coordinator metrics: states per transactional id and the completed, timed-out and
expired counters, against a model of what the script did; and the exposition text."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sundial.broker.txn.metrics import REPORTED_STATES, TransactionCollector, txn_rows
from sundial.broker.txn.state import TxnState
from sundial.protocol.errors import ErrorCode as E

from test_txn_coordinator import CONFIG, Clock, _coordinator, _settle, run

S = TxnState


def _rows(c) -> dict:
    return {(family, labels): value for family, labels, value in txn_rows(c)}


def test_states_and_counters_follow_a_random_script():
    async def go():
        rng = random.Random(7)
        clock = Clock()
        c = await _coordinator(clock=clock)
        model = {"committed": 0, "aborted": 0, "timed_out": 0, "expired": 0}
        pids: dict[str, tuple[int, int]] = {}
        for step in range(300):
            txn_id = f"t{rng.randrange(6)}"
            op = rng.choice(["init", "add", "commit", "abort", "time"])
            md = c.describe(txn_id)
            if op == "init":
                r = await c.init_producer_id(txn_id, 5_000)
                if r.error == E.NONE:
                    pids[txn_id] = (r.producer_id, r.producer_epoch)
                elif r.error == E.CONCURRENT_TRANSACTIONS:
                    model["aborted"] += 1          # the Ongoing transaction it fenced is aborted
            elif op == "add" and txn_id in pids:
                await c.add_partitions(txn_id, *pids[txn_id], [("a", rng.randrange(3))])
            elif op in ("commit", "abort") and txn_id in pids and md is not None and md.state == S.ONGOING:
                if await c.end_transaction(txn_id, *pids[txn_id], op == "commit") == E.NONE:
                    model["committed" if op == "commit" else "aborted"] += 1
            elif op == "time":
                clock.t += rng.choice([100, 6_000])
                started = await c.abort_timed_out()
                model["timed_out"] += started
                model["aborted"] += started
            await _settle(c)
            rows = _rows(c)
            for state in REPORTED_STATES:
                expected = sum(1 for m in c.txns.values() if m.state == state)
                assert rows[("transactions", (state.kafka_name,))] == expected, (step, state)
            assert {k: rows[(k, ())] for k in model} == model, step
        assert min(model["committed"], model["aborted"], model["timed_out"]) > 0, model   # the script covered all
        # every completed id expires once idle long enough
        clock.t += CONFIG.transactional_id_expiration_ms + 1
        done = sum(1 for m in c.txns.values() if m.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT))
        assert await c.remove_expired() == done
        assert _rows(c)[("expired", ())] == done
        await c.stop()
    run(go())


def test_exposition():
    async def go():
        c = await _coordinator()
        r = await c.init_producer_id("x", 60_000)
        await c.add_partitions("x", r.producer_id, r.producer_epoch, [("a", 0)])
        await c.end_transaction("x", r.producer_id, r.producer_epoch, True)
        await _settle(c)
        await c.init_producer_id("y", 60_000)
        registry = CollectorRegistry()
        registry.register(TransactionCollector(lambda: txn_rows(c)))
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for fam in text_string_to_metric_families(generate_latest(registry).decode())
                   for s in fam.samples}
        assert samples[("sundial_transactions", (("state", "CompleteCommit"),))] == 1
        assert samples[("sundial_transactions", (("state", "Empty"),))] == 1
        assert samples[("sundial_transactions", (("state", "Ongoing"),))] == 0
        assert samples[("sundial_transactions_committed_total", ())] == 1
        assert samples[("sundial_transactions_aborted_total", ())] == 0
        assert samples[("sundial_transactions_timed_out_total", ())] == 0
        assert samples[("sundial_transactional_ids_expired_total", ())] == 0
        await c.stop()
    run(go())
    assert txn_rows(None) == []
