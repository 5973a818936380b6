"""A broker around a ConsumerGroupManager for the test_modern_* tests: topics, a clock, the log.

Every record an operation writes is kept in ``log``, so a test can replay the log into a fresh
manager and compare (:meth:`Harness.replayed`).
"""

from __future__ import annotations

import itertools
import uuid

import pytest

from sundial.broker.groups.modern.errors import GroupError
from sundial.broker.groups.modern.manager import ConsumerGroupManager
from sundial.broker.groups.modern.records import CoordinatorRecord, decode_record, encode_record
from sundial.broker.groups.modern.requests import HeartbeatRequest, HeartbeatResult
from sundial.broker.groups.modern.settings import ConsumerGroupSettings

SESSION_MS = 45_000
INTERVAL_MS = 5_000
REBALANCE_MS = 5_000


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


class Harness:
    def __init__(self, topics: dict[str, int] | None = None, *, settings: ConsumerGroupSettings | None = None,
                 session_ms: int = SESSION_MS, interval_ms: int = INTERVAL_MS, classic: tuple[str, ...] = ()) -> None:
        self.topics: dict[str, tuple[uuid.UUID, int]] = {}
        for name, partitions in (topics or {}).items():
            self.topics[name] = (topic_id(name), partitions)
        self.settings = settings or ConsumerGroupSettings()
        self.session_ms = session_ms
        self.interval_ms = interval_ms
        self.classic = set(classic)
        self.now = 0
        self.log: list[CoordinatorRecord] = []
        ids = itertools.count(1)
        self.manager = self._manager(new_member_id=lambda: f"generated-{next(ids)}")

    def _manager(self, **kwargs) -> ConsumerGroupManager:
        return ConsumerGroupManager(self.settings, lambda: self.topics,
                                    lambda group_id: (self.session_ms, self.interval_ms),
                                    is_classic_group=lambda group_id: group_id in self.classic, **kwargs)

    # -- requests ----------------------------------------------------------------------------

    def hb(self, group_id: str, member_id: str, epoch: int, *, owned=None, **fields) -> HeartbeatResult:
        """A heartbeat; ``owned`` maps topic names to partitions (None: left out)."""
        if owned is not None:
            fields["topic_partitions"] = {self.id(name): parts for name, parts in owned.items()}
        request = HeartbeatRequest(group_id, member_id, epoch, **fields)
        result, records = self.manager.heartbeat(request, self.now, client_id="client", client_host="/127.0.0.1")
        self.log += records
        self.last_records = records
        return result

    def join(self, group_id: str, member_id: str, topics=(), *, regex=None, instance_id=None, assignor=None,
             version=1) -> HeartbeatResult:
        return self.hb(group_id, member_id, 0, rebalance_timeout_ms=REBALANCE_MS,
                       subscribed_topic_names=None if topics is None else list(topics),
                       subscribed_topic_regex=regex, instance_id=instance_id, server_assignor=assignor,
                       owned={}, version=version)

    def refused(self, error_code, call, *args, **kwargs) -> GroupError:
        log_size = len(self.log)
        with pytest.raises(GroupError) as e:
            call(*args, **kwargs)
        assert e.value.error_code == error_code, e.value
        assert len(self.log) == log_size
        return e.value

    # -- time and topics -----------------------------------------------------------------------

    def advance(self, ms: int) -> list[CoordinatorRecord]:
        self.now += ms
        records = self.manager.poll(self.now)
        self.log += records
        return records

    def create_topic(self, name: str, partitions: int) -> list[CoordinatorRecord]:
        self.topics[name] = (topic_id(name), partitions)
        return self._changed()

    def delete_topic(self, name: str) -> list[CoordinatorRecord]:
        del self.topics[name]
        return self._changed()

    def grow_topic(self, name: str, partitions: int) -> list[CoordinatorRecord]:
        self.topics[name] = (self.topics[name][0], partitions)
        return self._changed()

    def _changed(self) -> list[CoordinatorRecord]:
        records = self.manager.topics_changed(self.now)
        self.log += records
        return records

    # -- reading -------------------------------------------------------------------------------

    def id(self, name: str) -> uuid.UUID:
        return self.topics[name][0] if name in self.topics else topic_id(name)

    def named(self, assignment) -> dict[str, set[int]]:
        by_id = {tid: name for name, (tid, _) in self.topics.items()}
        return {by_id.get(tid, str(tid)): set(parts) for tid, parts in (assignment or {}).items()}

    def member(self, group_id: str, member_id: str):
        return self.manager.group(group_id).members[member_id]

    def replayed(self, *, through_bytes: bool = True) -> ConsumerGroupManager:
        """A fresh manager that replayed the log (through Kafka's byte format by default)."""
        fresh = self._manager()
        for record in self.log:
            if through_bytes:
                record = decode_record(*encode_record(record))
            fresh.replay(record)
        return fresh
