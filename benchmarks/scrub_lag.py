"""Scrub benchmark: event-loop lag while sealed segments are scrubbed in a worker thread.

The broker's scrubber (:mod:`mq.broker.scrubber`) runs
:func:`mq.storage.scrub.scrub_segment` through ``asyncio.to_thread``, paced by
sleeping in that thread. This measures what the event loop feels meanwhile: a
task sleeping 1 ms in a loop records how late each wake-up is, idle first,
then while a log of ``--mib`` MiB (records of 1 KiB, ``--records`` per batch:
small batches are the worst case, the most Python work per byte) is scrubbed
unpaced and at ``--rates`` MiB/s. Usage::

    python -m benchmarks.scrub_lag [--data-dir DIR] [--mib N] [--records N] [--rates 16,64]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import uvloop

from mq.records.records import build_batch
from mq.storage.config import LogConfig
from mq.storage.log import Log
from mq.storage.scrub import scrub_segment

MiB = 1 << 20
TICK_S = 0.001
IDLE_TICKS = 2_000


def _build(directory: Path, mib: int, records: int) -> Log:
    log = Log.open(directory, LogConfig(segment_bytes=32 * MiB))
    batch = bytes(build_batch([(None, b"x" * 1000, [], 5) for _ in range(records)]))
    while log.size_bytes < mib * MiB:
        log.append(batch)
    log.flush()
    return log


def _summary(lags: list[float]) -> str:
    lags = sorted(lags)
    p99 = lags[int(len(lags) * 0.99)]
    return (
        f"loop lag over {len(lags)} ticks: median {statistics.median(lags) * 1000:.2f} ms, "
        f"p99 {p99 * 1000:.2f} ms, max {lags[-1] * 1000:.2f} ms"
    )


async def _idle() -> str:
    lags = []
    for _ in range(IDLE_TICKS):
        t = time.perf_counter()
        await asyncio.sleep(TICK_S)
        lags.append(time.perf_counter() - t - TICK_S)
    return "idle: " + _summary(lags)


async def _scrub(log: Log, rate_mib: int) -> str:
    lags: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        while not done.is_set():
            t = time.perf_counter()
            await asyncio.sleep(TICK_S)
            lags.append(time.perf_counter() - t - TICK_S)

    ticker = asyncio.ensure_future(tick())
    pace: Callable[[int], None] | None = None
    if rate_mib:
        pace = lambda n: time.sleep(n / (rate_mib * MiB))  # noqa: E731
    segments = log.segments
    started, checked = time.perf_counter(), 0
    for n, segment in enumerate(segments[:-1]):
        found = await asyncio.to_thread(
            scrub_segment,
            segment.path,
            segment.base_offset,
            next_base=segments[n + 1].base_offset,
            pace=pace,
        )
        assert found is None, found
        checked += segment.size
    took = time.perf_counter() - started
    done.set()
    await ticker
    rate = f"{rate_mib} MiB/s" if rate_mib else "unpaced"
    return f"{rate}: {checked / MiB:.0f} MiB in {took:.2f} s; " + _summary(lags)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--mib", type=int, default=96)
    parser.add_argument("--records", type=int, default=1, help="1 KiB records per batch")
    parser.add_argument("--rates", default="64,16", help="MiB/s, comma-separated")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(dir=args.data_dir))
    try:
        log = _build(base / "t-0", args.mib, args.records)
        try:
            print(uvloop.run(_idle()))
            for rate in [0, *(int(r) for r in args.rates.split(","))]:
                print(uvloop.run(_scrub(log, rate)))
        finally:
            log.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
