"""A producer over its ``producer_byte_rate`` quota: achieved rate against the quota.

    python benchmarks/quota_bench.py [--seconds 30] [--quotas 262144,1048576] [--repetitions 3]

Starts one Sundial daemon, sets ``producer_byte_rate`` on a client id per run (a fresh client id
each time, so every run starts with an empty rate, as a new client does) and lets a kafka-python
producer (acks=1, 10 KB records, at most 32 records unacknowledged) send as fast as the broker
lets it for ``--seconds``. The achieved rate is measured on the records acknowledged within that
time: their bytes (keys and values) over the time. The quota counts whole Produce requests
(record batch and request headers too, a percent or two with 10 KB records), so a broker that
enforces the quota exactly shows an achieved rate slightly below it.

Runs are interleaved (quota A, quota B, quota A, ...) ``--repetitions`` times; the output is one
line per run, then per quota the mean ratio achieved/quota and the spread (max - min) of the
ratios, and the command line it ran. Target: every ratio within 10% of 1.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import threading
import time

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafka.protocol.admin import AlterClientQuotasRequest

from bench_daemon import start_sundial, stop

RECORD_BYTES = 10_000
MAX_UNACKED = 32


def set_quota(admin: KafkaAdminClient, client_id: str, rate: int) -> None:
    entry = AlterClientQuotasRequest.EntryData
    request = AlterClientQuotasRequest(entries=[entry(
        entity=[entry.EntityData(entity_type="client-id", entity_name=client_id)],
        ops=[entry.OpData(key="producer_byte_rate", value=float(rate), remove=False)])], validate_only=False)

    async def ask():
        return await admin._manager.send(request)

    response = admin._manager.run(ask)
    if response.entries[0].error_code:
        sys.exit(f"quota_bench: AlterClientQuotas failed: {response.entries[0].error_message}")


def run_once(bootstrap: str, topic: str, client_id: str, seconds: float) -> tuple[float, int]:
    """(achieved bytes/s on acknowledged records within ``seconds``, throttled responses seen)."""
    value = b"v" * RECORD_BYTES
    key = b"k"
    room = threading.Semaphore(MAX_UNACKED)
    lock = threading.Lock()
    acked = [0]
    deadline = [0.0]

    def on_ack(_metadata):
        if time.monotonic() <= deadline[0]:
            with lock:
                acked[0] += len(key) + len(value)
        room.release()

    def on_error(_exc):
        room.release()

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, acks=1, linger_ms=5,
                             batch_size=65536, request_timeout_ms=60_000)
    try:
        producer.send(topic, b"warm-up").get(timeout=30)   # metadata and connection before the clock starts
        started = time.monotonic()
        deadline[0] = started + seconds
        while time.monotonic() < deadline[0]:
            if room.acquire(timeout=0.5):
                producer.send(topic, value, key=key).add_callback(on_ack).add_errback(on_error)
        producer.flush(timeout=120)
        throttles = 0
        for values in producer.metrics().values():
            for name, metric in values.items():
                if name == "throttle-time-max" and isinstance(metric, (int, float)) and metric > 0:
                    throttles += 1
    finally:
        producer.close()
    return acked[0] / seconds, throttles


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--quotas", default="262144,1048576", help="producer_byte_rate values, comma separated")
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)
    quotas = [int(q) for q in args.quotas.split(",") if q.strip()]
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    ratios: dict[int, list[float]] = {q: [] for q in quotas}
    with tempfile.TemporaryDirectory(prefix="quota-bench-") as data_dir:
        proc, bootstrap = start_sundial(data_dir)
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
            try:
                admin.create_topics([NewTopic("quota-bench", 1, 1)])
                run = 0
                for rep in range(args.repetitions):
                    for quota in quotas:
                        run += 1
                        client_id = f"quota-bench-{run}"
                        set_quota(admin, client_id, quota)
                        achieved, throttled = run_once(bootstrap, "quota-bench", client_id, args.seconds)
                        ratio = achieved / quota
                        ratios[quota].append(ratio)
                        print(f"run {run} (repetition {rep + 1}): quota {quota} B/s, achieved {achieved:.0f} B/s "
                              f"on acknowledged records over {args.seconds:.0f} s, ratio {ratio:.3f}"
                              f"{'' if throttled else ' (the producer saw no throttle time)'}", flush=True)
            finally:
                admin.close()
        finally:
            stop(proc)
    worst = 0.0
    for quota, values in ratios.items():
        mean = sum(values) / len(values)
        spread = max(values) - min(values)
        worst = max(worst, *(abs(v - 1) for v in values))
        print(f"quota {quota} B/s: mean ratio {mean:.3f} over {len(values)} runs, spread {spread:.3f} "
              f"(min {min(values):.3f}, max {max(values):.3f})")
    print(f"largest deviation from the quota: {worst * 100:.1f}% (target: within 10%)")
    print(f"command: {command}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
