"""Replication benchmark: W5, produce with RF=3 and ``acks=all`` next to RF=1 and ``acks=1``.

From ``BENCHMARKS.md``: W1 and W4 with replication factor 3, ``acks=all``, 3
broker processes; the figure is the throughput ratio to RF=1. Both setups run
on one :class:`mq.local_cluster.LocalCluster` (a real etcd and 3 ``mq serve
--metadata etcd://... --node-id N`` processes on loopback, the brokers'
default settings: ``flush=interval``), so the baseline takes the same cluster
code path and differs only in its topic and its ``acks``:

* **RF=1**: a topic of 1 partition, replication factor 1, ``acks=1``;
* **RF=3**: a topic of 1 partition, replication factor 3,
  ``min.insync.replicas=2``, ``acks=all`` (the ack waits until the high
  watermark covers the batch: every in-sync replica has it).

Each run creates a new topic per setup (and waits until its leader is elected
and its ISR is full), then for each setup, in turn:

* **throughput** (W1): one producer (the client's defaults, as W1: ``linger_ms=5``,
  ``batch_size=16384``) sends N records of S bytes (default 200,000 x 100 B);
  the clock starts after the producer has the topic's metadata and one first
  record has been acknowledged, and stops when every record is acknowledged.
  Verified: the acknowledged offsets are exactly 1..N. (The first record's
  send-to-ack time is reported on its own as ``first ack``: with RF=3 it
  includes the followers' start on the new partition, up to a fetch long poll,
  ``replica_fetch_wait_max_ms``, when their fetcher was already running.)
* **ack latency** (W4's produce side; ``--rate 0`` skips it): the same producer
  settings but ``linger_ms=0`` (as W4), sending at a fixed rate (W4's 5,000
  msg/s, but for 2 s after a 0.5 s warm-up that is left out) on absolute deadlines;
  each record's ``send()`` to acknowledgement time is measured (p50 / p99 /
  max). Verified: the acknowledged offsets follow the throughput phase's.

The two setups alternate which goes first from run to run, so that the shared
machine's noise hits both alike; the ratio RF=3/RF=1 is the median of each
run's own ratio. Besides msg/s and MB/s it reports the brokers' CPU per
message (user + system time of all 3 broker processes from ``/proc/PID/stat``,
summed: W8 of a cluster, etcd excluded) and ``cpu wait``: the share of the time
in which some runnable task (anyone's) waited for a CPU (Linux PSI), high on a
busy shared machine. After the runs it reports every WARNING/ERROR line the
brokers logged (``--data-dir``, an empty directory, keeps the cluster's data and logs).
Usage::

    python -m benchmarks.replication [--messages N] [--size BYTES] [--runs N]
        [--rate MSG_PER_S] [--latency-seconds S] [--warmup S] [--data-dir DIR] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import uvloop

from benchmarks.client import payloads
from benchmarks.common import cpu_pressure_seconds, percentile, process_cpu_seconds
from mq import Admin, Producer, RecordFuture
from mq.local_cluster import LocalCluster

NODES = 3
READY_TIMEOUT_S = 30.0
"""How long a new topic may take to get a leader and a full ISR."""
READY_POLL_S = 0.05
FIRST_OFFSET = 1
"""Offset of W1's first record: one record goes first, before the clock starts, so that
W1 does not include the wait of followers whose fetch (a long poll, up to the broker's
``replica_fetch_wait_max_ms``) began before the partition existed."""
MIN_SLEEP_NS = 1_000_000
"""uvloop rounds timers to whole ms: a shorter sleep would be a busy poll."""
LOG_LINES_SHOWN = 10
"""Broker WARNING/ERROR lines printed (all are counted)."""


@dataclass(frozen=True)
class Setup:
    label: str
    replication_factor: int
    acks: Literal["all", 1]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def durability(self) -> str:
        extra = "".join(f", {k}={v}" for k, v in self.configs.items())
        return f"flush=interval, RF={self.replication_factor}{extra}, acks={self.acks}"


RF1 = Setup("RF=1 acks=1", 1, 1)
RF3 = Setup("RF=3 acks=all", NODES, "all", {"min.insync.replicas": "2"})


@dataclass(frozen=True)
class Settings:
    messages: int
    size: int
    rate: int
    seconds: float
    warmup: float

    @property
    def latency_total(self) -> int:
        """Messages the latency phase sends, warm-up included."""
        return round(self.rate * (self.warmup + self.seconds))

    @property
    def warmup_count(self) -> int:
        return round(self.rate * self.warmup)


@dataclass
class Run:
    """One setup's figures in one run."""

    seconds: float
    client_cpu_s: float
    broker_cpu_s: list[float]
    """Each broker's CPU seconds during the throughput phase, in node id order."""
    cpu_wait_s: float
    verified: bool
    leader: int
    isr: tuple[int, ...]
    """The partition's ISR after the run."""
    first_ack_ms: float
    """Send-to-ack time of the topic's first record (sent before the clock starts)."""
    ack_ms: list[float] = field(default_factory=list)
    """Sorted send-to-ack times of the latency phase's measured messages."""
    send_rate: float = math.nan
    latency_broker_cpu_s: float = math.nan
    problem: str = ""


@dataclass
class Figure:
    setup: Setup
    settings: Settings
    runs: list[Run] = field(default_factory=list)

    def median(self, pick: Callable[[Run], float]) -> float:
        return statistics.median(pick(r) for r in self.runs)

    def spread(self, pick: Callable[[Run], float]) -> tuple[float, float]:
        values = [pick(r) for r in self.runs]
        return min(values), max(values)

    def msg_per_s(self, run: Run) -> float:
        return self.settings.messages / run.seconds

    def mb_per_s(self, run: Run) -> float:
        return self.settings.messages * self.settings.size / run.seconds / 1e6

    def broker_us(self, run: Run) -> float:
        return sum(run.broker_cpu_s) / self.settings.messages * 1e6

    def client_us(self, run: Run) -> float:
        return run.client_cpu_s / self.settings.messages * 1e6

    def cpu_wait_pct(self, run: Run) -> float:
        return run.cpu_wait_s / run.seconds * 100

    def latency_broker_us(self, run: Run) -> float:
        return run.latency_broker_cpu_s / max(self.settings.latency_total, 1) * 1e6

    @staticmethod
    def ack_p50(run: Run) -> float:
        return percentile(run.ack_ms, 0.5)

    @staticmethod
    def ack_p99(run: Run) -> float:
        return percentile(run.ack_ms, 0.99)

    @staticmethod
    def ack_max(run: Run) -> float:
        return run.ack_ms[-1] if run.ack_ms else math.nan

    @property
    def verified(self) -> bool:
        return all(r.verified for r in self.runs)


class Meter:
    """The brokers' CPU time and the machine's CPU pressure between two readings."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.pids = list(pids)
        self._cpu: list[float] = []
        self._waited = 0.0

    def start(self) -> None:
        self._cpu, self._waited = self._read(), cpu_pressure_seconds()

    def stop(self) -> tuple[list[float], float]:
        """Each broker's CPU seconds since :meth:`start`, and the CPU-wait seconds."""
        cpu = [after - before for after, before in zip(self._read(), self._cpu, strict=True)]
        return cpu, cpu_pressure_seconds() - self._waited

    def _read(self) -> list[float]:
        return [process_cpu_seconds(pid) for pid in self.pids]


# -- one setup, one run --------------------------------------------------------------------------


async def _create_topic(bootstrap: str, topic: str, setup: Setup) -> None:
    """Create the topic and wait until its partition has a leader and a full ISR."""
    async with Admin(bootstrap) as admin:
        await admin.create_topic(
            topic, partitions=1, replication_factor=setup.replication_factor, configs=setup.configs
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            [partition] = (await admin.describe_topic(topic)).partitions
            if partition.leader >= 0 and len(partition.isr) == setup.replication_factor:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: not ready after {READY_TIMEOUT_S:.0f} s: {partition}")
            await asyncio.sleep(READY_POLL_S)


async def _describe(bootstrap: str, topic: str) -> tuple[int, tuple[int, ...]]:
    async with Admin(bootstrap) as admin:
        [partition] = (await admin.describe_topic(topic)).partitions
    return partition.leader, partition.isr


def _check_offsets(futures: list[RecordFuture], first: int) -> str:
    """'' if the acknowledged offsets are exactly first, first+1, ...; else what is wrong."""
    try:
        offsets = [f.result().offset for f in futures]
    except Exception as exc:
        return f"a send failed: {exc!r}"
    if offsets != list(range(first, first + len(futures))):
        return f"the acknowledged offsets are not {first}..{first + len(futures) - 1}"
    return ""


async def _throughput(
    bootstrap: str, topic: str, setup: Setup, values: list[bytes], meter: Meter
) -> tuple[float, float, float, str]:
    """W1 on ``topic`` after one first record: the first record's send-to-ack seconds,
    the W1 seconds and client CPU seconds, and a problem ('' if verified)."""
    async with Producer(bootstrap, acks=setup.acks) as producer:
        await producer.partitions_for(topic)  # metadata before the clock starts
        first = time.perf_counter()
        await producer.send_and_wait(topic, values[0])  # the followers fetch the partition
        first = time.perf_counter() - first
        send = producer.send
        futures: list[RecordFuture] = []
        add = futures.append
        meter.start()
        cpu, start = time.process_time(), time.perf_counter()
        for value in values:
            add(await send(topic, value))
        await producer.flush()
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return first, seconds, cpu, _check_offsets(futures, FIRST_OFFSET)


async def _ack_latency(
    bootstrap: str, topic: str, setup: Setup, settings: Settings, values: list[bytes]
) -> tuple[list[float], float, str]:
    """Fixed-rate sends with ``linger_ms=0``: sorted send-to-ack ms of the measured
    messages, the achieved send rate, and a problem ('' if verified)."""
    total, measured_from = settings.latency_total, settings.warmup_count
    clock = time.monotonic_ns
    acks: list[int] = []

    def acked(sent_ns: int, _: RecordFuture) -> None:
        acks.append(clock() - sent_ns)

    futures: list[RecordFuture] = []
    async with Producer(bootstrap, acks=setup.acks, linger_ms=0) as producer:
        await producer.partitions_for(topic)
        send = producer.send
        start = first_measured = sent = clock()
        for i in range(total):
            due = start + i * 1_000_000_000 // settings.rate
            sent = clock()
            if sent < due:
                await asyncio.sleep(max(due - sent, MIN_SLEEP_NS) / 1e9)
                sent = clock()
            if i == measured_from:
                first_measured = sent
            future = await send(topic, values[i % len(values)])
            futures.append(future)
            if i >= measured_from:
                future.add_done_callback(partial(acked, sent))
        last = sent
        await producer.flush()
    window_ns = last - first_measured
    rate = (total - measured_from - 1) / window_ns * 1e9 if window_ns > 0 else math.nan
    problem = _check_offsets(futures, FIRST_OFFSET + settings.messages)
    if not problem and len(acks) != total - measured_from:
        problem = f"{len(acks)} of {total - measured_from} acknowledgements timed"
    return sorted(ns / 1e6 for ns in acks), rate, problem


def one_run(
    cluster: LocalCluster, topic: str, setup: Setup, settings: Settings, values: list[bytes]
) -> Run:
    bootstrap = cluster.bootstrap
    meter = Meter([cluster.brokers[n].pid for n in sorted(cluster.brokers)])
    uvloop.run(_create_topic(bootstrap, topic, setup))
    first, seconds, client_cpu, problem = uvloop.run(
        _throughput(bootstrap, topic, setup, values, meter)
    )
    broker_cpu, waited = meter.stop()
    run = Run(
        seconds=seconds,
        client_cpu_s=client_cpu,
        broker_cpu_s=broker_cpu,
        cpu_wait_s=waited,
        verified=not problem,
        leader=-1,
        isr=(),
        first_ack_ms=first * 1e3,
        problem=problem,
    )
    if settings.rate > 0:
        meter.start()
        acks, run.send_rate, latency_problem = uvloop.run(
            _ack_latency(bootstrap, topic, setup, settings, values)
        )
        run.ack_ms, run.latency_broker_cpu_s = acks, sum(meter.stop()[0])
        if latency_problem:
            run.verified = False
            run.problem = "; ".join(p for p in (problem, latency_problem) if p)
    run.leader, run.isr = uvloop.run(_describe(bootstrap, topic))
    return run


def broker_log_problems(base_dir: Path) -> list[str]:
    """Every WARNING, ERROR or CRITICAL line (and tracebacks) of the brokers' logs."""
    found = []
    for log in sorted(base_dir.glob("node-*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if any(m in line for m in (" WARNING ", " ERROR ", " CRITICAL ", "Traceback")):
                found.append(f"{log.name}: {line}")
    return found


@contextmanager
def _base_dir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="mq-bench-w5-") as tmp:
        yield Path(tmp)


def measure(settings: Settings, runs: int, keep: Path | None) -> tuple[list[Figure], list[str]]:
    """Both setups, ``runs`` times each, alternating which goes first; and the brokers'
    WARNING/ERROR log lines."""
    values = payloads(settings.messages, settings.size)
    figures = {setup.label: Figure(setup, settings) for setup in (RF1, RF3)}
    with _base_dir(keep) as base_dir:
        cluster = LocalCluster(base_dir / "cluster", nodes=NODES)
        cluster.start()
        try:
            for run in range(runs):
                order = (RF1, RF3) if run % 2 == 0 else (RF3, RF1)
                for setup in order:
                    topic = f"w5-rf{setup.replication_factor}-{run}"
                    result = one_run(cluster, topic, setup, settings, values)
                    figures[setup.label].runs.append(result)
        finally:
            cluster.stop()
        problems = broker_log_problems(base_dir / "cluster")
    return [figures[RF1.label], figures[RF3.label]], problems


# -- the report ------------------------------------------------------------------------------


def ratios(rf1: Figure, rf3: Figure) -> list[float]:
    """Each run's RF=3 msg/s over the same run's RF=1 msg/s."""
    return [a.seconds / b.seconds for a, b in zip(rf1.runs, rf3.runs, strict=True)]


def _figure_json(f: Figure) -> dict[str, Any]:
    def r(value: float, digits: int) -> float | None:
        return None if math.isnan(value) else round(value, digits)

    latency = f.settings.rate > 0
    lo, hi = f.spread(f.msg_per_s)
    return {
        "workload": "W5 produce",
        "system": "mq",
        "setup": f.setup.label,
        "durability": f.setup.durability,
        "brokers": NODES,
        "messages": f.settings.messages,
        "bytes": f.settings.messages * f.settings.size,
        "seconds": round(f.median(lambda run: run.seconds), 3),
        "msg_per_s": round(f.median(f.msg_per_s)),
        "msg_per_s_min": round(lo),
        "msg_per_s_max": round(hi),
        "mb_per_s": round(f.median(f.mb_per_s), 2),
        "broker_cpu_us_per_msg": round(f.median(f.broker_us), 2),
        "client_cpu_us_per_msg": round(f.median(f.client_us), 2),
        "cpu_wait_pct": round(f.median(f.cpu_wait_pct), 1),
        "first_ack_ms": round(f.median(lambda run: run.first_ack_ms), 1),
        "ack_rate": f.settings.rate if latency else None,
        "ack_p50_ms": r(f.median(f.ack_p50), 3) if latency else None,
        "ack_p99_ms": r(f.median(f.ack_p99), 3) if latency else None,
        "ack_max_ms": r(f.median(f.ack_max), 3) if latency else None,
        "verified": f.verified,
        "problem": "; ".join(run.problem for run in f.runs if run.problem),
        "runs": [
            {
                "seconds": round(run.seconds, 3),
                "msg_per_s": round(f.msg_per_s(run)),
                "broker_cpu_s": [round(c, 3) for c in run.broker_cpu_s],
                "cpu_wait_pct": round(f.cpu_wait_pct(run), 1),
                "ack_p50_ms": r(f.ack_p50(run), 3),
                "ack_p99_ms": r(f.ack_p99(run), 3),
                "first_ack_ms": round(run.first_ack_ms, 1),
                "send_rate": r(run.send_rate, 1),
                "leader": run.leader,
                "isr": list(run.isr),
            }
            for run in f.runs
        ],
    }


def report(
    figures: list[Figure], problems: list[str], as_json: bool, out: Callable[[str], None]
) -> None:
    rf1, rf3 = figures
    each = ratios(rf1, rf3)
    if as_json:
        for f in figures:
            out(json.dumps(_figure_json(f)))
        out(
            json.dumps(
                {
                    "workload": "W5 ratio",
                    "system": "mq",
                    "ratio": f"{RF3.label} / {RF1.label} msg/s",
                    "median": round(statistics.median(each), 3),
                    "min": round(min(each), 3),
                    "max": round(max(each), 3),
                    "broker_log_problems": problems,
                }
            )
        )
        return
    s = rf1.settings
    out(
        f"W5 mq, {NODES} brokers + etcd, loopback, flush=interval: {s.messages:,} x {s.size} B "
        f"per run; median (min-max) of {len(rf1.runs)} runs, setups alternating"
    )
    out(
        "{:<14} {:>26} {:>6} {:>10} {:>10} {:>8}".format(
            "setup", "produce msg/s", "MB/s", "broker µs", "client µs", "cpu wait"
        )
        + "  verified"
    )
    for f in figures:
        lo, hi = f.spread(f.msg_per_s)
        spread = f"{f.median(f.msg_per_s):,.0f} ({lo:,.0f}-{hi:,.0f})"
        out(
            f"{f.setup.label:<14} {spread:>26} {f.median(f.mb_per_s):>6.2f} "
            f"{f.median(f.broker_us):>10.1f} {f.median(f.client_us):>10.1f} "
            f"{f.median(f.cpu_wait_pct):>7.0f}%  {'yes' if f.verified else 'NO'}"
        )
    out(
        f"RF=3/RF=1 msg/s: {statistics.median(each):.2f} ({min(each):.2f}-{max(each):.2f}), "
        "the median of each run's ratio"
    )
    if s.rate > 0:
        out(
            f"send-to-ack latency at {s.rate:,} msg/s for {s.seconds:g} s (after {s.warmup:g} s "
            "warm-up), linger_ms=0; ms, median (min-max) of the runs:"
        )
        out("{:<14} {:>20} {:>20} {:>8} {:>10}".format("setup", "p50", "p99", "max", "broker µs"))
        for f in figures:
            cells = []
            for pick in (f.ack_p50, f.ack_p99):
                lo, hi = f.spread(pick)
                cells.append(f"{f.median(pick):.2f} ({lo:.2f}-{hi:.2f})")
            out(
                f"{f.setup.label:<14} {cells[0]:>20} {cells[1]:>20} "
                f"{f.median(f.ack_max):>8.1f} {f.median(f.latency_broker_us):>10.1f}"
            )
    for f in figures:
        lo, hi = f.spread(lambda run: run.first_ack_ms)
        first = f.median(lambda run: run.first_ack_ms)
        out(f"{f.setup.label}: first ack on a new topic {first:.0f} ms ({lo:.0f}-{hi:.0f})")
    out(
        "broker µs: CPU of all brokers per message (throughput phase; latency phase incl. "
        "warm-up); cpu wait: share of the time some runnable task waited for a CPU"
    )
    for f in figures:
        shrunk = [run.isr for run in f.runs if len(run.isr) != f.setup.replication_factor]
        if shrunk:
            out(f"{f.setup.label}: ISR not full after a run: {shrunk}")
        for run in f.runs:
            if run.problem:
                out(f"{f.setup.label}: problem: {run.problem}")
    out(f"broker log warnings/errors: {len(problems)}")
    for line in problems[:LOG_LINES_SHOWN]:
        out(f"  {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000, help="per run and setup")
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--rate", type=int, default=5_000, help="ack latency phase's msg/s (0: skip it)"
    )
    parser.add_argument("--latency-seconds", type=float, default=2.0, help="measured duration")
    parser.add_argument("--warmup", type=float, default=0.5, help="latency warm-up seconds")
    parser.add_argument(
        "--data-dir", type=Path, help="an empty directory: keep the cluster and its logs there"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.size < 1 or args.runs < 1 or args.rate < 0:
        parser.error("--messages and --runs must be positive, --size at least 1, --rate >= 0")
    if args.rate and (args.latency_seconds <= 0 or args.warmup < 0):
        parser.error("--latency-seconds must be positive and --warmup not negative")
    if args.data_dir is not None and args.data_dir.exists() and any(args.data_dir.iterdir()):
        parser.error(f"--data-dir {args.data_dir} is not empty")
    settings = Settings(args.messages, args.size, args.rate, args.latency_seconds, args.warmup)
    figures, problems = measure(settings, args.runs, args.data_dir)
    report(figures, problems, args.json, print)
    return 0 if all(f.verified for f in figures) else 1


if __name__ == "__main__":
    sys.exit(main())
