"""What the consumer-protocol and the share groups' asyncio shells share: writing their managers'
records to the offsets store and running their deadline timer.

:class:`GroupRecordLog` appends one family's records (in the order the manager decided them),
makes them durable, and runs the task that polls the manager at its next deadline. A storage
failure while appending or flushing is logged (``<kind>_records_store_failed``,
``<kind>_records_flush_failed``) and answered COORDINATOR_NOT_AVAILABLE, raised as
:class:`GroupError`. It counts what the records say for the metrics endpoint: group epoch bumps
written (rebalances) and members fenced by a timer poll (one subscription tombstone each).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import structlog

import sundial.storage.errors as se
from sundial.protocol.errors import ErrorCode

from .modern.errors import GroupError
from .offset_manager import GroupMetadataManager
from .timer_loop import run_deadline_loop

logger = structlog.get_logger(__name__)


async def deletion_answer(deletion: Awaitable[object], group_id: str, group_type: str) -> ErrorCode:
    """DeleteGroups' error code for one group of the consumer protocol or a share group: the
    :class:`GroupError` ``deletion`` raises, COORDINATOR_NOT_AVAILABLE for any other failure, else NONE
    (failure and deletion logged)."""
    try:
        await deletion
    except GroupError as exc:
        return exc.error_code
    except Exception as exc:
        logger.error("group_delete_failed", group=group_id, error=str(exc))
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    logger.info("group_deleted", group=group_id, group_type=group_type)
    return ErrorCode.NONE


def _not_stored() -> GroupError:
    return GroupError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "The group's records could not be stored.")


class GroupRecordLog:
    """One group family's records in ``__consumer_offsets`` and its deadline timer.

    ``kind`` (``consumer_group``, ``share_group``) names its log events and its timer task;
    ``encode_record`` turns a record into its (key, value) bytes; ``manager`` is the family's
    state machine (``poll(now_ms)``, ``next_deadline_ms()``); ``epoch_key`` and ``member_key``
    are the key classes of its group epoch and member subscription records. ``after_append``
    runs after every append, whether or not the store took the records; ``on_appended`` after
    each one it took.
    """

    def __init__(self, kind: str, offsets: GroupMetadataManager, encode_record: Callable[[object], tuple],
                 now_ms: Callable[[], int], *, manager, epoch_key: type, member_key: type,
                 after_append: Callable[[], None], on_appended: Callable[[], None] = lambda: None) -> None:
        self._kind = kind
        self._offsets = offsets
        self._encode_record = encode_record
        self._now_ms = now_ms
        self._manager = manager
        self._epoch_key = epoch_key
        self._member_key = member_key
        self._after_append = after_append
        self._on_appended = on_appended
        #: Set when a change may have moved the next deadline: the timer task wakes up.
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        #: Bumped whenever records are written (membership or subscriptions may have changed).
        self.version = 0
        #: For the metrics endpoint: group epoch bumps written, members fenced by a timer poll.
        self.rebalances = 0
        self.fenced_members = 0

    def append(self, records: Sequence) -> int | None:
        """Append at once, so the log's order is the order the manager applied the changes in.
        Returns the last offset (None for no records)."""
        if not records:
            return None
        self._wake.set()        # the change may have moved the next deadline
        try:
            last = self._offsets.store.append_coordinator_records([self._encode_record(r) for r in records],
                                                                  self._now_ms())
        except (se.StorageError, OSError, RuntimeError) as exc:
            logger.error(f"{self._kind}_records_store_failed", records=len(records), error=str(exc))
            raise _not_stored() from None
        finally:
            self._after_append()
        self.version += 1
        self._on_appended()
        self.rebalances += sum(1 for r in records if isinstance(r.key, self._epoch_key) and r.value is not None)
        return last

    async def persist(self, records: Sequence) -> None:
        """Append, then wait until the records are on disk (the request is answered after)."""
        last = self.append(records)
        if last is None:
            return
        try:
            await self._offsets.durable(last)
        except Exception as exc:  # fsync failure
            logger.error(f"{self._kind}_records_flush_failed", error=str(exc))
            raise _not_stored() from None
        self._offsets.spawn(self._offsets.maybe_snapshot())

    def append_in_background(self, records: Sequence) -> None:
        """Append at once; their durability is awaited in the background."""
        last = self.append(records)
        if last is not None:
            self._offsets.spawn(self._offsets.durable(last))

    def fire_timers(self, now_ms: int | None = None) -> list:
        """Poll the manager (tests call this with their own clock); returns the records written.
        A store failure is logged by :meth:`append` and goes no further: the timer goes on."""
        records = self._manager.poll(self._now_ms() if now_ms is None else now_ms)
        # A poll removes members only by fencing them: one subscription tombstone each.
        self.fenced_members += sum(1 for r in records if isinstance(r.key, self._member_key) and r.value is None)
        try:
            self.append_in_background(records)
        except GroupError:
            pass
        return records

    # -- the timer task --------------------------------------------------------------------------
    def start_timers(self) -> None:
        loop = run_deadline_loop(self.fire_timers, self._manager.next_deadline_ms, self._now_ms, self._wake,
                                 f"{self._kind}_timer_failed")
        self._task = asyncio.get_running_loop().create_task(loop, name=f"{self._kind.replace('_', '-')}-timers")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
