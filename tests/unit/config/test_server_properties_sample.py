"""The shipped ``config/server.properties`` sample is read by the broker's own loader, every key in
it is accepted, and it starts the same broker as no file at all (it claims to hold the defaults)."""

from __future__ import annotations

import os
import re

from sundial.config import BROKER_CONFIGS, BrokerConfig, load_broker_config, parse_properties

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SAMPLE = os.path.join(ROOT, "config", "server.properties")
#: ``#key=value`` lines: examples of settings that are off by default.
EXAMPLE = re.compile(r"^#([a-z][a-z0-9.]*[a-z0-9])=(.*)$")


def _text() -> str:
    with open(SAMPLE, encoding="utf-8") as fh:
        return fh.read()


def test_every_key_of_the_sample_is_accepted():
    config, unknown = load_broker_config(SAMPLE)
    assert unknown == {}
    pairs = parse_properties(_text())
    assert len(pairs) >= 25
    assert set(config.explicit) == {BROKER_CONFIGS.canonical(k) for k, _ in pairs}


def test_the_sample_holds_the_defaults():
    config, _ = load_broker_config(SAMPLE)
    default = BrokerConfig()
    for key in config.explicit:
        if key == "log.dirs":       # the sample names the directory that log.dir defaults to
            assert config.log_dirs == default.log_dirs
            continue
        assert config.values[key] == default.values[key], key
    assert config.topic_defaults() == default.topic_defaults()
    assert config.listeners == default.listeners and config.cleaner == default.cleaner


def test_every_example_setting_is_a_broker_key_with_a_valid_value():
    examples = [m.groups() for m in map(EXAMPLE.match, _text().splitlines()) if m]
    assert len(examples) >= 8
    for key, value in examples:
        definition = BROKER_CONFIGS.get(key)
        assert definition is not None, key
        definition.parse(value)
        _, unknown = load_broker_config(None, [f"{key}={value}"])
        assert unknown == {}, key
