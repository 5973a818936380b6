"""A consumer group's metadata: its state, members and protocol (Kafka ``GroupMetadata``).

This module holds what a group *is*; :mod:`broker.groups.state` holds what it *does*
(the JoinGroup / SyncGroup / Heartbeat / LeaveGroup rules and the timers, as the
subclass :class:`~broker.groups.state.Group`). No I/O, no asyncio, no clock.

States (Kafka's ``GroupState``) and the allowed transitions, ``VALID_PREVIOUS_STATES``::

    Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
      ▲                 ▲      │ (no member left)                  │ leader SyncGroup stored
      └─────────────────┼──────┘                                   ▼
                        └──── join / leave / expiry ──────────── Stable
    any state ──DeleteGroups / offsets expired──▶ Dead

A state-machine step collects *effects* (:class:`JoinReply`, :class:`SyncReply`,
:class:`StoreGroup`, :class:`Note`) that the coordinator carries out in order.

Subscriptions: a member of protocol type ``consumer`` carries Kafka's
ConsumerProtocolSubscription in its metadata; :meth:`GroupMetadata.subscribed_topics`
is the union of the topics over every member and every protocol it offered (``None``
when any of them cannot be parsed). Kafka uses only the selected protocol's metadata;
the union is a superset, which only makes consumed retention and offset expiry more
conservative.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Iterable

from sundial.protocol.errors import ErrorCode

from .consumer_protocol import SubscriptionError, subscription_topics

CONSUMER_PROTOCOL_TYPE = "consumer"
#: Kafka's GroupCoordinator.NewMemberJoinTimeoutMs.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


class GroupState(str, Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

#: Kafka's ``GroupState.validPreviousStates``: target state -> states it may be entered from.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    DEAD: frozenset({STABLE, PREPARING, COMPLETING, EMPTY, DEAD}),
    COMPLETING: frozenset({PREPARING}),
    STABLE: frozenset({COMPLETING}),
    PREPARING: frozenset({STABLE, COMPLETING, EMPTY}),
    EMPTY: frozenset({PREPARING}),
}

#: States from which a join, leave or expiry starts a rebalance (``canRebalance``).
CAN_REBALANCE_FROM = frozenset({STABLE, COMPLETING, EMPTY})


class IllegalStateTransition(RuntimeError):
    """A transition outside VALID_PREVIOUS_STATES: a bug in this module."""


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """The broker settings a group obeys (Kafka ``GroupConfig``)."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = 2**31 - 1
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS


# --- effects ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """One entry of the member list a leader receives in its JoinGroup answer."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinReply:
    waiter: Any
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncReply:
    waiter: Any
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class StoreGroup:
    """Persist the group's metadata record now (from the group's current fields).

    ``assignment`` (member id -> bytes) replaces the members' assignments in the
    record. With ``sync_generation`` set, the coordinator must call
    ``Group.on_sync_stored(sync_generation, assignment, error, now_ms)`` when the write
    is durable (or failed).
    """

    assignment: dict[str, bytes] | None = None
    sync_generation: int | None = None


@dataclass(frozen=True, slots=True)
class Note:
    """An event worth logging (snake_case past tense, Kafka's vocabulary)."""

    event: str
    fields: dict = field(default_factory=dict)


Effect = JoinReply | SyncReply | StoreGroup | Note


# --- members ------------------------------------------------------------------------------


class Member:
    """One member of a group (Kafka ``MemberMetadata``)."""

    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "rebalance_timeout_ms",
                 "session_timeout_ms", "protocol_type", "protocols", "assignment", "awaiting_join",
                 "join_waiter", "awaiting_sync", "sync_waiter", "is_new", "session_deadline_ms")

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 protocols: list[tuple[str, bytes]]) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = list(protocols)
        self.assignment = b""
        self.awaiting_join = False
        self.join_waiter: Any = None
        self.awaiting_sync = False
        self.sync_waiter: Any = None
        self.is_new = False
        self.session_deadline_ms = 0

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, same order, same metadata bytes (Kafka ``MemberMetadata.matches``)."""
        if len(protocols) != len(self.protocols):
            return False
        return all(a[0] == b[0] and bytes(a[1]) == bytes(b[1]) for a, b in zip(protocols, self.protocols))

    def vote(self, candidates: set[str]) -> str | None:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        return None

    def kept_alive(self) -> bool:
        """A member awaiting a join or sync answer needs no heartbeat, unless it is new."""
        if self.is_new:
            return False
        return self.awaiting_join or self.awaiting_sync

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Member({self.member_id!r}, instance={self.group_instance_id!r})"


def default_member_id(client_id: str, group_instance_id: str | None) -> str:
    """Kafka's ``GroupMetadata.generateMemberId``: ``<instance id or client id>-<uuid>``."""
    prefix = group_instance_id if group_instance_id is not None else (client_id or "")
    return f"{prefix}-{uuid.uuid4()}"


# --- the group ----------------------------------------------------------------------------


class GroupMetadata:
    """One consumer group's state and members (Kafka ``GroupMetadata`` and its primitives)."""

    def __init__(self, group_id: str, now_ms: int, settings: GroupSettings | None = None, *,
                 new_member_id: Callable[[str, str | None], str] = default_member_id) -> None:
        self.group_id = group_id
        self.settings = settings or GroupSettings()
        self._new_member_id = new_member_id
        self.state = EMPTY
        self.state_timestamp_ms: int | None = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.pending_members: dict[str, int] = {}  # member id -> expiry deadline
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_sync: set[str] = set()
        self.new_member_added = False
        self.rebalance_deadline_ms: int | None = None
        self.in_initial_delay = False
        self.sync_deadline_ms: int | None = None
        self._out: list[Effect] = []

    # -- small queries --------------------------------------------------------------------
    def is_(self, state: GroupState) -> bool:
        return self.state is state

    @property
    def size(self) -> int:
        return len(self.members)

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    @property
    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        if group_instance_id is None:
            return None
        return self.static_members.get(group_instance_id)

    def supported_protocols(self) -> set[str]:
        """Protocols every current member supports."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            for name in set(m.protocol_names()):
                counts[name] = counts.get(name, 0) + 1
        return {name for name, n in counts.items() if n == len(self.members)}

    def supports_protocols(self, protocol_type: str, protocol_names: Iterable[str]) -> bool:
        names = set(protocol_names)
        if self.state is EMPTY:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and bool(names & self.supported_protocols())

    def select_protocol(self) -> str | None:
        """The protocol all members support that gets the most first-choice votes.

        Ties go to the protocol the leader prefers (Kafka leaves them to hash order).
        """
        candidates = self.supported_protocols()
        if not candidates:
            return None
        votes: dict[str, int] = {c: 0 for c in candidates}
        for m in self.members.values():
            choice = m.vote(candidates)
            if choice is not None:
                votes[choice] += 1
        leader = self.members.get(self.leader_id) if self.leader_id else None
        preference = leader.protocol_names() if leader else sorted(candidates)
        rank = {name: i for i, name in enumerate(preference)}
        return min(candidates, key=lambda c: (-votes[c], rank.get(c, len(rank)), c))

    def subscribed_topics(self) -> frozenset[str] | None:
        """Topics the live members of a consumer group subscribe to (None: cannot tell)."""
        if not self.members or not self.is_consumer_group():
            return frozenset()
        topics: set[str] = set()
        for m in self.members.values():
            for _, meta in m.protocols:
                try:
                    topics.update(subscription_topics(meta))
                except SubscriptionError:
                    return None
        return frozenset(topics)

    def next_deadline_ms(self) -> int | None:
        """The earliest time at which :meth:`poll` has something to do."""
        deadlines = list(self.pending_members.values())
        deadlines.extend(m.session_deadline_ms for m in self.members.values() if not m.kept_alive())
        if self.state is PREPARING and self.rebalance_deadline_ms is not None:
            deadlines.append(self.rebalance_deadline_ms)
        if self.state in (COMPLETING, STABLE) and self.sync_deadline_ms is not None:
            deadlines.append(self.sync_deadline_ms)
        return min(deadlines) if deadlines else None

    def current_member_metadata(self) -> tuple[JoinedMember, ...]:
        return tuple(JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                     for m in self.members.values())

    # -- effects plumbing -------------------------------------------------------------------
    def _begin(self) -> list[Effect]:
        self._out = []
        return self._out

    def _emit(self, effect: Effect) -> None:
        """Queue ``effect`` for the caller of the current operation (see :meth:`_begin`)."""
        self._out.append(effect)

    def _note(self, event: str, **fields) -> None:
        self._out.append(Note(event, {"group": self.group_id, **fields}))

    def _join_reply(self, waiter, error: ErrorCode, member_id: str = "") -> None:
        self._out.append(JoinReply(waiter, error, member_id=member_id))

    def _current_generation_reply(self, member: Member, waiter, *, leader_id: str | None = None,
                                  with_members: bool | None = None, skip_assignment: bool = False) -> None:
        is_leader = member.member_id == self.leader_id
        if with_members is None:
            with_members = is_leader
        self._out.append(JoinReply(
            waiter, ErrorCode.NONE, member_id=member.member_id, generation_id=self.generation_id,
            protocol_type=self.protocol_type, protocol_name=self.protocol_name,
            leader_id=(self.leader_id if leader_id is None else leader_id) or "",
            members=self.current_member_metadata() if with_members else (), skip_assignment=skip_assignment))

    def _transition(self, target: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalStateTransition(f"group {self.group_id}: {self.state.value} -> {target.value}")
        self.state = target
        self.state_timestamp_ms = now_ms

    # -- membership primitives ----------------------------------------------------------------
    def _add(self, member: Member) -> None:
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.pending_members.pop(member.member_id, None)

    def _remove(self, member_id: str) -> Member | None:
        """Kafka ``GroupMetadata.remove``: drop the member, re-pick the leader."""
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        return member

    def _validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """Kafka ``validateCurrentMember``: static fencing first, then membership."""
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is not None and current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def _touch(self, member: Member, now_ms: int) -> None:
        """Kafka ``completeAndScheduleNextHeartbeatExpiration``."""
        member.session_deadline_ms = now_ms + member.session_timeout_ms

    def _answer_join(self, member: Member, reply: JoinReply) -> None:
        if member.awaiting_join:
            member.awaiting_join = False
            member.join_waiter = None
            self._out.append(reply)

    def _answer_sync(self, member: Member, error: ErrorCode, *, assignment: bytes = b"") -> bool:
        if not member.awaiting_sync:
            return False
        waiter = member.sync_waiter
        member.awaiting_sync = False
        member.sync_waiter = None
        if error == ErrorCode.NONE:
            self._out.append(SyncReply(waiter, error, self.protocol_type, self.protocol_name, assignment))
        else:
            self._out.append(SyncReply(waiter, error))
        return True

    # -- administrative ------------------------------------------------------------------------
    def mark_dead(self, now_ms: int) -> None:
        """DeleteGroups or expiry: the group is gone (callers check it is Empty first)."""
        self._transition(DEAD, now_ms)

    def load(self, *, protocol_type: str | None, generation_id: int, protocol_name: str | None,
             leader_id: str | None, state_timestamp_ms: int | None, members: list[dict], now_ms: int) -> None:
        """Restore a group from its last metadata record (Kafka ``GroupMetadata.loadGroup``).

        A group with members comes back Stable and every member gets a fresh session;
        one without comes back Empty. A member's ``protocols`` (all those of its JoinGroup, when
        known: a consumer group converted back to classic) replace the one stored protocol.
        """
        self.protocol_type = protocol_type or None
        self.generation_id = generation_id
        self.protocol_name = protocol_name
        self.members.clear()
        self.static_members.clear()
        for rec in members:
            m = Member(rec["member_id"], rec.get("group_instance_id"), rec.get("client_id", ""),
                       rec.get("client_host", ""), rec.get("rebalance_timeout_ms", rec["session_timeout_ms"]),
                       rec["session_timeout_ms"], protocol_type or "",
                       rec.get("protocols") or [(protocol_name or "", rec.get("subscription", b""))])
            m.assignment = rec.get("assignment", b"")
            m.session_deadline_ms = now_ms + m.session_timeout_ms
            self.members[m.member_id] = m
            if m.group_instance_id is not None:
                self.static_members[m.group_instance_id] = m.member_id
        self.leader_id = leader_id if leader_id in self.members else next(iter(self.members), None)
        self.state = STABLE if self.members else EMPTY
        self.state_timestamp_ms = state_timestamp_ms if state_timestamp_ms is not None and \
            state_timestamp_ms >= 0 else None

    def describe(self) -> dict:
        """Kafka ``GroupMetadata.summary``: metadata and assignments only when Stable."""
        stable = self.state is STABLE
        return {
            "group_state": self.state.value,
            "protocol_type": self.protocol_type or "",
            "protocol_data": (self.protocol_name or "") if stable else "",
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                 "client_host": m.client_host,
                 "member_metadata": m.metadata(self.protocol_name) if stable else b"",
                 "member_assignment": m.assignment if stable else b""}
                for m in self.members.values()
            ],
        }
