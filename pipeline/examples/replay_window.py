"""Disaster-recovery replay: copy everything produced between T - X and T into Parquet.

The use case of KIP-33's first draft (seed 001): a consumer fails over to another
cluster and must resume "from T - X". This job resolves the window with ListOffsets by
timestamp (``startingTimestamp``/``endingTimestamp``), keeps only records whose
timestamp lies in [T - X, T) (``sundial.exactTimeWindow``, exact even when producers
wrote CreateTimes out of order), and writes them to Parquet.

    python -m sundial.pipeline.examples.replay_window --bootstrap 127.0.0.1:9092 --topic orders \\
        --at 2026-01-31T12:00:00Z --minutes 15 --out /data/replay/orders

``--at`` accepts ISO-8601 (``Z`` or an offset) or epoch milliseconds; the default is
now. Partitions with no record at or after T - X contribute nothing (strategy
``latest``) instead of failing the job.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time


def parse_time_ms(text: str | None) -> int:
    if text is None:
        return int(time.time() * 1000)
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SystemExit(f"--at: '{text}' is neither ISO-8601 nor epoch milliseconds") from None
    if when.tzinfo is None:
        raise SystemExit(f"--at: '{text}' has no time zone; add Z or an offset such as +02:00")
    return int(when.timestamp() * 1000)


def build_reader(spark, bootstrap: str, topics: str, start_ms: int, end_ms: int, exact: bool):
    return (spark.read.format("sundial")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topics)
            .option("startingTimestamp", str(start_ms))
            .option("endingTimestamp", str(end_ms))
            .option("startingOffsetsByTimestampStrategy", "latest")
            .option("includeHeaders", "true")
            .option("sundial.exactTimeWindow", "true" if exact else "false")
            .load())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True, help="host:port[,host:port...]")
    ap.add_argument("--topic", required=True, help="topic, or comma-separated topics")
    ap.add_argument("--at", help="T: ISO-8601 time or epoch ms (default: now)")
    ap.add_argument("--minutes", type=float, default=15.0, help="X, the window length in minutes (default 15)")
    ap.add_argument("--out", required=True, help="Parquet output directory (overwritten)")
    ap.add_argument("--offset-range-only", action="store_true",
                    help="Spark's plain semantics: the offset range [offset(T-X), offset(T)), no timestamp filter")
    ap.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[*]"))
    args = ap.parse_args(argv)

    end_ms = parse_time_ms(args.at)
    start_ms = end_ms - int(args.minutes * 60_000)
    if args.minutes <= 0:
        raise SystemExit("--minutes must be positive")

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from sundial.pipeline.source import SundialDataSource

    spark = (SparkSession.builder.master(args.master).appName("sundial-replay-window")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    # An installed package registers format("sundial") by itself; registering again is
    # harmless and also covers editable installs, which hide pyspark_sundial from Spark.
    spark.dataSource.register(SundialDataSource)
    try:
        df = build_reader(spark, args.bootstrap, args.topic, start_ms, end_ms, not args.offset_range_only).cache()
        df.write.mode("overwrite").parquet(args.out)
        summary = (df.groupBy("topic", "partition")
                   .agg(F.count("*").alias("records"), F.min("offset").alias("first_offset"),
                        F.max("offset").alias("last_offset"), F.min("timestamp").alias("first_timestamp"),
                        F.max("timestamp").alias("last_timestamp"))
                   .orderBy("topic", "partition").collect())
        window = (f"[{dt.datetime.fromtimestamp(start_ms / 1000, dt.timezone.utc).isoformat()}, "
                  f"{dt.datetime.fromtimestamp(end_ms / 1000, dt.timezone.utc).isoformat()})")
        print(f"replayed window {window} of {args.topic} into {args.out}")
        total = 0
        for row in summary:
            total += row["records"]
            print(f"  {row['topic']}-{row['partition']}: {row['records']} records, offsets "
                  f"{row['first_offset']}..{row['last_offset']}, timestamps {row['first_timestamp']} .. "
                  f"{row['last_timestamp']}")
        print(f"total: {total} records")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
