"""The broker reads its settings through typed objects, never by dotted name.

Every component takes a typed view built once from the ``config/`` definitions
(``config.components``, ``CleanerConfig``, ``GroupCoordinatorConfig``, ``TopicConfig`` ...).
The check walks the syntax tree of every module of ``broker/`` and refuses a subscript or a
``.get(...)`` whose key is a string literal, or a module name bound to one, naming a key
registered in ``config/`` (broker, topic or group key, or an alias): ``config["x.y"]``,
``cfg.get("x.y")``. A key in a log message, a docstring or a dict literal is no lookup.
"""

from __future__ import annotations

import ast
import pathlib

import pytest
from support.config_lookups import keys_looked_up, string_bindings

from sundial.config.broker import BROKER_CONFIGS, BrokerConfig
from sundial.config.components import COMPONENT_VIEWS
from sundial.config.group import GROUP_CONFIGS
from sundial.config.topic import TOPIC_CONFIGS

REPO = pathlib.Path(__file__).resolve().parents[2]

#: Lookups still to be replaced by a typed field, per module (none left; only removals are expected).
NOT_YET_TYPED: dict[str, set[str]] = {}

#: Keys read from a file of another format that happens to share a config key's name, not from
#: the configuration: ``meta.properties`` of a data directory names its node (``node.id``, or
#: ``broker.id`` as older Kafka wrote it).
FILE_FORMAT_KEYS: dict[str, set[str]] = {
    "broker/server.py": {"node.id", "broker.id"},
}


def _registered_keys() -> set[str]:
    keys: set[str] = set()
    for registry in (BROKER_CONFIGS, TOPIC_CONFIGS, GROUP_CONFIGS):
        for d in registry:
            keys.add(d.name)
            keys.update(d.aliases)
    return keys


KEYS = _registered_keys()


def dotted_lookups(source: str) -> list[tuple[int, str]]:
    """(line, key) of every lookup of a registered key by name in ``source``."""
    tree = ast.parse(source)
    bound = string_bindings(tree)
    return [(node.lineno, key) for node in ast.walk(tree) for key in sorted(keys_looked_up(node, bound))
            if key in KEYS]


def test_the_scan_finds_lookups_not_mentions():
    found = dotted_lookups('''
KEY = "fetch.max.bytes"
log.info("socket.request.max.bytes is %s", 1)
"""docstring naming connections.max.idle.ms"""
overrides = {"segment.bytes": "1024"}
a = cfg["num.partitions"]
b = config.get("broker.id", 1)
c = self.config[KEY]
d = headers["x.unknown.key"]
e = cfg.sockets.request_max_bytes
''')
    assert found == [(6, "num.partitions"), (7, "broker.id"), (8, "fetch.max.bytes")]


def test_no_dotted_config_lookup_in_broker():
    offenders = []
    for path in sorted((REPO / "broker").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        allowed = NOT_YET_TYPED.get(rel, set()) | FILE_FORMAT_KEYS.get(rel, set())
        for line, key in dotted_lookups(path.read_text(encoding="utf-8")):
            if key not in allowed:
                offenders.append(f"{rel}:{line}: {key}")
    assert not offenders, ("settings read by dotted name; read the typed view instead (config/components.py, "
                           "BrokerConfig's typed properties):\n" + "\n".join(offenders))


def test_the_allow_lists_name_existing_modules():
    for rel in (*NOT_YET_TYPED, *FILE_FORMAT_KEYS):
        assert (REPO / rel).is_file(), rel


@pytest.mark.parametrize("view", list(COMPONENT_VIEWS))
def test_each_view_copies_its_keys(view):
    """Every field of a component view comes from a registered broker key, and the view the broker
    builds holds the value that key was given (a value unlike the default, so a field left at its
    default or fed by another key shows)."""
    field_for_key = COMPONENT_VIEWS[view]
    assert set(field_for_key.values()) == set(view.__dataclass_fields__), view.__name__
    explicit = {}
    for key in field_for_key:
        d = BROKER_CONFIGS.get(key)
        assert d is not None and d.name == key, key
        explicit[key] = _other_value(d)
    cfg = BrokerConfig(explicit)
    built = next(v for v in vars(cfg).values() if type(v) is view)
    for key, field in field_for_key.items():
        expected = cfg.values[key] * 60_000 if key == "offsets.retention.minutes" else cfg.values[key]
        assert getattr(built, field) == expected, (key, field)


def _other_value(d) -> str:
    """A text for key ``d`` that parses to something other than its default and passes its checks."""
    special = {
        "ssl.client.auth": "requested", "ssl.keystore.type": "pkcs12", "ssl.truststore.type": "jks",
        "ssl.enabled.protocols": "TLSv1.3", "ssl.cipher.suites": "ECDHE-RSA-AES128-GCM-SHA256",
        "sasl.enabled.mechanisms": "PLAIN", "max.connections.per.ip.overrides": "10.0.0.1:3",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "true", "auto.create.topics.enable": "false",
        "delete.topic.enable": "false", "socket.send.buffer.bytes": "-1",
    }
    if d.name in special:
        return special[d.name]
    if d.type.name in ("STRING", "PASSWORD"):
        return f"/some/{d.name}"
    if d.type.name == "BOOLEAN":
        return "false" if d.default else "true"
    return str((d.default or 0) + 7 if (d.default or 0) < 2**30 else 12_345)
