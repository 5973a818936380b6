"""The consumer-group state machine of Kafka's classic group protocol, without I/O.

Rules of this file (h11 style):

1. Everything that decides a group's transitions lives here: JoinGroup, SyncGroup,
   Heartbeat, LeaveGroup, the commit-side membership checks, session, join, sync and
   initial-delay timeouts. No sockets, no asyncio, no clock: every method takes
   ``now_ms``, and :meth:`Group.poll` fires whatever deadlines have passed.
2. A method never blocks and never calls back. It returns a list of *effects* the
   coordinator carries out in order: :class:`JoinReply` / :class:`SyncReply` (answer
   the request registered under ``waiter``; JoinGroup and SyncGroup answers are often
   delayed until other members act or a timer fires), :class:`StoreGroup` (persist
   the group's metadata record, then report back through :meth:`Group.on_sync_stored`
   when asked), and :class:`Note` (something worth a log line).
3. What a group *is* (state, members, protocol selection, the allowed transitions
   ``VALID_PREVIOUS_STATES``, load and describe) lives in :mod:`broker.groups.group`
   (Kafka ``GroupMetadata``); this module adds what it *does* on each request and
   timer (Kafka ``GroupCoordinator``'s rules), as the subclass :class:`Group`.

Member lifecycle (Kafka ``GroupCoordinator`` semantics, 3.x):

* JoinGroup v4+ without a member id and without ``group.instance.id`` gets
  MEMBER_ID_REQUIRED and a fresh id (KIP-394); the id is *pending* until the member
  joins again with it, and expires after its session timeout.
* A new member may wait at most ``new_member_join_timeout_ms`` (5 min) for the
  rebalance to complete; a member awaiting a join or a sync answer is otherwise kept
  alive; every other member must heartbeat (or commit) within its session timeout.
* The first rebalance of an Empty group waits ``group.initial.rebalance.delay.ms``,
  extended by the same delay while new members keep arriving, up to the rebalance
  timeout. Later rebalances complete as soon as every member has rejoined and no
  pending member is left, or after the rebalance timeout (max over members);
  dynamic members that did not rejoin are then removed, static ones kept.
* The protocol is the one every member supports that most members list first; the
  leader (first member, re-elected among the rejoined ones if needed) receives every
  member's metadata and sends the assignment in SyncGroup. Members that do not send
  SyncGroup within the rebalance timeout are removed.
* Static members (``group.instance.id``, JoinGroup v5+) keep their slot across
  restarts: joining with an unknown member id replaces the old id (the old one is
  fenced with FENCED_INSTANCE_ID) and, in a Stable group whose protocol does not
  change, returns the current generation without a rebalance.
"""

from __future__ import annotations

from typing import Any

from sundial.protocol.errors import ErrorCode

from .group import (
    CAN_REBALANCE_FROM,
    COMPLETING,
    DEAD,
    EMPTY,
    PREPARING,
    STABLE,
    Effect,
    GroupMetadata,
    GroupState,
    JoinReply,
    Member,
    StoreGroup,
    SyncReply,
)

#: Heartbeat of a valid member of the current generation, per state (after the Dead,
#: member and generation checks). A heartbeat also restarts the member's session.
HEARTBEAT_OUTCOME: dict[GroupState, ErrorCode] = {
    EMPTY: ErrorCode.UNKNOWN_MEMBER_ID,
    PREPARING: ErrorCode.REBALANCE_IN_PROGRESS,
    COMPLETING: ErrorCode.NONE,
    STABLE: ErrorCode.NONE,
}

#: SyncGroup of a valid member of the current generation, per state.
#: "await": the answer waits for the leader's assignment; "answer": the stored assignment.
SYNC_OUTCOME: dict[GroupState, ErrorCode | str] = {
    EMPTY: ErrorCode.UNKNOWN_MEMBER_ID,
    PREPARING: ErrorCode.REBALANCE_IN_PROGRESS,
    COMPLETING: "await",
    STABLE: "answer",
}

#: OffsetCommit that passed the member/generation checks, per state.
#: "store": accept; "store+heartbeat": accept and restart the member's session.
COMMIT_OUTCOME: dict[GroupState, ErrorCode | str] = {
    EMPTY: "store",
    PREPARING: "store+heartbeat",
    STABLE: "store+heartbeat",
    COMPLETING: ErrorCode.REBALANCE_IN_PROGRESS,
}

#: JoinGroup of a known (existing) member, per state.
#: "rebalance": update its protocols and (re)start a rebalance; "current-if-unchanged":
#: same metadata -> answer the current generation, else rebalance; "current-unless-leader":
#: the leader or a member with new metadata rebalances, others get the current generation.
KNOWN_MEMBER_JOIN: dict[GroupState, ErrorCode | str] = {
    EMPTY: ErrorCode.UNKNOWN_MEMBER_ID,
    PREPARING: "rebalance",
    COMPLETING: "current-if-unchanged",
    STABLE: "current-unless-leader",
}


class Group(GroupMetadata):
    """One consumer group: :class:`~broker.groups.group.GroupMetadata` plus the coordinator's rules for it.

    The rules own the initial-rebalance delay's bookkeeping; the effects list stays the
    metadata's, reached through ``_emit`` (one owner each, checked by the ownership test)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._initial_delay_ms = 0       # the delay of the current initial-rebalance step
        self._initial_remaining_ms = 0   # what is left of the rebalance timeout for further steps

    def _remove_member_and_update(self, member: Member, reason: str, now_ms: int) -> None:
        """Kafka ``removeMemberAndUpdateGroup``."""
        self._answer_join(member, JoinReply(member.join_waiter, ErrorCode.UNKNOWN_MEMBER_ID,
                                            member_id=member.member_id))
        self._answer_sync(member, ErrorCode.UNKNOWN_MEMBER_ID)
        self._remove(member.member_id)
        self._note("member_removed", member_id=member.member_id, group_instance_id=member.group_instance_id,
                   client_id=member.client_id, reason=reason, state=self.state.value)
        if self.state in (STABLE, COMPLETING):
            self._maybe_prepare_rebalance(f"removing member {member.member_id} on {reason}", now_ms)
        elif self.state is PREPARING:
            self._try_complete_join(now_ms)

    # -- rebalance steps ---------------------------------------------------------------------
    def _maybe_prepare_rebalance(self, reason: str, now_ms: int) -> None:
        if self.state in CAN_REBALANCE_FROM:
            self._prepare_rebalance(reason, now_ms)

    def _prepare_rebalance(self, reason: str, now_ms: int) -> None:
        if self.state is COMPLETING:
            self._reset_and_propagate_assignment_error(ErrorCode.REBALANCE_IN_PROGRESS, now_ms)
        self.sync_deadline_ms = None
        old_state = self.state
        if self.state is EMPTY:
            delay = self.settings.initial_rebalance_delay_ms
            self.in_initial_delay = True
            self._initial_delay_ms = delay
            self._initial_remaining_ms = max(self.rebalance_timeout_ms() - delay, 0)
            self.rebalance_deadline_ms = now_ms + delay
        else:
            self.in_initial_delay = False
            self.rebalance_deadline_ms = now_ms + self.rebalance_timeout_ms()
        self._transition(PREPARING, now_ms)
        self._note("rebalance_prepared", previous_state=old_state.value, generation_id=self.generation_id,
                   members=len(self.members), reason=reason)
        self._try_complete_join(now_ms)  # Kafka: tryCompleteElseWatch

    def _try_complete_join(self, now_ms: int) -> None:
        if self.state is PREPARING and not self.in_initial_delay and self.has_all_members_joined():
            self._complete_join(now_ms)

    def _maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join:
            return True
        for m in self.members.values():
            if m.awaiting_join:
                self._note("leader_elected", member_id=m.member_id, previous_leader=self.leader_id)
                self.leader_id = m.member_id
                return True
        return False

    def _complete_join(self, now_ms: int) -> None:
        """Kafka ``onCompleteJoin``."""
        for m in [m for m in self.members.values() if not m.awaiting_join and not m.is_static]:
            self._remove(m.member_id)
            self._note("member_removed", member_id=m.member_id, group_instance_id=None, client_id=m.client_id,
                       reason="did not rejoin before the rebalance timeout", state=self.state.value)
        if self.state is DEAD:
            return
        if not self._maybe_elect_new_joined_leader() and self.members:
            # Only static members that did not rejoin are left: wait for them or their expiry.
            self.in_initial_delay = False
            self.rebalance_deadline_ms = now_ms + self.rebalance_timeout_ms()
            self._note("rebalance_stalled", generation_id=self.generation_id, members=len(self.members))
            return
        self._init_next_generation(now_ms)
        if self.state is EMPTY:
            self._note("group_emptied", generation_id=self.generation_id)
            self._emit(StoreGroup(assignment={}))
            return
        self._note("group_rebalanced", generation_id=self.generation_id, protocol=self.protocol_name,
                   leader=self.leader_id, members=len(self.members))
        for m in self.members.values():
            is_leader = m.member_id == self.leader_id
            self._answer_join(m, JoinReply(
                m.join_waiter, ErrorCode.NONE, member_id=m.member_id, generation_id=self.generation_id,
                protocol_type=self.protocol_type, protocol_name=self.protocol_name, leader_id=self.leader_id or "",
                members=self.current_member_metadata() if is_leader else ()))
            self._touch(m, now_ms)
            m.is_new = False
            self.pending_sync.add(m.member_id)
        self.sync_deadline_ms = now_ms + self.rebalance_timeout_ms()

    def _init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        self.pending_sync.clear()
        self.rebalance_deadline_ms = None
        self.in_initial_delay = False
        if self.members:
            self.protocol_name = self.select_protocol()
            self._transition(COMPLETING, now_ms)
        else:
            self.protocol_name = None
            self._transition(EMPTY, now_ms)

    def _reset_and_propagate_assignment_error(self, error: ErrorCode, now_ms: int) -> None:
        for m in self.members.values():
            m.assignment = b""
        self._propagate_assignment(error, now_ms)

    def _propagate_assignment(self, error: ErrorCode, now_ms: int) -> None:
        for m in self.members.values():
            if self._answer_sync(m, error, assignment=m.assignment):
                self._touch(m, now_ms)

    # -- JoinGroup -----------------------------------------------------------------------------
    def _accept_joining_member(self, member_id: str) -> bool:
        """Kafka ``acceptJoiningMember`` (group.max.size)."""
        max_size = self.settings.max_size
        if self.state in (EMPTY, DEAD):
            return True
        if self.state is PREPARING:
            m = self.members.get(member_id)
            return (m is not None and m.awaiting_join) or self.num_awaiting_join < max_size
        return member_id in self.members or len(self.members) < max_size

    def join(self, *, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
             session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
             protocols: list[tuple[str, bytes]], require_known_member_id: bool, now_ms: int,
             waiter: Any = None, reason: str | None = None) -> list[Effect]:
        """A JoinGroup request that passed the group-id and session-timeout checks."""
        out = self._begin()
        protocols = [(name, bytes(meta)) for name, meta in protocols]
        if not self._accept_joining_member(member_id):
            if member_id in self.members or member_id in self.pending_members:
                self._remove(member_id)
            self._note("join_refused", member_id=member_id, reason="group.max.size reached",
                       max_size=self.settings.max_size)
            self._join_reply(waiter, ErrorCode.GROUP_MAX_SIZE_REACHED)
        elif member_id == "":
            self._join_new_member(group_instance_id, client_id, client_host, session_timeout_ms,
                                  rebalance_timeout_ms, protocol_type, protocols, require_known_member_id,
                                  now_ms, waiter, reason)
        else:
            self._join_known_member(member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                                    rebalance_timeout_ms, protocol_type, protocols, now_ms, waiter, reason)
        if self.state is PREPARING:
            self._try_complete_join(now_ms)
        return out

    def _join_new_member(self, group_instance_id, client_id, client_host, session_timeout_ms,
                         rebalance_timeout_ms, protocol_type, protocols, require_known_member_id, now_ms,
                         waiter, reason) -> None:
        if self.state is DEAD:
            self._join_reply(waiter, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            return
        if not self.supports_protocols(protocol_type, [n for n, _ in protocols]):
            self._join_reply(waiter, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            return
        new_id = self._new_member_id(client_id, group_instance_id)
        if group_instance_id is not None and group_instance_id in self.static_members:
            self._static_member_rejoin(new_id, group_instance_id, session_timeout_ms, rebalance_timeout_ms,
                                       protocols, now_ms, waiter, reason)
        elif require_known_member_id:
            self.pending_members[new_id] = now_ms + session_timeout_ms
            self._note("member_id_assigned", member_id=new_id, client_id=client_id, client_host=client_host)
            self._join_reply(waiter, ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id)
        else:
            self._add_member_and_rebalance(new_id, group_instance_id, client_id, client_host, session_timeout_ms,
                                           rebalance_timeout_ms, protocol_type, protocols, now_ms, waiter, reason)

    def _join_known_member(self, member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                           rebalance_timeout_ms, protocol_type, protocols, now_ms, waiter, reason) -> None:
        if self.state is DEAD:
            self._join_reply(waiter, ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
            return
        if not self.supports_protocols(protocol_type, [n for n, _ in protocols]):
            self._join_reply(waiter, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
            return
        if member_id in self.pending_members:
            self._add_member_and_rebalance(member_id, group_instance_id, client_id, client_host,
                                           session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols,
                                           now_ms, waiter, reason)
            return
        error = self._validate_member(member_id, group_instance_id)
        if error:
            self._join_reply(waiter, error, member_id)
            return
        member = self.members[member_id]
        action = KNOWN_MEMBER_JOIN[self.state]
        if isinstance(action, ErrorCode):
            self._join_reply(waiter, action, member_id)
        elif action == "rebalance":
            self._update_member_and_rebalance(member, protocols, rebalance_timeout_ms, session_timeout_ms, now_ms,
                                              waiter, f"member {member_id} rejoined: {reason or 'no reason'}")
        elif action == "current-if-unchanged":
            if member.matches(protocols):
                self._current_generation_reply(member, waiter)
            else:
                self._update_member_and_rebalance(member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                                  now_ms, waiter, f"member {member_id} changed its metadata")
        else:  # current-unless-leader
            if member_id == self.leader_id:
                self._update_member_and_rebalance(member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                                  now_ms, waiter, f"leader {member_id} rejoined: "
                                                                  f"{reason or 'no reason'}")
            elif not member.matches(protocols):
                self._update_member_and_rebalance(member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                                  now_ms, waiter, f"member {member_id} changed its metadata")
            else:
                self._current_generation_reply(member, waiter, with_members=False)

    def _add_member_and_rebalance(self, member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                                  rebalance_timeout_ms, protocol_type, protocols, now_ms, waiter, reason) -> None:
        member = Member(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                        session_timeout_ms, protocol_type, protocols)
        member.is_new = True
        member.awaiting_join = True
        member.join_waiter = waiter
        if self.state is PREPARING and self.generation_id == 0:
            self.new_member_added = True
        self._add(member)
        self._note("member_joined", member_id=member_id, group_instance_id=group_instance_id, client_id=client_id,
                   client_host=client_host, session_timeout_ms=session_timeout_ms,
                   rebalance_timeout_ms=rebalance_timeout_ms, protocols=member.protocol_names())
        self._maybe_prepare_rebalance(f"adding new member {member_id}: {reason or 'no reason'}", now_ms)
        member.session_deadline_ms = now_ms + self.settings.new_member_join_timeout_ms

    def _update_member(self, member: Member, protocols, rebalance_timeout_ms, session_timeout_ms, waiter) -> None:
        member.protocols = list(protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if member.awaiting_join and member.join_waiter is not waiter:
            # A duplicate JoinGroup (the client gave up on the first one): retire the old request.
            self._emit(JoinReply(member.join_waiter, ErrorCode.REBALANCE_IN_PROGRESS,
                                       member_id=member.member_id))
        member.awaiting_join = True
        member.join_waiter = waiter

    def _update_member_and_rebalance(self, member, protocols, rebalance_timeout_ms, session_timeout_ms, now_ms,
                                     waiter, reason) -> None:
        self._update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, waiter)
        self._maybe_prepare_rebalance(reason, now_ms)

    def _static_member_rejoin(self, new_id, group_instance_id, session_timeout_ms, rebalance_timeout_ms, protocols,
                              now_ms, waiter, reason) -> None:
        """Kafka ``doStaticMemberJoinGroup``: a static member restarted with an unknown member id."""
        old_id = self.static_members[group_instance_id]
        old_leader = self.leader_id
        member = self.members.pop(old_id)
        # Fence whoever still waits under the old id.
        if member.awaiting_join:
            self._emit(JoinReply(member.join_waiter, ErrorCode.FENCED_INSTANCE_ID, member_id=old_id))
            member.awaiting_join = False
            member.join_waiter = None
        if member.awaiting_sync:
            self._emit(SyncReply(member.sync_waiter, ErrorCode.FENCED_INSTANCE_ID))
            member.awaiting_sync = False
            member.sync_waiter = None
        member.member_id = new_id
        self.members[new_id] = member
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        self.static_members[group_instance_id] = new_id
        self._touch(member, now_ms)
        self._note("static_member_replaced", group_instance_id=group_instance_id, old_member_id=old_id,
                   member_id=new_id, state=self.state.value)
        self._update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, waiter)
        if self.state is STABLE:
            if self.protocol_name == self.select_protocol():
                # No rebalance: persist the new member id and hand back the current generation.
                # The old leader id is returned so that a restarted leader does not assign again.
                member.awaiting_join = False
                member.join_waiter = None
                self._emit(StoreGroup(assignment=None))
                self._current_generation_reply(member, waiter, leader_id=old_leader or "", with_members=False)
            else:
                self._maybe_prepare_rebalance(
                    f"static member {new_id} ({group_instance_id}) rejoined with a protocol change", now_ms)
        elif self.state is COMPLETING:
            self._prepare_rebalance(f"static member {new_id} ({group_instance_id}) rejoined during the sync stage",
                                    now_ms)
        # PreparingRebalance: the member now awaits the join like everyone else.

    # -- SyncGroup -----------------------------------------------------------------------------
    def sync(self, *, member_id: str, group_instance_id: str | None, generation_id: int,
             protocol_type: str | None, protocol_name: str | None, assignments: list[tuple[str, bytes]],
             now_ms: int, waiter: Any = None) -> list[Effect]:
        out = self._begin()
        if self.state is DEAD:
            out.append(SyncReply(waiter, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return out
        error = self._validate_member(member_id, group_instance_id)
        if not error and generation_id != self.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        if not error and protocol_type is not None and protocol_type != self.protocol_type:
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if not error and protocol_name is not None and protocol_name != self.protocol_name:
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error:
            out.append(SyncReply(waiter, error))
            return out
        action = SYNC_OUTCOME[self.state]
        member = self.members[member_id]
        if isinstance(action, ErrorCode):
            out.append(SyncReply(waiter, action))
        elif action == "answer":
            self.pending_sync.discard(member_id)
            self._touch(member, now_ms)
            out.append(SyncReply(waiter, ErrorCode.NONE, self.protocol_type, self.protocol_name, member.assignment))
        else:  # await the leader's assignment
            if member.awaiting_sync and member.sync_waiter is not waiter:
                out.append(SyncReply(member.sync_waiter, ErrorCode.REBALANCE_IN_PROGRESS))
            member.awaiting_sync = True
            member.sync_waiter = waiter
            self.pending_sync.discard(member_id)
            self._touch(member, now_ms)
            if member_id == self.leader_id:
                given = {mid: bytes(a) for mid, a in assignments}
                unknown = sorted(set(given) - set(self.members))
                if unknown:
                    self._note("assignment_for_unknown_members_ignored", member_ids=unknown)
                assignment = {mid: given.get(mid, b"") for mid in self.members}
                out.append(StoreGroup(assignment=assignment, sync_generation=self.generation_id))
        return out

    def on_sync_stored(self, generation_id: int, assignment: dict[str, bytes], error: ErrorCode,
                       now_ms: int) -> list[Effect]:
        """The leader's assignment is durable (error NONE) or could not be written."""
        out = self._begin()
        if self.state is not COMPLETING or generation_id != self.generation_id:
            return out
        if error:
            self._reset_and_propagate_assignment_error(error, now_ms)
            self._maybe_prepare_rebalance(f"failed to store the assignment: {error.name}", now_ms)
            return out
        for m in self.members.values():
            m.assignment = assignment.get(m.member_id, b"")
        self._propagate_assignment(ErrorCode.NONE, now_ms)
        self._transition(STABLE, now_ms)
        self._note("group_stabilized", generation_id=self.generation_id, protocol=self.protocol_name,
                   leader=self.leader_id, members=len(self.members))
        return out

    def rebalance(self, reason: str, now_ms: int) -> list[Effect]:
        """Start a rebalance now (a consumer group just became this classic group: its members
        rejoin, Kafka ``convertToClassicGroup``'s ``prepareRebalance``)."""
        out = self._begin()
        self._maybe_prepare_rebalance(reason, now_ms)
        return out

    # -- Heartbeat, LeaveGroup, commits ----------------------------------------------------------
    def heartbeat(self, *, member_id: str, group_instance_id: str | None, generation_id: int,
                  now_ms: int) -> ErrorCode:
        if self.state is DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(member_id, group_instance_id)
        if error:
            return error
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        outcome = HEARTBEAT_OUTCOME[self.state]
        if self.state is not EMPTY:
            self._touch(self.members[member_id], now_ms)
        return outcome

    def leave(self, members: list[tuple[str, str | None, str | None]], now_ms: int
              ) -> tuple[ErrorCode, list[ErrorCode], list[Effect]]:
        """LeaveGroup for ``(member_id, group_instance_id, reason)`` entries.

        Returns the request-level error, one error per entry, and the effects.
        """
        out = self._begin()
        if self.state is DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [], out
        errors: list[ErrorCode] = []
        for member_id, group_instance_id, reason in members:
            why = f"left the group: {reason}" if reason else "left the group"
            if member_id == "":
                current = self.static_member_id(group_instance_id)
                if current is None:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                else:
                    self._remove_member_and_update(self.members[current], why, now_ms)
                    errors.append(ErrorCode.NONE)
            elif member_id in self.pending_members:
                self._remove(member_id)
                self._note("pending_member_removed", member_id=member_id, reason=why)
                if self.state is PREPARING:
                    self._try_complete_join(now_ms)
                errors.append(ErrorCode.NONE)
            else:
                error = self._validate_member(member_id, group_instance_id)
                if not error:
                    self._remove_member_and_update(self.members[member_id], why, now_ms)
                errors.append(error)
        return ErrorCode.NONE, errors, out

    def validate_offset_commit(self, *, member_id: str, group_instance_id: str | None, generation_id: int,
                               now_ms: int) -> ErrorCode:
        """Kafka ``validateOffsetCommit`` plus the per-state rule of ``doCommitOffsets``."""
        if self.state is DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and self.state is EMPTY:
            # The admin client, or a consumer outside group management: an empty group takes
            # the commit whatever member id it names (librdkafka sends its pre-generated one).
            return ErrorCode.NONE
        if generation_id >= 0 or member_id != "" or group_instance_id is not None:
            error = self._validate_member(member_id, group_instance_id)
            if error:
                return error
            if generation_id != self.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif self.state is not EMPTY:
            # A non-empty group accepts commits from its members only.
            return ErrorCode.UNKNOWN_MEMBER_ID
        outcome = COMMIT_OUTCOME[self.state]
        if isinstance(outcome, ErrorCode):
            return outcome
        if outcome == "store+heartbeat" and member_id in self.members:
            self._touch(self.members[member_id], now_ms)
        return ErrorCode.NONE

    # -- timers ------------------------------------------------------------------------------
    def poll(self, now_ms: int) -> list[Effect]:
        """Fire every deadline at or before ``now_ms``."""
        out = self._begin()
        if self.state is DEAD:
            return out
        for member_id, deadline in list(self.pending_members.items()):
            if deadline <= now_ms:
                self._remove(member_id)
                self._note("pending_member_expired", member_id=member_id)
                if self.state is PREPARING:
                    self._try_complete_join(now_ms)
        for member in list(self.members.values()):
            if member.member_id not in self.members or member.kept_alive():
                continue
            if member.session_deadline_ms <= now_ms:
                reason = ("new member join timeout" if member.is_new
                          else f"session timeout ({member.session_timeout_ms} ms)")
                self._remove_member_and_update(member, reason, now_ms)
        while self.state is PREPARING and self.rebalance_deadline_ms is not None \
                and self.rebalance_deadline_ms <= now_ms:
            if self.in_initial_delay and self.new_member_added and self._initial_remaining_ms != 0:
                # Kafka InitialDelayedJoin: new members keep arriving; wait a little longer.
                self.new_member_added = False
                delay = min(self.settings.initial_rebalance_delay_ms, self._initial_remaining_ms)
                self._initial_remaining_ms = max(self._initial_remaining_ms - self._initial_delay_ms, 0)
                self._initial_delay_ms = delay
                self.rebalance_deadline_ms = now_ms + delay
            else:
                self.in_initial_delay = False
                self._complete_join(now_ms)
                break
        if self.state in (COMPLETING, STABLE) and self.sync_deadline_ms is not None \
                and self.sync_deadline_ms <= now_ms:
            self.sync_deadline_ms = None
            missing = [mid for mid in self.members if mid in self.pending_sync]
            if missing:
                for mid in missing:
                    member = self._remove(mid)
                    if member is not None:
                        self._note("member_removed", member_id=mid, group_instance_id=member.group_instance_id,
                                   client_id=member.client_id, reason="no SyncGroup before the rebalance timeout",
                                   state=self.state.value)
                self._maybe_prepare_rebalance("members did not sync in time", now_ms)
        return out
