"""Sundial's PySpark data source: read topics by time range, in batch and streaming.

``spark.read.format("sundial")`` mirrors spark-sql-kafka's options, precedence and output
schema (see docs/spark.md). The package is an optional extra (``sundial-broker[spark]``):
the broker never imports it, and only :mod:`pipeline.source` imports pyspark. It is a
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
* :mod:`pipeline.source`   - the Spark ``DataSource`` classes
"""

FORMAT_NAME = "sundial"
