"""Share groups (KIP-932): "Kafka as a queue". Many consumers read one partition together; each record is
acquired by one consumer at a time under a time-limited lock, acknowledged one by one (accept,
release, reject), delivered again when released or when its lock runs out, and archived after a
delivery-count limit.

The pieces, bottom up:

* :mod:`.state_batch`: the record states and the state that is persisted (Kafka ``ShareSnapshot`` /
  ``ShareUpdate``: start offset, state epoch, state batches with delivery counts);
* :mod:`.locks`: acquisition locks as deadlines (Kafka ``AcquisitionLockTimerTask``);
* :mod:`.in_flight`: one in-flight record batch, tracked whole or per offset (Kafka ``InFlightBatch``,
  ``InFlightState``);
* :mod:`.cached_state`: the in-flight batches ordered by first offset (Kafka's ``cachedState``);
* :mod:`.window`: the in-flight window: start offset (SPSO), end offset, where the next fetch reads;
* :mod:`.acquisition` and :mod:`.acknowledgement`: the value types of the two requests, and
  :mod:`.errors` the refusal of an acknowledgement with Kafka's error code;
* :mod:`.partition`: :class:`~.partition.SharePartition`, the share-partition engine of one
  (group, topic-partition), a pure state machine whose clock is a parameter (Kafka ``SharePartition``).
"""
