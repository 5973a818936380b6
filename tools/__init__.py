"""Operator tools behind the ``sundial`` command (issue 6); see docs/tools.md.

A package of its own, apart from the daemon (:mod:`broker`): the wire tools are
clients (kafka-python) of any Kafka-compatible broker, the file tools read a data
directory offline. :mod:`sundial.cli` offers them as subcommands of the one ``sundial``
command, next to ``serve``; nothing in the daemon imports them otherwise.

One module per subcommand, each with ``add_parser(subparsers)`` and ``run(args) -> int``:
:mod:`~tools.topics`, :mod:`~tools.get_offsets`, :mod:`~tools.console_producer` and
:mod:`~tools.console_consumer` (their line formats in :mod:`~tools.console`), :mod:`~tools.dump_log` (with
:mod:`~tools.dump_index`), :mod:`~tools.consumer_groups`, :mod:`~tools.failover`,
:mod:`~tools.mirror`, :mod:`~tools.credentials` (``credentials`` and ``acls``).
Shared: :mod:`~tools.common` (errors, exit codes, client settings, tables, progress),
:mod:`~tools.timeparse` (times and durations as operators type them), :mod:`~tools.wire`
(look-ups over the wire).

What the tools share with the daemon comes from one place each, at the bottom of the
house: ListOffsets' sentinels and the clock from :mod:`records.timestamps`, topic-name
rules from :mod:`config.topic_names`, record and index layouts from :mod:`records`.
The offline tools read the daemon's files through the daemon's own formats:
``dump-log`` decodes ``__consumer_offsets`` with :mod:`broker.groups.schema`, and
``credentials``/``acls`` edit the stores of :mod:`broker.sasl` and
:mod:`broker.authorizer`; no tool imports the daemon's runtime (server, connections,
handlers, replica manager).
"""
