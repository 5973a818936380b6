"""Open the partitions a request names before it is served, off the event loop.

Opening a partition on first use reads its directory and, after a crash, recovers or
cleans its leftovers: disk work that took 100 ms to over a second on a busy disk when
it ran on the loop. These ``prepare`` steps (:mod:`broker.dispatch`) hand the opens to
the scheduler (``ReplicaManager.open_logs``) and the connection awaits them before the
request's handler runs; requests on other connections go on meanwhile. They return
None, without suspending, when every partition named is open already.

Fetch opens its partitions inside ``ReplicaManager.fetch``, and transaction markers
inside ``ReplicaManager.write_txn_markers``. DescribeShareGroupOffsets opens the partitions
whose lag it reads (those with share state).
"""

from __future__ import annotations


def _partitions(groups, name_attr: str, partitions_attr: str, index_attr: str):
    for topic in groups or ():
        name = getattr(topic, name_attr)
        for p in getattr(topic, partitions_attr) or ():
            yield name, getattr(p, index_attr)


def open_produce_partitions(ctx, request):
    return ctx.broker.replica_manager.open_logs(_partitions(request.topic_data, "name", "partition_data", "index"))


def open_list_offsets_partitions(ctx, request):
    return ctx.broker.replica_manager.open_logs(_partitions(request.topics, "name", "partitions", "partition_index"))


def open_delete_records_partitions(ctx, request):
    return ctx.broker.replica_manager.open_logs(_partitions(request.topics, "name", "partitions", "partition_index"))


def open_offset_for_leader_epoch_partitions(ctx, request):
    return ctx.broker.replica_manager.open_logs(_partitions(request.topics, "topic", "partitions", "partition"))


def open_describe_producers_partitions(ctx, request):
    return ctx.broker.replica_manager.open_logs(
        (topic.name, index) for topic in request.topics or () for index in topic.partition_indexes or ())


def open_describe_share_group_offsets_partitions(ctx, request):
    """The partitions whose latest offset DescribeShareGroupOffsets reads for the lag: those named
    that have share state, or for a group named without topics every share-partition the share-state
    store knows of it."""
    store = getattr(ctx.broker, "share_state", None)
    if store is None:
        return None

    def partitions():
        for group in request.groups or ():
            if group.topics is None:
                for summary in store.summaries(group.group_id):
                    name = store.topic_ids.name_of(summary.topic_id)
                    if name is not None:
                        yield name, summary.partition
                continue
            for topic in group.topics:
                for partition in topic.partitions or ():
                    if store.summary(group.group_id, topic.topic_name, partition) is not None:
                        yield topic.topic_name, partition

    return ctx.broker.replica_manager.open_logs(partitions())


__all__ = ["open_produce_partitions", "open_list_offsets_partitions", "open_delete_records_partitions",
           "open_offset_for_leader_epoch_partitions", "open_describe_producers_partitions",
           "open_describe_share_group_offsets_partitions"]
