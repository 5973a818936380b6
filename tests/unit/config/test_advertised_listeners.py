"""What clients are told: advertised listeners must be routable and name real listeners (as Kafka checks)."""

from __future__ import annotations

import pytest

from sundial.config import BrokerConfig, ConfigError


@pytest.mark.parametrize("settings, message", [
    ({"listeners": "PLAINTEXT://0.0.0.0:9092"},
     "listener PLAINTEXT binds 0.0.0.0, which clients cannot connect to; set advertised.listeners=PLAINTEXT://HOST:9092"),
    ({"listeners": "PLAINTEXT://[::]:9092"}, "listener PLAINTEXT binds ::, which clients cannot connect to"),
    ({"listeners": "PLAINTEXT://0.0.0.0:9092", "advertised.listeners": "PLAINTEXT://0.0.0.0:9092"},
     "PLAINTEXT://0.0.0.0:9092 uses the non-routable address 0.0.0.0"),
    ({"listeners": "PLAINTEXT://0.0.0.0:9092", "advertised.listeners": "PLAINTEXT://[::]:9092"},
     "PLAINTEXT://[::]:9092 uses the non-routable address ::"),
    ({"listeners": "PLAINTEXT://127.0.0.1:9092", "advertised.listeners": "SSL://broker:9093"},
     "listener name SSL is not in listeners (PLAINTEXT)"),
])
def test_refused(settings, message):
    with pytest.raises(ConfigError) as info:
        BrokerConfig(settings)
    assert info.value.name == "advertised.listeners"
    assert message in info.value.message


def test_accepted():
    cfg = BrokerConfig({"listeners": "DOCKER://0.0.0.0:29092,HOST://0.0.0.0:9092",
                        "advertised.listeners": "DOCKER://sundial:29092,HOST://127.0.0.1:9092",
                        "listener.security.protocol.map": "DOCKER:PLAINTEXT,HOST:PLAINTEXT"})
    assert [(l.name, l.host, l.port) for l in cfg.advertised_listeners] == [
        ("DOCKER", "sundial", 29092), ("HOST", "127.0.0.1", 9092)]
    only_one = BrokerConfig({"listeners": "A://0.0.0.0:1,B://127.0.0.1:2", "advertised.listeners": "A://h:1",
                             "listener.security.protocol.map": "A:PLAINTEXT,B:PLAINTEXT"})
    assert [l.name for l in only_one.advertised_listeners] == ["A"]
    assert BrokerConfig({"listeners": "PLAINTEXT://:9092"}).advertised_listeners[0].host == ""
