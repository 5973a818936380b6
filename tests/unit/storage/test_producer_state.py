"""ProducerStateManager: Kafka's idempotence checks, duplicates, expiry and snapshots."""

import os
import struct

import pytest
from crc32c import crc32c

from sundial.storage import files
from sundial.storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from sundial.storage.producer_state import (
    CorruptSnapshotError,
    DuplicateBatch,
    ProducerStateManager,
    decrement_sequence,
)
from sundial.storage.validator import BatchInfo

INT32_MAX = 2**31 - 1


def info(pid, epoch, first_seq, count, first_offset, ts=1000):
    last_seq = (first_seq + count - 1) % (1 << 31)
    return BatchInfo(pid, epoch, first_seq, last_seq, first_offset, first_offset + count - 1, count, False, ts)


def appended(psm, *batches):
    assert psm.check(batches) is None
    psm.update(batches)


@pytest.fixture
def psm(tmp_path):
    return ProducerStateManager(str(tmp_path), producer_id_expiration_ms=60_000)


def test_unknown_producer_accepted_at_any_sequence(psm):
    appended(psm, info(1, 0, 17, 3, 0))
    assert psm.producers[1].last_seq == 19


def test_in_sequence_and_out_of_order(psm):
    appended(psm, info(1, 0, 0, 3, 0))
    appended(psm, info(1, 0, 3, 2, 3))
    with pytest.raises(OutOfOrderSequenceError):
        psm.check([info(1, 0, 6, 1, 5)])
    with pytest.raises(OutOfOrderSequenceError):
        psm.check([info(1, 0, 4, 1, 5)])


def test_sequence_wraps_at_int32_max(psm):
    appended(psm, info(1, 0, INT32_MAX - 1, 2, 0))
    assert psm.producers[1].last_seq == INT32_MAX
    appended(psm, info(1, 0, 0, 1, 2))


def test_stale_epoch_rejected(psm):
    appended(psm, info(1, 5, 0, 1, 0))
    with pytest.raises(InvalidProducerEpochError):
        psm.check([info(1, 4, 1, 1, 1)])


def test_new_epoch_must_start_at_zero(psm):
    appended(psm, info(1, 5, 0, 1, 0))
    with pytest.raises(OutOfOrderSequenceError):
        psm.check([info(1, 6, 3, 1, 1)])
    appended(psm, info(1, 6, 0, 1, 1))
    assert psm.producers[1].producer_epoch == 6 and len(psm.producers[1].batches) == 1


def test_duplicate_of_last_five_batches(psm):
    for i in range(7):
        appended(psm, info(1, 0, i * 2, 2, i * 2))
    # batches 2..6 are retained (first sequences 4..12)
    dup = psm.check([info(1, 0, 4, 2, 999)])
    assert dup == DuplicateBatch(4, 5, 1000)
    assert psm.check([info(1, 0, 12, 2, 999)]) == DuplicateBatch(12, 13, 1000)
    with pytest.raises(OutOfOrderSequenceError):
        psm.check([info(1, 0, 2, 2, 999)])  # older than the retained five: out of order
    # the same sequences under a newer epoch are not a duplicate (and a new epoch starts at 0)
    with pytest.raises(OutOfOrderSequenceError):
        psm.check([info(1, 1, 4, 2, 999)])


def test_several_batches_of_one_producer_in_one_append(psm):
    appended(psm, info(1, 0, 0, 1, 0), info(1, 0, 1, 1, 1))
    with pytest.raises(OutOfOrderSequenceError):
        psm.check([info(1, 0, 2, 1, 2), info(1, 0, 4, 1, 3)])


def test_expiry_uses_last_batch_timestamp(psm):
    appended(psm, info(1, 0, 0, 1, 0, ts=1000))
    appended(psm, info(2, 0, 0, 1, 1, ts=50_000))
    assert psm.remove_expired(61_000) == 1
    assert set(psm.producers) == {2}


def test_truncate_head_forgets_producers_below_log_start(psm):
    appended(psm, info(1, 0, 0, 1, 0))
    appended(psm, info(2, 0, 0, 1, 10))
    psm.truncate_head(5)
    assert set(psm.producers) == {2}


def test_snapshot_round_trip_and_kafka_layout(psm, tmp_path):
    appended(psm, info(7, 3, 10, 4, 100, ts=1234))
    path = psm.take_snapshot(104)
    assert os.path.basename(path) == "00000000000000000104.snapshot"
    raw = open(path, "rb").read()
    version, crc = struct.unpack_from(">hI", raw, 0)
    assert version == 1 and crc == crc32c(raw[6:])
    count = struct.unpack_from(">i", raw, 6)[0]
    assert count == 1
    assert struct.unpack_from(">qhiqiqiq", raw, 10) == (7, 3, 13, 103, 3, 1234, -1, -1)
    other = ProducerStateManager(str(tmp_path), 60_000)
    assert other.load_latest_snapshot(200, now_ms=2000) == 104
    e = other.producers[7]
    assert (e.producer_epoch, e.last_seq, e.batches[-1].first_seq, e.batches[-1].first_offset) == (3, 13, 10, 100)
    assert other.check([info(7, 3, 10, 4, 500)]) == DuplicateBatch(100, 103, 1234)


def test_snapshots_above_limit_and_corrupt_ones_are_dropped(psm, tmp_path):
    appended(psm, info(1, 0, 0, 1, 0))
    psm.take_snapshot(1)
    appended(psm, info(1, 0, 1, 1, 1))
    psm.take_snapshot(2)
    psm.take_snapshot(9)
    with open(files.snapshot_file(str(tmp_path), 2), "r+b") as fh:
        fh.seek(12)
        fh.write(b"\xff")
    other = ProducerStateManager(str(tmp_path), 60_000)
    assert other.load_latest_snapshot(5, now_ms=None) == 1
    assert other.snapshot_offsets() == [1]


def test_decode_rejects_garbage():
    with pytest.raises(CorruptSnapshotError):
        ProducerStateManager.decode_snapshot(b"\x00\x01")
    with pytest.raises(CorruptSnapshotError):
        ProducerStateManager.decode_snapshot(struct.pack(">hIi", 2, 0, 0))


def test_decrement_sequence():
    assert decrement_sequence(10, 3) == 7
    assert decrement_sequence(1, 3) == INT32_MAX - 1
