"""Noisy-neighbour benchmark: a quiet tenant's latency next to a greedy one (issue 20).

Two tenants, told apart by client id (every client is ``User:ANONYMOUS``
until authentication is on; quotas and fair dispatch key on (principal,
client id)):

* **A** (``tenant-a``, a child process): a producer sending 1 KiB records
  as fast as it can (``send_many``, 256 KiB batches, acks=1) to its own
  topic and a consumer fetching that topic from the start, both flat out
  (``--a-pairs`` N such pairs: N times the connections, one tenant);
* **B** (``mq-bench-latency``): W4 (:func:`benchmarks.latency.one_run`:
  ``--rate`` msg/s of 100 B for ``--seconds`` s after 1 s of warm-up,
  acks=all, every message checked exactly once and in order).

Phases, each on a fresh broker process: B alone; B with A unthrottled; B
with A under a quota (``--produce-quota`` / ``--fetch-quota`` bytes/s for
client id ``tenant-a``); B alone again. B's p99 is reported as a ratio to the
median of the solo p99s (goals: <= 2x with A unthrottled, <= 1.3x with A
under its quota), and A's produce and fetch rates, measured over B's
measured window (after A's ``--ramp``), against its quota (goal: within
±10 %).

``--overhead`` instead measures what quotas cost when configured but not
reached: W1 (``send()`` and ``send_many``) and W3 of :mod:`benchmarks.client`
on two brokers side by side, one with no quota and one with every quota set
for the default client id far above the load, runs alternated; the medians of
the paired ratios of msg/s and of broker CPU per message (:mod:`benchmarks.ab`;
goal: <= 3 %). ``--overhead --interleaved CHUNKS``: W1 ``send()`` only, in that
many chunks of 5,000 records sent to each broker in turn, with a second broker
without quotas as the control (:func:`benchmarks.ab.interleaved`); ``--consume``: W3
in chunks of 250,000 records instead.

Usage::

    python -m benchmarks.noisy_neighbour [--rate 1000] [--seconds 10] [--ramp 3]
        [--produce-quota BYTES] [--fetch-quota BYTES] [--json]
    python -m benchmarks.noisy_neighbour --overhead [--messages 200000] [--runs 8]
    python -m benchmarks.noisy_neighbour --overhead --interleaved 600 [--consume]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event as ProcessEvent
from pathlib import Path

import uvloop

from benchmarks import ab
from benchmarks.common import Broker
from benchmarks.latency import Run, Settings, one_run
from mq import Admin, Consumer, Producer, QuotaEntity, TopicPartition

TENANT_A = "tenant-a"
FLOOR = "B + A elsewhere"
"""The phase where A floods a second broker process on the same machine: what B
suffers from sharing the cores alone, which no broker's bulkhead can take away."""
QUIET_TOPIC = "quiet"
NOISY_TOPIC = "noisy"
VALUE_BYTES = 1024
SEND_MANY = 1_000
A_STOP_S = 15.0
"""How long tenant A's process gets to stop before it is killed."""
HUGE_QUOTA = 1 << 40
"""A byte-rate quota no benchmark reaches (1 TiB/s), for --overhead."""
OVERHEAD_REQUEST_PERCENTAGE = 100
"""The request-time quota of --overhead: all of the event loop, so never reached, and
still enforced (every request's handler timed and its loop time charged)."""


@dataclass
class Phase:
    name: str
    quota: bool = False
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    a_produce_bps: float = float("nan")
    a_fetch_bps: float = float("nan")
    verified: bool = False
    problem: str = ""


# -- tenant A ----------------------------------------------------------------------------


async def _tenant_a(
    bootstrap: str, produced: Synchronized[int], fetched: Synchronized[int], stop: ProcessEvent
) -> None:
    values = [bytes(VALUE_BYTES)] * SEND_MANY

    async def produce() -> None:
        async with Producer(
            bootstrap, client_id=TENANT_A, acks=1, batch_size=256 * 1024, linger_ms=5
        ) as producer:
            while not stop.is_set():
                sent = await producer.send_many(NOISY_TOPIC, values, partition=0)
                await sent
                with produced.get_lock():
                    produced.value += VALUE_BYTES * SEND_MANY

    async def fetch() -> None:
        tp = TopicPartition(NOISY_TOPIC, 0)
        async with Consumer(
            bootstrap=bootstrap, client_id=TENANT_A, auto_offset_reset="earliest"
        ) as consumer:
            consumer.assign([tp])
            while not stop.is_set():
                got = await consumer.getmany_raw(timeout_ms=200)
                size = sum(len(chunk.data) for chunk in got.values())
                with fetched.get_lock():
                    fetched.value += size

    await asyncio.gather(produce(), fetch())


async def _tenant_a_pairs(
    bootstrap: str,
    produced: Synchronized[int],
    fetched: Synchronized[int],
    stop: ProcessEvent,
    pairs: int,
) -> None:
    await asyncio.gather(*(_tenant_a(bootstrap, produced, fetched, stop) for _ in range(pairs)))


def tenant_a_process(
    bootstrap: str,
    produced: Synchronized[int],
    fetched: Synchronized[int],
    stop: ProcessEvent,
    pairs: int = 1,
) -> None:
    uvloop.run(_tenant_a_pairs(bootstrap, produced, fetched, stop, pairs))


# -- phases ----------------------------------------------------------------------------------


async def _prepare(bootstrap: str, quota: tuple[int, int] | None) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(QUIET_TOPIC, partitions=1)
        await admin.create_topic(NOISY_TOPIC, partitions=1)
        if quota is not None:
            await admin.alter_client_quotas(
                QuotaEntity(client_id=TENANT_A),
                {"producer_byte_rate": quota[0], "consumer_byte_rate": quota[1]},
            )


def run_phase(
    name: str,
    settings: Settings,
    noisy: bool,
    quota: tuple[int, int] | None,
    ramp_s: float,
    pairs: int = 1,
    elsewhere: bool = False,
) -> Phase:
    """One phase on a fresh broker; ``elsewhere``: A on a second broker process of its
    own (the machine's share of B's latency: cores, memory bandwidth, the scheduler)."""
    phase = Phase(name, quota is not None)
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="mq-noisy-") as data_dir:
        broker = Broker(Path(data_dir) / "b")
        a_broker = Broker(Path(data_dir) / "a") if elsewhere else broker
        stop = spawn.Event()
        produced = spawn.Value("q", 0)
        fetched = spawn.Value("q", 0)
        child = None
        try:
            uvloop.run(_prepare(broker.bootstrap, quota))
            if elsewhere:
                uvloop.run(_prepare(a_broker.bootstrap, quota))
            if noisy:
                child = spawn.Process(
                    target=tenant_a_process,
                    args=(a_broker.bootstrap, produced, fetched, stop, pairs),
                    name="mq-tenant-a",
                    daemon=True,
                )
                child.start()
                time.sleep(ramp_s)
            start = (time.monotonic(), produced.value, fetched.value)
            try:
                run: Run = one_run(broker, QUIET_TOPIC, settings, create=False)
                phase.p50_ms, phase.p99_ms = run.p50_ms, run.p99_ms
                phase.verified, phase.problem = run.verified, run.problem
            except Exception as exc:  # the quiet client could not finish: that is the result
                phase.problem = f"the quiet client failed: {exc!r}"
            elapsed = time.monotonic() - start[0]
            if noisy:
                phase.a_produce_bps = (produced.value - start[1]) / elapsed
                phase.a_fetch_bps = (fetched.value - start[2]) / elapsed
        finally:
            stop.set()
            if child is not None:
                child.join(A_STOP_S)
                if child.is_alive():
                    child.kill()
                    child.join(5)
            broker.stop()
            if elsewhere:
                a_broker.stop()
    return phase


def report(phases: list[Phase], quota: tuple[int, int], as_json: bool) -> None:
    solo = [p.p99_ms for p in phases if p.name == "B alone" and p.verified]
    solo_p99 = statistics.median(solo) if solo else float("nan")
    if as_json:
        print(json.dumps({"solo_p99_ms": solo_p99, "phases": [asdict(p) for p in phases]}))
        return
    print(
        "| phase | B p50 ms | B p99 ms | B p99 / solo | A produce MB/s (vs quota) "
        "| A fetch MB/s (vs quota) | verified |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    for p in phases:
        ratio = p.p99_ms / solo_p99 if solo_p99 > 0 else float("nan")

        def rate(bps: float, limit: int, quota_on: bool) -> str:
            if bps != bps:
                return "-"
            text = f"{bps / 1e6:.2f}"
            return f"{text} ({bps / limit - 1:+.0%})" if quota_on else text

        print(
            f"| {p.name} | {p.p50_ms:.2f} | {p.p99_ms:.2f} | {ratio:.2f} | "
            f"{rate(p.a_produce_bps, quota[0], p.quota)} | "
            f"{rate(p.a_fetch_bps, quota[1], p.quota)} | {'yes' if p.verified else 'NO'} |"
        )
    for p in phases:
        if p.problem:
            print(f"{p.name}: {p.problem}")


# -- --overhead: W1/W3 with quotas configured but not reached ----------------------------------


async def _huge_quotas(bootstrap: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.alter_client_quotas(
            QuotaEntity(default_client_id=True),
            {
                "producer_byte_rate": HUGE_QUOTA,
                "consumer_byte_rate": HUGE_QUOTA,
                "request_percentage": OVERHEAD_REQUEST_PERCENTAGE,
            },
        )


def overhead(
    messages: int, size: int, runs: int, as_json: bool, chunks: int = 0, consume: bool = False
) -> bool:
    """W1/W3 on a broker with no quota and one with quotas not reached, alternated
    (:mod:`benchmarks.ab`), or with ``chunks`` W1 interleaved in that many chunks with
    a second broker without quotas as the control (``consume``: W3 in chunks); whether
    every record checked out."""
    with tempfile.TemporaryDirectory(prefix="mq-noisy-") as data_dir:
        names = ["plain", "quoted", "control"] if chunks else ["plain", "quoted"]
        brokers: list[Broker] = []
        try:
            for name in names:
                brokers.append(Broker(Path(data_dir) / name))
            uvloop.run(_huge_quotas(brokers[1].bootstrap))
            if chunks:
                result = ab.interleaved(
                    brokers[0], brokers[2], brokers[1], chunks, size, consume=consume
                )
                return ab.report_interleaved(result, ("none", "quotas"), as_json, print)
            comparisons = ab.compare(brokers[0], brokers[1], messages, size, runs)
        finally:
            for broker in brokers:
                broker.stop()
    return ab.report(comparisons, ("none", "quotas"), as_json, print)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=1_000, help="B's msg/s")
    parser.add_argument("--seconds", type=float, default=10.0, help="B's measured duration")
    parser.add_argument("--ramp", type=float, default=3.0, help="seconds A runs first")
    parser.add_argument("--produce-quota", type=int, default=4 * 1024 * 1024)
    parser.add_argument("--fetch-quota", type=int, default=4 * 1024 * 1024)
    parser.add_argument(
        "--a-pairs", type=int, default=1, help="A's producer+consumer pairs (connections)"
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also B with A unthrottled on a broker of its own (the machine's share)",
    )
    parser.add_argument("--overhead", action="store_true", help="W1/W3, quotas vs none")
    ab.add_arguments(parser, "--overhead: ")
    args = parser.parse_args(argv)
    if args.overhead:
        ok = overhead(
            args.messages, args.size, args.runs, args.json, args.interleaved, args.consume
        )
        return 0 if ok else 1
    settings = Settings(
        rate=args.rate,
        seconds=args.seconds,
        warmup=1.0,
        size=100,
        acks="all",
        linger_ms=0.0,
        fetch_max_wait_ms=500,
    )
    quota = (args.produce_quota, args.fetch_quota)
    phases = [
        run_phase("B alone", settings, False, None, 0),
        run_phase("B + A unthrottled", settings, True, None, args.ramp, args.a_pairs),
        run_phase("B + A under quota", settings, True, quota, args.ramp, args.a_pairs),
        run_phase("B alone", settings, False, None, 0),
    ]
    if args.floor:
        floor = run_phase(FLOOR, settings, True, None, args.ramp, args.a_pairs, elsewhere=True)
        phases.insert(2, floor)
    report(phases, quota, args.json)
    return 0 if all(p.verified for p in phases) else 1


if __name__ == "__main__":
    sys.exit(main())
