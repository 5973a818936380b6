"""Times and durations as operators type them, for ``--time``, ``--to-datetime``,
``--by-duration``, ``--safety`` and ``--at``.

Points in time (:func:`parse_time_spec`, :func:`parse_datetime_ms`):

* milliseconds since the Unix epoch: ``1700000000000``;
* ISO-8601: ``2026-11-22T06:00:00Z``, ``2026-11-22T07:00:00.250+01:00``,
  ``2026-11-22 06:00``, ``2026-11-22``. **A time without an offset is UTC**, not the
  local zone (Kafka's tools read it as local time; a tool that runs on servers in
  several zones should not change meaning with ``TZ``);
* ``now`` and ``now-DURATION`` (``now-15m``);
* for ``--time`` only, Kafka's special values: ``earliest`` (-2), ``latest`` (-1),
  ``max-timestamp`` (-3), also given as those negative numbers.

Durations (:func:`parse_duration_ms`): ISO-8601 ``PnDTnHnMn.nS`` (``PT15M``,
``P1DT2H``; Java's ``Duration.parse``, which Kafka's ``--by-duration`` uses), or
shorthand units ``ms``, ``s``, ``m``, ``h``, ``d``, ``w`` alone or combined
(``900s``, ``15m``, ``2h``, ``1h30m``), or a bare number of milliseconds. Durations
are never negative.

Errors raise :class:`TimeFormatError` (a ``ValueError``) with a message that says what
was expected; the tools print it as one line.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timezone
from typing import NamedTuple

from sundial.records.timestamps import EARLIEST_TIMESTAMP as EARLIEST
from sundial.records.timestamps import LATEST_TIMESTAMP as LATEST
from sundial.records.timestamps import MAX_TIMESTAMP

SPECIAL_NAMES = {"latest": LATEST, "earliest": EARLIEST, "max-timestamp": MAX_TIMESTAMP}
SPECIAL_LABELS = {v: k for k, v in SPECIAL_NAMES.items()}

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_SHORTHAND = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_ISO_DURATION = re.compile(
    r"P(?:(?P<w>\d+(?:\.\d+)?)W)?(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE)

#: Largest timestamp Kafka accepts on the wire (int64).
MAX_MS = (1 << 63) - 1

TIME_HELP = ("ms since epoch, ISO-8601 (no offset = UTC), now, now-DURATION, "
             "earliest, latest or max-timestamp")
DATETIME_HELP = "ms since epoch, ISO-8601 (e.g. 2026-11-22T06:00:00Z; no offset = UTC), now or now-DURATION"
DURATION_HELP = "a duration: 15m, 900s, 2h, 1h30m, 500ms, PT15M, P1DT2H"


class TimeFormatError(ValueError):
    """A time or duration argument that cannot be read."""


class TimeSpec(NamedTuple):
    """What to look up: ``timestamp_ms`` >= 0, or a special value (-1, -2, -3)."""

    value: int

    @property
    def is_special(self) -> bool:
        return self.value < 0

    @property
    def label(self) -> str:
        return SPECIAL_LABELS.get(self.value, str(self.value))


def parse_duration_ms(text: str) -> int:
    """A non-negative duration in milliseconds (see module doc for the forms)."""
    s = (text or "").strip()
    if not s:
        raise TimeFormatError("empty duration; use e.g. 15m, 900s, 2h or PT15M")
    if s.startswith("-"):
        raise TimeFormatError(f"duration {text!r} is negative; give a positive duration such as 15m")
    if re.fullmatch(r"\d+", s):
        return int(s)
    upper = s.upper()
    if upper.startswith("P"):
        m = _ISO_DURATION.fullmatch(upper)
        if m and upper not in ("P", "PT") and not upper.endswith("T"):
            total = 0.0
            for key, unit in (("w", "w"), ("d", "d"), ("h", "h"), ("m", "m"), ("s", "s")):
                if m.group(key):
                    total += float(m.group(key)) * _UNIT_MS[unit]
            return int(round(total))
        raise TimeFormatError(f"bad ISO-8601 duration {text!r}; use e.g. PT15M, PT1H30M or P1DT2H")
    pos = 0
    total = 0.0
    lowered = s.lower()
    for m in _SHORTHAND.finditer(lowered):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_MS[m.group(2)]
        pos = m.end()
    if pos != len(lowered) or pos == 0:
        raise TimeFormatError(f"bad duration {text!r}; use e.g. 15m, 900s, 2h, 1h30m, 500ms or PT15M")
    return int(round(total))


def _parse_iso_ms(s: str) -> int:
    text = s.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            d = date.fromisoformat(text)
            dt = datetime(d.year, d.month, d.day, tzinfo=timezone.utc)
        else:
            dt = datetime.fromisoformat(text)
    except ValueError:
        raise TimeFormatError(
            f"bad time {s!r}; use ms since epoch or ISO-8601 such as 2026-11-22T06:00:00Z "
            f"or 2026-11-22T07:00:00.500+01:00") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    delta = dt - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def parse_datetime_ms(text: str, *, now_ms: int) -> int:
    """A point in time in ms since the epoch (>= 0): epoch ms, ISO-8601, ``now``, ``now-DURATION``."""
    s = (text or "").strip()
    if not s:
        raise TimeFormatError("empty time; use ms since epoch or ISO-8601 such as 2026-11-22T06:00:00Z")
    low = s.lower()
    if low == "now":
        return now_ms
    if low.startswith("now-"):
        return max(now_ms - parse_duration_ms(s[4:]), 0)
    if re.fullmatch(r"-?\d+", s):
        value = int(s)
        if value < 0:
            raise TimeFormatError(f"time {s} is negative; give ms since epoch or an ISO-8601 time")
        if value > MAX_MS:
            raise TimeFormatError(f"time {s} does not fit in a signed 64-bit integer")
        return value
    ms = _parse_iso_ms(s)
    if ms < 0:
        raise TimeFormatError(f"time {s!r} is before 1970-01-01T00:00:00Z")
    return ms


def parse_time_spec(text: str, *, now_ms: int) -> TimeSpec:
    """``--time`` of get-offsets: a point in time or ``earliest``/``latest``/``max-timestamp``
    (also -2/-1/-3 as in Kafka's ``kafka-get-offsets.sh``)."""
    s = (text or "").strip().lower()
    if s in SPECIAL_NAMES:
        return TimeSpec(SPECIAL_NAMES[s])
    if s in ("-1", "-2", "-3"):
        return TimeSpec(int(s))
    if re.fullmatch(r"-\d+", s):
        raise TimeFormatError(
            f"unsupported special time {s}; use -1 (latest), -2 (earliest), -3 (max-timestamp) or a time >= 0")
    return TimeSpec(parse_datetime_ms(text, now_ms=now_ms))


def format_ms(timestamp_ms: int | None) -> str:
    """ISO-8601 UTC with milliseconds, or ``-`` for a missing/negative timestamp."""
    if timestamp_ms is None or timestamp_ms < 0:
        return "-"
    try:
        dt = datetime.fromtimestamp(timestamp_ms / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return str(timestamp_ms)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{timestamp_ms % 1000:03d}Z"


def format_duration_ms(ms: int | None) -> str:
    """Short human form of a duration (``1h02m03s``, ``850ms``), ``-`` for None."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms}ms"
    seconds, _ = divmod(ms, 1000)
    days, seconds = divmod(seconds, 86_400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    parts = []
    if days:
        parts.append(f"{days}d")
    if hours or (days and (minutes or seconds)):
        parts.append(f"{hours:02d}h" if parts else f"{hours}h")
    if minutes or (parts and seconds):
        parts.append(f"{minutes:02d}m" if parts else f"{minutes}m")
    if seconds or not parts:
        parts.append(f"{seconds:02d}s" if parts else f"{seconds}s")
    return "".join(parts)
