"""Feature flags (KIP-584) as a Kafka 4.x broker reports them in ApiVersions v3+.

Three tagged fields of the ApiVersions answer carry them:

* ``supported_features`` (tag 0): ``[name, min_version, max_version]``, what the broker can run;
* ``finalized_features_epoch`` (tag 1): the version of the finalized set;
* ``finalized_features`` (tag 2): ``[name, max_version_level, min_version_level]``, the levels in force.

:func:`api_versions_feature_fields` builds them from what the broker supports and has
finalized, with Kafka's rules (``ApiVersionsResponse.createApiVersionsResponseData``):

* v0–v2 answers have no such fields;
* v0–v3 answers leave out a supported feature whose minimum is 0: clients before Kafka 3.9
  refuse a version range starting at 0 (KAFKA-17011, KAFKA-17492; the reason ApiVersions v4
  exists). ``group.version``, ``share.version`` and ``transaction.version`` all start at 0, so
  only a v4 answer lists them as supported;
* a finalized level of 0 means "off" and is not listed; a listed feature has
  ``min_version_level == max_version_level == level``;
* the Java client keeps the finalized set of the highest epoch it has seen, starting from -1,
  so a finalized set needs an epoch of 0 or more (bump it whenever the set changes).

The features of Kafka 4.x group protocols (``org.apache.kafka.server.common.GroupVersion``,
``ShareVersion``, ``TransactionVersion``): ``group.version`` 0–1, level 1 enables the consumer
rebalance protocol (KIP-848, finalized by default since 4.0); ``share.version`` 0–1, level 1
enables share groups (KIP-932, finalized by default since 4.2); ``transaction.version`` 0–2, level 2 is KIP-890's transactions
(Java producers use them when it is finalized at 2, so never finalize a level not served).
"""

from __future__ import annotations

from collections.abc import Mapping

GROUP_VERSION = "group.version"
SHARE_VERSION = "share.version"
TRANSACTION_VERSION = "transaction.version"

#: The first ApiVersions version with feature fields, and the first that may list a minimum of 0.
FEATURES_FROM_VERSION = 3
MIN_VERSION_ZERO_FROM_VERSION = 4

_INT16_MAX = 0x7FFF


def api_versions_feature_fields(api_version: int, supported: Mapping[str, tuple[int, int]],
                                finalized: Mapping[str, int], epoch: int) -> dict:
    """Fields to merge into an ApiVersions response dict for a request of ``api_version``.

    ``supported`` maps a feature name to its (min, max) supported version; ``finalized`` maps a
    feature name to its finalized level (0 = off), which must lie in its supported range;
    ``epoch`` is the finalized set's epoch (≥ 0 when anything is finalized). Raises
    ``ValueError`` for an inconsistent table (a broker bug, never a client's input).
    """
    for name, (lo, hi) in supported.items():
        if not 0 <= lo <= hi <= _INT16_MAX:
            raise ValueError(f"feature {name!r}: bad supported range {lo}..{hi}")
    listed = []
    for name, level in sorted(finalized.items()):
        if level == 0:
            continue
        rng = supported.get(name)
        if rng is None or not rng[0] <= level <= rng[1]:
            raise ValueError(f"feature {name!r}: finalized level {level} outside its supported range {rng}")
        listed.append({"name": name, "max_version_level": level, "min_version_level": level})
    if listed and epoch < 0:
        raise ValueError("finalized features need an epoch of 0 or more (clients ignore epoch -1)")
    if api_version < FEATURES_FROM_VERSION:
        return {}
    shown = [{"name": name, "min_version": lo, "max_version": hi} for name, (lo, hi) in sorted(supported.items())
             if lo > 0 or api_version >= MIN_VERSION_ZERO_FROM_VERSION]
    return {"supported_features": shown, "finalized_features_epoch": epoch, "finalized_features": listed}
