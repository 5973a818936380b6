"""The topic list inside a consumer's JoinGroup metadata (Kafka's embedded consumer protocol).

The broker relays member metadata opaquely (range, roundrobin, sticky and cooperative
assignors all work unchanged); it only reads the subscribed topics, for consumed
retention, OffsetDelete's GROUP_SUBSCRIBED_TO_TOPIC and offset expiry.

Wire format (``ConsumerProtocolSubscription``, versions 0-3, never flexible)::

    version         int16   (>= 0; later versions append fields, so any version parses)
    topics          int32 count, then per topic: int16 length + UTF-8 name
    user_data       nullable bytes (int32 length, -1 = null)      -- not read
    owned_partitions (v1+), generation_id (v2+), rack_id (v3+)     -- not read

kafka-python, aiokafka, librdkafka and kafkajs all write this layout.
"""

from __future__ import annotations

import struct

from sundial.protocol.primitives import INT16, INT32


class SubscriptionError(ValueError):
    """Metadata that is not a ConsumerProtocolSubscription."""


def subscription_topics(metadata: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription; raises SubscriptionError on bad bytes."""
    data = bytes(metadata)
    try:
        (version,) = INT16.unpack_from(data, 0)
        if version < 0:
            raise SubscriptionError(f"negative subscription version {version}")
        (count,) = INT32.unpack_from(data, 2)
        if count < 0 or count > (len(data) - 6) // 2:
            raise SubscriptionError(f"impossible topic count {count}")
        pos = 6
        topics = []
        for _ in range(count):
            (size,) = INT16.unpack_from(data, pos)
            pos += 2
            if size < 0 or pos + size > len(data):
                raise SubscriptionError("topic name runs past the end of the metadata")
            topics.append(data[pos:pos + size].decode("utf-8"))
            pos += size
        return topics
    except (struct.error, UnicodeDecodeError) as exc:
        raise SubscriptionError(f"unreadable consumer subscription: {exc}") from None


def encode_subscription(topics: list[str], user_data: bytes | None = None, version: int = 0) -> bytes:
    """A version-0 subscription (used by tests and the benchmark)."""
    parts = [INT16.pack(version), INT32.pack(len(topics))]
    for t in topics:
        raw = t.encode("utf-8")
        parts += [INT16.pack(len(raw)), raw]
    if user_data is None:
        parts.append(INT32.pack(-1))
    else:
        parts += [INT32.pack(len(user_data)), user_data]
    return b"".join(parts)


# --- the whole subscription and the assignment (online migration between the two protocols) ---------


def _read_string(data: bytes, pos: int, nullable: bool = False) -> tuple[str | None, int]:
    (size,) = INT16.unpack_from(data, pos)
    pos += 2
    if size < 0:
        if nullable:
            return None, pos
        raise SubscriptionError("null string")
    if pos + size > len(data):
        raise SubscriptionError("string runs past the end")
    return data[pos:pos + size].decode("utf-8"), pos + size


def _read_bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    (size,) = INT32.unpack_from(data, pos)
    pos += 4
    if size < 0:
        return None, pos
    if pos + size > len(data):
        raise SubscriptionError("bytes run past the end")
    return data[pos:pos + size], pos + size


def _read_topic_partitions(data: bytes, pos: int) -> tuple[dict[str, list[int]], int]:
    (count,) = INT32.unpack_from(data, pos)
    pos += 4
    if count < 0 or count > len(data):
        raise SubscriptionError(f"impossible topic count {count}")
    out: dict[str, list[int]] = {}
    for _ in range(count):
        topic, pos = _read_string(data, pos)
        (n,) = INT32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + 4 * n > len(data):
            raise SubscriptionError(f"impossible partition count {n}")
        out.setdefault(topic, []).extend(struct.unpack_from(f">{n}i", data, pos))
        pos += 4 * n
    return out, pos


class Subscription:
    """A decoded ConsumerProtocolSubscription (Kafka ``ConsumerProtocolSubscription`` v0-v3)."""

    __slots__ = ("version", "topics", "user_data", "owned_partitions", "generation_id", "rack_id")

    def __init__(self, version: int, topics: list[str], user_data: bytes | None,
                 owned_partitions: dict[str, list[int]], generation_id: int, rack_id: str | None) -> None:
        self.version = version
        self.topics = topics
        self.user_data = user_data
        self.owned_partitions = owned_partitions
        self.generation_id = generation_id
        self.rack_id = rack_id


def decode_subscription(metadata: bytes) -> Subscription:
    """Every field of a subscription; fields of a later version than the metadata's are
    their defaults (no owned partitions, generation -1, no rack). Raises SubscriptionError."""
    data = bytes(metadata)
    try:
        (version,) = INT16.unpack_from(data, 0)
        if version < 0:
            raise SubscriptionError(f"negative subscription version {version}")
        topics = subscription_topics(data)
        pos = 6 + sum(2 + len(t.encode("utf-8")) for t in topics)
        user_data, pos = _read_bytes(data, pos)
        owned: dict[str, list[int]] = {}
        generation_id, rack_id = -1, None
        if version >= 1 and pos < len(data):
            owned, pos = _read_topic_partitions(data, pos)
        if version >= 2 and pos < len(data):
            (generation_id,) = INT32.unpack_from(data, pos)
            pos += 4
        if version >= 3 and pos < len(data):
            rack_id, pos = _read_string(data, pos, nullable=True)
        return Subscription(version, topics, user_data, owned, generation_id, rack_id)
    except (struct.error, UnicodeDecodeError) as exc:
        raise SubscriptionError(f"unreadable consumer subscription: {exc}") from None


def metadata_version(metadata: bytes) -> int:
    """The version a subscription is written in (Kafka ``ConsumerProtocol.deserializeVersion``):
    the assignment sent back to that member is written in the same version."""
    try:
        (version,) = INT16.unpack_from(bytes(metadata), 0)
    except struct.error:
        raise SubscriptionError("metadata shorter than its version") from None
    if version < 0:
        raise SubscriptionError(f"negative subscription version {version}")
    return version


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    """The partitions of a ConsumerProtocolAssignment (version, topic partitions, user data);
    empty bytes (a member that never received an assignment) are no partitions."""
    data = bytes(data)
    if not data:
        return {}
    try:
        (version,) = INT16.unpack_from(data, 0)
        if version < 0:
            raise SubscriptionError(f"negative assignment version {version}")
        partitions, _ = _read_topic_partitions(data, 2)
        return partitions
    except (struct.error, UnicodeDecodeError) as exc:
        raise SubscriptionError(f"unreadable consumer assignment: {exc}") from None


def encode_assignment(partitions: dict[str, list[int]], version: int = 0, user_data: bytes | None = None) -> bytes:
    """A ConsumerProtocolAssignment (versions 0-3 share this layout): topics and partitions sorted."""
    parts = [INT16.pack(version), INT32.pack(len(partitions))]
    for topic in sorted(partitions):
        raw = topic.encode("utf-8")
        ps = sorted(partitions[topic])
        parts += [INT16.pack(len(raw)), raw, INT32.pack(len(ps)), struct.pack(f">{len(ps)}i", *ps)]
    if user_data is None:
        parts.append(INT32.pack(-1))
    else:
        parts += [INT32.pack(len(user_data)), user_data]
    return b"".join(parts)
