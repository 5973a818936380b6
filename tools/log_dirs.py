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
"""

from __future__ import annotations

import argparse
import json

from kafka.errors import IncompatibleBrokerVersion, KafkaError, for_code
from kafka.protocol.admin import DescribeLogDirsRequest

from sundial.protocol.errors import ErrorCode

from .common import ClientSettings, ToolError, add_bootstrap_argument, add_client_arguments, close_quietly, \
    describe_error, read_client_properties, tool_command

EPILOG = """examples:
  sundial log-dirs --bootstrap-server 127.0.0.1:9092 --describe
  sundial log-dirs --bootstrap-server 127.0.0.1:9092 --describe --topic-list orders,payments
  sundial log-dirs --bootstrap-server 127.0.0.1:9092 --describe | tail -1 | jq '.brokers[].logDirs[].partitions[]'

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
    p.add_argument("--describe", action="store_true", required=True,
                   help="describe the log directories (the only action, required as in Kafka)")
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


@tool_command("log-dirs")
def run(args) -> int:
    topics = set(_split(args.topic_list))
    wanted = _broker_ids(args.broker_list)
    settings = ClientSettings(args.bootstrap_server, timeout_ms=args.timeout_ms,
                              extra=read_client_properties(args.command_config), client_id="log-dirs-tool")
    admin = settings.admin()
    try:
        cluster = sorted(b["broker_id"] for b in admin.describe_cluster()["brokers"])
        missing = [b for b in wanted if b not in cluster]
        if missing:
            raise ToolError("the given brokers do not exist from --broker-list: "
                            f"{','.join(map(str, missing))}. Current existent brokers: "
                            f"{','.join(map(str, cluster))}")
        brokers = wanted or cluster
        print("Querying brokers for log directories information", flush=True)
        described = {b: _describe(admin, b) for b in brokers}
    finally:
        close_quietly(admin)
    print(f"Received log directory information from brokers {','.join(map(str, brokers))}")
    print(log_dirs_json(described, topics))
    return 0
