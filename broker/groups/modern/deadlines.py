"""The members' timers, as deadlines (Kafka's ``CoordinatorTimer`` keys of the group coordinator).

Two timers per member, each a deadline in milliseconds that the manager's ``poll(now_ms)``
fires once passed:

* session: set to now + the group's session timeout on every heartbeat; when it passes,
  the member is fenced (Kafka ``groupSessionTimeoutKey``). A static member that left with
  epoch -2 keeps the deadline of its last heartbeat, so its partitions wait for it that long.
* rebalance: set to now + the member's rebalance timeout whenever a heartbeat moves it
  (again) to UNREVOKED_PARTITIONS, cleared when it leaves that state; when it passes and the
  member is still at the epoch it had then, the member is fenced for not revoking in time
  (Kafka ``groupRebalanceTimeoutKey``).

A classic member inside the group (online migration) has no rebalance deadline but a join
deadline (a REBALANCE_IN_PROGRESS asked it to rejoin) and a sync deadline (it joined and must
sync), each its rebalance timeout; its session deadline is its classic session timeout.

Soft state: never written to ``__consumer_offsets``; after a restart every member gets a
fresh session deadline and every member in UNREVOKED_PARTITIONS a fresh rebalance
deadline, as Kafka's ``onLoaded`` does.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from enum import Enum


class TimerKind(Enum):
    SESSION = "session"
    REBALANCE = "rebalance"
    #: Classic members only: the JoinGroup a REBALANCE_IN_PROGRESS asked for (Kafka
    #: ``consumerGroupJoinKey``) and the SyncGroup after a JoinGroup (``consumerGroupSyncKey``),
    #: each within the member's rebalance timeout, else it is fenced.
    JOIN = "join"
    SYNC = "sync"


@dataclass(frozen=True, order=True)
class Expired:
    deadline_ms: int
    group_id: str
    member_id: str
    kind: TimerKind
    #: The member epoch the rebalance deadline was set for (0 for a session deadline).
    member_epoch: int


class Deadlines:
    def __init__(self) -> None:
        self._timers: dict[tuple[str, str, TimerKind], tuple[int, int]] = {}
        self._heap: list[tuple[int, str, str, str]] = []      # lazily pruned: (deadline, group, member, kind)

    def schedule(self, group_id: str, member_id: str, kind: TimerKind, deadline_ms: int,
                 member_epoch: int = 0) -> None:
        self._timers[(group_id, member_id, kind)] = (deadline_ms, member_epoch)
        heapq.heappush(self._heap, (deadline_ms, group_id, member_id, kind.value))
        if len(self._heap) > 4 * len(self._timers) + 64:    # every heartbeat moves a deadline: compact
            self._heap = [(d, g, m, k.value) for (g, m, k), (d, _) in self._timers.items()]
            heapq.heapify(self._heap)

    def schedule_if_absent(self, group_id: str, member_id: str, kind: TimerKind, deadline_ms: int) -> None:
        if (group_id, member_id, kind) not in self._timers:
            self.schedule(group_id, member_id, kind, deadline_ms)

    def cancel(self, group_id: str, member_id: str, kind: TimerKind | None = None) -> None:
        for k in TimerKind if kind is None else (kind,):
            self._timers.pop((group_id, member_id, k), None)

    def cancel_group(self, group_id: str) -> None:
        for key in [key for key in self._timers if key[0] == group_id]:
            del self._timers[key]

    def get(self, group_id: str, member_id: str, kind: TimerKind) -> int | None:
        entry = self._timers.get((group_id, member_id, kind))
        return None if entry is None else entry[0]

    def next_deadline_ms(self) -> int | None:
        self._prune()
        return self._heap[0][0] if self._heap else None

    def pop_expired(self, now_ms: int) -> Expired | None:
        """The earliest deadline at or before ``now_ms``, removed; None when none has passed."""
        self._prune()
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        deadline_ms, group_id, member_id, kind_value = heapq.heappop(self._heap)
        kind = TimerKind(kind_value)
        _, epoch = self._timers.pop((group_id, member_id, kind))
        return Expired(deadline_ms, group_id, member_id, kind, epoch)

    def _prune(self) -> None:
        """Drop heap entries whose timer was cancelled or moved."""
        heap = self._heap
        while heap:
            deadline_ms, group_id, member_id, kind_value = heap[0]
            entry = self._timers.get((group_id, member_id, TimerKind(kind_value)))
            if entry is not None and entry[0] == deadline_ms:
                return
            heapq.heappop(heap)
