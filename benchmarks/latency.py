"""Latency benchmark: W4, end-to-end latency at a fixed rate against a real broker process.

From ``BENCHMARKS.md``: a producer sends at a fixed rate (default 5,000 msg/s
for 5 s, plus a 1 s warm-up whose messages are left out of the figures), each
payload stamped with ``time.monotonic_ns()`` when it is sent; a consumer
subtracts that stamp from ``time.monotonic_ns()`` when ``getmany`` hands it the
record. ``CLOCK_MONOTONIC`` is one clock for the whole machine on Linux, so
the two processes can compare their readings.

* **Producer** (this process): :class:`mq.Producer`, ``acks=1`` (``--acks
  all`` for all), ``linger_ms=0`` by default (``--linger-ms``), the broker's
  default durability (``flush=interval``), keyless records (``send``'s fast
  path) to a topic of one partition. Message ``i`` is due at ``start + i /
  rate`` (absolute deadlines: no drift). uvloop's timers tick in whole
  milliseconds (a shorter sleep is a busy poll), so the producer sleeps at
  least 1 ms and then sends every message that is due: at 5,000 msg/s they
  leave in bursts of about 5 (one produce request each), each stamped with
  its own send time. ``late
  p99`` is how far sends trailed their due times (not part of the latency).
  Every 10th send's acknowledgement is timed too (``ack p50/p99``: the
  produce round trip, send() to ack, for comparison).
* **Consumer** (a separate process, ``multiprocessing`` spawn, so that it
  does not share an event loop or a GIL with the producer):
  :class:`mq.Consumer` assigned partition 0, positioned at the end and
  started *before* the first send, client-default fetch settings
  (``fetch_max_wait_ms=500``, ``fetch_min_bytes=1``; ``--fetch-max-wait-ms``
  changes the first).
* **Verified**: the consumer gets every message exactly once and in order
  (sequence number ``i`` at offset ``i``, no extra record after the last, size
  intact), and the producer's acknowledged offsets are exactly ``0..N-1``.

Per run it reports latency p50 / p99 / p99.9 / max (ms), the achieved send
rate over the measured window, and CPU per message of the producer, the
consumer (``time.process_time`` of each process) and the broker (W8,
``/proc/PID/stat``), each from the first send on and divided by every message
including the warm-up, and ``cpu wait``: the share of the run in which some
runnable task (anyone's) waited for a CPU (Linux PSI), to tell a run on a
busy shared machine. The last row is each figure's median over ``--runs``
runs (default 3), each on a new topic of one broker process. Usage::

    python -m benchmarks.latency [--rate MSG_PER_S] [--seconds S] [--warmup S]
        [--size BYTES] [--acks {1,all}] [--linger-ms MS] [--fetch-max-wait-ms MS]
        [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import os
import statistics
import struct
import sys
import tempfile
import time
from array import array
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Literal

import uvloop

from benchmarks.common import Broker, cpu_pressure_seconds, percentile
from mq import Admin, Consumer, Producer, RecordFuture, TopicPartition

STAMP = struct.Struct("<QQQ")
"""The head of every payload: sequence number, due time, send time (monotonic ns)."""
ACK_SAMPLE_EVERY = 10
MIN_SLEEP_NS = 1_000_000
"""uvloop rounds timers to whole ms: a shorter sleep would be a busy poll."""
READY_TIMEOUT_S = 30.0
DRAIN_TIMEOUT_S = 60.0
"""How long the consumer may take, after the last send is due, to get everything."""
EXTRA_POLL_MS = 100
"""After the last expected record, how long the consumer looks for an unexpected one."""


@dataclass(frozen=True)
class Settings:
    rate: int
    seconds: float
    warmup: float
    size: int
    acks: Literal["all", 1]
    linger_ms: float
    fetch_max_wait_ms: int

    @property
    def total(self) -> int:
        """Messages sent, warm-up included."""
        return round(self.rate * (self.warmup + self.seconds))

    @property
    def warmup_count(self) -> int:
        return round(self.rate * self.warmup)

    def due_ns(self, start_ns: int, i: int) -> int:
        return start_ns + i * 1_000_000_000 // self.rate


@dataclass
class Consumed:
    """What the consumer process reports back."""

    received: int
    verified: bool
    latency_ns: bytes
    """array('q') of end-to-end latencies of the measured messages, in arrival order."""
    late_ns: bytes
    """array('q') of send time minus due time of the measured messages."""
    cpu_s: float
    problem: str = ""


@dataclass
class Produced:
    sent: int
    first_measured_ns: int
    last_ns: int
    ack_ns: list[int]
    cpu_s: float
    verified: bool
    problem: str = ""


@dataclass
class Run:
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    send_rate: float
    late_p99_ms: float
    ack_p50_ms: float
    ack_p99_ms: float
    producer_us: float
    consumer_us: float
    broker_us: float
    cpu_wait_pct: float
    """Share of the run's time in which some runnable task waited for a CPU."""
    verified: bool
    problem: str


# -- the consumer process ----------------------------------------------------------------------


async def _consume(conn: Connection, bootstrap: str, topic: str, settings: Settings) -> Consumed:
    tp = TopicPartition(topic, 0)
    total, measured_from, size = settings.total, settings.warmup_count, settings.size
    latency, late = array("q"), array("q")
    expected, ok, problem = 0, True, ""
    async with Consumer(
        bootstrap=bootstrap,
        client_id="mq-bench-latency",
        auto_offset_reset="latest",
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
    ) as consumer:
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        base = await consumer.position(tp)
        conn.send(base)  # ready: the producer may start
        cpu = time.process_time()
        unpack = STAMP.unpack_from
        clock = time.monotonic_ns
        run_for = settings.warmup + settings.seconds + DRAIN_TIMEOUT_S
        deadline = time.monotonic() + run_for
        while expected < total and time.monotonic() < deadline:
            got = await consumer.getmany(tp, timeout_ms=1000)
            now = clock()
            for record in got.get(tp, ()):
                value = record.value or b""
                seq, due, sent = unpack(value)
                if seq != expected or record.offset != base + expected or len(value) != size:
                    if ok:
                        problem = (
                            f"record {expected} (offset {base + expected}): got sequence {seq} "
                            f"at offset {record.offset}, {len(value)} bytes"
                        )
                    ok = False
                if seq >= measured_from:
                    latency.append(now - sent)
                    late.append(sent - due)
                expected += 1
        cpu = time.process_time() - cpu
        if expected < total:
            ok, problem = False, problem or f"only {expected} of {total} records arrived"
        extra = await consumer.getmany(tp, timeout_ms=EXTRA_POLL_MS)
        if extra.get(tp):
            ok, problem = False, problem or f"{len(extra[tp])} records more than were sent"
    return Consumed(expected, ok, latency.tobytes(), late.tobytes(), cpu, problem)


def _consumer_process(conn: Connection, bootstrap: str, topic: str, settings: Settings) -> None:
    """The consumer's process: sends its start offset when ready, then a :class:`Consumed`."""
    try:
        conn.send(uvloop.run(_consume(conn, bootstrap, topic, settings)))
    except Exception as exc:
        conn.send(Consumed(0, False, b"", b"", 0.0, f"the consumer failed: {exc!r}"))
    finally:
        conn.close()


# -- the producer ------------------------------------------------------------------------------


def _receive(conn: Connection, timeout_s: float, what: str) -> object:
    """The consumer process's next message (a failed consumer's :class:`Consumed` raises)."""
    if not conn.poll(timeout_s):
        raise RuntimeError(f"the consumer process did not {what} within {timeout_s:.0f} s")
    got = conn.recv()
    if isinstance(got, Consumed) and not got.received and got.problem:
        raise RuntimeError(got.problem)
    return got


async def _produce(
    conn: Connection, bootstrap: str, topic: str, settings: Settings, meter: Meter
) -> Produced:
    total, measured_from = settings.total, settings.warmup_count
    filler = os.urandom(settings.size - STAMP.size)
    pack = STAMP.pack
    clock = time.monotonic_ns
    acks: list[int] = []

    def acked(sent_ns: int, _: RecordFuture) -> None:
        acks.append(clock() - sent_ns)

    futures: list[RecordFuture] = []
    async with Producer(
        bootstrap, client_id="mq-bench-latency", acks=settings.acks, linger_ms=settings.linger_ms
    ) as producer:
        await producer.partitions_for(topic)  # metadata before the clock starts
        base = await asyncio.to_thread(_receive, conn, READY_TIMEOUT_S, "get ready")
        if base != 0:
            raise RuntimeError(f"the consumer starts at offset {base} of a new topic, not 0")
        send = producer.send
        meter.start()
        cpu = time.process_time()
        start = first_measured = clock()
        sent = start
        for i in range(total):
            due = settings.due_ns(start, i)
            sent = clock()
            if sent < due:
                await asyncio.sleep(max(due - sent, MIN_SLEEP_NS) / 1e9)
                sent = clock()
            if i == measured_from:
                first_measured = sent
            future = await send(topic, pack(i, due, sent) + filler)
            futures.append(future)
            if i % ACK_SAMPLE_EVERY == 0 and i >= measured_from:
                future.add_done_callback(partial(acked, sent))
        last = sent
        await producer.flush()
        cpu = time.process_time() - cpu
    problem = ""
    try:
        offsets = [f.result().offset for f in futures]
        verified = offsets == list(range(total))
        if not verified:
            problem = "the acknowledged offsets are not 0..N-1"
    except Exception as exc:
        verified, problem = False, f"a send failed: {exc!r}"
    return Produced(total, first_measured, last, acks, cpu, verified, problem)


async def _create_topic(bootstrap: str, topic: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic, partitions=1)


class Meter:
    """The broker's CPU time, and the machine's CPU pressure, from the first send on."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._start = (0.0, 0.0, 0.0)
        self.broker_cpu_s = math.nan
        self.waited = math.nan
        """Share of the time in which some runnable task waited for a CPU."""

    def start(self) -> None:
        self._start = (self.broker.cpu_seconds(), cpu_pressure_seconds(), time.monotonic())

    def stop(self) -> None:
        cpu, waited, start = self._start
        self.broker_cpu_s = self.broker.cpu_seconds() - cpu
        self.waited = (cpu_pressure_seconds() - waited) / (time.monotonic() - start)


def one_run(broker: Broker, topic: str, settings: Settings, *, create: bool = True) -> Run:
    """W4 once: a new topic (unless ``create`` is False: the caller made it, with one
    partition, empty), a consumer process, the producer here; the run's figures."""
    if create:
        uvloop.run(_create_topic(broker.bootstrap, topic))
    spawn = multiprocessing.get_context("spawn")
    ours, theirs = spawn.Pipe()
    child = spawn.Process(
        target=_consumer_process,
        args=(theirs, broker.bootstrap, topic, settings),
        name="mq-bench-consumer",
        daemon=True,
    )
    child.start()
    theirs.close()
    meter = Meter(broker)
    try:
        produced = uvloop.run(_produce(ours, broker.bootstrap, topic, settings, meter))
        consumed = _receive(ours, DRAIN_TIMEOUT_S + 10, "report")
        meter.stop()
        child.join(15)
    finally:
        if child.is_alive():
            child.kill()
            child.join(15)
        ours.close()
    assert isinstance(consumed, Consumed)
    return _figures(settings, produced, consumed, meter.broker_cpu_s, meter.waited)


def _figures(
    settings: Settings, produced: Produced, consumed: Consumed, broker_cpu: float, waited: float
) -> Run:
    latency = sorted(array("q", consumed.latency_ns))
    late = sorted(array("q", consumed.late_ns))
    acks = sorted(produced.ack_ns)
    measured = produced.sent - settings.warmup_count
    window_ns = produced.last_ns - produced.first_measured_ns
    ms = 1e-6

    def us_per_msg(cpu_s: float) -> float:
        return cpu_s / produced.sent * 1e6

    return Run(
        p50_ms=percentile(latency, 0.5) * ms,
        p99_ms=percentile(latency, 0.99) * ms,
        p999_ms=percentile(latency, 0.999) * ms,
        max_ms=(latency[-1] if latency else float("nan")) * ms,
        send_rate=(measured - 1) / window_ns * 1e9 if window_ns > 0 else float("nan"),
        late_p99_ms=percentile(late, 0.99) * ms,
        ack_p50_ms=percentile(acks, 0.5) * ms,
        ack_p99_ms=percentile(acks, 0.99) * ms,
        producer_us=us_per_msg(produced.cpu_s),
        consumer_us=us_per_msg(consumed.cpu_s),
        broker_us=us_per_msg(broker_cpu),
        cpu_wait_pct=waited * 100,
        verified=produced.verified and consumed.verified and len(latency) == measured,
        problem="; ".join(p for p in (produced.problem, consumed.problem) if p),
    )


def measure(settings: Settings, runs: int) -> list[Run]:
    with tempfile.TemporaryDirectory(prefix="mq-bench-") as data_dir:
        broker = Broker(Path(data_dir))
        try:
            return [one_run(broker, f"latency-{run}", settings) for run in range(runs)]
        finally:
            broker.stop()


def median_run(runs: list[Run]) -> Run:
    """Each figure's median over the runs (so not necessarily one run's figures)."""

    def med(pick: Callable[[Run], float]) -> float:
        return statistics.median(pick(r) for r in runs)

    return Run(
        p50_ms=med(lambda r: r.p50_ms),
        p99_ms=med(lambda r: r.p99_ms),
        p999_ms=med(lambda r: r.p999_ms),
        max_ms=med(lambda r: r.max_ms),
        send_rate=med(lambda r: r.send_rate),
        late_p99_ms=med(lambda r: r.late_p99_ms),
        ack_p50_ms=med(lambda r: r.ack_p50_ms),
        ack_p99_ms=med(lambda r: r.ack_p99_ms),
        producer_us=med(lambda r: r.producer_us),
        consumer_us=med(lambda r: r.consumer_us),
        broker_us=med(lambda r: r.broker_us),
        cpu_wait_pct=med(lambda r: r.cpu_wait_pct),
        verified=all(r.verified for r in runs),
        problem="; ".join(r.problem for r in runs if r.problem),
    )


def _rounded(run: Run) -> dict[str, object]:
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(run).items()}


def _durability(settings: Settings) -> str:
    return f"flush=interval, acks={settings.acks}"


def report(settings: Settings, runs: list[Run], as_json: bool, out: Callable[[str], None]) -> None:
    median = median_run(runs)
    if as_json:
        out(
            json.dumps(
                {
                    "workload": "W4 latency",
                    "system": "mq",
                    "durability": _durability(settings),
                    "rate": settings.rate,
                    "seconds": settings.seconds,
                    "warmup_seconds": settings.warmup,
                    "size": settings.size,
                    "linger_ms": settings.linger_ms,
                    "fetch_max_wait_ms": settings.fetch_max_wait_ms,
                    "messages": settings.total - settings.warmup_count,
                    **_rounded(median),
                    "runs": [_rounded(r) for r in runs],
                }
            )
        )
        return
    out(
        f"W4 mq, {_durability(settings)}, linger_ms={settings.linger_ms:g}, "
        f"fetch_max_wait_ms={settings.fetch_max_wait_ms}, loopback: {settings.rate:,} msg/s "
        f"of {settings.size} B for {settings.seconds:g} s after {settings.warmup:g} s warm-up"
    )
    head = ("run", "sent/s", "p50", "p99", "p99.9", "max", "late p99", "ack p50", "ack p99")
    cpu = ("prod µs", "cons µs", "broker µs", "cpu wait")
    out(
        "{:<6} {:>7} {:>6} {:>6} {:>6} {:>6} {:>8} {:>7} {:>7}".format(*head)
        + " {:>8} {:>8} {:>9} {:>8}  verified".format(*cpu)
    )
    rows = [(str(i + 1), r) for i, r in enumerate(runs)]
    for name, r in [*rows, ("median", median)] if len(runs) > 1 else rows:
        out(
            f"{name:<6} {r.send_rate:>7,.0f} {r.p50_ms:>6.2f} {r.p99_ms:>6.2f} "
            f"{r.p999_ms:>6.2f} {r.max_ms:>6.2f} {r.late_p99_ms:>8.2f} {r.ack_p50_ms:>7.2f} "
            f"{r.ack_p99_ms:>7.2f} {r.producer_us:>8.1f} {r.consumer_us:>8.1f} "
            f"{r.broker_us:>9.1f} {r.cpu_wait_pct:>7.0f}%  {'yes' if r.verified else 'NO'}"
        )
    out(
        "latencies in ms; CPU in µs per message; cpu wait: share of the run in which some "
        "runnable task (anyone's) waited for a CPU"
    )
    if median.problem:
        out(f"problems: {median.problem}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=5_000, help="messages per second")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured duration")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds sent first, not counted")
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message")
    parser.add_argument("--acks", choices=("1", "all"), default="1")
    parser.add_argument("--linger-ms", type=float, default=0.0, help="the producer's linger_ms")
    parser.add_argument(
        "--fetch-max-wait-ms", type=int, default=500, help="the consumer's fetch_max_wait_ms"
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="one JSON object: medians and runs")
    args = parser.parse_args(argv)
    if args.rate < 1 or args.seconds <= 0 or args.warmup < 0 or args.runs < 1:
        parser.error("--rate, --seconds and --runs must be positive, --warmup not negative")
    if args.size < STAMP.size:
        parser.error(f"--size must be at least {STAMP.size} (the stamp)")
    settings = Settings(
        rate=args.rate,
        seconds=args.seconds,
        warmup=args.warmup,
        size=args.size,
        acks="all" if args.acks == "all" else 1,
        linger_ms=args.linger_ms,
        fetch_max_wait_ms=args.fetch_max_wait_ms,
    )
    runs = measure(settings, args.runs)
    report(settings, runs, args.json, print)
    return 0 if all(r.verified for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
