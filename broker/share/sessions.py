"""Share sessions (KIP-932; Kafka ``ShareSessionCache``, ``ShareSession``, ``ShareRequestMetadata``).

A share session remembers, for one (group, member), the partitions the member fetches, so a
ShareFetch need only name what changed. The epoch in each ShareFetch/ShareAcknowledge says what
the request does with it:

* 0 opens a session (a session the member already had is replaced), with the partitions the
  request names; acknowledgements are refused in it (INVALID_REQUEST: nothing can have been
  acquired in a session that does not exist yet), and a ShareAcknowledge at epoch 0 gets
  INVALID_SHARE_SESSION_EPOCH;
* -1 closes it: its acknowledgements are applied, then the member's acquired records are given
  back and the session is forgotten; SHARE_SESSION_NOT_FOUND when there is none;
* any other value must be the session's next epoch (SHARE_SESSION_NOT_FOUND without a session,
  INVALID_SHARE_SESSION_EPOCH otherwise); a ShareFetch adds the partitions it names and removes its
  ``ForgottenTopicsData``. The epoch then advances (after ``2**31 - 1`` comes 1, as Kafka's
  ``nextEpoch``).

The cache holds at most ``group.share.max.share.sessions`` sessions; a new one beyond that gets
SHARE_SESSION_LIMIT_REACHED (Kafka 4.1+ has no eviction for share sessions).

Each session remembers the connection that opened it. When that connection closes, its
sessions end and their members' records are released at once (Kafka >= 4.1: the disconnect
listener of the share session cache); :meth:`ShareSessionCache.close_connection` returns them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Iterable

from sundial.protocol.errors import ErrorCode
from sundial.records.layout import INT32_MAX

INITIAL_EPOCH = 0
FINAL_EPOCH = -1

SessionKey = tuple[str, str]            # (group id, member id)
TopicIdPartition = tuple[uuid.UUID, int]


def next_epoch(epoch: int) -> int:
    """Kafka ``ShareRequestMetadata.nextEpoch``: 0 → 1, -1 stays, ``INT32_MAX`` wraps to 1."""
    if epoch == FINAL_EPOCH:
        return FINAL_EPOCH
    return 1 if epoch >= INT32_MAX else epoch + 1


class ShareSessionError(Exception):
    """A request refused at the session level: the whole answer carries ``error_code``."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = ErrorCode(error_code)
        self.message = message


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    connection_id: str
    #: The epoch the next request must carry.
    epoch: int = 1
    #: The partitions of the session, in the order they were added.
    partitions: dict[TopicIdPartition, None] = field(default_factory=dict)

    @property
    def key(self) -> SessionKey:
        return (self.group_id, self.member_id)


class ShareSessionCache:
    """Every share session of the broker, by (group id, member id)."""

    def __init__(self, max_sessions: int) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self._max_sessions = max_sessions
        self._sessions: dict[SessionKey, ShareSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def sessions(self) -> list[ShareSession]:
        return list(self._sessions.values())

    # --- ShareFetch -----------------------------------------------------------------------------

    def open(self, group_id: str, member_id: str, connection_id: str,
             partitions: Iterable[TopicIdPartition]) -> ShareSession:
        """Epoch 0: a new session replacing any the member had (SHARE_SESSION_LIMIT_REACHED when
        the cache is full)."""
        key = (group_id, member_id)
        self._sessions.pop(key, None)
        if len(self._sessions) >= self._max_sessions:
            raise ShareSessionError(ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                                    f"The share session cache holds {len(self._sessions)} sessions, its limit")
        session = ShareSession(group_id, member_id, connection_id)
        for tp in partitions:
            session.partitions[tp] = None
        self._sessions[key] = session
        return session

    def check(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The session an epoch > 0 or -1 names; SHARE_SESSION_NOT_FOUND or INVALID_SHARE_SESSION_EPOCH."""
        session = self._sessions.get((group_id, member_id))
        if session is None:
            raise ShareSessionError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                                    f"Share session not found for group {group_id!r} member {member_id!r}")
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            raise ShareSessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                                    f"Share session epoch {epoch} is not the expected {session.epoch}")
        return session

    def update(self, session: ShareSession, added: Iterable[TopicIdPartition],
               forgotten: Iterable[TopicIdPartition]) -> list[TopicIdPartition]:
        """An incremental ShareFetch: add and remove partitions; the partitions newly added."""
        new = []
        for tp in added:
            if tp not in session.partitions:
                session.partitions[tp] = None
                new.append(tp)
        for tp in forgotten:
            session.partitions.pop(tp, None)
        return new

    @staticmethod
    def advance(session: ShareSession) -> None:
        session.epoch = next_epoch(session.epoch)

    # --- ending -------------------------------------------------------------------------------

    def remove(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.pop((group_id, member_id), None)

    def close_connection(self, connection_id: str) -> list[ShareSession]:
        """The sessions opened on a connection that closed, removed from the cache."""
        gone = [s for s in self._sessions.values() if s.connection_id == connection_id]
        for s in gone:
            del self._sessions[s.key]
        return gone

    def remove_member(self, group_id: str, member_id: str) -> ShareSession | None:
        """A member left its group or was fenced: its session ends."""
        return self.remove(group_id, member_id)
