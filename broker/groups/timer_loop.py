"""The timer loop of a group coordinator's asyncio shell: fire what is due, then sleep until the
state machine's next deadline (at most a second), or until woken because a deadline moved."""

from __future__ import annotations

import asyncio
from typing import Callable

import structlog

logger = structlog.get_logger(__name__)


async def run_deadline_loop(fire_timers: Callable[[], object], next_deadline_ms: Callable[[], int | None],
                            now_ms: Callable[[], int], wake: asyncio.Event, failure_event: str) -> None:
    """Run until cancelled. A failure of ``fire_timers`` is logged as ``failure_event`` and the
    loop goes on: one group's bad state must not stop every other group's timers."""
    while True:
        try:
            fire_timers()
        except Exception:
            logger.exception(failure_event)
        deadline = next_deadline_ms()
        timeout_s = 1.0
        if deadline is not None:
            timeout_s = min(max(deadline - now_ms(), 0) / 1000, 1.0)
        wake.clear()
        try:
            await asyncio.wait_for(wake.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass
