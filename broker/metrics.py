"""Prometheus metrics of the daemon, through the maintained ``prometheus_client`` library.

Per-request figures (request counts, latency histogram, failures, bytes in and out,
sendfile bytes) are plain Python counters updated on the loop thread — a dictionary
lookup and a few integer additions, no locks — and turned into Prometheus families
by a collector at scrape time: ``prometheus_client``'s own Counter/Histogram take a
mutex per update, which cost more than the rest of a small request's bookkeeping.
Rare events (retention deletions, refused connections, cleaner passes) use
``prometheus_client`` metrics directly. Per-partition gauges (log start
and end offsets, segment count, size, max timestamp) are not maintained on the
append path at all: a custom collector reads them from the log manager at scrape
time. The endpoint is off unless ``sundial.metrics.listener`` is set
(e.g. ``127.0.0.1:9404``).

Consumer-group lag is collected at scrape time too, from the coordinator's
``lag()`` (``broker.groups.lag``): per group and committed partition, the committed
offset, the lag in offsets (log end offset minus committed offset) and the lag in
time (now minus the timestamp of the oldest unconsumed record; 0 when caught up).

Groups per type are read at scrape time as well (:func:`group_rows`), after Kafka's
``kafka.coordinator.group:type=group-coordinator-metrics`` (``GroupCoordinatorMetrics``):
``sundial_groups{type,state}`` is Kafka's ``group-count{protocol}`` split by state as its
``consumer-group-count{state}`` and ``classic-group-count`` gauges are (every state of both
types is reported, 0 included); ``sundial_group_rebalances_total{type}`` is Kafka's
``group-completed-rebalance-count`` for ``classic`` (generations whose assignment was stored)
and ``consumer-group-rebalance-count`` for ``consumer`` (group epoch bumps; Kafka leaves out
the bumps of a member's removal, Sundial counts them too: the group rebalances all the same);
``sundial_group_fenced_members_total{type}`` (no Kafka counterpart; Kafka logs them) counts
members the coordinator removed because a timeout expired: for ``consumer`` the session or
rebalance timeout (fenced), for ``classic`` the session timeout or a missed JoinGroup/SyncGroup.
The counters live with the coordinator (plain integers it owns); the collector reads them.

Per partition the scrape also reports the oldest retained timestamp: the timestamp of
the first record at or after the log start offset (on a compacted topic the cleaner may
have removed the record at the log start offset itself), i.e. how far back a replay by
time can go (records with older CreateTimes may follow it; -1 when the partition holds no
record or its first record has no timestamp). Reading it costs a batch read, so the partition log keeps it
until its log start offset moves or a change rewrites offsets still in the log (a cleaner
swap, a truncation; not an append or a roll); an answer of "none yet" also until its log
end offset moves: ``PartitionLog.oldest_record_timestamp``, reported in its ``summary()``.
That batch is the partition's oldest data, the likeliest to have left the page cache, and
the rows are made on the loop: :func:`resident_partition_rows` reads them with a page-cache
probe, reads a range the probe refuses into the page cache on the scrape's own thread, and
then reads the rows again, so a scrape never makes the loop wait on the disk for it.

Internal topics (``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``: Kafka's
internal topics, :data:`broker.topics.INTERNAL_TOPICS`) have no per-partition series unless
``sundial.metrics.internal.topics.enabled=true``: with their 50 partitions each they would
outnumber a small broker's own topics (:class:`PartitionRows` leaves them out).

Security is counted where it is decided and read at scrape time (:func:`security_rows`):
``sundial_authentication_successes_total`` and ``sundial_authentication_failures_total`` per
listener and mechanism (Kafka's ``successful-authentication-total`` and
``failed-authentication-total``, per listener), from the security manager;
``sundial_authorization_denials_total`` per resource type and operation, from the authorizer.
``sundial_build_info{version,python}`` is 1 (Kafka's ``app-info`` version).

Process figures come from ``prometheus_client``'s own collectors: resident and virtual
memory, CPU seconds, open and maximum file descriptors, start time (``process_*``), the
garbage collector (``python_gc_*``) and ``python_info``. Counters carry no ``_created``
series (one more sample per label set, holding the time the label set first appeared,
which no dashboard of this broker uses).

Scrapes are served by ``prometheus_client``'s HTTP thread, but storage and the
coordinator belong to the event loop thread (``storage/`` is not thread-safe): the
scrape-time collectors therefore run their snapshot functions on the loop through
:func:`on_loop` and wait for the answer (a scrape while the loop is stuck for more
than ``timeout_s`` gets no per-partition or lag series rather than a race).
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import os
import platform
import time
from typing import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from sundial.protocol.api_keys import ApiKey
from sundial.records.framing import NotInPageCache

from . import __version__, page_cache
from .groups.consumer_groups import GROUP_TYPE_CONSUMER
from .groups.coordinator import GROUP_TYPE_CLASSIC
from .groups.group import GroupState
from .groups.modern.group import ConsumerGroupState
from .groups.share.group import STATES as SHARE_GROUP_STATES
from .groups.share_groups import GROUP_TYPE_SHARE
from .topics import INTERNAL_TOPICS

_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0, 30.0)


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


class BrokerMetrics:
    def __init__(self) -> None:
        disable_created_metrics()  # no *_created series (module doc)
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        # request path: plain counters, exported by _HotCollector
        self._requests: dict[tuple[int, int], list] = {}   # (key, version) -> [count, errors, sum_s, buckets]
        self._bad_frames = 0
        self._bytes_out = 0
        self._sendfile_bytes = 0
        self._in: dict[str, list[int]] = {}                  # topic -> [records, bytes]
        self._time_index_lookups = 0
        r.register(_HotCollector(self))
        Gauge("sundial_build_info", "Always 1: the broker's version and the Python that runs it",
              ["version", "python"], registry=r).labels(__version__, platform.python_version()).set(1)
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

        # log cleaner (Kafka's kafka.log:type=LogCleaner / LogCleanerManager gauges)
        self.cleaner_max_dirty_percent = Gauge(
            "sundial_log_cleaner_max_dirty_percent", "Largest dirty ratio of a compacted log at the last check (%)",
            registry=r)
        self.cleaner_last_pass_seconds = Gauge(
            "sundial_log_cleaner_last_pass_seconds", "Duration of the last cleaning pass", registry=r)
        self.cleaner_buffer_utilization_percent = Gauge(
            "sundial_log_cleaner_buffer_utilization_percent", "Offset map use in the last pass (%)", registry=r)
        self.cleaner_recopy_percent = Gauge(
            "sundial_log_cleaner_recopy_percent", "Bytes written over bytes read by the last pass (%)", registry=r)
        self.cleaner_max_compaction_delay_seconds = Gauge(
            "sundial_log_cleaner_max_compaction_delay_seconds",
            "How long the most overdue log has waited past max.compaction.lag.ms", registry=r)
        self.cleaner_uncleanable_partitions = Gauge(
            "sundial_log_cleaner_uncleanable_partitions", "Partitions the cleaner gave up on until restart",
            registry=r)
        self.cleaner_bytes_read = Counter("sundial_log_cleaner_bytes_read", "Log bytes read by cleaning passes",
                                          registry=r)
        self.cleaner_bytes_written = Counter("sundial_log_cleaner_bytes_written",
                                             "Bytes of cleaned segments written", registry=r)
        self.cleaner_passes = Counter("sundial_log_cleaner_passes", "Completed cleaning passes", registry=r)

        # client quotas (Kafka's Produce/Fetch/Request throttle-time sensors; docs/quotas.md)
        self._quota_throttle_seconds = Counter(
            "sundial_quota_throttle_seconds", "Throttle time given to clients over a client quota",
            ["quota_type", "user", "client_id"], registry=r)
        self._quota_throttled_requests = Counter(
            "sundial_quota_throttled_requests", "Responses throttled by a client quota",
            ["quota_type", "user", "client_id"], registry=r)

    # -- log cleaner -------------------------------------------------------------------------
    def cleaner_pass_done(self, bytes_read: int, bytes_written: int, seconds: float, utilization: float) -> None:
        self.cleaner_passes.inc()
        self.cleaner_bytes_read.inc(bytes_read)
        self.cleaner_bytes_written.inc(bytes_written)
        self.cleaner_last_pass_seconds.set(seconds)
        self.cleaner_buffer_utilization_percent.set(int(100 * utilization))
        self.cleaner_recopy_percent.set(int(100 * bytes_written / max(bytes_read, 1)))

    def cleaner_state(self, max_dirty_ratio: float, max_compaction_delay_ms: int, uncleanable: int) -> None:
        self.cleaner_max_dirty_percent.set(int(100 * max_dirty_ratio))
        self.cleaner_max_compaction_delay_seconds.set(max_compaction_delay_ms // 1000)
        self.cleaner_uncleanable_partitions.set(uncleanable)

    # -- request path ----------------------------------------------------------------------
    def request_done(self, api_key: int, api_version: int, seconds: float, error: bool = False) -> None:
        stats = self._requests.get((api_key, api_version))
        if stats is None:
            stats = self._requests[(api_key, api_version)] = [0, 0, 0.0, [0] * (len(_LATENCY_BUCKETS) + 1)]
        stats[0] += 1
        stats[2] += seconds
        stats[3][bisect.bisect_left(_LATENCY_BUCKETS, seconds)] += 1
        if error:
            stats[1] += 1

    def time_index_lookup(self) -> None:
        self._time_index_lookups += 1

    def bad_frame(self) -> None:
        self._bad_frames += 1

    def bytes_out_added(self, n: int) -> None:
        self._bytes_out += n

    def sendfile_bytes_added(self, n: int) -> None:
        self._sendfile_bytes += n

    def appended(self, topic: str, records: int, size_bytes: int) -> None:
        counts = self._in.get(topic)
        if counts is None:
            counts = self._in[topic] = [0, 0]
        counts[0] += records
        counts[1] += size_bytes

    def connection_refused(self, reason: str) -> None:
        self._connections_refused.labels(reason).inc()

    def quota_throttled(self, quota_type: str, user: str, client_id: str, throttle_ms: int) -> None:
        """A response was throttled by a client quota (labels bounded by broker.quotas)."""
        self._quota_throttle_seconds.labels(quota_type, user, client_id).inc(throttle_ms / 1000.0)
        self._quota_throttled_requests.labels(quota_type, user, client_id).inc()

    def install_partition_collector(self, snapshot: Callable[[], list[dict]]) -> None:
        """Register gauges read at scrape time from ``snapshot()`` rows.

        Each row: topic, partition, log_start_offset, log_end_offset, segment_count, size_bytes,
        max_timestamp_ms, oldest_timestamp_ms (:class:`PartitionRows` makes them).
        """
        self.registry.register(RowCollector(dict_rows(snapshot, ("topic", "partition"), _partition_families),
                                                _partition_families))

    def install_group_lag_collector(self, snapshot: Callable[[], list[dict]]) -> None:
        """Register consumer-group lag gauges read at scrape time from ``snapshot()`` rows.

        Each row: group, topic, partition, committed_offset, offset_lag, time_lag_ms
        (``None`` when unknown: no series for that row).
        """
        self.registry.register(RowCollector(
            dict_rows(snapshot, ("group", "topic", "partition"), _group_lag_families), _group_lag_families))


    def install_security_collector(self, snapshot: Callable[[], list[tuple]]) -> None:
        """Register the authentication and authorization counters read at scrape time from
        ``snapshot()`` rows (``(family, {label: value}, number)``, :func:`security_rows` makes them)."""
        self.registry.register(RowCollector(snapshot, _security_families, _SECURITY_LABELS))

    def install_group_collector(self, snapshot: Callable[[], list[tuple]]) -> None:
        """Register the per-type group series read at scrape time from ``snapshot()`` rows
        (``(family, {label: value}, number)``, :func:`group_rows` makes them)."""
        self.registry.register(RowCollector(snapshot, _group_families, _GROUP_LABELS))


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], list], timeout_s: float = 5.0, *,
            discard: Callable[[object], None] | None = None) -> Callable[[], list]:
    """A function for another thread that runs ``fn`` on ``loop``'s thread and returns its result.

    Called on the loop's own thread it runs ``fn`` directly. On timeout, a closed loop
    or an error in ``fn`` it returns an empty list (a scrape must never fail). ``discard``
    gets a result that came after the caller stopped waiting (to release what it holds).
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
            if not future.cancel() and discard is not None:   # running: its result comes later
                future.add_done_callback(lambda done: None if done.exception() else discard(done.result()))
            return []

    return call


def resident_partition_rows(loop: asyncio.AbstractEventLoop, rows: "PartitionRows",
                            timeout_s: float = 5.0) -> Callable[[], list[dict]]:
    """For the scrape thread: :class:`PartitionRows` made on the loop without waiting on the disk.

    The rows are read on the loop with a page-cache probe; the ranges it refuses come back as
    descriptors of their own, are read into the page cache on this thread, and the rows are
    read again (a second refusal reads as it is, as a Fetch does).
    """
    probed = on_loop(loop, lambda: rows.read(page_cache.cached), timeout_s, discard=_close_cold)
    plain = on_loop(loop, lambda: rows.read(None), timeout_s)

    def call() -> list[dict]:
        got = probed()
        if not got:
            return []
        result, cold = got
        if not cold:
            return result
        rows.warms += 1
        page_cache.warm(cold)
        again = plain()
        return again[0] if again else []

    return call


def _close_cold(got) -> None:
    """The descriptors of a probed read whose caller gave up waiting."""
    for fd, _, _ in got[1]:
        try:
            os.close(fd)
        except OSError:
            pass


class PartitionRows:
    """Rows of the per-partition gauges for the open partitions of a log manager (call on the loop).

    ``oldest_timestamp_ms`` is the timestamp of the record at the log start offset; it is
    read once and kept until that offset moves, the partition empties or fills, or the
    log is replaced (a topic deleted and created again). Transactions: open transactions,
    the last stable offset, its lag behind the high watermark (offsets) and the age of
    the oldest open transaction (ms since its first append; 0 when none).
    """

    def __init__(self, logs: Callable[[], object], now_ms: Callable[[], int] | None = None, *,
                 internal_topics: bool = False) -> None:
        self._logs = logs
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))
        self._internal_topics = internal_topics   # sundial.metrics.internal.topics.enabled
        self.warms = 0   # scrapes that read a range into the page cache first (resident_partition_rows)

    def __call__(self) -> list[dict]:
        return self.read(None)[0]

    def read(self, probe: Callable[[int, int, int], bool] | None) -> tuple[list[dict], list[tuple[int, int, int]]]:
        """The rows, and the ranges ``probe`` (a page-cache probe) refused as ``(fd, position,
        size)`` with descriptors of their own (:func:`page_cache.own`; :func:`page_cache.warm`
        closes them). A partition with a refused range has no row."""
        logs = self._logs()
        rows: list[dict] = []
        cold: list[tuple[int, int, int]] = []
        if logs is None:
            return rows, cold
        for meta in logs.topics():
            if meta.name in INTERNAL_TOPICS and not self._internal_topics:
                continue
            for p in range(meta.partitions):
                if not logs.is_open(meta.name, p):
                    continue
                plog = logs.get_log(meta.name, p)
                if plog is None:
                    continue
                try:
                    summary = plog.summary(probe)
                except NotInPageCache as miss:
                    cold.append((miss.fd, miss.position, max(miss.size, page_cache.HEADER_WARM_BYTES)))
                    continue
                rows.append({"topic": meta.name, "partition": p, **summary,
                             **plog.transaction_summary(self._now_ms())})
        return rows, page_cache.own(cold)


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


#: Every state of each group type, in Kafka's names (classic: Kafka ``ClassicGroupState``; consumer:
#: ``ConsumerGroup.ConsumerGroupState``): reported even when no group is in it.
GROUP_TYPE_STATES = {
    GROUP_TYPE_CLASSIC: tuple(s.value for s in GroupState),
    GROUP_TYPE_CONSUMER: tuple(s.value for s in ConsumerGroupState),
    GROUP_TYPE_SHARE: SHARE_GROUP_STATES,
}


def group_rows(coordinator) -> list[tuple]:
    """The per-type group series of the coordinator, for :meth:`BrokerMetrics.install_group_collector`."""
    if coordinator is None:
        return []
    counts = {(t, state): 0 for t, states in GROUP_TYPE_STATES.items() for state in states}
    for group in list(coordinator.groups.values()):
        key = (GROUP_TYPE_CLASSIC, group.state.value)
        counts[key] = counts.get(key, 0) + 1
    for listed in coordinator.consumer.list_groups():
        key = (GROUP_TYPE_CONSUMER, listed.state)
        counts[key] = counts.get(key, 0) + 1
    share = getattr(coordinator, "share", None)
    for listed in share.list_groups() if share is not None else ():
        key = (GROUP_TYPE_SHARE, listed.state)
        counts[key] = counts.get(key, 0) + 1
    rows: list[tuple] = [("groups", {"type": t, "state": state}, n) for (t, state), n in sorted(counts.items())]
    consumer = coordinator.consumer
    rows += [("rebalances", {"type": GROUP_TYPE_CLASSIC}, coordinator.completed_rebalances),
             ("rebalances", {"type": GROUP_TYPE_CONSUMER}, consumer.record_log.rebalances),
             ("fenced_members", {"type": GROUP_TYPE_CLASSIC}, coordinator.expired_members),
             ("fenced_members", {"type": GROUP_TYPE_CONSUMER}, consumer.record_log.fenced_members)]
    if share is not None:
        rows += [("rebalances", {"type": GROUP_TYPE_SHARE}, share.record_log.rebalances),
                 ("fenced_members", {"type": GROUP_TYPE_SHARE}, share.record_log.fenced_members)]
    return rows


def security_rows(security, authorizer) -> list[tuple]:
    """The authentication and authorization counters, for :meth:`BrokerMetrics.install_security_collector`
    (either part may be None: no SASL listener, no authorizer)."""
    rows: list[tuple] = []
    for listener, mechanism, successes, failures in security.authentication_counts() if security else ():
        labels = {"listener": listener, "mechanism": mechanism}
        rows += [("authentication_successes", labels, successes), ("authentication_failures", labels, failures)]
    for resource_type, operation, denials in authorizer.denial_counts() if authorizer else ():
        rows.append(("authorization_denials", {"resource_type": resource_type, "operation": operation}, denials))
    return rows


class _HotCollector:
    """Prometheus families of the per-request counters (read at scrape time)."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._m = metrics

    def describe(self):
        return []

    def collect(self):
        m = self._m
        requests = CounterMetricFamily("sundial_requests", "Requests handled, by API and version",
                                       labels=["api", "version"])
        failures = CounterMetricFamily("sundial_request_failures", "Requests that failed inside the broker",
                                       labels=["api", "version"])
        latency = HistogramMetricFamily("sundial_request_latency_seconds", "Time from decode to response written",
                                        labels=["api", "version"])
        for (api_key, version), (count, errors, total_s, buckets) in sorted(list(m._requests.items())):
            labels = [_api_name(api_key), str(version)]
            requests.add_metric(labels, count)
            failures.add_metric(labels, errors)
            cumulative, running = [], 0
            for bound, n in zip((*_LATENCY_BUCKETS, float("inf")), list(buckets)):
                running += n
                cumulative.append(("+Inf" if bound == float("inf") else repr(bound), running))
            latency.add_metric(labels, cumulative, total_s)
        bad = CounterMetricFamily("sundial_bad_frames", "Frames refused (malformed, oversized, unsupported)",
                                  value=m._bad_frames)
        out = CounterMetricFamily("sundial_bytes_out", "Response bytes written to clients", value=m._bytes_out)
        sendfile = CounterMetricFamily("sundial_sendfile_bytes", "Fetch bytes sent with sendfile (zero copy)",
                                       value=m._sendfile_bytes)
        lookups = CounterMetricFamily("sundial_time_index_lookups", "Timestamp lookups (ListOffsets by time)",
                                      value=m._time_index_lookups)
        records_in = CounterMetricFamily("sundial_records_in", "Records appended", labels=["topic"])
        bytes_in = CounterMetricFamily("sundial_bytes_in", "Record bytes appended by producers", labels=["topic"])
        for topic, (records, size) in sorted(list(m._in.items())):
            records_in.add_metric([topic], records)
            bytes_in.add_metric([topic], size)
        return [requests, failures, latency, bad, out, sendfile, lookups, records_in, bytes_in]


class RowCollector:
    """A collector of series read at scrape time: ``families()`` builds them fresh by name, and each
    ``(family, labels, value)`` row of ``snapshot()`` adds a sample. ``labels`` is the label values in
    order or, with ``label_names`` (family → names), a mapping of label name to value."""

    def __init__(self, snapshot: Callable[[], list[tuple]], families: Callable[[], dict],
                 label_names: dict[str, tuple[str, ...]] | None = None) -> None:
        self._snapshot = snapshot
        self._families = families
        self._label_names = label_names

    def describe(self):
        return []

    def collect(self):
        fams = self._families()
        for family, labels, value in self._snapshot():
            names = None if self._label_names is None else self._label_names[family]
            fams[family].add_metric(list(labels) if names is None else [labels[name] for name in names], value)
        return list(fams.values())


def dict_rows(snapshot: Callable[[], list[dict]], label_keys: tuple[str, ...],
              families: Callable[[], dict]) -> Callable[[], list[tuple]]:
    """:class:`RowCollector` rows from rows that are dicts: the label values under ``label_keys``,
    one sample for each family whose key the row holds with a value other than None."""
    names = tuple(families())

    def rows() -> list[tuple]:
        out = []
        for row in snapshot():
            labels = [str(row[key]) for key in label_keys]
            out += [(name, labels, row[name]) for name in names if row.get(name) is not None]
        return out
    return rows


def _partition_families() -> dict:
    labels = ["topic", "partition"]
    return {
        "log_start_offset": GaugeMetricFamily("sundial_log_start_offset", "Log start offset", labels=labels),
        "log_end_offset": GaugeMetricFamily("sundial_log_end_offset", "Log end offset", labels=labels),
        "segment_count": GaugeMetricFamily("sundial_log_segments", "Segments in the partition log", labels=labels),
        "size_bytes": GaugeMetricFamily("sundial_log_size_bytes", "Bytes in the partition log", labels=labels),
        "max_timestamp_ms": GaugeMetricFamily("sundial_log_max_timestamp_ms",
                                              "Largest record timestamp in the partition (-1 if none)",
                                              labels=labels),
        "oldest_timestamp_ms": GaugeMetricFamily(
            "sundial_log_oldest_timestamp_ms",
            "Timestamp of the first retained record, at the log start offset: how far back a replay by "
            "time can go (-1 if none)", labels=labels),
        "open_transactions": GaugeMetricFamily("sundial_log_open_transactions",
                                               "Transactions open in the partition (no marker yet)", labels=labels),
        "last_stable_offset": GaugeMetricFamily("sundial_log_last_stable_offset",
                                                "Last stable offset (read_committed readers stop here)",
                                                labels=labels),
        "last_stable_offset_lag": GaugeMetricFamily(
            "sundial_log_last_stable_offset_lag", "High watermark minus last stable offset (offsets)",
            labels=labels),
        "oldest_open_transaction_ms": GaugeMetricFamily(
            "sundial_log_oldest_open_transaction_ms",
            "Age of the oldest open transaction in ms (how long the last stable offset has been held; 0 if none)",
            labels=labels),
    }


def _group_lag_families() -> dict:
    labels = ["group", "topic", "partition"]
    return {
        "committed_offset": GaugeMetricFamily("sundial_consumer_group_committed_offset",
                                              "Committed offset of a consumer group", labels=labels),
        "offset_lag": GaugeMetricFamily("sundial_consumer_group_lag",
                                        "Consumer group lag in offsets (log end offset minus committed offset)",
                                        labels=labels),
        "time_lag_ms": GaugeMetricFamily("sundial_consumer_group_lag_ms",
                                         "Consumer group lag in time: now minus the timestamp of the oldest "
                                         "unconsumed record (0 when caught up)", labels=labels),
    }


#: The label names of each family of :func:`group_rows` and :func:`security_rows`.
_GROUP_LABELS = {"groups": ("type", "state"), "rebalances": ("type",), "fenced_members": ("type",)}
_SECURITY_LABELS = {"authentication_successes": ("listener", "mechanism"),
                    "authentication_failures": ("listener", "mechanism"),
                    "authorization_denials": ("resource_type", "operation")}


def _group_families() -> dict:
    labels = _GROUP_LABELS
    return {
        "groups": GaugeMetricFamily("sundial_groups", "Groups by type (classic, consumer) and state",
                                    labels=list(labels["groups"])),
        "rebalances": CounterMetricFamily(
            "sundial_group_rebalances",
            "Rebalances by group type: classic generations completed, consumer group epoch bumps",
            labels=list(labels["rebalances"])),
        "fenced_members": CounterMetricFamily(
            "sundial_group_fenced_members",
            "Members removed by the coordinator because their session or rebalance timeout expired",
            labels=list(labels["fenced_members"])),
    }


def _security_families() -> dict:
    labels = _SECURITY_LABELS
    return {
        "authentication_successes": CounterMetricFamily(
            "sundial_authentication_successes", "SASL authentications that succeeded, by listener and mechanism",
            labels=list(labels["authentication_successes"])),
        "authentication_failures": CounterMetricFamily(
            "sundial_authentication_failures",
            "Failed SASL authentications (wrong credentials, a mechanism not enabled, a request before "
            "authentication), by listener and mechanism", labels=list(labels["authentication_failures"])),
        "authorization_denials": CounterMetricFamily(
            "sundial_authorization_denials", "Requests an ACL refused, by resource type and operation",
            labels=list(labels["authorization_denials"])),
    }
