"""Declaring a setting: Kafka's dotted name, its type, default, validator and doc.

A :class:`ConfigDef` is pure data. Parsing follows Kafka's ``ConfigDef.Type``
rules: LONG/INT accept decimal integers (range-checked), BOOLEAN accepts
``true``/``false`` in any case, LIST is comma separated with surrounding
whitespace removed, STRING is kept verbatim. A bad value raises
:class:`ConfigError`, which the broker turns into ``INVALID_CONFIG`` (40) at the
wire boundary or into a clear start-up message for ``server.properties``.

Topic-level settings may name *broker synonyms*: broker-level keys from which
the topic default is taken when the topic does not override it. The first
synonym that is set wins, after unit conversion (``log.retention.hours`` is
multiplied by 3,600,000 to give ``retention.ms``), exactly as Kafka's
``ServerTopicConfigSynonyms`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Callable, Iterable

LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
INT_MAX = 2**31 - 1
INT_MIN = -(2**31)

HOURS_TO_MS = 3_600_000
MINUTES_TO_MS = 60_000


class ConfigError(ValueError):
    """A setting has a bad value, or a combination of settings is refused.

    ``name`` is the dotted key at fault; the message says what was wrong in
    words a user can act on.
    """

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


class ConfigType(str, Enum):
    """Kafka's ``ConfigDef.Type`` names, as DescribeConfigs v3+ reports them."""

    BOOLEAN = "BOOLEAN"
    STRING = "STRING"
    INT = "INT"
    SHORT = "SHORT"
    LONG = "LONG"
    DOUBLE = "DOUBLE"
    LIST = "LIST"
    CLASS = "CLASS"
    PASSWORD = "PASSWORD"

    @property
    def wire_id(self) -> int:
        """The ``config_type`` byte of DescribeConfigs v3+ (Kafka ``ConfigType``)."""
        return _WIRE_TYPE_IDS[self]


_WIRE_TYPE_IDS = {
    ConfigType.BOOLEAN: 1,
    ConfigType.STRING: 2,
    ConfigType.INT: 3,
    ConfigType.SHORT: 4,
    ConfigType.LONG: 5,
    ConfigType.DOUBLE: 6,
    ConfigType.LIST: 7,
    ConfigType.CLASS: 8,
    ConfigType.PASSWORD: 9,
}


@dataclass(frozen=True, slots=True)
class Synonym:
    """A broker-level key that supplies a topic setting's default.

    ``factor`` converts the broker key's unit into the topic key's unit
    (``log.retention.hours`` → ``retention.ms`` has factor 3,600,000).
    """

    name: str
    factor: int = 1


Validator = Callable[[Any], None]


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One setting with Kafka's dotted name verbatim."""

    name: str
    type: ConfigType
    default: Any
    doc: str
    validator: Validator | None = None
    synonyms: tuple[Synonym, ...] = ()
    aliases: tuple[str, ...] = ()
    sensitive: bool = False
    read_only: bool = False
    #: Set on a key accepted only so that Kafka's configurations load: it is validated, has no effect
    #: in Sundial, is warned about when set, and is reported read-only. Build with :func:`compatibility_only`.
    compat_reason: str | None = None

    @property
    def has_effect(self) -> bool:
        return self.compat_reason is None

    def parse(self, raw: Any) -> Any:
        """Parse a string (or an already-typed value) and validate it."""
        value = parse_value(self.name, self.type, raw)
        if self.validator is not None and value is not None:
            try:
                self.validator(value)
            except ConfigError:
                raise
            except ValueError as exc:
                raise ConfigError(self.name, f"invalid value {raw!r}: {exc}") from None
        return value


def parse_value(name: str, type_: ConfigType, raw: Any) -> Any:
    """Kafka's typed parsing of one value; ``None`` stays ``None`` (unset)."""
    if raw is None:
        return None
    if type_ in (ConfigType.LONG, ConfigType.INT, ConfigType.SHORT):
        if isinstance(raw, bool):
            raise ConfigError(name, f"expected an integer, got {raw!r}")
        if isinstance(raw, int):
            value = raw
        else:
            text = str(raw).strip()
            try:
                value = int(text, 10)
            except ValueError:
                raise ConfigError(name, f"expected an integer, got {raw!r}") from None
        lo, hi = {
            ConfigType.LONG: (LONG_MIN, LONG_MAX),
            ConfigType.INT: (INT_MIN, INT_MAX),
            ConfigType.SHORT: (-(2**15), 2**15 - 1),
        }[type_]
        if not lo <= value <= hi:
            raise ConfigError(name, f"{value} does not fit in a {type_.value.lower()}")
        return value
    if type_ is ConfigType.DOUBLE:
        try:
            return float(str(raw).strip())
        except ValueError:
            raise ConfigError(name, f"expected a number, got {raw!r}") from None
    if type_ is ConfigType.BOOLEAN:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text == "true":
            return True
        if text == "false":
            return False
        raise ConfigError(name, f"expected true or false, got {raw!r}")
    if type_ is ConfigType.LIST:
        if isinstance(raw, (list, tuple)):
            return tuple(str(x).strip() for x in raw)
        text = str(raw).strip()
        if not text:
            return ()
        return tuple(part.strip() for part in text.split(",") if part.strip())
    return str(raw).strip() if type_ is not ConfigType.PASSWORD else str(raw)


def format_value(type_: ConfigType, value: Any) -> str | None:
    """Render a typed value back to the string form Kafka reports."""
    if value is None:
        return None
    if type_ is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if type_ is ConfigType.LIST:
        return ",".join(value)
    return str(value)


def compatibility_only(d: ConfigDef, reason: str) -> ConfigDef:
    """``d`` marked as accepted for compatibility: validated, without effect (``reason`` says why), warned
    about when set explicitly, read-only in DescribeConfigs, and its doc says so."""
    return replace(d, compat_reason=reason, read_only=True,
                   doc=f"{d.doc.rstrip('.')}. Accepted for compatibility, without effect in Sundial: {reason}.")


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance with adjacent transpositions (optimal string alignment)."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[-1]


def did_you_mean(name: str, known: Iterable[str]) -> str | None:
    """The known key ``name`` is most likely a misspelling of, or None.

    A candidate qualifies when its edit distance to ``name`` is at most 2 (1 for names shorter than
    8 characters) or when both have the same dotted words in another order or with one word missing
    or doubled; ties go to the first candidate in ``known`` order.
    """
    if not name:
        return None
    probe = name.strip().lower()
    limit = 1 if len(probe) < 8 else 2
    best: tuple[int, str] | None = None
    words = probe.split(".")
    for candidate in known:
        if candidate == name:
            return None
        distance = edit_distance(probe, candidate.lower())
        if distance > limit:
            cwords = candidate.lower().split(".")
            if sorted(cwords) == sorted(words) or _one_word_apart(words, cwords):
                distance = limit
            else:
                continue
        if best is None or distance < best[0]:
            best = (distance, candidate)
    return best[1] if best else None


def _one_word_apart(a: list[str], b: list[str]) -> bool:
    """``b`` is ``a`` with one dotted word added or removed (``log.retention.ms`` vs ``retention.ms``)."""
    if abs(len(a) - len(b)) != 1 or min(len(a), len(b)) < 2:
        return False
    longer, shorter = (a, b) if len(a) > len(b) else (b, a)
    return any(longer[:i] + longer[i + 1:] == shorter for i in range(len(longer)))


def suggestion(name: str, known: Iterable[str]) -> str:
    """``"; did you mean X?"`` for a likely misspelling, else an empty string (for messages)."""
    guess = did_you_mean(name, known)
    return f"; did you mean {guess}?" if guess else ""


# --- reusable validators -------------------------------------------------------


def at_least(minimum: int) -> Validator:
    def check(value: int) -> None:
        if value < minimum:
            raise ValueError(f"must be at least {minimum}")

    return check


def os_default_or_at_least(minimum: int) -> Validator:
    """-1 (keep what the operating system chooses) or a value of at least ``minimum``."""
    def check(value: int) -> None:
        if value != -1 and value < minimum:
            raise ValueError(f"must be -1 (the OS default) or at least {minimum}")

    return check


def between(minimum: int, maximum: int) -> Validator:
    def check(value: int) -> None:
        if not minimum <= value <= maximum:
            raise ValueError(f"must be between {minimum} and {maximum}")

    return check


def one_of(*choices: str, case_insensitive: bool = False) -> Validator:
    allowed = {c.lower() for c in choices} if case_insensitive else set(choices)

    def check(value: str) -> None:
        probe = value.lower() if case_insensitive else value
        if probe not in allowed:
            raise ValueError(f"must be one of {', '.join(choices)}")

    return check


def each_one_of(*choices: str) -> Validator:
    def check(values: tuple[str, ...]) -> None:
        for v in values:
            if v not in choices:
                raise ValueError(f"{v!r} is not one of {', '.join(choices)}")

    return check


@dataclass(slots=True)
class ConfigRegistry:
    """An ordered collection of definitions, addressable by name or alias."""

    defs: dict[str, ConfigDef] = field(default_factory=dict)
    _aliases: dict[str, str] = field(default_factory=dict)

    def add(self, d: ConfigDef) -> ConfigDef:
        if d.name in self.defs:
            raise RuntimeError(f"duplicate config definition {d.name}")
        self.defs[d.name] = d
        for alias in d.aliases:
            self._aliases[alias] = d.name
        return d

    def canonical(self, name: str) -> str | None:
        """The defined name for ``name`` (itself, or the key an alias stands for)."""
        if name in self.defs:
            return name
        return self._aliases.get(name)

    def get(self, name: str) -> ConfigDef | None:
        canon = self.canonical(name)
        return self.defs.get(canon) if canon else None

    def __iter__(self):
        return iter(self.defs.values())

    def __contains__(self, name: str) -> bool:
        return self.canonical(name) is not None

    def without_effect(self, names: Iterable[str]) -> list[tuple[str, str]]:
        """(canonical name, reason) of each key of ``names`` that is accepted for compatibility only,
        sorted by name; what the broker warns about when such keys are set."""
        found = {}
        for name in names:
            d = self.get(name)
            if d is not None and d.compat_reason is not None:
                found[d.name] = d.compat_reason
        return sorted(found.items())
