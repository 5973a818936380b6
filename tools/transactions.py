"""``sundial transactions``: kafka-transactions.sh's sub-commands over the wire.

* ``list`` prints ``TransactionalId Coordinator ProducerId TransactionState``
  (ListTransactions), optionally only transactions open longer than ``--duration-filter MS``
  (ListTransactions v1, Kafka's flag) and, beyond Kafka's tool, only some states (``--state``,
  repeatable, any case; an unknown state is a usage error listing the valid ones) and
  producer ids (``--producer-id``, repeatable).
* ``describe --transactional-id ID`` prints ``CoordinatorId TransactionalId ProducerId
  ProducerEpoch TransactionState TransactionTimeoutMs CurrentTransactionStartTimeMs
  TransactionDurationMs TopicPartitions`` (DescribeTransactions), one row per id.
* ``describe-producers --topic T --partition P [--broker-id N]`` prints ``ProducerId
  ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp
  CurrentTransactionStartOffset`` (DescribeProducers).
* ``find-hanging (--broker-id N | --topic T [--partition P]) [--max-transaction-timeout MIN]``
  prints ``Topic Partition ProducerId ProducerEpoch CoordinatorEpoch StartOffset LastTimestamp
  Duration(min)``: Kafka's ``FindHangingTransactionsCommand``. Every producer of the searched
  partitions with an open transaction whose last write is older than the timeout (15
  minutes by default) is a candidate; it hangs when ListTransactions knows no transactional
  id for its producer id, when DescribeTransactions does not find that id, or when the
  transaction the coordinator describes does not include the partition.
* ``abort --topic T --partition P (--start-offset O | --producer-id ID --producer-epoch E
  --coordinator-epoch C)`` writes an ABORT marker to that partition (WriteTxnMarkers, through
  kafka-python's ``abort_transaction``, Kafka's ``Admin.abortTransaction``). With
  ``--start-offset`` the producer, epoch and coordinator epoch are those DescribeProducers
  reports for the open transaction starting at that offset; a coordinator epoch below 0
  (a producer that never had a marker) is sent as 0, as Kafka's tool does.

``--bootstrap-server``, ``--command-config`` and ``--timeout-ms`` go before the sub-command
(kafka-transactions.sh's place) or after it. Exit codes are every tool's (:mod:`tools.common`):
a missing or contradictory argument is a usage error (2), a refusal or a failed look-up 1.
"""

from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass
from typing import Iterable, Mapping

from kafka import TopicPartition
from kafka.admin import AbortTransactionSpec
from kafka.errors import KafkaError, TransactionalIdNotFoundError

from .common import EXIT_USAGE, ClientSettings, ToolError, add_bootstrap_argument, add_client_arguments, \
    describe_error, format_table, now_ms, tool_command

#: Kafka's transaction state names (``TransactionState``), as ListTransactions filters by them.
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
          "PrepareEpochFence")
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15
#: Partitions per DescribeProducers request and topics per Metadata request (Kafka's tool: 500).
MAX_BATCH = 500

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                     "CurrentTransactionStartOffset")
HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)")

EPILOG = """examples:
  sundial transactions --bootstrap-server 127.0.0.1:9092 list
  sundial transactions --bootstrap-server 127.0.0.1:9092 list --state ongoing --duration-filter 60000
  sundial transactions --bootstrap-server 127.0.0.1:9092 describe --transactional-id payments-1
  sundial transactions --bootstrap-server 127.0.0.1:9092 describe-producers --topic orders --partition 0
  sundial transactions --bootstrap-server 127.0.0.1:9092 find-hanging --broker-id 1
  sundial transactions --bootstrap-server 127.0.0.1:9092 abort --topic orders --partition 0 --start-offset 42
  sundial transactions --bootstrap-server 127.0.0.1:9092 abort --topic orders --partition 0 \\
      --producer-id 1001 --producer-epoch 0 --coordinator-epoch 0"""


# -- pure parts (unit-tested) ------------------------------------------------------------------
def parse_states(names: Iterable[str]) -> list[str]:
    """Kafka's names for ``--state`` values given in any case; an unknown one is a usage error."""
    by_lower = {s.lower(): s for s in STATES}
    out = []
    for name in names:
        for part in name.split(","):
            part = part.strip()
            if not part:
                continue
            state = by_lower.get(part.lower())
            if state is None:
                raise ToolError(f"--state: unknown transaction state {part!r} (valid: {', '.join(STATES)}; "
                                f"any case)", EXIT_USAGE)
            if state not in out:
                out.append(state)
    return out


@dataclass(frozen=True)
class OpenTransaction:
    """A producer with an open transaction in a partition (a DescribeProducers row)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp_ms: int


def candidate_open_transactions(states: Mapping[TopicPartition, object], now: int,
                                max_transaction_timeout_ms: int) -> list[OpenTransaction]:
    """Kafka's ``collectCandidateOpenTransactions``: open transactions whose producer last
    wrote longer ago than the largest transaction timeout."""
    out = []
    for tp in sorted(states):
        for p in states[tp].active_producers:
            if p.current_transaction_start_offset < 0:
                continue
            if now - p.last_timestamp > max_transaction_timeout_ms:
                out.append(OpenTransaction(tp.topic, tp.partition, p.producer_id, p.producer_epoch,
                                           p.coordinator_epoch, p.current_transaction_start_offset, p.last_timestamp))
    return out


def hanging(candidates: Iterable[OpenTransaction], transactional_ids: Mapping[int, str],
            described: Mapping[str, Iterable[TopicPartition] | None]) -> list[OpenTransaction]:
    """Kafka's ``filterHangingTransactions``. ``transactional_ids``: producer id → transactional
    id as ListTransactions reports it; ``described``: transactional id → the partitions
    DescribeTransactions lists for it (None when the coordinator does not know the id)."""
    out = []
    for txn in candidates:
        txn_id = transactional_ids.get(txn.producer_id)
        if txn_id is None:
            out.append(txn)
            continue
        partitions = described.get(txn_id)
        if partitions is None or TopicPartition(txn.topic, txn.partition) not in set(partitions):
            out.append(txn)
    return out


def hanging_rows(found: Iterable[OpenTransaction], now: int) -> list[tuple]:
    return [(t.topic, t.partition, t.producer_id, t.producer_epoch, t.coordinator_epoch, t.start_offset,
             t.last_timestamp_ms, (now - t.last_timestamp_ms) // 60_000) for t in found]


# -- the command line -------------------------------------------------------------------------
def _connection_arguments(parser, *, suppress: bool) -> None:
    """``--bootstrap-server``, ``--command-config``, ``--timeout-ms``: before the sub-command
    (kafka-transactions.sh) or after it; after it they must not reset what was given before."""
    if not suppress:
        add_bootstrap_argument(parser, required=False)
        add_client_arguments(parser)
        return
    scratch = argparse.ArgumentParser(add_help=False)
    add_bootstrap_argument(scratch, required=False)
    add_client_arguments(scratch)
    for action in scratch._actions:
        action = copy.copy(action)
        action.default = argparse.SUPPRESS
        parser._add_action(action)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "transactions", help="list, describe, find hanging and abort transactions",
        description="Transactions on any Kafka-compatible broker, like kafka-transactions.sh: list, describe, "
                    "describe-producers, find-hanging and abort (a hanging transaction, by its start offset or "
                    "by producer id, producer epoch and coordinator epoch).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _connection_arguments(p, suppress=False)
    commands = p.add_subparsers(dest="txn_command", metavar="COMMAND")
    commands.required = True

    def command(name, help_text, description):
        sub = commands.add_parser(name, help=help_text, description=description)
        _connection_arguments(sub, suppress=True)
        sub.set_defaults(func=run)
        return sub

    ls = command("list", "list transactions (ListTransactions)",
                 "List transactions: transactional id, coordinator, producer id and state.")
    ls.add_argument("--duration-filter", "--duration-ms", dest="duration_filter", type=int, default=None,
                    metavar="MS", help="only transactions running longer than this (ListTransactions v1); "
                                       "below 0: all")
    ls.add_argument("--state", action="append", default=[], metavar="STATE",
                    help=f"only this state, in any case ({', '.join(STATES)}; repeatable or comma-separated)")
    ls.add_argument("--producer-id", action="append", default=[], type=int, metavar="ID",
                    help="only this producer id (repeatable)")

    d = command("describe", "describe a transactional id (DescribeTransactions)",
                "Describe the state of transactional ids: producer, epoch, state, timeout, start, partitions.")
    d.add_argument("--transactional-id", action="append", required=True, metavar="ID",
                   help="the transactional id (repeatable)")

    dp = command("describe-producers", "the producers a partition knows (DescribeProducers)",
                 "Describe the state of the active producers of a partition.")
    dp.add_argument("--topic", required=True, help="topic name")
    dp.add_argument("--partition", type=int, required=True, metavar="N", help="partition number")
    dp.add_argument("--broker-id", type=int, default=None, metavar="ID",
                    help="ask this broker's replica instead of the leader")

    fh = command("find-hanging", "find hanging transactions",
                 "Find transactions open in a partition that the coordinator will not end: their producer "
                 "last wrote longer ago than --max-transaction-timeout and the coordinator lists no ongoing "
                 "transaction of that producer on that partition.")
    fh.add_argument("--broker-id", type=int, default=None, metavar="ID",
                    help="search every partition this broker holds")
    fh.add_argument("--topic", default=None, help="search this topic (required with --partition)")
    fh.add_argument("--partition", type=int, default=None, metavar="N", help="search this partition only")
    fh.add_argument("--max-transaction-timeout", type=int, default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
                    metavar="MINUTES", help="the largest transaction timeout of the cluster's producers, in "
                                            f"minutes (default {DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN})")

    ab = command("abort", "abort a hanging transaction (WriteTxnMarkers; needs ALTER or CLUSTER_ACTION on the "
                          "cluster)",
                 "Write an ABORT marker for a hanging transaction to one partition. Identify it by "
                 "--start-offset (the producer is looked up with DescribeProducers) or by --producer-id, "
                 "--producer-epoch and --coordinator-epoch (as find-hanging and describe-producers print them).")
    ab.add_argument("--topic", required=True, help="topic name")
    ab.add_argument("--partition", type=int, required=True, metavar="N", help="partition number")
    ab.add_argument("--start-offset", type=int, default=None, metavar="OFFSET",
                    help="first offset of the transaction to abort")
    ab.add_argument("--producer-id", type=int, default=None, metavar="ID", help="producer id")
    ab.add_argument("--producer-epoch", type=int, default=None, metavar="EPOCH", help="producer epoch")
    ab.add_argument("--coordinator-epoch", type=int, default=None, metavar="EPOCH", help="coordinator epoch")


def _check_args(args) -> None:
    """Argument rules argparse cannot express: usage errors (exit 2)."""
    if getattr(args, "bootstrap_server", None) is None:
        raise ToolError("--bootstrap-server is required", EXIT_USAGE)
    cmd = args.txn_command
    if cmd == "list":
        args.state = parse_states(args.state)
    elif cmd == "find-hanging":
        if args.topic is None and args.broker_id is None:
            raise ToolError("find-hanging needs --topic or --broker-id to limit the search", EXIT_USAGE)
        if args.partition is not None and args.topic is None:
            raise ToolError("--partition needs --topic", EXIT_USAGE)
        if args.max_transaction_timeout < 0:
            raise ToolError("--max-transaction-timeout must not be negative", EXIT_USAGE)
    elif cmd == "abort":
        by_producer = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
        if args.start_offset is None and args.producer_id is None:
            raise ToolError("name the transaction to abort with --start-offset, or with --producer-id, "
                            "--producer-epoch and --coordinator-epoch", EXIT_USAGE)
        if args.start_offset is not None and any(v is not None for v in by_producer):
            raise ToolError("give either --start-offset or --producer-id/--producer-epoch/--coordinator-epoch, "
                            "not both", EXIT_USAGE)
        if args.start_offset is None:
            for flag, value in (("--producer-epoch", args.producer_epoch),
                                ("--coordinator-epoch", args.coordinator_epoch)):
                if value is None:
                    raise ToolError(f"missing {flag} (with --producer-id)", EXIT_USAGE)


def _kafka_error(what: str, exc: BaseException) -> ToolError:
    return ToolError(f"{what}: {type(exc).__name__}: {describe_error(exc)}")


def _state_name(state) -> str:
    return getattr(state, "value", state)


@tool_command("transactions")
def run(args) -> int:
    _check_args(args)
    settings = ClientSettings.from_args(args)
    with settings.admin_session() as admin:
        return _COMMANDS[args.txn_command](admin, args)


def _list(admin, args) -> int:
    duration = args.duration_filter if args.duration_filter is not None and args.duration_filter >= 0 else None
    try:
        found = admin.list_transactions(producer_id_filters=args.producer_id or None,
                                        state_filters=args.state or None, duration_filter_ms=duration)
    except KafkaError as exc:
        raise _kafka_error("cannot list transactions", exc) from None
    rows = [(t.transactional_id, broker_id, t.producer_id, _state_name(t.state))
            for broker_id, listing in sorted(found.items()) for t in listing]
    print(format_table(LIST_HEADERS, sorted(rows)))
    return 0


def _describe(admin, args) -> int:
    try:
        described = admin.describe_transactions(args.transactional_id)
    except KafkaError as exc:
        raise _kafka_error("cannot describe transactions", exc) from None
    now = now_ms()
    rows = []
    for txn_id in args.transactional_id:
        d = described[txn_id]
        start = d.transaction_start_time_ms
        parts = ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(d.topic_partitions))
        rows.append((d.coordinator_id, txn_id, d.producer_id, d.producer_epoch, _state_name(d.state),
                     d.transaction_timeout_ms, start if start >= 0 else "None",
                     now - start if start >= 0 else "None", parts))
    print(format_table(DESCRIBE_HEADERS, rows))
    return 0


def _describe_producers(admin, args) -> int:
    tp = TopicPartition(args.topic, args.partition)
    where = f"broker {args.broker_id}" if args.broker_id is not None else "the leader"
    try:
        states = admin.describe_producers([tp], broker_id=args.broker_id)
    except KafkaError as exc:
        raise _kafka_error(f"cannot describe the producers of {args.topic}-{args.partition} on {where}",
                           exc) from None
    rows = [(s.producer_id, s.producer_epoch, s.coordinator_epoch, s.last_sequence, s.last_timestamp,
             s.current_transaction_start_offset if s.current_transaction_start_offset >= 0 else "None")
            for s in states[tp].active_producers]
    print(format_table(PRODUCERS_HEADERS, rows))
    return 0


def _batches(items: list, size: int = MAX_BATCH):
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _partitions_to_search(admin, args) -> list[TopicPartition]:
    if args.topic is not None and args.partition is not None:
        return [TopicPartition(args.topic, args.partition)]
    try:
        topics = [args.topic] if args.topic is not None else sorted(admin.list_topics())
    except KafkaError as exc:
        raise _kafka_error("cannot list topics", exc) from None
    out = []
    for batch in _batches(topics):
        try:
            infos = admin.describe_topics(batch)
        except KafkaError as exc:
            raise _kafka_error(f"cannot describe {len(batch)} topics", exc) from None
        for info in infos:
            code = info.get("error_code", 0)
            if code == 3:
                raise ToolError(f"unknown topic {info['name']!r}")
            if code:
                raise ToolError(f"cannot describe topic {info['name']!r}: error code {code}")
            for part in info.get("partitions") or []:
                replicas = part.get("replica_nodes") or []
                if args.broker_id is None or args.broker_id in replicas:
                    out.append(TopicPartition(info["name"], part["partition_index"]))
    return sorted(out)


def _find_hanging(admin, args) -> int:
    max_timeout_ms = args.max_transaction_timeout * 60_000
    partitions = _partitions_to_search(admin, args)
    states = {}
    for batch in _batches(partitions):
        try:
            states.update(admin.describe_producers(batch, broker_id=args.broker_id))
        except KafkaError as exc:
            raise _kafka_error(f"cannot describe the producers of {len(batch)} partitions", exc) from None
    candidates = candidate_open_transactions(states, now_ms(), max_timeout_ms)
    transactional_ids: dict[int, str] = {}
    described: dict[str, list[TopicPartition] | None] = {}
    if candidates:
        producer_ids = sorted({c.producer_id for c in candidates})
        try:
            listed = admin.list_transactions(producer_id_filters=producer_ids)
        except KafkaError as exc:
            raise _kafka_error(f"cannot list the transactions of {len(producer_ids)} producers", exc) from None
        for listing in listed.values():
            for t in listing:
                if t.producer_id in producer_ids:
                    transactional_ids[t.producer_id] = t.transactional_id
        for txn_id in sorted(set(transactional_ids.values())):
            try:
                described[txn_id] = list(admin.describe_transactions([txn_id])[txn_id].topic_partitions)
            except TransactionalIdNotFoundError:
                described[txn_id] = None
            except KafkaError as exc:
                raise _kafka_error(f"cannot describe transactional id {txn_id!r}", exc) from None
    found = hanging(candidates, transactional_ids, described)
    print(format_table(HANGING_HEADERS, hanging_rows(found, now_ms())))
    return 0


def _abort(admin, args) -> int:
    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is not None:
        try:
            states = admin.describe_producers([tp])
        except KafkaError as exc:
            raise _kafka_error(f"cannot read the producer state of {args.topic}-{args.partition}", exc) from None
        match = [s for s in states[tp].active_producers if s.current_transaction_start_offset == args.start_offset]
        if not match:
            raise ToolError(f"no open transaction starts at offset {args.start_offset} in "
                            f"{args.topic}-{args.partition}")
        s = match[0]
        producer_id, producer_epoch, coordinator_epoch = s.producer_id, s.producer_epoch, s.coordinator_epoch
    else:
        producer_id, producer_epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
    # A producer that never had a marker reports -1: 0 is not above any coordinator epoch (Kafka's tool).
    coordinator_epoch = max(coordinator_epoch, 0)
    spec = AbortTransactionSpec(tp, producer_id, producer_epoch, coordinator_epoch)
    try:
        admin.abort_transaction(spec)
    except KafkaError as exc:
        raise _kafka_error(f"cannot abort the transaction of producer {producer_id} (epoch {producer_epoch}, "
                           f"coordinator epoch {coordinator_epoch}) in {args.topic}-{args.partition}",
                           exc) from None
    print(f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}, coordinator epoch "
          f"{coordinator_epoch}) in {args.topic}-{args.partition}.")
    return 0


_COMMANDS = {"list": _list, "describe": _describe, "describe-producers": _describe_producers,
             "find-hanging": _find_hanging, "abort": _abort}
