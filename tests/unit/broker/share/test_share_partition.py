"""The share-partition engine against scenarios of Kafka 4.2's ``SharePartitionTest``.

Each test names the Kafka test it reproduces; the fetched record batches, limits and expected
answers are Kafka's (Kafka's ``memoryRecords(start, n)`` is ``batch(start, n)`` here, one log batch
of ``n`` records from offset ``start``). Time is a number: Kafka's timer advanced by
``ACQUISITION_LOCK_TIMEOUT_MS`` is a ``poll(now_ms)`` at the lock's deadline.
"""

from __future__ import annotations

import pytest

from sundial.broker.share.acknowledgement import AcknowledgementBatch
from sundial.broker.share.acquisition import AcquiredRecords, AcquireMode, FetchedBatch
from sundial.broker.share.errors import ShareError
from sundial.broker.share.partition import SharePartition
from sundial.broker.share.state_batch import RecordState, ShareStateSnapshot, StateBatch
from sundial.protocol.errors import ErrorCode

AVAILABLE, ACQUIRED = RecordState.AVAILABLE, RecordState.ACQUIRED
ACKNOWLEDGED, ARCHIVED = RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4

MEMBER = "member-1"
MEMBER_2 = "member-2"
MAX_DELIVERY_COUNT = 5
MAX_IN_FLIGHT_RECORDS = 200
LOCK_MS = 100
BATCH_SIZE = 500
MAX_FETCH_RECORDS = 2**31 - 1


def batch(start: int, count: int) -> FetchedBatch:
    return FetchedBatch(start, start + count - 1)


def new_partition(start_offset: int = 0, *, max_delivery_count: int = MAX_DELIVERY_COUNT,
                  max_in_flight_records: int = MAX_IN_FLIGHT_RECORDS) -> SharePartition:
    return SharePartition(start_offset, max_in_flight_records=max_in_flight_records,
                          max_delivery_count=max_delivery_count)


def restored(start_offset: int, *batches: tuple[int, int, RecordState, int],
             max_delivery_count: int = MAX_DELIVERY_COUNT) -> SharePartition:
    snapshot = ShareStateSnapshot(3, start_offset, tuple(StateBatch(*b) for b in batches))
    return SharePartition.from_snapshot(snapshot, max_in_flight_records=MAX_IN_FLIGHT_RECORDS,
                                        max_delivery_count=max_delivery_count)


def acquire(sp: SharePartition, *batches: FetchedBatch, member: str = MEMBER, max_records: int = MAX_FETCH_RECORDS,
            fetch_offset: int | None = None, batch_size: int = BATCH_SIZE, now_ms: int = 0,
            mode: AcquireMode = AcquireMode.BATCH_OPTIMIZED, aborted=(), expected_count: int | None = None):
    result = sp.acquire(member, batches, fetch_offset=batches[0].base_offset if fetch_offset is None else fetch_offset,
                        max_records=max_records, batch_size=batch_size, lock_duration_ms=LOCK_MS, now_ms=now_ms,
                        mode=mode, aborted=aborted)
    if expected_count is not None:
        assert result.count == expected_count
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in result.records]


def ack(sp: SharePartition, *batches: tuple, member: str = MEMBER, now_ms: int = 0):
    return sp.acknowledge(member, [AcknowledgementBatch(first, last, tuple(types)) for first, last, *types in batches],
                          now_ms=now_ms, lock_duration_ms=LOCK_MS)


def refused(sp: SharePartition, *batches: tuple, member: str = MEMBER) -> ErrorCode:
    with pytest.raises(ShareError) as caught:
        ack(sp, *batches, member=member)
    return caught.value.error_code


def states(sp: SharePartition, first: int, last: int):
    """offset → (state, delivery count, member) for ``first..last``."""
    out = {}
    for offset in range(first, last + 1):
        r = sp.record(offset)
        out[offset] = None if r is None else (r.state, r.delivery_count, r.member_id)
    return out


def singles(first: int, last: int, delivery_count: int):
    return [(o, o, delivery_count) for o in range(first, last + 1)]


# --- acquire ---------------------------------------------------------------------------------

def test_acquire_single_record():  # testAcquireSingleRecord
    sp = new_partition()
    assert acquire(sp, batch(0, 1), expected_count=1) == [(0, 0, 1)]
    assert sp.next_fetch_offset() == 1
    assert sp.batch_layout() == ((0, 0, False),)
    assert states(sp, 0, 0) == {0: (ACQUIRED, 1, MEMBER)}


def test_acquire_multiple_records_moves_the_start_offset_to_them():  # testAcquireMultipleRecords
    sp = new_partition()
    assert acquire(sp, batch(10, 5), fetch_offset=3, expected_count=5) == [(10, 14, 1)]
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (10, 14, 15)


def test_acquire_with_max_fetch_records_takes_whole_batches():  # testAcquireWithMaxFetchRecords
    sp = new_partition()
    assert acquire(sp, batch(0, 5), max_records=10, expected_count=5) == [(0, 4, 1)]
    # 0-24 in one batch: 0-4 are taken; the rest of the batch goes whole although above the limit.
    assert acquire(sp, batch(0, 25), max_records=10, expected_count=20) == [(5, 24, 1)]
    assert sp.next_fetch_offset() == 25
    assert sp.batch_layout() == ((0, 4, False), (5, 24, False))


def test_acquire_with_multiple_batches_and_max_fetch_records():  # testAcquireWithMultipleBatchesAndMaxFetchRecords
    sp = new_partition()
    got = acquire(sp, batch(10, 5), batch(15, 15), batch(30, 15), max_records=10, expected_count=20)
    assert got == [(10, 29, 1)]  # up to the end of the batch holding the 10th record; the third is left
    assert sp.next_fetch_offset() == 30
    assert sp.batch_layout() == ((10, 29, False),)


def test_acquire_splits_new_records_at_batch_boundaries_by_batch_size():  # createBatches
    sp = new_partition()
    got = acquire(sp, batch(0, 5), batch(5, 5), batch(10, 5), batch(15, 5), batch_size=10, expected_count=20)
    assert got == [(0, 9, 1), (10, 19, 1)]
    assert sp.batch_layout() == ((0, 9, False), (10, 19, False))


def test_acquire_same_batch_again_gets_nothing():  # testAcquireSameBatchAgain
    sp = new_partition()
    assert acquire(sp, batch(10, 5)) == [(10, 14, 1)]
    assert acquire(sp, batch(10, 5), expected_count=0) == []
    assert acquire(sp, batch(10, 2), expected_count=0) == []
    assert sp.next_fetch_offset() == 15
    assert sp.batch_layout() == ((10, 14, False),)  # no per-offset tracking for a failed subset


def test_acquire_overlap_and_new_batch():  # testAcquireMultipleRecordsWithOverlapAndNewBatch
    sp = new_partition()
    assert acquire(sp, batch(0, 5)) == [(0, 4, 1)]
    assert acquire(sp, batch(0, 10), expected_count=5) == [(5, 9, 1)]
    assert sp.next_fetch_offset() == 10
    assert len(sp.batch_layout()) == 2


# --- acknowledge -------------------------------------------------------------------------------

def test_acknowledge_whole_batch_empties_the_window():  # testAcknowledgeMultipleRecordBatch
    sp = new_partition()
    acquire(sp, batch(5, 10))
    change = ack(sp, (5, 14, ACCEPT))
    assert change.start_offset == 15
    assert change.state_batches == (StateBatch(5, 14, ACKNOWLEDGED, 1),)
    assert (sp.next_fetch_offset(), sp.start_offset, sp.batch_layout()) == (15, 15, ())


def test_partial_acknowledgement_with_gaps_splits_the_batch():  # testAcknowledgeMultipleRecordBatchWithGapOffsets
    sp = new_partition()
    assert acquire(sp, batch(5, 2)) == [(5, 6, 1)]
    # One log batch 10-18 whose offsets 15-17 were compacted away: acquired whole, reported as gaps.
    assert acquire(sp, FetchedBatch(10, 18), expected_count=9) == [(10, 18, 1)]
    ack(sp, (5, 6, RELEASE), (10, 18, RELEASE, RELEASE, RELEASE, RELEASE, RELEASE, GAP, GAP, GAP, ACCEPT))
    assert sp.next_fetch_offset() == 5
    assert sp.batch_layout() == ((5, 6, False), (10, 18, True))
    assert states(sp, 5, 6) == {5: (AVAILABLE, 1, ""), 6: (AVAILABLE, 1, "")}
    assert states(sp, 10, 18) == {
        **{o: (AVAILABLE, 1, "") for o in range(10, 15)},
        **{o: (ARCHIVED, 1, "") for o in range(15, 18)},
        18: (ACKNOWLEDGED, 1, ""),
    }


def test_acknowledge_out_of_range():  # testAcknowledgeOutOfRangeCachedData
    sp = new_partition()
    assert refused(sp, (0, 15, REJECT)) == ErrorCode.INVALID_RECORD_STATE
    acquire(sp, batch(5, 5))
    assert refused(sp, (20, 25, REJECT)) == ErrorCode.INVALID_REQUEST


def test_acknowledge_first_batch_past_range_then_ok_once_acquired():  # testAcknowledgeOutOfRangeCachedDataFirstBatch
    sp = new_partition()
    acquire(sp, batch(0, 5))
    acquire(sp, batch(20, 5))
    request = ((0, 10, ACCEPT), (20, 24, ACCEPT))
    assert refused(sp, *request) == ErrorCode.INVALID_REQUEST
    acquire(sp, batch(5, 6))
    ack(sp, *request)
    assert sp.start_offset == 25


def test_acknowledge_by_another_member_is_refused():  # testAcknowledgeWithAnotherMember
    sp = new_partition()
    acquire(sp, batch(5, 5))
    assert refused(sp, (5, 9, REJECT), member=MEMBER_2) == ErrorCode.INVALID_RECORD_STATE
    assert states(sp, 5, 5) == {5: (ACQUIRED, 1, MEMBER)}


def test_acknowledge_when_offset_not_acquired():  # testAcknowledgeWhenOffsetNotAcquired
    sp = new_partition()
    acquire(sp, batch(5, 5))
    ack(sp, (5, 9, RELEASE))
    assert refused(sp, (5, 9, ACCEPT)) == ErrorCode.INVALID_RECORD_STATE
    assert acquire(sp, batch(5, 5)) == [(5, 9, 2)]  # released records come back with delivery count 2
    ack(sp, (6, 8, REJECT))
    assert refused(sp, (6, 8, REJECT)) == ErrorCode.INVALID_RECORD_STATE


def acquired_in_three_batches() -> SharePartition:
    """A partition with offsets 5-19 acquired in three fetched batches of five (5-9, 10-14, 15-19)."""
    sp = new_partition()
    for start in (5, 10, 15):
        acquire(sp, batch(start, 5))
    return sp


def test_refused_acknowledgement_rolls_back_every_batch():  # testAcknowledgeRollbackWithFullBatchError
    sp = acquired_in_three_batches()
    code = refused(sp, (5, 9, RELEASE), (10, 14, ACCEPT), (15, 19, ACCEPT), (15, 19, ACCEPT))
    assert code == ErrorCode.INVALID_RECORD_STATE
    assert {s for s, _, _ in states(sp, 5, 19).values()} == {ACQUIRED}
    assert sp.start_offset == 5 and sp.next_fetch_offset() == 20


def test_refused_subset_acknowledgement_rolls_back():  # testAcknowledgeRollbackWithSubsetError
    sp = acquired_in_three_batches()
    code = refused(sp, (5, 9, RELEASE), (10, 14, ACCEPT), (15, 19, ACCEPT), (16, 19, ACCEPT))
    assert code == ErrorCode.INVALID_RECORD_STATE
    assert {s for s, _, _ in states(sp, 5, 19).values()} == {ACQUIRED}
    # The last batch was not split: it was not acquired any more when the subset reached it.
    assert sp.batch_layout() == ((5, 9, False), (10, 14, False), (15, 19, False))


def test_invalid_acknowledge_type_is_an_invalid_request():  # fetchAckTypeMapForBatch
    sp = new_partition()
    acquire(sp, batch(0, 5))
    assert refused(sp, (0, 4, 5)) == ErrorCode.INVALID_REQUEST
    assert refused(sp, (0, 4, ACCEPT, ACCEPT)) == ErrorCode.INVALID_REQUEST  # 2 types for 5 offsets


def test_released_record_is_reacquired_with_delivery_count_2():  # testAcquireReleasedRecord
    sp = new_partition()
    acquire(sp, batch(10, 5))
    ack(sp, (12, 13, RELEASE))
    assert sp.next_fetch_offset() == 12
    assert sp.batch_layout() == ((10, 14, True),)
    assert states(sp, 10, 14) == {10: (ACQUIRED, 1, MEMBER), 11: (ACQUIRED, 1, MEMBER), 12: (AVAILABLE, 1, ""),
                                  13: (AVAILABLE, 1, ""), 14: (ACQUIRED, 1, MEMBER)}
    assert acquire(sp, batch(10, 5), expected_count=2) == singles(12, 13, 2)
    assert sp.next_fetch_offset() == 15


def test_released_records_over_several_batches():  # testAcquireReleasedRecordMultipleBatches
    sp = new_partition()
    records1, records2, records3, records4 = batch(10, 5), batch(15, 5), batch(23, 5), batch(28, 5)
    for records in (records1, records2, records3, records4):
        acquire(sp, records)
    assert sp.next_fetch_offset() == 33
    ack(sp, (12, 30, RELEASE))
    assert sp.next_fetch_offset() == 12
    assert sp.batch_layout() == ((10, 14, True), (15, 19, False), (23, 27, False), (28, 32, True))
    assert acquire(sp, records1, expected_count=3) == singles(12, 14, 2)
    assert sp.next_fetch_offset() == 15
    assert acquire(sp, records3) == [(23, 27, 2)]  # acquired, but the next fetch stays at 15
    assert sp.next_fetch_offset() == 15
    assert acquire(sp, batch(17, 2), expected_count=2) == singles(17, 18, 2)
    assert sp.next_fetch_offset() == 15
    assert acquire(sp, batch(28, 1)) == [(28, 28, 2)]
    assert sp.next_fetch_offset() == 15
    assert acquire(sp, records2, expected_count=3) == [(15, 15, 2), (16, 16, 2), (19, 19, 2)]
    assert sp.next_fetch_offset() == 29


# --- acquisition locks -------------------------------------------------------------------------

def test_lock_expiry_makes_the_record_available():  # testAcquisitionLockForAcquiringSingleRecord
    sp = new_partition()
    acquire(sp, batch(0, 1), now_ms=1_000)
    assert sp.next_deadline_ms() == 1_000 + LOCK_MS
    assert sp.poll(1_000 + LOCK_MS - 1).expired_records == 0
    assert states(sp, 0, 0) == {0: (ACQUIRED, 1, MEMBER)}
    result = sp.poll(1_000 + LOCK_MS)
    assert result.expired_records == 1
    assert result.change.state_batches == (StateBatch(0, 0, AVAILABLE, 1),)
    assert states(sp, 0, 0) == {0: (AVAILABLE, 1, "")}
    assert sp.next_fetch_offset() == 0 and sp.next_deadline_ms() is None


def test_lock_expiry_of_a_subset_reacquired():  # testAcquisitionLockForAcquiringSubsetBatchAgain
    sp = new_partition()
    acquire(sp, batch(10, 8))
    sp.poll(LOCK_MS)
    assert states(sp, 10, 10) == {10: (AVAILABLE, 1, "")}
    assert acquire(sp, batch(12, 3), now_ms=LOCK_MS) == singles(12, 14, 2)
    assert sp.next_deadline_ms() == 2 * LOCK_MS
    assert [sp.record(o).deadline_ms for o in range(10, 18)] == [None, None] + [2 * LOCK_MS] * 3 + [None] * 3
    sp.poll(2 * LOCK_MS)
    expected = {o: (AVAILABLE, 2 if 12 <= o <= 14 else 1, "") for o in range(10, 18)}
    assert states(sp, 10, 17) == expected
    assert sp.next_fetch_offset() == 10


def test_lock_of_acknowledged_batches_is_cancelled():
    # testAcquisitionLockOnAcknowledgingMultipleRecordBatchWithGapOffsets
    sp = new_partition()
    acquire(sp, batch(1, 2))
    acquire(sp, batch(5, 2))
    acquire(sp, FetchedBatch(10, 18))
    ack(sp, (5, 18, ACCEPT))  # gap offsets 7-9 not mentioned: accepted as the client says
    assert sp.batch_layout() == ((1, 2, False), (5, 6, False), (10, 18, False))
    sp.poll(LOCK_MS)
    assert sp.next_fetch_offset() == 1
    assert states(sp, 1, 1)[1] == (AVAILABLE, 1, "")
    assert states(sp, 5, 5)[5] == (ACKNOWLEDGED, 1, "")
    assert states(sp, 18, 18)[18] == (ACKNOWLEDGED, 1, "")


def test_renew_restarts_the_lock():  # testRenewAcknowledgeWithPerOffsetAck
    sp = new_partition(max_delivery_count=2)
    acquire(sp, batch(0, 2), now_ms=0)
    change = ack(sp, (0, 1, RENEW, ACCEPT), now_ms=50)
    assert change.state_batches == (StateBatch(1, 1, ACKNOWLEDGED, 1),)  # a renewal persists nothing
    assert sp.record(0).deadline_ms == 50 + LOCK_MS
    assert sp.poll(LOCK_MS).expired_records == 0
    assert sp.poll(50 + LOCK_MS).expired_records == 1
    assert states(sp, 0, 0) == {0: (AVAILABLE, 1, "")}


def test_renew_after_expiry_is_refused():  # testRenewAcknowledgeAfterAcquisitionLockTimeout
    sp = new_partition()
    acquire(sp, batch(0, 1))
    sp.poll(LOCK_MS)
    assert refused(sp, (0, 0, RENEW)) == ErrorCode.INVALID_RECORD_STATE


# --- the delivery-count limit ------------------------------------------------------------------

def test_release_at_the_delivery_count_limit_archives():  # testMaxDeliveryCountLimitExceeded
    sp = new_partition(max_delivery_count=2)
    acquire(sp, batch(0, 10))
    ack(sp, (0, 9, RELEASE))
    assert acquire(sp, batch(0, 10)) == [(0, 9, 2)]
    change = ack(sp, (0, 9, RELEASE))
    assert change.state_batches == (StateBatch(0, 9, ARCHIVED, 2),)
    assert (sp.start_offset, sp.next_fetch_offset(), sp.batch_layout()) == (10, 10, ())


def test_lock_expiry_at_the_delivery_count_limit_archives():
    # testAcquisitionLockTimeoutCauseMaxDeliveryCountExceed
    sp = new_partition(max_delivery_count=2)
    acquire(sp, batch(0, 10), now_ms=0)
    sp.poll(LOCK_MS)
    assert acquire(sp, batch(0, 10), now_ms=LOCK_MS) == [(0, 9, 2)]
    result = sp.poll(2 * LOCK_MS)
    assert result.change.state_batches == (StateBatch(0, 9, ARCHIVED, 2),)
    assert (sp.start_offset, sp.batch_layout()) == (10, ())


def test_limit_archives_per_offset_and_the_start_offset_stops_at_the_first_live_record():
    # testMaxDeliveryCountLimitExceededForRecordsSubset
    sp = new_partition(max_delivery_count=2)
    acquire(sp, batch(10, 5))
    acquire(sp, batch(15, 5))
    ack(sp, (10, 12, RELEASE), (13, 16, ACCEPT), (17, 19, RELEASE))
    assert acquire(sp, batch(10, 5), expected_count=3) == singles(10, 12, 2)
    assert acquire(sp, batch(15, 5), expected_count=3) == singles(17, 19, 2)
    ack(sp, (10, 12, RELEASE))  # count 2 reached: archived
    assert sp.start_offset == 17 and sp.batch_layout() == ((15, 19, True),)


def test_records_delivered_often_go_out_in_halving_groups():
    # testAcquireRecordsHalvesBatchSizeOnEachFailureUntilSingleRecordOnLastAttempt (limit 7: throttle from 4)
    sp = restored(5, (15, 34, AVAILABLE, 4), max_delivery_count=7)
    records = batch(15, 20)
    assert acquire(sp, records, fetch_offset=5, max_records=500, expected_count=10) == singles(15, 24, 5)
    sp.poll(LOCK_MS)
    assert acquire(sp, records, fetch_offset=5, max_records=500, now_ms=LOCK_MS, expected_count=5) == singles(15, 19, 6)
    sp.poll(2 * LOCK_MS)
    for i in range(5):  # the last delivery of each record goes alone
        assert acquire(sp, records, fetch_offset=5, max_records=500, now_ms=2 * LOCK_MS) == [(15 + i, 15 + i, 7)]
    assert acquire(sp, records, fetch_offset=5, max_records=500, now_ms=2 * LOCK_MS) == singles(20, 24, 6)
    assert acquire(sp, records, fetch_offset=5, max_records=500, now_ms=2 * LOCK_MS) == singles(25, 34, 5)


def test_throttled_batch_is_left_for_a_later_fetch():  # testThrottleRecordsWhenPendingDeliveriesExist
    sp = restored(5, (15, 19, AVAILABLE, 2), (20, 22, ARCHIVED, 2), (26, 30, AVAILABLE, 3))
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (5, 30, 5)
    records = (batch(7, 13), batch(20, 8))
    got = acquire(sp, *records, fetch_offset=5, max_records=500, expected_count=16)
    assert got == [(7, 14, 1), (15, 19, 3), (23, 25, 1)]  # 26 (count 3) waits for a fetch of its own
    assert sp.next_fetch_offset() == 26
    assert sp.delivery_complete_count() == 3
    assert acquire(sp, *records, fetch_offset=26, max_records=500, expected_count=2) == singles(26, 27, 4)


# --- member departure --------------------------------------------------------------------------

def test_member_release_gives_back_its_records_with_one_delivery_less():  # testReleaseAcquiredRecordsBatch...
    sp = new_partition()
    acquire(sp, batch(5, 5), member=MEMBER)
    acquire(sp, batch(10, 5), member=MEMBER_2)
    change = sp.release_member(MEMBER, now_ms=10)
    assert change.state_batches == (StateBatch(5, 9, AVAILABLE, 0),)
    assert states(sp, 5, 5)[5] == (AVAILABLE, 0, "")
    assert states(sp, 10, 10)[10] == (ACQUIRED, 1, MEMBER_2)
    assert sp.next_fetch_offset() == 5
    assert acquire(sp, batch(5, 5), member=MEMBER_2) == [(5, 9, 1)]


def test_member_release_within_a_batch_shared_by_two_members():
    # Kafka stops at offset 12 (held by member-2) and leaves 13 to its lock; Sundial releases it.
    sp = new_partition()
    acquire(sp, batch(10, 5))
    ack(sp, (12, 12, RELEASE))
    acquire(sp, batch(10, 5), member=MEMBER_2)
    sp.release_member(MEMBER, now_ms=0)
    assert states(sp, 10, 14) == {10: (AVAILABLE, 0, ""), 11: (AVAILABLE, 0, ""), 12: (ACQUIRED, 2, MEMBER_2),
                                  13: (AVAILABLE, 0, ""), 14: (AVAILABLE, 0, "")}
    assert sp.next_deadline_ms() == LOCK_MS  # member-2's lock only


# --- in-flight cap -----------------------------------------------------------------------------

def test_in_flight_cap_is_met_at_batch_boundaries():  # testAcquireWithMaxInFlightRecords...
    sp = new_partition(max_in_flight_records=7)
    assert acquire(sp, batch(0, 5), batch(5, 5), batch(10, 5), expected_count=10) == [(0, 9, 1)]
    assert not sp.can_acquire_records()
    assert acquire(sp, batch(10, 5), expected_count=0) == []
    ack(sp, (2, 3, RELEASE))
    assert sp.can_acquire_records() and sp.next_fetch_offset() == 2
    # At the cap a fetch from inside the window takes what was released, nothing past the end.
    got = acquire(sp, batch(0, 5), batch(5, 5), batch(10, 5), fetch_offset=2, expected_count=2)
    assert got == singles(2, 3, 2)
    assert sp.end_offset == 9


# --- record-limit mode (ShareFetch v2, KIP-1206) -----------------------------------------------

def test_record_limit_mode_takes_exactly_the_limit():  # testAcquireSingleBatchInRecordLimitMode
    sp = new_partition()
    records = batch(0, 10)
    assert acquire(sp, records, max_records=5, batch_size=2, mode=AcquireMode.RECORD_LIMIT,
                   expected_count=5) == [(0, 4, 1)]
    assert sp.next_fetch_offset() == 5
    assert sp.batch_layout() == ((0, 9, True),)
    assert states(sp, 5, 5)[5] == (AVAILABLE, 0, "")
    got = acquire(sp, records, member=MEMBER_2, max_records=5, batch_size=2, mode=AcquireMode.RECORD_LIMIT,
                  expected_count=5)
    assert got == singles(5, 9, 1)
    assert sp.next_fetch_offset() == 10


def test_record_limit_mode_with_overlap_and_new_batch():
    # testAcquireMultipleRecordsWithOverlapAndNewBatchInRecordLimitMode
    sp = new_partition()
    assert acquire(sp, batch(0, 5), max_records=3, mode=AcquireMode.RECORD_LIMIT) == [(0, 2, 1)]
    assert sp.next_fetch_offset() == 3
    got = acquire(sp, batch(0, 10), max_records=3, mode=AcquireMode.RECORD_LIMIT, expected_count=3)
    assert got == singles(3, 5, 1)
    assert sp.next_fetch_offset() == 6
    assert sp.batch_layout() == ((0, 4, True), (5, 9, True))


def test_record_limit_mode_with_too_few_records_takes_the_whole_batch():
    # testAcquireWhenInsufficientRecordsInRecordLimitMode
    sp = new_partition()
    got = acquire(sp, batch(10, 5), batch(15, 5), batch(20, 5), max_records=20, batch_size=2,
                  mode=AcquireMode.RECORD_LIMIT, expected_count=15)
    assert got == [(10, 24, 1)]
    assert sp.batch_layout() == ((10, 24, False),)
    assert sp.next_deadline_ms() == LOCK_MS


# --- restart from persisted state --------------------------------------------------------------

def test_restore_from_persisted_state():  # testMaybeInitialize
    sp = restored(5, (5, 10, AVAILABLE, 2), (11, 15, ARCHIVED, 3))
    assert (sp.start_offset, sp.end_offset, sp.state_epoch, sp.next_fetch_offset()) == (5, 15, 3, 5)
    assert sp.batch_layout() == ((5, 10, False), (11, 15, False))
    assert states(sp, 5, 5)[5] == (AVAILABLE, 2, "")
    assert sp.delivery_complete_count() == 5


def test_restore_with_gaps_delivers_the_unmentioned_offsets_again():
    # testMaybeInitializeAndAcquireWithHigherMaxFetchRecords
    sp = restored(10, (15, 18, AVAILABLE, 2), (20, 22, ARCHIVED, 2), (26, 30, AVAILABLE, 1))
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (10, 30, 10)
    got = acquire(sp, batch(10, 40), fetch_offset=10, max_records=500, expected_count=37)
    assert got == [(10, 14, 1), (15, 18, 3), (19, 19, 1), (23, 25, 1), (26, 30, 2), (31, 49, 1)]
    assert (sp.next_fetch_offset(), sp.end_offset) == (50, 49)


def test_restore_with_gaps_and_a_record_limit_of_one():  # testMaybeInitializeAndAcquire
    sp = restored(10, (15, 18, AVAILABLE, 2), (20, 22, ARCHIVED, 2), (26, 30, AVAILABLE, 1))
    records = batch(10, 40)
    assert acquire(sp, records, fetch_offset=10, max_records=1, expected_count=5) == [(10, 14, 1)]
    assert sp.next_fetch_offset() == 15
    got = acquire(sp, records, fetch_offset=15, max_records=10, expected_count=13)
    assert got == [(15, 18, 3), (19, 19, 1), (23, 25, 1), (26, 30, 2)]
    assert sp.next_fetch_offset() == 31
    assert acquire(sp, records, fetch_offset=31, max_records=1, expected_count=19) == [(31, 49, 1)]


def test_restore_with_a_fetch_ending_inside_a_restored_batch():
    # testMaybeInitializeAndAcquireWithMultipleBatchesAndLastOffsetWithinCachedBatch
    sp = restored(5, (15, 18, AVAILABLE, 2), (20, 22, ARCHIVED, 2), (26, 30, AVAILABLE, 1))
    got = acquire(sp, batch(7, 2), batch(10, 2), batch(13, 6), batch(20, 8), fetch_offset=5, max_records=500,
                  expected_count=18)
    assert got == [(7, 14, 1), (15, 18, 3), (19, 19, 1), (23, 25, 1), (26, 26, 2), (27, 27, 2)]
    assert sp.next_fetch_offset() == 28


def test_snapshot_persists_acquired_records_as_they_were():
    sp = new_partition()
    acquire(sp, batch(0, 5))
    ack(sp, (0, 0, ACCEPT), (1, 1, RELEASE))
    acquire(sp, batch(0, 5))  # 1 again, count 2
    snapshot = sp.snapshot()
    assert snapshot == ShareStateSnapshot(0, 1, (StateBatch(1, 1, AVAILABLE, 1), StateBatch(2, 4, AVAILABLE, 0)))
    again = SharePartition.from_snapshot(snapshot, max_in_flight_records=200, max_delivery_count=5)
    assert again.snapshot() == snapshot
    # Restored batches are whole again: the fetch takes them as two ranges.
    assert acquire(again, batch(0, 5), fetch_offset=1) == [(1, 1, 2), (2, 4, 1)]


# --- read_committed and the log start offset ---------------------------------------------------

def test_aborted_transaction_records_are_archived_and_left_out():  # testAcquireWithReadCommitted...
    sp = new_partition()
    got = acquire(sp, batch(0, 5), batch(5, 3), batch(8, 2), aborted=[(5, 7)], expected_count=7)
    assert got == [(0, 4, 1), (8, 9, 1)]
    assert {states(sp, o, o)[o][0] for o in range(5, 8)} == {ARCHIVED}
    ack(sp, (0, 4, ACCEPT))
    assert sp.start_offset == 8


def test_aborted_records_at_the_front_advance_the_start_offset_at_once():
    sp = new_partition()
    assert acquire(sp, batch(0, 3), batch(3, 3), aborted=[(0, 2)], expected_count=3) == [(3, 5, 1)]
    assert sp.start_offset == 3  # Kafka would wait for the next acknowledgement or lock timeout


def test_log_start_movement_with_pending_acknowledgements():  # testLsoMovementWithPendingAcknowledgementsForBatches
    sp = new_partition(max_delivery_count=2)
    for start in (0, 5, 10, 15, 20):
        acquire(sp, batch(start, 5))
    ack(sp, (5, 9, ACCEPT), (15, 19, ACCEPT))
    sp.on_log_start_offset(12)
    assert (sp.next_fetch_offset(), sp.start_offset, sp.end_offset) == (25, 12, 24)
    sp.poll(LOCK_MS)
    assert (sp.next_fetch_offset(), sp.start_offset, sp.end_offset) == (12, 12, 24)
    assert states(sp, 12, 14) == {o: (AVAILABLE, 1, "") for o in range(12, 15)}
    assert sp.batch_layout()[2] == (10, 14, True)
    assert states(sp, 20, 20)[20] == (AVAILABLE, 1, "")


def test_log_start_past_acquired_records_never_moves_the_start_offset_back():
    sp = new_partition()
    acquire(sp, batch(0, 10))
    sp.on_log_start_offset(15)
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (15, 15, 15)
    sp.poll(LOCK_MS)  # the records before the log start are archived; Kafka would go back to 10
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset(), sp.batch_layout()) == (15, 15, 15, ())


def test_aborted_filter_leaves_other_members_records_alone():
    # Kafka archives every acquired record of the aborted batch, another member's included.
    sp = new_partition()
    acquire(sp, batch(0, 5))
    ack(sp, (2, 4, RELEASE))
    got = acquire(sp, batch(0, 5), member=MEMBER_2, fetch_offset=2, aborted=[(0, 4)], expected_count=0)
    assert got == []
    assert states(sp, 0, 4) == {0: (ACQUIRED, 1, MEMBER), 1: (ACQUIRED, 1, MEMBER), 2: (ARCHIVED, 2, ""),
                                3: (ARCHIVED, 2, ""), 4: (ARCHIVED, 2, "")}


def test_read_bound_drops_batches_from_the_bound():
    sp = new_partition()
    result = sp.acquire(MEMBER, [batch(0, 5), batch(5, 5)], fetch_offset=0, max_records=100, batch_size=500,
                        lock_duration_ms=LOCK_MS, now_ms=0, read_bound_offset=5)
    assert [(r.first_offset, r.last_offset) for r in result.records] == [(0, 4)]
    with pytest.raises(ValueError):
        sp.acquire(MEMBER, [batch(5, 5)], fetch_offset=5, max_records=100, batch_size=500,
                   lock_duration_ms=LOCK_MS, now_ms=0, read_bound_offset=7)


def test_fetch_starting_before_the_start_offset_inside_a_restored_batch():
    # Kafka misses the in-flight batch 1-4 (it starts before the SPSO 2) and acquires 0-4 again.
    sp = restored(1, (1, 4, AVAILABLE, 1))
    assert acquire(sp, batch(1, 1), max_records=1, fetch_offset=1) == [(1, 1, 2)]
    ack(sp, (1, 1, ACCEPT))
    assert sp.start_offset == 2
    got = acquire(sp, batch(0, 5), fetch_offset=2, expected_count=3)
    assert got == singles(2, 4, 2)
    assert sp.batch_layout() == ((1, 4, True),)


def test_member_release_archives_what_is_before_a_moved_log_start():
    sp = new_partition()
    acquire(sp, batch(0, 10))
    sp.on_log_start_offset(4)
    change = sp.release_member(MEMBER, now_ms=0)
    assert change.state_batches == (StateBatch(0, 3, ARCHIVED, 1), StateBatch(4, 9, AVAILABLE, 0))
    assert (sp.start_offset, sp.next_fetch_offset()) == (4, 4)
    assert sp.batch_layout() == ((0, 9, True),)


def test_acknowledgement_before_the_start_offset_is_skipped():
    sp = new_partition()
    acquire(sp, batch(0, 5))
    ack(sp, (0, 4, ACCEPT))
    assert ack(sp, (0, 4, REJECT)).state_batches == ()  # already done: nothing to refuse, nothing to do
    assert sp.start_offset == 5


def test_locks_of_several_acquisitions_expire_in_deadline_order():
    sp = new_partition()
    acquire(sp, batch(0, 2), now_ms=0)
    acquire(sp, batch(2, 2), member=MEMBER_2, now_ms=30)
    assert sp.next_deadline_ms() == LOCK_MS
    assert sp.poll(LOCK_MS).expired_records == 2
    assert sp.next_deadline_ms() == 30 + LOCK_MS
    assert states(sp, 2, 2)[2] == (ACQUIRED, 1, MEMBER_2)
    assert sp.poll(30 + LOCK_MS).change.state_batches == (StateBatch(2, 3, AVAILABLE, 1),)
    assert sp.next_deadline_ms() is None


def test_delivery_complete_count_and_in_flight_count():
    sp = new_partition()
    acquire(sp, batch(0, 10))
    ack(sp, (1, 2, ACCEPT), (5, 5, REJECT))
    assert sp.delivery_complete_count() == 3
    assert sp.in_flight_record_count() == 10
    ack(sp, (0, 0, ACCEPT))
    assert (sp.start_offset, sp.delivery_complete_count(), sp.in_flight_record_count()) == (3, 1, 7)


def test_fetched_batches_must_be_ordered():
    sp = new_partition()
    with pytest.raises(ValueError):
        acquire(sp, batch(5, 5), batch(0, 5))
    assert sp.acquire(MEMBER, [batch(0, 5)], fetch_offset=0, max_records=0, batch_size=10,
                      lock_duration_ms=LOCK_MS, now_ms=0).records == ()


def test_acquired_records_value():
    assert AcquiredRecords(3, 7, 1).record_count == 5
