"""Option parsing: spark-sql-kafka's names, defaults, precedence, and errors that name the option."""

import pytest

from sundial.pipeline.errors import OptionError
from sundial.pipeline.offsets import (
    EarliestLimit,
    GlobalTimestamp,
    LatestLimit,
    SpecificOffsets,
    SpecificTimestamps,
    TopicPartition,
)
from sundial.pipeline.options import parse_options, parse_time_ms

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}


def batch(**extra):
    return parse_options({**BASE, **extra}, streaming=False)


def stream(**extra):
    return parse_options({**BASE, **extra}, streaming=True)


def error_of(raw, streaming=False) -> OptionError:
    with pytest.raises(OptionError) as info:
        parse_options(raw, streaming=streaming)
    return info.value


def test_defaults_batch_and_stream():
    b = batch()
    assert b.starting == EarliestLimit() and b.ending == LatestLimit()
    assert b.fail_on_data_loss and not b.include_headers and b.output_format == "arrow"
    assert b.poll_timeout_ms == 120_000 and b.max_trigger_delay_ms == 15 * 60_000
    s = stream()
    assert s.starting == LatestLimit() and s.ending is None


def test_names_are_case_insensitive():
    opts = parse_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SUBSCRIBE": "t", "StartingOffsets": "earliest",
                          "INCLUDEHEADERS": "TRUE"}, streaming=True)
    assert opts.starting == EarliestLimit() and opts.include_headers


def test_bootstrap_servers_required():
    err = error_of({"subscribe": "t"})
    assert err.option == "kafka.bootstrap.servers" and "kafka.bootstrap.servers" in str(err)


@pytest.mark.parametrize("raw, message", [
    ({}, "One of the following options must be specified"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "Only one of the following options"),
    ({"subscribe": " , "}, "No topics to subscribe to"),
    ({"subscribePattern": "  "}, "Pattern to subscribe is empty"),
    ({"subscribePattern": "a("}, "not a valid regular expression"),
    ({"assign": "a"}, "No topicpartitions to assign"),
    ({"assign": '{"a":["x"]}'}, "Expected e.g."),
    ({"assign": '{"a":[-1]}'}, "Expected e.g."),
])
def test_subscription_errors(raw, message):
    err = error_of({"kafka.bootstrap.servers": "h:1", **raw})
    assert message in str(err)
    assert err.option in ("subscribe", "subscribePattern", "assign")


def test_subscription_kinds():
    assert batch().subscription.topics == ("orders",)
    opts = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a, b,,a"}, streaming=False)
    assert opts.subscription.topics == ("a", "b")
    opts = parse_options({"kafka.bootstrap.servers": "h:1", "assign": '{"b":[1,0],"a":[2]}'}, streaming=False)
    assert opts.subscription.assigned == (TopicPartition("a", 2), TopicPartition("b", 0), TopicPartition("b", 1))
    opts = parse_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "ord.*"}, streaming=False)
    assert opts.subscription.matches("orders") and not opts.subscription.matches("xorders")


def test_starting_precedence_timestamp_over_by_timestamp_over_offsets():
    both = {"startingTimestamp": "1000", "startingOffsetsByTimestamp": '{"orders":{"0":5}}',
            "startingOffsets": "earliest"}
    assert batch(**both).starting == GlobalTimestamp(1000)
    del both["startingTimestamp"]
    assert batch(**both).starting == SpecificTimestamps({TopicPartition("orders", 0): 5})
    del both["startingOffsetsByTimestamp"]
    assert batch(**both).starting == EarliestLimit()


def test_ending_precedence():
    opts = batch(endingTimestamp="2000", endingOffsetsByTimestamp='{"orders":{"0":5}}', endingOffsets="latest")
    assert opts.ending == GlobalTimestamp(2000)
    opts = batch(endingOffsetsByTimestamp='{"orders":{"0":5}}', endingOffsets="latest")
    assert opts.ending == SpecificTimestamps({TopicPartition("orders", 0): 5})
    opts = batch(endingOffsets='{"orders":{"0":7,"1":-1}}')
    assert opts.ending == SpecificOffsets({TopicPartition("orders", 0): 7, TopicPartition("orders", 1): -1})


@pytest.mark.parametrize("extra, option, message", [
    ({"startingOffsets": "latest"}, "startingOffsets", "starting offset can't be latest"),
    ({"startingOffsets": '{"orders":{"0":-1}}'}, "startingOffsets", "can't be latest for batch"),
    ({"endingOffsets": "earliest"}, "endingOffsets", "ending offset can't be earliest"),
    ({"endingOffsets": '{"orders":{"0":-2}}'}, "endingOffsets", "can't be earliest for batch"),
    ({"startingOffsets": '{"orders":{"0":9}}', "endingOffsets": '{"orders":{"0":3}}'}, "startingOffsets",
     "greater than endingOffsets"),
    ({"startingOffsets": '{"orders":{"0":1}}', "endingOffsets": '{"orders":{"1":3}}'}, "endingOffsets",
     "same topic partitions"),
    ({"startingTimestamp": "5", "endingTimestamp": "4"}, "startingTimestamp", "greater than endingTimestamp"),
    ({"startingOffsetsByTimestamp": '{"orders":{"0":9}}', "endingOffsetsByTimestamp": '{"orders":{"0":3}}'},
     "startingOffsetsByTimestamp", "greater than endingOffsetsByTimestamp"),
    ({"startingTimestamp": "abc"}, "startingTimestamp", "expected a single long value"),
    ({"startingTimestamp": "-5"}, "startingTimestamp", ">= 0"),
    ({"startingOffsets": "{bad"}, "startingOffsets", "Expected e.g."),
    ({"startingOffsets": '{"orders":{"0":-3}}'}, "startingOffsets", "is invalid"),
    ({"endingOffsetsByTimestamp": '{"orders":{"x":1}}'}, "endingOffsetsByTimestamp", "Expected e.g."),
    ({"failOnDataLoss": "yes"}, "failOnDataLoss", "'true' or 'false'"),
    ({"includeHeaders": "1"}, "includeHeaders", "'true' or 'false'"),
    ({"minPartitions": "0"}, "minPartitions", "must be positive"),
    ({"maxRecordsPerPartition": "-4"}, "maxRecordsPerPartition", "must be positive"),
    ({"maxOffsetsPerTrigger": "ten"}, "maxOffsetsPerTrigger", "must be an integer"),
    ({"minOffsetsPerTrigger": "20", "maxOffsetsPerTrigger": "10"}, "minOffsetsPerTrigger", "higher than"),
    ({"maxTriggerDelay": "5 parsecs"}, "maxTriggerDelay", "unknown time unit"),
    ({"kafkaConsumer.pollTimeoutMs": "0"}, "kafkaConsumer.pollTimeoutMs", "must be positive"),
    ({"startingOffsetsByTimestampStrategy": "earliest"}, "startingOffsetsByTimestampStrategy", "'error' or 'latest'"),
    ({"kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset", "'auto.offset.reset' is not supported"),
    ({"kafka.key.deserializer": "x"}, "kafka.key.deserializer", "not supported"),
    ({"kafka.value.deserializer": "x"}, "kafka.value.deserializer", "not supported"),
    ({"kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit", "not supported"),
    ({"kafka.interceptor.classes": "x"}, "kafka.interceptor.classes", "not supported"),
    ({"kafka.isolation.level": "serializable"}, "kafka.isolation.level", "read_committed"),
    ({"sundial.outputFormat": "csv"}, "sundial.outputFormat", "'arrow' or 'rows'"),
    ({"sundial.fetcher": "magic"}, "sundial.fetcher", "'auto', 'wire' or 'consumer'"),
    ({"sundial.exactTimeWindw": "true"}, "sundial.exacttimewindw", "unknown option"),
    ({"sundial.exactTimeWindow": "true"}, "sundial.exactTimeWindow", "needs a time window"),
    ({"sundial.exactTimeWindow.maxDisorderMs": "5"}, "sundial.exactTimeWindow.maxDisorderMs", "only applies"),
    ({"sundial.arrowBatchRows": "0"}, "sundial.arrowBatchRows", "must be positive"),
])
def test_batch_errors_name_the_option(extra, option, message):
    err = error_of({**BASE, **extra})
    assert err.option == option
    assert message in str(err)
    # the message itself names the option (or quotes its value) so a user can find it
    assert option.lower() in str(err).lower() or message.lower() in str(err).lower()


@pytest.mark.parametrize("key", ["endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"])
def test_streaming_rejects_ending_options(key):
    value = "latest" if key == "endingOffsets" else ('{"orders":{"0":1}}' if "By" in key else "5")
    err = error_of({**BASE, key: value}, streaming=True)
    assert err.option == key and "not valid in streaming queries" in str(err)


def test_streaming_accepts_latest_start_and_trigger_options():
    opts = stream(startingOffsets='{"orders":{"0":-1}}', maxOffsetsPerTrigger="700", minOffsetsPerTrigger="10",
                  maxTriggerDelay="30s")
    assert opts.starting == SpecificOffsets({TopicPartition("orders", 0): -1})
    assert (opts.max_offsets_per_trigger, opts.min_offsets_per_trigger, opts.max_trigger_delay_ms) == (700, 10, 30_000)


def test_kafka_passthrough_and_accepted_group_options():
    opts = batch(**{"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.group.id": "g", "groupIdPrefix": "p",
                    "kafka.isolation.level": "read_committed"})
    assert opts.kafka_params["security.protocol"] == "SASL_PLAINTEXT"
    assert opts.read_committed and not opts.use_wire_fetcher
    assert batch().use_wire_fetcher
    assert batch(**{"sundial.fetcher": "consumer"}).use_wire_fetcher is False


def test_consumer_config_converts_types_and_forces_no_group():
    from sundial.pipeline.client import consumer_config

    config = consumer_config({"max.partition.fetch.bytes": "2097152", "check.crcs": "false", "api.version": "2.8",
                              "sasl.plain.password": "12345", "group.id": "g", "sasl.jaas.config": "x"},
                             "h1:1, h2:2", client_id="c")
    assert config["max_partition_fetch_bytes"] == 2097152 and config["check_crcs"] is False
    assert config["api_version"] == (2, 8) and config["sasl_plain_password"] == "12345"
    assert config["group_id"] is None and config["enable_auto_commit"] is False
    assert config["bootstrap_servers"] == ["h1:1", "h2:2"] and "sasl_jaas_config" not in config
    assert config["allow_auto_create_topics"] is False
    with pytest.raises(OptionError) as info:
        consumer_config({"request.timeout.ms": "soon"}, "h:1", client_id="c")
    assert info.value.option == "kafka.request.timeout.ms"


def test_exact_window_options():
    opts = batch(startingTimestamp="10", endingTimestamp="20", **{"sundial.exactTimeWindow": "true",
                                                                  "sundial.exactTimeWindow.maxDisorderMs": "500"})
    assert opts.exact_time_window and opts.exact_window_max_disorder_ms == 500
    assert stream(startingTimestamp="10", **{"sundial.exactTimeWindow": "true"}).exact_time_window


@pytest.mark.parametrize("text, ms", [("500", 500), ("500ms", 500), ("10s", 10_000), ("15m", 900_000),
                                      ("2h", 7_200_000), ("1d", 86_400_000), ("3min", 180_000)])
def test_time_strings(text, ms):
    assert parse_time_ms(text, "maxTriggerDelay") == ms
