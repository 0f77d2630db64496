"""Scaling curves: how mq's cost grows with partitions, record size and consumers.

Each curve has its own broker process (:class:`benchmarks.common.Broker`,
``flush=interval``); mq's asyncio client on uvloop, ``acks=1``, records of 100 B:

* **partitions** (1, 10, 100, 1,000): one producer sends N records round-robin
  with an explicit ``partition=`` (record ``i`` to partition ``i % P``: ``send``'s
  slow path, not W1's keyless one); one consumer assigned every partition reads them.
* **size** (100 B, 1 KiB, 64 KiB): one partition, keyless sends as in W1/W2,
  ``batch_size`` max(16 KiB, 4 records) so that a 64 KiB record is not a batch alone.
* **consumers** (1, 4, 16): 16 partitions, written once, read by C processes
  (``multiprocessing`` spawn; partition ``k`` to consumer ``k % C``), timed from a
  common start barrier to the last one done (``time.monotonic``: one clock per machine).

Verified: record ``i`` is acknowledged at offset ``i // P`` of partition ``i % P``;
consumers get every record once, in offset order, each payload (its index, then
filler) intact. Per point and phase: msg/s, MB/s, CPU per message of the broker
(``/proc``) and of the clients (summed over consumer processes), ``cpu wait``
(Linux PSI); medians of ``--runs`` runs, each on a new topic (deleted after it)::

    python -m benchmarks.scaling [--curve partitions,size,consumers] [--runs N]
        [--quick] [--json] [--chart DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any, Final

import uvloop

from benchmarks.common import Broker, cpu_pressure_seconds
from mq import Admin, Consumer, Producer, RecordFuture, TopicPartition

CURVES: Final = ("partitions", "size", "consumers")
PHASES: Final = ("produce", "consume")
SMALL: Final = 100
CONSUMER_PARTITIONS: Final = 16
DEFAULT_BATCH: Final = 16_384
READY_TIMEOUT_S: Final = 60.0
DEADLINE_S: Final = 300.0


@dataclass(frozen=True)
class Plan:
    partitions: tuple[int, ...]
    partition_messages: int
    sizes: tuple[tuple[int, int], ...]
    """(record bytes, messages) per point."""
    consumers: tuple[int, ...]
    consumer_messages: int


SIZES: Final = ((100, 200_000), (1024, 200_000), (65536, 10_000))
"""(record bytes, messages): W1 and W2 sizes, and 655 MB of 64 KiB records."""
FULL: Final = Plan((1, 10, 100, 1000), 200_000, SIZES, (1, 4, 16), 200_000)
QUICK: Final = Plan((1, 10), 2_000, ((100, 2_000), (1024, 2_000)), (1, 4), 2_000)


@dataclass
class Run:
    seconds: float
    client_cpu_s: float
    verified: bool
    problem: str = ""
    end: float = 0.0
    """``time.monotonic()`` when the last record was in (a consumer's)."""
    broker_cpu_s: float = 0.0
    cpu_wait_s: float = 0.0
    """Time in which some runnable task (anyone's) waited for a CPU: a busy machine."""


@dataclass
class Point:
    curve: str
    point: int
    phase: str
    messages: int
    size: int
    settings: dict[str, int]
    runs: list[Run] = field(default_factory=list)

    def median(self, pick: Callable[[Run], float]) -> float:
        return statistics.median(pick(r) for r in self.runs)

    def figure(self) -> dict[str, Any]:
        n, size = self.messages, self.size
        return {
            "curve": self.curve,
            "point": self.point,
            "phase": self.phase,
            "messages": n,
            "size": size,
            **self.settings,
            "seconds": round(self.median(lambda r: r.seconds), 3),
            "msg_per_s": round(self.median(lambda r: n / r.seconds)),
            "mb_per_s": round(self.median(lambda r: n * size / r.seconds / 1e6), 2),
            "broker_cpu_us_per_msg": round(self.median(lambda r: r.broker_cpu_s / n * 1e6), 2),
            "client_cpu_us_per_msg": round(self.median(lambda r: r.client_cpu_s / n * 1e6), 2),
            "cpu_wait_pct": round(self.median(lambda r: r.cpu_wait_s / r.seconds * 100), 1),
            "verified": all(r.verified for r in self.runs),
            "problem": "; ".join(r.problem for r in self.runs if r.problem),
            "runs": [round(r.seconds, 3) for r in self.runs],
        }


def meter(broker: Broker) -> Callable[[Run], Run]:
    """Starts measuring the broker's CPU time and the machine's CPU pressure; call to stop."""
    cpu, waited = broker.cpu_seconds(), cpu_pressure_seconds()

    def stop(run: Run) -> Run:
        run.broker_cpu_s = broker.cpu_seconds() - cpu
        run.cpu_wait_s = cpu_pressure_seconds() - waited
        return run

    return stop


def payload(i: int, size: int, filler: bytes) -> bytes:
    """Record ``i``'s value: its index, then filler, ``size`` bytes."""
    return (b"%012d" % i + filler)[:size]


async def produce(
    broker: Broker, topic: str, values: list[bytes], spread: int, batch_size: int
) -> Run:
    """Send ``values``: record ``i`` to partition ``i % spread`` (keyless if 0), acks=1."""
    futures: list[RecordFuture] = []
    add = futures.append
    async with Producer(broker.bootstrap, acks=1, batch_size=batch_size) as producer:
        await producer.partitions_for(topic)  # metadata before the clock starts
        send, stop = producer.send, meter(broker)
        cpu, start = time.process_time(), time.perf_counter()
        if spread:
            for i, value in enumerate(values):
                add(await send(topic, value, partition=i % spread))
        else:
            for value in values:
                add(await send(topic, value))
        await producer.flush()
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        run = stop(Run(seconds, cpu, True))
    parts = spread or 1
    for i, future in enumerate(futures):
        meta = future.result()  # raises if a send failed
        if (meta.partition, meta.offset) != (i % parts, i // parts):
            run.verified, run.problem = False, f"record {i} at {meta.partition}/{meta.offset}"
            break
    return run


async def consume(
    bootstrap: str, topic: str, expected: dict[int, list[bytes]], ready: Barrier | None = None
) -> Run:
    """Read ``expected`` (partition -> values by offset) from offset 0; check every record.

    With ``ready``, the clock starts once every party has passed it.
    """
    tps = {TopicPartition(topic, k): values for k, values in expected.items()}
    nxt = dict.fromkeys(tps, 0)
    problem, left = "", sum(len(v) for v in expected.values())
    async with Consumer(bootstrap=bootstrap, auto_offset_reset="earliest") as consumer:
        if ready is not None:
            await asyncio.to_thread(ready.wait, READY_TIMEOUT_S)
        cpu, start = time.process_time(), time.perf_counter()
        consumer.assign(tps)  # the fetcher starts now: no prefetching before the clock
        deadline = time.monotonic() + DEADLINE_S
        while left > 0 and time.monotonic() < deadline:
            got = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            for tp, records in got.items():
                want, offset = tps[tp], nxt[tp]
                n = len(want)
                for record in records:
                    if record.offset != offset or offset >= n or record.value != want[offset]:
                        problem = problem or f"{tp.partition}/{record.offset}: not record {offset}"
                    offset += 1
                nxt[tp] = offset
                left -= len(records)
        seconds, cpu, end = time.perf_counter() - start, time.process_time() - cpu, time.monotonic()
    short = [f"{tp.partition}: {nxt[tp]} of {len(v)}" for tp, v in tps.items() if nxt[tp] != len(v)]
    problem = problem or (f"records read per partition: {', '.join(short[:5])}" if short else "")
    return Run(seconds, cpu, not problem, problem, end)


Job = tuple[str, str, bytes, int, list[int]]
"""A consumer process's part: bootstrap, topic, filler, messages, its partitions."""


def _consumer_process(conn: Connection, ready: Barrier, job: Job) -> None:
    """A consumers-curve process: reads its partitions of ``n`` records once all are ready."""
    bootstrap, topic, filler, n, mine = job
    size, parts = len(filler), CONSUMER_PARTITIONS
    expected = {k: [payload(i, size, filler) for i in range(k, n, parts)] for k in mine}
    try:
        conn.send(uvloop.run(consume(bootstrap, topic, expected, ready)))
    except Exception as exc:
        conn.send(Run(math.inf, 0.0, False, f"the consumer of {mine} failed: {exc!r}"))
    finally:
        conn.close()


def consume_in_processes(broker: Broker, topic: str, filler: bytes, messages: int, n: int) -> Run:
    """One run of the consumers curve: ``n`` processes, a common start, aggregate figures."""
    spawn = multiprocessing.get_context("spawn")
    ready = spawn.Barrier(n + 1)
    pipes, children = [], []
    for j in range(n):
        ours, theirs = spawn.Pipe(duplex=False)
        job = (broker.bootstrap, topic, filler, messages, list(range(j, CONSUMER_PARTITIONS, n)))
        args = (theirs, ready, job)
        children.append(spawn.Process(target=_consumer_process, args=args, daemon=True))
        children[-1].start()
        theirs.close()
        pipes.append(ours)
    try:
        try:
            ready.wait(READY_TIMEOUT_S)
        except threading.BrokenBarrierError:
            said = [p.recv().problem for p in pipes if p.poll(1)]
            raise RuntimeError(f"the consumers were not ready: {said or 'no word'}") from None
        stop, start = meter(broker), time.monotonic()
        runs: list[Run] = []
        for pipe in pipes:
            if not pipe.poll(DEADLINE_S + 30):
                raise RuntimeError("a consumer process did not report")
            runs.append(pipe.recv())
        problem = "; ".join(r.problem for r in runs if r.problem)
        seconds, cpu = max(r.end for r in runs) - start, sum(r.client_cpu_s for r in runs)
        return stop(Run(seconds, cpu, not problem, problem))
    finally:
        for child in children:
            child.join(15)
            if child.is_alive():
                child.kill()
                child.join(15)
        for pipe in pipes:
            pipe.close()


async def produce_consume(
    broker: Broker, topic: str, values: list[bytes], spread: int, batch_size: int
) -> tuple[Run, Run]:
    """One run of a partitions or size point: a new topic, produce, consume, delete it."""
    parts = spread or 1
    async with Admin(broker.bootstrap) as admin:
        await admin.create_topic(topic, partitions=parts)
        produced = await produce(broker, topic, values, spread, batch_size)
        expected = {k: values[k::parts] for k in range(parts)}
        stop = meter(broker)
        consumed = stop(await consume(broker.bootstrap, topic, expected))
        await admin.delete_topic(topic)
    return produced, consumed


def consumers_curve(broker: Broker, plan: Plan, runs: int) -> list[Point]:
    """One topic of 16 partitions, written once, then read by 1, 4, 16 processes per run."""
    topic, messages, parts = "consumers", plan.consumer_messages, CONSUMER_PARTITIONS
    filler = os.urandom(SMALL)
    values = [payload(i, SMALL, filler) for i in range(messages)]

    async def fill() -> Run:
        async with Admin(broker.bootstrap) as admin:
            await admin.create_topic(topic, partitions=parts)
        return await produce(broker, topic, values, parts, DEFAULT_BATCH)

    filled = uvloop.run(fill())
    points = []
    for n in plan.consumers:
        point = Point("consumers", n, "consume", messages, SMALL, {"partitions": parts})
        for _ in range(runs):
            try:
                run = consume_in_processes(broker, topic, filler, messages, n)
            except Exception as exc:
                run = Run(math.inf, 0.0, False, repr(exc))
            if not filled.verified:
                run.verified, run.problem = False, f"filling the topic: {filled.problem}"
            point.runs.append(run)
        points.append(point)
    return points


def curve_points(curve: str, plan: Plan, runs: int) -> list[Point]:
    """Every point of one curve (and phase), against a broker process of its own."""
    with tempfile.TemporaryDirectory(prefix="mq-bench-scaling-") as data_dir:
        broker = Broker(Path(data_dir))
        try:
            if curve == "consumers":
                return consumers_curve(broker, plan, runs)
            # (point, record size, messages, partitions to spread over: 0 = keyless)
            cases = [(p, SMALL, plan.partition_messages, p) for p in plan.partitions]
            if curve == "size":
                cases = [(size, size, n, 0) for size, n in plan.sizes]
            points: list[Point] = []
            for point, size, messages, spread in cases:
                filler = os.urandom(size)
                values = [payload(i, size, filler) for i in range(messages)]
                batch = max(DEFAULT_BATCH, 4 * size)
                settings = {"partitions": spread or 1, "batch_size": batch}
                pair = [Point(curve, point, ph, messages, size, settings) for ph in PHASES]
                for run in range(runs):
                    got = uvloop.run(
                        produce_consume(broker, f"{curve}-{point}-{run}", values, spread, batch)
                    )
                    for p, r in zip(pair, got, strict=True):
                        p.runs.append(r)
                points += pair
            return points
        finally:
            broker.stop()


def label(curve: str, point: int) -> str:
    if curve == "size":
        return f"{point // 1024} KiB" if point >= 1024 else f"{point} B"
    return f"{point:,} {'part.' if curve == 'partitions' else 'cons.'}"


COLUMNS: Final = (
    ("seconds", "seconds", ".2f"),
    ("msg_per_s", "msg/s", ","),
    ("mb_per_s", "MB/s", ".1f"),
    ("client_cpu_us_per_msg", "client µs", ".2f"),
    ("broker_cpu_us_per_msg", "broker µs", ".2f"),
    ("cpu_wait_pct", "cpu wait%", ".0f"),
)


def table(figures: list[dict[str, Any]], runs: int) -> list[str]:
    """The figures as a text table (CPU in µs per message)."""
    head = "".join(f" {name:>10}" for _, name, _ in COLUMNS)
    lines = [f"mq, flush=interval, acks=1, loopback; median of {runs} runs"]
    lines.append(f"{'curve':<10} {'point':>11} {'phase':<7} {'messages':>9}{head}  verified")
    for f in figures:
        cells = "".join(f" {format(f[key], spec):>10}" for key, _, spec in COLUMNS)
        ok = "yes" if f["verified"] else f"NO: {f['problem']}"
        point = label(f["curve"], f["point"])
        lines.append(
            f"{f['curve']:<10} {point:>11} {f['phase']:<7} {f['messages']:>9,}{cells}  {ok}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--curve", default=",".join(CURVES), help="comma-separated curves")
    parser.add_argument("--runs", type=int, default=3, help="runs per point (medians)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, small points, 1 run")
    parser.add_argument("--json", action="store_true", help="one JSON object per point and phase")
    parser.add_argument("--chart", type=Path, help="write one PNG per curve into this directory")
    args = parser.parse_args(argv)
    curves = [c.strip() for c in args.curve.split(",") if c.strip()]
    if unknown := set(curves) - set(CURVES):
        parser.error(f"no curve {sorted(unknown)}; the curves are {', '.join(CURVES)}")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    plan, runs = (QUICK, 1) if args.quick else (FULL, args.runs)
    figures: list[dict[str, Any]] = []
    for curve in curves:
        got = [p.figure() for p in curve_points(curve, plan, runs)]
        figures += got
        if args.json:
            for figure in got:
                print(json.dumps(figure), flush=True)
    if not args.json:
        print("\n".join(table(figures, runs)))
    if args.chart is not None:
        from benchmarks.charts import scaling_chart

        args.chart.mkdir(parents=True, exist_ok=True)
        for curve in curves:
            scaling_chart(figures, curve, args.chart / f"scaling-{curve}.png")
    return 0 if all(f["verified"] for f in figures) else 1


if __name__ == "__main__":
    sys.exit(main())
