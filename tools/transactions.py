"""``sundial transactions``: list and describe transactions, describe producers
(kafka-transactions.sh's ``list``, ``describe`` and ``describe-producers``).

* ``--list`` prints ``TransactionalId Coordinator ProducerId TransactionState``
  (ListTransactions), optionally filtered by ``--state`` and ``--producer-id`` (repeatable)
  and ``--duration-ms`` (transactions open longer than that; ListTransactions v1).
* ``--describe --transactional-id ID`` prints ``CoordinatorId TransactionalId ProducerId
  ProducerEpoch TransactionState TransactionTimeoutMs CurrentTransactionStartTimeMs
  TransactionDurationMs TopicPartitions`` (DescribeTransactions), one row per id.
* ``--describe-producers --topic T --partition P`` prints ``ProducerId ProducerEpoch
  LatestCoordinatorEpoch LastSequence LastTimestamp CurrentTransactionStartOffset``
  (DescribeProducers).

It talks over the wire (kafka-python 3's admin client), so it works against any
Kafka-compatible broker. Aborting a hanging transaction (``kafka-transactions.sh abort``
sends WriteTxnMarkers) is not offered: Sundial does not serve WriteTxnMarkers.
"""

from __future__ import annotations

import argparse

from kafka import TopicPartition
from kafka.errors import KafkaError

from .common import ClientSettings, ToolError, add_bootstrap_argument, add_client_arguments, close_quietly, \
    describe_error, format_table, now_ms, tool_command

EPILOG = """examples:
  sundial transactions --bootstrap-server 127.0.0.1:9092 --list
  sundial transactions --bootstrap-server 127.0.0.1:9092 --list --state Ongoing --duration-ms 60000
  sundial transactions --bootstrap-server 127.0.0.1:9092 --describe --transactional-id payments-1
  sundial transactions --bootstrap-server 127.0.0.1:9092 --describe-producers --topic orders --partition 0"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "transactions", help="list and describe transactions, describe a partition's producers",
        description="Transactions on any Kafka-compatible broker, like kafka-transactions.sh "
                    "(list, describe, describe-producers).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bootstrap_argument(p)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--list", action="store_true", help="list transactions (ListTransactions)")
    mode.add_argument("--describe", action="store_true", help="describe transactional ids (DescribeTransactions)")
    mode.add_argument("--describe-producers", action="store_true",
                      help="the producers a partition knows (DescribeProducers)")
    p.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                   help="with --describe: the transactional id (repeatable)")
    p.add_argument("--state", action="append", default=[], metavar="STATE",
                   help="with --list: only this state (Empty, Ongoing, PrepareCommit, PrepareAbort, "
                        "CompleteCommit, CompleteAbort; repeatable)")
    p.add_argument("--producer-id", action="append", default=[], type=int, metavar="ID",
                   help="with --list: only this producer id (repeatable)")
    p.add_argument("--duration-ms", type=int, default=None, metavar="MS",
                   help="with --list: only transactions open longer than this")
    p.add_argument("--topic", metavar="TOPIC", help="with --describe-producers: the topic")
    p.add_argument("--partition", type=int, metavar="N", help="with --describe-producers: the partition")
    add_client_arguments(p)
    p.set_defaults(func=run)


def _kafka_error(what: str, exc: BaseException) -> ToolError:
    return ToolError(f"{what}: {type(exc).__name__}: {describe_error(exc)}")


@tool_command("transactions")
def run(args) -> int:
    settings = ClientSettings.from_args(args)
    if args.describe and not args.transactional_id:
        raise ToolError("--describe needs --transactional-id")
    if args.describe_producers and (args.topic is None or args.partition is None):
        raise ToolError("--describe-producers needs --topic and --partition")
    admin = settings.admin()
    try:
        if args.list:
            try:
                found = admin.list_transactions(producer_id_filters=args.producer_id or None,
                                                state_filters=args.state or None,
                                                duration_filter_ms=args.duration_ms)
            except KafkaError as exc:
                raise _kafka_error("cannot list transactions", exc) from None
            rows = [(t.transactional_id, broker_id, t.producer_id, getattr(t.state, "value", t.state))
                    for broker_id, listing in sorted(found.items()) for t in listing]
            print(format_table(("TransactionalId", "Coordinator", "ProducerId", "TransactionState"), sorted(rows)))
            return 0
        if args.describe:
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
                rows.append((d.coordinator_id, txn_id, d.producer_id, d.producer_epoch,
                             getattr(d.state, "value", d.state), d.transaction_timeout_ms,
                             start if start >= 0 else "None", now - start if start >= 0 else "None", parts))
            print(format_table(("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                                "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                                "TransactionDurationMs", "TopicPartitions"), rows))
            return 0
        tp = TopicPartition(args.topic, args.partition)
        try:
            states = admin.describe_producers([tp])
        except KafkaError as exc:
            raise _kafka_error(f"cannot describe the producers of {args.topic}-{args.partition}", exc) from None
        rows = [(s.producer_id, s.producer_epoch, s.coordinator_epoch, s.last_sequence, s.last_timestamp,
                 s.current_transaction_start_offset if s.current_transaction_start_offset >= 0 else "None")
                for s in states[tp].active_producers]
        print(format_table(("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                            "LastTimestamp", "CurrentTransactionStartOffset"), rows))
        return 0
    finally:
        close_quietly(admin)
