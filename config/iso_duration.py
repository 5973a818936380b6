"""ISO-8601 durations as Java's ``java.time.Duration.parse`` reads them (``PnDTnHnMn.nS``).

Kafka validates ``share.auto.offset.reset=by_duration:<duration>`` (and the consumers'
``auto.offset.reset=by_duration:...``) with ``Duration.parse``, so Sundial accepts exactly the
strings Java accepts and no others:

* ``[+-]P`` then optional days ``nD``, then optionally ``T`` followed by at least one of hours
  ``nH``, minutes ``nM``, seconds ``n[.fffffffff]S`` (``.`` or ``,`` as decimal mark, at most nine
  fraction digits); letters in either case; each number may carry its own sign;
* at least one of the four parts; a ``T`` with nothing after it is refused; years, months and
  weeks are not durations for Java and are refused;
* every number and every intermediate sum must fit Java's ``long`` seconds, as in Java
  (``Math.multiplyExact`` / ``addExact``): overflow is a parse error, not a wrap-around;
* a negative seconds part makes its fraction negative too (``PT-0.5S`` is minus half a second).

The result is a whole number of nanoseconds (Python integers do not overflow).
"""

from __future__ import annotations

import re

LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1
NANOS_PER_SECOND = 1_000_000_000

_PATTERN = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE | re.ASCII)


class DurationParseError(ValueError):
    """The text is not a duration ``java.time.Duration.parse`` accepts."""


def _exact(value: int) -> int:
    if not LONG_MIN <= value <= LONG_MAX:
        raise DurationParseError("overflow")
    return value


def parse_duration_ns(text: str) -> int:
    """Nanoseconds of an ISO-8601 duration (see the module doc); raises :class:`DurationParseError`."""
    m = _PATTERN.fullmatch(text)
    if m is None or (m.group(3) is not None and len(m.group(3)) == 1):   # "T" with no time part
        raise DurationParseError(f"{text!r} is not an ISO-8601 duration (PnDTnHnMn.nS)")
    sign, days, _t, hours, minutes, seconds, fraction = m.groups()
    if days is None and hours is None and minutes is None and seconds is None:
        raise DurationParseError(f"{text!r} is not an ISO-8601 duration (PnDTnHnMn.nS)")
    try:
        def part(number: str | None, unit_s: int) -> int:
            if number is None:
                return 0
            if len(number.lstrip("+-").lstrip("0")) > 19:      # beyond any long (and int()'s digit limit)
                raise DurationParseError("overflow")
            return _exact(_exact(int(number, 10)) * unit_s)

        secs = _exact(part(days, 86_400) + _exact(part(hours, 3600) + _exact(part(minutes, 60) + part(seconds, 1))))
        nanos = int(((fraction or "") + "000000000")[:9])
        if seconds is not None and seconds.startswith("-"):
            nanos = -nanos
        # Duration.ofSeconds(secs, nanos): the nanos fold into the seconds, which must still fit a long
        secs = _exact(secs + nanos // NANOS_PER_SECOND)
        total = secs * NANOS_PER_SECOND + nanos % NANOS_PER_SECOND
        if sign == "-":
            total = -total
            if not LONG_MIN * NANOS_PER_SECOND <= total <= LONG_MAX * NANOS_PER_SECOND + NANOS_PER_SECOND - 1:
                raise DurationParseError("overflow")
    except DurationParseError:
        raise DurationParseError(f"{text!r} cannot be parsed to a duration: overflow") from None
    return total


__all__ = ["parse_duration_ns", "DurationParseError", "NANOS_PER_SECOND"]
