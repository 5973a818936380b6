"""The two checkpoint files have intervals of their own, as in Kafka: recovery points every
``log.flush.offset.checkpoint.interval.ms``, log start offsets every
``log.flush.start.offset.checkpoint.interval.ms`` (0 turns a task off; a clean shutdown writes both).
Observed through the files in the data directory (Kafka's checkpoint format), never a sleep."""

from __future__ import annotations

import os

from support.waiting import wait_for

from .clients import topic_with_deleted_records


def _entries(path: str) -> dict[tuple[str, int], int]:
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    out = {}
    for line in lines[2:]:
        topic, partition, offset = line.rsplit(" ", 2)
        out[(topic, int(partition))] = int(offset)
    return out


def test_log_start_offsets_are_checkpointed_on_their_own_interval(broker_factory):
    d = broker_factory(**{"log.flush.offset.checkpoint.interval.ms": "0",
                          "log.flush.start.offset.checkpoint.interval.ms": "200"}).start()
    topic = topic_with_deleted_records(d.bootstrap, "ckpt", 10, 6)
    start_file = os.path.join(d.data_dir, "log-start-offset-checkpoint")
    wait_for(lambda: _entries(start_file).get((topic, 0)) == 6, 60, "the log start offset checkpoint")
    # the recovery-point task is off: that file holds nothing of this topic until the shutdown
    recovery_file = os.path.join(d.data_dir, "recovery-point-offset-checkpoint")
    assert (topic, 0) not in _entries(recovery_file)
    assert d.stop() == 0
    assert _entries(recovery_file).get((topic, 0)) == 10
