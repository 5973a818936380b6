"""Client quotas enforced as Kafka's ``ClientQuotaManager`` enforces them (docs/quotas.md).

Three quota types, one :class:`ClientQuotaManager` each, fed from the quota store
(:mod:`broker.quotas_store`) by :class:`ClientQuotas`, the broker's one entry point:

* ``produce`` (``producer_byte_rate``): the size of each Produce request, recorded when its
  partitions are appended;
* ``fetch`` (``consumer_byte_rate``): the record bytes of each Fetch response, recorded when the
  response is ready. A Fetch that would be throttled is answered with no partitions (and its
  bytes are taken back out of the rate), as Kafka answers it; and a consumer's ``max_bytes`` is
  capped at what the quota allows over the shortest span its rate may be measured over (one
  window while the client is new, ``quota.window.num - 1`` windows after), so one response is
  never throttled by its size alone;
* ``request`` (``request_percentage``): the time the request's handler ran on the event loop
  (its own steps only, not the time it waited for a disk or a timer), as a percentage of one
  quota window, for every request but SaslHandshake/SaslAuthenticate and requests made before
  authentication. Produce with acks=0 is exempt, as in Kafka.

**Which quota applies** (Kafka's order): the first configured of
``user+client-id``, ``user + default client-id``, ``user``, ``default user + client-id``,
``default user + default client-id``, ``default user``, ``client-id``, ``default client-id``. The
user is the principal's name (``ANONYMOUS`` on a PLAINTEXT listener). Clients that share the
matching entity share its rate (Kafka's sensor tags): all client ids of a user with a user
quota, every user of a client id with a client-id quota; default entities give each user (or
client id) a rate of its own.

**Throttling** (KIP-219): the throttle time is computed as :mod:`broker.quotas_rate` describes
(Kafka's arithmetic, except that a new client's first windows are not padded: no initial burst),
returned in the response's ``throttle_time_ms`` (the larger of the byte-rate and request
throttles), and the connection is muted, reading nothing, for that long after the response
(:meth:`broker.connection.Connection.throttle`). Quotas are checked only while some entity sets
the key (``quotasEnabled`` in Kafka): without quotas nothing is recorded.

**Metrics** (:class:`~broker.metrics.BrokerMetrics.quota_throttled`): throttle time and throttled
requests per quota type, user and client id as the matching entity names them; past
:data:`MAX_LABELED_CLIENTS` label pairs per type, further clients count under ``<other>``.
"""

from __future__ import annotations

import asyncio
import time
from enum import Enum
from typing import Callable, Mapping

import structlog

from sundial.config.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, ClientQuotaConfig
from sundial.protocol.api_keys import ApiKey

from .quotas_rate import RateSensor, max_value_in_window
from .quotas_store import (
    CLIENT_ID,
    USER,
    Alteration,
    AlterResult,
    ClientQuotaStore,
    Component,
    Entity,
    describe,
    make_entity,
    plan_alterations,
)

logger = structlog.get_logger(__name__)

#: Sensors that recorded nothing for this long are dropped (Kafka: one hour).
INACTIVE_SENSOR_EXPIRY_MS = 3_600_000
#: Distinct (user, client id) label pairs per quota type in the metrics; more count as ``<other>``.
MAX_LABELED_CLIENTS = 100
OTHER_LABEL = "<other>"
#: APIs whose handlers record their own quotas (bandwidth and request time together).
SELF_THROTTLED = frozenset({ApiKey.PRODUCE, ApiKey.FETCH})
#: APIs never throttled by request_percentage (answered before a principal is known, as in Kafka).
REQUEST_QUOTA_EXEMPT = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


class QuotaType(str, Enum):
    PRODUCE = "produce"
    FETCH = "fetch"
    REQUEST = "request"


QUOTA_KEY = {QuotaType.PRODUCE: PRODUCER_BYTE_RATE, QuotaType.FETCH: CONSUMER_BYTE_RATE,
             QuotaType.REQUEST: REQUEST_PERCENTAGE}

Tags = tuple[str, str]


def user_of(principal: str) -> str:
    """The quota user of a principal: its name (``User:alice`` → ``alice``)."""
    return principal.split(":", 1)[1] if ":" in principal else principal


def resolve_tags(overrides: Mapping[Entity, float], user: str, client_id: str) -> Tags:
    """The sensor a client records into (Kafka ``DefaultQuotaCallback.quotaMetricTags``): which
    level of the precedence order applies decides whether the rate is per user and client id,
    per user, or per client id."""
    e = make_entity
    if e([(USER, user), (CLIENT_ID, client_id)]) in overrides or e([(USER, user), (CLIENT_ID, None)]) in overrides:
        return user, client_id
    if e([(USER, user)]) in overrides:
        return user, ""
    if e([(USER, None), (CLIENT_ID, client_id)]) in overrides or e([(USER, None), (CLIENT_ID, None)]) in overrides:
        return user, client_id
    if e([(USER, None)]) in overrides:
        return user, ""
    return "", client_id


def quota_limit(overrides: Mapping[Entity, float], tags: Tags) -> float | None:
    """The bound for a sensor's tags (Kafka ``DefaultQuotaCallback.quotaLimit``); None: unlimited."""
    user, client_id = tags
    e = make_entity
    if user and client_id:
        candidates = (e([(USER, user), (CLIENT_ID, client_id)]), e([(USER, user), (CLIENT_ID, None)]),
                      e([(USER, None), (CLIENT_ID, client_id)]), e([(USER, None), (CLIENT_ID, None)]))
    elif user:
        candidates = (e([(USER, user)]), e([(USER, None)]))
    elif client_id:
        candidates = (e([(CLIENT_ID, client_id)]), e([(CLIENT_ID, None)]))
    else:
        return None
    for entity in candidates:
        value = overrides.get(entity)
        if value is not None:
            return value
    return None


class ClientQuotaManager:
    """The rates of one quota type: its overrides, a sensor per tags, throttle times."""

    def __init__(self, quota_type: QuotaType, config: ClientQuotaConfig, *, value_scale: float = 1.0,
                 max_throttle_ms: int | None = None) -> None:
        self.quota_type = quota_type
        self._config = config
        self._value_scale = value_scale
        self._max_throttle_ms = max_throttle_ms
        self._overrides: dict[Entity, float] = {}
        self._resolved: dict[tuple[str, str], tuple[Tags, float | None]] = {}
        self._sensors: dict[Tags, RateSensor] = {}
        self._next_expiry_check_ms = 0

    @property
    def enabled(self) -> bool:
        return bool(self._overrides)

    def update(self, overrides: Mapping[Entity, float]) -> None:
        """New overrides for this type (entity → bound); existing rates keep their samples."""
        self._overrides = dict(overrides)
        self._resolved = {}

    def _resolve(self, user: str, client_id: str) -> tuple[Tags, float | None]:
        key = (user, client_id)
        hit = self._resolved.get(key)
        if hit is None:
            tags = resolve_tags(self._overrides, user, client_id)
            hit = (tags, quota_limit(self._overrides, tags))
            if len(self._resolved) > 10_000:
                self._resolved = {}
            self._resolved[key] = hit
        return hit

    def _sensor(self, tags: Tags, now_ms: int) -> RateSensor:
        sensor = self._sensors.get(tags)
        if sensor is None:
            sensor = self._sensors[tags] = RateSensor(self._config.window_num, self._config.window_size_ms)
        if now_ms >= self._next_expiry_check_ms:
            self._next_expiry_check_ms = now_ms + 60_000
            stale = [t for t, s in self._sensors.items()
                     if s is not sensor and now_ms - s.last_record_ms >= INACTIVE_SENSOR_EXPIRY_MS]
            for t in stale:
                del self._sensors[t]
        return sensor

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> tuple[int, Tags]:
        """Record ``value`` for the client; (throttle ms, the sensor's tags). Nothing is recorded
        while no entity sets this type's key, or when no quota matches the client."""
        if not self._overrides:
            return 0, ("", client_id)
        tags, limit = self._resolve(user, client_id)
        if limit is None:
            return 0, tags
        sensor = self._sensor(tags, now_ms)
        return sensor.record_and_throttle_ms(value * self._value_scale, now_ms, limit, self._max_throttle_ms), tags

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a value recorded for a response that is not sent (a throttled Fetch)."""
        if not self._overrides:
            return
        tags, limit = self._resolve(user, client_id)
        if limit is not None:
            self._sensor(tags, now_ms).record(-value * self._value_scale, now_ms)

    def max_value_in_window(self, user: str, client_id: str, now_ms: int) -> float | None:
        """The most one request may add without being throttled by its size alone (one window
        of the quota for a new client, else Kafka's ``quota.window.num - 1``); None when unlimited."""
        if not self._overrides:
            return None
        tags, limit = self._resolve(user, client_id)
        if limit is None:
            return None
        sensor = self._sensors.get(tags)
        if sensor is not None:
            return sensor.max_value_in_window(limit, now_ms)
        return max_value_in_window(limit, self._config.window_num, self._config.window_size_ms, new=True)

    def rate(self, user: str, client_id: str, now_ms: int) -> float:
        """The client's current rate (0 when nothing is recorded for it)."""
        tags, _limit = self._resolve(user, client_id)
        sensor = self._sensors.get(tags)
        return sensor.rate(now_ms) if sensor is not None else 0.0


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class HandlerTimer:
    """Await a handler's coroutine, adding up the time its own steps run on the loop (Kafka's
    request handler thread time): waiting for a future, a timer or a worker thread is not counted."""

    __slots__ = ("_coro", "seconds")

    def __init__(self, coro) -> None:
        self._coro = coro
        self.seconds = 0.0

    def __await__(self):
        coro = self._coro
        clock = time.perf_counter
        value, error = None, None
        while True:
            started = clock()
            try:
                if error is None:
                    yielded = coro.send(value)
                else:
                    yielded = coro.throw(error)
            except StopIteration as stop:
                self.seconds += clock() - started
                return stop.value
            except BaseException:
                self.seconds += clock() - started
                raise
            self.seconds += clock() - started
            value, error = None, None
            try:
                value = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - handed on to the handler, as await does
                error = exc


class ClientQuotas:
    """The broker's client quotas: the store, the three managers, and what the request path calls."""

    def __init__(self, store: ClientQuotaStore, config: ClientQuotaConfig, *, metrics=None,
                 clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self.store = store
        self.config = config
        self._metrics = metrics
        self._clock_ms = clock_ms
        self.produce = ClientQuotaManager(QuotaType.PRODUCE, config)
        self.fetch = ClientQuotaManager(QuotaType.FETCH, config)
        # Handler seconds → percent of one thread: Kafka's nanos * 100 / 1e9; capped at one window.
        self.request = ClientQuotaManager(QuotaType.REQUEST, config, value_scale=100.0,
                                          max_throttle_ms=config.window_size_ms)
        self._managers = {QuotaType.PRODUCE: self.produce, QuotaType.FETCH: self.fetch,
                          QuotaType.REQUEST: self.request}
        self._labels: dict[QuotaType, set[Tags]] = {t: set() for t in QuotaType}
        self._alter_lock = asyncio.Lock()
        self._apply_store()

    def _apply_store(self) -> None:
        entries = self.store.entries
        for quota_type, manager in self._managers.items():
            key = QUOTA_KEY[quota_type]
            manager.update({entity: values[key] for entity, values in entries.items() if key in values})

    # -- the admin APIs ------------------------------------------------------------------------
    def describe(self, components: list[Component], strict: bool) -> list[tuple[Entity, dict[str, float]]]:
        return describe(self.store.entries, components, strict)

    async def alter(self, alterations: list[Alteration], validate_only: bool) -> list[AlterResult]:
        """Check and (unless ``validate_only``) apply: written durably off the loop, then enforced."""
        async with self._alter_lock:
            results, changed = plan_alterations(alterations, self.store.entries)
            if changed and not validate_only:
                await asyncio.to_thread(self.store.replace, changed)
                self._apply_store()
            return results

    # -- the request path --------------------------------------------------------------------------
    @property
    def request_enabled(self) -> bool:
        return self.request.enabled

    def _throttled(self, quota_type: QuotaType, tags: Tags, throttle_ms: int) -> None:
        if self._metrics is None or throttle_ms <= 0:
            return
        labels = self._labels[quota_type]
        if tags not in labels:
            if len(labels) >= MAX_LABELED_CLIENTS:
                tags = (OTHER_LABEL, OTHER_LABEL)
            else:
                labels.add(tags)
        self._metrics.quota_throttled(quota_type.value, tags[0], tags[1], throttle_ms)

    def _pick(self, bandwidth: tuple[QuotaType, int, Tags], request: tuple[int, Tags]) -> int:
        """Kafka's choice: the larger throttle wins and is the one counted; the response carries it."""
        bw_type, bw_ms, bw_tags = bandwidth
        rq_ms, rq_tags = request
        if bw_ms <= 0 and rq_ms <= 0:
            return 0
        if bw_ms > rq_ms:
            self._throttled(bw_type, bw_tags, bw_ms)
            return bw_ms
        self._throttled(QuotaType.REQUEST, rq_tags, rq_ms)
        return rq_ms

    def record_produce(self, ctx, request_bytes: int, handler_seconds: float, acks: int) -> int:
        """A Produce was appended: its throttle time (0 when within every quota)."""
        if not (self.produce.enabled or self.request.enabled):
            return 0
        user, client_id, now_ms = user_of(ctx.principal), ctx.client_id or "", self._clock_ms()
        bw_ms, bw_tags = self.produce.record(user, client_id, request_bytes, now_ms)
        request = (0, ("", "")) if acks == 0 else self.request.record(user, client_id, handler_seconds, now_ms)
        return self._pick((QuotaType.PRODUCE, bw_ms, bw_tags), request)

    def fetch_max_bytes(self, ctx) -> float | None:
        """The cap of a consumer's Fetch ``max_bytes`` under its quota (None: no cap)."""
        return self.fetch.max_value_in_window(user_of(ctx.principal), ctx.client_id or "", self._clock_ms())

    def record_fetch(self, ctx, response_bytes: int) -> int:
        """A Fetch response is ready: its throttle time. When it is throttled the caller answers
        with no partitions, so its bytes are taken back out of the rate here."""
        if not (self.fetch.enabled or self.request.enabled):
            return 0
        user, client_id, now_ms = user_of(ctx.principal), ctx.client_id or "", self._clock_ms()
        timer = ctx.handler_timer
        request = self.request.record(user, client_id, timer.seconds if timer is not None else 0.0, now_ms)
        bw_ms, bw_tags = self.fetch.record(user, client_id, response_bytes, now_ms)
        throttle = self._pick((QuotaType.FETCH, bw_ms, bw_tags), request)
        if throttle > 0:
            self.fetch.unrecord(user, client_id, response_bytes, now_ms)
        return throttle

    def record_request(self, ctx, response) -> int:
        """Any other request, answered: its request-time throttle, written into ``response``'s
        ``throttle_time_ms`` when it has one."""
        timer = ctx.handler_timer
        if timer is None or not self.request.enabled:
            return 0
        throttle_ms, tags = self.request.record(user_of(ctx.principal), ctx.client_id or "", timer.seconds,
                                                self._clock_ms())
        if throttle_ms > 0:
            self._throttled(QuotaType.REQUEST, tags, throttle_ms)
            if isinstance(response, dict) and "throttle_time_ms" in response:
                response["throttle_time_ms"] = max(response["throttle_time_ms"] or 0, throttle_ms)
        return throttle_ms

    def times_request(self, api_key: int, authenticated: bool) -> bool:
        """Whether the connection must time this request's handler (request quotas are set)."""
        return self.request.enabled and authenticated and api_key not in REQUEST_QUOTA_EXEMPT \
            and api_key != ApiKey.PRODUCE
