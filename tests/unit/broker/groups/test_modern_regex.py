"""Subscriptions by regular expression: RE2 syntax on Python's re, full match, resolution, refresh
(Kafka's testConsumerHeartbeatRegexValidation, testConsumerGroupMemberJoinsWithNewRegex,
testConsumerGroupMemberPicksUpExistingResolvedRegularExpression, ...)."""

from __future__ import annotations

import pytest

from support.modern_support import Harness
from sundial.broker.groups.modern import record_helpers as rec
from sundial.broker.groups.modern.group import ResolvedRegex
from sundial.broker.groups.modern.records import ConsumerGroupMetadataKey, ConsumerGroupRegularExpressionKey
from sundial.broker.groups.modern.regex import InvalidRegex, compile_topic_regex
from sundial.broker.groups.modern.settings import ConsumerGroupSettings
from sundial.protocol.errors import ErrorCode as E

NAMES = ["foo", "foo-1", "food", "bar", "Foo", "a.b", "a{,2}", "topic_9"]


@pytest.mark.parametrize("pattern,matches", [
    ("foo.*", {"foo", "foo-1", "food"}),
    ("fo", set()),                                 # whole name only
    ("^foo$", {"foo"}),
    ("(?i)foo", {"foo", "Foo"}),
    ("x|(?i)foo", {"foo", "Foo"}),
    ("f(?i)OO", {"foo"}),                           # a mid-pattern flag applies to the rest
    ("\\Qa.b\\E", {"a.b"}),
    ("a{,2}", {"a{,2}"}),                           # a literal in RE2
    ("[[:alpha:]]+", {"foo", "food", "bar", "Foo"}),
    ("(?P<x>foo)|(?<y>bar)", {"foo", "bar"}),
    ("topic_\\d", {"topic_9"}),
    ("foo\\z", {"foo"}),
    ("\\x{66}oo", {"foo"}),
    ("\\146oo", {"foo"}),                           # octal
])
def test_re2_patterns_match_whole_names(pattern, matches):
    compiled = compile_topic_regex(pattern)
    assert {n for n in NAMES if compiled.fullmatch(n)} == matches


@pytest.mark.parametrize("pattern", [
    "[", "(", "a)", "(?=foo)", "(?!foo)", "(?<=a)b", "(?<!a)b", "(a)\\1", "(?P<a>x)(?P=a)", "(?>a)", "a*+", "a++",
    "a{2}+", "a{1001}", "(?x)a", "(?a)a", "\\Z", "\\pL", "\\p{Greek}", "\\e", "\\N{DIGIT ONE}", "\\u0041",
    "(?#comment)", "[[:^alpha:]]", "(?(1)a|b)", "\\", "a**",
])
def test_what_re2_refuses_is_refused(pattern):
    with pytest.raises(InvalidRegex):
        compile_topic_regex(pattern)


def test_regex_validation_on_heartbeat():
    h = Harness({"foo": 2})
    e = h.refused(E.INVALID_REGULAR_EXPRESSION, h.join, "g", "m1", None, regex="[")
    assert e.message == "SubscribedTopicRegex `[` is not a valid regular expression: missing closing ]."
    assert h.join("g", "m1", None, regex=".*").member_epoch == 1
    h.refused(E.INVALID_REGULAR_EXPRESSION, h.hb, "g", "m1", 1, subscribed_topic_regex="(?=x)", owned={"foo": [0, 1]})
    r = h.hb("g", "m1", 1, subscribed_topic_names=["foo"], subscribed_topic_regex="", owned={"foo": [0, 1]})
    assert r.member_epoch == 2


def test_join_with_a_new_regex_resolves_it_at_once():
    h = Harness({"foo": 2, "food": 1, "bar": 3})
    r = h.join("g", "m1", None, regex="foo.*")
    assert r.member_epoch == 1 and h.named(r.assignment) == {"foo": {0, 1}, "food": {0}}
    regex_records = [x for x in h.last_records if isinstance(x.key, ConsumerGroupRegularExpressionKey)]
    assert regex_records == [rec.regular_expression("g", "foo.*", ResolvedRegex(frozenset({"foo", "food"}), 0, 0))]
    assert h.manager.subscribed_topics("g") == {"foo", "food"}
    assert h.manager.groups_subscribed_to("food") == {"g"}


def test_second_member_with_the_same_regex_uses_its_resolution():
    h = Harness({"foo": 2, "bar": 3})
    h.join("g", "m1", None, regex="foo")
    r = h.join("g", "m2", None, regex="foo")
    assert r.member_epoch == 2
    assert not [x for x in h.last_records if isinstance(x.key, ConsumerGroupRegularExpressionKey)]


def test_names_and_regex_together_subscribe_to_the_union():
    h = Harness({"foo": 2, "bar": 1})
    r = h.join("g", "m1", ["bar"], regex="fo+")
    assert h.named(r.assignment) == {"foo": {0, 1}, "bar": {0}}


def test_empty_regex_subscribes_to_nothing_and_is_never_resolved():
    h = Harness({"foo": 2})
    r = h.join("g", "m1", None, regex="")
    assert r.member_epoch == 1 and h.named(r.assignment) == {}
    assert not [x for x in h.log if isinstance(x.key, ConsumerGroupRegularExpressionKey)]


def test_topic_created_later_is_picked_up_by_the_regex():
    h = Harness({"foo": 2})
    h.join("g", "m1", None, regex="foo.*")
    records = h.create_topic("foo-new", 3)
    assert [type(r.key) for r in records] == [ConsumerGroupRegularExpressionKey, ConsumerGroupMetadataKey]
    assert records[0].value.topics == ("foo", "foo-new")
    r = h.hb("g", "m1", 1, owned={"foo": [0, 1]})
    assert r.member_epoch == 2 and h.named(r.assignment) == {"foo": {0, 1}, "foo-new": {0, 1, 2}}
    records = h.delete_topic("foo")
    assert records[0].value.topics == ("foo-new",)
    r = h.hb("g", "m1", 2, owned={"foo-new": [0, 1, 2]})
    assert h.named(r.assignment) == {"foo-new": {0, 1, 2}}
    assert h.replayed().persisted_state() == h.manager.persisted_state()


def test_changing_or_dropping_the_regex_deletes_the_unused_resolution():
    h = Harness({"foo": 2, "bar": 1})
    h.join("g", "m1", None, regex="foo")
    h.hb("g", "m1", 1, subscribed_topic_regex="bar", owned={"foo": [0, 1]})
    keys = [(type(x.key), x.value is None) for x in h.last_records if isinstance(x.key, ConsumerGroupRegularExpressionKey)]
    assert keys == [(ConsumerGroupRegularExpressionKey, True), (ConsumerGroupRegularExpressionKey, False)]
    assert set(h.manager.group("g").resolved_regexes) == {"bar"}
    h.hb("g", "m1", -1)
    assert h.last_records[3] == rec.regular_expression_tombstone("g", "bar")
    assert h.manager.group("g").resolved_regexes == {}
    assert h.replayed().persisted_state() == h.manager.persisted_state()


def test_regexes_are_refreshed_every_interval():
    h = Harness({"foo": 2}, settings=ConsumerGroupSettings(regex_refresh_interval_ms=60_000), session_ms=10**9)
    h.join("g", "m1", None, regex="foo.*")
    assert h.manager.next_deadline_ms() == 60_000
    h.topics["foo-quiet"] = (h.id("foo-quiet"), 1)      # created without telling the manager
    assert h.advance(59_999) == []
    records = h.advance(1)
    assert [type(r.key) for r in records] == [ConsumerGroupRegularExpressionKey, ConsumerGroupMetadataKey]
    assert records[0].value.timestamp_ms == 60_000 and records[0].value.topics == ("foo", "foo-quiet")
    assert h.manager.next_deadline_ms() == 120_000
    records = h.advance(60_000)                          # nothing moved: rewritten, no new epoch
    assert [type(r.key) for r in records] == [ConsumerGroupRegularExpressionKey]
    assert h.replayed().persisted_state() == h.manager.persisted_state()
