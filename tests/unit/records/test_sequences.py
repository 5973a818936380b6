"""The producer-sequence wrap (Kafka ``DefaultRecordBatch``): 2^31 - 1 is followed by 0, both ways."""

from hypothesis import given
from hypothesis import strategies as st

from sundial.records.batch import decrement_sequence, last_sequence_of

INT32_MAX = 2**31 - 1
sequences = st.integers(0, INT32_MAX)
deltas = st.integers(0, INT32_MAX)


@given(sequences, deltas)
def test_last_sequence_counts_forward_with_the_wrap(base, delta):
    expected = base + delta if base + delta <= INT32_MAX else base + delta - INT32_MAX - 1
    assert last_sequence_of(base, delta) == expected
    assert decrement_sequence(expected, delta) == base


def test_no_sequence_stays_no_sequence():
    assert last_sequence_of(-1, 5) == -1
