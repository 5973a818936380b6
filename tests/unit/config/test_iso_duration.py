"""config/iso_duration.py reads what java.time.Duration.parse reads (share.auto.offset.reset=by_duration:...).

The oracle builds a duration from its parts, writes it in every spelling Java accepts (signs,
case, ``.`` or ``,``, 0-9 fraction digits) and computes the nanoseconds itself; refusals and the
64-bit second limits come from Java's documented grammar.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.config.iso_duration import DurationParseError, parse_duration_ns

LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
S = 10**9


@st.composite
def durations(draw):
    """(text, nanoseconds) of a duration Java accepts."""
    number = st.integers(-10**6, 10**6)
    days, hours, minutes, seconds = (draw(st.none() | number) for _ in range(4))
    if days is hours is minutes is seconds is None:
        seconds = draw(number)
    fraction = draw(st.none() | st.text("0123456789", max_size=9)) if seconds is not None else None
    lead = draw(st.sampled_from(["", "+", "-"]))

    def num(n: int) -> str:
        return ("+" if n >= 0 and draw(st.booleans()) else "") + str(n)

    text = lead + "P" + (num(days) + "D" if days is not None else "")
    sec_text = ""
    if hours is not None or minutes is not None or seconds is not None:
        text += "T" + (num(hours) + "H" if hours is not None else "") + (num(minutes) + "M" if minutes is not None else "")
        if seconds is not None:
            sec_text = "-0" if seconds == 0 and draw(st.booleans()) else num(seconds)
            text += sec_text + (draw(st.sampled_from(".,")) + fraction if fraction is not None else "") + "S"
    text = "".join(c.lower() if c.isalpha() and draw(st.booleans()) else c for c in text)
    total = ((days or 0) * 86400 + (hours or 0) * 3600 + (minutes or 0) * 60 + (seconds or 0)) * S
    if fraction:
        frac_ns = int(fraction.ljust(9, "0"))
        total += -frac_ns if sec_text.startswith("-") else frac_ns   # Java: the fraction takes the seconds' sign
    return text, -total if lead == "-" else total


@settings(max_examples=600, deadline=None)
@given(durations())
def test_every_java_spelling_gives_its_nanoseconds(case):
    text, ns = case
    assert parse_duration_ns(text) == ns, text


@pytest.mark.parametrize("text", [
    "", "P", "PT", "P1DT", "-P", "1D", "P1", "PT1", "P1H", "PT1D", "P1Y", "P1M", "P1W", "PT1.0000000001S",
    "PT1.5H", "P1.5D", "PT1S1M", "P 1D", " P1D", "P1D ", "PT+-1S", "PT1_000S", "P１D", "PT0x1S", "PT1SS",
])
def test_strings_java_refuses(text):
    with pytest.raises(DurationParseError):
        parse_duration_ns(text)


def test_the_64_bit_second_limits():
    assert parse_duration_ns(f"PT{LONG_MAX}S") == LONG_MAX * S
    assert parse_duration_ns(f"PT{LONG_MAX}.999999999S") == LONG_MAX * S + S - 1
    assert parse_duration_ns(f"PT{LONG_MIN}S") == LONG_MIN * S
    assert parse_duration_ns(f"P{LONG_MAX // 86400}D") == (LONG_MAX // 86400) * 86400 * S
    for text in (f"PT{LONG_MAX + 1}S", f"P{LONG_MAX // 86400 + 1}D", f"PT{LONG_MAX // 3600 + 1}H",
                 f"PT{LONG_MIN}.5S",                 # folding the negative half second overflows
                 f"-PT{LONG_MIN}S",                  # negating the smallest duration overflows
                 f"P{LONG_MAX // 86400}DT{LONG_MAX}S",   # the sum overflows
                 "PT" + "9" * 5000 + "S"):                # far beyond a long (and Python's digit limit)
        with pytest.raises(DurationParseError):
            parse_duration_ns(text)


def test_negative_seconds_carry_their_fraction():
    assert parse_duration_ns("PT-0.5S") == -S // 2
    assert parse_duration_ns("PT-1.5S") == -3 * S // 2
    assert parse_duration_ns("-PT-1.5S") == 3 * S // 2
    assert parse_duration_ns("PT1M-0.5S") == 60 * S - S // 2
    assert parse_duration_ns("P-1DT24H") == 0
    assert parse_duration_ns("PT" + "0" * 40 + "1S") == S       # leading zeros are not digits of size
