"""The Spark glue of the sink: ``df.write.format("sundial")`` and ``writeStream.format("sundial")``.

Where each piece runs (Spark's Python Data Source API, pyspark >= 4.1):

* :func:`build_writer` - in a planning worker on the driver, once per write (and, for
  streaming, again before each micro-batch commit). It parses the options
  (:mod:`pipeline.sink_options`), checks the DataFrame's columns
  (:mod:`pipeline.sink_columns`) and the ``kafka.*`` settings, so every mistake fails
  before a task starts. The writer is then pickled to the executors.
* ``write(iterator)`` - in each task: Arrow record batches (``sundial.inputFormat=arrow``,
  the default) or Row objects, turned into records by :class:`pipeline.producer.TaskWriter`.
  It returns a :class:`SundialCommitMessage`.
* ``commit`` / ``abort`` - on the driver, with every task's message: they log what was
  written. Nothing is left to do there: at-least-once tasks have flushed, exactly-once
  tasks have committed their own transactions (see :mod:`pipeline.producer` for why a
  transaction per task, and what that means for a failed job).

Identities for exactly-once (from Spark's task context): a streaming task uses the
query id (kept in the checkpoint, so the same after a restart) and the micro-batch id
(Spark's ``streaming.sql.batchId`` local property) as the epoch; a batch job uses a
random id drawn when the write is planned, and epoch 0.

Batch writes accept ``mode("append")`` only: ``overwrite`` cannot delete what a topic
holds, and Spark itself refuses ``errorifexists``/``ignore`` for Python data sources.
Streaming writes accept every output mode; in ``complete`` mode each micro-batch
appends the whole result table, as Spark's Kafka sink does.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from itertools import islice
from typing import Iterator, Sequence

import structlog
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)

from .errors import OptionError, SinkError
from .producer import TaskIdentity, TaskResult, TaskWriter, check_producer_settings
from .sink_columns import InputLayout, RowPosition, arrow_columns, input_layout, row_columns
from .sink_options import SinkOptions, parse_sink_options

logger = structlog.get_logger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"     # Spark's StreamExecution.QUERY_ID_KEY
BATCH_ID_PROPERTY = "streaming.sql.batchId"     # Spark's MicroBatchExecution.BATCH_ID_KEY
ROW_CHUNK = 10_000


@dataclass
class SundialCommitMessage(WriterCommitMessage):
    result: TaskResult


class SinkPlan:
    """Everything a task needs (pickled with the writer): options, column layout, job id."""

    def __init__(self, opts: SinkOptions, layout: InputLayout, job_id: str | None) -> None:
        self.opts = opts
        self.layout = layout
        self.job_id = job_id

    # --- executor side --------------------------------------------------------------------------

    def identity(self) -> TaskIdentity:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        position = RowPosition(partition, attempt)
        if not self.opts.exactly_once:
            return TaskIdentity(position)
        if self.opts.streaming:
            query = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
            batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
            if not query or batch is None:
                raise SinkError("sundial.exactlyOnce=true: the task context has no streaming query id or "
                                "micro-batch id; exactly-once needs a micro-batch query (continuous "
                                "processing is not supported)")
            scope, epoch = query, int(batch)
        else:
            scope, epoch = self.job_id, 0
        name = f"{self.opts.transactional_id_prefix}{scope}-{partition}"
        return TaskIdentity(position, transactional_id=name, marker_group=name, epoch=epoch)

    def write_arrow(self, batches: Iterator) -> SundialCommitMessage:
        identity = self.identity()

        def chunks():
            row = 0
            for batch in batches:
                if batch.num_rows:
                    yield arrow_columns(batch, self.layout, identity.position, row)
                    row += batch.num_rows

        return SundialCommitMessage(TaskWriter(self.opts, identity).write(chunks()))

    def write_rows(self, rows: Iterator) -> SundialCommitMessage:
        identity = self.identity()

        def chunks():
            row = 0
            while True:
                chunk = list(islice(rows, ROW_CHUNK))
                if not chunk:
                    return
                yield row_columns(chunk, self.layout, identity.position, row)
                row += len(chunk)

        return SundialCommitMessage(TaskWriter(self.opts, identity).write(chunks()))

    # --- driver side ----------------------------------------------------------------------------

    def results(self, messages: Sequence) -> list[TaskResult]:
        return [m.result for m in messages if isinstance(m, SundialCommitMessage)]

    def log_commit(self, messages: Sequence, batch_id: int | None = None) -> None:
        results = self.results(messages)
        logger.info("sink_write_committed", batch_id=batch_id, tasks=len(results),
                    rows=sum(r.rows for r in results), exactly_once=self.opts.exactly_once,
                    rows_already_committed=sum(r.rows for r in results if r.skipped_epoch is not None),
                    topics=sorted({t for r in results for t in r.topics}))

    def log_abort(self, messages: Sequence, batch_id: int | None = None) -> None:
        results = self.results(messages)
        failed = sum(1 for m in messages if m is None)
        if self.opts.exactly_once:
            visible = [r for r in results if r.committed]
            logger.error("sink_write_aborted", batch_id=batch_id, failed_tasks=failed,
                         committed_tasks=[r.spark_partition for r in visible],
                         committed_rows=sum(r.rows for r in visible),
                         note=("each task commits its own transaction: rows of tasks that committed stay visible; "
                               "a restarted micro-batch skips them" if self.opts.streaming else
                               "each task commits its own transaction: rows of tasks that committed stay visible"))
        else:
            logger.error("sink_write_aborted", batch_id=batch_id, failed_tasks=failed,
                         rows_written=sum(r.rows for r in results),
                         note="at-least-once: records the broker accepted stay in the topic")


# --- the four Spark writer classes (Spark picks the Arrow path by class) ---------------------

class SundialBatchWriter(DataSourceWriter):
    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator) -> SundialCommitMessage:
        return self.plan.write_rows(iterator)

    def commit(self, messages) -> None:
        self.plan.log_commit(messages)

    def abort(self, messages) -> None:
        self.plan.log_abort(messages)


class SundialBatchArrowWriter(DataSourceArrowWriter):
    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator) -> SundialCommitMessage:
        return self.plan.write_arrow(iterator)

    def commit(self, messages) -> None:
        self.plan.log_commit(messages)

    def abort(self, messages) -> None:
        self.plan.log_abort(messages)


class SundialStreamWriter(DataSourceStreamWriter):
    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator) -> SundialCommitMessage:
        return self.plan.write_rows(iterator)

    def commit(self, messages, batchId: int) -> None:
        self.plan.log_commit(messages, batchId)

    def abort(self, messages, batchId: int) -> None:
        self.plan.log_abort(messages, batchId)


class SundialStreamArrowWriter(DataSourceStreamArrowWriter):
    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator) -> SundialCommitMessage:
        return self.plan.write_arrow(iterator)

    def commit(self, messages, batchId: int) -> None:
        self.plan.log_commit(messages, batchId)

    def abort(self, messages, batchId: int) -> None:
        self.plan.log_abort(messages, batchId)


def build_writer(options, schema, overwrite: bool, *, streaming: bool):
    """The writer for one ``write``/``writeStream`` (driver side; raises :class:`OptionError`)."""
    opts = parse_sink_options(options, streaming=streaming)
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        raise OptionError("format", ("writing with format('sundial') needs confluent-kafka (librdkafka) on the "
                                     "driver and the executors: pip install 'sundial-broker[spark]'")) from None
    if overwrite and not streaming:
        raise OptionError("mode", (
            "format('sundial') appends records to Kafka topics and cannot remove what a topic holds: "
            "mode('overwrite') is not supported, use mode('append')"))
    layout = input_layout(schema, opts.topic)
    opts = check_producer_settings(opts)
    if streaming:
        plan = SinkPlan(opts, layout, None)
        return SundialStreamArrowWriter(plan) if opts.input_format == "arrow" else SundialStreamWriter(plan)
    plan = SinkPlan(opts, layout, uuid.uuid4().hex if opts.exactly_once else None)
    return SundialBatchArrowWriter(plan) if opts.input_format == "arrow" else SundialBatchWriter(plan)
