"""What the command line says to an operator with Kafka's habits: an unknown option is refused
with the usage of the (sub)command it was given to, and the console tools take Kafka's
``--producer.config`` / ``--consumer.config`` for ``--command-config``."""

import pytest

from sundial.cli import build_parser, main


@pytest.mark.parametrize("tool, kafka_name", [("console-producer", "--producer.config"),
                                              ("console-consumer", "--consumer.config")])
def test_the_console_tools_take_kafkas_client_config_option(tool, kafka_name):
    parser = build_parser()
    base = [tool, "--bootstrap-server", "127.0.0.1:9092", "--topic", "t"]
    assert parser.parse_args(base + [kafka_name, "client.properties"]).command_config == "client.properties"
    assert parser.parse_args(base + ["--command-config", "client.properties"]).command_config == "client.properties"
    assert parser.parse_args(base).command_config is None


@pytest.mark.parametrize("argv, prog", [
    (["console-consumer", "--bootstrap-server", "127.0.0.1:9092", "--topic", "t", "--include", "x.*"],
     "sundial console-consumer"),
    (["console-producer", "--bootstrap-server", "127.0.0.1:9092", "--topic", "t", "--producer-property", "a=b"],
     "sundial console-producer"),
    (["topics", "create", "--bootstrap-server", "127.0.0.1:9092", "--topic", "t", "--bogus"], "sundial topics create"),
    (["get-offsets", "--bootstrap-server", "127.0.0.1:9092", "extra"], "sundial get-offsets"),
])
def test_an_unknown_option_is_refused_with_the_usage_of_its_command(argv, prog, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    unknown = " ".join(argv[argv.index(next(a for a in argv if a in ("--include", "--producer-property", "--bogus",
                                                                        "extra"))):])
    assert err.startswith(f"usage: {prog} ")
    assert err.rstrip("\n").splitlines()[-1] == f"{prog}: error: unrecognized arguments: {unknown}"


def test_a_missing_command_still_gets_sundials_usage(capsys):
    with pytest.raises(SystemExit) as exited:
        main([])
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("usage: sundial [-h]")
