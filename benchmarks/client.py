"""Client benchmark: W1 (produce) and W3 (consume) against a real broker process.

From ``BENCHMARKS.md``, measured with mq's own asyncio client on uvloop:

* **W1**: one producer sends N records of S bytes (default 200,000 x 100 B)
  to a topic with one partition, ``acks=1``, the broker's default
  durability (``flush=interval``); the clock stops when every record is
  acknowledged. Verified: every record's future holds an offset, and the
  offsets are exactly 0..N-1. Measured twice: record by record with
  ``send()`` and the producer's defaults (16 KiB batches), and as "W1
  produce send_many", the values handed to ``send_many`` 10,000 at a time
  with 256 KiB batches (a new topic each).
* **W3**: one consumer reads those records from offset 0; every payload and
  every offset is checked against what was sent.

Besides msg/s and MB/s it reports CPU per message: the client's own
(``time.process_time`` of this process, which runs nothing else meanwhile;
W9) and the broker's (user + system time from ``/proc/PID/stat``; W8), and
``cpu wait``, the share of the time in which some runnable task (anyone's)
waited for a CPU (Linux PSI): high on a busy shared machine. Each figure is
the median of ``--runs`` runs; each run uses a new topic on one broker
process (:class:`benchmarks.common.Broker`). Usage::

    python -m benchmarks.client [--messages N] [--size BYTES] [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import uvloop

from benchmarks.common import Broker, cpu_pressure_seconds
from mq import Admin, Consumer, Producer, RecordFuture, TopicPartition

MANY = 10_000
"""Values per ``send_many`` call in W1's second form."""
MANY_BATCH_BYTES = 256 * 1024
"""The producer's ``batch_size`` in W1's second form (the default is 16 KiB)."""


@dataclass
class Run:
    seconds: float
    client_cpu_s: float
    broker_cpu_s: float
    cpu_wait_s: float
    """Time in which some runnable task (anyone's) waited for a CPU: a noisy machine."""
    verified: bool


@dataclass
class Figure:
    workload: str
    messages: int
    size: int
    runs: list[Run] = field(default_factory=list)

    def median(self, pick: Callable[[Run], float]) -> float:
        return statistics.median(pick(r) for r in self.runs)

    @property
    def seconds(self) -> float:
        return self.median(lambda r: r.seconds)

    @property
    def msg_per_s(self) -> float:
        return self.median(lambda r: self.messages / r.seconds)

    @property
    def mb_per_s(self) -> float:
        return self.median(lambda r: self.messages * self.size / r.seconds / 1e6)

    @property
    def client_us(self) -> float:
        return self.median(lambda r: r.client_cpu_s / self.messages * 1e6)

    @property
    def broker_us(self) -> float:
        return self.median(lambda r: r.broker_cpu_s / self.messages * 1e6)

    @property
    def cpu_wait_pct(self) -> float:
        return self.median(lambda r: r.cpu_wait_s / r.seconds * 100)


def payloads(messages: int, size: int) -> list[bytes]:
    """Distinct payloads of ``size`` bytes: the index, then filler."""
    filler = os.urandom(size)
    return [(b"%012d" % i + filler)[:size] for i in range(messages)]


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> tuple[float, float, bool]:
    async with Producer(bootstrap, acks=1) as producer:
        send = producer.send
        futures: list[RecordFuture] = []
        add = futures.append
        cpu, start = time.process_time(), time.perf_counter()
        for value in values:
            add(await send(topic, value))
        await producer.flush()
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        offsets = [f.result().offset for f in futures]  # raises if any record failed
    return seconds, cpu, offsets == list(range(len(values)))


async def produce_many(
    bootstrap: str, topic: str, values: list[bytes]
) -> tuple[float, float, bool]:
    """W1 with ``send_many``: slices of :data:`MANY` values, batches of 256 KiB."""
    async with Producer(bootstrap, acks=1, batch_size=MANY_BATCH_BYTES) as producer:
        sent = []
        cpu, start = time.process_time(), time.perf_counter()
        for at in range(0, len(values), MANY):
            sent.append(await producer.send_many(topic, values[at : at + MANY]))
        await producer.flush()
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        offsets = [m.offset for records in sent for m in await records]
    return seconds, cpu, offsets == list(range(len(values)))


async def consume(bootstrap: str, topic: str, values: list[bytes]) -> tuple[float, float, bool]:
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        expected, total, ok = 0, len(values), True
        cpu, start = time.process_time(), time.perf_counter()
        deadline = time.monotonic() + 300
        while expected < total and time.monotonic() < deadline:
            got = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            for record in got.get(tp, ()):
                if record.offset != expected or record.value != values[expected]:
                    ok = False
                expected += 1
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return seconds, cpu, ok and expected == total


async def one_run(
    broker: Broker, run: int, values: list[bytes], w1: Figure, w1_many: Figure, w3: Figure
) -> None:
    topic = f"bench-{run}"
    async with Admin(broker.bootstrap) as admin:
        await admin.create_topic(topic, partitions=1)
        await admin.create_topic(f"{topic}-many", partitions=1)
    for figure, workload, into in (
        (w1, produce, topic),
        (w1_many, produce_many, f"{topic}-many"),
        (w3, consume, topic),
    ):
        before, waited = broker.cpu_seconds(), cpu_pressure_seconds()
        seconds, cpu, verified = await workload(broker.bootstrap, into, values)
        broker_cpu, waited = broker.cpu_seconds() - before, cpu_pressure_seconds() - waited
        figure.runs.append(Run(seconds, cpu, broker_cpu, waited, verified))


def measure(messages: int, size: int, runs: int) -> list[Figure]:
    values = payloads(messages, size)
    w1 = Figure("W1 produce", messages, size)
    w1_many = Figure("W1 produce send_many", messages, size)
    w3 = Figure("W3 consume", messages, size)
    with tempfile.TemporaryDirectory(prefix="mq-bench-") as data_dir:
        broker = Broker(Path(data_dir))
        try:
            for run in range(runs):
                uvloop.run(one_run(broker, run, values, w1, w1_many, w3))
        finally:
            broker.stop()
    return [w1, w1_many, w3]


def report(figures: list[Figure], as_json: bool, out: Callable[[str], None]) -> None:
    if as_json:
        for f in figures:
            out(
                json.dumps(
                    {
                        "workload": f.workload,
                        "system": "mq",
                        "durability": "flush=interval, acks=1"
                        + (", send_many, batch_size=256 KiB" if "send_many" in f.workload else ""),
                        "messages": f.messages,
                        "bytes": f.messages * f.size,
                        "seconds": round(f.seconds, 3),
                        "msg_per_s": round(f.msg_per_s),
                        "mb_per_s": round(f.mb_per_s, 2),
                        "client_cpu_us_per_msg": round(f.client_us, 2),
                        "broker_cpu_us_per_msg": round(f.broker_us, 2),
                        "cpu_wait_pct": round(f.cpu_wait_pct, 1),
                        "verified": all(r.verified for r in f.runs),
                        "runs": [round(r.seconds, 3) for r in f.runs],
                    }
                )
            )
        return
    out(f"mq, flush=interval, acks=1, loopback; median of {len(figures[0].runs)} runs")
    head = ("workload", "messages", "size", "seconds", "msg/s", "MB/s", "client µs", "broker µs")
    columns = "{:<20} {:>9} {:>5} {:>8} {:>9} {:>7} {:>10} {:>10} {:>8}  verified"
    out(columns.format(*head, "cpu wait"))
    for f in figures:
        verified = "yes" if all(r.verified for r in f.runs) else "NO"
        out(
            f"{f.workload:<20} {f.messages:>9,} {f.size:>5} {f.seconds:>8.2f} "
            f"{f.msg_per_s:>9,.0f} {f.mb_per_s:>7.1f} {f.client_us:>10.2f} "
            f"{f.broker_us:>10.2f} {f.cpu_wait_pct:>7.0f}%  {verified}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="20,000 messages, one run")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.runs = 20_000, 1
    figures = measure(args.messages, args.size, args.runs)
    report(figures, args.json, print)
    return 0 if all(r.verified for f in figures for r in f.runs) else 1


if __name__ == "__main__":
    sys.exit(main())
