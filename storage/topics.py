"""Topic metadata: names, ids, partition counts and config overrides, persisted in each data dir.

Sundial has no controller quorum, so what Kafka keeps in its metadata log lives in a
small JSON file, ``sundial-topics.json``, written atomically (tmp + fsync + rename +
directory fsync) into **every** log directory; at start-up the copy with the highest
``generation`` wins, so losing one directory does not lose the topic list::

    {"version": 1, "generation": 7,
     "topics": [{"name": "orders", "topic_id": "<22-char base64url>", "partitions": 3,
                 "overrides": {"retention.ms": "86400000"}}]}

Overrides are kept as the strings the user gave (after validation); the effective
:class:`config.topic.TopicConfig` is resolved from them and the broker's settings.

Each partition directory also holds Kafka's ``partition.metadata``::

    version: 0
    topic_id: <22-char base64url uuid>

Topic names follow Kafka (``Topic.validate``, :mod:`config.topic_names`): 1–249
characters of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``. Topic ids are random 16-byte UUIDs whose base64url form does not
start with ``-`` (Kafka ``Uuid.randomUuid``) and that are never all zero.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

import structlog

from sundial.config.topic import TopicConfig
from sundial.config.topic_names import topic_name_problem

from . import files
from .errors import StorageError

logger = structlog.get_logger(__name__)

METADATA_FILE = "sundial-topics.json"
METADATA_VERSION = 1


class TopicAlreadyExistsError(StorageError):
    """Kafka TOPIC_ALREADY_EXISTS (36)."""


class InvalidTopicError(StorageError):
    """Kafka INVALID_TOPIC_EXCEPTION (17): an illegal or colliding topic name."""


class InvalidPartitionsError(StorageError):
    """Kafka INVALID_PARTITIONS (37)."""


class UnknownTopicOrPartitionError(StorageError):
    """Kafka UNKNOWN_TOPIC_OR_PARTITION (3)."""


def validate_topic_name(name: str) -> None:
    """Raise :class:`InvalidTopicError` unless ``name`` is a legal Kafka topic name (:mod:`config.topic_names`)."""
    problem = topic_name_problem(name)
    if problem is not None:
        raise InvalidTopicError(problem)


def topic_id_to_str(topic_id: bytes) -> str:
    return base64.urlsafe_b64encode(topic_id).decode("ascii").rstrip("=")


def topic_id_from_str(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"topic id {text!r} is not 16 bytes")
    return raw


def new_topic_id() -> bytes:
    while True:
        raw = uuid.uuid4().bytes
        if raw != b"\0" * 16 and not topic_id_to_str(raw).startswith("-"):
            return raw


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    topic_id: bytes
    partitions: int
    overrides: dict[str, str] = field(default_factory=dict)
    config: TopicConfig = field(default_factory=TopicConfig)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "topic_id": topic_id_to_str(self.topic_id), "partitions": self.partitions,
                "overrides": dict(sorted(self.overrides.items()))}


def encode_metadata(topics: Mapping[str, TopicMetadata], generation: int) -> bytes:
    doc = {"version": METADATA_VERSION, "generation": generation,
           "topics": [topics[name].to_json() for name in sorted(topics)]}
    return (json.dumps(doc, indent=1, sort_keys=False) + "\n").encode("utf-8")


@dataclass(frozen=True, slots=True)
class StoredTopic:
    name: str
    topic_id: bytes
    partitions: int
    overrides: dict[str, str]


def decode_metadata(raw: bytes) -> tuple[int, list[StoredTopic]]:
    """(generation, topics); raises ``ValueError`` on anything malformed."""
    doc = json.loads(raw.decode("utf-8"))
    if not isinstance(doc, dict) or doc.get("version") != METADATA_VERSION:
        raise ValueError("unknown topic metadata version")
    out = []
    for t in doc.get("topics", []):
        name = t["name"]
        validate_topic_name(name)
        partitions = int(t["partitions"])
        if partitions <= 0:
            raise ValueError(f"topic {name} has {partitions} partitions")
        overrides = {str(k): str(v) for k, v in (t.get("overrides") or {}).items()}
        out.append(StoredTopic(name, topic_id_from_str(t["topic_id"]), partitions, overrides))
    return int(doc.get("generation", 0)), out


def read_metadata(log_dirs: list[str]) -> tuple[int, list[StoredTopic]] | None:
    """The newest readable copy among the log dirs, or None when no dir has one."""
    best: tuple[int, list[StoredTopic]] | None = None
    for d in log_dirs:
        path = os.path.join(d, METADATA_FILE)
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
        except FileNotFoundError:
            continue
        except OSError as exc:
            logger.error("topic_metadata_unreadable", path=path, error=str(exc))
            continue
        try:
            generation, topics = decode_metadata(raw)
        except (ValueError, KeyError, TypeError, StorageError) as exc:
            logger.error("topic_metadata_corrupt", path=path, error=str(exc))
            continue
        if best is None or generation > best[0]:
            best = (generation, topics)
    return best


def write_metadata(log_dirs: list[str], topics: Mapping[str, TopicMetadata], generation: int) -> None:
    write_encoded_metadata(log_dirs, encode_metadata(topics, generation))


def write_encoded_metadata(log_dirs: list[str], data: bytes) -> None:
    """Write :func:`encode_metadata`'s bytes to every log dir (tmp + fsync + rename + dir fsync)."""
    for d in log_dirs:
        files.write_file_atomically(os.path.join(d, METADATA_FILE), data)


def write_partition_metadata(partition_dir: str, topic_id: bytes, *, sync: bool = True) -> None:
    """Write ``partition.metadata``; ``sync=False`` when creating many partitions at once (the
    topic list, fsynced once, is the source of truth and the file is rewritten when missing)."""
    body = f"version: 0\ntopic_id: {topic_id_to_str(topic_id)}\n".encode("ascii")
    files.write_file_atomically(os.path.join(partition_dir, files.PARTITION_METADATA_FILE), body, sync=sync)


def read_partition_metadata(partition_dir: str) -> bytes | None:
    """Topic id from ``partition.metadata``; None when missing or malformed."""
    path = os.path.join(partition_dir, files.PARTITION_METADATA_FILE)
    try:
        with open(path, encoding="ascii") as fh:
            lines = [line.strip() for line in fh.read().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError):
        return None
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    if fields.get("version", "").strip() != "0" or "topic_id" not in fields:
        return None
    try:
        return topic_id_from_str(fields["topic_id"].strip())
    except ValueError:
        return None


__all__ = [
    "TopicMetadata", "TopicAlreadyExistsError", "InvalidTopicError", "InvalidPartitionsError",
    "UnknownTopicOrPartitionError", "validate_topic_name", "topic_id_to_str", "topic_id_from_str", "new_topic_id",
    "read_metadata", "write_metadata", "write_encoded_metadata", "encode_metadata", "write_partition_metadata",
    "read_partition_metadata", "METADATA_FILE",
]
