"""``SyncProducer.send_many`` throughput next to the async ``Producer.send_many``.

One broker (:class:`benchmarks.common.Broker`, default flush), one topic of
one partition; each run sends ``--records`` keyless records of ``--size``
bytes in calls of ``--chunk`` records, acks=1, and reports records/s from the
first call to the last acknowledgement. The two clients alternate, ``--runs``
times each, each run into a fresh topic, so a busy moment of the shared
machine hits both.

Usage::

    python -m benchmarks.sync_send_many [--records N] [--size B] [--chunk N] [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import Broker
from mq import Producer, SyncAdmin, SyncProducer


def sync_run(bootstrap: str, topic: str, values: list[bytes], chunk: int) -> float:
    with SyncProducer(bootstrap, acks=1) as producer:
        started = time.perf_counter()
        for at in range(0, len(values), chunk):
            producer.send_many([{"topic": topic, "value": v} for v in values[at : at + chunk]])
        return len(values) / (time.perf_counter() - started)


async def async_run(bootstrap: str, topic: str, values: list[bytes], chunk: int) -> float:
    async with Producer(bootstrap, acks=1) as producer:
        started = time.perf_counter()
        for at in range(0, len(values), chunk):
            await (await producer.send_many(topic, values[at : at + chunk]))
        return len(values) / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    values = [b"x" * args.size] * args.records
    rates: dict[str, list[float]] = {"SyncProducer.send_many": [], "Producer.send_many": []}
    with tempfile.TemporaryDirectory() as data:
        broker = Broker(Path(data))
        try:
            with SyncAdmin(broker.bootstrap) as admin:
                for run in range(args.runs):
                    for name in rates:
                        topic = f"bench-{run}-{len(rates[name])}-{name.split('.')[0]}"
                        admin.create_topic(topic, 1)
                        if name.startswith("Sync"):
                            rate = sync_run(broker.bootstrap, topic, values, args.chunk)
                        else:
                            rate = asyncio.run(
                                async_run(broker.bootstrap, topic, values, args.chunk)
                            )
                        rates[name].append(rate)
                        print(f"run {run + 1} {name}: {rate:,.0f} records/s", flush=True)
        finally:
            broker.stop()
    for name, values_ in rates.items():
        print(
            f"{name}: median {statistics.median(values_):,.0f} records/s over {len(values_)} runs"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
