"""Idempotent InitProducerId: the epoch bump of KIP-360 and its exhaustion rule, against
Kafka's numbers written out here (an int16 epoch; exhausted at 32766, then a new id at 0)."""

import asyncio
import itertools
from types import SimpleNamespace

import pytest

from sundial.broker.handlers.producer import handle_init_producer_id
from sundial.broker.txn.state import TransactionMetadata, is_epoch_exhausted
from sundial.protocol.errors import ErrorCode
from sundial.records.layout import MAX_PRODUCER_EPOCH

FRESH_ID = 1000


def _call(version: int, producer_id: int, producer_epoch: int) -> dict:
    ids = itertools.count(FRESH_ID)
    broker = SimpleNamespace(authorizer=None, producer_ids=SimpleNamespace(next_id=lambda: next(ids)))
    ctx = SimpleNamespace(broker=broker, api_version=version, client_id="t")
    request = SimpleNamespace(transactional_id=None, producer_id=producer_id, producer_epoch=producer_epoch)
    return asyncio.run(handle_init_producer_id(ctx, request))


def test_the_epoch_limit_is_kafkas_int16_maximum():
    assert MAX_PRODUCER_EPOCH == 2**15 - 1


@pytest.mark.parametrize("epoch, expected", [(0, (7, 1)), (32764, (7, 32765)), (32765, (7, 32766)),
                                             (32766, (FRESH_ID, 0)), (32767, (FRESH_ID, 0))])
def test_a_bump_gives_the_next_epoch_until_it_is_exhausted(epoch, expected):
    answer = _call(3, 7, epoch)
    assert answer["error_code"] == ErrorCode.NONE
    assert (answer["producer_id"], answer["producer_epoch"]) == expected


def test_before_v3_every_call_gets_a_fresh_id():
    answer = _call(2, 7, 5)
    assert (answer["producer_id"], answer["producer_epoch"]) == (FRESH_ID, 0)


def test_the_idempotent_and_transactional_paths_share_one_exhaustion_rule():
    for epoch in (0, 32765, 32766, 32767):
        bumped = _call(3, 7, epoch)["producer_id"] == 7
        assert bumped == (not is_epoch_exhausted(epoch)) == (epoch < 32766)
        md = TransactionMetadata.new("t", 7, 60_000, 0)
        md.producer_epoch = epoch
        assert md.is_producer_epoch_exhausted == (not bumped)
