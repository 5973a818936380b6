"""Lines ⇄ records for ``sundial console-producer`` and ``sundial console-consumer`` (pure: no I/O).

:class:`LineReader` reads a line as kafka-console-producer.sh's ``LineMessageReader`` does,
:class:`RecordFormatter` writes a record as kafka-console-consumer.sh's
``DefaultMessageFormatter`` does; both take Kafka's ``--property`` names and defaults
(:data:`READER_PROPERTIES`, :data:`FORMATTER_PROPERTIES`). An unknown property is refused
with the list of known ones, never ignored.

What Sundial adds, all off by default so Kafka's formats are unchanged:

* ``parse.timestamp=true`` (reader): each line starts with the record's timestamp and
  ``timestamp.separator`` (default tab): ms since the epoch, ISO-8601 (no offset = UTC),
  ``now-DURATION``, also in the consumer's ``print.timestamp`` form ``CreateTime:MS`` /
  ``LogAppendTime:MS``; ``NO_TIMESTAMP`` leaves it to the producer's clock;
* the reader takes the consumer's ``NO_HEADERS`` as "no headers", so the consumer's output
  with ``print.timestamp``, ``print.headers`` and ``print.key`` feeds the producer with
  ``parse.timestamp``, ``parse.headers`` and ``parse.key`` (set ``null.marker=null`` to carry
  null keys and values, which the consumer prints as ``null.literal``, ``null``);
* separators given on the command line may be written with the escapes ``\\t``, ``\\n``,
  ``\\r`` and ``\\\\`` (Kafka takes them literally; a separator of a backslash and a ``t`` is
  never what an operator means).

``headers.separator`` is a regular expression for the reader, as in Kafka (``,`` by default).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from .common import EXIT_USAGE, ToolError
from .timeparse import TimeFormatError, parse_datetime_ms

#: Reader properties (console-producer ``--property``) and their defaults.
READER_PROPERTIES = {
    "parse.key": "false",
    "key.separator": "\t",
    "parse.headers": "false",
    "headers.delimiter": "\t",
    "headers.separator": ",",
    "headers.key.separator": ":",
    "ignore.error": "false",
    "null.marker": None,
    "parse.timestamp": "false",          # Sundial
    "timestamp.separator": "\t",         # Sundial
}

#: Formatter properties (console-consumer ``--property``) and their defaults.
FORMATTER_PROPERTIES = {
    "print.timestamp": "false",
    "print.key": "false",
    "print.value": "true",
    "print.partition": "false",
    "print.offset": "false",
    "print.headers": "false",
    "key.separator": "\t",
    "line.separator": "\n",
    "headers.separator": ",",
    "null.literal": "null",
}

#: Timestamp types as the consumer prints them (``ConsumerRecord.timestamp_type``: 0, 1).
TIMESTAMP_TYPE_NAMES = {0: "CreateTime", 1: "LogAppendTime"}
NO_TIMESTAMP = "NO_TIMESTAMP"
NO_HEADERS = "NO_HEADERS"

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}


def unescape(text: str) -> str:
    """``\\t``, ``\\n``, ``\\r`` and ``\\\\`` → the character; any other backslash stays as it is."""
    return re.sub(r"\\([tnr\\])", lambda m: _ESCAPES[m.group(1)], text)


def parse_properties(items: Iterable[str] | None, known: Mapping[str, str | None], flag: str) -> dict:
    """``["KEY=VALUE", ...]`` (one per ``--property``) → the full set with defaults; a usage error otherwise."""
    result = dict(known)
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ToolError(f"{flag} {item!r}: use KEY=VALUE, e.g. {flag} print.key=true", EXIT_USAGE)
        if key not in known:
            raise ToolError(f"{flag} {key!r} is not a property of this tool; known: {', '.join(sorted(known))}",
                            EXIT_USAGE)
        result[key] = unescape(value)
    return result


def _flag(props: Mapping, key: str, what: str) -> bool:
    value = (props[key] or "").strip().lower()
    if value not in ("true", "false"):
        raise ToolError(f"{what} {key}={props[key]!r}: use true or false", EXIT_USAGE)
    return value == "true"


def _separator(props: Mapping, key: str, what: str) -> str:
    value = props[key]
    if not value:
        raise ToolError(f"{what} {key} is empty; give a separator, e.g. {key}=:", EXIT_USAGE)
    return value


# -- the producer's side ------------------------------------------------------------------------


class LineError(ValueError):
    """A line the reader cannot turn into a record (message names the line number)."""


@dataclass
class ParsedRecord:
    """A record read from a line: key and value None for null; headers as (key, value) pairs."""

    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp_ms: int | None = None


def _bytes(text: str) -> bytes:
    # surrogateescape: bytes of the input that are not UTF-8 come back unchanged
    return text.encode("utf-8", "surrogateescape")


class LineReader:
    """One line of input → a :class:`ParsedRecord`, with Kafka's ``LineMessageReader`` rules.

    Layout: ``[TIMESTAMP timestamp.separator][HEADERS headers.delimiter][KEY key.separator]VALUE``,
    each part present only when its ``parse.*`` property is true. Headers are
    ``k:v`` pairs split by ``headers.separator`` (a regular expression). A key, value or header
    value equal to ``null.marker`` is null; a header key may not be. Without
    ``ignore.error`` a missing separator is an error; with it the part is null (a header pair
    without its separator becomes a header with a null value), as in Kafka.
    """

    def __init__(self, props: Mapping[str, str | None], *, what: str = "--property") -> None:
        self.parse_key = _flag(props, "parse.key", what)
        self.parse_headers = _flag(props, "parse.headers", what)
        self.parse_timestamp = _flag(props, "parse.timestamp", what)
        self.ignore_error = _flag(props, "ignore.error", what)
        self.key_separator = _separator(props, "key.separator", what)
        self.headers_delimiter = _separator(props, "headers.delimiter", what)
        self.headers_separator = _separator(props, "headers.separator", what)
        self.headers_key_separator = _separator(props, "headers.key.separator", what)
        self.timestamp_separator = _separator(props, "timestamp.separator", what)
        self.null_marker = props["null.marker"]
        for a, b in (("headers.delimiter", "headers.separator"), ("headers.delimiter", "headers.key.separator"),
                     ("headers.separator", "headers.key.separator")):
            if props[a] == props[b]:
                raise ToolError(f"{what} {a} and {b} may not be equal", EXIT_USAGE)
        for other in ("key.separator", "headers.separator", "headers.delimiter", "headers.key.separator"):
            if self.null_marker is not None and props[other] == self.null_marker:
                raise ToolError(f"{what} null.marker and {other} may not be equal", EXIT_USAGE)
        try:
            self._headers_split = re.compile(self.headers_separator)
        except re.error as exc:
            raise ToolError(f"{what} headers.separator={self.headers_separator!r} is not a regular expression "
                            f"({exc})", EXIT_USAGE) from None

    def _part(self, enabled: bool, line: str, start: int, separator: str, name: str, number: int) -> str | None:
        if not enabled:
            return None
        index = line.find(separator, start)
        if index < 0:
            if self.ignore_error:
                return None
            raise LineError(f"line {number}: no {name} found in {line!r}")
        return line[start:index]

    def _null_or_bytes(self, text: str) -> bytes | None:
        return None if text == self.null_marker else _bytes(text)

    def parse(self, line: str, number: int, *, now_ms: int) -> ParsedRecord:
        """``line`` without its line terminator; ``number`` counts from 1 (for messages)."""
        pos = 0
        timestamp_ms = None
        stamp = self._part(self.parse_timestamp, line, pos, self.timestamp_separator, "timestamp separator", number)
        if stamp is not None:
            pos += len(stamp) + len(self.timestamp_separator)
            timestamp_ms = self._timestamp(stamp, number, now_ms)
        headers_text = self._part(self.parse_headers, line, pos, self.headers_delimiter, "headers delimiter", number)
        if headers_text is not None:
            pos += len(headers_text) + len(self.headers_delimiter)
        key_text = self._part(self.parse_key, line, pos, self.key_separator, "key separator", number)
        if key_text is not None:
            pos += len(key_text) + len(self.key_separator)
        record = ParsedRecord(value=self._null_or_bytes(line[pos:]), timestamp_ms=timestamp_ms)
        if key_text is not None:
            record.key = self._null_or_bytes(key_text)
        if headers_text is not None and headers_text != self.null_marker and headers_text != NO_HEADERS:
            record.headers = [self._header(pair, number) for pair in self._headers_split.split(headers_text)]
        return record

    def _header(self, pair: str, number: int) -> tuple[str, bytes | None]:
        index = pair.find(self.headers_key_separator)
        if index < 0:
            if self.ignore_error:
                return pair, None
            raise LineError(f"line {number}: no header key separator found in the pair {pair!r}")
        key = pair[:index]
        if key == self.null_marker:
            raise LineError(f"line {number}: a header key may not be the null marker {self.null_marker!r}")
        return key, self._null_or_bytes(pair[index + len(self.headers_key_separator):])

    def _timestamp(self, text: str, number: int, now_ms: int) -> int | None:
        stripped = text.strip()
        if stripped == NO_TIMESTAMP:
            return None
        for name in TIMESTAMP_TYPE_NAMES.values():
            if stripped.startswith(name + ":"):
                stripped = stripped[len(name) + 1:]
                break
        try:
            return parse_datetime_ms(stripped, now_ms=now_ms)
        except TimeFormatError as exc:
            raise LineError(f"line {number}: {exc}") from None


# -- the consumer's side ------------------------------------------------------------------------


class RecordFormatter:
    """A consumed record → bytes, in ``DefaultMessageFormatter``'s layout.

    Fields in this order, each only when its ``print.*`` property is true, separated by
    ``key.separator`` and ended by ``line.separator``: ``CreateTime:MS`` (or
    ``LogAppendTime:MS``, ``NO_TIMESTAMP``), ``Partition:N``, ``Offset:N``, the headers
    (``k:v`` joined by ``headers.separator``, ``NO_HEADERS`` when there are none), the key, the
    value. A null key, value or header value prints as ``null.literal``. Keys, values and
    header values are written as their raw bytes.
    """

    def __init__(self, props: Mapping[str, str | None], *, what: str = "--property") -> None:
        self.fields = [name for name in ("timestamp", "partition", "offset", "headers", "key", "value")
                       if _flag(props, f"print.{name}", what)]
        self.key_separator = _bytes(props["key.separator"] or "")
        self.line_separator = _bytes(props["line.separator"] or "")
        self.headers_separator = _bytes(props["headers.separator"] or "")
        self.null_literal = _bytes(props["null.literal"] or "")

    def _or_null(self, data: bytes | None) -> bytes:
        return self.null_literal if data is None else bytes(data)

    def _field(self, name: str, record) -> bytes:
        if name == "timestamp":
            kind = TIMESTAMP_TYPE_NAMES.get(getattr(record, "timestamp_type", None))
            if kind is None or record.timestamp is None or record.timestamp < 0:
                return NO_TIMESTAMP.encode()
            return f"{kind}:{record.timestamp}".encode()
        if name == "partition":
            return f"Partition:{record.partition}".encode()
        if name == "offset":
            return f"Offset:{record.offset}".encode()
        if name == "headers":
            headers = list(record.headers or ())
            if not headers:
                return NO_HEADERS.encode()
            return self.headers_separator.join(_bytes(k) + b":" + self._or_null(v) for k, v in headers)
        if name == "key":
            return self._or_null(record.key)
        return self._or_null(record.value)

    def format(self, record) -> bytes:
        """``record`` has Kafka's consumer-record fields (kafka-python's ``ConsumerRecord``)."""
        if not self.fields:
            return b""
        return self.key_separator.join(self._field(name, record) for name in self.fields) + self.line_separator
