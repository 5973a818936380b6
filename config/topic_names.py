"""Kafka's rules for topic names (``org.apache.kafka.common.internals.Topic.validate``).

A topic name is 1–249 characters of ``[a-zA-Z0-9._-]`` and is neither ``.`` nor
``..``. :func:`topic_name_problem` returns Kafka's message for a name that breaks a
rule (None for a legal name); storage (``InvalidTopicError``) and the daemon
(CreateTopics and Metadata auto-creation, INVALID_TOPIC_EXCEPTION 17) raise it in
their own exception types. Names that differ only by ``.`` versus ``_`` collide
(:func:`collision_key`): Kafka refuses the second one, as their metric names would
be equal. It lives in ``config`` because every layer reads it and ``config``
imports nothing of Sundial, as a topic's other rules (its configs) already do.
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def topic_name_problem(name: str | None) -> str | None:
    """Kafka's message for an illegal topic name, or None when ``name`` is legal."""
    if not name:
        return "topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "topic name cannot be \".\" or \"..\""
    if len(name) > MAX_NAME_LENGTH:
        return f"topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, topic name: {name}"
    if not _LEGAL.match(name):
        return (f"topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', "
                "'_' and '-'")
    return None


def collision_key(name: str) -> str:
    """Two topics whose keys are equal collide (``.`` and ``_`` are the same in metric names)."""
    return name.replace(".", "_")


__all__ = ["MAX_NAME_LENGTH", "topic_name_problem", "collision_key"]
