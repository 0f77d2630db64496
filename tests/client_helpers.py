"""Helpers of the client integration tests: read partitions back, an admin client."""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import AsyncIterator

import mq
from mq import Admin, Consumer, TopicPartition


async def consume(
    bootstrap: str, tps: list[TopicPartition], expected: int, timeout_s: float = 15
) -> dict[TopicPartition, list[mq.ConsumerRecord]]:
    """Read ``tps`` from the beginning until ``expected`` records came (or time runs out)."""
    out: dict[TopicPartition, list[mq.ConsumerRecord]] = defaultdict(list)
    async with Consumer(bootstrap=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        deadline = time.monotonic() + timeout_s
        total = 0
        while total < expected and time.monotonic() < deadline:
            got = await consumer.getmany(timeout_ms=200, max_records=5_000)
            for tp, records in got.items():
                out[tp].extend(records)
                total += len(records)
    return out


@contextlib.asynccontextmanager
async def admin(bootstrap: str) -> AsyncIterator[Admin]:
    async with Admin(bootstrap=bootstrap) as client:
        yield client
