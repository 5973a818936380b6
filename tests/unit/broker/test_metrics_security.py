"""Security metrics, the build-info gauge, internal topics in the per-partition series, and the
per-address limit on the authentication-failure log."""

from __future__ import annotations

import platform
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sundial.broker import __version__
from sundial.broker.metrics import BrokerMetrics, PartitionRows, security_rows
from sundial.broker.sasl import FailureLogLimit
from sundial.broker.topics import INTERNAL_TOPICS


def _samples(metrics: BrokerMetrics) -> dict[tuple, float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


# -- the failure log limit ----------------------------------------------------------------------------
def _model(events: list[tuple[str, float]], interval: float) -> list[int | None]:
    """Brute force: a failure is logged when no line of its address was logged within the interval
    before it; a logged line carries the failures of that address since its previous line."""
    out: list[int | None] = []
    for i, (address, t) in enumerate(events):
        lines = [j for j in range(i) if events[j][0] == address and out[j] is not None]
        if lines and t - events[lines[-1]][1] < interval:
            out.append(None)
            continue
        since = lines[-1] + 1 if lines else 0
        out.append(sum(1 for j in range(since, i) if events[j][0] == address) if lines else 0)
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["10.0.0.1", "10.0.0.2", "::1"]), st.integers(0, 30)), max_size=60),
       st.sampled_from([0, 1, 5, 10]))
def test_failure_log_limit_agrees_with_a_brute_force_model(steps, interval):
    now = [0.0]
    limit = FailureLogLimit(interval, clock=lambda: now[0])
    events, got = [], []
    for address, gap in steps:
        now[0] += gap / 10
        events.append((address, now[0]))
        got.append(limit.failure(address))
    assert got == _model(events, interval)


def test_failure_log_limit_counts_what_it_held_back():
    now = [100.0]
    limit = FailureLogLimit(10, clock=lambda: now[0])
    assert limit.failure("a") == 0          # the first one is logged
    assert [limit.failure("a") for _ in range(37)] == [None] * 37
    assert limit.failure("b") == 0          # another address has its own budget
    now[0] += 10
    assert limit.failure("a") == 37         # the next line carries the 37 held back
    assert limit.failure("a") is None


def test_failure_log_limit_forgets_quiet_addresses_first():
    now = [0.0]
    limit = FailureLogLimit(10, clock=lambda: now[0], max_addresses=3)
    limit.failure("a")
    limit.failure("b")
    now[0] = 6.0
    limit.failure("c")
    now[0] = 12.0
    assert limit.failure("d") == 0          # full: a and b (last line 12 s ago) make room
    now[0] = 13.0
    assert limit.failure("c") is None       # c's line at 6 s is remembered and still within the interval
    assert limit.failure("a") == 0          # a was forgotten: a first failure again


# -- security counters --------------------------------------------------------------------------------
class _Security:
    def __init__(self, counts):
        self.counts = counts

    def authentication_counts(self):
        return self.counts


class _Authorizer:
    def denial_counts(self):
        return [("TOPIC", "DESCRIBE", 4), ("CLUSTER", "CREATE", 1)]


def test_security_counters_are_exported_by_listener_mechanism_resource_and_operation():
    m = BrokerMetrics()
    security = _Security([("SASL_PLAINTEXT", "SCRAM-SHA-256", 2, 5), ("SASL_SSL", "PLAIN", 1, 0)])
    m.install_security_collector(lambda: security_rows(security, _Authorizer()))
    got = _samples(m)
    assert got[("sundial_authentication_failures_total",
                (("listener", "SASL_PLAINTEXT"), ("mechanism", "SCRAM-SHA-256")))] == 5
    assert got[("sundial_authentication_successes_total",
                (("listener", "SASL_PLAINTEXT"), ("mechanism", "SCRAM-SHA-256")))] == 2
    assert got[("sundial_authentication_successes_total", (("listener", "SASL_SSL"), ("mechanism", "PLAIN")))] == 1
    assert got[("sundial_authorization_denials_total", (("operation", "DESCRIBE"), ("resource_type", "TOPIC")))] == 4
    assert got[("sundial_authorization_denials_total", (("operation", "CREATE"), ("resource_type", "CLUSTER")))] == 1


def test_security_rows_without_sasl_or_authorizer_are_empty():
    assert security_rows(None, None) == []


def test_build_info_is_one_with_version_and_python():
    got = _samples(BrokerMetrics())
    assert got[("sundial_build_info", (("python", platform.python_version()), ("version", __version__)))] == 1


# -- internal topics ----------------------------------------------------------------------------------
class _Log:
    def summary(self, probe=None):
        return {"log_start_offset": 0, "log_end_offset": 0, "segment_count": 1, "size_bytes": 0,
                "max_timestamp_ms": -1}

    def transaction_summary(self, now_ms):
        return {}


class _Logs:
    def __init__(self, names):
        self.names = names

    def topics(self):
        return [SimpleNamespace(name=n, partitions=2) for n in self.names]

    def is_open(self, topic, partition):
        return True

    def get_log(self, topic, partition):
        return _Log()


def test_internal_topics_have_no_partition_rows_unless_enabled():
    logs = _Logs(sorted(INTERNAL_TOPICS) + ["orders"])
    assert {r["topic"] for r in PartitionRows(lambda: logs)()} == {"orders"}
    assert {r["topic"] for r in PartitionRows(lambda: logs, internal_topics=True)()} == set(INTERNAL_TOPICS) | {
        "orders"}
    assert INTERNAL_TOPICS == {"__consumer_offsets", "__transaction_state", "__share_group_state"}
