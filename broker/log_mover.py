"""AlterReplicaLogDirs moves of the daemon: one task per move on the loop, the file work on a thread.

Kafka's ``ReplicaAlterLogDirsThread`` for one node (the steps and the crash safety are
:mod:`storage.log_move`'s):

* on the loop, :meth:`LogMover.alter` decides (``LogManager.begin_move``) and starts a task;
* the task opens the partition if needed, creates the future log, then copies: the loop picks
  the next :data:`CHUNK_BYTES` of the current log (duplicated descriptors, no disk wait) and the
  mover thread reads and appends them to the future log; meanwhile produce and fetch go on;
* once a chunk reaches the current log end (the future is less than one chunk behind), the
  swap: the partition stops taking appends (requests wait as for a log being opened), the mover
  thread copies the rest, fsyncs, renames and reopens, and the partition serves again from its
  new directory. The former log is flushed and closed, so producers waiting for its fsync are
  answered; the checkpoints of both directories are written.

Every move's file work runs on one thread (``sundial-log-mover``), in the order it was asked
for: a cancelled move's future is removed before a later move of the partition creates its own.
The event loop never waits on the disk for a move.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from typing import Any, Callable

import structlog

from sundial.storage.log_move import LogMove, discard_future

logger = structlog.get_logger(__name__)

#: Bytes copied per step (Kafka's ``replica.fetch.max.bytes`` default, what its alter-log-dirs
#: fetcher asks for per partition).
CHUNK_BYTES = 1024 * 1024


class LogMover:
    """The moves under way (see module doc). ``replica_manager`` gives the logs, the partition
    opening and the checkpoint writes; ``now_ms`` is the broker clock."""

    def __init__(self, replica_manager, now_ms: Callable[[], int]) -> None:
        self._replicas = replica_manager
        self._now_ms = now_ms
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._tasks: set[asyncio.Task] = set()
        self.moves_completed = 0

    @property
    def logs(self):
        return self._replicas.logs

    def _thread(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sundial-log-mover")
        return self._executor

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.wrap_future(self._thread().submit(fn, *args))

    def alter(self, topic: str, partition: int, log_dir: str) -> None:
        """Move the partition to ``log_dir`` (owner thread). Raises what ``LogManager.begin_move``
        raises; returns once the move is decided (it runs in the background)."""
        move, cancelled = self.logs.begin_move(topic, partition, log_dir)
        if cancelled is not None:
            logger.info("log_move_cancelled", topic=topic, partition=partition, target_dir=cancelled.target_dir,
                        reason="another destination was asked for")
        if move is not None:
            # a context of its own: the move outlives the request (its log events carry no connection)
            task = asyncio.get_running_loop().create_task(self._move(move), context=contextvars.Context())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _move(self, move: LogMove) -> None:
        logs = self.logs
        swapping = False
        try:
            waiting = self._replicas.open_logs([move.tp])
            if waiting is not None:
                await waiting
            logger.info("log_move_started", topic=move.topic, partition=move.partition, source_dir=move.source_dir,
                        target_dir=move.target_dir)
            await self._run(logs.move_future_job(move, self._now_ms()))
            while True:
                copied = await self._run(logs.move_copy_job(move, CHUNK_BYTES, self._now_ms()))
                if copied < CHUNK_BYTES:
                    break   # reached the current log end: less than a chunk arrived meanwhile
            swapping = True
            await self._swap(move)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed or cancelled move leaves the partition where it was
            if move.cancelled:
                logger.info("log_move_stopped", topic=move.topic, partition=move.partition,
                            target_dir=move.target_dir)
            else:
                logger.error("log_move_failed", topic=move.topic, partition=move.partition,
                             target_dir=move.target_dir, error=str(exc))
        finally:
            logs.end_move(move)
            if not swapping:
                future, move.future_log = move.future_log, None
                try:
                    await asyncio.shield(self._run(discard_future, future, move.future_path))
                except Exception as exc:  # noqa: BLE001 - removed at the next start at the latest
                    logger.warning("log_move_future_not_removed", path=move.future_path, error=str(exc))

    async def _swap(self, move: LogMove) -> None:
        logs = self.logs
        # An append whose write is in flight would end in the former log after the swap's last
        # copy: take the log out of service only at a moment none is (checked, then swapped, with
        # no await between).
        while not self._replicas.appends_idle(move.topic, move.partition):
            await self._replicas.wait_appends(move.topic, move.partition)
        fut, after = logs.start_swap(move, self._now_ms(), self._thread().submit)
        try:
            await asyncio.shield(asyncio.wrap_future(fut))
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - finish_open reports it
            pass
        try:
            logs.finish_open(move.topic, move.partition)
        except Exception as exc:  # noqa: BLE001 - the partition is offline until a restart
            logger.error("log_move_swap_failed", topic=move.topic, partition=move.partition, error=str(exc))
            after()
            return
        after()
        outcome = fut.result()[3]
        if outcome.error is not None:
            logger.error("log_move_rolled_back", topic=move.topic, partition=move.partition,
                         target_dir=move.target_dir, error=str(outcome.error))
            return
        self.moves_completed += 1
        logger.info("log_move_completed", topic=move.topic, partition=move.partition, source_dir=move.source_dir,
                    log_dir=outcome.log_dir)
        try:
            await self._replicas.write_checkpoints()
        except OSError as exc:
            logger.error("checkpoint_after_log_move_failed", error=str(exc))

    async def close(self) -> None:
        """Stop the moves under way (their futures are removed; a swap under way ends first)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except BaseException:  # noqa: BLE001 - stopping
                pass
        if self._executor is not None:
            executor, self._executor = self._executor, None
            await asyncio.to_thread(executor.shutdown, True)


__all__ = ["CHUNK_BYTES", "LogMover"]
