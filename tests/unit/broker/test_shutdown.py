"""Shutdown rules: what each signal means to ``sundial serve``, and long polls ending at shutdown."""

from __future__ import annotations

import asyncio
import signal

from sundial.cli import ShutdownSignals
from sundial.broker.purgatory import FetchPurgatory


def test_first_signal_stops_repeated_sigterm_is_ignored_second_sigint_forces():
    policy = ShutdownSignals()
    assert policy.decide(signal.SIGTERM) == "stop"
    assert policy.decide(signal.SIGTERM) == "ignore"
    assert policy.decide(signal.SIGTERM) == "ignore"
    assert policy.decide(signal.SIGINT) == "force"


def test_ctrl_c_twice_forces_and_sigterm_after_ctrl_c_is_ignored():
    policy = ShutdownSignals()
    assert policy.decide(signal.SIGINT) == "stop"
    assert policy.decide(signal.SIGTERM) == "ignore"
    assert policy.decide(signal.SIGINT) == "force"


def test_shutdown_ends_parked_fetches_and_later_ones_do_not_park():
    async def scenario():
        purgatory = FetchPurgatory()
        parked = purgatory.park([("t", 0)])
        waiting = asyncio.create_task(parked.wait(600))
        await asyncio.sleep(0)
        purgatory.notify("t", 0)
        assert await waiting is True            # an append wakes it: re-read
        purgatory.unpark(parked)
        parked = purgatory.park([("t", 0)])
        waiting = asyncio.create_task(parked.wait(600))
        await asyncio.sleep(0)
        purgatory.wake_all()
        assert await waiting is False           # shutdown: answer with what there is
        purgatory.unpark(parked)
        again = purgatory.park([("t", 0)])      # a fetch that re-reads and would park again
        assert await asyncio.wait_for(again.wait(600), 5) is False
        purgatory.unpark(again)
        assert len(purgatory) == 0

    asyncio.run(scenario())
