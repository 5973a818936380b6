"""Benchmark ``format("sundial")`` in Spark local mode against a real Sundial daemon.

Prints, with the command used:

* batch read of N records (default 1M, ~100-byte records, 4 partitions) into Spark's
  ``noop`` sink: rows/s for Arrow batches and for row tuples (median of --runs runs,
  after one uncounted warm-up read that starts the Python workers);
* optionally (--parquet) the same read written to Parquet;
* streaming: a producer at --stream-rate records/s with CreateTime = now, a query with
  the default trigger (next micro-batch as soon as the previous one ends) and a
  foreachBatch sink; p50/p99 of the micro-batch duration (Spark's triggerExecution) and
  of the end-to-end lag (record CreateTime -> its batch processed), after --warmup-s.

Usage:
    python benchmarks/spark_bench.py                       # starts its own daemon
    python benchmarks/spark_bench.py --bootstrap host:9092 # an already running broker
    python benchmarks/spark_bench.py --records 200000 --runs 5 --parquet --stream-seconds 45

Needs the spark extra (pyspark, pyarrow) and Java 17. Uses confluent-kafka to produce
when it is installed (fast), kafka-python otherwise.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from bench_daemon import start_sundial  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def start_daemon(workdir: str) -> tuple[subprocess.Popen, str]:
    return start_sundial(os.path.join(workdir, "data"), log_path=os.path.join(workdir, "sundial.log"), cwd=workdir)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, records: int, partitions: int, value_bytes: int) -> float:
    """Produce ``records`` (7-byte key, value_bytes value, a header on every 1000th); returns seconds."""
    value = b"x" * value_bytes
    t0 = time.monotonic()
    step = max(records // 10, 1)
    try:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                      "queue.buffering.max.messages": 1_000_000, "compression.type": "none",
                      "enable.idempotence": False})
        for i in range(records):
            headers = [("seq", str(i).encode())] if i % 1000 == 0 else None
            while True:
                try:
                    p.produce(topic, key=b"k%06d" % (i % 1_000_000), value=value, partition=i % partitions,
                              headers=headers)
                    break
                except BufferError:
                    p.poll(0.05)
            if i % 10_000 == 0:
                p.poll(0)
            if i and i % step == 0:
                log(f"  produced {i:,}/{records:,}")
        left = p.flush(120)
        if left:
            raise SystemExit(f"{left} records were not acknowledged")
    except ImportError:
        from kafka import KafkaProducer

        p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20)
        for i in range(records):
            headers = [("seq", str(i).encode())] if i % 1000 == 0 else None
            p.send(topic, key=b"k%06d" % (i % 1_000_000), value=value, partition=i % partitions, headers=headers)
            if i and i % step == 0:
                log(f"  produced {i:,}/{records:,}")
        p.flush()
        p.close()
    return time.monotonic() - t0


def spark_session(cores: int):
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(f"local[{cores}]").appName("sundial-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", str(cores))
             .config("spark.sql.session.timeZone", "UTC").config("spark.driver.memory", "2g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def batch_reads(spark, bootstrap: str, topic: str, records: int, runs: int, parquet: bool, workdir: str) -> dict:
    def df(fmt: str):
        return (spark.read.format("sundial").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic).option("includeHeaders", "true")
                .option("sundial.outputFormat", fmt).load())

    t0 = time.monotonic()
    df("arrow").write.format("noop").mode("overwrite").save()
    log(f"warm-up read (starts the Python workers; not counted): {time.monotonic() - t0:.1f} s")
    results = {}
    sinks = [("noop", lambda d: d.write.format("noop").mode("overwrite").save())]
    if parquet:
        out = os.path.join(workdir, "parquet")
        sinks.append(("parquet", lambda d: d.write.mode("overwrite").parquet(out)))
    for sink, write in sinks:
        for fmt in ("arrow", "rows"):
            times = []
            for run in range(runs):
                t = time.monotonic()
                write(df(fmt))
                times.append(time.monotonic() - t)
                log(f"  {sink:8s} {fmt:6s} run {run + 1}/{runs}: {times[-1]:.2f} s = {records / times[-1]:,.0f} rows/s")
            results[(sink, fmt)] = times
    return results


def streaming(spark, bootstrap: str, seconds: float, rate: int, warmup_s: float, partitions: int) -> dict:
    topic = f"bench-stream-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions)
    from kafka import KafkaProducer

    stop = threading.Event()
    sent = [0]

    def producer_loop():
        p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        value = b"x" * 93
        t_start = time.monotonic()
        while not stop.is_set():
            due = int((time.monotonic() - t_start) * rate)
            while sent[0] < due:
                p.send(topic, key=b"k", value=value, partition=sent[0] % partitions,
                       timestamp_ms=int(time.time() * 1000))
                sent[0] += 1
            time.sleep(0.002)
        p.flush()
        p.close()

    lags_ms: list[float] = []
    started = time.time()

    def sink(batch_df, batch_id):
        rows = batch_df.select("timestamp").collect()
        now = time.time()
        if now - started < warmup_s:
            return
        lags_ms.extend((now - r["timestamp"].timestamp()) * 1000 for r in rows)

    checkpoint = tempfile.mkdtemp(prefix="sundial-bench-ckpt-")
    query = (spark.readStream.format("sundial").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "latest").load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).start())
    thread = threading.Thread(target=producer_loop, daemon=True)
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join()
    time.sleep(2)
    progress = list(query.recentProgress)
    query.stop()
    shutil.rmtree(checkpoint, ignore_errors=True)
    durations = []
    for p in progress:
        ts = p["timestamp"] if isinstance(p, dict) else p.timestamp
        info = p["durationMs"] if isinstance(p, dict) else p.durationMs
        rows = p["numInputRows"] if isinstance(p, dict) else p.numInputRows
        t = time.mktime(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        if t - started >= warmup_s and rows:
            durations.append(info.get("triggerExecution", 0))
    return {"produced": sent[0], "batch_ms": durations, "lag_ms": lags_ms}


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="use this broker instead of starting a daemon")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-bytes", type=int, default=93)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--parquet", action="store_true", help="also time writing the read to Parquet")
    ap.add_argument("--stream-seconds", type=float, default=40.0, help="0 skips the streaming run")
    ap.add_argument("--stream-rate", type=int, default=1000, help="records/s produced during the streaming run")
    ap.add_argument("--warmup-s", type=float, default=15.0)
    args = ap.parse_args()
    command = " ".join(["python", "benchmarks/spark_bench.py"] + sys.argv[1:])

    workdir = tempfile.mkdtemp(prefix="sundial-bench-")
    daemon = None
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            daemon, bootstrap = start_daemon(workdir)
            log(f"started sundial at {bootstrap} (data in {workdir})")
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, args.partitions)
        secs = produce(bootstrap, topic, args.records, args.partitions, args.value_bytes)
        log(f"produced {args.records:,} records in {secs:.1f} s")
        t = time.monotonic()
        spark = spark_session(args.cores)
        log(f"SparkSession started in {time.monotonic() - t:.1f} s")
        batch = batch_reads(spark, bootstrap, topic, args.records, args.runs, args.parquet, workdir)
        stream = None
        if args.stream_seconds > 0:
            log(f"streaming for {args.stream_seconds:.0f} s at {args.stream_rate} records/s")
            stream = streaming(spark, bootstrap, args.stream_seconds, args.stream_rate, args.warmup_s,
                               args.partitions)
        spark.stop()

        load = os.getloadavg()
        print()
        print(f"command: {command}")
        print(f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
              f"Spark local[{args.cores}]; {args.records:,} records x {7 + args.value_bytes} bytes, "
              f"{args.partitions} partitions")
        for (sink, fmt), times in batch.items():
            med = statistics.median(times)
            print(f"batch read -> {sink:8s} {fmt:6s}: median {med:.2f} s = {args.records / med:,.0f} rows/s "
                  f"(runs: {', '.join(f'{x:.2f}' for x in times)} s)")
        for sink in ("noop", "parquet"):
            if (sink, "arrow") in batch:
                ratio = statistics.median(batch[(sink, "rows")]) / statistics.median(batch[(sink, "arrow")])
                print(f"arrow / rows speed-up ({sink}): {ratio:.2f}x")
        if stream:
            print(f"streaming: {stream['produced']:,} records produced at {args.stream_rate}/s; "
                  f"{len(stream['batch_ms'])} micro-batches after {args.warmup_s:.0f} s warm-up")
            print(f"micro-batch duration (triggerExecution): p50 {pct(stream['batch_ms'], 50):.0f} ms, "
                  f"p99 {pct(stream['batch_ms'], 99):.0f} ms")
            print(f"end-to-end lag (CreateTime -> batch processed): p50 {pct(stream['lag_ms'], 50):.0f} ms, "
                  f"p99 {pct(stream['lag_ms'], 99):.0f} ms over {len(stream['lag_ms']):,} records")
    finally:
        if daemon is not None:
            daemon.terminate()
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
