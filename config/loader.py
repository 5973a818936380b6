"""Reading ``server.properties`` and ``--override KEY=VALUE`` into a :class:`BrokerConfig`.

The file format is Java's ``.properties``: ``key=value``, ``key: value`` or
``key value``; ``#`` and ``!`` start comment lines; a trailing backslash continues
a line; ``\\t``, ``\\n``, ``\\uXXXX`` and escaped separators are unescaped.
Overrides apply after the file, in order. Unknown keys are returned so the
caller can warn about them; bad values raise :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import os
from typing import Iterable

from .broker import BrokerConfig, IGNORED_KAFKA_KEYS, split_known
from .defs import ConfigError


def _unescape(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            n = text[i + 1]
            if n == "u" and i + 5 < len(text):
                try:
                    out.append(chr(int(text[i + 2:i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> list[tuple[str, str]]:
    """Parse Java properties text into (key, value) pairs in file order."""
    pairs: list[tuple[str, str]] = []
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        # count trailing backslashes: odd means continuation
        stripped = line
        n = len(stripped) - len(stripped.rstrip("\\"))
        if n % 2 == 1:
            pending += stripped[:-1]
            continue
        logical.append(pending + stripped)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        key_chars = []
        i = 0
        while i < len(line):
            c = line[i]
            if c == "\\" and i + 1 < len(line):
                key_chars.append(line[i:i + 2])
                i += 2
                continue
            if c in "=: \t\f":
                break
            key_chars.append(c)
            i += 1
        key = _unescape("".join(key_chars))
        rest = line[i:]
        rest = rest.lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        pairs.append((key, _unescape(rest)))
    return pairs


def parse_override(item: str) -> tuple[str, str]:
    if "=" not in item:
        raise ConfigError(item, "an override must look like KEY=VALUE")
    key, value = item.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(item, "an override must look like KEY=VALUE")
    return key, value.strip()


def load_broker_config(path: str | os.PathLike | None = None,
                       overrides: Iterable[str] = ()) -> tuple[BrokerConfig, dict[str, str]]:
    """Build the broker config; returns it with the unknown keys (to be warned about).

    Keys that Kafka knows but a single node ignores are reported as unknown too,
    so the daemon's start-up log lists everything it did not apply.
    """
    items: list[tuple[str, str]] = []
    if path is not None:
        try:
            with open(path, encoding="utf-8") as fh:
                items.extend(parse_properties(fh.read()))
        except OSError as exc:
            raise ConfigError(str(path), f"cannot read config file: {exc.strerror or exc}") from None
    for item in overrides:
        items.append(parse_override(item))
    known, unknown = split_known(items)
    config = BrokerConfig(known, unknown)
    return config, unknown


__all__ = ["parse_properties", "parse_override", "load_broker_config", "IGNORED_KAFKA_KEYS"]
