"""Client quotas' settings: the broker keys of the rate windows and the per-entity quota keys.

Broker keys (Kafka ``QuotaConfig``), registered in the broker's registry by :mod:`config.broker`:

* ``quota.window.num`` (11): samples a client's rate is measured over;
* ``quota.window.size.seconds`` (1): length of one sample.

A client's rate is the sum of its samples over the time they span (at least
``quota.window.num - 1`` whole windows), as Kafka's ``Rate`` measures it, but never over more
than the time since the client's first request plus one window (no initial burst: docs/quotas.md).

Per-entity keys (Kafka ``QuotaConfig.userAndClientQuotaConfigs``), set with AlterClientQuotas on
user, client-id and user+client-id entities (:data:`CLIENT_QUOTA_KEYS`, name → Kafka's type):

* ``producer_byte_rate`` (LONG): bytes per second of Produce requests;
* ``consumer_byte_rate`` (LONG): bytes per second of Fetch responses;
* ``request_percentage`` (DOUBLE): percent of one request handler's time per quota window.

Keys Kafka accepts there but Sundial does not enforce are refused (:data:`UNSUPPORTED_QUOTA_KEYS`,
with the reason), rather than accepted and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from .defs import ConfigDef, ConfigType, at_least

I = ConfigType.INT

QUOTA_WINDOW_NUM = "quota.window.num"
QUOTA_WINDOW_SIZE_SECONDS = "quota.window.size.seconds"

QUOTA_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef(QUOTA_WINDOW_NUM, I, 11,
              "Samples a client's rate is measured over for its client quotas (docs/quotas.md).", at_least(1)),
    ConfigDef(QUOTA_WINDOW_SIZE_SECONDS, I, 1,
              "Length in seconds of one sample of a client quota's rate; also the longest throttle of "
              "request_percentage (docs/quotas.md).", at_least(1)),
)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"

#: Quota keys of user and client-id entities, with Kafka's type (LONG values must be whole numbers).
CLIENT_QUOTA_KEYS: dict[str, ConfigType] = {
    PRODUCER_BYTE_RATE: ConfigType.LONG,
    CONSUMER_BYTE_RATE: ConfigType.LONG,
    REQUEST_PERCENTAGE: ConfigType.DOUBLE,
}

#: Keys Kafka knows that Sundial refuses (INVALID_REQUEST), with the reason given to the client.
UNSUPPORTED_QUOTA_KEYS: dict[str, str] = {
    "controller_mutation_rate": "controller mutation quotas (KIP-599) are not enforced by Sundial",
    "connection_creation_rate": "IP connection-rate quotas are not enforced by Sundial",
}


@dataclass(frozen=True, slots=True)
class ClientQuotaConfig:
    """The rate windows of the client quotas, typed (built from the two broker keys)."""

    window_num: int = 11
    window_size_seconds: int = 1

    @property
    def window_size_ms(self) -> int:
        return self.window_size_seconds * 1000

    @classmethod
    def from_values(cls, values) -> "ClientQuotaConfig":
        return cls(window_num=values[QUOTA_WINDOW_NUM], window_size_seconds=values[QUOTA_WINDOW_SIZE_SECONDS])
