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

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class SubscriptionError(ValueError):
    """Metadata that is not a ConsumerProtocolSubscription."""


def subscription_topics(metadata: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription; raises SubscriptionError on bad bytes."""
    data = bytes(metadata)
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version < 0:
            raise SubscriptionError(f"negative subscription version {version}")
        (count,) = _I32.unpack_from(data, 2)
        if count < 0 or count > (len(data) - 6) // 2:
            raise SubscriptionError(f"impossible topic count {count}")
        pos = 6
        topics = []
        for _ in range(count):
            (size,) = _I16.unpack_from(data, pos)
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
    parts = [_I16.pack(version), _I32.pack(len(topics))]
    for t in topics:
        raw = t.encode("utf-8")
        parts += [_I16.pack(len(raw)), raw]
    if user_data is None:
        parts.append(_I32.pack(-1))
    else:
        parts += [_I32.pack(len(user_data)), user_data]
    return b"".join(parts)
