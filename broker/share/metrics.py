"""Prometheus series of the share fetch path, read at scrape time from the share-partition manager
(after Kafka's ``SharePartitionMetrics`` and ``ShareGroupMetrics``, as Sundial names its series):

* ``sundial_share_in_flight_records{group}``: records between the SPSO and the end offset of the
  group's loaded share-partitions (what ``group.share.partition.max.record.locks`` caps);
* ``sundial_share_acquired_records_total{group}`` and ``sundial_share_redelivered_records_total{group}``
  (acquired with a delivery count above 1);
* ``sundial_share_acknowledged_records_total{group}``, ``sundial_share_released_records_total{group}``
  (RELEASE, member departure, connection drop), ``sundial_share_archived_records_total{group}``
  (REJECT, GAP, the delivery-count limit);
* ``sundial_share_lock_expired_records_total{group}``: records whose acquisition lock ran out;
* ``sundial_share_lag{group,topic,partition}``: records not yet delivered to completion (KIP-1226);
* ``sundial_share_sessions``: open share sessions.
"""

from __future__ import annotations

from typing import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..metrics import RowCollector

_COUNTERS = (
    ("acquired_records", "Records acquired by share consumers"),
    ("redelivered_records", "Records acquired again after an earlier delivery"),
    ("acknowledged_records", "Records accepted by share consumers"),
    ("released_records", "Records made available again by RELEASE, member departure or connection drop"),
    ("archived_records", "Records archived: rejected, gaps, or past the delivery-count limit"),
    ("lock_expired_records", "Records whose acquisition lock ran out before they were acknowledged"),
)


def share_rows(manager) -> list[tuple]:
    """``(family, labels, value)`` rows of the manager's state, taken on the event loop."""
    if manager is None:
        return []
    rows: list[tuple] = [("sessions", (), len(manager.sessions))]
    groups = set(manager.stats) | {key[0] for key in manager.loaded()}
    for group in sorted(groups):
        rows.append(("in_flight_records", (group,), manager.in_flight_records(group)))
        stats = manager.group_stats(group)
        for name, _ in _COUNTERS:
            rows.append((name, (group,), getattr(stats, name)))
    for group, topic, partition in sorted(manager.loaded()):
        lag = manager.lag(group, topic, partition)
        if lag is not None:
            rows.append(("lag", (group, topic, str(partition)), lag))
    return rows


def _families() -> dict:
    fams = {
        "sessions": GaugeMetricFamily("sundial_share_sessions", "Open share sessions"),
        "in_flight_records": GaugeMetricFamily(
            "sundial_share_in_flight_records", "Records in flight in the group's share-partitions",
            labels=["group"]),
        "lag": GaugeMetricFamily("sundial_share_lag", "Records of the share-partition not yet delivered to "
                                 "completion", labels=["group", "topic", "partition"]),
    }
    for name, doc in _COUNTERS:
        fams[name] = CounterMetricFamily(f"sundial_share_{name}", doc, labels=["group"])
    return fams


def ShareCollector(snapshot: Callable[[], list[tuple]]) -> RowCollector:
    """The families above from ``snapshot()`` rows (:func:`share_rows` run on the loop)."""
    return RowCollector(snapshot, _families)
