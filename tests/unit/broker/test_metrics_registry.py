"""The broker's Prometheus registry: process collectors in, ``_created`` series out."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sundial.broker.metrics import BrokerMetrics


def test_registry_has_process_collectors_and_no_created_series():
    m = BrokerMetrics()
    m.connection_refused("max.connections")
    m.retention_deleted_segments.labels("t", "0", "retention_ms").inc()
    m.consumed_retention_holds.labels("t", "0", "g").inc()
    m.request_done(0, 9, 0.001)
    text = generate_latest(m.registry).decode()
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert {"process_resident_memory_bytes", "process_virtual_memory_bytes", "process_cpu_seconds_total",
            "process_open_fds", "process_max_fds", "process_start_time_seconds", "python_info"} <= names
    assert {"sundial_connections_refused_total", "sundial_retention_deleted_segments_total",
            "sundial_consumed_retention_holds_total", "sundial_requests_total"} <= names
    assert [n for n in names if n.endswith("_created")] == []
