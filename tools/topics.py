"""``sundial topics``: create, list, describe, alter-config, add-partitions and delete topics.

Over the wire (CreateTopics, Metadata, DescribeConfigs with synonyms,
IncrementalAlterConfigs, CreatePartitions, DeleteTopics) through kafka-python's
``KafkaAdminClient``, so it works against any Kafka-compatible broker.

``describe`` prints kafka-topics.sh's lines (a topic line with its overrides, then
one line per partition), followed by the topic's configs with their source:

* ``topic``   – set on the topic (DYNAMIC_TOPIC_CONFIG);
* ``broker``  – the broker's setting, named after it (``log.retention.ms``)
  (STATIC_BROKER_CONFIG and the dynamic broker sources);
* ``default`` – Kafka's default (DEFAULT_CONFIG).

By default only the non-default configs are listed; ``--all-configs`` lists every one.
"""

from __future__ import annotations

import argparse
import re

from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, NewTopic
import kafka.errors as kafka_errors

from .common import ClientSettings, ToolError, add_bootstrap_argument, add_client_arguments, format_table, \
    parse_key_values, refusal, split_names, tool_command
from .wire import unknown_topic

SOURCE_NAMES = {
    "DYNAMIC_TOPIC_CONFIG": "topic",
    "DYNAMIC_BROKER_CONFIG": "broker",
    "DYNAMIC_DEFAULT_BROKER_CONFIG": "broker",
    "STATIC_BROKER_CONFIG": "broker",
    "DEFAULT_CONFIG": "default",
}

EPILOG = """examples:
  sundial topics create --bootstrap-server 127.0.0.1:9092 --topic orders --partitions 6 \\
      --config message.timestamp.type=LogAppendTime --config retention.ms=86400000
  sundial topics list --bootstrap-server 127.0.0.1:9092
  sundial topics describe --bootstrap-server 127.0.0.1:9092 --topic orders --all-configs
  sundial topics alter-config --bootstrap-server 127.0.0.1:9092 --topic orders \\
      --add-config retention.ms=3600000,segment.ms=600000 --delete-config cleanup.policy
  sundial topics add-partitions --bootstrap-server 127.0.0.1:9092 --topic orders --partitions 12
  sundial topics delete --bootstrap-server 127.0.0.1:9092 --topic orders"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "topics", help="create, list, describe, alter-config, add-partitions, delete topics",
        description="Manage topics on any Kafka-compatible broker. describe shows each config with its "
                    "source: topic (set on the topic), broker (the broker's setting) or default.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    common = argparse.ArgumentParser(add_help=False)
    add_bootstrap_argument(common)
    add_client_arguments(common)

    c = actions.add_parser("create", parents=[common], help="create a topic",
                           description="Create a topic (CreateTopics).")
    c.add_argument("--topic", required=True, help="topic name")
    c.add_argument("--partitions", type=int, default=None, metavar="N",
                   help="number of partitions (default: the broker's num.partitions)")
    c.add_argument("--replication-factor", type=int, default=None, metavar="N",
                   help="replicas per partition (default: the broker's default.replication.factor)")
    c.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config override, e.g. message.timestamp.type=LogAppendTime (repeatable, "
                        "or comma-separated; [a,b] for a list value)")
    c.add_argument("--if-not-exists", action="store_true", help="succeed quietly if the topic exists")
    c.add_argument("--validate-only", action="store_true", help="check the request without creating the topic")
    c.set_defaults(func=run)

    ls = actions.add_parser("list", parents=[common], help="list topic names",
                            description="List topic names, one per line, sorted.")
    ls.add_argument("--exclude-internal", action="store_true", help="leave out internal topics (__consumer_offsets)")
    ls.set_defaults(func=run)

    d = actions.add_parser("describe", parents=[common], help="partitions and configs (with their source)",
                           description="Describe topics: partitions with leader, replicas and ISR, then configs "
                                       "with their source (topic, broker or default).")
    d.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                   help="topic name or regular expression (repeatable; default: every topic)")
    d.add_argument("--all-configs", action="store_true", help="list every config, not only the non-default ones")
    d.add_argument("--exclude-internal", action="store_true", help="leave out internal topics")
    d.set_defaults(func=run)

    a = actions.add_parser("alter-config", parents=[common], help="set or remove topic config overrides",
                           description="Set or remove topic config overrides (IncrementalAlterConfigs). A "
                                       "removed override falls back to the broker's setting or the default.")
    a.add_argument("--topic", required=True, help="topic name")
    a.add_argument("--add-config", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE...]",
                   help="overrides to set (repeatable; [a,b] for a list value)")
    a.add_argument("--delete-config", action="append", default=[], metavar="KEY[,KEY...]",
                   help="overrides to remove (repeatable)")
    a.set_defaults(func=run)

    ap = actions.add_parser("add-partitions", parents=[common], help="raise a topic's partition count",
                            description="Raise a topic's partition count (CreatePartitions). Keys hash to "
                                        "different partitions afterwards.")
    ap.add_argument("--topic", required=True, help="topic name")
    ap.add_argument("--partitions", type=int, required=True, metavar="N", help="the new total partition count")
    ap.set_defaults(func=run)

    x = actions.add_parser("delete", parents=[common], help="delete topics",
                           description="Delete topics (DeleteTopics). Their data is removed.")
    x.add_argument("--topic", action="append", required=True, metavar="TOPIC",
                   help="topic to delete (repeatable or comma-separated)")
    x.add_argument("--if-exists", action="store_true", help="succeed quietly for topics that do not exist")
    x.set_defaults(func=run)


@tool_command("topics")
def run(args) -> int:
    settings = ClientSettings.from_args(args)
    if args.action == "create":
        _check_create_args(args)
    with settings.admin_session() as admin:
        return _ACTIONS[args.action](admin, args)


def _check_create_args(args) -> None:
    if args.partitions is not None and args.partitions < 1:
        raise ToolError("--partitions must be at least 1")
    if args.replication_factor is not None and args.replication_factor < 1:
        raise ToolError("--replication-factor must be at least 1")


def _create(admin, args) -> int:
    configs = parse_key_values(args.config)
    topic = NewTopic(args.topic, args.partitions if args.partitions is not None else -1,
                     args.replication_factor if args.replication_factor is not None else -1,
                     topic_configs=configs)
    response = admin.create_topics([topic], validate_only=args.validate_only, raise_errors=False)
    for result in response.get("topics", []):
        code = result.get("error_code", 0)
        if code == kafka_errors.TopicAlreadyExistsError.errno and args.if_not_exists:
            return 0
        if code:
            message = result.get("error_message") or kafka_errors.for_code(code).__name__
            if code == kafka_errors.TopicAlreadyExistsError.errno:
                raise ToolError(f"topic {args.topic!r} already exists")
            raise refusal(code, operation="Create", resource=f"topic {args.topic!r}",
                          doing=f"create topic {args.topic!r}", message=message)
    if args.validate_only:
        print(f"Topic {args.topic} can be created (validate only).")
    else:
        print(f"Created topic {args.topic}.")
    return 0


def _list(admin, args) -> int:
    for name in sorted(admin.list_topics()):
        if args.exclude_internal and name.startswith("__"):
            continue
        print(name)
    return 0


def _select_topics(admin, patterns: list[str], exclude_internal: bool) -> list[str]:
    names = sorted(admin.list_topics())
    if exclude_internal:
        names = [n for n in names if not n.startswith("__")]
    if not patterns:
        return names
    chosen: list[str] = []
    for pattern in split_names(patterns):
        if pattern in names:
            matched = [pattern]
        else:
            try:
                regex = re.compile(pattern)
            except re.error:
                matched = []
            else:
                matched = [n for n in names if regex.fullmatch(n)]
        if not matched:
            raise unknown_topic(admin, pattern)
        chosen.extend(m for m in matched if m not in chosen)
    return chosen


def topic_configs(admin, topic: str) -> dict[str, dict]:
    """``{name: {"value", "source", "origin"}}`` of a topic (source: topic/broker/default)."""
    result = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], include_synonyms=True,
                                    config_filter="all")
    entries = result.get("topic", {}).get(topic, {})
    out = {}
    for name, entry in entries.items():
        source_raw = entry.get("config_source") or "UNKNOWN"
        source = SOURCE_NAMES.get(source_raw, source_raw.lower())
        origin = name
        for syn in entry.get("synonyms") or []:
            if syn.get("source") == source_raw:
                origin = syn.get("name") or name
                break
        out[name] = {"value": entry.get("value"), "source": source, "origin": origin,
                     "sensitive": entry.get("is_sensitive", False)}
    return out


def _describe(admin, args) -> int:
    topics = _select_topics(admin, args.topic, args.exclude_internal)
    if not topics:
        return 0
    described = {d["name"]: d for d in admin.describe_topics(topics)}
    blocks = []
    for name in topics:
        info = described.get(name)
        if info is None or info.get("error_code") == kafka_errors.UnknownTopicOrPartitionError.errno:
            raise ToolError(f"unknown topic {name!r}")
        if info.get("error_code"):
            raise refusal(info["error_code"], operation="Describe", resource=f"topic {name!r}",
                          doing=f"describe topic {name!r}")
        partitions = sorted(info.get("partitions") or [], key=lambda p: p["partition_index"])
        configs = topic_configs(admin, name)
        overrides = ",".join(f"{k}={_shown(v)}" for k, v in sorted(configs.items()) if v["source"] == "topic")
        rf = len(partitions[0].get("replica_nodes") or []) if partitions else 0
        lines = [f"Topic: {name}\tTopicId: {info.get('topic_id') or '-'}\tPartitionCount: {len(partitions)}\t"
                 f"ReplicationFactor: {rf}\tConfigs: {overrides}"]
        for p in partitions:
            replicas = ",".join(str(r) for r in p.get("replica_nodes") or [])
            isr = ",".join(str(r) for r in p.get("isr_nodes") or [])
            lines.append(f"\tTopic: {name}\tPartition: {p['partition_index']}\tLeader: {p.get('leader_id')}\t"
                         f"Replicas: {replicas}\tIsr: {isr}")
        rows = []
        for key, entry in sorted(configs.items()):
            if entry["source"] == "default" and not args.all_configs:
                continue
            origin = entry["origin"] if entry["source"] == "broker" and entry["origin"] != key else ""
            rows.append((key, _shown(entry), entry["source"] + (f" ({origin})" if origin else "")))
        if rows:
            table = format_table(("CONFIG", "VALUE", "SOURCE"), rows)
            lines.append("\t" + table.replace("\n", "\n\t"))
        blocks.append("\n".join(lines))
    print("\n".join(blocks))
    return 0


def _shown(entry: dict) -> str:
    if entry.get("sensitive"):
        return "(sensitive)"
    value = entry.get("value")
    return "null" if value is None else str(value)


def _alter_config(admin, args) -> int:
    adds = parse_key_values(args.add_config)
    deletes = split_names(args.delete_config)
    if not adds and not deletes:
        raise ToolError("nothing to change; give --add-config KEY=VALUE and/or --delete-config KEY")
    both = set(adds) & set(deletes)
    if both:
        raise ToolError(f"config {sorted(both)[0]!r} is both added and deleted")
    if args.topic not in admin.list_topics():
        raise unknown_topic(admin, args.topic)
    changes = {k: (AlterConfigOp.SET, v) for k, v in adds.items()}
    changes.update({k: (AlterConfigOp.DELETE, None) for k in deletes})
    resource = ConfigResource(ConfigResourceType.TOPIC, args.topic, changes)
    try:
        result = admin.alter_configs([resource], raise_on_unknown=False, incremental=True)
    except kafka_errors.KafkaError as exc:
        raise refusal(exc, operation="AlterConfigs", resource=f"topic {args.topic!r}",
                      doing=f"alter configs of topic {args.topic!r}") from None
    outcome = result.get("topic", {}).get(args.topic, "OK")
    if outcome != "OK":
        raise ToolError(f"cannot alter configs of topic {args.topic!r}: {outcome}")
    print(f"Completed updating config for topic {args.topic}.")
    return 0


def _add_partitions(admin, args) -> int:
    if args.topic not in admin.list_topics():
        raise unknown_topic(admin, args.topic)
    try:
        response = admin.create_partitions({args.topic: args.partitions}, raise_errors=False)
    except kafka_errors.KafkaError as exc:
        raise refusal(exc, operation="Alter", resource=f"topic {args.topic!r}",
                      doing=f"add partitions to {args.topic!r}") from None
    for result in getattr(response, "results", None) or response.get("results", []):
        get = result.get if isinstance(result, dict) else lambda k, d=None: getattr(result, k, d)
        code = get("error_code", 0)
        if code:
            message = get("error_message") or ""
            raise refusal(code, operation="Alter", resource=f"topic {args.topic!r}",
                          doing=f"add partitions to {args.topic!r}", message=message)
    print(f"Topic {args.topic} now has {args.partitions} partitions.")
    return 0


def _delete(admin, args) -> int:
    names = split_names(args.topic)
    existing = set(admin.list_topics())
    missing = [n for n in names if n not in existing]
    if missing and not args.if_exists:
        raise unknown_topic(admin, missing[0])
    names = [n for n in names if n in existing]
    if not names:
        return 0
    response = admin.delete_topics(names, raise_errors=False)
    results = response.get("responses") or response.get("topics") or []
    for result in results:
        code = result.get("error_code", 0)
        if code == kafka_errors.UnknownTopicOrPartitionError.errno and args.if_exists:
            continue
        if code:
            raise refusal(code, operation="Delete", resource=f"topic {result.get('name')!r}",
                          doing=f"delete topic {result.get('name')!r}")
    for name in names:
        print(f"Deleted topic {name}.")
    return 0


_ACTIONS = {
    "create": _create,
    "list": _list,
    "describe": _describe,
    "alter-config": _alter_config,
    "add-partitions": _add_partitions,
    "delete": _delete,
}
