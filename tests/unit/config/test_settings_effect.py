"""Every declared setting either has a reader outside ``config/`` or is marked accepted for compatibility.

The check is static and works on the syntax tree, not on text: the components receive their
settings as typed objects (``TopicConfig``, ``CleanerConfig``, ``GroupCoordinatorConfig`` and its
families, ``ShareCoordinatorConfig``, ``GroupConfig``, the component views of ``config.components``
such as ``SocketServerConfig``) or read a typed property of ``BrokerConfig``. A key counts as read when,
in a module outside ``config/``:

* its name (or an alias) is the index of a subscript or the first argument of ``.get(...)``, as a
  literal, a name bound to the literal (``KEY = "a.b"``) or a loop variable over literals (a key
  mentioned in a log message, a docstring or a format string does not count); or
* the typed field it becomes is read as an attribute (``config.segment_bytes``), directly or through a
  property of its class that reads it (``TopicConfig.compact`` reads ``cleanup_policy``). A field
  name that several typed classes share, and any field of the group protocols' families, counts only on
  an expression naming its class's family (``consumer.max_size``, ``self._share_config.max_size``).

Broker keys that only feed another key count through it: a topic key's broker synonyms
(``log.retention.hours`` → ``retention.ms``) and the broker keys that default or bound a group key
(``group.consumer.min.session.timeout.ms`` → ``consumer.session.timeout.ms``).
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
from dataclasses import dataclass

import pytest
from support.config_lookups import keys_looked_up, string_bindings

from sundial.config import group as group_mod
from sundial.config import topic as topic_mod
from sundial.config.broker import BROKER_CONFIGS, CLEANER_FIELD_FOR_KEY, BrokerConfig, CleanerConfig, \
    unknown_key_warnings
from sundial.config.components import COMPONENT_VIEWS, AuthorizerConfig, ClassicGroupsConfig, \
    LogSchedulingConfig, OffsetsConfig, SaslConfig, SocketServerConfig, SslConfig, TopicAdminConfig, \
    TransactionConfig
from sundial.config.defs import ConfigDef, did_you_mean, edit_distance
from sundial.config.quotas import ClientQuotaConfig
from sundial.config.group import GROUP_CONFIGS, GroupConfig, describe_group_config
from sundial.config.group_coordinator import ConsumerGroupConfig, GroupCoordinatorConfig, ShareGroupConfig, \
    StreamsGroupConfig
from sundial.config.share import ShareCoordinatorConfig
from sundial.config.topic import TOPIC_CONFIGS, TopicConfig, describe_topic_config, normalize_overrides
from sundial.config.defs import ConfigError

REPO = pathlib.Path(__file__).resolve().parents[3]
#: Every package of the daemon and its tools except config/ itself.
READER_PACKAGES = ("broker", "protocol", "storage", "records", "tools", "pipeline", "sundial")

#: The typed classes, and the word an expression must contain to read a field name several of them share.
TYPED = {
    TopicConfig: "config", CleanerConfig: "clean", ShareCoordinatorConfig: "settings",
    ConsumerGroupConfig: "consumer", ShareGroupConfig: "share", StreamsGroupConfig: "streams",
    GroupCoordinatorConfig: "coordinator", GroupConfig: "config", BrokerConfig: "config",
    SocketServerConfig: "socket", SslConfig: "cfg", SaslConfig: "cfg", AuthorizerConfig: "config",
    TopicAdminConfig: "topic_admin", ClassicGroupsConfig: "classic", OffsetsConfig: "offsets",
    TransactionConfig: "config", LogSchedulingConfig: "sched", ClientQuotaConfig: "config",
}


#: The group protocols' families share their field names with the classic groups' settings objects, so a
#: read of one of their fields counts only on an expression naming the family.
ALWAYS_QUALIFIED = (ConsumerGroupConfig, ShareGroupConfig, StreamsGroupConfig)


@dataclass(frozen=True)
class Field:
    owner: type
    name: str


# --- what the code outside config/ reads --------------------------------------------------------------
@dataclass
class Reads:
    names: set[str] = dataclasses.field(default_factory=set)
    attrs: dict[str, list[str]] = dataclasses.field(default_factory=dict)   # attribute -> base expressions

    def scan(self, source: str) -> "Reads":
        tree = ast.parse(source)
        bound = string_bindings(tree)
        for node in ast.walk(tree):
            self.names.update(keys_looked_up(node, bound))
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                self.attrs.setdefault(node.attr, []).append(ast.unparse(node.value).lower())
        return self


@pytest.fixture(scope="module")
def reads() -> Reads:
    r = Reads()
    for package in READER_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            r.scan(path.read_text(encoding="utf-8"))
    return r


def _class_properties() -> dict[Field, set[str]]:
    """(class, field or key) -> names of the class's properties and methods that read it: ``self.<field>``
    or ``self.values["<key>"]`` inside a ``@property`` or a plain method of a typed class in config/
    (``SaslConfig.credentials_path`` reads ``credentials_file``)."""
    by_name = {cls.__name__: cls for cls in TYPED}
    found: dict[Field, set[str]] = {}
    for path in sorted((REPO / "config").glob("*.py")):
        for cls_node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(cls_node, ast.ClassDef) or cls_node.name not in by_name:
                continue
            cls = by_name[cls_node.name]
            for fn in cls_node.body:
                if not isinstance(fn, ast.FunctionDef) or fn.name.startswith("_") or any(
                        isinstance(d, ast.Name) and d.id in ("classmethod", "staticmethod")
                        for d in fn.decorator_list):
                    continue
                for node in ast.walk(fn):
                    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                            and node.value.id == "self":
                        found.setdefault(Field(cls, node.attr), set()).add(fn.name)
                    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                        found.setdefault(Field(cls, str(node.slice.value)), set()).add(fn.name)
    return found


PROPERTIES = _class_properties()
_ALL_FIELD_NAMES: dict[str, int] = {}
for _cls in TYPED:
    names = {f.name for f in dataclasses.fields(_cls)} if dataclasses.is_dataclass(_cls) else set()
    names |= {f.name for f in PROPERTIES if f.owner is _cls and not "." in f.name}
    for _n in names:
        _ALL_FIELD_NAMES[_n] = _ALL_FIELD_NAMES.get(_n, 0) + 1


def field_is_read(f: Field, r: Reads, seen: frozenset = frozenset()) -> bool:
    if f in seen:
        return False
    bases = r.attrs.get(f.name, [])
    if _ALL_FIELD_NAMES.get(f.name, 0) > 1 or f.owner in ALWAYS_QUALIFIED:
        bases = [b for b in bases if TYPED[f.owner] in b]
    if bases:
        return True
    return any(field_is_read(Field(f.owner, p), r, seen | {f}) for p in PROPERTIES.get(f, ()))


# --- which typed fields and names each key becomes --------------------------------------------------------
def topic_readers(d: ConfigDef) -> list:
    if d.name == topic_mod.MESSAGE_TIMESTAMP_DIFFERENCE_MAX_MS.name:
        fields = ["message_timestamp_before_max_ms", "message_timestamp_after_max_ms"]
    elif d.name.startswith("retention.commitoffset."):
        fields = ["retention_commitoffset_ms"]
    elif d.name in ("message.timestamp.before.max.ms", "message.timestamp.after.max.ms"):
        fields = [d.name.replace(".", "_")]
    else:
        fields = [f for f in [topic_mod._FIELD_FOR_KEY.get(d.name)] if f]
    return [Field(TopicConfig, f) for f in fields]


def group_readers(name: str) -> list:
    return [Field(GroupConfig, name.replace(".", "_"))]


_FAMILIES = {"group.consumer.": ConsumerGroupConfig, "group.share.": ShareGroupConfig,
             "group.streams.": StreamsGroupConfig}


def broker_readers(d: ConfigDef) -> list:
    out: list = [d.name, *d.aliases]
    if d.name in CLEANER_FIELD_FOR_KEY:
        out.append(Field(CleanerConfig, CLEANER_FIELD_FOR_KEY[d.name]))
    for view, field_for_key in COMPONENT_VIEWS.items():
        if d.name in field_for_key:
            out.append(Field(view, field_for_key[d.name]))
    if d.name in ("quota.window.num", "quota.window.size.seconds"):     # handed whole to the client quotas
        out.append(Field(ClientQuotaConfig, d.name[len("quota."):].replace(".", "_")))
    for prefix, cls in _FAMILIES.items():
        if d.name.startswith(prefix):
            out.append(Field(cls, d.name[len(prefix):].replace(".", "_")))
    if d.name == "share.fetch.purgatory.purge.interval.requests":
        out.append(Field(ShareGroupConfig, "fetch_purgatory_purge_interval_requests"))
    if d.name == "group.coordinator.rebalance.protocols":
        out.append(Field(GroupCoordinatorConfig, "rebalance_protocols"))
    if d.name.startswith("share.coordinator."):
        out.append(Field(ShareCoordinatorConfig, d.name[len("share.coordinator."):].replace(".", "_")))
    if d.name == "log.retention.commitoffset.enable":     # resolve_topic_config copies it to every topic
        out.append(Field(TopicConfig, "consumed_retention_enabled"))
    if d.name in {k for k, _ in topic_mod._BROKER_COMMITOFFSET_KEYS}:
        out.append(Field(TopicConfig, "retention_commitoffset_ms"))
    for td in TOPIC_CONFIGS:                                # a synonym feeds the topic key
        if any(s.name in (d.name, *d.aliases) for s in td.synonyms) and td.has_effect:
            out.extend(topic_readers(td))
    for group_key, spec in group_mod._KEYS.items():          # a default or bound of a group key
        if d.name in (spec.default_key, spec.lower_key, spec.upper_key) and GROUP_CONFIGS.defs[group_key].has_effect:
            out.extend(group_readers(group_key))
    out.extend(Field(BrokerConfig, p) for p in PROPERTIES.get(Field(BrokerConfig, d.name), ()))
    return out


def all_keys():
    yield from (("broker", d, broker_readers(d)) for d in BROKER_CONFIGS)
    yield from (("topic", d, [d.name, *d.aliases, *topic_readers(d)]) for d in TOPIC_CONFIGS)
    yield from (("group", d, [d.name, *group_readers(d.name)]) for d in GROUP_CONFIGS)


def is_read(reader, r: Reads) -> bool:
    return reader in r.names if isinstance(reader, str) else field_is_read(reader, r)


# --- the checks ------------------------------------------------------------------------------------------
def test_every_key_with_an_effect_has_a_reader(reads):
    unread = [f"{scope} {d.name} (looked for {', '.join(map(_show, readers))})"
              for scope, d, readers in all_keys() if d.has_effect and not any(is_read(x, reads) for x in readers)]
    assert not unread, ("keys declared as having an effect that nothing outside config/ reads; wire them or "
                        "mark them with compatibility_only():\n" + "\n".join(unread))


def test_a_compatibility_key_is_not_read(reads):
    """A key wired since it was marked must lose the mark (it would be reported read-only and warned)."""
    read = [f"{scope} {d.name}" for scope, d, readers in all_keys()
            if not d.has_effect and any(is_read(x, reads) for x in readers if not isinstance(x, str)
                                        or scope == "broker")]
    assert not read, "keys marked as without effect that are now read; drop compatibility_only():\n" + "\n".join(read)


def _show(reader) -> str:
    return repr(reader) if isinstance(reader, str) else f"{reader.owner.__name__}.{reader.name}"


def test_the_scan_counts_reads_not_mentions():
    r = Reads().scan('''
log.info("socket.request.max.bytes is %s", 1)
x = f"{cfg['socket.send.buffer.bytes']}"
limit = cfg["queued.max.requests"]
y = cfg.get("node.id", 1)
"""docstring naming connections.max.idle.ms"""
z = topic_config.segment_bytes
settings.segment_ms = 5
LIMIT_KEY = "fetch.max.bytes"
n = cfg[LIMIT_KEY]
for key in ("ssl.keystore.type", "ssl.truststore.type"):
    check(cfg[key])
''')
    assert "queued.max.requests" in r.names and "node.id" in r.names and "socket.send.buffer.bytes" in r.names
    assert {"fetch.max.bytes", "ssl.keystore.type", "ssl.truststore.type"} <= r.names
    assert "socket.request.max.bytes" not in r.names and "connections.max.idle.ms" not in r.names
    assert field_is_read(Field(TopicConfig, "segment_bytes"), r)
    assert not field_is_read(Field(TopicConfig, "segment_ms"), r)            # a write is not a read


def test_a_shared_field_name_needs_its_family():
    r = Reads().scan("a = consumer.max_size\nb = request.enable\n")
    assert field_is_read(Field(ConsumerGroupConfig, "max_size"), r)
    assert not field_is_read(Field(ShareGroupConfig, "max_size"), r)
    assert not field_is_read(Field(CleanerConfig, "enable"), r)
    assert field_is_read(Field(CleanerConfig, "enable"), Reads().scan("on = config.cleaner.enable\n"))


def test_a_field_read_through_a_property_counts():
    # TopicConfig.compact reads cleanup_policy
    assert field_is_read(Field(TopicConfig, "cleanup_policy"), Reads().scan("if log.config.compact: pass\n"))
    assert not field_is_read(Field(TopicConfig, "cleanup_policy"), Reads().scan("x = 1\n"))


COMPAT_BROKER = {"default.replication.factor", "num.recovery.threads.per.data.dir", "min.insync.replicas",
                 "unclean.leader.election.enable", "group.share.assignors",
                 "share.fetch.purgatory.purge.interval.requests", "share.coordinator.state.topic.num.partitions",
                 "share.coordinator.state.topic.compression.codec", "share.coordinator.threads",
                 "share.coordinator.load.buffer.size", "share.coordinator.append.linger.ms"}


def test_compatibility_keys_are_read_only_and_say_so():
    marked = {d.name for d in BROKER_CONFIGS if not d.has_effect}
    assert marked - {d for d in marked if d.startswith("group.streams.")} >= COMPAT_BROKER - {
        "num.recovery.threads.per.data.dir"}
    assert {d.name for d in TOPIC_CONFIGS if not d.has_effect} == {"min.insync.replicas",
                                                                  "unclean.leader.election.enable"}
    assert {d.name for d in GROUP_CONFIGS if not d.has_effect} == {d.name for d in GROUP_CONFIGS
                                                                  if d.name.startswith("streams.")}
    rows = [*BrokerConfig().describe(), *describe_topic_config({}, {}),
            *describe_group_config({}, GroupCoordinatorConfig())]
    registries = (BROKER_CONFIGS, TOPIC_CONFIGS, GROUP_CONFIGS)
    compat = [(r, d) for r in rows for reg in registries if (d := reg.get(r.name)) is not None and not d.has_effect]
    assert len(compat) >= len(COMPAT_BROKER) + 2
    for row, d in compat:
        assert row.read_only, row.name
        assert "Accepted for compatibility, without effect in Sundial: " in row.doc, row.name
        assert d.compat_reason in row.doc


def test_set_compatibility_keys_are_listed_for_the_warning():
    cfg = BrokerConfig({"min.insync.replicas": "2", "group.streams.max.size": "5", "num.partitions": "3",
                        "share.coordinator.threads": "2"})
    warned = dict(BROKER_CONFIGS.without_effect(cfg.explicit))
    assert set(warned) == {"min.insync.replicas", "group.streams.max.size", "share.coordinator.threads"}
    assert all(warned.values())
    assert TOPIC_CONFIGS.without_effect(["retention.ms", "unclean.leader.election.enable"]) == [
        ("unclean.leader.election.enable", TOPIC_CONFIGS.defs["unclean.leader.election.enable"].compat_reason)]
    assert BROKER_CONFIGS.without_effect([]) == []


def test_docs_list_every_compatibility_key():
    doc = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    for registry in (BROKER_CONFIGS, TOPIC_CONFIGS, GROUP_CONFIGS):
        for d in registry:
            if not d.has_effect:
                listed = f"`{d.name}`" in doc or (d.name.startswith("group.streams.") and "`group.streams.*`" in doc)
                assert listed, f"docs/configuration.md does not list {d.name} as accepted for compatibility"


# --- did you mean ----------------------------------------------------------------------------------------
def _brute_osa(a: str, b: str) -> int:
    """Optimal string alignment distance by the textbook full table (an independent oracle)."""
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


def test_edit_distance_equals_the_full_table():
    from hypothesis import given, strategies as st
    words = st.text(alphabet="abc.", max_size=8)

    @given(words, words)
    def check(a, b):
        assert edit_distance(a, b) == _brute_osa(a, b)
        assert edit_distance(a, b) == edit_distance(b, a)

    check()


@pytest.mark.parametrize("typo, meant", [
    ("log.retention.hour", "log.retention.hours"),
    ("log.retension.hours", "log.retention.hours"),
    ("num.partiitons", "num.partitions"),
    ("auto.create.topic.enable", "auto.create.topics.enable"),
    ("retention.hours", "log.retention.hours"),               # a word left out
    ("log.segment.bytes.max", "log.segment.bytes"),          # a word added
    ("log.segment.size", None),
    ("listenres", "listeners"),
    ("listner", None),                                        # short names: one edit at most
])
def test_broker_typos_get_a_suggestion(typo, meant):
    assert did_you_mean(typo, BROKER_CONFIGS.defs) == meant
    if meant is not None:
        assert unknown_key_warnings([typo]) == [(typo, meant)]


def test_unrelated_and_kafka_keys_get_no_suggestion():
    assert unknown_key_warnings(["zookeeper.connect", "completely.unrelated.setting", "foo"]) == [
        ("completely.unrelated.setting", None), ("foo", None), ("zookeeper.connect", None)]
    assert did_you_mean("num.partitions", BROKER_CONFIGS.defs) is None     # a known key is no typo


def test_unknown_topic_key_is_refused_with_a_suggestion():
    with pytest.raises(ConfigError) as exc:
        normalize_overrides({"retention.msec": "1000"})
    assert str(exc.value) == "retention.msec: unknown topic config name; did you mean retention.ms?"
    with pytest.raises(ConfigError) as exc:
        normalize_overrides({"log.retention.ms": "1000"})         # the broker spelling on a topic
    assert exc.value.message.endswith("did you mean retention.ms?")
    with pytest.raises(ConfigError) as exc:
        normalize_overrides({"nothing.like.it": "1"})
    assert exc.value.message == "unknown topic config name"


def test_unknown_group_key_is_refused_with_a_suggestion():
    with pytest.raises(ConfigError) as exc:
        group_mod.validate_group_config({"consumer.sesion.timeout.ms": "50000"}, GroupCoordinatorConfig())
    assert exc.value.message == ("Unknown group config name: consumer.sesion.timeout.ms; "
                                 "did you mean consumer.session.timeout.ms?")
