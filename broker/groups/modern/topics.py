"""The topics as the group state machine sees them, and the group's metadata hash.

The broker hands the manager a view of its topics, name → (topic id, partition count)
(Kafka: the coordinator's ``MetadataImage``). :class:`TopicImage` is one snapshot of it,
taken at the start of each operation, with the lookups reconciliation and assignment need:
names to ids (Kafka ``TopicIds``, which silently drops names that do not exist), ids back to
names (describe), and the metadata hash.

The metadata hash (Kafka 4.1+, KIP-1101) fingerprints the subscribed topics of a group: a
group's epoch is bumped when it changes, which is how a topic created, deleted or grown
triggers a new target assignment. Kafka hashes, per existing subscribed topic, a magic byte,
the topic id, name, partition count and each partition's racks with XXH3-64, then the topic
hashes in name order, 0 when no subscribed topic exists; it stores the result in record
type 3 (``ConsumerGroupMetadataValue.MetadataHash``). Sundial hashes the same fields in the
same order (less the rack-free partition list) with BLAKE2b-64 (the standard library has no XXH3): the values differ from
Kafka's, so a Kafka broker reading a log Sundial wrote would see a changed hash and bump each
group's epoch once (one extra rebalance, nothing lost); Sundial itself only ever compares
hashes it computed. A single node has no racks, so no rack is hashed.
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Iterable, Mapping
from functools import cached_property

#: Kafka ``Utils.TOPIC_HASH_MAGIC_BYTE``: the version of the hash layout.
TOPIC_HASH_MAGIC_BYTE = 0


class TopicImage:
    """The broker's topics for one operation: name → (topic id, partition count).

    The mapping is used as given, not copied (an operation runs to its end before the broker
    changes a topic); the reverse index is built only by the operations that need it.
    """

    def __init__(self, topics: Mapping[str, tuple[uuid.UUID, int]]) -> None:
        self.by_name = topics

    @cached_property
    def by_id(self) -> dict[uuid.UUID, tuple[str, int]]:
        return {tid: (name, n) for name, (tid, n) in self.by_name.items()}

    def names(self) -> Iterable[str]:
        return self.by_name.keys()

    def ids(self, names: Iterable[str]) -> frozenset[uuid.UUID]:
        """Ids of the names that exist (Kafka ``TopicIds``)."""
        found = (self.by_name.get(name) for name in names)
        return frozenset(entry[0] for entry in found if entry is not None)

    def name(self, topic_id: uuid.UUID) -> str | None:
        entry = self.by_id.get(topic_id)
        return entry[0] if entry else None

    def partitions(self, topic_id: uuid.UUID) -> int:
        entry = self.by_id.get(topic_id)
        return entry[1] if entry else 0

    def topic_hash(self, name: str) -> int:
        """The hash of one existing topic (0 if it does not exist)."""
        entry = self.by_name.get(name)
        if entry is None:
            return 0
        topic_id, partitions = entry
        h = hashlib.blake2b(digest_size=8)
        h.update(bytes([TOPIC_HASH_MAGIC_BYTE]))
        h.update(topic_id.bytes)
        encoded = name.encode("utf-8")
        h.update(struct.pack(">i", len(encoded)) + encoded)
        h.update(struct.pack(">i", partitions))
        # Kafka then hashes each partition number with its racks: with no racks, the
        # partition numbers 0..n-1 add nothing the count does not already say.
        return _signed64(h.digest())

    def metadata_hash(self, subscribed_names: Iterable[str]) -> int:
        """The group hash over the subscribed topics that exist; 0 when none does."""
        existing = sorted(name for name in set(subscribed_names) if name in self.by_name)
        if not existing:
            return 0
        h = hashlib.blake2b(digest_size=8)
        for name in existing:
            h.update(struct.pack(">q", self.topic_hash(name)))
        return _signed64(h.digest())


def _signed64(digest: bytes) -> int:
    return struct.unpack(">q", digest)[0]
