"""Client quota configurations: entities, Kafka's validation and matching, and the durable store.

**Entities** are Kafka's ``ClientQuotaEntity``: a set of (entity type, name) pairs, the name
``None`` meaning the default entity of that type. Sundial serves the types ``user`` and
``client-id``, alone or together (user+client-id), each with defaults; an :data:`Entity` is the
tuple of its pairs sorted by type, e.g. ``(("client-id", None), ("user", "alice"))``.

**AlterClientQuotas** (:func:`plan_alterations`), as Kafka's ``ClientQuotaControlManager``:

* per entry, INVALID_REQUEST (42) with Kafka's message for: an empty entity, an entity type
  other than ``user``/``client-id`` (``ip`` entities are refused: Sundial does not enforce
  connection-rate quotas), a type named twice, an empty name, a key named twice, a key that is
  not a quota key (``Invalid configuration key <key>``), a value not above 0, a fractional value
  for a LONG key. Sundial also refuses NaN and infinite values and the keys Kafka knows but
  Sundial does not enforce (``controller_mutation_rate``), with the reason;
* removing a key that is not set succeeds and changes nothing (no key check, as in Kafka);
* an entity named twice in one request: every occurrence answers INVALID_REQUEST and none is
  applied (Kafka applies the first and reports an error for the entity; Sundial does neither
  half-way);
* the valid entries are applied together, in one atomic write; ``validate_only`` applies nothing.

**DescribeClientQuotas** (:func:`describe`), as Kafka's ``ClientQuotasImage.describe``: filter
components by entity type with match type 0 (exact name), 1 (the default entity) or 2 (any
entity of that type, the default included); ``strict`` keeps only entities with no other types.
An empty type, a type named twice, a null name with match 0 or a name with match 1/2, or an
unknown match type is INVALID_REQUEST; an unknown entity type UNSUPPORTED_VERSION (35), as Kafka
answers it (an ``ip`` filter matches nothing here, since no ``ip`` entity is ever stored).

**The store** (:class:`ClientQuotaStore`, the one owner of the quota configurations): a JSON file,
``<first log dir>/client-quotas.json``, written as the SCRAM credentials store is (temp file,
fsync, rename, fsync of the directory, under the store's update lock), so a crash leaves the
old file or the new one, never a mix::

    {"version": 1, "entries": [{"entity": [["user", "alice"], ["client-id", null]],
                                "quotas": {"producer_byte_rate": 1048576.0}}]}

The in-memory view is replaced, never changed in place, once the file is written: readers on the
event loop see the old configuration or the new one.
"""

from __future__ import annotations

import json
import math
import os
import threading
from dataclasses import dataclass
from typing import Iterable, Mapping

import structlog

from sundial.config.defs import ConfigType
from sundial.config.quotas import CLIENT_QUOTA_KEYS, UNSUPPORTED_QUOTA_KEYS
from sundial.protocol.errors import ErrorCode
from sundial.storage.files import read_file_if_exists, write_file_atomically

from .store_lock import update_lock

logger = structlog.get_logger(__name__)

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID)

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2

STORE_FILE = "client-quotas.json"
STORE_VERSION = 1

#: An entity: its (type, name or None for the default) pairs, sorted by type.
Entity = tuple[tuple[str, str | None], ...]


def make_entity(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    return tuple(sorted(pairs, key=lambda p: p[0]))


def entity_name(entity: Entity, entity_type: str) -> str | None:
    for t, name in entity:
        if t == entity_type:
            return name
    raise KeyError(entity_type)


def describe_entity(entity: Entity) -> str:
    """Kafka's wording: ``user alice client-id <default>``."""
    return " ".join(f"{t} {'<default>' if n is None else n}" for t, n in entity)


class QuotaRequestError(Exception):
    """A request (or one entry of it) Kafka refuses: the error code and Kafka's message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _invalid(message: str) -> QuotaRequestError:
    return QuotaRequestError(ErrorCode.INVALID_REQUEST, message)


# -- AlterClientQuotas ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Alteration:
    """One entry of AlterClientQuotas: the entity as sent and its ops (key, value, remove)."""

    pairs: tuple[tuple[str, str | None], ...]
    ops: tuple[tuple[str, float, bool], ...]


@dataclass(frozen=True)
class AlterResult:
    pairs: tuple[tuple[str, str | None], ...]
    code: int
    message: str | None


def _validate_entity(pairs) -> Entity:
    if not pairs:
        raise _invalid("Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type in seen:
            raise _invalid(f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type == IP:
            raise _invalid("Unhandled client quota entity type: ip (Sundial does not enforce IP connection-rate "
                           "quotas)")
        if entity_type not in ENTITY_TYPES:
            raise _invalid(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and name == "":
            raise _invalid(f"Empty {entity_type} not supported")
        seen[entity_type] = name
    return make_entity(seen.items())


def _validate_value(key: str, value: float) -> None:
    kind = CLIENT_QUOTA_KEYS.get(key)
    if kind is None:
        reason = UNSUPPORTED_QUOTA_KEYS.get(key)
        raise _invalid(f"Invalid configuration key {key}" + (f" ({reason})" if reason else ""))
    if math.isnan(value) or math.isinf(value):
        raise _invalid(f"Quota {key} must be a finite number")
    if value <= 0.0:
        raise _invalid(f"Quota {key} must be greater than 0")
    if kind == ConfigType.LONG:
        if value > 2**63 - 1:
            raise _invalid(f"Proposed value for {key} is too large for a LONG.")
        if abs(math.fmod(value, 1.0)) > 1e-6:
            raise _invalid(f"{key} cannot be a fractional value.")


def plan_alterations(alterations: list[Alteration], current: Mapping[Entity, Mapping[str, float]]
                     ) -> tuple[list[AlterResult], dict[Entity, dict[str, float]]]:
    """Check every entry against ``current``: (one result per entry, the new values of the entities
    the valid entries change). Pure: nothing is applied here."""
    parsed: list[tuple[Alteration, Entity | QuotaRequestError]] = []
    counts: dict[Entity, int] = {}
    for alt in alterations:
        try:
            entity = _validate_entity(alt.pairs)
        except QuotaRequestError as exc:
            parsed.append((alt, exc))
            continue
        counts[entity] = counts.get(entity, 0) + 1
        parsed.append((alt, entity))
    results: list[AlterResult] = []
    changed: dict[Entity, dict[str, float]] = {}
    for alt, entity in parsed:
        if isinstance(entity, QuotaRequestError):
            results.append(AlterResult(alt.pairs, entity.code, entity.message))
            continue
        if counts[entity] > 1:
            results.append(AlterResult(alt.pairs, ErrorCode.INVALID_REQUEST,
                                       f"Ignoring duplicate entity {describe_entity(entity)}"))
            continue
        try:
            new = _apply_ops(entity, alt.ops, current.get(entity, {}))
        except QuotaRequestError as exc:
            results.append(AlterResult(alt.pairs, exc.code, exc.message))
            continue
        if new != dict(current.get(entity, {})):
            changed[entity] = new
        results.append(AlterResult(alt.pairs, ErrorCode.NONE, None))
    return results, changed


def _apply_ops(entity: Entity, ops, values: Mapping[str, float]) -> dict[str, float]:
    seen: set[str] = set()
    new = dict(values)
    for key, value, remove in ops:
        if key in seen:
            raise _invalid(f"Duplicate quota key {key} not updating quota for this entity "
                           f"{describe_entity(entity)}")
        seen.add(key)
        if remove:
            new.pop(key, None)
            continue
        _validate_value(key, float(value))
        new[key] = float(value)
    return new


# -- DescribeClientQuotas --------------------------------------------------------------------------
@dataclass(frozen=True)
class Component:
    entity_type: str
    match_type: int
    match: str | None


def describe(entries: Mapping[Entity, Mapping[str, float]], components: list[Component], strict: bool
             ) -> list[tuple[Entity, dict[str, float]]]:
    """The entities matching the filter, with their values (QuotaRequestError for a bad filter)."""
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for c in components:
        if not c.entity_type:
            raise _invalid("Invalid empty entity type.")
        if c.entity_type in exact or c.entity_type in typed:
            raise _invalid(f"Entity type {c.entity_type} cannot appear more than once in the filter.")
        if c.entity_type not in (IP, USER, CLIENT_ID):
            raise QuotaRequestError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {c.entity_type}")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise _invalid("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[c.entity_type] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise _invalid("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[c.entity_type] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise _invalid("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            typed.add(c.entity_type)
        else:
            raise _invalid(f"Unknown match type {c.match_type}")
    if (IP in exact or IP in typed) and ({USER, CLIENT_ID} & (set(exact) | typed)):
        raise _invalid("Invalid entity filter component combination. IP filter component should not be used "
                       "with user or clientId filter component.")
    out = []
    for entity, values in entries.items():
        names = dict(entity)
        if strict and len(names) != len(exact) + len(typed):
            continue
        if any(t not in names or names[t] != name for t, name in exact.items()):
            continue
        if any(t not in names for t in typed):
            continue
        out.append((entity, dict(values)))
    return out


# -- the store -------------------------------------------------------------------------------------
class QuotaStoreError(OSError):
    """The quota file cannot be read: the broker does not start on a file it cannot trust (an OSError,
    so the start fails with one line naming the file)."""


class ClientQuotaStore:
    """The client quota configurations, durable in one JSON file (see the module doc)."""

    def __init__(self, path: str, entries: dict[Entity, dict[str, float]]) -> None:
        self.path = path
        self._entries: dict[Entity, dict[str, float]] = entries
        self._write_lock = threading.Lock()

    @classmethod
    def open(cls, data_dir: str) -> "ClientQuotaStore":
        path = os.path.join(data_dir, STORE_FILE)
        entries = _read(path)
        if entries:
            logger.info("client_quotas_loaded", path=path, entities=len(entries))
        return cls(path, entries)

    @property
    def entries(self) -> Mapping[Entity, Mapping[str, float]]:
        """The current configuration (a snapshot: never changed in place)."""
        return self._entries

    def replace(self, changed: Mapping[Entity, Mapping[str, float]]) -> None:
        """Write ``changed`` (entity → all its values; empty removes the entity) durably, then make
        it the current configuration. Blocking file work: the broker calls it off the loop."""
        with self._write_lock, update_lock(self.path):
            new = dict(self._entries)
            for entity, values in changed.items():
                if values:
                    new[entity] = dict(values)
                else:
                    new.pop(entity, None)
            doc = {"version": STORE_VERSION, "entries": [
                {"entity": [list(p) for p in entity], "quotas": dict(sorted(values.items()))}
                for entity, values in sorted(new.items(), key=lambda kv: _sort_key(kv[0]))]}
            data = json.dumps(doc, indent=2).encode("utf-8") + b"\n"
            write_file_atomically(self.path, data)
            self._entries = new


def _sort_key(entity: Entity):
    return tuple((t, n is not None, n or "") for t, n in entity)


def _read(path: str) -> dict[Entity, dict[str, float]]:
    try:
        raw = read_file_if_exists(path)
    except OSError as exc:
        raise QuotaStoreError(f"cannot read {path}: {exc}") from None
    if raw is None:
        return {}
    try:
        doc = json.loads(raw.decode("utf-8"))
        if not isinstance(doc, dict) or doc.get("version") != STORE_VERSION:
            raise ValueError(f"unsupported version {doc.get('version') if isinstance(doc, dict) else doc!r}")
        entries: dict[Entity, dict[str, float]] = {}
        for item in doc.get("entries") or []:
            entity = _validate_entity([(str(t), None if n is None else str(n)) for t, n in item["entity"]])
            values = {str(k): float(v) for k, v in item["quotas"].items()}
            for key, value in values.items():
                _validate_value(key, value)
            if values:
                entries[entity] = values
        return entries
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, QuotaRequestError) as exc:
        raise QuotaStoreError(f"{path} is not a client quota file this broker can read: {exc}") from None
