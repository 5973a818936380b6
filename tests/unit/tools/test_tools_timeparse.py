"""Times and durations of the tools: every accepted form against datetime's own arithmetic."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.tools.timeparse import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    TimeFormatError,
    format_duration_ms,
    format_ms,
    parse_datetime_ms,
    parse_duration_ms,
    parse_time_spec,
)

NOW = 1_795_000_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def epoch_ms(dt: datetime) -> int:
    return (dt - EPOCH) // timedelta(milliseconds=1)


@pytest.mark.parametrize("text, expected", [
    ("15m", 900_000), ("900s", 900_000), ("2h", 7_200_000), ("500ms", 500), ("1d", 86_400_000),
    ("1w", 604_800_000), ("1h30m", 5_400_000), ("1H30M", 5_400_000), ("1.5s", 1500), ("0s", 0),
    ("PT15M", 900_000), ("pt15m", 900_000), ("PT1H30M", 5_400_000), ("P1DT2H", 93_600_000), ("P2D", 172_800_000),
    ("PT0.25S", 250), ("P1W", 604_800_000), ("1234", 1234), (" 15m ", 900_000),
])
def test_durations(text, expected):
    assert parse_duration_ms(text) == expected


@pytest.mark.parametrize("text", ["", "m", "15", "-15m", "15 m", "15x", "1h-30m", "P", "PT", "P1DT", "PT15", "m15",
                                  "15mm", "1.2.3s", "-PT15M"])
def test_bad_durations(text):
    if text == "15":          # a bare number is milliseconds, not an error
        assert parse_duration_ms(text) == 15
        return
    with pytest.raises(TimeFormatError):
        parse_duration_ms(text)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 60), st.integers(0, 23), st.integers(0, 59), st.integers(0, 59), st.integers(0, 999))
def test_duration_forms_agree(days, hours, minutes, seconds, millis):
    expected = (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000 + millis
    short = f"{days}d{hours}h{minutes}m{seconds}s{millis}ms"
    iso = f"P{days}DT{hours}H{minutes}M{seconds}.{millis:03d}S"
    assert parse_duration_ms(short) == expected
    assert parse_duration_ms(iso) == expected


@settings(max_examples=200, deadline=None)
@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1)),
       st.integers(-14 * 60, 14 * 60))
def test_iso_times_agree_with_datetime(naive, offset_minutes):
    naive = naive.replace(microsecond=naive.microsecond // 1000 * 1000)
    tz = timezone(timedelta(minutes=offset_minutes))
    aware = naive.replace(tzinfo=tz)
    assert parse_datetime_ms(aware.isoformat(), now_ms=NOW) == epoch_ms(aware)
    # A time without an offset is UTC (documented choice; Kafka's tools use the local zone).
    assert parse_datetime_ms(naive.isoformat(), now_ms=NOW) == epoch_ms(naive.replace(tzinfo=timezone.utc))
    # format_ms is the inverse for UTC.
    ms = epoch_ms(aware)
    assert parse_datetime_ms(format_ms(ms), now_ms=NOW) == ms


@pytest.mark.parametrize("text, expected", [
    ("2026-11-22T06:00:00Z", epoch_ms(datetime(2026, 11, 22, 6, tzinfo=timezone.utc))),
    ("2026-11-22T07:00:00.250+01:00", epoch_ms(datetime(2026, 11, 22, 6, 0, 0, 250_000, tzinfo=timezone.utc))),
    ("2026-11-22 06:00", epoch_ms(datetime(2026, 11, 22, 6, tzinfo=timezone.utc))),
    ("2026-11-22", epoch_ms(datetime(2026, 11, 22, tzinfo=timezone.utc))),
    ("1700000000000", 1_700_000_000_000),
    ("0", 0),
    ("now", NOW),
    ("NOW-15m", NOW - 900_000),
    ("now-PT1H", NOW - 3_600_000),
])
def test_points_in_time(text, expected):
    assert parse_datetime_ms(text, now_ms=NOW) == expected


@pytest.mark.parametrize("text", ["", "yesterday", "-5", "2026-13-01", "2026-11-22T25:00", "now-", "now-x",
                                  "1969-12-31T23:59:59Z", "99999999999999999999"])
def test_bad_points_in_time(text):
    with pytest.raises(TimeFormatError) as info:
        parse_datetime_ms(text, now_ms=NOW)
    assert str(info.value)            # a message the tool prints as its one error line
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text, value", [
    ("earliest", EARLIEST), ("latest", LATEST), ("max-timestamp", MAX_TIMESTAMP), ("LATEST", LATEST),
    ("-1", LATEST), ("-2", EARLIEST), ("-3", MAX_TIMESTAMP), ("1700000000000", 1_700_000_000_000),
    ("now-1h", NOW - 3_600_000),
])
def test_time_specs(text, value):
    spec = parse_time_spec(text, now_ms=NOW)
    assert spec.value == value
    assert spec.is_special == (value < 0)


def test_unsupported_special_time():
    with pytest.raises(TimeFormatError, match="unsupported special time -4"):
        parse_time_spec("-4", now_ms=NOW)


def test_formatting():
    assert format_ms(0) == "1970-01-01T00:00:00.000Z"
    assert format_ms(-1) == "-"
    assert format_ms(None) == "-"
    assert format_duration_ms(850) == "850ms"
    assert format_duration_ms(900_000) == "15m"
    assert format_duration_ms(3_723_000) == "1h02m03s"
    assert format_duration_ms(86_400_000 + 5000) == "1d00h00m05s"
    assert format_duration_ms(None) == "-"
