"""``sundial log-dirs --describe``: the log directories of the brokers, as kafka-log-dirs.sh prints them.

Sends DescribeLogDirs (all partitions) to every broker of the cluster (``--broker-list``
narrows them) and prints Kafka's three lines on stdout::

    Querying brokers for log directories information
    Received log directory information from brokers 1
    {"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":"orders-0","size":4213,
    "offsetLag":0,"isFuture":false}],"error":null,"logDir":"/var/lib/sundial"}]}],"version":1}

The JSON is kafka-log-dirs.sh's, keys in the order it prints them; ``error`` is null or the
name of Kafka's exception class (``org.apache.kafka.common.errors.KafkaStorageException`` for
a directory the broker cannot read). ``--topic-list a,b`` keeps only those topics' partitions
(unknown names simply match nothing, as in Kafka). Partitions are listed by topic, then
partition number.

Errors, one line each: a ``--broker-list`` id that is not in the cluster (Kafka's message), a
principal without DESCRIBE on the cluster ("not authorized"), a broker that does not serve
DescribeLogDirs.

``sundial log-dirs --execute --reassignment-json-file PLAN`` moves replicas between the log
directories of their brokers (AlterReplicaLogDirs), from the JSON kafka-reassign-partitions.sh
reads: ``{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[1],
"log_dirs":["/var/lib/sundial/d2"]}]}``; ``log_dirs`` pairs with ``replicas`` ("any" or missing:
leave that replica where it is). The replicas must be the partition's current ones: moving
replicas between brokers (kafka-reassign-partitions.sh's other half) is refused, not ignored.
One line per replica moved; exit 1 when a broker refuses one (with Kafka's error name).
"""

from __future__ import annotations

import argparse
import json

from kafka import TopicPartitionReplica
from kafka.errors import IncompatibleBrokerVersion, KafkaError, for_code
from kafka.protocol.admin import DescribeLogDirsRequest

from sundial.protocol.errors import ErrorCode

from .common import ClientSettings, ToolError, add_bootstrap_argument, add_client_arguments, describe_error, \
    read_client_properties, tool_command

EPILOG = """examples:
  sundial log-dirs --bootstrap-server 127.0.0.1:9092 --describe
  sundial log-dirs --bootstrap-server 127.0.0.1:9092 --describe --topic-list orders,payments
  sundial log-dirs --bootstrap-server 127.0.0.1:9092 --describe | tail -1 | jq '.brokers[].logDirs[].partitions[]'
  sundial log-dirs --bootstrap-server 127.0.0.1:9092 --execute --reassignment-json-file plan.json
    (plan.json: {"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[1],"log_dirs":["/data/d2"]}]})

output: kafka-log-dirs.sh's two progress lines, then one JSON line (size in bytes; offsetLag;
isFuture true for the copy an AlterReplicaLogDirs move is building)."""

#: Kafka's exception class per error code, for the ``error`` field (what kafka-log-dirs.sh prints).
KAFKA_EXCEPTIONS = {
    ErrorCode.KAFKA_STORAGE_ERROR: "org.apache.kafka.common.errors.KafkaStorageException",
    ErrorCode.UNKNOWN_SERVER_ERROR: "org.apache.kafka.common.errors.UnknownServerException",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "org.apache.kafka.common.errors.ClusterAuthorizationException",
}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "log-dirs", help="log directories: partition sizes, offset lag, future replicas (kafka-log-dirs.sh)",
        description="Describe the log directories of the brokers, like kafka-log-dirs.sh --describe: "
                    "each directory with the size, offset lag and future flag of every partition in it.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bootstrap_argument(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true",
                        help="describe the log directories (as kafka-log-dirs.sh)")
    action.add_argument("--execute", action="store_true",
                        help="move replicas between log directories as --reassignment-json-file says "
                             "(the log_dirs of kafka-reassign-partitions.sh's JSON)")
    p.add_argument("--reassignment-json-file", metavar="FILE",
                   help="with --execute: kafka-reassign-partitions.sh's JSON, with log_dirs")
    p.add_argument("--topic-list", default="", metavar="TOPICS",
                   help='topics to show, "topic1,topic2" (default: every topic)')
    p.add_argument("--broker-list", default="", metavar="IDS",
                   help='brokers to query, "0,1,2" (default: every broker of the cluster)')
    add_client_arguments(p)
    p.set_defaults(func=run)


def _split(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _broker_ids(text: str) -> list[int]:
    out = []
    for item in _split(text):
        if not item.lstrip("-").isdigit():
            raise ToolError(f"--broker-list: {item!r} is not a broker id; use e.g. 0,1,2", 2)
        out.append(int(item))
    return sorted(set(out))


def _error_name(code: int) -> str | None:
    if code == ErrorCode.NONE:
        return None
    return KAFKA_EXCEPTIONS.get(code) or f"org.apache.kafka.common.errors.{for_code(code).__name__}"


def log_dirs_json(described: dict[int, list], topics: set[str]) -> str:
    """kafka-log-dirs.sh's JSON for ``{broker id: DescribeLogDirs results}`` (see module doc)."""
    brokers = []
    for broker_id, results in described.items():
        dirs = []
        for result in results:
            partitions = []
            for topic in sorted(result.topics, key=lambda t: t.name):
                if topics and topic.name not in topics:
                    continue
                for part in sorted(topic.partitions, key=lambda p: p.partition_index):
                    partitions.append({"partition": f"{topic.name}-{part.partition_index}",
                                       "size": part.partition_size, "offsetLag": part.offset_lag,
                                       "isFuture": bool(part.is_future_key)})
            dirs.append({"partitions": partitions, "error": _error_name(result.error_code),
                         "logDir": result.log_dir})
        brokers.append({"broker": broker_id, "logDirs": dirs})
    return json.dumps({"brokers": brokers, "version": 1}, separators=(",", ":"))


def _describe(admin, node_id: int):
    async def ask():
        return await admin._manager.send(DescribeLogDirsRequest(topics=None), node_id=node_id)

    try:
        response = admin._manager.run(ask)
    except IncompatibleBrokerVersion:
        raise ToolError(f"broker {node_id} does not serve DescribeLogDirs (unsupported version)") from None
    except KafkaError as exc:
        raise ToolError(f"cannot describe the log dirs of broker {node_id}: {type(exc).__name__}: "
                        f"{describe_error(exc)}") from None
    code = getattr(response, "error_code", ErrorCode.NONE) or ErrorCode.NONE
    if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        raise ToolError(f"not authorized to describe the log dirs of broker {node_id}: DescribeLogDirs needs "
                        f"DESCRIBE on the cluster (ClusterAuthorizationFailedError)")
    if code != ErrorCode.NONE:
        raise ToolError(f"cannot describe the log dirs of broker {node_id}: {for_code(code).__name__}")
    return response.results


def parse_plan(text: str) -> dict[tuple[str, int, int], str]:
    """kafka-reassign-partitions.sh's JSON → ``{(topic, partition, broker): log dir}`` for the
    replicas whose ``log_dirs`` entry names a directory (ToolError, exit 2, when malformed)."""
    try:
        plan = json.loads(text)
    except ValueError as exc:
        raise ToolError(f"--reassignment-json-file: not JSON: {exc}", 2) from None
    entries = plan.get("partitions") if isinstance(plan, dict) else None
    if not isinstance(entries, list):
        raise ToolError('--reassignment-json-file: expected {"version":1,"partitions":[...]}', 2)
    out: dict[tuple[str, int, int], str] = {}
    for entry in entries:
        try:
            topic, partition, replicas = entry["topic"], entry["partition"], entry["replicas"]
            dirs = entry.get("log_dirs") or ["any"] * len(replicas)
            if not (isinstance(topic, str) and isinstance(partition, int) and isinstance(replicas, list)
                    and all(isinstance(r, int) for r in replicas) and isinstance(dirs, list)):
                raise TypeError
        except (KeyError, TypeError):
            raise ToolError(f"--reassignment-json-file: each partition needs topic, partition and replicas: "
                            f"{json.dumps(entry)}", 2) from None
        if len(dirs) != len(replicas):
            raise ToolError(f"--reassignment-json-file: {topic}-{partition}: log_dirs must pair with replicas", 2)
        for broker, log_dir in zip(replicas, dirs):
            if log_dir != "any":
                out[(topic, partition, broker)] = log_dir
    return out


def _execute(admin, args) -> int:
    if not args.reassignment_json_file:
        raise ToolError("--execute needs --reassignment-json-file", 2)
    try:
        with open(args.reassignment_json_file, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ToolError(f"cannot read {args.reassignment_json_file}: {exc.strerror or exc}", 2) from None
    moves = parse_plan(text)
    current = {}   # the replicas of the partitions the cluster has (the broker answers for the others)
    for topic in sorted({t for t, _p, _b in moves}):
        try:
            described = admin.describe_topics([topic])
        except KafkaError as exc:
            raise ToolError(f"cannot describe topic {topic}: {describe_error(exc)}") from None
        for t in described:
            for part in t.get("partitions") or []:
                current[(topic, part["partition_index"])] = set(part["replica_nodes"])
    for topic, partition, broker in moves:
        replicas = current.get((topic, partition))
        if replicas is not None and broker not in replicas:
            raise ToolError(f"{topic}-{partition} has no replica on broker {broker}: moving replicas between "
                            "brokers is not served, only between the log directories of a broker")
    try:
        answer = admin.alter_replica_log_dirs({TopicPartitionReplica(*key): d for key, d in moves.items()})
    except IncompatibleBrokerVersion:
        raise ToolError("the broker does not serve AlterReplicaLogDirs (unsupported version)") from None
    except KafkaError as exc:
        raise ToolError(f"cannot move the replicas: {type(exc).__name__}: {describe_error(exc)}") from None
    failed = 0
    for (topic, partition, broker), log_dir in sorted(moves.items()):
        error = answer.get(TopicPartitionReplica(topic, partition, broker))
        if error is None or error.errno == 0:
            print(f"Successfully started log directory move for: {topic}-{partition}-{broker} to {log_dir}")
        else:
            failed += 1
            print(f"Error moving {topic}-{partition}-{broker} to {log_dir}: {error.__name__}")
    return 1 if failed else 0


@tool_command("log-dirs")
def run(args) -> int:
    if args.execute:
        settings = ClientSettings(args.bootstrap_server, timeout_ms=args.timeout_ms,
                                  extra=read_client_properties(args.command_config), client_id="log-dirs-tool")
        with settings.admin_session() as admin:
            return _execute(admin, args)
    topics = set(_split(args.topic_list))
    wanted = _broker_ids(args.broker_list)
    settings = ClientSettings(args.bootstrap_server, timeout_ms=args.timeout_ms,
                              extra=read_client_properties(args.command_config), client_id="log-dirs-tool")
    with settings.admin_session() as admin:
        cluster = sorted(b["broker_id"] for b in admin.describe_cluster()["brokers"])
        missing = [b for b in wanted if b not in cluster]
        if missing:
            raise ToolError("the given brokers do not exist from --broker-list: "
                            f"{','.join(map(str, missing))}. Current existent brokers: "
                            f"{','.join(map(str, cluster))}")
        brokers = wanted or cluster
        print("Querying brokers for log directories information", flush=True)
        described = {b: _describe(admin, b) for b in brokers}
    print(f"Received log directory information from brokers {','.join(map(str, brokers))}")
    print(log_dirs_json(described, topics))
    return 0
