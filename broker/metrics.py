"""Prometheus metrics of the daemon, through the maintained ``prometheus_client`` library.

Counters and histograms are updated on the request path through cached label
children (a dictionary lookup and an increment). Per-partition gauges (log start
and end offsets, segment count, size, max timestamp) are not maintained on the
append path at all: a custom collector reads them from the log manager at scrape
time. The endpoint is off unless ``sundial.metrics.listener`` is set
(e.g. ``127.0.0.1:9404``).

Consumer-group lag is collected at scrape time too, from the coordinator's
``lag()`` (``broker.groups.lag``): per group and committed partition, the committed
offset, the lag in offsets (log end offset minus committed offset) and the lag in
time (now minus the timestamp of the oldest unconsumed record; 0 when caught up).

Scrapes are served by ``prometheus_client``'s HTTP thread, but storage and the
coordinator belong to the event loop thread (``storage/`` is not thread-safe): the
scrape-time collectors therefore run their snapshot functions on the loop through
:func:`on_loop` and wait for the answer (a scrape while the loop is stuck for more
than ``timeout_s`` gets no per-partition or lag series rather than a race).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from protocol.api_keys import ApiKey

_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0, 30.0)


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._requests = Counter("sundial_requests", "Requests handled, by API and version",
                                 ["api", "version"], registry=r)
        self._request_errors = Counter("sundial_request_failures", "Requests that failed inside the broker",
                                       ["api", "version"], registry=r)
        self._latency = Histogram("sundial_request_latency_seconds", "Time from decode to response written",
                                  ["api", "version"], buckets=_LATENCY_BUCKETS, registry=r)
        self._bad_frames = Counter("sundial_bad_frames", "Frames refused (malformed, oversized, unsupported)",
                                   registry=r)
        self._bytes_in = Counter("sundial_bytes_in", "Record bytes appended by producers", ["topic"], registry=r)
        self._bytes_out = Counter("sundial_bytes_out", "Response bytes written to clients", registry=r)
        self._sendfile_bytes = Counter("sundial_sendfile_bytes", "Fetch bytes sent with sendfile (zero copy)",
                                       registry=r)
        self._records_in = Counter("sundial_records_in", "Records appended", ["topic"], registry=r)
        self.connections = Gauge("sundial_connections", "Open client connections", registry=r)
        self._connections_refused = Counter("sundial_connections_refused", "Connections refused by limits",
                                            ["reason"], registry=r)
        self.retention_deleted_segments = Counter(
            "sundial_retention_deleted_segments", "Segments deleted by retention", ["topic", "partition", "reason"],
            registry=r)
        self.consumed_retention_holds = Counter(
            "sundial_consumed_retention_holds",
            "Retention passes in which a consumer group held back a segment consumed retention would delete",
            ["topic", "partition", "group"], registry=r)
        self.time_index_lookups = Counter("sundial_time_index_lookups", "Timestamp lookups (ListOffsets by time)",
                                          registry=r)
        self._children: dict = {}

    # -- request path ----------------------------------------------------------------------
    def request_done(self, api_key: int, api_version: int, seconds: float, error: bool = False) -> None:
        key = (api_key, api_version)
        child = self._children.get(key)
        if child is None:
            labels = (_api_name(api_key), str(api_version))
            child = (self._requests.labels(*labels), self._latency.labels(*labels),
                     self._request_errors.labels(*labels))
            self._children[key] = child
        child[0].inc()
        child[1].observe(seconds)
        if error:
            child[2].inc()

    def bad_frame(self) -> None:
        self._bad_frames.inc()

    def bytes_out_added(self, n: int) -> None:
        self._bytes_out.inc(n)

    def sendfile_bytes_added(self, n: int) -> None:
        self._sendfile_bytes.inc(n)

    def appended(self, topic: str, records: int, size_bytes: int) -> None:
        self._records_in.labels(topic).inc(records)
        self._bytes_in.labels(topic).inc(size_bytes)

    def connection_refused(self, reason: str) -> None:
        self._connections_refused.labels(reason).inc()

    def install_partition_collector(self, snapshot: Callable[[], list[dict]]) -> None:
        """Register gauges read at scrape time from ``snapshot()`` rows.

        Each row: topic, partition, log_start_offset, log_end_offset, segment_count, size_bytes,
        max_timestamp_ms.
        """
        self.registry.register(_PartitionCollector(snapshot))

    def install_group_lag_collector(self, snapshot: Callable[[], list[dict]]) -> None:
        """Register consumer-group lag gauges read at scrape time from ``snapshot()`` rows.

        Each row: group, topic, partition, committed_offset, offset_lag, time_lag_ms
        (``None`` when unknown: no series for that row).
        """
        self.registry.register(_GroupLagCollector(snapshot))


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], list], timeout_s: float = 5.0) -> Callable[[], list]:
    """A function for another thread that runs ``fn`` on ``loop``'s thread and returns its result.

    Called on the loop's own thread it runs ``fn`` directly. On timeout, a closed loop
    or an error in ``fn`` it returns an empty list (a scrape must never fail).
    """

    def call() -> list:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            return fn()
        if loop.is_closed():
            return []
        future: concurrent.futures.Future = concurrent.futures.Future()

        def work() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                    future.set_exception(exc)

        try:
            loop.call_soon_threadsafe(work)
            return future.result(timeout_s)
        except Exception:  # noqa: BLE001 - timeout, closed loop, snapshot error
            future.cancel()
            return []

    return call


def group_lag_rows(coordinator) -> list[dict]:
    """Lag rows of every group the coordinator knows, for :meth:`BrokerMetrics.install_group_lag_collector`."""
    if coordinator is None:
        return []
    rows = []
    for group_id in coordinator.group_ids():
        for lag in coordinator.lag(group_id):
            rows.append({"group": group_id, "topic": lag.topic, "partition": lag.partition,
                         "committed_offset": lag.committed_offset, "offset_lag": lag.offset_lag,
                         "time_lag_ms": lag.time_lag_ms})
    return rows


class _PartitionCollector:
    def __init__(self, snapshot: Callable[[], list[dict]]) -> None:
        self._snapshot = snapshot

    def describe(self):
        return []

    def collect(self):
        fams = {
            "log_start_offset": GaugeMetricFamily("sundial_log_start_offset", "Log start offset",
                                                  labels=["topic", "partition"]),
            "log_end_offset": GaugeMetricFamily("sundial_log_end_offset", "Log end offset",
                                                labels=["topic", "partition"]),
            "segment_count": GaugeMetricFamily("sundial_log_segments", "Segments in the partition log",
                                               labels=["topic", "partition"]),
            "size_bytes": GaugeMetricFamily("sundial_log_size_bytes", "Bytes in the partition log",
                                            labels=["topic", "partition"]),
            "max_timestamp_ms": GaugeMetricFamily("sundial_log_max_timestamp_ms",
                                                  "Largest record timestamp in the partition (-1 if none)",
                                                  labels=["topic", "partition"]),
        }
        for row in self._snapshot():
            labels = [row["topic"], str(row["partition"])]
            for key, fam in fams.items():
                if row.get(key) is not None:
                    fam.add_metric(labels, row[key])
        return list(fams.values())


class _GroupLagCollector:
    def __init__(self, snapshot: Callable[[], list[dict]]) -> None:
        self._snapshot = snapshot

    def describe(self):
        return []

    def collect(self):
        labels = ["group", "topic", "partition"]
        fams = {
            "committed_offset": GaugeMetricFamily("sundial_consumer_group_committed_offset",
                                                  "Committed offset of a consumer group", labels=labels),
            "offset_lag": GaugeMetricFamily("sundial_consumer_group_lag",
                                            "Consumer group lag in offsets (log end offset minus committed offset)",
                                            labels=labels),
            "time_lag_ms": GaugeMetricFamily("sundial_consumer_group_lag_ms",
                                             "Consumer group lag in time: now minus the timestamp of the oldest "
                                             "unconsumed record (0 when caught up)", labels=labels),
        }
        for row in self._snapshot():
            values = [row["group"], row["topic"], str(row["partition"])]
            for key, fam in fams.items():
                if row.get(key) is not None:
                    fam.add_metric(values, row[key])
        return list(fams.values())
