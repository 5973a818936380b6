"""``sundial log-dirs``: kafka-log-dirs.sh's JSON from DescribeLogDirs results, and its arguments."""

from __future__ import annotations

import json
from types import SimpleNamespace as NS

import pytest

from sundial.cli import build_parser
from sundial.tools.common import ToolError
from sundial.tools.log_dirs import _broker_ids, log_dirs_json


def part(i, size, lag=0, future=False):
    return NS(partition_index=i, partition_size=size, offset_lag=lag, is_future_key=future)


RESULTS = {1: [
    NS(error_code=0, log_dir="/data/d1", topics=[NS(name="orders", partitions=[part(2, 10), part(0, 99, 0, False)]),
                                                NS(name="audit", partitions=[part(0, 5, 3, True)])]),
    NS(error_code=56, log_dir="/data/d2", topics=[]),
]}


def test_json_is_kafkas_shape_and_key_order():
    text = log_dirs_json(RESULTS, set())
    assert text == ('{"brokers":[{"broker":1,"logDirs":['
                    '{"partitions":[{"partition":"audit-0","size":5,"offsetLag":3,"isFuture":true},'
                    '{"partition":"orders-0","size":99,"offsetLag":0,"isFuture":false},'
                    '{"partition":"orders-2","size":10,"offsetLag":0,"isFuture":false}],'
                    '"error":null,"logDir":"/data/d1"},'
                    '{"partitions":[],"error":"org.apache.kafka.common.errors.KafkaStorageException",'
                    '"logDir":"/data/d2"}]}],"version":1}')


def test_topic_list_filters_partitions_not_directories():
    doc = json.loads(log_dirs_json(RESULTS, {"orders", "nope"}))
    dirs = doc["brokers"][0]["logDirs"]
    assert [d["logDir"] for d in dirs] == ["/data/d1", "/data/d2"]
    assert [p["partition"] for p in dirs[0]["partitions"]] == ["orders-0", "orders-2"]


def test_broker_list_parsing():
    assert _broker_ids("") == [] and _broker_ids("2, 1,2") == [1, 2]
    with pytest.raises(ToolError) as err:
        _broker_ids("1,x")
    assert err.value.exit_code == 2


def test_describe_is_required_as_in_kafka(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["log-dirs", "--bootstrap-server", "127.0.0.1:9092"])
    assert exit_.value.code == 2
    assert "--describe" in capsys.readouterr().err


def test_reassignment_plan_parsing():
    from sundial.tools.log_dirs import parse_plan
    plan = ('{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[1,2],'
            '"log_dirs":["/d2","any"]},{"topic":"audit","partition":3,"replicas":[1]}]}')
    assert parse_plan(plan) == {("orders", 0, 1): "/d2"}
    for bad in ("nope", "[]", '{"partitions":[{"topic":"t"}]}',
                '{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/a","/b"]}]}'):
        with pytest.raises(ToolError) as err:
            parse_plan(bad)
        assert err.value.exit_code == 2


def test_execute_needs_a_plan_and_excludes_describe(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["log-dirs", "--bootstrap-server", "127.0.0.1:9092", "--describe", "--execute"])
    assert exit_.value.code == 2
