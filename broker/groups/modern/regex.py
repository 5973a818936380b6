"""Topic subscriptions by regular expression, with RE2's syntax, on Python's ``re``.

Kafka resolves a member's ``SubscribedTopicRegex`` on the broker with RE2/J
(``com.google.re2j.Pattern``), and a topic matches when the whole name matches
(``matcher(name).matches()``: ``^topic`` does not match ``topic-1``, ``topic.*`` does).
Sundial translates the pattern from RE2 syntax to Python's ``re`` and matches with
``re.fullmatch``. :func:`compile_topic_regex` refuses what RE2 refuses, so a client gets
INVALID_REGULAR_EXPRESSION for the same patterns as from Kafka:

* lookarounds ``(?=`` ``(?!`` ``(?<=`` ``(?<!``, backreferences ``\\1`` ``(?P=name)``, atomic
  groups ``(?>``, conditionals ``(?(``, comments ``(?#``, possessive quantifiers ``a*+``;
* flags other than ``i``, ``m``, ``s``, ``U`` (so no ``(?x)``, ``(?a)``, ``(?u)``, ``(?L)``);
* escapes RE2 does not have: ``\\Z``, ``\\G``, ``\\e``, ``\\N{...}``, ``\\u``, ``\\U``, any other
  escaped letter, a lone ``\\1``..``\\9``;
* repetition counts above 1000.

What RE2 has and Python's ``re`` spells differently is translated: ``\\z`` (end of text),
``(?<name>...)`` (named group), ``\\Q...\\E`` (literal text), ``\\x{10FFFF}`` and octal escapes
(``\\0``, ``\\12``, ``\\123``), ``[[:alpha:]]`` POSIX classes, ``{,n}`` (a literal in RE2, a
quantifier in Python), and flags set in the middle of a group, ``a(?i)b|c``, which RE2 applies
to the rest of the group and Python only allows at the start of the whole pattern (they
become scoped groups, ``a(?i:b)|(?i:c)``). ``(?U)`` (ungreedy) is dropped: greediness never
changes whether a whole name matches.

Differences that remain, documented rather than hidden:

* Unicode classes ``\\pL``, ``\\p{Greek}``, ``\\PN`` and negated POSIX classes ``[[:^alpha:]]``
  are refused (Kafka accepts them). Topic names are ASCII (``[a-zA-Z0-9._-]``), so they can
  only ever be spelled otherwise.
* Matching is ASCII (``re.ASCII``): ``\\w``, ``\\d``, ``\\s``, ``\\b`` and case folding under
  ``(?i)`` know ASCII only, as RE2's ``\\w``/``\\d``/``\\s``/``\\b`` do; RE2 folds case with
  Unicode rules, which can only differ for non-ASCII pattern characters.
* Error messages carry Python's wording, not RE2/J's, after Kafka's prefix.
* RE2 runs in linear time; Python's ``re`` backtracks. Names are at most 249 characters,
  which bounds the cost of a pathological pattern per name.

An empty regex (``""``) subscribes to nothing and is never compiled: Kafka ignores it.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable

import structlog

from .group import ResolvedRegex

log = structlog.get_logger(__name__)

#: RE2's limit on a repetition count (``{n,m}`` with n or m above it is refused).
MAX_REPEAT = 1000

_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z", "alpha": "A-Za-z", "ascii": "\\x00-\\x7f", "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f", "digit": "0-9", "graph": "!-~", "lower": "a-z", "print": " -~",
    "punct": "!-/:-@\\[-`{-~", "space": "\\t\\n\\v\\f\\r ", "upper": "A-Z", "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
#: Escapes that mean the same in RE2 and in Python's ``re``.
_SAME_ESCAPES = set("dDsSwWbBAaftnrv")
_REPEAT = re.compile(r"\{(\d+)(,(\d*))?\}")
_FLAGS = re.compile(r"\(\?([imsU]*)(?:-([imsU]*))?([:)])")


class InvalidRegex(ValueError):
    """A pattern RE2 would refuse; ``description`` says why."""

    def __init__(self, pattern: str, description: str) -> None:
        super().__init__(f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {description}.")
        self.description = description


def compile_topic_regex(pattern: str) -> re.Pattern[str]:
    """The compiled pattern, or :class:`InvalidRegex`."""
    try:
        translated = _Translator(pattern).translate()
    except _Refused as e:
        raise InvalidRegex(pattern, str(e)) from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # "possible nested set": a literal '[' in RE2 too
            return re.compile(translated, re.ASCII)
    except (re.error, OverflowError, RecursionError) as e:
        raise InvalidRegex(pattern, getattr(e, "msg", str(e))) from None


def matching_topics(pattern: re.Pattern[str], topic_names: Iterable[str]) -> frozenset[str]:
    """The names the whole of which the pattern matches."""
    return frozenset(name for name in topic_names if pattern.fullmatch(name))


class _Refused(Exception):
    pass


class _Translator:
    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0
        self.out: list[str] = []
        # per open group: the flag scopes opened in it by a mid-group "(?flags)"
        self.scopes: list[list[str]] = [[]]

    def translate(self) -> str:
        p = self.p
        while self.i < len(p):
            c = p[self.i]
            if c == "\\":
                self.out.append(self._escape(in_class=False))
            elif c == "[":
                self._char_class()
            elif c == "(":
                self._open_group()
            elif c == ")":
                self._close_scopes()
                if len(self.scopes) > 1:
                    self.scopes.pop()
                self.out.append(")")
                self.i += 1
            elif c == "|":
                opened = self.scopes[-1]
                self.out.append(")" * len(opened) + "|" + "".join(opened))
                self.i += 1
            elif c == "{":
                self._brace()
            else:
                self.out.append(c)
                self.i += 1
                if c in "*+?":
                    self._after_quantifier()
        while len(self.scopes) > 1:     # unbalanced: Python reports it
            self._close_scopes()
            self.scopes.pop()
        self._close_scopes()
        return "".join(self.out)

    def _close_scopes(self) -> None:
        self.out.append(")" * len(self.scopes[-1]))
        self.scopes[-1] = []

    def _after_quantifier(self) -> None:
        p = self.p
        if self.i < len(p) and p[self.i] == "?":   # lazy
            self.out.append("?")
            self.i += 1
        if self.i < len(p) and p[self.i] == "+":
            raise _Refused("possessive quantifiers are not supported")

    def _brace(self) -> None:
        m = _REPEAT.match(self.p, self.i)
        if m is None:                   # not a repetition: a literal brace, in both
            self.out.append("\\{")
            self.i += 1
            return
        low, comma, high = m.group(1), m.group(2), m.group(3)
        if int(low) > MAX_REPEAT or (high and int(high) > MAX_REPEAT):
            raise _Refused(f"bad repetition operator: {m.group(0)}")
        if comma and high and int(high) < int(low):
            raise _Refused(f"bad repetition operator: {m.group(0)}")
        self.out.append(m.group(0))
        self.i = m.end()
        self._after_quantifier()

    def _open_group(self) -> None:
        p, i = self.p, self.i
        if not p.startswith("(?", i):
            self.out.append("(")
            self.scopes.append([])
            self.i += 1
            return
        rest = p[i + 2:i + 4]
        if rest.startswith(":"):
            self.out.append("(?:")
            self.scopes.append([])
            self.i += 3
        elif rest.startswith("P<") or (rest.startswith("<") and rest[1:2] not in ("=", "!")):
            start = i + (4 if rest.startswith("P<") else 3)
            end = p.find(">", start)
            if end < 0:
                raise _Refused("invalid named capture")
            self.out.append(f"(?P<{p[start:end]}>")
            self.scopes.append([])
            self.i = end + 1
        elif rest[:1] in ("=", "!") or rest in ("<=", "<!"):
            raise _Refused("lookaround assertions are not supported")
        elif rest.startswith("P="):
            raise _Refused("backreferences are not supported")
        else:
            self._flags()

    def _flags(self) -> None:
        m = _FLAGS.match(self.p, self.i)
        if m is None or (not m.group(1) and not m.group(2)) or m.group(2) == "":
            raise _Refused(f"invalid or unsupported Perl syntax: {self.p[self.i:self.i + 3]!r}")
        on, off = m.group(1).replace("U", ""), (m.group(2) or "").replace("U", "")
        spec = on + (f"-{off}" if off else "")
        self.i = m.end()
        if m.group(3) == ":":
            self.out.append(f"(?{spec}:" if spec else "(?:")
            self.scopes.append([])
        elif spec:                      # "(?i)": the rest of the enclosing group
            opener = f"(?{spec}:"
            self.out.append(opener)
            self.scopes[-1].append(opener)

    def _char_class(self) -> None:
        p = self.p
        self.out.append("[")
        self.i += 1
        if p.startswith("^", self.i):
            self.out.append("^")
            self.i += 1
        if p.startswith("]", self.i):   # a leading ']' is literal
            self.out.append("\\]")
            self.i += 1
        while self.i < len(p) and p[self.i] != "]":
            c = p[self.i]
            if c == "\\":
                self.out.append(self._escape(in_class=True))
            elif p.startswith("[:", self.i):
                end = p.find(":]", self.i + 2)
                if end < 0:
                    self.out.append("\\[")
                    self.i += 1
                    continue
                name = p[self.i + 2:end]
                if name.startswith("^") or name not in _POSIX_CLASSES:
                    raise _Refused(f"invalid or unsupported character class range: [:{name}:]")
                self.out.append(_POSIX_CLASSES[name])
                self.i = end + 2
            elif c in "[&~|":
                self.out.append("\\" + c)
                self.i += 1
            else:
                self.out.append(c)
                self.i += 1
        if self.i >= len(p):
            raise _Refused("missing closing ]")
        self.out.append("]")
        self.i += 1

    def _escape(self, in_class: bool) -> str:
        p, i = self.p, self.i
        if i + 1 >= len(p):
            raise _Refused("trailing backslash at end of expression")
        c = p[i + 1]
        self.i = i + 2
        if c in _SAME_ESCAPES and not (in_class and c in "bBA"):
            return "\\" + c
        if c == "z" and not in_class:
            return r"\Z"
        if c == "Q" and not in_class:
            end = p.find("\\E", self.i)
            literal = p[self.i:] if end < 0 else p[self.i:end]
            self.i = len(p) if end < 0 else end + 2
            return re.escape(literal)
        if c == "x":
            if p.startswith("{", self.i):
                end = p.find("}", self.i)
                digits = p[self.i + 1:end] if end > 0 else ""
                if not digits or not all(ch in "0123456789abcdefABCDEF" for ch in digits) or int(digits, 16) > 0x10FFFF:
                    raise _Refused("invalid escape sequence: \\x")
                self.i = end + 1
                return re.escape(chr(int(digits, 16)))
            digits = p[self.i:self.i + 2]
            if len(digits) < 2 or not all(ch in "0123456789abcdefABCDEF" for ch in digits):
                raise _Refused("invalid escape sequence: \\x")
            self.i += 2
            return re.escape(chr(int(digits, 16)))
        if c in "01234567":
            digits = c
            while len(digits) < 3 and self.i < len(p) and p[self.i] in "01234567":
                digits += p[self.i]
                self.i += 1
            if c != "0" and len(digits) == 1:
                raise _Refused(f"backreferences are not supported: \\{c}")
            return re.escape(chr(int(digits, 8)))
        if c.isascii() and c.isalnum():
            raise _Refused(f"invalid escape sequence: \\{c}")
        return re.escape(c)             # escaped punctuation (or any non-ASCII): itself


def resolve(regexes: Iterable[str], topic_names: Iterable[str], version: int, now_ms: int) -> dict[str, ResolvedRegex]:
    """Each regex with the topics it matches (Kafka ``refreshRegularExpressions``). A regex that
    does not compile (only possible for one replayed from a log, as members' regexes are checked
    when they subscribe) matches nothing, as in Kafka."""
    names = list(topic_names)
    resolved = {}
    for regex in regexes:
        try:
            topics = matching_topics(compile_topic_regex(regex), names)
        except InvalidRegex as e:
            log.error("consumer group regex does not compile; it matches no topic", regex=regex, reason=e.description)
            topics = frozenset()
        resolved[regex] = ResolvedRegex(topics, version, now_ms)
    return resolved
