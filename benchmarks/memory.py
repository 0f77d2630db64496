"""Memory benchmark: an idle broker with many partitions, and a broker under a W1+W3 loop.

From issue 7: the broker's *anonymous* memory (heap, Python objects, buffers:
``Anonymous:`` of ``/proc/PID/smaps_rollup``), which leaves out the page cache
of the memory-mapped segments (file-backed, the kernel's to reclaim).

* ``idle``: a broker, ``--partitions`` partitions (default 1,000: 10 topics of
  100), then ``--settle`` seconds of nothing; the figure is its anonymous
  memory then (target: < 500 MB), next to the same broker before the topics.
* ``loop``: W1 then W3 (``--messages`` of 100 B, produce then consume all)
  again and again for ``--minutes``; anonymous memory sampled after each
  round. Flat means the last rounds hold no more than the first ones after
  warm-up, beyond noise: the figure is the growth from the median of the
  first third of the rounds to the median of the last third.

Usage::

    python -m benchmarks.memory idle [--partitions N] [--settle S] [--json]
    python -m benchmarks.memory loop [--minutes M] [--messages N] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from benchmarks.client import payloads
from benchmarks.common import Broker
from mq import Admin, Consumer, Producer, TopicPartition

TOPIC_PARTITIONS = 100


def anonymous_mb(pid: int) -> float:
    """The process's anonymous memory, MB (``/proc/PID/smaps_rollup``)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no Anonymous line in smaps_rollup")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS line")


async def create(bootstrap: str, partitions: int) -> int:
    async with Admin(bootstrap) as admin:
        made = 0
        while made < partitions:
            count = min(TOPIC_PARTITIONS, partitions - made)
            await admin.create_topic(f"idle-{made // TOPIC_PARTITIONS}", partitions=count)
            made += count
        topics = await admin.list_topics()
        counts = [len(await admin.topic_partitions(t)) for t in topics if t.startswith("idle-")]
        return sum(counts)


def idle(partitions: int, settle: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mq-bench-") as tmp:
        broker = Broker(Path(tmp))
        try:
            time.sleep(settle)
            before = anonymous_mb(broker.proc.pid)
            made = uvloop.run(create(broker.bootstrap, partitions))
            time.sleep(settle)
            after, rss = anonymous_mb(broker.proc.pid), rss_mb(broker.proc.pid)
        finally:
            broker.stop()
    return {
        "workload": "memory idle",
        "system": "mq",
        "partitions": made,
        "anonymous_mb_before": round(before, 1),
        "anonymous_mb": round(after, 1),
        "rss_mb": round(rss, 1),
        "verified": made == partitions,
    }


async def round_trip(bootstrap: str, topic: str, values: list[bytes]) -> bool:
    async with Producer(bootstrap, acks=1) as producer:
        futures = [await producer.send(topic, v) for v in values]
        await producer.flush()
        offsets = [f.result().offset for f in futures]
    tp = TopicPartition(topic, 0)
    got = 0
    async with Consumer(bootstrap=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, offsets[0])
        deadline = time.monotonic() + 120
        while got < len(values) and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500, max_records=50_000)).values():
                got += len(records)
    return got == len(values) and offsets == list(range(offsets[0], offsets[0] + len(values)))


def loop(minutes: float, messages: int) -> dict[str, Any]:
    values = payloads(messages, 100)
    samples: list[float] = []
    verified = True
    with tempfile.TemporaryDirectory(prefix="mq-bench-") as tmp:
        broker = Broker(Path(tmp))
        try:
            uvloop.run(_create_one(broker.bootstrap))
            end = time.monotonic() + minutes * 60
            while time.monotonic() < end:
                verified &= uvloop.run(round_trip(broker.bootstrap, "loop", values))
                samples.append(anonymous_mb(broker.proc.pid))
        finally:
            broker.stop()
    third = max(1, len(samples) // 3)
    first, last = statistics.median(samples[:third]), statistics.median(samples[-third:])
    return {
        "workload": "memory loop",
        "system": "mq",
        "minutes": minutes,
        "rounds": len(samples),
        "messages_per_round": messages,
        "anonymous_mb_first_third": round(first, 1),
        "anonymous_mb_last_third": round(last, 1),
        "anonymous_mb_max": round(max(samples), 1),
        "growth_pct": round((last - first) / first * 100, 1),
        "samples_mb": [round(s, 1) for s in samples],
        "verified": verified,
    }


async def _create_one(bootstrap: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic("loop", partitions=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("idle")
    one.add_argument("--partitions", type=int, default=1_000)
    one.add_argument("--settle", type=float, default=5.0, help="seconds idle before measuring")
    one.add_argument("--json", action="store_true")
    two = sub.add_parser("loop")
    two.add_argument("--minutes", type=float, default=10.0)
    two.add_argument("--messages", type=int, default=200_000, help="per round")
    two.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.what == "idle":
        result = idle(args.partitions, args.settle)
        text = (
            f"idle broker, {result['partitions']:,} partitions: {result['anonymous_mb']} MB "
            f"anonymous ({result['anonymous_mb_before']} MB with none), RSS {result['rss_mb']} MB"
        )
    else:
        result = loop(args.minutes, args.messages)
        text = (
            f"W1+W3 loop, {result['rounds']} rounds of {args.messages:,} in {args.minutes:g} min: "
            f"anonymous {result['anonymous_mb_first_third']} MB (first third, median) -> "
            f"{result['anonymous_mb_last_third']} MB (last third), max "
            f"{result['anonymous_mb_max']} MB, growth {result['growth_pct']}%"
        )
    print(json.dumps(result) if args.json else text)
    return 0 if result["verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
