"""Lines ⇄ records of the console tools: Kafka's LineMessageReader and DefaultMessageFormatter rules,
and a round trip (a record printed with every field and read back is the same record)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.tools.common import EXIT_USAGE, ToolError
from sundial.tools.console import (
    FORMATTER_PROPERTIES,
    READER_PROPERTIES,
    LineError,
    LineReader,
    ParsedRecord,
    RecordFormatter,
    parse_properties,
    unescape,
)

NOW = 1_795_000_000_000


def reader(*props: str) -> LineReader:
    return LineReader(parse_properties(props, READER_PROPERTIES, "--property"))


def formatter(*props: str) -> RecordFormatter:
    return RecordFormatter(parse_properties(props, FORMATTER_PROPERTIES, "--property"))


def record(value=b"v", key=None, headers=(), timestamp=NOW, timestamp_type=0, partition=0, offset=0):
    return SimpleNamespace(value=value, key=key, headers=list(headers), timestamp=timestamp,
                           timestamp_type=timestamp_type, partition=partition, offset=offset)


# -- properties --------------------------------------------------------------------------------


def test_unknown_and_malformed_properties_are_usage_errors():
    with pytest.raises(ToolError) as info:
        parse_properties(["print.foo=true"], FORMATTER_PROPERTIES, "--property")
    assert info.value.exit_code == EXIT_USAGE and "print.foo" in str(info.value) and "print.key" in str(info.value)
    with pytest.raises(ToolError):
        parse_properties(["print.key"], FORMATTER_PROPERTIES, "--property")
    with pytest.raises(ToolError):
        formatter("print.key=yes")


def test_values_keep_equals_signs_and_commas_and_take_escapes():
    props = parse_properties(["key.separator=\\t=", "headers.separator=,"], FORMATTER_PROPERTIES, "--property")
    assert props["key.separator"] == "\t=" and props["headers.separator"] == ","
    assert unescape("a\\tb\\nc\\\\t\\x") == "a\tb\nc\\t\\x"


# -- the producer's reader (Kafka's LineMessageReader) ---------------------------------------------


def test_plain_line_is_the_value():
    assert reader().parse("hello\tworld", 1, now_ms=NOW) == ParsedRecord(value=b"hello\tworld")


def test_key_headers_and_value():
    r = reader("parse.key=true", "parse.headers=true").parse("h1:v1,h2:v:2\tk\tva\tlue", 1, now_ms=NOW)
    assert r == ParsedRecord(value=b"va\tlue", key=b"k", headers=[("h1", b"v1"), ("h2", b"v:2")])


def test_custom_separators_and_null_marker():
    r = reader("parse.key=true", "key.separator=::", "parse.headers=true", "headers.delimiter=|",
               "headers.separator=;", "headers.key.separator==", "null.marker=<null>")
    got = r.parse("a=1;b=<null>|<null>::v", 3, now_ms=NOW)
    assert got == ParsedRecord(value=b"v", key=None, headers=[("a", b"1"), ("b", None)])
    assert r.parse("<null>|k::<null>", 4, now_ms=NOW) == ParsedRecord(value=None, key=b"k")


def test_missing_separators_are_errors_naming_the_line_or_nulls_with_ignore_error():
    with pytest.raises(LineError, match="line 7: no key separator"):
        reader("parse.key=true").parse("novalue", 7, now_ms=NOW)
    with pytest.raises(LineError, match="line 2: no header key separator found in the pair 'x'"):
        reader("parse.headers=true").parse("x\tv", 2, now_ms=NOW)
    assert reader("parse.key=true", "ignore.error=true").parse("novalue", 1, now_ms=NOW) == \
        ParsedRecord(value=b"novalue")
    assert reader("parse.headers=true", "ignore.error=true").parse("x\tv", 1, now_ms=NOW).headers == [("x", None)]


def test_conflicting_separators_are_refused():
    for props in (["headers.delimiter=,"], ["headers.key.separator=,"], ["null.marker=\\t"]):
        with pytest.raises(ToolError):
            reader("parse.headers=true", *props)


def test_timestamps_in_every_form():
    r = reader("parse.timestamp=true")
    assert r.parse("1700000000000\tv", 1, now_ms=NOW).timestamp_ms == 1_700_000_000_000
    assert r.parse("CreateTime:1700000000001\tv", 1, now_ms=NOW).timestamp_ms == 1_700_000_000_001
    assert r.parse("LogAppendTime:5\tv", 1, now_ms=NOW).timestamp_ms == 5
    assert r.parse("2026-11-27T14:05:00Z\tv", 1, now_ms=NOW).timestamp_ms == 1_795_788_300_000
    assert r.parse("2026-11-27T15:05:00+01:00\tv", 1, now_ms=NOW).timestamp_ms == 1_795_788_300_000
    assert r.parse("2026-11-27T14:05\tv", 1, now_ms=NOW).timestamp_ms == 1_795_788_300_000   # no offset: UTC
    assert r.parse("now-15m\tv", 1, now_ms=NOW).timestamp_ms == NOW - 900_000
    assert r.parse("NO_TIMESTAMP\tv", 1, now_ms=NOW).timestamp_ms is None
    with pytest.raises(LineError, match="line 9: bad time 'soon'"):
        r.parse("soon\tv", 9, now_ms=NOW)


def test_bytes_that_are_not_utf8_pass_through():
    line = b"k\t\xff\xfe".decode("utf-8", "surrogateescape")
    assert reader("parse.key=true").parse(line, 1, now_ms=NOW) == ParsedRecord(value=b"\xff\xfe", key=b"k")


# -- the consumer's formatter (Kafka's DefaultMessageFormatter) ------------------------------------


def test_default_prints_the_value_only_and_null_as_null():
    assert formatter().format(record(b"v")) == b"v\n"
    assert formatter().format(record(None)) == b"null\n"


def test_every_field_in_kafkas_order():
    rec = record(b"val", key=b"k", headers=[("a", b"1"), ("b", None)], timestamp=123, timestamp_type=1,
                 partition=2, offset=9)
    f = formatter("print.timestamp=true", "print.key=true", "print.headers=true", "print.partition=true",
                  "print.offset=true")
    assert f.format(rec) == b"LogAppendTime:123\tPartition:2\tOffset:9\ta:1,b:null\tk\tval\n"
    assert f.format(record(b"v", timestamp=-1, timestamp_type=-1)) == \
        b"NO_TIMESTAMP\tPartition:0\tOffset:0\tNO_HEADERS\tnull\tv\n"


def test_separators_null_literal_and_no_value():
    f = formatter("print.key=true", "print.value=false", "key.separator=|", "line.separator=;", "null.literal=-")
    assert f.format(record(b"v", key=None)) == b"-;"
    f = formatter("print.key=true", "print.headers=true", "key.separator= | ", "headers.separator=&")
    assert f.format(record(b"v", key=b"k", headers=[("x", b"1"), ("y", b"2")])) == b"x:1&y:2 | k | v\n"
    assert formatter("print.value=false").format(record()) == b""


# -- round trip ------------------------------------------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\t\n\r,:"), max_size=12)
_bytes = _text.map(lambda s: s.encode())


@settings(max_examples=300, deadline=None)
@given(value=_bytes, key=st.one_of(st.none(), _bytes),
       headers=st.lists(st.tuples(_text.filter(lambda s: s != "null"), _bytes), max_size=4),
       timestamp=st.integers(0, 2**53), timestamp_type=st.sampled_from([0, 1]))
def test_printed_records_read_back_as_the_same_records(value, key, headers, timestamp, timestamp_type):
    """The consumer's output with timestamp, headers and key feeds the producer with parse.* (null.marker=null)."""
    if value == b"null" or key == b"null" or any(v == b"null" for _, v in headers):
        return                                  # the null marker itself stands for null
    out = formatter("print.timestamp=true", "print.headers=true", "print.key=true").format(
        record(value, key=key, headers=headers, timestamp=timestamp, timestamp_type=timestamp_type))
    line = out.decode()
    assert line.endswith("\n")
    back = reader("parse.timestamp=true", "parse.headers=true", "parse.key=true", "null.marker=null").parse(
        line[:-1], 1, now_ms=NOW)
    assert back == ParsedRecord(value=value, key=key, headers=list(headers), timestamp_ms=timestamp)
