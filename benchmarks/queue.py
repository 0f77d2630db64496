"""Queue benchmark W6: 4 consumers receive + ack N messages from one queue.

From ``BENCHMARKS.md``: a queue (a topic with 4 partitions read by its share
group) holds N messages of S bytes (default 200,000 x 100 B), sent before the
clock starts. ``--consumers`` QueueClients (default 4, each with its own
connections, all on this process's event loop) receive batches of
``--batch`` messages (long poll, visibility timeout 60 s) and ack each batch
before the next receive; the clock stops when every message is acked.
Verified: every payload was received and acked exactly once, and the broker's
queue attributes say N acked, none visible or in flight.

Reports receive+ack msg/s, the broker's CPU per message (W8-style, from
``/proc``) and the consumers' (this process), the median of ``--runs`` runs,
each on a new queue of one broker process. Usage::

    python -m benchmarks.queue [--messages N] [--size BYTES] [--batch N] [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import uvloop

from benchmarks.client import payloads
from benchmarks.common import Broker, cpu_pressure_seconds
from mq import Producer, QueueClient, QueueMessage

PARTITIONS = 4


@dataclass
class Run:
    seconds: float
    client_cpu_s: float
    broker_cpu_s: float
    cpu_wait_s: float
    receives: int
    verified: bool
    problem: str


async def fill(bootstrap: str, queue: str, values: list[bytes]) -> None:
    async with QueueClient(bootstrap) as q:
        await q.create_queue(queue, partitions=PARTITIONS, visibility_timeout=60)
    async with Producer(bootstrap, acks="all", linger_ms=5) as producer:
        futures = [await producer.send(queue, value) for value in values]
        await producer.flush()
        for future in futures:
            future.result()


async def consume(
    bootstrap: str, queue: str, total: int, consumers: int, batch: int
) -> tuple[list[bytes], int]:
    seen: list[bytes] = []
    receives = 0
    done = asyncio.Event()

    async def consumer() -> None:
        nonlocal receives
        async with QueueClient(bootstrap) as q:
            while not done.is_set():
                messages: list[QueueMessage] = await q.receive(queue, batch, wait=1)
                if not messages:
                    if len(seen) >= total:
                        done.set()
                    continue
                receives += 1
                await q.ack(*messages)
                seen.extend(m.body or b"" for m in messages)
                if len(seen) >= total:
                    done.set()

    tasks = [asyncio.create_task(consumer()) for _ in range(consumers)]
    try:
        await asyncio.wait_for(done.wait(), timeout=600)
    finally:
        done.set()
        await asyncio.gather(*tasks)
    return seen, receives


async def one_run(broker: Broker, run: int, values: list[bytes], consumers: int, batch: int) -> Run:
    queue = f"w6-{run}"
    await fill(broker.bootstrap, queue, values)
    before, waited = broker.cpu_seconds(), cpu_pressure_seconds()
    cpu, start = time.process_time(), time.perf_counter()
    seen, receives = await consume(broker.bootstrap, queue, len(values), consumers, batch)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    broker_cpu, waited = broker.cpu_seconds() - before, cpu_pressure_seconds() - waited
    problem = ""
    if len(seen) != len(values) or sorted(seen) != sorted(values):
        problem = f"{len(seen)} acked, {len(set(seen))} distinct, {len(values)} sent"
    async with QueueClient(broker.bootstrap) as q:
        attributes = await q.describe_queue(queue)
    if (attributes.acked, attributes.visible, attributes.in_flight) != (len(values), 0, 0):
        problem = problem or f"broker says {attributes}"
    return Run(seconds, cpu, broker_cpu, waited, receives, not problem, problem)


def measure(messages: int, size: int, consumers: int, batch: int, runs: int) -> list[Run]:
    values = payloads(messages, size)
    out: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="mq-bench-") as data_dir:
        broker = Broker(Path(data_dir))
        try:
            for run in range(runs):
                out.append(uvloop.run(one_run(broker, run, values, consumers, batch)))
        finally:
            broker.stop()
    return out


def report(
    runs: list[Run],
    messages: int,
    size: int,
    consumers: int,
    batch: int,
    as_json: bool,
    out: Callable[[str], None],
) -> None:
    def median(pick: Callable[[Run], float]) -> float:
        return statistics.median(pick(r) for r in runs)

    figure = {
        "workload": "W6 receive+ack",
        "system": "mq",
        "durability": "flush=interval, share state saved with acks=all",
        "messages": messages,
        "bytes": messages * size,
        "consumers": consumers,
        "batch": batch,
        "seconds": round(median(lambda r: r.seconds), 3),
        "msg_per_s": round(median(lambda r: messages / r.seconds)),
        "mb_per_s": round(median(lambda r: messages * size / r.seconds / 1e6), 2),
        "client_cpu_us_per_msg": round(median(lambda r: r.client_cpu_s / messages * 1e6), 2),
        "broker_cpu_us_per_msg": round(median(lambda r: r.broker_cpu_s / messages * 1e6), 2),
        "cpu_wait_pct": round(median(lambda r: r.cpu_wait_s / r.seconds * 100), 1),
        "receives": round(median(lambda r: r.receives)),
        "verified": all(r.verified for r in runs),
        "problem": next((r.problem for r in runs if r.problem), ""),
        "runs": [round(r.seconds, 3) for r in runs],
    }
    if as_json:
        out(json.dumps(figure))
        return
    out(
        f"mq W6: {consumers} consumers, batches of {batch}, {messages:,} x {size} B, "
        f"median of {len(runs)} runs"
    )
    out(
        f"receive+ack {figure['msg_per_s']:,} msg/s ({figure['seconds']} s), "
        f"broker {figure['broker_cpu_us_per_msg']} µs/msg, "
        f"consumers {figure['client_cpu_us_per_msg']} µs/msg, "
        f"cpu wait {figure['cpu_wait_pct']}%, verified: {'yes' if figure['verified'] else 'NO'}"
    )
    if figure["problem"]:
        out(f"problem: {figure['problem']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message")
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=500, help="messages per receive")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args(argv)
    runs = measure(args.messages, args.size, args.consumers, args.batch, args.runs)
    report(runs, args.messages, args.size, args.consumers, args.batch, args.json, print)
    return 0 if all(r.verified for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
