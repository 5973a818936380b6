"""Sink options and the producer settings they become (no JVM, no broker)."""

import pytest

from sundial.pipeline.errors import OptionError
from sundial.pipeline.sink_options import parse_sink_options


def sink(streaming=False, **kw):
    return parse_sink_options({"kafka.bootstrap.servers": "h:1", **kw}, streaming=streaming)


def test_defaults_match_the_java_producer_spark_uses():
    opts = sink(topic="out")
    assert opts.topic == "out" and not opts.exactly_once and opts.input_format == "arrow"
    # idempotent like Kafka's Java producer since 3.0, keyed records hashed as the Java client does
    assert opts.producer_settings == {"enable.idempotence": "true", "partitioner": "murmur2_random"}
    assert opts.idempotent


def test_kafka_settings_pass_through_and_names_are_case_insensitive():
    opts = parse_sink_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "kafka.linger.ms": "50",
                               "kafka.compression.type": "lz4", "Sundial.ExactlyOnce": "TRUE",
                               "sundial.inputformat": "Rows"}, streaming=True)
    assert opts.bootstrap_servers == "h:1" and opts.streaming
    assert opts.producer_settings["linger.ms"] == "50" and opts.producer_settings["compression.type"] == "lz4"
    assert opts.exactly_once and opts.input_format == "rows"


def test_an_explicit_weaker_acks_turns_idempotence_off_as_in_the_java_client():
    assert sink(**{"kafka.acks": "1"}).producer_settings["enable.idempotence"] == "false"
    assert sink(**{"kafka.acks": "all"}).producer_settings["enable.idempotence"] == "true"
    assert sink(**{"kafka.acks": "-1"}).idempotent
    assert not sink(**{"kafka.enable.idempotence": "FALSE"}).idempotent


@pytest.mark.parametrize("raw, option, text", [
    ({}, "kafka.bootstrap.servers", "must be specified"),
    ({"kafka.bootstrap.servers": "h:1", "topic": "  "}, "topic", "empty"),
    ({"kafka.bootstrap.servers": "h:1", "kafka.key.serializer": "x"}, "kafka.key.serializer", "keys are written as bytes"),
    ({"kafka.bootstrap.servers": "h:1", "kafka.value.serializer": "x"}, "kafka.value.serializer", "values are written"),
    ({"kafka.bootstrap.servers": "h:1", "kafka.transactional.id": "x"}, "kafka.transactional.id",
     "sundial.transactionalIdPrefix"),
    ({"kafka.bootstrap.servers": "h:1", "sundial.exactlyOnce": "yes"}, "sundial.exactlyOnce", "'true' or 'false'"),
    ({"kafka.bootstrap.servers": "h:1", "sundial.exactlyonce": "true", "kafka.enable.idempotence": "false"},
     "kafka.enable.idempotence", "idempotent"),
    ({"kafka.bootstrap.servers": "h:1", "sundial.exactlyonce": "true", "kafka.acks": "1"}, "kafka.acks", "acks=all"),
    ({"kafka.bootstrap.servers": "h:1", "kafka.enable.idempotence": "maybe"}, "kafka.enable.idempotence", "'true'"),
    ({"kafka.bootstrap.servers": "h:1", "sundial.inputFormat": "pandas"}, "sundial.inputFormat", "'arrow' or 'rows'"),
    ({"kafka.bootstrap.servers": "h:1", "sundial.transactionalIdPrefix": ""}, "sundial.transactionalIdPrefix",
     "1 to 100"),
    ({"kafka.bootstrap.servers": "h:1", "sundial.exactlyonc": "true"}, "sundial.exactlyonc", "unknown option"),
    ({"kafka.bootstrap.servers": "h:1", "sundial.outputFormat": "rows"}, "sundial.outputformat", "unknown option"),
])
def test_refusals_name_the_option(raw, option, text):
    with pytest.raises(OptionError, match=text) as info:
        parse_sink_options(raw, streaming=False)
    assert info.value.option == option


def test_reader_options_are_ignored_by_the_sink_as_spark_does():
    opts = sink(topic="t", subscribe="x", startingOffsets="earliest", includeHeaders="true")
    assert opts.topic == "t"


def test_unknown_producer_names_are_dropped_and_bad_values_refused():
    pytest.importorskip("confluent_kafka")
    from sundial.pipeline.producer import check_producer_settings

    opts = check_producer_settings(sink(**{"kafka.buffer.memory": "1000", "kafka.linger.ms": "7"}))
    assert "buffer.memory" not in opts.producer_settings       # a Java-only name: logged and skipped
    assert opts.producer_settings["linger.ms"] == "7"
    with pytest.raises(OptionError, match="JAAS") as info:     # known to librdkafka, and refused
        check_producer_settings(sink(**{"kafka.linger.ms": "7", "kafka.sasl.jaas.config": "x"}))
    assert info.value.option == "kafka.sasl.jaas.config"
    with pytest.raises(OptionError) as info:
        check_producer_settings(sink(**{"kafka.linger.ms": "soon"}))
    assert info.value.option == "kafka.linger.ms"
    with pytest.raises(OptionError, match="acks"):
        check_producer_settings(sink(**{"kafka.acks": "1", "kafka.enable.idempotence": "true"}))
