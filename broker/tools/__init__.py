"""Operator tools behind the ``sundial`` command (issue 6); see docs/tools.md.

One module per subcommand, each with ``add_parser(subparsers)`` and ``run(args) -> int``:
:mod:`~broker.tools.topics`, :mod:`~broker.tools.get_offsets`, :mod:`~broker.tools.dump_log`,
:mod:`~broker.tools.consumer_groups`, :mod:`~broker.tools.failover`, :mod:`~broker.tools.mirror`.
Shared: :mod:`~broker.tools.common` (errors, exit codes, client settings, tables,
progress), :mod:`~broker.tools.timeparse` (times and durations), :mod:`~broker.tools.wire`
(look-ups over the wire). Wire tools use kafka-python's clients against any
Kafka-compatible broker; ``dump-log`` reads files with :mod:`storage`.
"""
