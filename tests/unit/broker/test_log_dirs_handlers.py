"""DescribeTopicPartitions (KIP-966) and DescribeLogDirs handlers.

DescribeTopicPartitions' cursor paging is checked against a brute-force listing (every
partition of every answered topic, topics in name order, partitions in index order): following
NextCursor page by page must yield exactly that listing, nothing twice, never more than the
limit per page. Answers go through the wire codec (encode, then decode with kafka-python's
classes) so what is checked is what a client reads.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sundial.broker.authorizer import AclRule, AclStore, Authorizer
from sundial.broker.handlers.log_dirs import handle_describe_log_dirs, handle_describe_topic_partitions
from sundial.config import BrokerConfig
from sundial.protocol.api_keys import ApiKey
from sundial.protocol.errors import ErrorCode
from sundial.protocol.schema_codec import SCHEMA_CLASSES, build_message, decode_response_body, \
    encode_response_body
from sundial.storage.log_manager import LogManager

DTP = ApiKey.DESCRIBE_TOPIC_PARTITIONS
DLD = ApiKey.DESCRIBE_LOG_DIRS


def run(coro):
    return asyncio.run(coro)


def fake_logs(topics: dict[str, int]):
    metas = {name: SimpleNamespace(name=name, partitions=n, topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, name).bytes)
             for name, n in topics.items()}
    return SimpleNamespace(topics=lambda: [metas[n] for n in sorted(metas)], topic=metas.get)


def make_ctx(logs, *, authorizer=None, limit: int | None = None, version: int = 0, principal="User:alice"):
    explicit = {} if limit is None else {"max.request.partition.size.limit": limit}
    broker = SimpleNamespace(logs=logs, authorizer=authorizer, node_id=7, config=BrokerConfig(explicit))
    return SimpleNamespace(broker=broker, principal=principal, client_host="127.0.0.1", api_version=version,
                           client_id="test")


def dtp_request(topics, limit=2000, cursor=None):
    req_cls = SCHEMA_CLASSES[DTP][0]
    return build_message(req_cls, 0, {
        "topics": [{"name": t} for t in topics], "response_partition_limit": limit,
        "cursor": None if cursor is None else {"topic_name": cursor[0], "partition_index": cursor[1]}})


def over_the_wire(api_key, version, answer):
    return decode_response_body(api_key, version, encode_response_body(api_key, version, answer))


def describe(ctx, topics, limit=2000, cursor=None):
    return over_the_wire(DTP, 0, run(handle_describe_topic_partitions(ctx, dtp_request(topics, limit, cursor))))


def page_through(ctx, topics, limit, per_page):
    """Follow NextCursor asking for ``limit`` partitions a page; returns (partitions in order, error
    entries, pages). ``per_page`` is the effective limit (capped by the broker's, at least 1)."""
    seen, errors, pages, cursor = [], [], 0, None
    while True:
        pages += 1
        assert pages < 500, "the cursor does not advance"
        resp = describe(ctx, topics, limit, cursor)
        answered = sum(len(t.partitions) for t in resp.topics)
        assert answered <= per_page
        for t in resp.topics:
            if t.error_code:
                errors.append((t.name, t.error_code))
                assert list(t.partitions) == []
            for p in t.partitions:
                seen.append((t.name, p.partition_index))
                assert (p.leader_id, list(p.replica_nodes), list(p.isr_nodes)) == (7, [7], [7])
        if resp.next_cursor is None:
            return seen, errors, pages
        cursor = (resp.next_cursor.topic_name, resp.next_cursor.partition_index)


#: Legal topic names ("." and ".." are not), with the characters that sort around letters.
NAMES = st.builds(lambda first, rest: first + rest, st.sampled_from("abc"), st.text(alphabet="abc._-", max_size=2))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topics=st.dictionaries(NAMES, st.integers(1, 7), max_size=6),
       limit=st.integers(-1, 9), broker_limit=st.integers(1, 9),
       listed=st.one_of(st.just(None), st.lists(NAMES, max_size=8)))
def test_cursor_paging_yields_the_brute_force_listing(topics, limit, broker_limit, listed):
    ctx = make_ctx(fake_logs(topics), limit=broker_limit)
    requested = [] if listed is None else listed
    names = sorted(topics) if not requested else sorted(set(requested))
    expected = [(n, p) for n in names if n in topics for p in range(topics[n])]
    per_page = max(min(limit, broker_limit), 1)
    seen, errors, pages = page_through(ctx, requested, limit, per_page)
    assert seen == expected
    assert pages >= -(-len(expected) // per_page)
    if requested:
        assert sorted(errors) == sorted((n, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for n in names if n not in topics)
    else:
        assert errors == []


def test_next_cursor_points_inside_a_topic_and_at_the_next_one():
    ctx = make_ctx(fake_logs({"a": 3, "b": 2, "c": 1}))
    resp = describe(ctx, [], limit=2)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in resp.topics] == [("a", [0, 1])]
    assert (resp.next_cursor.topic_name, resp.next_cursor.partition_index) == ("a", 2)
    resp = describe(ctx, [], limit=3, cursor=("a", 2))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in resp.topics] == [("a", [2]), ("b", [0, 1])]
    # the limit is reached exactly at the end of b: the cursor is the next topic, partition 0
    assert (resp.next_cursor.topic_name, resp.next_cursor.partition_index) == ("c", 0)
    resp = describe(ctx, [], limit=3, cursor=("c", 0))
    assert [t.name for t in resp.topics] == ["c"] and resp.next_cursor is None


def test_topic_fields_and_broker_cap():
    ctx = make_ctx(fake_logs({"__consumer_offsets": 2, "orders": 5}), limit=3)
    resp = describe(ctx, ["orders", "__consumer_offsets", "bad name!"], limit=2000)
    by_name = {t.name: t for t in resp.topics}
    assert by_name["__consumer_offsets"].is_internal and not by_name["orders"].is_internal
    assert by_name["__consumer_offsets"].topic_id == uuid.uuid5(uuid.NAMESPACE_DNS, "__consumer_offsets")
    assert [p.partition_index for p in by_name["orders"].partitions] == [0]     # capped at 3 in all
    assert (resp.next_cursor.topic_name, resp.next_cursor.partition_index) == ("orders", 1)
    assert [t.name for t in resp.topics] == ["__consumer_offsets", "bad name!", "orders"]     # name order
    assert by_name["bad name!"].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert describe(ctx, ["zzz"]).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    p = by_name["orders"].partitions[0]
    assert (p.leader_epoch, list(p.offline_replicas), list(p.eligible_leader_replicas or []),
            list(p.last_known_elr or [])) == (0, [], [], [])
    assert by_name["orders"].topic_authorized_operations == 3576                # every topic operation


@pytest.mark.parametrize("topics,cursor", [(["a", "b"], ("c", 0)), (["a"], ("a", -1)), ([], ("a", -1))])
def test_bad_cursor_is_invalid_request_for_every_topic(topics, cursor):
    ctx = make_ctx(fake_logs({"a": 1, "b": 1}))
    resp = describe(ctx, topics, cursor=cursor)
    assert [(t.name, t.error_code, list(t.partitions)) for t in resp.topics] == \
        [(n, ErrorCode.INVALID_REQUEST, []) for n in topics]
    assert resp.next_cursor is None


def authorizer(tmp_path, rules) -> Authorizer:
    store = AclStore(str(tmp_path / "acls.json"))
    if rules:
        store.add(rules)
    return Authorizer(store)


def allow(rtype, name, op, principal="User:alice"):
    return AclRule.make(principal, rtype, name, op, "ALLOW", "*", "LITERAL")


def test_topic_describe_acl(tmp_path):
    from sundial.broker.authorizer import ResourceType
    auth = authorizer(tmp_path, [allow(ResourceType.TOPIC, "open", "DESCRIBE")])
    ctx = make_ctx(fake_logs({"open": 2, "secret": 2}), authorizer=auth)
    resp = describe(ctx, [])
    assert [t.name for t in resp.topics] == ["open"]                       # the others left out silently
    resp = describe(ctx, ["secret", "open", "missing"])
    assert [(t.name, t.error_code) for t in resp.topics] == [
        ("open", 0), ("missing", ErrorCode.TOPIC_AUTHORIZATION_FAILED), ("secret", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    denied = {t.name: t for t in resp.topics if t.error_code}
    # the zero UUID: kafka-python reads it as None
    assert all(t.topic_id in (None, uuid.UUID(int=0)) and list(t.partitions) == [] for t in denied.values())
    assert denied["secret"].topic_authorized_operations == -(2**31)


# -- DescribeLogDirs ---------------------------------------------------------------------------------

@pytest.fixture
def two_dirs(tmp_path):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    mgr = LogManager(dirs, {"log.segment.delete.delay.ms": 0})
    mgr.startup()
    mgr.create_topic("orders", 3)
    mgr.create_topic("audit", 1)
    yield mgr
    mgr.shutdown()


def dld_request(version, topics):
    req_cls = SCHEMA_CLASSES[DLD][0]
    value = {"topics": None if topics is None else [{"topic": t, "partitions": ps} for t, ps in topics.items()]}
    return build_message(req_cls, version, value)


def log_dirs(ctx, version, topics=None):
    return over_the_wire(DLD, version, run(handle_describe_log_dirs(ctx, dld_request(version, topics))))


@pytest.mark.parametrize("version", range(0, 5))
def test_describe_log_dirs_every_version(two_dirs, version):
    ctx = make_ctx(two_dirs, version=version)
    resp = log_dirs(ctx, version)
    assert [r.log_dir for r in resp.results] == two_dirs.log_dirs
    found = {}
    for r in resp.results:
        assert r.error_code == 0
        for t in r.topics:
            for p in t.partitions:
                found[(t.name, p.partition_index)] = r.log_dir
                assert (p.partition_size, p.offset_lag, p.is_future_key) == (0, 0, False)
        if version >= 4:
            assert r.total_bytes > 0 and 0 <= r.usable_bytes <= r.total_bytes
        else:
            assert (r.total_bytes, r.usable_bytes) == (-1, -1)           # not on the wire before v4
    assert found == {(t, p): os.path.dirname(pdir) for t, p, pdir in
                     [(pl.topic, pl.partition, pl.partition_dir) for pl in two_dirs.replica_placements()]}
    assert set(found) == {("orders", 0), ("orders", 1), ("orders", 2), ("audit", 0)}


def test_describe_log_dirs_filter_and_storage_error(two_dirs):
    ctx = make_ctx(two_dirs, version=4)
    resp = log_dirs(ctx, 4, {"orders": [1, 9], "nope": [0]})
    listed = [(t.name, p.partition_index) for r in resp.results for t in r.topics for p in t.partitions]
    assert listed == [("orders", 1)]
    assert len(resp.results) == 2                                          # both dirs, even the empty one
    victim = two_dirs.log_dirs[1]
    shutil.rmtree(victim)
    resp = log_dirs(ctx, 4)
    broken = [r for r in resp.results if r.log_dir == victim][0]
    assert broken.error_code == ErrorCode.KAFKA_STORAGE_ERROR and list(broken.topics) == []
    assert [r.error_code for r in resp.results if r.log_dir != victim] == [0]
    os.makedirs(victim)     # for the fixture's clean shutdown


@pytest.mark.parametrize("version", [2, 3, 4])
def test_describe_log_dirs_needs_cluster_describe(tmp_path, two_dirs, version):
    from sundial.broker.authorizer import CLUSTER_NAME, ResourceType
    ctx = make_ctx(two_dirs, authorizer=authorizer(tmp_path, [allow(ResourceType.TOPIC, "orders", "ALL")]),
                   version=version)
    resp = log_dirs(ctx, version)
    assert list(resp.results) == []
    if version >= 3:
        assert resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    ctx = make_ctx(two_dirs, authorizer=authorizer(tmp_path / "x", [allow(ResourceType.CLUSTER, CLUSTER_NAME,
                                                                           "DESCRIBE")]), version=version)
    resp = log_dirs(ctx, version)
    assert len(resp.results) == 2 and getattr(resp, "error_code", 0) == 0


def test_docs_name_the_setting_the_event_and_the_tool():
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..")
    doc = open(os.path.join(root, "docs", "log-dirs.md"), encoding="utf-8").read()
    handlers = open(os.path.join(root, "broker", "handlers", "log_dirs.py"), encoding="utf-8").read()
    assert "`max.request.partition.size.limit` | 2000" in doc
    assert "log_dir_describe_failed" in doc and '"log_dir_describe_failed"' in handlers
    assert "sundial log-dirs --bootstrap-server" in doc
    tools = open(os.path.join(root, "docs", "tools.md"), encoding="utf-8").read()
    assert "## log-dirs" in tools and "docs/log-dirs.md" in tools
