"""Test helpers for the share-state store: topic ids from a dict."""

from __future__ import annotations


class FixedTopicIds:
    """The store's ``TopicIds`` from a dict of topic name -> 16-byte id."""

    def __init__(self, ids: dict[str, bytes]) -> None:
        self.ids = ids

    def id_of(self, topic: str) -> bytes | None:
        return self.ids.get(topic)

    def name_of(self, topic_id: bytes) -> str | None:
        return next((t for t, i in self.ids.items() if i == topic_id), None)
