"""Sundial's PySpark data source: read topics by time range, and write to them, in batch and streaming.

``spark.read.format("sundial")`` and ``df.write.format("sundial")`` mirror spark-sql-kafka's
options, precedence, output schema and sink columns (see docs/spark.md). The package is an
optional extra (``sundial-broker[spark]``): the broker never imports it, and only
:mod:`pipeline.source` and :mod:`pipeline.sink` import pyspark. It is a
wire client: of Sundial's own packages it imports only :mod:`records` (the record
format, codecs and varints), never the broker, storage or protocol packages.

Modules, driver to executor:

* :mod:`pipeline.options`  - option parsing and validation (pure)
* :mod:`pipeline.offsets`  - topic-partitions, offset limits, the JSON shapes (pure)
* :mod:`pipeline.resolve`  - batch planning, splitting, admission control (pure)
* :mod:`pipeline.stream`   - micro-batch planning (pure)
* :mod:`pipeline.client`   - the driver's offset client (kafka-python)
* :mod:`pipeline.wire`     - the executors' Fetch client (sockets + kafka-python codecs)
* :mod:`pipeline.records`  - record batches -> columns (the hot path; layout from :mod:`records`)
* :mod:`pipeline.schema`   - Spark schema, Arrow batches, rows
* :mod:`pipeline.reader`   - one task's read loop
* :mod:`pipeline.pushdown` - ``WHERE`` filters -> offset ranges (pure)
* :mod:`pipeline.source`   - the Spark ``DataSource`` classes

The sink, driver to executor:

* :mod:`pipeline.sink_options` - sink option parsing (pure)
* :mod:`pipeline.sink_columns` - input columns: checks, rows -> records (pure)
* :mod:`pipeline.producer`     - one task's writes (confluent-kafka; idempotence, transactions)
* :mod:`pipeline.sink`         - the Spark writer classes
"""

FORMAT_NAME = "sundial"
