"""Read a time window, aggregate it, and publish the result to another topic, exactly once.

The round trip of the sink: records of ``--topic`` whose timestamps lie in
[T - X, T) are counted per key and per ``--bucket-seconds`` bucket of event time; each
aggregate becomes one record of ``--out``:

* key: the source key;
* value: JSON ``{"key", "bucket_start", "records", "value_bytes", "first_event", "last_event"}``;
* timestamp (CreateTime): the event time of the latest source record it summarises,
  so the output keeps the event times of the input, not the time of the job;
* written with ``sundial.exactlyOnce=true``: every task writes in one transaction, and a
  retried task never publishes twice (read the output with ``isolation.level=read_committed``).

The window is chosen with a ``WHERE`` on the ``timestamp`` column, pushed down to the
source (``sundial.filterPushdown``), so only the offsets from ``offsetsForTimes(T - X)``
on are read.

    python -m sundial.pipeline.examples.aggregate_window --bootstrap 127.0.0.1:9092 --topic clicks \\
        --out clicks-per-minute --at 2026-01-31T12:00:00Z --minutes 15

``--at`` accepts ISO-8601 (``Z`` or an offset) or epoch milliseconds; the default is now.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys

from .replay_window import parse_time_ms

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def aggregate(spark, bootstrap: str, topic: str, start_ms: int, end_ms: int, bucket_s: int):
    """The aggregates of [start_ms, end_ms) as a DataFrame with the sink's columns."""
    from pyspark.sql import functions as F

    start = dt.datetime.fromtimestamp(start_ms / 1000, dt.timezone.utc)
    end = dt.datetime.fromtimestamp(end_ms / 1000, dt.timezone.utc)
    source = (spark.read.format("sundial")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic)
              .option("sundial.filterPushdown", "true")
              .load()
              .where((F.col("timestamp") >= F.lit(start)) & (F.col("timestamp") < F.lit(end))))
    bucket = F.window("timestamp", f"{bucket_s} seconds")
    grouped = (source.groupBy("key", bucket.alias("bucket"))
               .agg(F.count("*").alias("records"), F.sum(F.length("value")).alias("value_bytes"),
                    F.min("timestamp").alias("first_event"), F.max("timestamp").alias("last_event")))
    as_text = F.date_format  # ISO-8601 in the session time zone (UTC below)
    value = F.to_json(F.struct(
        F.col("key").cast("string").alias("key"),
        as_text("bucket.start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("bucket_start"),
        F.col("records"), F.col("value_bytes"),
        as_text("first_event", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias("first_event"),
        as_text("last_event", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias("last_event")))
    return grouped.select(F.col("key"), value.alias("value"), F.col("last_event").alias("timestamp"))


def publish(df, bootstrap: str, out_topic: str) -> None:
    (df.write.format("sundial").mode("append")
     .option("kafka.bootstrap.servers", bootstrap)
     .option("topic", out_topic)
     .option("sundial.exactlyOnce", "true")
     .save())


def run(spark, bootstrap: str, topic: str, out_topic: str, start_ms: int, end_ms: int, bucket_s: int = 60) -> int:
    """Aggregate and publish; returns the number of records written."""
    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    df = aggregate(spark, bootstrap, topic, start_ms, end_ms, bucket_s).cache()
    try:
        count = df.count()
        publish(df, bootstrap, out_topic)
    finally:
        df.unpersist()
    return count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True, help="host:port[,host:port...]")
    ap.add_argument("--topic", required=True, help="the topic to read")
    ap.add_argument("--out", required=True, help="the topic to write the aggregates to (must exist)")
    ap.add_argument("--at", help="T: ISO-8601 time or epoch ms (default: now)")
    ap.add_argument("--minutes", type=float, default=15.0, help="X, the window length in minutes (default 15)")
    ap.add_argument("--bucket-seconds", type=int, default=60, help="event-time bucket of the aggregates (default 60)")
    ap.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[*]"))
    args = ap.parse_args(argv)
    if args.minutes <= 0 or args.bucket_seconds <= 0:
        raise SystemExit("--minutes and --bucket-seconds must be positive")
    end_ms = parse_time_ms(args.at)
    start_ms = end_ms - int(args.minutes * 60_000)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from sundial.pipeline.source import SundialDataSource

    spark = (SparkSession.builder.master(args.master).appName("sundial-aggregate-window")
             .config(PUSHDOWN_CONF, "true").config("spark.sql.session.timeZone", "UTC").getOrCreate())
    # harmless when pyspark_sundial already registered the format; needed for editable installs
    spark.dataSource.register(SundialDataSource)
    try:
        written = run(spark, args.bootstrap, args.topic, args.out, start_ms, end_ms, args.bucket_seconds)
        print(f"wrote {written} aggregates of {args.topic} "
              f"[{dt.datetime.fromtimestamp(start_ms / 1000, dt.timezone.utc).isoformat()}, "
              f"{dt.datetime.fromtimestamp(end_ms / 1000, dt.timezone.utc).isoformat()}) to {args.out}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
