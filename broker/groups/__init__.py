"""Consumer groups, in Kafka's two halves.

Membership (Kafka ``GroupCoordinator``): what a group is (``group``: state, members,
protocol; Kafka ``GroupMetadata``), what it does on each request and timer (``state``,
pure, effects out) and the coordinator that owns the groups and their timers
(``coordinator``). Offsets (Kafka ``GroupMetadataManager``): the offset manager
(``offset_manager``: commits, fetches, deletes, expiry, consumed retention, lag) over
the store and its internal ``__consumer_offsets`` log (``offsets``, in Kafka's record
schemas, ``schema``). ``consumer_protocol`` reads subscriptions; ``lag`` computes lag
in offsets and in time. The coordinator calls the manager; never the other way round.
"""
