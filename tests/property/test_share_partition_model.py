"""Hypothesis: the share-partition engine against a per-offset model, under random appends to the
log, fetches by several members (batch-optimized and record-limit, with aborted transactions),
acknowledgements of every type (well-formed ones and arbitrary ranges), passing time and lock
expiry, member departures, log start movements and restarts from the persisted state (whole, and
with the never-acknowledged acquisitions left out, as Kafka's persisted state has them).

The model is a dict offset → (state, delivery count, holder, lock deadline) and the rules of
KIP-932 as Kafka 4.2 applies them: an acquisition takes available records only and counts one
delivery; ACCEPT acknowledges, REJECT and GAP archive, RELEASE makes available again (archives at
the delivery-count limit), RENEW restarts the lock; a lock that runs out makes its records
available again (archives them at the limit); a member that leaves gives its records back with
one delivery less; a restart forgets acquisitions (one delivery less); a new log start archives
the available records before it. Which records a fetch takes (batch alignment, limits,
throttling) is the engine's business: the model checks that what it took was legal and follows it.

Invariants after every step:

* every in-flight record of the engine is as the model says (state, count, holder, deadline), and
  every later record it does not track is one never delivered;
* every record before the SPSO is acknowledged or archived (or acquired and before the log start,
  archived when let go); the SPSO never moves back;
* delivery counts stay within the limit; no record is held by two members (acquisitions take
  available records only); an acknowledged or archived record is never delivered again;
* the next fetch offset is the first available in-flight record, else past the end, and never
  before the log start; the next deadline is the earliest lock;
* the in-flight window exceeds the cap by less than one log batch (batch alignment);
* every change of state an operation reports for persistence is the change the model made, and
  the persisted state restores to the same records.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from sundial.broker.share.acknowledgement import AcknowledgementBatch
from sundial.broker.share.acquisition import AcquireMode, FetchedBatch
from sundial.broker.share.errors import ShareError
from sundial.broker.share.partition import SharePartition
from sundial.broker.share.state_batch import RecordState, ShareStateSnapshot

AVAILABLE, ACQUIRED = RecordState.AVAILABLE, RecordState.ACQUIRED
ACKNOWLEDGED, ARCHIVED = RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
MEMBERS = ("m1", "m2", "m3")
LOCK_MS = 100
MAX_BATCH_RECORDS = 5


class Rec:
    __slots__ = ("state", "count", "holder", "deadline")

    def __init__(self) -> None:
        self.state, self.count, self.holder, self.deadline = AVAILABLE, 0, None, None

    def key(self):
        return self.state, self.count, self.holder or "", self.deadline

    def release(self, state: RecordState, count: int) -> None:
        self.state, self.count, self.holder, self.deadline = state, count, None, None


def expand(batches) -> dict[int, tuple[RecordState, int]]:
    out = {}
    for b in batches:
        for o in range(b.first_offset, b.last_offset + 1):
            assert o not in out
            out[o] = (b.delivery_state, b.delivery_count)
    return out


class SharePartitionMachine(RuleBasedStateMachine):
    @initialize(limit=st.integers(2, 5), cap=st.integers(4, 30),
                first_batches=st.lists(st.integers(1, MAX_BATCH_RECORDS), max_size=6))
    def setup(self, limit, cap, first_batches):
        self.limit, self.cap = limit, cap
        self.sp = SharePartition(0, max_in_flight_records=cap, max_delivery_count=limit)
        self.log: list[tuple[int, int, bool]] = []  # base, last, aborted
        self.log_end = 0
        self.log_start = 0
        self.now = 0
        self.model: dict[int, Rec] = {}
        self.max_start_offset = 0
        for size in first_batches:
            self.append([size], [False])

    # --- helpers -------------------------------------------------------------------------------

    def held_by(self, member):
        so = self.sp.start_offset
        return sorted(o for o, r in self.model.items() if r.state is ACQUIRED and r.holder == member and o >= so)

    def released_state(self, offset: int, count: int, start_offset: int) -> RecordState:
        if offset < start_offset or count >= self.limit:
            return ARCHIVED
        return AVAILABLE

    def check_change(self, change, expected: dict[int, tuple[RecordState, int]]):
        assert expand(change.state_batches) == expected
        assert change.start_offset == self.sp.start_offset

    # --- rules ---------------------------------------------------------------------------------

    @rule(sizes=st.lists(st.integers(1, MAX_BATCH_RECORDS), min_size=1, max_size=3),
          aborted=st.lists(st.booleans(), min_size=3, max_size=3))
    def append(self, sizes, aborted):
        for size, is_aborted in zip(sizes, aborted):
            base = self.log_end
            self.log.append((base, base + size - 1, is_aborted and size > 1))
            for o in range(base, base + size):
                self.model[o] = Rec()
            self.log_end += size

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 15), batch_size=st.integers(1, 10),
          read_batches=st.integers(1, 6), mode=st.sampled_from(AcquireMode), read_committed=st.booleans(),
          data=st.data())
    def fetch(self, member, max_records, batch_size, read_batches, mode, read_committed, data):
        fetch_offset = self.sp.next_fetch_offset()
        assert fetch_offset >= self.log_start
        read = [b for b in self.log if b[1] >= fetch_offset][:read_batches]
        aborted = [(b, l) for b, l, a in read if a] if read_committed else []
        aborted_offsets = {o for b, l in aborted for o in range(b, l + 1)}
        before = {o: self.model[o].key() for o in aborted_offsets}
        result = self.sp.acquire(member, [FetchedBatch(b, l) for b, l, _ in read], fetch_offset=fetch_offset,
                                 max_records=max_records, batch_size=batch_size, lock_duration_ms=LOCK_MS,
                                 now_ms=self.now, mode=mode, aborted=aborted)
        taken = [o for r in result.records for o in range(r.first_offset, r.last_offset + 1)]
        assert len(taken) == len(set(taken)) == result.count
        assert taken == sorted(taken)
        if mode is AcquireMode.RECORD_LIMIT:
            assert result.count <= max_records
        for r in result.records:
            for o in range(r.first_offset, r.last_offset + 1):
                rec = self.model[o]
                # never held twice, never delivered again once done, never deleted, never aborted
                assert rec.state is AVAILABLE, (o, rec.key())
                assert self.log_start <= o < self.log_end and o not in aborted_offsets
                assert r.delivery_count == rec.count + 1 <= self.limit
                rec.state, rec.count, rec.holder, rec.deadline = ACQUIRED, rec.count + 1, member, self.now + LOCK_MS
        for o in aborted_offsets:
            if before[o][0] is not AVAILABLE:
                continue
            view = self.sp.record(o)
            # Acquired for this fetch, then archived as aborted (and maybe passed by the SPSO already).
            if view is None and o < self.sp.start_offset:
                self.model[o].release(ARCHIVED, before[o][1] + 1)
            elif view is not None and view.state is ARCHIVED:
                assert view.delivery_count == before[o][1] + 1
                self.model[o].release(ARCHIVED, view.delivery_count)
        # A consumer usually acknowledges (some of) what it got before its next fetch, or fails and
        # gives it all back (which drives delivery counts up to the limit).
        taken = [o for o in taken if self.model[o].state is ACQUIRED and o >= self.sp.start_offset]
        then = data.draw(st.sampled_from(("nothing", "some", "release all")))
        if taken and then == "some":
            self.acknowledge_valid(member, sorted(data.draw(st.sets(st.sampled_from(taken)))), data)
        elif taken and then == "release all":
            self.acknowledge_valid(member, taken, data, types_of=st.just(RELEASE))

    @rule(member=st.sampled_from(MEMBERS), data=st.data())
    def acknowledge_held(self, member, data):
        held = self.held_by(member)
        if held:
            self.acknowledge_valid(member, sorted(data.draw(st.sets(st.sampled_from(held), max_size=8))), data)

    def acknowledge_valid(self, member, chosen, data, types_of=st.sampled_from((GAP, ACCEPT, RELEASE, REJECT, RENEW))):
        """Acknowledge some of what ``member`` holds, in runs of consecutive offsets with one type per
        run or one per offset: always accepted."""
        if not chosen:
            return
        runs: list[list[int]] = [[chosen[0]]]
        for o in chosen[1:]:
            if o == runs[-1][-1] + 1:
                runs[-1].append(o)
            else:
                runs.append([o])
        batches = []
        for run in runs:
            if data.draw(st.booleans()):
                types = (data.draw(types_of),)
            else:
                types = tuple(data.draw(types_of) for _ in run)
            batches.append(AcknowledgementBatch(run[0], run[-1], types))
        start_offset = self.sp.start_offset
        change = self.sp.acknowledge(member, batches, now_ms=self.now, lock_duration_ms=LOCK_MS)
        expected = {}
        for ack in batches:
            for o in range(ack.first_offset, ack.last_offset + 1):
                t = ack.acknowledge_types[0] if len(ack.acknowledge_types) == 1 else \
                    ack.acknowledge_types[o - ack.first_offset]
                rec = self.model[o]
                if t == RENEW:
                    rec.deadline = self.now + LOCK_MS
                    continue
                state = {GAP: ARCHIVED, ACCEPT: ACKNOWLEDGED, REJECT: ARCHIVED}.get(t)
                if state is None:
                    state = ARCHIVED if rec.count >= self.limit else AVAILABLE
                rec.release(state, rec.count)
                expected[o] = (state, rec.count)
        assert start_offset <= self.sp.start_offset
        self.check_change(change, expected)

    @rule(member=st.sampled_from(MEMBERS), first=st.integers(0, 60), length=st.integers(1, 8),
          ack_type=st.sampled_from((GAP, ACCEPT, RELEASE, REJECT)))
    def acknowledge_any(self, member, first, length, ack_type):
        last = first + length - 1
        before = list(self.sp.records())
        in_flight = {o for o, _ in before}
        start_offset = self.sp.start_offset
        try:
            change = self.sp.acknowledge(member, [AcknowledgementBatch(first, last, (ack_type,))],
                                         now_ms=self.now, lock_duration_ms=LOCK_MS)
        except ShareError:
            assert list(self.sp.records()) == before  # all or nothing
            return
        expected = {}
        for o in range(max(first, start_offset), last + 1):
            if o not in in_flight:
                continue
            rec = self.model[o]
            assert rec.state is ACQUIRED and rec.holder == member, (o, rec.key())
            state = {GAP: ARCHIVED, ACCEPT: ACKNOWLEDGED, REJECT: ARCHIVED}.get(ack_type)
            if state is None:
                state = ARCHIVED if rec.count >= self.limit else AVAILABLE
            rec.release(state, rec.count)
            expected[o] = (state, rec.count)
        self.check_change(change, expected)

    @rule(step_ms=st.one_of(st.integers(0, LOCK_MS // 4), st.integers(LOCK_MS // 2, 2 * LOCK_MS)))
    def time_passes(self, step_ms):
        self.now += step_ms
        start_offset = self.sp.start_offset
        result = self.sp.poll(self.now)
        expected = {}
        for o, rec in self.model.items():
            if rec.state is ACQUIRED and rec.deadline <= self.now:
                rec.release(self.released_state(o, rec.count, start_offset), rec.count)
                expected[o] = (rec.state, rec.count)
        assert result.expired_records == len(expected)
        self.check_change(result.change, expected)
        assert all(r.state is not ACQUIRED or r.deadline > self.now for r in self.model.values())

    @rule(member=st.sampled_from(MEMBERS), skip=st.integers(0, 1))
    def member_leaves(self, member, skip):
        if skip:
            return  # a departure is rarer than the other steps
        start_offset = self.sp.start_offset
        change = self.sp.release_member(member, self.now)
        expected = {}
        for o, rec in self.model.items():
            if rec.state is ACQUIRED and rec.holder == member:
                if o < start_offset:
                    rec.release(ARCHIVED, rec.count)
                else:
                    rec.release(AVAILABLE, rec.count - 1)
                expected[o] = (rec.state, rec.count)
        self.check_change(change, expected)

    @rule(data=st.data(), skip=st.integers(0, 3))
    def log_start_moves(self, data, skip):
        if skip or not self.log:
            return  # retention is rarer than the other steps
        candidates = [b for b, _, _ in self.log if b > self.log_start] + [self.log_end]
        new_start = data.draw(st.sampled_from(candidates))
        if new_start <= self.log_start:
            return
        for o in range(self.log_start, new_start):
            if self.model[o].state is AVAILABLE:
                self.model[o].release(ARCHIVED, self.model[o].count)
        self.log_start = new_start
        self.sp.on_log_start_offset(new_start)

    @rule(drop_unacknowledged=st.booleans())
    def restart(self, drop_unacknowledged):
        snapshot = self.sp.snapshot()
        if drop_unacknowledged:
            # Kafka never writes an acquisition: offsets acquired and never written are absent.
            kept = tuple(b for b in snapshot.state_batches if not (b.delivery_state is AVAILABLE and b.delivery_count == 0))
            snapshot = ShareStateSnapshot(snapshot.state_epoch, snapshot.start_offset, kept)
        restored = SharePartition.from_snapshot(snapshot, max_in_flight_records=self.cap, max_delivery_count=self.limit)
        restored.on_log_start_offset(self.log_start)
        assert restored.start_offset >= snapshot.start_offset
        persisted = expand(snapshot.state_batches)
        for o in range(snapshot.start_offset, restored.start_offset):
            assert o not in persisted or persisted[o][0].is_terminal
        for o, view in restored.records():
            assert (view.state, view.delivery_count) == persisted[o]
        for o, rec in self.model.items():
            if rec.state is ACQUIRED:
                # An acquired record before the SPSO (the log start moved past it) is done.
                if o < snapshot.start_offset:
                    rec.release(ARCHIVED, rec.count)
                else:
                    rec.release(AVAILABLE, rec.count - 1)
        self.sp = restored

    # --- invariants ----------------------------------------------------------------------------

    @invariant()
    def engine_matches_model(self):
        if not hasattr(self, "sp"):
            return
        sp = self.sp
        start_offset = sp.start_offset
        assert start_offset >= self.max_start_offset
        self.max_start_offset = start_offset
        seen = set()
        for o, view in sp.records():
            seen.add(o)
            assert (view.state, view.delivery_count, view.member_id, view.deadline_ms) == self.model[o].key(), o
        for o, rec in self.model.items():
            assert 0 <= rec.count <= self.limit
            if o < start_offset:
                assert rec.state.is_terminal or (rec.state is ACQUIRED and o < self.log_start), (o, rec.key())
            elif o not in seen:
                assert rec.key() == (AVAILABLE, 0, "", None), (o, rec.key())

    @invariant()
    def next_fetch_offset_and_deadline(self):
        if not hasattr(self, "sp"):
            return
        sp = self.sp
        layout = sp.batch_layout()
        fresh = not layout or sp.start_offset > layout[-1][1]
        available = [o for o in range(sp.start_offset, sp.end_offset + 1)
                     if o in self.model and self.model[o].state is AVAILABLE]
        if fresh:
            expected = sp.end_offset
        else:
            expected = available[0] if available else sp.end_offset + 1
        assert sp.next_fetch_offset() == expected
        assert sp.next_fetch_offset() >= self.log_start
        deadlines = [r.deadline for r in self.model.values() if r.state is ACQUIRED]
        assert sp.next_deadline_ms() == (min(deadlines) if deadlines else None)
        assert sp.in_flight_record_count() <= self.cap + MAX_BATCH_RECORDS - 1

    @invariant()
    def persisted_state_round_trips(self):
        if not hasattr(self, "sp"):
            return
        snapshot = self.sp.snapshot()
        restored = SharePartition.from_snapshot(snapshot, max_in_flight_records=self.cap,
                                                max_delivery_count=self.limit)
        assert restored.snapshot().state_batches == tuple(
            b for b in snapshot.state_batches if b.last_offset >= restored.start_offset)


SharePartitionMachine.TestCase.settings = settings(
    max_examples=250, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestSharePartitionModel = SharePartitionMachine.TestCase
