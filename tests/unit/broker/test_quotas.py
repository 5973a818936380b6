"""Client quotas: Kafka's precedence order, AlterClientQuotas/DescribeClientQuotas rules, the durable
store, the handler timer and the managers."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.broker.quotas import ClientQuotas, HandlerTimer, QuotaType, quota_limit, resolve_tags, user_of
from sundial.broker.quotas_store import (
    Alteration,
    ClientQuotaStore,
    Component,
    QuotaStoreError,
    describe,
    make_entity,
    plan_alterations,
)
from sundial.config.quotas import ClientQuotaConfig
from sundial.protocol.errors import ErrorCode

U, C = "user", "client-id"

#: Kafka's documented precedence (ClientQuotaManager): (user, client-id) with None = default.
PRECEDENCE = [("u", "c"), ("u", None), ("u", "-"), (None, "c"), (None, None), (None, "-"), ("-", "c"), ("-", None)]


def _entity(user, client):
    pairs = []
    if user != "-":
        pairs.append((U, user))
    if client != "-":
        pairs.append((C, client))
    return make_entity(pairs)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(PRECEDENCE + [("v", "c"), ("u", "d"), ("-", "d"), ("v", "-")]),
                       st.integers(1, 10**6)))
def test_the_first_configured_level_of_kafkas_order_applies(configured):
    overrides = {_entity(u, c): float(v) for (u, c), v in configured.items()}
    expected = next((float(configured[level]) for level in PRECEDENCE if level in configured), None)
    assert quota_limit(overrides, resolve_tags(overrides, "u", "c")) == expected


def test_clients_share_the_rate_of_the_entity_that_matches():
    user_quota = {make_entity([(U, "alice")]): 100.0}
    assert resolve_tags(user_quota, "alice", "a") == resolve_tags(user_quota, "alice", "b") == ("alice", "")
    client_quota = {make_entity([(C, "app")]): 100.0}
    assert resolve_tags(client_quota, "alice", "app") == resolve_tags(client_quota, "bob", "app") == ("", "app")
    default_user = {make_entity([(U, None)]): 100.0}
    assert resolve_tags(default_user, "alice", "x") != resolve_tags(default_user, "bob", "x")
    assert user_of("User:alice") == "alice" and user_of("User:ANONYMOUS") == "ANONYMOUS"


# -- AlterClientQuotas ------------------------------------------------------------------------------
def _alter(pairs, *ops):
    return Alteration(tuple(pairs), tuple(ops))


@pytest.mark.parametrize("pairs, ops, message", [
    ([], [("producer_byte_rate", 1.0, False)], "Invalid empty client quota entity"),
    ([("group", "g")], [("producer_byte_rate", 1.0, False)], "Unhandled client quota entity type: group"),
    ([("ip", "1.2.3.4")], [("connection_creation_rate", 1.0, False)], "Unhandled client quota entity type: ip"),
    ([(U, "a"), (U, "b")], [("producer_byte_rate", 1.0, False)], "duplicate entity entry user"),
    ([(U, "")], [("producer_byte_rate", 1.0, False)], "Empty user not supported"),
    ([(U, "a")], [("foo", 1.0, False)], "Invalid configuration key foo"),
    ([(U, "a")], [("controller_mutation_rate", 1.0, False)], "Invalid configuration key controller_mutation_rate"),
    ([(U, "a")], [("producer_byte_rate", 0.0, False)], "Quota producer_byte_rate must be greater than 0"),
    ([(U, "a")], [("producer_byte_rate", -5.0, False)], "must be greater than 0"),
    ([(U, "a")], [("consumer_byte_rate", 10.5, False)], "consumer_byte_rate cannot be a fractional value."),
    ([(U, "a")], [("request_percentage", float("nan"), False)], "must be a finite number"),
    ([(U, "a")], [("producer_byte_rate", 1.0, False), ("producer_byte_rate", 2.0, False)],
     "Duplicate quota key producer_byte_rate"),
])
def test_invalid_alterations_get_kafkas_error(pairs, ops, message):
    results, changed = plan_alterations([_alter(pairs, *ops)], {})
    assert results[0].code == ErrorCode.INVALID_REQUEST
    assert message in results[0].message
    assert changed == {}


def test_valid_alterations_and_removals():
    alice = make_entity([(U, "alice")])
    current = {alice: {"producer_byte_rate": 100.0}}
    results, changed = plan_alterations([
        _alter([(U, "alice")], ("producer_byte_rate", 0, True), ("request_percentage", 12.5, False)),
        _alter([(C, None), (U, None)], ("consumer_byte_rate", 2048.0, False)),
        _alter([(U, "bob")], ("nothing", 0, True)),                 # removing an unset key: no change, no error
        _alter([(U, "carol")], ("foo", 1.0, False)),
    ], current)
    assert [r.code for r in results] == [0, 0, 0, ErrorCode.INVALID_REQUEST]
    assert changed == {alice: {"request_percentage": 12.5},
                       make_entity([(U, None), (C, None)]): {"consumer_byte_rate": 2048.0}}


def test_an_entity_named_twice_is_refused_whole():
    results, changed = plan_alterations([_alter([(U, "a")], ("producer_byte_rate", 1.0, False)),
                                         _alter([(U, "a")], ("consumer_byte_rate", 1.0, False))], {})
    assert [r.code for r in results] == [ErrorCode.INVALID_REQUEST] * 2 and changed == {}


# -- DescribeClientQuotas ---------------------------------------------------------------------------
ENTRIES = {make_entity(p): {"producer_byte_rate": float(i + 1)} for i, p in enumerate([
    [(U, "alice")], [(U, None)], [(C, "app")], [(C, None)], [(U, "alice"), (C, "app")], [(U, None), (C, "app")],
    [(U, "alice"), (C, None)]])}


def _brute_describe(components, strict):
    out = []
    for entity in ENTRIES:
        names = dict(entity)
        ok = all(c.entity_type in names and (c.match_type == 2 or names[c.entity_type] == (
            c.match if c.match_type == 0 else None)) for c in components)
        if ok and (not strict or len(names) == len(components)):
            out.append(entity)
    return sorted(out, key=repr)


FILTERS = st.lists(st.sampled_from([Component(U, 0, "alice"), Component(U, 1, None), Component(U, 2, None),
                                    Component(C, 0, "app"), Component(C, 1, None), Component(C, 2, None),
                                    Component(U, 0, "nobody")]),
                   max_size=2, unique_by=lambda c: c.entity_type)


@settings(max_examples=200, deadline=None)
@given(FILTERS, st.booleans())
def test_describe_matches_the_brute_force_filter(components, strict):
    got = sorted((e for e, _ in describe(ENTRIES, components, strict)), key=repr)
    assert got == _brute_describe(components, strict)


@pytest.mark.parametrize("components, code", [
    ([Component("", 0, "x")], ErrorCode.INVALID_REQUEST),
    ([Component(U, 0, None)], ErrorCode.INVALID_REQUEST),
    ([Component(U, 1, "x")], ErrorCode.INVALID_REQUEST),
    ([Component(U, 2, "x")], ErrorCode.INVALID_REQUEST),
    ([Component(U, 7, None)], ErrorCode.INVALID_REQUEST),
    ([Component(U, 2, None), Component(U, 1, None)], ErrorCode.INVALID_REQUEST),
    ([Component("ip", 2, None), Component(U, 2, None)], ErrorCode.INVALID_REQUEST),
    ([Component("group", 2, None)], ErrorCode.UNSUPPORTED_VERSION),
])
def test_bad_filters_are_refused(components, code):
    from sundial.broker.quotas_store import QuotaRequestError
    with pytest.raises(QuotaRequestError) as exc:
        describe(ENTRIES, components, False)
    assert exc.value.code == code


# -- the durable store -------------------------------------------------------------------------------
def test_store_survives_reopen_and_ignores_a_torn_temp_file(tmp_path):
    store = ClientQuotaStore.open(str(tmp_path))
    alice, default_client = make_entity([(U, "alice")]), make_entity([(C, None)])
    store.replace({alice: {"producer_byte_rate": 1024.0}, default_client: {"request_percentage": 50.0}})
    store.replace({alice: {}})                                    # removes the entity
    (tmp_path / "client-quotas.json.tmp").write_bytes(b'{"version": 1, "entr')   # a crash mid-write
    again = ClientQuotaStore.open(str(tmp_path))
    assert dict(again.entries) == {default_client: {"request_percentage": 50.0}}
    doc = json.loads((tmp_path / "client-quotas.json").read_text())
    assert doc == {"version": 1, "entries": [{"entity": [["client-id", None]],
                                              "quotas": {"request_percentage": 50.0}}]}


@pytest.mark.parametrize("content", [b"{nope", b'{"version": 9}', b'{"version": 1, "entries": [{"entity": [["x", "y"]], '
                                     b'"quotas": {"producer_byte_rate": 1}}]}'])
def test_a_file_it_cannot_trust_stops_the_start(tmp_path, content):
    (tmp_path / "client-quotas.json").write_bytes(content)
    with pytest.raises(QuotaStoreError) as exc:
        ClientQuotaStore.open(str(tmp_path))
    assert "client-quotas.json" in str(exc.value)


# -- enforcement --------------------------------------------------------------------------------------
class _Ctx:
    def __init__(self, principal="User:alice", client_id="app", timer=None):
        self.principal, self.client_id, self.handler_timer = principal, client_id, timer


class _Metrics:
    def __init__(self):
        self.calls = []

    def quota_throttled(self, *args):
        self.calls.append(args)


def test_quotas_enforce_record_and_label_boundedly(tmp_path):
    clock = [0]
    metrics = _Metrics()
    quotas = ClientQuotas(ClientQuotaStore.open(str(tmp_path)), ClientQuotaConfig(11, 1), metrics=metrics,
                          clock_ms=lambda: clock[0])
    assert quotas.record_produce(_Ctx(), 10**9, 0.0, -1) == 0          # no quota: nothing recorded
    results = asyncio.run(quotas.alter([_alter([(U, None)], ("producer_byte_rate", 1000.0, False))], True))
    assert results[0].code == 0 and not quotas.produce.enabled          # validate_only changes nothing
    asyncio.run(quotas.alter([_alter([(U, None)], ("producer_byte_rate", 1000.0, False))], False))
    assert quotas.produce.enabled and ClientQuotaStore.open(str(tmp_path)).entries
    # A new client: one window's worth at once is exactly the bound (Kafka would allow ten).
    assert quotas.record_produce(_Ctx(), 1000, 0.0, -1) == 0
    assert quotas.record_produce(_Ctx(), 9000, 0.0, -1) == 9000   # 10000 B / 1 s: 10 s to get back
    assert metrics.calls == [("produce", "alice", "", 9000)]
    for i in range(150):
        quotas.record_produce(_Ctx(principal=f"User:u{i}"), 20_000, 0.0, -1)
    labels = {call[1] for call in metrics.calls}
    assert len(labels) == 101 and "<other>" in labels                  # 100 label pairs, then <other>
    assert quotas.fetch_max_bytes(_Ctx()) is None


def test_a_throttled_fetch_takes_its_bytes_back(tmp_path):
    clock = [0]
    quotas = ClientQuotas(ClientQuotaStore.open(str(tmp_path)), ClientQuotaConfig(11, 1), clock_ms=lambda: clock[0])
    asyncio.run(quotas.alter([_alter([(C, "app")], ("consumer_byte_rate", 100.0, False))], False))
    assert quotas.fetch_max_bytes(_Ctx()) == 100                       # new: one window of the quota
    assert quotas.record_fetch(_Ctx(), 90) == 0
    assert quotas.record_fetch(_Ctx(), 90) == 800                      # 180 B over 1 s: 1.8 s in all
    assert quotas.fetch.rate("alice", "app", 0) == 90.0                # the second response is not counted
    clock[0] = 800
    assert quotas.record_fetch(_Ctx(), 90) == 0                        # 180 B over 1.8 s: the bound
    clock[0] = 9_999
    assert quotas.fetch_max_bytes(_Ctx()) == 100
    clock[0] = 10_000
    assert quotas.fetch_max_bytes(_Ctx()) == 1000                      # Kafka's: quota.window.num - 1 windows


def test_request_quota_uses_handler_time_and_caps_at_one_window(tmp_path):
    quotas = ClientQuotas(ClientQuotaStore.open(str(tmp_path)), ClientQuotaConfig(11, 1), clock_ms=lambda: 0)
    asyncio.run(quotas.alter([_alter([(U, "alice")], ("request_percentage", 1.0, False))], False))
    assert quotas.times_request(3, True) and not quotas.times_request(17, True)
    assert not quotas.times_request(3, False) and not quotas.times_request(0, True)
    timer = HandlerTimer(None)
    timer.seconds = 5.0                               # 500 percent-seconds against 1 % over 1 s
    response = {"throttle_time_ms": 0}
    assert quotas.record_request(_Ctx(timer=timer), response) == 1000 == response["throttle_time_ms"]
    assert quotas.record_produce(_Ctx(), 10, 5.0, 0) == 0          # acks=0: exempt from request time
    assert QuotaType.REQUEST.value == "request"


def test_handler_timer_counts_only_the_handlers_own_steps():
    async def handler():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.02:
            pass
        await asyncio.sleep(3.0)                     # waiting is not handler time
        return "done"

    async def main():
        timer = HandlerTimer(handler())
        assert await timer == "done"
        return timer.seconds

    seconds = asyncio.run(main())
    assert 0.02 <= seconds < 2.0                     # far below the wait, whatever the machine's load


def test_handler_timer_passes_exceptions_both_ways():
    async def failing():
        await asyncio.sleep(0)
        raise KeyError("x")

    async def cancelled():
        task = asyncio.ensure_future(_await(HandlerTimer(asyncio.sleep(10))))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def _await(x):
        return await x

    with pytest.raises(KeyError):
        asyncio.run(_await(HandlerTimer(failing())))
    asyncio.run(cancelled())
