"""W1-W4 on a peer :class:`~benchmarks.peers.base.Adapter`, as mq's own benchmarks run them.

* **W1**: ``produce`` N values of 100 B (distinct, as ``benchmarks.client``
  makes them) into a new stream; the clock stops when all are confirmed.
  Verified: the adapter confirmed all N.
* **W3**: ``consume`` that stream from its start; every value is compared
  with what was sent, in order (one list comparison per batch).
* **W2**: W1 with 1,024 B values, into another stream.
* **W4**: a consumer in its own process (``multiprocessing`` spawn, like
  ``benchmarks.latency``) reads a new stream while this process sends at a
  fixed rate, each value stamped with ``time.monotonic_ns()``; due values go
  out in one ``send_now`` per 1 ms tick, without waiting for the previous
  burst's confirms; the consumer subtracts the stamp when a batch arrives.
  The warm-up's values are left out; verified: every value exactly once, in
  order, and every send confirmed.

Server CPU per message (W8) is the server process tree's user + system time
over the workload; client CPU (W9) this process's ``time.process_time``.
Figures are the medians of the runs, in the suite's columns.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import statistics
import struct
import tempfile
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import uvloop

from benchmarks.client import payloads
from benchmarks.common import percentile
from benchmarks.peers.base import Adapter, Server

STAMP = struct.Struct("<QQQ")
"""The head of every W4 value: sequence number, due time, send time (monotonic ns)."""
MIN_SLEEP_NS = 1_000_000
READY_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 60.0
CONSUME_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Plan:
    messages: int = 200_000
    size: int = 100
    big_size: int = 1024
    rate: int = 5_000
    seconds: float = 5.0
    warmup: float = 1.0
    runs: int = 3

    @property
    def latency_total(self) -> int:
        return round(self.rate * (self.warmup + self.seconds))

    @property
    def measured_from(self) -> int:
        return round(self.rate * self.warmup)


@dataclass
class Sample:
    seconds: float
    server_cpu_s: float
    client_cpu_s: float
    verified: bool
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    problem: str = ""


@dataclass
class Figure:
    workload: str
    messages: int
    size: int
    samples: list[Sample] = field(default_factory=list)

    def median(self, pick: Callable[[Sample], float]) -> float:
        return statistics.median(pick(s) for s in self.samples)

    def row(self, adapter: Adapter) -> dict[str, Any]:
        """The medians in the suite's columns (plus client CPU and the runs' seconds)."""
        n = self.messages
        p50, p99 = self.median(lambda s: s.p50_ms), self.median(lambda s: s.p99_ms)
        problems = [s.problem for s in self.samples if s.problem]
        return {
            "workload": self.workload,
            "system": adapter.system,
            "durability": adapter.durability,
            "messages": n,
            "bytes": n * self.size,
            "seconds": round(self.median(lambda s: s.seconds), 3),
            "msg_per_s": round(self.median(lambda s: n / s.seconds)),
            "mb_per_s": round(self.median(lambda s: n * self.size / s.seconds / 1e6), 2),
            "p50_ms": None if math.isnan(p50) else round(p50, 3),
            "p99_ms": None if math.isnan(p99) else round(p99, 3),
            "broker_cpu_us_per_msg": round(self.median(lambda s: s.server_cpu_s / n * 1e6), 2),
            "client_cpu_us_per_msg": round(self.median(lambda s: s.client_cpu_s / n * 1e6), 2),
            "verified": all(s.verified for s in self.samples),
            "runs": [round(s.seconds, 3) for s in self.samples],
            **({"problem": problems[0]} if problems else {}),
        }


class _Meter:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.start = (time.perf_counter(), server.cpu_seconds(), time.process_time())

    def sample(self, verified: bool, problem: str = "", **latency: float) -> Sample:
        wall, server, client = self.start
        return Sample(
            time.perf_counter() - wall,
            self.server.cpu_seconds() - server,
            time.process_time() - client,
            verified,
            problem=problem,
            **latency,
        )


async def _produced(adapter: Adapter, server: Server, stream: str, values: list[bytes]) -> Sample:
    await adapter.prepare(stream)
    meter = _Meter(server)
    confirmed = await adapter.produce(stream, values)
    ok = confirmed == len(values)
    return meter.sample(ok, "" if ok else f"{confirmed} of {len(values)} confirmed")


async def _consumed(adapter: Adapter, server: Server, stream: str, values: list[bytes]) -> Sample:
    meter = _Meter(server)
    at, ok = 0, True

    async def read() -> None:
        nonlocal at, ok
        async for batch in adapter.consume(stream, len(values)):
            if batch != values[at : at + len(batch)]:
                ok = False
            at += len(batch)
            if at >= len(values):
                break

    await asyncio.wait_for(read(), CONSUME_TIMEOUT_S)
    ok = ok and at == len(values)
    return meter.sample(ok, "" if ok else f"{at} of {len(values)} read, content or order wrong")


async def _throughput(
    adapter: Adapter, server: Server, tag: str, values: list[bytes], big: list[bytes]
) -> list[Sample]:
    await adapter.connect()
    try:
        w1 = await _produced(adapter, server, f"w1-{tag}", values)
        w3 = await _consumed(adapter, server, f"w1-{tag}", values)
        w2 = await _produced(adapter, server, f"w2-{tag}", big)
    finally:
        await adapter.close()
    return [w1, w2, w3]


# -- W4 ----------------------------------------------------------------------------------------


@dataclass
class _Latencies:
    received: int
    verified: bool
    latency_ns: bytes
    problem: str = ""


async def _consume_stamped(
    conn: Connection, adapter: Adapter, stream: str, plan: Plan
) -> _Latencies:
    total, measured_from = plan.latency_total, plan.measured_from
    latency, expected, problem = array("q"), 0, ""
    unpack, clock = STAMP.unpack_from, time.monotonic_ns
    await adapter.connect()
    try:
        conn.send("ready")

        async def read() -> None:
            nonlocal expected, problem
            async for batch in adapter.consume(stream, total):
                now = clock()
                for value in batch:
                    seq, _, sent = unpack(value)
                    if (seq != expected or len(value) != plan.size) and not problem:
                        problem = f"value {expected}: got sequence {seq}, {len(value)} bytes"
                    if seq >= measured_from:
                        latency.append(now - sent)
                    expected += 1
                if expected >= total:
                    break

        await asyncio.wait_for(read(), plan.warmup + plan.seconds + DRAIN_TIMEOUT_S)
    except TimeoutError:
        problem = problem or f"only {expected} of {total} values arrived"
    finally:
        await adapter.close()
    return _Latencies(expected, not problem and expected == total, latency.tobytes(), problem)


def _consumer_process(conn: Connection, adapter: Adapter, stream: str, plan: Plan) -> None:
    try:
        conn.send(uvloop.run(_consume_stamped(conn, adapter, stream, plan)))
    except Exception as exc:
        conn.send(_Latencies(0, False, b"", f"the consumer failed: {exc!r}"))
    finally:
        conn.close()


def _receive(conn: Connection, timeout_s: float, what: str) -> object:
    if not conn.poll(timeout_s):
        raise RuntimeError(f"the consumer process did not {what} within {timeout_s:.0f} s")
    return conn.recv()


async def _send_paced(
    conn: Connection, adapter: Adapter, stream: str, plan: Plan
) -> tuple[str, float]:
    """Send ``plan.latency_total`` stamped values at ``plan.rate``: a problem (or ""), seconds."""
    await adapter.connect()
    try:
        await adapter.prepare(stream)
        got = await asyncio.to_thread(_receive, conn, READY_TIMEOUT_S, "get ready")
        if got != "ready":
            return str(getattr(got, "problem", got)), math.nan
        filler = os.urandom(plan.size - STAMP.size)
        pack, clock, total = STAMP.pack, time.monotonic_ns, plan.latency_total
        bursts: list[asyncio.Task[None]] = []
        start, i = clock(), 0
        while i < total:
            now = clock()
            due = start + i * 1_000_000_000 // plan.rate
            if now < due:
                await asyncio.sleep(max(due - now, MIN_SLEEP_NS) / 1e9)
                now = clock()
            burst = []
            while i < total and (due := start + i * 1_000_000_000 // plan.rate) <= now:
                burst.append(pack(i, due, clock()) + filler)
                i += 1
            bursts.append(asyncio.create_task(adapter.send_now(stream, burst)))
        seconds = (clock() - start) / 1e9
        failed = [r for r in await asyncio.gather(*bursts, return_exceptions=True) if r]
        return (f"{len(failed)} bursts failed: {failed[0]!r}" if failed else ""), seconds
    finally:
        await adapter.close()


def _latency_run(adapter: Adapter, server: Server, stream: str, plan: Plan) -> Sample:
    spawn = multiprocessing.get_context("spawn")
    ours, theirs = spawn.Pipe()
    child = spawn.Process(
        target=_consumer_process, args=(theirs, adapter, stream, plan), daemon=True
    )
    child.start()
    theirs.close()
    meter = _Meter(server)
    try:
        problem, sending_s = uvloop.run(_send_paced(ours, adapter, stream, plan))
        got = _receive(ours, plan.warmup + plan.seconds + DRAIN_TIMEOUT_S + 30, "report")
        child.join(15)
    finally:
        if child.is_alive():
            child.kill()
            child.join(15)
        ours.close()
    assert isinstance(got, _Latencies)
    ordered = sorted(array("q", got.latency_ns))
    sample = meter.sample(
        got.verified and not problem,
        problem or got.problem,
        p50_ms=percentile(ordered, 0.50) / 1e6,
        p99_ms=percentile(ordered, 0.99) / 1e6,
    )
    sample.seconds = sending_s  # msg/s is the rate achieved while sending
    return sample


# -- a whole peer ------------------------------------------------------------------------------


def measure(adapter: Adapter, plan: Plan) -> list[dict[str, Any]]:
    """W1, W2, W3 and W4 on one adapter (its own server), ``plan.runs`` times: median rows."""
    values = payloads(plan.messages, plan.size)
    big = payloads(plan.messages, plan.big_size)
    figures = [
        Figure("W1 produce", plan.messages, plan.size),
        Figure("W2 produce 1 KiB", plan.messages, plan.big_size),
        Figure("W3 consume", plan.messages, plan.size),
        Figure("W4 latency", plan.latency_total, plan.size),
    ]
    with tempfile.TemporaryDirectory(prefix="mq-peer-") as directory:
        server = adapter.start_server(Path(directory))
        try:
            for run in range(plan.runs):
                samples = uvloop.run(_throughput(adapter, server, str(run), values, big))
                samples.append(_latency_run(adapter, server, f"w4-{run}", plan))
                for figure, sample in zip(figures, samples, strict=True):
                    figure.samples.append(sample)
        finally:
            server.stop()
    return [f.row(adapter) for f in figures]


def skipped_row(system: str, reason: str) -> dict[str, Any]:
    """What the suite shows for a peer that could not run here."""
    return {"workload": "peers", "system": system, "skipped": reason, "verified": None}
