"""A group catching up with the topics: regexes re-resolved, subscribed topic metadata re-hashed.

Three occasions (Kafka does all from a member's next heartbeat; the manager does them when told):

* topics were created, deleted or grew (``topics_changed``): each group's regexes are
  resolved again, and written (record type 16, all of the group's together, as Kafka's batch
  refresh writes them) when any matches a different set of topics; the metadata hash of the
  subscribed topics is recomputed;
* ``group.consumer.regex.refresh.interval.ms`` passed since a group's regexes were last
  resolved (``poll``): they are resolved and written again even if nothing changed, which
  also restarts the interval, as Kafka's periodic refresh does;
* the groups were just loaded from the log (``loaded``): the topics may have changed while
  the broker was down (Kafka: a loaded group's metadata counts as expired).

Each time, a regex matching other topics or a changed hash bumps the group epoch (with the
new hash), which makes the next heartbeat compute a new target assignment.
"""

from __future__ import annotations

from . import record_helpers as rec
from .group import ConsumerGroup
from .heartbeat import Change, Context
from .regex import resolve


def refresh_group(ctx: Context, group: ConsumerGroup, *, rewrite_regexes: bool) -> Change:
    change = Change()
    resolved = dict(group.resolved_regexes)
    regexes = sorted(group.regex_subscribers())
    topics_moved = False
    if regexes:
        fresh = resolve(regexes, ctx.image.names(), ctx.topics_version, ctx.now_ms)
        topics_moved = any(regex not in resolved or resolved[regex].topics != fresh[regex].topics
                           for regex in regexes)
        if topics_moved or rewrite_regexes:
            change.records.extend(rec.regular_expression(group.group_id, regex, fresh[regex]) for regex in regexes)
            resolved.update(fresh)
    metadata_hash = ctx.image.metadata_hash(group.subscribed_topic_counts({}, resolved).keys())
    if topics_moved or metadata_hash != group.metadata_hash:
        change.records.append(rec.group_epoch(group.group_id, group.group_epoch + 1, metadata_hash))
    if group.has_legacy_partition_metadata:
        # Kafka 4.1+ deletes a 4.0 subscription-metadata record whenever it checks the metadata.
        change.records.append(rec.partition_metadata_tombstone(group.group_id))
    return change


def regex_refresh_due_ms(group: ConsumerGroup, interval_ms: int) -> int | None:
    """When the group's regexes are next due for the periodic refresh (None: it has none).
    A subscribed regex with no resolution (from a log another broker wrote) is due at once."""
    regexes = group.regex_subscribers()
    if not regexes:
        return None
    stamps = [group.resolved_regexes[r].timestamp_ms if r in group.resolved_regexes else None for r in regexes]
    if any(stamp is None for stamp in stamps):
        return 0
    return min(stamps) + interval_ms
