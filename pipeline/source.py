"""The Spark glue: ``format("sundial")`` as a Python data source (pyspark >= 4.2).

Where each piece runs (Spark's Python Data Source API):

* :class:`SundialDataSource` - registration (auto, through the top-level
  ``pyspark_sundial`` module) and schema; pickled everywhere.
* :class:`SundialBatchReader` - built in a planning worker on the driver; options are
  parsed there (fail fast). It is pickled for the executors *before* ``partitions()``
  runs, so it holds only options; each :class:`SundialInputPartition` carries everything
  its task needs.
* :class:`SundialStreamReader` - lives in the query's stream-runner process; its
  :class:`pipeline.stream.StreamPlanner` and broker client are created lazily and
  dropped when pickled, so ``read()`` in executors is stateless.

``read()`` yields ``pyarrow.RecordBatch`` (default) or tuples (``sundial.outputFormat=rows``).
Offsets in the checkpoint have Spark's Kafka shape ``{"topic": {"0": next_offset}}``.

* :class:`SundialPushdownReader` - the batch reader with ``pushFilters``, chosen by
  ``sundial.filterPushdown=true``. Spark fails a query whose reader implements
  ``pushFilters`` while ``spark.sql.python.filterPushdown.enabled`` is false
  (``DATA_SOURCE_PUSHDOWN_DISABLED``, naming the conf), so the plain reader must not
  have the method.
* ``writer()`` / ``streamWriter()`` - the sink, in :mod:`pipeline.sink`.
"""

from __future__ import annotations

from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from . import FORMAT_NAME
from .options import SourceOptions, include_headers_of, parse_options, validate_either_mode
from .pushdown import Pushed, translate
from .reader import ReadConfig, read_range
from .resolve import OffsetRange, plan_batch
from .schema import spark_schema, to_record_batch, to_rows
from .stream import StreamPlanner, offsets_from_json, offsets_to_json

class SundialInputPartition(InputPartition):
    """One task: an offset range plus the per-query read settings."""

    def __init__(self, config: ReadConfig, rng: OffsetRange) -> None:
        super().__init__(f"{rng.tp}[{rng.start},{rng.end})")
        self.config = config
        self.range = rng


def read_partition(partition: InputPartition) -> Iterator:
    """Arrow batches or tuples for one input partition (executor side)."""
    if not isinstance(partition, SundialInputPartition):
        return                       # Spark's placeholder when planning produced no partitions
    config, rng = partition.config, partition.range
    topic, number = rng.tp.topic, rng.tp.partition
    if config.output_format == "rows":
        for cols in read_range(config, rng):
            yield from to_rows(cols, topic, number, config.include_headers)
        return
    step = config.arrow_batch_rows
    for cols in read_range(config, rng):
        batch = to_record_batch(cols, topic, number, config.include_headers)
        if batch.num_rows <= step:
            yield batch
        else:
            for offset in range(0, batch.num_rows, step):
                yield batch.slice(offset, step)


def _offset_client(opts: SourceOptions):
    from .client import KafkaOffsetClient

    return KafkaOffsetClient(opts)


class SundialDataSource(DataSource):
    """``spark.read.format("sundial")`` / ``spark.readStream.format("sundial")``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self):
        # load() calls this before Spark knows batch from streaming: fail fast on every
        # option that is wrong in both modes (the mode-specific checks run in reader()).
        validate_either_mode(self.options)
        return spark_schema(include_headers_of(self.options))

    def reader(self, schema) -> "SundialBatchReader":
        opts = parse_options(self.options, streaming=False)
        return SundialPushdownReader(opts) if opts.filter_pushdown else SundialBatchReader(opts)

    def streamReader(self, schema) -> "SundialStreamReader":
        return SundialStreamReader(parse_options(self.options, streaming=True))

    def writer(self, schema, overwrite: bool):
        from .sink import build_writer

        return build_writer(self.options, schema, overwrite, streaming=False)

    def streamWriter(self, schema, overwrite: bool):
        from .sink import build_writer

        return build_writer(self.options, schema, overwrite, streaming=True)


class SundialBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.config = ReadConfig.from_options(opts)
        self.pushed: Pushed | None = None

    def partitions(self) -> list[InputPartition]:
        client = _offset_client(self.opts)
        try:
            ranges = plan_batch(self.opts, client, self.pushed)
        finally:
            client.close()
        return [SundialInputPartition(self.config, r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator:
        return read_partition(partition)


class SundialPushdownReader(SundialBatchReader):
    """The batch reader that takes timestamp, partition, offset and topic filters
    (:mod:`pipeline.pushdown`); the others stay with Spark."""

    def pushFilters(self, filters):
        self.pushed, rest = translate(filters)
        return rest


class SundialStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.config = ReadConfig.from_options(opts)
        self._planner: StreamPlanner | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_planner"] = None          # a live broker client never travels to executors
        return state

    @property
    def planner(self) -> StreamPlanner:
        if self._planner is None:
            self._planner = StreamPlanner(self.opts, _offset_client(self.opts))
        return self._planner

    def initialOffset(self) -> dict:
        return offsets_to_json(self.planner.initial_offsets())

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        planner = self.planner
        begin = offsets_from_json(start) if start is not None else planner.initial_offsets()
        if limit is None:
            limit = self.getDefaultReadLimit()
        if isinstance(limit, ReadAllAvailable):
            end = planner.latest_offsets(begin, all_available=True)
        else:
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.opts.max_offsets_per_trigger
            min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else self.opts.min_offsets_per_trigger
            end = planner.latest_offsets(begin, max_rows=max_rows, min_rows=min_rows)
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict | None:
        latest = self.planner.last_latest
        return offsets_to_json(latest) if latest else None

    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.prepare_available_now()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        ranges = self.planner.plan(offsets_from_json(start), offsets_from_json(end))
        return [SundialInputPartition(self.config, r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator:
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: Spark keeps the offsets in its checkpoint; no group commits."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.client.close()
            self._planner = None
