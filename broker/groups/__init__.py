"""Consumer groups: the state machine (``state``), the coordinator with its timers
(``coordinator``), committed offsets in the internal ``__consumer_offsets`` log
(``offsets``, ``schema``) and consumer lag in offsets and in time (``lag``)."""
