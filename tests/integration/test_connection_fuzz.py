"""The connection fuzzer's response checker (``connection_fuzz.StreamCheck``) and the finding it
once reported wrongly.

The finding (seed 4071558955, 240,000 frames): "response with correlation id 1024 answers
no pending request". Cause: after a frame whose size prefix lies, the fuzz client goes on
writing to the same connection; the broker frames the bytes that follow by Kafka's rule
(``[size int32][size bytes]``), so its requests are not the frames the client meant, and it
answers one whose correlation id the client never wrote. The checker registered the
client's frames, so the broker's correct answer looked like a stray response. The minimal
sequence, replayed below, is two writes: an ApiVersions v2 header cut to 7 bytes behind a
prefix of 13, then an honest 19-byte frame. The broker takes the first 6 bytes of the
second write to complete 13 bytes, reads correlation id ``00 00 04 00`` = 1024 from them
and answers ApiVersions; the rest (prefix ``0x00050000``) waits for bytes that never come.

The checker now frames the bytes sent as the broker does, so it checks order on every
stream, honest or not; the tests below also show it still rejects responses out of order
and requests passed over without an answer.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from sundial.protocol import encode_request

from . import connection_fuzz
from .connection_fuzz import Finding, StreamCheck

# The fuzzer's two writes (the first one's leading Produce frame is not needed to reproduce).
CUT_HEADER = bytes.fromhex("00120002000004")  # ApiVersions v2, correlation id cut after 3 of its 4 bytes
LYING = struct.pack(">i", 13) + CUT_HEADER  # prefix 13 for 7 bytes
HONEST_BODY = bytes.fromhex("0010000500000007000466757a7a0001010000")  # api 16 v5, correlation id 7
HONEST = struct.pack(">i", len(HONEST_BODY)) + HONEST_BODY


def framed(api_key: int, version: int, corr: int, body: dict) -> bytes:
    return encode_request(api_key, version, corr, "check", body)


def response(corr: int, payload: bytes = b"\0\0") -> bytes:
    return struct.pack(">ii", 4 + len(payload), corr) + payload


def produce(corr: int, acks: int) -> bytes:
    return framed(0, 8, corr, {"transactional_id": None, "acks": acks, "timeout_ms": 1000, "topic_data": []})


# -- the replayed finding -------------------------------------------------------------------------------
def test_the_minimal_sequence_is_answered_as_the_broker_frames_it():
    completed = CUT_HEADER + HONEST[:13 - len(CUT_HEADER)]  # the 13 bytes the broker takes as one frame
    expected_corr = struct.unpack_from(">i", completed, 4)[0]
    assert expected_corr == 1024
    intended = [struct.unpack_from(">i", HONEST_BODY, 4)[0]]  # the only correlation id the client wrote
    assert expected_corr not in intended

    check, findings = asyncio.run(connection_fuzz.replay([LYING, HONEST]))
    assert not findings, findings
    assert check.answered == [expected_corr], "the broker answers the frame it sees, not the one meant"
    assert check.requests == [(18, expected_corr)]


def test_a_prefix_shorter_than_its_frame_splits_it_and_both_parts_are_checked():
    first = framed(18, 0, 5, {})
    second = framed(18, 0, 9, {})
    # the client means one frame of len(first) - 4 + len(second) bytes behind the first frame's size
    # prefix (a checker that registered the frames meant would expect correlation id 5 only); the
    # broker sees two ApiVersions requests and answers both
    lying = first + second
    check, findings = asyncio.run(connection_fuzz.replay([lying]))
    assert not findings, findings
    assert check.requests == [(18, 5), (18, 9)]
    assert check.answered == [5, 9]


def test_an_honest_stream_is_answered_in_order_and_acks_0_produce_is_not_answered():
    pieces = [framed(18, 0, 1, {}), framed(3, 1, 2, {"topics": None}) + produce(3, acks=0),
              framed(18, 0, 4, {}) + produce(5, acks=1)]
    check, findings = asyncio.run(connection_fuzz.replay(pieces))
    assert not findings, findings
    assert check.answered == [1, 2, 4, 5]


# -- the checker alone ----------------------------------------------------------------------------------
def fed(check: StreamCheck, *corrs: int) -> StreamCheck:
    check.feed(b"".join(response(c) for c in corrs))
    return check


def honest(*frames: bytes) -> StreamCheck:
    check = StreamCheck()
    check.sent(b"".join(frames))
    return check


def A(corr: int) -> bytes:  # noqa: N802 - ApiVersions
    return framed(18, 0, corr, {})


def M(corr: int) -> bytes:  # noqa: N802 - Metadata
    return framed(3, 1, corr, {"topics": None})


def P0(corr: int) -> bytes:  # noqa: N802 - Produce acks=0 (never answered)
    return produce(corr, acks=0)


def test_checker_accepts_responses_in_order():
    fed(honest(A(1), M(2), A(3)), 1, 2, 3).finish()


@pytest.mark.parametrize("corrs", [(2, 1), (1, 3), (1, 2, 3, 3), (4,)],
                         ids=["swapped", "metadata-passed-over", "answered-twice", "never-sent"])
def test_checker_rejects_out_of_order_missing_or_stray_responses(corrs):
    with pytest.raises(Finding):
        fed(honest(A(1), M(2), A(3)), *corrs)


def test_checker_lets_only_a_produce_go_unanswered():
    fed(honest(A(1), P0(2), A(3)), 1, 3)
    with pytest.raises(Finding):
        fed(honest(A(1), M(2), A(3)), 1, 3)


def test_checker_keeps_every_reading_of_repeated_correlation_ids():
    # the response 7 may answer the Produce or the Metadata; only "the Produce went unanswered"
    # explains the 8 that follows, so a checker that took the first match would fail here
    fed(honest(P0(7), M(7), A(8)), 7, 8).finish()
    with pytest.raises(Finding):
        fed(honest(P0(7), M(7), A(8)), 7, 7, 7)


def test_checker_frames_what_was_sent_as_the_broker_does():
    check = StreamCheck()
    check.sent(LYING)
    assert check.requests == []  # 7 of 13 bytes: not a frame yet
    check.sent(HONEST)
    assert check.requests == [(18, 1024)]
    assert len(check.out) == len(LYING) + len(HONEST) - 4 - 13  # prefix 0x00050000 waits for its bytes

    check = honest(A(1))
    check.sent(struct.pack(">i", -1) + A(9))
    assert check.out_ended  # the broker closes at a negative prefix: nothing after it is a request
    check.sent(A(10))
    assert check.requests == [(18, 1)]


def test_checker_reassembles_responses_split_across_writes():
    check = honest(A(1), A(2))
    data = response(1) + response(2, b"x" * 40)
    for i in range(len(data)):
        check.feed(data[i:i + 1])
    check.finish()
    assert check.answered == [1, 2]
    check.feed(response(3)[:6])
    with pytest.raises(Finding):
        check.finish()
